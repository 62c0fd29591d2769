#include "server/listener_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

constexpr char kTable[] =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
    "   0: 0100007F:1B9E 00000000:0000 0A 00000000:00000003 00:00000000 00000000     0\n"
    "   1: 0100007F:1B9F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n"
    "   2: 0100007F:1B9E 0100007F:D2C4 01 00000000:00000010 00:00000000 00000000     0\n";

TEST(ListenerWatchTest, ReadsTheAcceptQueueOfAListeningPort) {
  EXPECT_EQ(AcceptQueueFromProcNet(kTable, 0x1B9E), 3);  // the ESTABLISHED row is not counted
  EXPECT_EQ(AcceptQueueFromProcNet(kTable, 0x1B9F), 0);
  EXPECT_EQ(AcceptQueueFromProcNet(kTable, 80), -1);
  EXPECT_EQ(AcceptQueueFromProcNet("garbage\n 0: x 0A y\n", 80), -1);
}

// A real socket that listens and never accepts: its queue fills, and the
// watch calls it stuck only after the bound.
TEST(ListenerWatchTest, AListenerThatNeverAcceptsIsStuckAfterTheBound) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 16), 0);
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  EXPECT_EQ(AcceptQueueLength(port), 0);

  ListenerWatch watch({port}, absl::Seconds(2));
  const absl::Time t0 = absl::Now();
  EXPECT_TRUE(watch.Check(t0).empty());
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(AcceptQueueLength(port), 1);
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

}  // namespace
}  // namespace psync
