// A child process whose output is relayed line by line with a prefix: used
// by the single-host launcher and by multi-process tests.
#ifndef PSYNC_COMMON_PROCESS_SUBPROCESS_H_
#define PSYNC_COMMON_PROCESS_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace psync {

// Thread-safe. The child gets SIGKILL if this process dies first
// (PR_SET_PDEATHSIG), so no child outlives a crashed parent.
class Subprocess {
 public:
  // Starts argv (argv[0] is a path). Each line the child writes to stdout or
  // stderr is kept (the last 1 MiB) and, if `echo`, written to our stdout
  // as "<prefix>line". A positive `nice` lowers the child's CPU priority
  // (its nice value, before it runs anything). With `control_stdin` the
  // child's standard input is a socket that WriteInput writes to and
  // CloseInput ends (its end of input); without, it is ours.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(std::vector<std::string> argv,
                                                           std::string prefix, bool echo = true,
                                                           int nice = 0,
                                                           bool control_stdin = false);
  // Kills the child if it still runs, reaps it and joins the reader thread.
  ~Subprocess();

  pid_t pid() const { return pid_; }
  // The exit code if the child has ended (128 + signal if a signal ended
  // it), without blocking.
  std::optional<int> Poll();
  // Waits until the child ends or `deadline` passes.
  std::optional<int> Wait(absl::Time deadline);
  // Sends `signal` to the child's process group if the child has not been
  // reaped.
  void Signal(int signal);
  // SIGTERM, then SIGKILL after `grace`; returns the exit code.
  int Stop(absl::Duration grace);
  // Writes `text` to the child's standard input; false if it was not
  // started with control_stdin, the input was closed, or the child no
  // longer reads it (never SIGPIPE).
  bool WriteInput(absl::string_view text);
  // Ends the child's standard input (it reads end of file). Idempotent.
  void CloseInput();
  // What the child wrote so far (its last 1 MiB).
  std::string output() const;
  // Waits until the child's output has ended (it and everything it started
  // closed the pipe) or `deadline` passes, then returns output().
  std::string DrainedOutput(absl::Time deadline) const;

 private:
  Subprocess(pid_t pid, int out_fd, int in_fd, std::string prefix, bool echo);
  void Relay();

  const pid_t pid_;
  const int out_fd_;
  int in_fd_ ABSL_GUARDED_BY(mu_);  // -1 without control_stdin or once closed
  const std::string prefix_;
  const bool echo_;
  mutable absl::Mutex mu_;
  std::optional<int> exit_code_ ABSL_GUARDED_BY(mu_);
  std::string output_ ABSL_GUARDED_BY(mu_);
  bool drained_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reader_;
};

}  // namespace psync

#endif  // PSYNC_COMMON_PROCESS_SUBPROCESS_H_
