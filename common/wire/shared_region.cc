#include "common/wire/shared_region.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/process/incarnation.h"

namespace psync {
namespace {

// The header's page: the magic word, then the nonce. The usable bytes
// start at the next page.
constexpr int64_t kHeaderBytes = 4096;
constexpr char kMagic[8] = {'p', 's', 'y', 'n', 'c', 'S', 'H', 'M'};
// Far past any share (a layout holds at most 64 GiB in 256 KiB chunks).
constexpr int64_t kMaxBytes = int64_t{1} << 40;
constexpr int kNeededSeals = F_SEAL_SHRINK | F_SEAL_GROW;
// The memory file's name, which /proc shows as "/memfd:psync-shared": for
// people reading /proc only, a server never trusts a name.
constexpr char kName[] = "psync-shared";

std::string Errno() { return std::strerror(errno); }

absl::Status CheckSize(int64_t bytes) {
  if (bytes <= 0 || bytes > kMaxBytes) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory region of ", bytes,
                                                   " bytes; expected 1 to ", kMaxBytes));
  }
  return absl::OkStatus();
}

// The one answer to every offer this process cannot take and map: it
// names neither the process nor the descriptor, nor why, so that offers
// cannot tell which processes exist or what another process holds open.
absl::Status Unusable() {
  return absl::FailedPreconditionError(
      "the offered shared memory is not usable: the offered descriptor cannot be taken, or it "
      "is not a sealed psync memory region of the offered size and nonce (shared memory needs "
      "the worker on this host, in this server's pid namespace, as a user whose descriptors the "
      "server may take)");
}

// A duplicate of descriptor `fd` of process `pid` (close-on-exec), or -1.
// The kernel hands over the very file the process holds, with its access
// mode: no path is opened, so nothing the process names is reopened with
// this process's privileges. Needs ptrace access to `pid` (the same user,
// or CAP_SYS_PTRACE; Yama's ptrace_scope 1 also wants an ancestor).
int TakeDescriptor(pid_t pid, int fd) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return -1;
  const int taken = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0));
  close(pidfd);
  return taken;
}

// Whether `fd` is a psync region's file: an ordinary (not hugetlbfs)
// memory file, sealed against shrinking and growing, open for reading and
// writing, of `total` bytes. The seals are asked first because only memory
// files answer them, inside the kernel: the filesystem calls after them
// (fstatfs, fstat) then never reach a filesystem a peer could stall (FUSE).
// A hugetlbfs file is refused: with no huge page left, touching it would
// raise SIGBUS in the server.
bool IsSealedMemoryFile(int fd, int64_t total) {
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kNeededSeals) != kNeededSeals) return false;
  struct statfs fs;
  if (fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC) return false;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != total) return false;
  const int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && (flags & O_ACCMODE) == O_RDWR;
}

}  // namespace

SharedRegion::SharedRegion(int fd, char* base, int64_t bytes, uint64_t nonce)
    : fd_(fd), base_(base), data_(base + kHeaderBytes), bytes_(bytes), nonce_(nonce) {}

SharedRegion::~SharedRegion() {
  munmap(base_, static_cast<size_t>(kHeaderBytes + bytes_));
  CloseDescriptor();
}

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Create(int64_t bytes) {
  if (absl::Status s = CheckSize(bytes); !s.ok()) return s;
  // A memory file counts against the file size limit: ftruncate past it
  // would raise SIGXFSZ, which ends the process.
  struct rlimit limit;
  if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      static_cast<uint64_t>(kHeaderBytes + bytes) > limit.rlim_cur) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "shared memory region of ", bytes, " bytes and a ", kHeaderBytes,
        "-byte header: over the file size limit (ulimit -f) of ", limit.rlim_cur, " bytes"));
  }
  const int fd = memfd_create(kName, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("memfd_create: ", Errno()));
  const size_t total = static_cast<size_t>(kHeaderBytes + bytes);
  if (ftruncate(fd, static_cast<off_t>(total)) != 0 ||
      fcntl(fd, F_ADD_SEALS, kNeededSeals | F_SEAL_SEAL) != 0) {
    const std::string why = Errno();
    close(fd);
    return absl::UnavailableError(absl::StrCat("shared memory region of ", bytes,
                                               " bytes: ", why));
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const std::string why = Errno();
    close(fd);
    return absl::UnavailableError(absl::StrCat("mmap of ", bytes, " shared bytes: ", why));
  }
  const uint64_t nonce = NewIncarnation();
  std::memcpy(base, kMagic, sizeof(kMagic));
  std::memcpy(static_cast<char*>(base) + sizeof(kMagic), &nonce, sizeof(nonce));
  return std::unique_ptr<SharedRegion>(
      new SharedRegion(fd, static_cast<char*>(base), bytes, nonce));
}

absl::StatusOr<std::unique_ptr<SharedRegion>> SharedRegion::Open(const Offer& offer) {
  if (absl::Status s = CheckSize(offer.bytes); !s.ok()) return s;
  if (offer.pid <= 0 || offer.pid > INT32_MAX || offer.fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory offer of process ", offer.pid, ", descriptor ", offer.fd,
        "; expected a process id > 0 and a descriptor >= 0"));
  }
  const int fd = TakeDescriptor(static_cast<pid_t>(offer.pid), offer.fd);
  if (fd < 0) return Unusable();
  const int64_t total = kHeaderBytes + offer.bytes;
  if (!IsSealedMemoryFile(fd, total)) {
    close(fd);
    return Unusable();
  }
  void* base = mmap(nullptr, static_cast<size_t>(total), PROT_READ | PROT_WRITE, MAP_SHARED,
                    fd, 0);
  close(fd);
  if (base == MAP_FAILED) return Unusable();
  uint64_t nonce = 0;
  std::memcpy(&nonce, static_cast<char*>(base) + sizeof(kMagic), sizeof(nonce));
  if (std::memcmp(base, kMagic, sizeof(kMagic)) != 0 || nonce != offer.nonce) {
    munmap(base, static_cast<size_t>(total));
    return Unusable();
  }
  return std::unique_ptr<SharedRegion>(
      new SharedRegion(-1, static_cast<char*>(base), offer.bytes, offer.nonce));
}

SharedRegion::Offer SharedRegion::offer() const {
  Offer o;
  o.pid = getpid();
  o.fd = fd_;
  o.nonce = nonce_;
  o.bytes = bytes_;
  return o;
}

void SharedRegion::CloseDescriptor() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

}  // namespace psync
