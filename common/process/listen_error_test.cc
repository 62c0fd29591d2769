#include "common/process/listen_error.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A socket listening on 127.0.0.1 at a port the kernel picks; closed at
// the end of the test.
class Listener {
 public:
  Listener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof(addr);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), size), 0);
    EXPECT_EQ(listen(fd_, 1), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &size), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~Listener() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(ListenErrorTest, APortInUseAsksWhetherAnotherServerListens) {
  Listener taken;
  const std::string address = absl::StrCat("127.0.0.1:", taken.port());
  const absl::Status s = ListenError(address, "--port");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), absl::StrCat("cannot listen on ", address,
                                      " (--port): Address already in use (is another server "
                                      "already listening there?)"));
}

TEST(ListenErrorTest, APortThatBindsNowSaysTryAgain) {
  int port = 0;
  {
    Listener freed;
    port = freed.port();
  }
  const absl::Status s = ListenError(absl::StrCat("127.0.0.1:", port), "");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), absl::StrCat("cannot listen on 127.0.0.1:", port,
                                      ", although a socket of this process could just now (was "
                                      "the port freed meanwhile?): try again"));
}

// TEST-NET-1 (RFC 5737): never an address of this host.
TEST(ListenErrorTest, AnAddressOfAnotherHostIsInvalid) {
  const absl::Status s = ListenError("192.0.2.1:7070", "");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("cannot listen on 192.0.2.1:7070: Cannot assign requested address "
                        "(expected an address of this host"));
}

TEST(ListenErrorTest, AnAddressThatDoesNotParseIsInvalid) {
  for (const char* address : {"127.0.0.1", "127.0.0.1:x", "127.0.0.1:65536", "127.0.0.1:-1"}) {
    const absl::Status s = ListenError(address, "");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_EQ(s.message(), absl::StrCat("cannot listen on ", address,
                                        ": expected host:port with a port of 0..65535"));
  }
  const absl::Status s = ListenError("no-such-host.invalid:80", "");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("cannot listen on no-such-host.invalid:80: the host does not resolve ("));
}

TEST(ListenErrorTest, AnIpv6HostInBracketsOrNot) {
  Listener taken;  // IPv4 only: [::1] at the same port is another socket
  for (const std::string& address : {absl::StrCat("[::1]:", taken.port()),
                                     absl::StrCat("::1:", taken.port())}) {
    const absl::Status s = ListenError(address, "");
    // Where the host has no IPv6 loopback, the bind fails with that reason.
    EXPECT_FALSE(s.ok()) << address;
    EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat("cannot listen on ", address)));
    EXPECT_NE(s.code(), absl::StatusCode::kPermissionDenied) << s;
    // Parsed as a host and a port, whichever way it is written.
    EXPECT_THAT(std::string(s.message()), Not(HasSubstr("expected host:port"))) << s;
  }
}

}  // namespace
}  // namespace psync
