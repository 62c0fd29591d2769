// Process-wide allocator settings for the daemons.
#ifndef PSYNC_COMMON_MALLOC_TUNING_H_
#define PSYNC_COMMON_MALLOC_TUNING_H_

#include <malloc.h>

namespace psync {

// gRPC allocates and frees message-sized buffers every step. glibc would
// hand such buffers to mmap and back to the kernel each time, and every
// page would fault in again (measured: page faults were a top entry in the
// server's profile). Keep them in the heap instead. Call once from main().
inline void KeepLargeAllocationsInHeap() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest allowed value
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

}  // namespace psync

#endif  // PSYNC_COMMON_MALLOC_TUNING_H_
