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

// A server's large buffers are gRPC's received messages, allocated on one
// of gRPC's threads and freed on another. With an arena per thread each
// arena keeps its own high-water mark of them (measured, 64 MiB model and
// 4 workers: 490 MiB peak RSS with glibc's default arenas, 339 MiB with
// one). Its threads allocate little else, so one arena costs no measurable
// contention. Call once from the server's main().
inline void OneHeapArena() { mallopt(M_ARENA_MAX, 1); }

}  // namespace psync

#endif  // PSYNC_COMMON_MALLOC_TUNING_H_
