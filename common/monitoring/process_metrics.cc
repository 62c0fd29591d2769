#include "common/monitoring/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace psync {
namespace {

std::string LimitText(rlim_t v) {
  return v == RLIM_INFINITY ? std::string("unlimited") : absl::StrCat(v);
}

int64_t OpenFileCount() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int64_t n = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the descriptor of `dir` itself
}

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return -1;
  return resident * sysconf(_SC_PAGESIZE);
}

// The first number in `path` (or -1 when there is none, as in a
// memory.max of "max").
int64_t ReadNumber(const std::string& path) {
  std::ifstream in(path);
  int64_t v = -1;
  return in >> v ? v : -1;
}

// This process's cgroup v2 folder ("0::/path" in /proc/self/cgroup).
std::string CgroupFolder() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  }
  return "";
}

}  // namespace

AvailableMemory AvailableMemoryNow() {
  AvailableMemory available;
  auto at_most = [&](int64_t left, const char* source) {
    if (available.bytes >= 0 && available.bytes <= left) return;
    available.bytes = left;
    available.source = source;
  };
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (meminfo >> key >> kb >> unit) {
    if (key == "MemAvailable:") {
      at_most(kb << 10, "MemAvailable in /proc/meminfo");
      break;
    }
  }
  // An address-space limit (ulimit -v) bounds what this process can map.
  rlimit as = {};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    std::ifstream statm("/proc/self/statm");
    int64_t mapped_pages = 0;
    if (statm >> mapped_pages) {
      at_most(std::max<int64_t>(
                  0, static_cast<int64_t>(as.rlim_cur) - mapped_pages * sysconf(_SC_PAGESIZE)),
              "the address-space limit (ulimit -v) less what this process maps");
    }
  }
  const std::string cgroup = CgroupFolder();
  if (!cgroup.empty()) {
    const int64_t limit = ReadNumber(cgroup + "/memory.max");
    const int64_t used = ReadNumber(cgroup + "/memory.current");
    if (limit >= 0 && used >= 0) {
      at_most(std::max<int64_t>(0, limit - used),
              "the cgroup's memory.max less its memory.current (a container's limit)");
    }
  }
  return available;
}

int64_t AvailableMemoryBytes() { return AvailableMemoryNow().bytes; }

int64_t PeakResidentBytes(int pid) {
  std::ifstream status(pid == 0 ? std::string("/proc/self/status")
                                : absl::StrCat("/proc/", pid, "/status"));
  std::string key;
  int64_t kib;
  while (status >> key) {
    if (key == "VmHWM:" && status >> kib) return kib * 1024;
  }
  return -1;
}

Resident ResidentNow(int pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string key;
  int64_t kib;
  Resident r;
  while (status >> key) {
    if (key == "VmRSS:" && status >> kib) r.total = kib * 1024;
    if (key == "RssShmem:" && status >> kib) r.shared = kib * 1024;
  }
  return r;
}

double CpuSeconds(int pid) {
  clockid_t clock = CLOCK_PROCESS_CPUTIME_ID;
  if (pid != 0 && clock_getcpuclockid(pid, &clock) != 0) return -1;
  timespec t;
  if (clock_gettime(clock, &t) != 0) return -1;
  return static_cast<double>(t.tv_sec) + t.tv_nsec * 1e-9;
}

std::string RaiseOpenFileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::StrCat("cannot read the open-file limit: ", std::strerror(errno));
  }
  const rlim_t was = limit.rlim_cur;
  if (was == limit.rlim_max) {
    return absl::StrCat("open-file limit ", LimitText(was), " (already the hard limit)");
  }
  limit.rlim_cur = limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::StrCat("open-file limit ", LimitText(was), "; raising it to the hard limit ",
                        LimitText(limit.rlim_max), " failed: ", std::strerror(errno));
  }
  return absl::StrCat("raised the open-file limit from ", LimitText(was),
                      " to the hard limit ", LimitText(limit.rlim_max));
}

void AddProcessMetrics(MetricRegistry* registry) {
  registry
      ->GetGauge("process_start_time_seconds",
                 "Start time of the process since the Unix epoch in seconds (changes at every "
                 "restart).")
      ->Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  Gauge* open = registry->GetGauge("process_open_fds", "Number of open file descriptors.");
  Gauge* max = registry->GetGauge("process_max_fds", "Maximum number of open file descriptors.");
  Gauge* resident =
      registry->GetGauge("process_resident_memory_bytes", "Resident memory size in bytes.");
  registry->OnRender([open, max, resident] {
    open->Set(static_cast<double>(OpenFileCount()));
    rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0) {
      max->Set(limit.rlim_cur == RLIM_INFINITY ? -1 : static_cast<double>(limit.rlim_cur));
    }
    resident->Set(static_cast<double>(ResidentBytes()));
  });
}

}  // namespace psync
