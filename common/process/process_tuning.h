// Process-wide settings for the daemons (and psync_bench's processes,
// which stand in for them): the allocator's, and Abseil's Mutex checks.
#ifndef PSYNC_COMMON_PROCESS_PROCESS_TUNING_H_
#define PSYNC_COMMON_PROCESS_PROCESS_TUNING_H_

#include <malloc.h>
#include <stdlib.h>

#include "absl/synchronization/mutex.h"

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

// Debian's Abseil is built without NDEBUG, so every Mutex acquisition
// also updates a process-wide lock-order graph (GraphCycles showed in the
// profile of a 4 KiB push-pull). The daemons skip that check; unit tests
// in one process keep it and catch lock-order inversions. Measured, 4 KiB
// push-pull over the plain gRPC echo, nine interleaved pairs of runs:
// median 1.23 with the check, 1.09 without. Call once from main().
inline void SkipMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

// gRPC 1.51's default polling engine (epoll1) puts every socket of the
// process in one epoll set that all polling threads share: with more than
// one (a server's health port has a thread of its own, as has each of
// --rpc_threads), whichever thread wakes first takes an event and hands it
// to the thread whose queue it belongs to. The "poll" engine polls each
// queue's own sockets, so each thread serves its own connections. Measured,
// 4 KiB push-pull against a server with a health port, four interleaved
// pairs of psync_bench runs: 0.22-0.27 ms per step on epoll1, 0.075-0.089
// on poll (0.08-0.09 without a health port); 16 MiB and the overlap bench
// alike within the noise (the whole process on poll). poll() costs time in
// proportion to the sockets of a queue, so a server with one polling thread
// keeps epoll1. An explicit GRPC_POLL_STRATEGY wins. Call before the
// process's first gRPC object; returns the engine gRPC will use.
inline const char* PollEachQueueOwnSockets(int polling_threads) {
  if (polling_threads > 1) setenv("GRPC_POLL_STRATEGY", "poll", /*overwrite=*/0);
  const char* engine = getenv("GRPC_POLL_STRATEGY");
  return engine != nullptr ? engine : "gRPC's default (epoll1)";
}

}  // namespace psync

#endif  // PSYNC_COMMON_PROCESS_PROCESS_TUNING_H_
