// Memory that a worker and a server on one host share, so that a push's
// gradients and a pull's weights cross between them without the kernel's
// socket copies (see proto::SharedMemoryOffer).
//
// The worker creates the region: an anonymous memfd, sealed against
// shrinking and growing (so that the server can never fault on a page past
// its end), with a header holding a magic word and a random nonce. It offers
// the region to a server over an authenticated call by process id,
// descriptor number and nonce; the server takes that descriptor from the
// worker with pidfd_getfd (which works only on the same host, in the same
// pid namespace, for a process allowed to ptrace the worker), never opening
// a path, checks that it is a sealed ordinary memory file (not hugetlbfs)
// open for writing, its size and nonce, and maps it. The nonce is what a
// server trusts: only the worker and the servers it told over the channel
// know it. Once the server has mapped it the worker closes its descriptor,
// after which no other process can take the region.
#ifndef PSYNC_COMMON_WIRE_SHARED_REGION_H_
#define PSYNC_COMMON_WIRE_SHARED_REGION_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace psync {

class SharedRegion {
 public:
  // What a worker tells a server (proto::SharedMemoryOffer).
  struct Offer {
    int64_t pid = 0;
    int32_t fd = -1;
    uint64_t nonce = 0;
    int64_t bytes = 0;  // usable bytes, after the header
  };

  // A new region of `bytes` usable bytes (page-aligned, zero), with its
  // descriptor open until CloseDescriptor().
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Create(int64_t bytes);
  // Maps the region `offer` describes. Every refusal of a well-formed offer
  // is the same FailedPrecondition, which says nothing of the process or
  // descriptor named (whether they exist, what the descriptor is), so that
  // offers cannot probe other processes.
  static absl::StatusOr<std::unique_ptr<SharedRegion>> Open(const Offer& offer);

  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  // The creator's offer (the descriptor must still be open).
  Offer offer() const;
  // Once every peer has mapped the region: no other process can take it
  // from then on. The mapping stays.
  void CloseDescriptor();

  char* data() const { return data_; }
  int64_t size() const { return bytes_; }

 private:
  SharedRegion(int fd, char* base, int64_t bytes, uint64_t nonce);

  int fd_;
  char* base_;  // the mapping, header first
  char* data_;
  int64_t bytes_;
  uint64_t nonce_;
};

}  // namespace psync

#endif  // PSYNC_COMMON_WIRE_SHARED_REGION_H_
