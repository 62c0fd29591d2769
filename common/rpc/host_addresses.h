// For tests that need a peer that is not loopback: one of this host's own
// addresses on another interface.
#ifndef PSYNC_COMMON_RPC_HOST_ADDRESSES_H_
#define PSYNC_COMMON_RPC_HOST_ADDRESSES_H_

#include <string>

namespace psync {

// The first IPv4 address of this host that is not loopback, or "" if it
// has none (a test then skips).
std::string NonLoopbackIpv4Address();

}  // namespace psync

#endif  // PSYNC_COMMON_RPC_HOST_ADDRESSES_H_
