// Incarnations: a random 64-bit number new at every start of a process, so
// that peers tell a restarted process from the one before it.
#ifndef PSYNC_COMMON_PROCESS_INCARNATION_H_
#define PSYNC_COMMON_PROCESS_INCARNATION_H_

#include <cstdint>
#include <random>

namespace psync {

// Never 0 (which means "none" on the wire).
inline uint64_t NewIncarnation() {
  std::random_device rd;
  return (uint64_t{rd()} << 32 | rd()) | 1;
}

}  // namespace psync

#endif  // PSYNC_COMMON_PROCESS_INCARNATION_H_
