#include "server/listener_watch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

// A socket of this process listening on 127.0.0.1 (`port` 0: any free
// port); its port is returned in `port`.
int Listen(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(*port);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 16) != 0) {
    close(fd);
    return -1;
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return fd;
}

// A connection to 127.0.0.1:`port`, or -1.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(ListenerWatchTest, FindsThisProcesssListenerAndReadsItsAcceptQueue) {
  int port = 0;
  const int listener = Listen(&port);
  ASSERT_GE(listener, 0);
  EXPECT_EQ(ListeningSockets(port), std::vector<int>{listener});
  EXPECT_EQ(AcceptQueueLength({listener}, port), 0);
  const int a = Connect(port), b = Connect(port);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  EXPECT_EQ(AcceptQueueLength({listener}, port), 2);
  // Not a listener on that port: a connected socket, the wrong port, nothing.
  EXPECT_EQ(AcceptQueueLength({a}, port), -1);
  EXPECT_EQ(AcceptQueueLength({listener}, port + 1), -1);
  EXPECT_EQ(AcceptQueueLength({}, port), -1);
  EXPECT_TRUE(ListeningSockets(port + 1).empty() || port + 1 > 65535);
  close(a);
  close(b);
  close(listener);
  EXPECT_TRUE(ListeningSockets(port).empty());
  EXPECT_EQ(AcceptQueueLength({listener}, port), -1);
}

// A real socket that listens and never accepts: its queue fills, and the
// watch calls it stuck only after the bound.
TEST(ListenerWatchTest, AListenerThatNeverAcceptsIsStuckAfterTheBound) {
  int port = 0;
  const int listener = Listen(&port);
  ASSERT_GE(listener, 0);

  ListenerWatch watch({port}, absl::Seconds(2));
  const absl::Time t0 = absl::Now();
  EXPECT_TRUE(watch.Check(t0).empty());
  const int client = Connect(port);
  ASSERT_GE(client, 0);
  EXPECT_TRUE(watch.Check(t0 + absl::Seconds(1)).empty());   // busy since t0+1
  EXPECT_TRUE(watch.Check(t0 + absl::Seconds(2)).empty());
  const std::vector<std::string> stuck = watch.Check(t0 + absl::Seconds(3));
  ASSERT_EQ(stuck.size(), 1u);
  EXPECT_EQ(stuck[0], absl::StrCat(port, " (1 waiting)"));

  const int accepted = accept(listener, nullptr, nullptr);  // accepting again clears it
  ASSERT_GE(accepted, 0);
  EXPECT_TRUE(watch.Check(t0 + absl::Seconds(4)).empty());
  close(accepted);
  close(client);
  close(listener);
}

// The listener closes and another takes the port on another descriptor:
// the watch finds the new one, whose queue it then reads.
TEST(ListenerWatchTest, FollowsTheListenerToANewDescriptor) {
  int port = 0;
  const int first = Listen(&port);
  ASSERT_GE(first, 0);
  ListenerWatch watch({port}, absl::Seconds(1));
  const absl::Time t0 = absl::Now();
  EXPECT_TRUE(watch.Check(t0).empty());
  close(first);
  int same_port = port;
  int second = Listen(&same_port);
  ASSERT_GE(second, 0) << "port " << port << " could not be taken again";
  if (second == first) {
    const int moved = fcntl(second, F_DUPFD_CLOEXEC, first + 1);
    close(second);
    second = moved;
  }
  const int client = Connect(port);
  ASSERT_GE(client, 0);
  EXPECT_TRUE(watch.Check(t0 + absl::Seconds(1)).empty());
  const std::vector<std::string> stuck = watch.Check(t0 + absl::Seconds(2));
  ASSERT_EQ(stuck.size(), 1u);
  EXPECT_EQ(stuck[0], absl::StrCat(port, " (1 waiting)"));
  close(client);
  close(second);
}

}  // namespace
}  // namespace psync
