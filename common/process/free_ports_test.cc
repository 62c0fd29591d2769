#include "common/process/free_ports.h"

#include <fstream>
#include <set>

#include "gtest/gtest.h"

namespace psync {
namespace {

// Ports held are distinct and taken; released, they are free again; and
// they lie outside the range the kernel hands out to connections by
// itself, where this kernel leaves any ports from 10000 outside it.
TEST(PortReservationTest, PortsAreDistinctHeldAndOutsideTheEphemeralRange) {
  int lo = 32768, hi = 60999;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> lo >> hi;
  const bool outside_exists = lo > 10000 || hi < 65535;
  PortReservation reserved;
  std::set<int> ports;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<int> port = reserved.Add();
    ASSERT_TRUE(port.ok()) << port.status();
    EXPECT_TRUE(ports.insert(*port).second) << *port << " twice";
    EXPECT_FALSE(CanBindLoopback(*port)) << *port << " is not held";
    if (outside_exists) {
      EXPECT_TRUE(*port < lo || *port > hi)
          << *port << " is in the kernel's range " << lo << "-" << hi;
    }
  }
  reserved.Release();
  for (int port : ports) EXPECT_TRUE(CanBindLoopback(port)) << port << " is still held";
}

}  // namespace
}  // namespace psync
