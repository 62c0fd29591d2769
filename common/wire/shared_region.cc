#include "common/wire/shared_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
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
// The memory file's name, which /proc shows as "/memfd:psync-shared".
constexpr char kName[] = "psync-shared";

std::string Errno() { return std::strerror(errno); }

absl::Status CheckSize(int64_t bytes) {
  if (bytes <= 0 || bytes > kMaxBytes) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory region of ", bytes,
                                                   " bytes; expected 1 to ", kMaxBytes));
  }
  return absl::OkStatus();
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
  const std::string path = absl::StrCat("/proc/", offer.pid, "/fd/", offer.fd);
  const auto unreachable = [&path](const std::string& why) {
    return absl::NotFoundError(absl::StrCat(
        "cannot open ", path, ": ", why,
        " (the worker runs on another host, in another pid namespace, or as another user)"));
  };
  // Only a memory file of ours is opened at all: never a device, a FIFO or
  // a file someone holds a lease on (whose open would wait for the lease,
  // and hold the server's thread).
  char target[64] = {};
  const ssize_t length = readlink(path.c_str(), target, sizeof(target) - 1);
  if (length < 0) return unreachable(Errno());
  if (!absl::StartsWith(absl::string_view(target, static_cast<size_t>(length)),
                        absl::StrCat("/memfd:", kName))) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not the region offered: it is '", absl::string_view(target, length),
        "', expected a memory file /memfd:", kName));
  }
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return unreachable(Errno());
  // Closes `fd` and says why the file is not the region offered.
  auto refuse = [&](const std::string& why) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not the region offered: ", why));
  };
  struct stat st;
  if (fstat(fd, &st) != 0) return refuse(Errno());
  if (!S_ISREG(st.st_mode)) return refuse("not a memory file");
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kNeededSeals) != kNeededSeals) {
    return refuse("not sealed against shrinking and growing");
  }
  if (st.st_size != kHeaderBytes + offer.bytes) {
    return refuse(absl::StrCat(st.st_size - kHeaderBytes, " bytes, offered ", offer.bytes));
  }
  const size_t total = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return refuse(absl::StrCat("mmap: ", Errno()));
  uint64_t nonce = 0;
  std::memcpy(&nonce, static_cast<char*>(base) + sizeof(kMagic), sizeof(nonce));
  if (std::memcmp(base, kMagic, sizeof(kMagic)) != 0 || nonce != offer.nonce) {
    munmap(base, total);
    return refuse("its nonce differs");
  }
  close(fd);
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
