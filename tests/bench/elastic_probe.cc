// elastic_probe: times one change of a running elastic job's workers, from
// the event to steps flowing again. Driven by tests/bench/elastic_bench.sh.
//
//   elastic_probe --servers=127.0.0.1:4001,127.0.0.1:4002 --event=leave --rank=2 --pid=1234
//   elastic_probe --servers=... --event=join --rank=2 --pid_file=w2.pid --log=w2.log
//       -- /path/psync_worker --worker_rank=2 ...   (one command line)
//
// Events: `leave` sends SIGTERM to --pid (a member: it finishes its step and
// says it leaves), `kill` sends SIGKILL (a member is lost: its connections
// close), `join` starts the command after `--` (a worker that is not a
// member: it asks to join), writing its pid to --pid_file and its output to
// --log; the probe does not wait for it. First the probe waits until steps
// flow with --rank a member (leave, kill) or not (join): every server
// answers, is ready, holds the same members, and the lowest version rose
// between two polls. The clock starts just before kill(2) or the spawn.
//
// "Steps flowing again" is the first poll at which every server holds the
// same members, new ones (with --rank for a join, without for a leave or a
// kill), and every server's lowest version is above the step they start at:
// a step the new members trained has been applied everywhere. Also
// reported: when every server first held the new members ("decided") and,
// for a join, when a server first reported the worker's request to join. A
// time is read when the poll that saw the event ends, so it is late by at
// most one poll (--poll_ms plus one GetStatus per server). Exit code 0 on
// a measured change, 1 when a wait ran out, 2 for bad flags.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/psync.grpc.pb.h"

extern char** environ;

ABSL_FLAG(std::string, servers, "", "Server addresses host:port,... (all of the job's).");
ABSL_FLAG(std::string, event, "", "join, leave (SIGTERM) or kill (SIGKILL).");
ABSL_FLAG(int, rank, -1, "The worker that joins, leaves or is killed.");
ABSL_FLAG(int, pid, 0, "leave, kill: the worker's pid.");
ABSL_FLAG(std::string, pid_file, "", "join: where to write the started worker's pid.");
ABSL_FLAG(std::string, log, "/dev/null", "join: the started worker's stdout and stderr.");
ABSL_FLAG(int, poll_ms, 5, "Interval between two polls of every server.");
ABSL_FLAG(int, timeout_s, 60, "Longest wait for steps to flow, before and after the event.");

namespace psync {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The job as one round of polls saw it.
struct JobView {
  bool healthy = false;  // every server answered, is ready, with the same members
  int64_t members_id = -1;
  int64_t first_step = 0;
  std::vector<int> members;
  std::vector<int> pending_joins;  // at any server
  int64_t min_version = 0;

  bool Has(int rank) const {
    return std::find(members.begin(), members.end(), rank) != members.end();
  }
};

// Not thread-safe: one thread polls.
class Poller {
 public:
  explicit Poller(const std::vector<std::string>& addresses) {
    for (const std::string& address : addresses) {
      stubs_.push_back(proto::ParameterServer::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials())));
    }
  }

  JobView Poll() {
    JobView view;
    bool healthy = true;
    for (size_t i = 0; i < stubs_.size(); ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(200)));
      proto::StatusResponse s;
      if (!stubs_[i]->GetStatus(&ctx, proto::StatusRequest(), &s).ok()) return JobView{};
      view.pending_joins.insert(view.pending_joins.end(), s.pending_joins().begin(),
                                s.pending_joins().end());
      healthy = healthy && s.ready() && s.registered();
      if (i == 0) {
        view.members_id = s.members().id();
        view.first_step = s.members().first_step();
        view.members.assign(s.members().ranks().begin(), s.members().ranks().end());
        view.min_version = s.version();
      }
      healthy = healthy && s.members().id() == view.members_id;
      view.min_version = std::min(view.min_version, s.version());
    }
    view.healthy = healthy;
    return view;
  }

 private:
  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> stubs_;
};

// Starts `argv` with its output in `log`; its pid.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", std::strerror(err)));
  }
  return pid;
}

class Probe {
 public:
  Probe(Poller* poller, absl::Duration poll, absl::Duration timeout)
      : poller_(poller), poll_(poll), timeout_(timeout) {}

  // Until steps flow with `rank` a member or not, as `member` says.
  absl::StatusOr<JobView> AwaitFlowing(int rank, bool member) {
    const absl::Time until = absl::Now() + timeout_;
    std::optional<JobView> first;
    while (absl::Now() < until) {
      const JobView view = poller_->Poll();
      if (!view.healthy || view.Has(rank) != member) {
        first.reset();
      } else if (!first.has_value() || first->members_id != view.members_id) {
        first = view;
      } else if (view.min_version > first->min_version) {
        return view;
      }
      absl::SleepFor(poll_);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "the job did not train with worker ", rank, member ? " a member" : " not a member",
        " within ", absl::FormatDuration(timeout_)));
  }

  // Makes the event happen (`act`) and measures; prints one report line and
  // one RESULT line.
  absl::Status Measure(const std::string& event, int rank, const std::function<absl::Status()>& act) {
    const bool joins = event == "join";
    absl::StatusOr<JobView> before = AwaitFlowing(rank, !joins);
    if (!before.ok()) return before.status();
    const Clock::time_point start = Clock::now();
    if (absl::Status s = act(); !s.ok()) return s;
    std::optional<double> asked_s, decided_s;
    const absl::Time until = absl::Now() + timeout_;
    while (absl::Now() < until) {
      const JobView view = poller_->Poll();
      const double t = SecondsSince(start);
      if (!asked_s.has_value() &&
          std::count(view.pending_joins.begin(), view.pending_joins.end(), rank) > 0) {
        asked_s = t;
      }
      const bool changed =
          view.healthy && view.members_id != before->members_id && view.Has(rank) == joins;
      if (changed && !decided_s.has_value()) decided_s = t;
      if (changed && view.min_version > view.first_step) {
        const std::string asked =
            asked_s.has_value() ? absl::StrFormat("asked to join after %.3f s, ", *asked_s) : "";
        std::printf("%s worker %d at version %lld: %smembers %s decided after %.3f s (set %lld "
                    "from step %lld), steps flowing after %.3f s (version %lld)\n",
                    event.c_str(), rank, static_cast<long long>(before->min_version),
                    asked.c_str(),
                    absl::StrJoin(view.members, ",").c_str(), *decided_s,
                    static_cast<long long>(view.members_id),
                    static_cast<long long>(view.first_step), t,
                    static_cast<long long>(view.min_version));
        std::printf("RESULT event=%s seconds=%.4f decided_s=%.4f%s\n", event.c_str(), t,
                    *decided_s,
                    asked_s.has_value() ? absl::StrFormat(" from_ask_s=%.4f", t - *asked_s).c_str()
                                        : "");
        std::fflush(stdout);
        return absl::OkStatus();
      }
      absl::SleepFor(poll_);
    }
    return absl::DeadlineExceededError(
        absl::StrCat("steps did not flow again within ", absl::FormatDuration(timeout_),
                     " of the ", event, " of worker ", rank,
                     decided_s.has_value() ? " (the members had changed)" : ""));
  }

 private:
  Poller* const poller_;
  const absl::Duration poll_;
  const absl::Duration timeout_;
};

}  // namespace
}  // namespace psync

int main(int argc, char** argv) {
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> command(positional.begin() + 1, positional.end());
  const std::vector<std::string> servers =
      absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty());
  const std::string event = absl::GetFlag(FLAGS_event);
  const int rank = absl::GetFlag(FLAGS_rank), pid = absl::GetFlag(FLAGS_pid);
  const std::string pid_file = absl::GetFlag(FLAGS_pid_file);
  const int poll_ms = absl::GetFlag(FLAGS_poll_ms), timeout_s = absl::GetFlag(FLAGS_timeout_s);
  const bool joins = event == "join";
  if (servers.empty() || (!joins && event != "leave" && event != "kill") || rank < 0 ||
      poll_ms < 1 || timeout_s < 1 || (joins && (command.empty() || pid_file.empty())) ||
      (!joins && pid <= 0)) {
    std::fprintf(stderr,
                 "elastic_probe: --servers is '%s', --event is '%s', --rank is %d, --pid is %d, "
                 "--pid_file is '%s', --poll_ms is %d, --timeout_s is %d, %zu command words; "
                 "expected a server list, join, leave or kill, a rank >= 0, for a join a pid "
                 "file and a command after --, for a leave or a kill a pid > 0, and >= 1 twice\n",
                 absl::GetFlag(FLAGS_servers).c_str(), event.c_str(), rank, pid, pid_file.c_str(),
                 poll_ms, timeout_s, command.size());
    return 2;
  }
  psync::Poller poller(servers);
  psync::Probe probe(&poller, absl::Milliseconds(poll_ms), absl::Seconds(timeout_s));
  const absl::Status s = probe.Measure(event, rank, [&]() -> absl::Status {
    if (joins) {
      absl::StatusOr<pid_t> started = psync::Spawn(command, absl::GetFlag(FLAGS_log));
      if (!started.ok()) return started.status();
      std::ofstream(pid_file) << *started << "\n";
      return absl::OkStatus();
    }
    if (kill(pid, event == "leave" ? SIGTERM : SIGKILL) != 0) {
      return absl::InternalError(absl::StrCat("kill ", pid, " (worker ", rank, ") failed"));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) {
    std::printf("elastic_probe: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
