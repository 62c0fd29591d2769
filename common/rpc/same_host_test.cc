#include "common/rpc/same_host.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

TEST(SameHostTest, TellsLoopbackHosts) {
  for (const char* host : {"127.0.0.1", "127.9.8.7", "::1", "[::1]", "::ffff:127.0.0.1",
                           "localhost", "LocalHost"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"10.0.0.1", "128.0.0.1", "0.0.0.0", "::", "::ffff:10.1.2.3",
                           "[fe80::1]", "psync-server-0.psync-server", "127.0.0.1.example", ""}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
  EXPECT_TRUE(IsLoopbackAddress("[::1]:7070"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1:7070"));
}

// A host's own addresses and loopback are on it; others, and names, are
// not. Addresses compare by value, whatever their spelling.
TEST(SameHostTest, HoldsLoopbackAndItsOwnAddresses) {
  const HostAddresses host({"10.1.2.1", "fd00:0:0::7", "fe80::1", "not an address"});
  for (const char* on : {"127.0.0.1", "::1", "[::1]", "localhost", "10.1.2.1",
                         "::ffff:10.1.2.1", "fd00::7", "[fd00::7]", "FD00::0007",
                         "fe80::1%eth0"}) {
    EXPECT_TRUE(host.Holds(on)) << on;
  }
  for (const char* off : {"10.1.2.2", "10.1.2.10", "fd00::8", "0.0.0.0", "::", "",
                          "not an address", "psync-server-0.psync-server", "10.1.2.1.example"}) {
    EXPECT_FALSE(host.Holds(off)) << off;
  }
  EXPECT_EQ(host.ToString(), "10.1.2.1, fd00::7, fe80::1");
  EXPECT_EQ(HostAddresses({}).ToString(), "no address");
}

// This process's host has loopback and nothing that is not an address.
TEST(SameHostTest, ReadsThisProcessesAddresses) {
  absl::StatusOr<HostAddresses> host = HostAddresses::OfThisProcess();
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_THAT(host->ToString(), HasSubstr("127.0.0.1"));
  EXPECT_TRUE(host->Holds("127.0.0.1"));
  EXPECT_FALSE(host->Holds("192.0.2.1"));  // TEST-NET-1: no machine's
}

TEST(SameHostTest, ReadsGrpcPeers) {
  for (const auto& [peer, host] : std::vector<std::pair<std::string, std::string>>{
           {"ipv4:10.0.0.1:5000", "10.0.0.1"},
           {"ipv4:127.0.0.1:1", "127.0.0.1"},
           {"ipv6:[::1]:5000", "::1"},
           {"ipv6:%5B::1%5D:5000", "::1"},
           {"ipv6:%5b::ffff:10.0.0.1%5d:5000", "10.0.0.1"},
           {"ipv6:%5Bfe80::1%25eth0%5D:5000", "fe80::1"},
           {"ipv6:[FD00::0007]:80", "fd00::7"}}) {
    absl::StatusOr<std::string> got = PeerHost(peer);
    ASSERT_TRUE(got.ok()) << peer << ": " << got.status();
    EXPECT_EQ(*got, host) << peer;
  }
}

TEST(SameHostTest, RefusesPeersThatAreNotIpConnections) {
  for (const auto& [peer, why] : std::vector<std::pair<std::string, std::string>>{
           {"unix:/tmp/psync.sock", "is not an IP connection"},
           {"unix-abstract:psync", "is not an IP connection"},
           {"", "is not an IP connection"},
           {"10.0.0.1:5000", "is not an IP connection"},
           {"ipv4:10.0.0.1", "has no port"},
           {"ipv4:10.0.0.1:", "has no port"},
           {"ipv4:10.0.0.1:50x", "has no port"},
           {"ipv4:", "has no port"},
           {"ipv4:10.0.0:5000", "has no IPv4 address"},
           {"ipv4:[::1]:5000", "has no IPv4 address"},
           {"ipv4:localhost:5000", "has no IPv4 address"},
           {"ipv6:::1:5000", "has no brackets"},
           {"ipv6:[10.0.0.1]:5000", "has no IPv6 address"},
           {"ipv6:[]:5000", "has no IPv6 address"}}) {
    absl::StatusOr<std::string> got = PeerHost(peer);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << peer;
    EXPECT_THAT(got.status().message(), HasSubstr(why)) << peer;
    EXPECT_THAT(got.status().message(), HasSubstr("'" + peer + "'")) << peer;
  }
}

TEST(SameHostTest, APeerIsOnTheHostFromLoopbackOrItsOwnAddress) {
  const HostAddresses host({"10.1.2.1"});
  for (const char* peer : {"ipv4:127.0.0.1:4000", "ipv6:[::1]:4000", "ipv6:%5B::1%5D:4000",
                           "ipv4:10.1.2.1:4000", "ipv6:[::ffff:10.1.2.1]:4000"}) {
    EXPECT_EQ(PeerOnHost(peer, host), absl::OkStatus()) << peer;
  }
  const absl::Status other = PeerOnHost("ipv4:10.1.2.2:4000", host);
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(), HasSubstr("the worker connects from 10.1.2.2, which is not "
                                         "this server's host (loopback or 10.1.2.1)"));
  const absl::Status unix_socket = PeerOnHost("unix:/run/psync.sock", host);
  EXPECT_EQ(unix_socket.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(unix_socket.message(),
              HasSubstr("cannot tell whether the worker is on this server's host"));
}

TEST(SameHostTest, PlacesServers) {
  const HostAddresses host({"10.1.2.1", "fd00::7"});
  for (const char* address : {"127.0.0.1:7070", "localhost:7070", "[::1]:7070",
                              "10.1.2.1:7070", "[fd00::7]:7070"}) {
    EXPECT_EQ(PlaceOfServer(address, host), ServerPlace::kThisHost) << address;
  }
  for (const char* address : {"10.1.2.2:7070", "[fd00::8]:7070", "192.0.2.1:1"}) {
    EXPECT_EQ(PlaceOfServer(address, host), ServerPlace::kOtherHost) << address;
  }
  for (const char* address : {"psync-server-0.psync-server:7070", "node1:7070"}) {
    EXPECT_EQ(PlaceOfServer(address, host), ServerPlace::kNamed) << address;
  }
}

}  // namespace
}  // namespace psync
