#include "server/checkpoint_manager.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/process/await_work.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psync {
namespace {

// Creates `dir` (one level) if missing and proves it writable.
absl::Status CheckWritable(const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--checkpoint_dir ", dir, " cannot be created: ", strerror(errno)));
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--checkpoint_dir is '", dir, "', which exists and is not a directory"));
  }
  const std::string probe = dir + "/.write-check";
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--checkpoint_dir is '", dir, "', where no file can be created: ", strerror(errno)));
  }
  close(fd);
  unlink(probe.c_str());
  return absl::OkStatus();
}

// Holds `dir`/.lock-server-<rank> (flock, which the kernel drops when the
// process ends however it ends) and returns its descriptor: two jobs
// writing one directory would overwrite and prune each other's checkpoints,
// and restore from them. The file holds the holder's process id, for the
// error.
absl::StatusOr<int> LockRank(const std::string& dir, int rank) {
  const std::string path = absl::StrCat(dir, "/.lock-server-", rank);
  // Never through a link, nor into a device or a FIFO: the lock's process
  // id would be written wherever the link points. (lstat first: opening a
  // device may do something; fstat below: the path may change between.)
  const absl::Status not_regular = absl::FailedPreconditionError(absl::StrCat(
      "--checkpoint_dir: ", path, " is not a regular file; expected the lock file a server "
      "creates there, or none"));
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return not_regular;
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--checkpoint_dir: cannot open ", path, ": ", strerror(errno)));
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return not_regular;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char holder[32] = {};
    const ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
    close(fd);
    if (error != EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("--checkpoint_dir: cannot lock ", path, ": ", strerror(error)));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "--checkpoint_dir is '", dir, "', where a running server ", rank, " (process ",
        n > 0 ? absl::StripAsciiWhitespace(holder) : "unknown", ", holding ", path,
        ") writes its checkpoints; expected a directory no other job uses"));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    LOG(WARNING) << "server " << rank << ": cannot write the process id to " << path << ": "
                 << strerror(errno);
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointManager>> CheckpointManager::Open(
    CheckpointManagerOptions options) {
  if (options.keep < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--keep_checkpoints is ", options.keep, ", expected >= 1"));
  }
  PSYNC_RETURN_IF_ERROR(CheckWritable(options.dir));
  PSYNC_ASSIGN_OR_RETURN(const int lock_fd, LockRank(options.dir, options.server_rank));
  auto unlock = absl::MakeCleanup([lock_fd] { close(lock_fd); });
  PSYNC_ASSIGN_OR_RETURN(CheckpointScan scan,
                         ScanCheckpoints(options.dir, options.server_rank, options.num_servers));
  for (const std::string& refused : scan.refused) {
    LOG(WARNING) << "server " << options.server_rank << ": checkpoint refused: " << refused;
  }
  for (const CheckpointCandidate& c : scan.candidates) {
    if (c.header.optimizer != options.optimizer) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", c.files.front(), " was written with '", c.header.optimizer,
          "', this server has '", options.optimizer,
          "': resume with the same optimizer options, or use another --checkpoint_dir"));
    }
  }
  std::unique_ptr<CheckpointManager> manager(new CheckpointManager(std::move(options)));
  manager->lock_fd_ = lock_fd;
  std::move(unlock).Cancel();
  {
    absl::MutexLock lock(&manager->mu_);
    manager->candidates_ = std::move(scan.candidates);
  }
  manager->writer_ = std::thread([m = manager.get()] { m->WriterLoop(); });
  return manager;
}

CheckpointManager::CheckpointManager(CheckpointManagerOptions options)
    : options_(std::move(options)) {}

CheckpointManager::~CheckpointManager() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (writer_.joinable()) writer_.join();
  if (lock_fd_ >= 0) close(lock_fd_);
}

std::vector<CheckpointVersion> CheckpointManager::Versions() const {
  absl::MutexLock lock(&mu_);
  std::vector<CheckpointVersion> out;
  for (const CheckpointCandidate& c : candidates_) out.push_back({c.version, c.model_id});
  return out;
}

absl::StatusOr<RestoredState> CheckpointManager::Load(int64_t version) {
  CheckpointCandidate candidate;
  {
    absl::MutexLock lock(&mu_);
    auto it = std::find_if(candidates_.begin(), candidates_.end(),
                           [version](const auto& c) { return c.version == version; });
    if (it == candidates_.end()) {
      return absl::NotFoundError(absl::StrCat("no valid checkpoint of version ", version, " in ",
                                              options_.dir));
    }
    candidate = *it;
  }
  absl::StatusOr<RestoredShard> shard =
      LoadCheckpoint(candidate, options_.server_rank, options_.num_servers);
  absl::StatusOr<TrainingShape> shape =
      shard.ok() ? TrainingShape::Parse(shard->header.training) : shard.status();
  if (!shape.ok()) {
    // Not restorable after all: the coordinator must not choose it again.
    absl::MutexLock lock(&mu_);
    candidates_.erase(std::remove_if(candidates_.begin(), candidates_.end(),
                                     [version](const auto& c) { return c.version == version; }),
                      candidates_.end());
    return shape.status();
  }
  return RestoredState{std::move(shard->layout), *std::move(shape), shard->header.version,
                       std::move(shard->chunks)};
}

void CheckpointManager::Enqueue(Snapshot snapshot) {
  absl::MutexLock lock(&mu_);
  if (queue_.size() >= 2) {
    LOG(WARNING) << "server " << options_.server_rank << ": checkpoint of version "
                 << queue_.front().version << " skipped: earlier writes are still running";
    queue_.pop_front();
  }
  queue_.push_back(std::move(snapshot));
}

void CheckpointManager::SetOnDone(
    std::function<void(int64_t, const absl::Status&)> callback) {
  absl::MutexLock lock(&mu_);
  on_done_ = std::move(callback);
}

absl::Status CheckpointManager::WriteNow(std::vector<Snapshot> snapshots, absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    queue_.clear();
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !writing_; };
    if (!mu_.AwaitWithDeadline(absl::Condition(&idle), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "server ", options_.server_rank, ": a checkpoint write was still running at the "
          "shutdown deadline; the shutdown checkpoint is not written"));
    }
  }
  absl::Status first;
  for (const Snapshot& s : snapshots) {
    absl::MutexLock write_lock(&write_mu_);
    absl::Status status = Write(s);
    if (first.ok()) first = status;
  }
  return first;
}

void CheckpointManager::WriterLoop() {
  while (true) {
    Snapshot snapshot;
    {
      absl::MutexLock lock(&mu_);
      if (!AwaitWorkLocked(mu_, queue_, stopping_)) return;
      snapshot = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
    }
    {
      absl::MutexLock write_lock(&write_mu_);
      Write(snapshot).IgnoreError();  // logged and counted
    }
    absl::MutexLock lock(&mu_);
    writing_ = false;
  }
}

absl::Status CheckpointManager::Write(const Snapshot& s) {
  const absl::Time start = absl::Now();
  absl::StatusOr<CheckpointHeader> header = MakeCheckpointHeader(*s.layout, options_.server_rank);
  absl::Status status = header.status();
  if (status.ok()) {
    header->version = s.version;
    header->generation = s.generation;
    header->optimizer = options_.optimizer;
    header->training = s.shape.Describe();
    std::vector<CheckpointChunk> chunks;
    for (const auto& [id, state] : s.chunks) chunks.push_back({id, state});
    status = WriteCheckpoint(options_.dir, *s.layout, *header, chunks);
  }
  if (!status.ok()) {
    std::function<void(int64_t, const absl::Status&)> on_done;
    int64_t failed;
    {
      absl::MutexLock lock(&mu_);
      failed = ++failed_;
      on_done = on_done_;
    }
    LOG(ERROR) << "server " << options_.server_rank << ": checkpoint of version " << s.version
               << " failed (" << failed << " failed so far; training goes on, older checkpoints"
               << " are intact): " << status;
    if (on_done) on_done(s.version, status);
    return status;
  }
  const std::string path =
      CheckpointPath(options_.dir, s.version, options_.server_rank, options_.num_servers);
  absl::Status pruned = PruneCheckpoints(options_.dir, options_.server_rank,
                                         options_.num_servers, options_.keep);
  if (!pruned.ok()) LOG(WARNING) << "server " << options_.server_rank << ": " << pruned;
  std::function<void(int64_t, const absl::Status&)> on_done;
  {
    absl::MutexLock lock(&mu_);
    ++written_;
    candidates_.erase(std::remove_if(candidates_.begin(), candidates_.end(),
                                     [&](const auto& c) { return c.version == s.version; }),
                      candidates_.end());
    candidates_.push_back(CheckpointCandidate{s.version, header->model_id, *header, {path}});
    std::sort(candidates_.begin(), candidates_.end(),
              [](const auto& a, const auto& b) { return a.version > b.version; });
    // Pruning removed our own older files; forget them (sets written by
    // another server count stay).
    std::vector<CheckpointCandidate> kept;
    int own = 0;
    for (CheckpointCandidate& c : candidates_) {
      const bool ours = c.files.size() == 1 && c.header.num_servers == options_.num_servers;
      if (!ours || ++own <= options_.keep) kept.push_back(std::move(c));
    }
    candidates_ = std::move(kept);
    on_done = on_done_;
  }
  LOG(INFO) << "server " << options_.server_rank << ": checkpoint of version " << s.version
            << " written to " << path << " in "
            << absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1)));
  if (on_done) on_done(s.version, absl::OkStatus());
  return absl::OkStatus();
}

int64_t CheckpointManager::written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

absl::Time CheckpointManager::NewestWriteTime() const {
  std::string path;
  {
    absl::MutexLock lock(&mu_);
    if (candidates_.empty() || candidates_.front().files.empty()) return absl::InfinitePast();
    path = candidates_.front().files.front();
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return absl::InfinitePast();
  return absl::TimeFromTimespec(st.st_mtim);
}

int64_t CheckpointManager::failed() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

}  // namespace psync
