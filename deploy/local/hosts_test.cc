#include "deploy/local/hosts.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(HostsTest, NamesWithAndWithoutAddresses) {
  const auto hosts = ParseHosts("node1,me@node2=10.0.0.2,psync-h2=gpu-2.example.org,me@node4");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  ASSERT_EQ(hosts->size(), 4u);
  EXPECT_EQ((*hosts)[3].name, "me@node4");
  EXPECT_EQ((*hosts)[3].address, "node4") << "the machine, without the user";
  EXPECT_EQ((*hosts)[0].name, "node1");
  EXPECT_EQ((*hosts)[0].address, "node1");
  EXPECT_EQ((*hosts)[1].name, "me@node2");
  EXPECT_EQ((*hosts)[1].address, "10.0.0.2");
  EXPECT_EQ((*hosts)[2].address, "gpu-2.example.org");
}

TEST(HostsTest, BadEntriesAreRefusedNamingThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "--hosts is '', expected NAME[=ADDRESS]"},
      {"a,,b", "--hosts entry '': expected NAME[=ADDRESS]"},
      {"a;rm -rf", "--hosts entry 'a;rm -rf'"},
      {"a=", "--hosts entry 'a='"},
      {"a=1=2", "--hosts entry 'a=1=2'"},
      {"a=10.0.0.1:7070", "ADDRESS '10.0.0.1:7070' is not a host name or IPv4 address"},
      {"a,b,a=10.0.0.3", "--hosts lists 'a' twice"},
      {"-oProxyCommand=x", "not starting with -"},  // would be an option of ssh
      {"a=-x", "ADDRESS '-x' is not a host name or IPv4 address"},
  };
  for (const auto& [value, message] : cases) {
    const auto hosts = ParseHosts(value);
    EXPECT_TRUE(absl::IsInvalidArgument(hosts.status())) << value;
    EXPECT_THAT(hosts.status().message(), HasSubstr(message)) << value;
  }
}

TEST(HostsTest, PlacementDefaultsToRoundRobin) {
  EXPECT_THAT(*ParsePlacement("--worker_hosts", "", 3, 5, "--num_workers"),
              ElementsAre(0, 1, 2, 0, 1));
  EXPECT_THAT(*ParsePlacement("--server_hosts", "1,1,0", 2, 3, "--num_servers"),
              ElementsAre(1, 1, 0));
}

TEST(HostsTest, BadPlacementsAreRefusedNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"0,3", "--server_hosts has '3', expected a host index 0..2"},
      {"0,-1", "--server_hosts has '-1'"},
      {"0,x", "--server_hosts has 'x'"},
      {"0,", "--server_hosts has ''"},
      {"0,1,2", "--server_hosts is '0,1,2' (3 hosts), expected one host per process: 2 "
                "(--num_servers)"},
  };
  for (const auto& [value, message] : cases) {
    const auto placement = ParsePlacement("--server_hosts", value, 3, 2, "--num_servers");
    EXPECT_TRUE(absl::IsInvalidArgument(placement.status())) << value;
    EXPECT_THAT(placement.status().message(), HasSubstr(message)) << value;
  }
}

TEST(HostsTest, ServersOnOneHostTakeConsecutivePorts) {
  EXPECT_THAT(ServerPorts({0, 1, 0, 2, 0}, 7070), ElementsAre(7070, 7070, 7071, 7070, 7072));
}

}  // namespace
}  // namespace psync
