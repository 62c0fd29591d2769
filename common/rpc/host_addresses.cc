#include "common/rpc/host_addresses.h"

#include "common/rpc/same_host.h"

namespace psync {

std::string NonLoopbackIpv4Address() {
  const absl::StatusOr<HostAddresses> host = HostAddresses::OfThisProcess();
  if (!host.ok()) return "";
  for (const std::string& address : host->addresses()) {
    if (address.find(':') == std::string::npos && !IsLoopbackHost(address)) return address;
  }
  return "";
}

}  // namespace psync
