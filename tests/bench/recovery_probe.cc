// recovery_probe: times one recovery of a running psync_launch cluster.
// Polls every server's GetStatus every --poll_ms, kills (SIGKILL) the
// process whose pid is in --pid_file once training flows, and prints how
// long the cluster took until training steps flowed again. Driven by
// tests/bench/recovery_bench.sh, which runs the job and picks the victims.
//
//   recovery_probe --servers=127.0.0.1:4001,127.0.0.1:4002
//       --pid_file=/tmp/pids/worker-0.pid --launcher_pid=1234
//
// "Steps flowing again" is the first poll at which every server answers,
// is ready, is in one generation, and that generation has applied a step
// that needed the restarted process:
// - no rollback (a worker was killed; the generation is unchanged): the
//   lowest version over the servers is at least m + 2, where m is that
//   lowest version at the first poll after the kill. The victim can have
//   pushed at most step m, so step m + 1 needs its successor. This may count
//   one step more than needed (when step m was already applied everywhere).
// - rollback (a server was killed; a new generation): the lowest version is
//   above the version at which the new generation was first seen ready,
//   i.e. the restored checkpoint, since workers need longer than one poll
//   to re-register and compute a step.
// The clock starts just before kill(2); a time is read when the poll that
// saw the event ends, so it is late by at most one poll (--poll_ms plus one
// GetStatus per server). Also reported: when the launcher restarted the
// victim (its pid file changed) and, after a rollback, when the cluster was
// ready again. Exit code 0 on a measured recovery, 1 when a wait ran out, 2
// for bad flags.
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/psync.grpc.pb.h"

ABSL_FLAG(std::string, servers, "", "Server addresses host:port,... (all of the cluster's).");
ABSL_FLAG(std::string, pid_file, "", "psync_launch's pid file of the victim (--pid_dir).");
ABSL_FLAG(int, launcher_pid, 0,
          "If > 0, the victim must be a child of this process (so that nothing else is "
          "ever killed).");
ABSL_FLAG(int, poll_ms, 5, "Interval between two polls of every server.");
ABSL_FLAG(int, timeout_s, 60, "Longest wait for training to flow, before and after the kill.");

namespace psync {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The cluster as one round of polls saw it.
struct ClusterView {
  bool all_up = true;     // every server answered
  bool healthy = false;   // ... and all are ready, in one generation
  int64_t generation = 0;
  int64_t min_version = 0;
  int64_t max_version = 0;
};

// Not thread-safe: one thread polls.
class Poller {
 public:
  explicit Poller(const std::vector<std::string>& addresses) {
    // Reconnect within tens of ms of a restarted server listening again (the
    // defaults back off for a second or more), so that the probe never
    // waits longer than the cluster does.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 10);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 10);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 50);
    for (const std::string& address : addresses) {
      stubs_.push_back(proto::ParameterServer::NewStub(
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
    }
  }

  ClusterView Poll() {
    ClusterView view;
    bool ready = true, one_generation = true, answered = false;
    for (size_t i = 0; i < stubs_.size(); ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(200)));
      proto::StatusResponse status;
      if (!stubs_[i]->GetStatus(&ctx, proto::StatusRequest(), &status).ok()) {
        view.all_up = false;
        continue;
      }
      ready = ready && status.ready() && status.registered();
      if (!answered) {
        answered = true;
        view.generation = status.generation();
        view.min_version = view.max_version = status.version();
      }
      one_generation = one_generation && status.generation() == view.generation;
      view.min_version = std::min(view.min_version, status.version());
      view.max_version = std::max(view.max_version, status.version());
    }
    view.healthy = view.all_up && ready && one_generation;
    return view;
  }

 private:
  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> stubs_;
};

std::optional<pid_t> ReadPid(const std::string& path) {
  std::ifstream in(path);
  pid_t pid = 0;
  if (in >> pid && pid > 0) return pid;
  return std::nullopt;
}

// The parent pid from /proc/<pid>/stat ("pid (comm) state ppid ..."; comm
// may hold spaces, so parse after the last ')').
std::optional<pid_t> ParentOf(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  char state = 0;
  long ppid = 0;
  if (std::sscanf(stat.c_str() + close + 1, " %c %ld", &state, &ppid) != 2) return std::nullopt;
  return static_cast<pid_t>(ppid);
}

class Probe {
 public:
  Probe(Poller* poller, absl::Duration poll, absl::Duration timeout)
      : poller_(poller), poll_(poll), timeout_(timeout) {}

  // Until every server is healthy and the lowest version rose between two
  // polls: the previous recovery is over.
  absl::StatusOr<ClusterView> AwaitFlowing() {
    const absl::Time until = absl::Now() + timeout_;
    bool have_first = false;  // a healthy view to compare with
    ClusterView first;
    while (absl::Now() < until) {
      const ClusterView view = poller_->Poll();
      if (!view.healthy) {
        have_first = false;
      } else if (!have_first || first.generation != view.generation) {
        have_first = true;
        first = view;
      } else if (view.min_version > first.min_version) {
        return view;
      }
      absl::SleepFor(poll_);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "the cluster did not train (every server ready, versions rising) within ",
        absl::FormatDuration(timeout_)));
  }

  // Kills the victim and measures; prints one report line and one RESULT
  // line.
  absl::Status KillAndMeasure(const std::string& pid_file, pid_t launcher_pid) {
    const std::string victim = std::filesystem::path(pid_file).stem().string();
    PSYNC_ASSIGN_OR_RETURN(const ClusterView before, AwaitFlowing());
    const std::optional<pid_t> pid = ReadPid(pid_file);
    if (!pid.has_value()) return absl::NotFoundError(absl::StrCat("no pid in ", pid_file));
    if (launcher_pid > 0 && ParentOf(*pid) != launcher_pid) {
      return absl::FailedPreconditionError(absl::StrCat(
          victim, " pid ", *pid, " from ", pid_file, " is not a child of --launcher_pid ",
          launcher_pid, ": not killing it"));
    }
    const Clock::time_point start = Clock::now();
    if (kill(*pid, SIGKILL) != 0) {
      return absl::InternalError(absl::StrCat("kill -9 ", *pid, " (", victim, ") failed"));
    }
    std::optional<int64_t> after_kill;  // lowest version at the first full poll
    std::optional<double> restarted_s, ready_s;
    std::optional<int64_t> resumed_at;  // restored version of a new generation
    const absl::Time until = absl::Now() + timeout_;
    while (absl::Now() < until) {
      const ClusterView view = poller_->Poll();
      const double t = SecondsSince(start);
      if (!restarted_s.has_value()) {
        const std::optional<pid_t> now = ReadPid(pid_file);
        if (now.has_value() && *now != *pid) restarted_s = t;
      }
      if (view.all_up && !after_kill.has_value()) after_kill = view.min_version;
      if (view.healthy && view.generation > before.generation && !resumed_at.has_value()) {
        resumed_at = view.min_version;
        ready_s = t;
      }
      const bool flowing =
          view.healthy &&
          (view.generation > before.generation
               ? view.min_version > *resumed_at
               : view.generation == before.generation && after_kill.has_value() &&
                     view.min_version >= *after_kill + 2);
      if (flowing) {
        Report(victim, *pid, before, t, restarted_s, ready_s, resumed_at, view);
        return ConfirmRising(view);
      }
      absl::SleepFor(poll_);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "steps did not flow again within ", absl::FormatDuration(timeout_), " of killing ",
        victim, " (restarted: ", restarted_s.has_value() ? "yes" : "no",
        resumed_at.has_value() ? ", cluster ready again" : "", ")"));
  }

 private:
  static void Report(const std::string& victim, pid_t pid, const ClusterView& before,
                     double flowing_s, std::optional<double> restarted_s,
                     std::optional<double> ready_s, std::optional<int64_t> resumed_at,
                     const ClusterView& now) {
    const bool rolled_back = resumed_at.has_value();
    std::string text = absl::StrCat("kill -9 ", victim, " (pid ", pid, ") at version ",
                                    before.min_version, " (generation ", before.generation,
                                    "): ");
    absl::StrAppend(&text, restarted_s.has_value()
                               ? absl::StrFormat("restarted after %.3f s, ", *restarted_s)
                               : std::string("restart not seen, "));
    const int64_t lost = before.min_version - resumed_at.value_or(before.min_version);
    if (rolled_back) {
      absl::StrAppend(&text, absl::StrFormat("ready after %.3f s at version %d (generation %d, "
                                             "%d step%s rolled back), ",
                                             *ready_s, *resumed_at, now.generation, lost,
                                             lost == 1 ? "" : "s"));
    }
    absl::StrAppend(&text, absl::StrFormat("steps flowing after %.3f s (version %d)", flowing_s,
                                           now.min_version));
    std::printf("%s\n", text.c_str());
    std::printf("RESULT victim=%s seconds=%.4f restart_s=%.4f ready_s=%.4f kill_version=%lld "
                "rollback=%d rolled_back_steps=%lld\n",
                victim.c_str(), flowing_s, restarted_s.value_or(-1), ready_s.value_or(-1),
                static_cast<long long>(before.min_version), rolled_back,
                static_cast<long long>(lost));
    std::fflush(stdout);
  }

  // The count keeps rising: one more step within the timeout.
  absl::Status ConfirmRising(const ClusterView& flowing) {
    const absl::Time until = absl::Now() + timeout_;
    while (absl::Now() < until) {
      const ClusterView view = poller_->Poll();
      if (view.healthy && view.generation == flowing.generation &&
          view.min_version > flowing.min_version) {
        return absl::OkStatus();
      }
      absl::SleepFor(poll_);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "steps stopped again at version ", flowing.min_version, " after the recovery"));
  }

  Poller* const poller_;
  const absl::Duration poll_;
  const absl::Duration timeout_;
};

}  // namespace
}  // namespace psync

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> servers =
      absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty());
  const std::string pid_file = absl::GetFlag(FLAGS_pid_file);
  const int poll_ms = absl::GetFlag(FLAGS_poll_ms), timeout_s = absl::GetFlag(FLAGS_timeout_s);
  if (servers.empty() || pid_file.empty() || poll_ms < 1 || timeout_s < 1) {
    std::fprintf(stderr,
                 "recovery_probe: --servers is '%s', --pid_file is '%s', --poll_ms is %d, "
                 "--timeout_s is %d; expected a server list, a pid file, >= 1 and >= 1\n",
                 absl::GetFlag(FLAGS_servers).c_str(), pid_file.c_str(), poll_ms, timeout_s);
    return 2;
  }
  psync::Poller poller(servers);
  psync::Probe probe(&poller, absl::Milliseconds(poll_ms), absl::Seconds(timeout_s));
  const absl::Status s = probe.KillAndMeasure(pid_file, absl::GetFlag(FLAGS_launcher_pid));
  if (!s.ok()) {
    std::printf("recovery_probe: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
