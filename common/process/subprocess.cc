#include "common/process/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace psync {
namespace {

constexpr size_t kKeepBytes = 1 << 20;

// Serialises relayed lines from all children so they never interleave.
absl::Mutex& StdoutMutex() {
  static absl::Mutex* mu = new absl::Mutex;
  return *mu;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(std::vector<std::string> argv,
                                                              std::string prefix, bool echo,
                                                              int nice, bool control_stdin) {
  if (argv.empty()) return absl::InvalidArgumentError("Subprocess: empty argv");
  if (access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("Subprocess: '", argv[0], "' is not an executable file"));
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("Subprocess: pipe: ", std::strerror(errno)));
  }
  // A socket, not a pipe: send(MSG_NOSIGNAL) to a child that is gone fails
  // instead of raising SIGPIPE in the launcher.
  int in[2] = {-1, -1};
  if (control_stdin && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("Subprocess: socketpair: ", std::strerror(errno)));
  }
  auto close_in = [&in] {
    if (in[0] >= 0) close(in[0]);
    if (in[1] >= 0) close(in[1]);
  };
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    close_in();
    return absl::InternalError(absl::StrCat("Subprocess: fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    // Own process group, so that signals reach the child's children too
    // (they would otherwise hold the output pipe open).
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    if (in[1] >= 0) dup2(in[1], STDIN_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (nice > 0) setpriority(PRIO_PROCESS, 0, nice);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  if (in[1] >= 0) close(in[1]);
  setpgid(pid, pid);  // also here: whichever runs first wins the race
  return std::unique_ptr<Subprocess>(new Subprocess(pid, fds[0], in[0], std::move(prefix), echo));
}

Subprocess::Subprocess(pid_t pid, int out_fd, int in_fd, std::string prefix, bool echo)
    : pid_(pid), out_fd_(out_fd), in_fd_(in_fd), prefix_(std::move(prefix)), echo_(echo) {
  reader_ = std::thread([this] { Relay(); });
}

Subprocess::~Subprocess() {
  if (!Poll().has_value()) Stop(absl::Seconds(2));
  // Anything the child left behind in its group would hold the pipe open.
  kill(-pid_, SIGKILL);
  CloseInput();
  reader_.join();
  close(out_fd_);
}

void Subprocess::Relay() {
  std::string pending;
  char buf[4096];
  while (true) {
    const ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, n);
    size_t start = 0, newline;
    while ((newline = pending.find('\n', start)) != std::string::npos) {
      const std::string line = pending.substr(start, newline - start + 1);
      start = newline + 1;
      if (echo_) {
        absl::MutexLock lock(&StdoutMutex());
        std::fputs((prefix_ + line).c_str(), stdout);
        std::fflush(stdout);
      }
      absl::MutexLock lock(&mu_);
      output_ += line;
      if (output_.size() > 2 * kKeepBytes) output_.erase(0, output_.size() - kKeepBytes);
    }
    pending.erase(0, start);
    if (pending.size() > kKeepBytes) pending.clear();  // a child that never ends a line
  }
  absl::MutexLock lock(&mu_);
  if (!pending.empty()) {
    output_ += pending;
    if (echo_) {
      absl::MutexLock out_lock(&StdoutMutex());
      std::fputs((prefix_ + pending + "\n").c_str(), stdout);
      std::fflush(stdout);
    }
  }
  drained_ = true;
}

std::optional<int> Subprocess::Poll() {
  absl::MutexLock lock(&mu_);
  if (exit_code_.has_value()) return exit_code_;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r != pid_) return std::nullopt;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return exit_code_;
}

std::optional<int> Subprocess::Wait(absl::Time deadline) {
  while (true) {
    if (auto code = Poll()) return code;
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void Subprocess::Signal(int signal) {
  absl::MutexLock lock(&mu_);
  if (!exit_code_.has_value()) kill(-pid_, signal);
}

int Subprocess::Stop(absl::Duration grace) {
  Signal(SIGTERM);
  if (auto code = Wait(absl::Now() + grace)) return *code;
  Signal(SIGKILL);
  return *Wait(absl::InfiniteFuture());
}

bool Subprocess::WriteInput(absl::string_view text) {
  absl::MutexLock lock(&mu_);
  while (in_fd_ >= 0 && !text.empty()) {
    const ssize_t n = send(in_fd_, text.data(), text.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(n);
  }
  return in_fd_ >= 0;
}

void Subprocess::CloseInput() {
  absl::MutexLock lock(&mu_);
  if (in_fd_ >= 0) close(in_fd_);
  in_fd_ = -1;
}

std::string Subprocess::output() const {
  absl::MutexLock lock(&mu_);
  return output_;
}

std::string Subprocess::DrainedOutput(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(absl::Condition(&drained_), deadline);
  return output_;
}

}  // namespace psync
