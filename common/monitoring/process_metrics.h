// This process's file-descriptor limit, and the standard process_* metrics
// Prometheus client libraries export (start time, open and maximum file
// descriptors, resident memory).
#ifndef PSYNC_COMMON_MONITORING_PROCESS_METRICS_H_
#define PSYNC_COMMON_MONITORING_PROCESS_METRICS_H_

#include <cstdint>
#include <string>

#include "common/monitoring/metrics.h"

namespace psync {

// Raises the soft RLIMIT_NOFILE to the hard limit (idle connections each
// hold a descriptor, and running out stops a gRPC listener for good).
// Returns a line for the log saying what the limits were and are.
std::string RaiseOpenFileLimit();

// The peak resident set (VmHWM) of process `pid` (0: this one) in bytes;
// -1 when it cannot be read (the process is gone).
int64_t PeakResidentBytes(int pid = 0);

// The resident set of process `pid` now (VmRSS), and the part of it that is
// shared memory (RssShmem: for a psync server, the workers' regions it
// maps, which their resident sets count too); -1s when it cannot be read.
struct Resident {
  int64_t total = -1, shared = -1;
};
Resident ResidentNow(int pid);

// Memory this process can still take, in bytes: /proc/meminfo's
// MemAvailable, or less where its address-space limit (ulimit -v) or its
// cgroup (v2) memory.max (a container's limit) leaves less; -1 when none
// can be read.
int64_t AvailableMemoryBytes();

// AvailableMemoryBytes() and which of the three bounds it, for messages.
struct AvailableMemory {
  int64_t bytes = -1;  // -1: none could be read
  std::string source;  // e.g. "MemAvailable in /proc/meminfo"
};
AvailableMemory AvailableMemoryNow();

// CPU time (user and system, all threads) process `pid` (0: this one) has
// used, in seconds; -1 when it cannot be read (the process is gone).
double CpuSeconds(int pid = 0);

// Registers process_start_time_seconds (now), process_open_fds,
// process_max_fds and process_resident_memory_bytes, read at each scrape.
void AddProcessMetrics(MetricRegistry* registry);

}  // namespace psync

#endif  // PSYNC_COMMON_MONITORING_PROCESS_METRICS_H_
