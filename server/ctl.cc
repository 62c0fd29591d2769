// psync_ctl status: one table of every server of a job (from --servers or
// --config), and an exit code a script or a probe can act on:
//   0  healthy: every server answered and nothing has stalled for --stall_s;
//   1  unhealthy: a server did not answer within --timeout_s, or a step has
//      waited longer than --stall_s for workers, a server could take no step
//      that long, or registered workers were silent that long (the reason
//      is printed last);
//   2  bad flags or configuration.
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/config/flags_help.h"
#include "common/config/job_config.h"
#include "common/config/job_flags.h"
#include "common/security/security.h"
#include "server/rpc/status_client.h"

// The job's settings (--config, --servers, ...) are in common/config/job_flags.h;
// these are psync_ctl's own.
ABSL_FLAG(int, timeout_s, 5, "Deadline of each server's status call, in seconds.");
ABSL_FLAG(int, stall_s, 60,
          "A step waiting for workers longer than this makes the job unhealthy (exit 1).");

namespace psync {
namespace {

// The job flags psync_ctl reads, which its --help lists: where the servers
// are and how to reach them. (It loads the whole job configuration, but the
// training's settings do not apply to it.)
constexpr absl::string_view kJobFlagsRead[] = {"config",  "servers", "num_servers",
                                               "tls_cert", "tls_key", "tls_ca",
                                               "auth_token_file"};

struct Row {
  std::string address;
  absl::StatusOr<proto::StatusResponse> status = absl::UnknownError("not asked");
};

std::string State(const proto::StatusResponse& s) {
  if (!s.ready()) return "starting";
  return s.registered() ? "training" : "ready";
}

std::string Bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20)) return absl::StrFormat("%.1f MiB", bytes / 1048576.0);
  return absl::StrFormat("%.1f KiB", bytes / 1024.0);
}

// "0s", "42s", "1m5s".
std::string WholeSeconds(absl::Duration d) {
  return d < absl::Seconds(1) ? "0s" : absl::FormatDuration(absl::Trunc(d, absl::Seconds(1)));
}

std::string Ranks(const google::protobuf::RepeatedField<int32_t>& ranks) {
  return ranks.empty() ? "-" : absl::StrJoin(ranks, ",");
}

// An elastic job's members, from server 0's answer (the first that
// answered if it did not): who trains, in the job's range, who waits to
// join at any server, and the coordinator's count of changes. Servers that
// hold other members, or are not ready, are in the middle of a change.
// Nothing for a fixed job.
void PrintMembership(const std::vector<Row>& rows) {
  const proto::StatusResponse* first = nullptr;
  std::set<int> pending;
  for (const Row& row : rows) {
    if (!row.status.ok()) continue;
    if (first == nullptr) first = &*row.status;
    pending.insert(row.status->pending_joins().begin(), row.status->pending_joins().end());
  }
  if (first == nullptr || first->min_workers() == 0) return;
  const proto::WorkerSet& members = first->members();
  std::string line =
      absl::StrCat("members: ", Ranks(members.ranks()), " (", members.ranks_size(), " of ",
                   first->min_workers(), "..", first->num_workers());
  if (members.ranks_size() > 0) {
    absl::StrAppend(&line, "; set ", members.id(), " from step ", members.first_step());
  }
  absl::StrAppend(&line, "); pending joins: ", pending.empty() ? "-" : absl::StrJoin(pending, ","),
                  "; membership changes: ");
  absl::StrAppend(&line, rows[0].status.ok() ? absl::StrCat(first->membership_changes())
                                             : std::string("? (server 0 did not answer)"));
  bool closed = false;  // a server takes no steps until the coordinator decides
  int64_t closed_ms = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].status.ok()) continue;
    closed |= !rows[i].status->ready();
    closed_ms = std::max(closed_ms, rows[i].status->no_steps_ms());
    if (rows[i].status->members().id() == members.id()) continue;
    absl::StrAppend(&line, "; server ", i, " has set ", rows[i].status->members().id(), " (",
                    Ranks(rows[i].status->members().ranks()), "): a change in progress");
  }
  // The members above are then the last decided: a change takes
  // milliseconds, but below min_workers the job waits for workers.
  if (closed && members.id() > 0) {
    absl::StrAppend(&line, "; changing for ", WholeSeconds(absl::Milliseconds(closed_ms)),
                    ": no steps until the coordinator decides the next members (at least ",
                    first->min_workers(),
                    "; server 0's log says whom it waits for)");
  }
  std::printf("%s\n", line.c_str());
}

// Why server `i` (its answer `s`) is stalled past `stall`, if it is, into
// `problems`: its lowest step has waited that long for workers, it could
// take no step at all (a restore or a change of an elastic job's members
// that does not end: below min_workers the job waits for workers), or
// workers that registered have been silent that long. Durations are the
// server's own measure: this host's clock may differ from it.
void AddStalls(const proto::StatusResponse& s, size_t i, absl::Duration stall,
               std::vector<std::string>* problems) {
  const std::string limit = absl::StrCat(" (--stall_s=", absl::GetFlag(FLAGS_stall_s), ")");
  const absl::Duration waited = absl::Milliseconds(s.waiting_ms());
  if (s.waiting_for_size() > 0 && waited > stall) {
    problems->push_back(absl::StrCat("stalled: server ", i, " has waited ", WholeSeconds(waited),
                                     " for worker(s) ", Ranks(s.waiting_for()), " at step ",
                                     s.version(), limit));
  }
  const absl::Duration no_steps = absl::Milliseconds(s.no_steps_ms());
  if (no_steps > stall) {
    problems->push_back(absl::StrCat(
        "stalled: server ", i, " has taken no steps for ", WholeSeconds(no_steps), ": ",
        s.min_workers() > 0
            ? absl::StrCat("the coordinator has not decided the members (at least ",
                           s.min_workers(), " workers; server 0's log says whom it has)")
            : absl::StrCat("generation ", s.generation(), " is not ready (the servers' logs say why)"),
        limit));
  }
  // Nobody may be pushing at all: a worker that died and stayed away.
  const absl::Duration missing = absl::Milliseconds(s.missing_ms());
  if (s.missing_workers_size() > 0 && missing > stall) {
    problems->push_back(absl::StrCat("stalled: worker(s) ", Ranks(s.missing_workers()),
                                     " registered with server ", i, " and have been silent for ",
                                     WholeSeconds(missing), limit));
  }
}

int PrintStatus(const std::vector<std::string>& addresses, const PeerSecurity& security) {
  const absl::Time deadline = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  const absl::Duration stall = absl::Seconds(absl::GetFlag(FLAGS_stall_s));
  std::vector<Row> rows(addresses.size());
  {
    std::vector<std::thread> askers;
    for (size_t i = 0; i < addresses.size(); ++i) {
      rows[i].address = addresses[i];
      askers.emplace_back([&row = rows[i], deadline, &security] {
        row.status = FetchServerStatus(row.address, deadline, security);
      });
    }
    for (std::thread& t : askers) t.join();
  }

  std::printf("%-4s %-32s %-9s %4s %8s %-10s %-10s %-19s %10s %10s %16s\n", "rank", "address",
              "state", "gen", "version", "workers", "waits for", "since", "bytes", "checkpoint",
              "incarnation");
  std::vector<std::string> problems;
  // Mixed BLAS kernels spoil bit-identity, not training: warned, not unhealthy.
  std::set<std::string> warnings;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    if (!row.status.ok()) {
      std::printf("%-4zu %-32s %-9s %s\n", i, row.address.c_str(), "DOWN",
                  std::string(row.status.status().message()).c_str());
      problems.push_back(absl::StrCat("server ", i, " (", row.address, ") did not answer: ",
                                      row.status.status().message()));
      continue;
    }
    const proto::StatusResponse& s = *row.status;
    warnings.insert(s.mixed_blas().begin(), s.mixed_blas().end());
    std::string since = "-";
    if (s.waiting_for_size() > 0) {
      // The server's own measure: this host's clock may differ from it.
      const absl::Time t = absl::FromUnixMillis(s.waiting_since_unix_ms());
      since = absl::StrCat(absl::FormatTime("%H:%M:%S", t, absl::LocalTimeZone()), " (",
                           WholeSeconds(absl::Milliseconds(s.waiting_ms())), ")");
    }
    AddStalls(s, i, stall, &problems);
    const std::string checkpoint =
        !s.checkpoints_on() ? "off"
                            : (s.newest_checkpoint() < 0 ? "none" : absl::StrCat(s.newest_checkpoint()));
    if (s.server_rank() != static_cast<int>(i)) {
      problems.push_back(absl::StrCat(row.address, " is server ", s.server_rank(),
                                      ", expected server ", i, " (check --servers)"));
    }
    std::printf("%-4zu %-32s %-9s %4lld %8lld %-10s %-10s %-19s %10s %10s %016llx\n", i,
                row.address.c_str(), State(s).c_str(), static_cast<long long>(s.generation()),
                static_cast<long long>(s.version()),
                absl::StrCat(Ranks(s.registered_workers()), " of ", s.num_workers()).c_str(),
                Ranks(s.waiting_for()).c_str(), since.c_str(), Bytes(s.bytes()).c_str(),
                checkpoint.c_str(), static_cast<unsigned long long>(s.incarnation()));
  }
  PrintMembership(rows);
  for (const std::string& warning : warnings) {
    std::printf("WARNING: mixed BLAS kernels: %s\n", warning.c_str());
  }
  if (!problems.empty()) {
    std::printf("UNHEALTHY: %s\n", absl::StrJoin(problems, "; ").c_str());
    return 1;
  }
  std::printf("healthy: %zu servers answered\n", rows.size());
  return 0;
}

}  // namespace
}  // namespace psync

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "psync_ctl status --servers=h:p,... | --config=FILE: every server's state, exit 0 if "
      "healthy, 1 if not (with the reason), 2 for bad flags.");
  if (psync::PrintHelpIfRequested(argc, argv, __FILE__, psync::kJobFlagsRead)) return 0;
  std::vector<char*> args = psync::ParseFlagsOrExit(argc, argv);
  if (args.size() != 2 || std::string(args[1]) != "status") {
    std::fprintf(stderr, "psync_ctl: expected the command 'status', got '%s'\n",
                 args.size() < 2 ? "" : absl::StrJoin(args.begin() + 1, args.end(), " ").c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_timeout_s) < 1 || absl::GetFlag(FLAGS_stall_s) < 1) {
    std::fprintf(stderr, "psync_ctl: --timeout_s is %d and --stall_s is %d, expected both >= 1\n",
                 absl::GetFlag(FLAGS_timeout_s), absl::GetFlag(FLAGS_stall_s));
    return 2;
  }
  absl::StatusOr<psync::LoadedJobConfig> loaded = psync::LoadJobConfig();
  if (!loaded.ok()) {
    std::fprintf(stderr, "psync_ctl: bad configuration: %s\n",
                 std::string(loaded.status().message()).c_str());
    return 2;
  }
  psync::proto::JobConfig& config = loaded->config;
  const absl::StatusOr<psync::PeerSecurity> security = psync::LoadPeerSecurity(config.security());
  if (!security.ok()) {
    std::fprintf(stderr, "psync_ctl: bad configuration: %s\n",
                 std::string(security.status().message()).c_str());
    return 2;
  }
  // A {rank} pattern without a count (the Kubernetes job's ConfigMap: the
  // count is the StatefulSet's): server 0 says how many there are.
  if (absl::StrContains(config.cluster().servers(), "{rank}") &&
      loaded->sources.count("num_servers") == 0) {
    config.mutable_cluster()->set_num_servers(1);
    const std::string first = psync::ServerAddresses(config)[0];
    absl::StatusOr<psync::proto::StatusResponse> status = psync::FetchServerStatus(
        first, absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s)), *security);
    if (!status.ok()) {
      std::printf("UNHEALTHY: server 0 (%s) did not answer, so the server count is unknown "
                  "(give --num_servers): %s\n",
                  first.c_str(), std::string(status.status().message()).c_str());
      return 1;
    }
    config.mutable_cluster()->set_num_servers(status->num_servers());
  }
  const std::vector<std::string> addresses = psync::ServerAddresses(config);
  if (addresses.empty()) {
    std::fprintf(stderr,
                 "psync_ctl: --servers is empty, expected the servers' addresses (host:port,... "
                 "or a {rank} pattern), by flag or in --config\n");
    return 2;
  }
  return psync::PrintStatus(addresses, *security);
}
