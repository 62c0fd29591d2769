// How psync_launch changes the workers of a running elastic job on one
// host (--control_file): what the file says, when it has changed, and
// which ranks start or stop to bring the job to the count it asks for.
//
// Why a file rather than a command or a signal: the launcher runs in the
// foreground (its terminal shows every process's log) and holds no port of
// its own; a file needs no server, no client binary and no credentials,
// any script or operator can write it (`echo workers 4 > ctl`), and its
// last contents stay visible. A signal carries no count.
//
// Pure functions and a ControlFile that is not thread-safe (the launcher's
// main thread only).
#ifndef PSYNC_DEPLOY_LOCAL_WORKER_SCALING_H_
#define PSYNC_DEPLOY_LOCAL_WORKER_SCALING_H_

#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace psync {

// The worker count a control file's `text` asks for: one line
// "workers N", N in 1..max_workers (blank lines and surrounding spaces
// allowed); nullopt for a file with nothing in it yet (being written).
// InvalidArgument naming `path`, the text and what was expected otherwise.
absl::StatusOr<std::optional<int>> ParseControlText(absl::string_view text,
                                                    const std::string& path, int max_workers);

// A file the launcher polls (a few bytes, read whole each time): Changed()
// gives its text once per write (a new modification time or new text), so
// writing the same count again applies it again. Not thread-safe.
class ControlFile {
 public:
  // What `path` holds now is what was there before the job: not applied.
  explicit ControlFile(std::string path);

  const std::string& path() const { return path_; }
  // The file's text when it changed since the last call (or since
  // construction); nullopt when it has not, or does not exist.
  std::optional<std::string> Changed();
  // The text the file held at construction, if any.
  const std::optional<std::string>& before() const { return before_; }

 private:
  struct Stamp {
    bool exists = false;
    timespec mtime{};
    std::string text;
    bool operator==(const Stamp& o) const;
  };
  Stamp Now() const;

  const std::string path_;
  Stamp seen_;
  std::optional<std::string> before_;
};

// Where each rank of an elastic job stands for the launcher.
enum class RankState {
  kOut,       // no process: never started, left, or removed and gone
  kTraining,  // wanted: a process trains (or is restarted when it crashes)
  kLeaving,   // removed: SIGTERM sent, its process finishes its step and leaves
  kFinished,  // its process trained to the end and exited 0
};

// The ranks to start and to stop to bring the job to `target` training
// workers: the lowest ranks that are out (or leaving: they start again
// once their old process has gone) and the highest training ones. Ranks
// that finished are never started again, so `start` may be shorter than
// asked when the job is ending.
struct ScalePlan {
  int from = 0;  // training now
  std::vector<int> start, stop;
};
ScalePlan PlanScale(const std::vector<RankState>& ranks, int target);

// "workers 2 -> 4: starting worker 2, worker 3", "workers 3 -> 1:
// stopping worker 2, worker 1 (SIGTERM: each leaves after its step)".
std::string DescribeScale(const ScalePlan& plan, int target);

}  // namespace psync

#endif  // PSYNC_DEPLOY_LOCAL_WORKER_SCALING_H_
