#include "common/rpc/tcp_congestion.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc/host_addresses.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::Each;
using ::testing::HasSubstr;
using ::testing::SizeIs;

std::string SystemDefault() {
  std::ifstream in("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string name;
  in >> name;
  return name;
}

int Port(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

// The algorithm of every connected TCP socket of this process with `port` at
// either end: a channel's and the server's end of its connection.
std::vector<std::string> CongestionOfConnections(int port) {
  std::vector<std::string> names;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return names;
  while (dirent* entry = readdir(dir)) {
    const int fd = std::atoi(entry->d_name);
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    if (fd <= 2 || getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
      continue;
    }
    if (Port(local) != port && Port(peer) != port) continue;
    char name[kTcpCongestionNameMax] = {};
    socklen_t len = sizeof(name);
    if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) == 0) names.push_back(name);
  }
  closedir(dir);
  return names;
}

// A server with `policy` listening on `host`, a channel with `policy`
// connected to it through `host`: the algorithms of both ends.
std::vector<std::string> ConnectionCongestion(const TcpCongestion& policy,
                                              const std::string& host) {
  int port = 0;
  grpc::CallbackGenericService service;  // answers nothing: only connections matter
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(&service);
  builder.AddListeningPort(absl::StrCat(host, ":0"), grpc::InsecureServerCredentials(), &port);
  builder.SetOption(TcpCongestionOption(policy));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  EXPECT_NE(server, nullptr);
  if (server == nullptr) return {};
  const std::string address = absl::StrCat(host, ":", port);
  grpc::ChannelArguments args;
  SetTcpCongestion(policy, address, args);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  EXPECT_TRUE(channel->WaitForConnected(gpr_time_add(
      gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(10, GPR_TIMESPAN))));
  std::vector<std::string> names = CongestionOfConnections(port);
  server->Shutdown();
  return names;
}

TEST(TcpCongestionTest, ParsesPolicies) {
  auto automatic = ParseTcpCongestion("auto");
  ASSERT_TRUE(automatic.ok());
  EXPECT_EQ(automatic->mode, TcpCongestion::Mode::kAuto);
  auto system = ParseTcpCongestion("system");
  ASSERT_TRUE(system.ok());
  EXPECT_EQ(system->mode, TcpCongestion::Mode::kSystem);
  auto reno = ParseTcpCongestion("reno");
  ASSERT_TRUE(reno.ok()) << reno.status();
  EXPECT_EQ(reno->mode, TcpCongestion::Mode::kNamed);
  EXPECT_EQ(reno->name, "reno");
}

TEST(TcpCongestionTest, RejectsWhatTheKernelDoesNotHave) {
  for (const char* bad : {"warp-drive", "", "a-name-longer-than-sixteen-bytes"}) {
    auto parsed = ParseTcpCongestion(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr(absl::StrCat("'", bad, "'")));
    EXPECT_THAT(parsed.status().message(),
                HasSubstr(absl::StrCat("--tcp_congestion is '", bad,
                                       "', expected auto, system or an algorithm")));
    EXPECT_THAT(parsed.status().message(), HasSubstr("available: "));
  }
}

// Whether auto gives connections between hosts CUBIC in place of BBR: where
// the system's is BBR and this process may use CUBIC.
bool AutoReplacesBbr() { return SystemDefault() == "bbr" && ParseTcpCongestion("cubic").ok(); }

TEST(TcpCongestionTest, Describes) {
  std::string others = "the system's " + SystemDefault();
  if (AutoReplacesBbr()) {
    others = "cubic in place of the system's bbr";
  } else if (SystemDefault() == "bbr") {
    others += " (cubic, auto's choice over bbr, is not allowed to this process; see "
              "net.ipv4.tcp_allowed_congestion_control)";
  }
  EXPECT_EQ(DescribeTcpCongestion(TcpCongestion{}),
            "reno with loopback peers, " + others + " with others");
  EXPECT_EQ(DescribeTcpCongestion(TcpCongestion{TcpCongestion::Mode::kSystem, ""}),
            "the system's " + SystemDefault());
  EXPECT_EQ(DescribeTcpCongestion(TcpCongestion{TcpCongestion::Mode::kNamed, "cubic"}), "cubic");
}

TEST(TcpCongestionTest, ChoosesByPeer) {
  const TcpCongestion automatic, system{TcpCongestion::Mode::kSystem, ""},
      cubic{TcpCongestion::Mode::kNamed, "cubic"};
  EXPECT_EQ(CongestionFor(automatic, true, "bbr"), "reno");
  // Between hosts the system's, but for BBR.
  EXPECT_EQ(CongestionFor(automatic, false, "cubic"), "");
  EXPECT_EQ(CongestionFor(automatic, false, "dctcp"), "");
  EXPECT_EQ(CongestionFor(automatic, false, "bbr"), "cubic");
  EXPECT_EQ(CongestionFor(system, true, "bbr"), "");
  EXPECT_EQ(CongestionFor(system, false, "bbr"), "");
  EXPECT_EQ(CongestionFor(cubic, false, "bbr"), "cubic");
  EXPECT_EQ(CongestionFor(cubic, true, "bbr"), "cubic");
}

// Both ends of a loopback connection get reno under "auto", whatever the
// system's default (BBR here); "system" leaves them alone.
TEST(TcpCongestionTest, AutoGivesLoopbackConnectionsReno) {
  const std::vector<std::string> names = ConnectionCongestion(TcpCongestion{}, "127.0.0.1");
  EXPECT_THAT(names, SizeIs(2));
  EXPECT_THAT(names, Each(std::string("reno")));
  const std::vector<std::string> v6 = ConnectionCongestion(TcpCongestion{}, "[::1]");
  EXPECT_THAT(v6, SizeIs(2));
  EXPECT_THAT(v6, Each(std::string("reno")));
  const std::vector<std::string> system =
      ConnectionCongestion(TcpCongestion{TcpCongestion::Mode::kSystem, ""}, "127.0.0.1");
  EXPECT_THAT(system, SizeIs(2));
  EXPECT_THAT(system, Each(SystemDefault()));
}

// A named algorithm goes on every connection: the kernel's default unless
// that is reno, then the other allowed one.
TEST(TcpCongestionTest, NamedAlgorithmOnEveryConnection) {
  std::string other = SystemDefault() == "reno" ? "" : SystemDefault();
  if (other.empty()) {
    std::ifstream in("/proc/sys/net/ipv4/tcp_allowed_congestion_control");
    for (std::string name; in >> name;) {
      if (name != "reno") other = name;
    }
  }
  if (other.empty()) GTEST_SKIP() << "this user may use reno only";
  auto named = ParseTcpCongestion(other);
  ASSERT_TRUE(named.ok()) << named.status();
  const std::vector<std::string> names = ConnectionCongestion(*named, "127.0.0.1");
  EXPECT_THAT(names, SizeIs(2));
  EXPECT_THAT(names, Each(other));
}

// A connection to one of this host's own non-loopback addresses is not a
// loopback peer by address: auto keeps the system's default there, or
// gives it CUBIC where that is BBR and this process may.
TEST(TcpCongestionTest, AutoKeepsTheSystemsBetweenHostsButBbr) {
  const std::string address = NonLoopbackIpv4Address();
  if (address.empty()) GTEST_SKIP() << "no IPv4 address besides loopback";
  const std::vector<std::string> names = ConnectionCongestion(TcpCongestion{}, address);
  EXPECT_THAT(names, SizeIs(2));
  EXPECT_THAT(names, Each(AutoReplacesBbr() ? std::string("cubic") : SystemDefault()));
}

}  // namespace
}  // namespace psync
