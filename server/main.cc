// psync_server: serves this server's shard of the parameters until SIGTERM.
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/flags_help.h"
#include "common/http/metrics_http.h"
#include "common/incarnation.h"
#include "common/job_config.h"
#include "common/job_flags.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/optimizer_kind.h"
#include "common/output_path.h"
#include "common/process_metrics.h"
#include "common/rpc/grpc_logging.h"
#include "common/rpc/tcp_congestion.h"
#include "common/security.h"
#include "common/status_macros.h"
#include "common/process_tuning.h"
#include "glog/logging.h"
#include "server/checkpoint_manager.h"
#include "server/coordinator.h"
#include "server/listener_watch.h"
#include "server/membership.h"
#include "server/rpc/coordinator_client.h"
#include "server/rpc/grpc_server.h"
#include "server/server_metrics.h"
#include "server/shard_store.h"

// The job's settings (--config and a flag per field) are in
// common/job_flags.h; these are this server's own.
ABSL_FLAG(std::string, port_file, "", "If set, the chosen port is written here once listening.");
ABSL_FLAG(std::string, server_rank, "0",
          "This server's rank in 0..num_servers-1, or auto: the ordinal its StatefulSet pod "
          "name ends in.");

namespace psync {
namespace {

// Exit codes, read by psync_launch, Kubernetes and systemd: 0 stopped by
// SIGTERM; 1 a failure (start it again); 2 bad flags or configuration and
// 3 the job cannot continue (both final); kExitListenerStuck below.
//
// A listening port stopped accepting (gRPC 1.51 never accepts on it again
// after accept4 failed with EMFILE, see listener_watch.h), so no restarted
// worker or peer could reach this server: a new process listens afresh.
// Not final: start it again, as after a crash.
constexpr int kExitListenerStuck = 4;
// How long a port's accept queue must stay non-empty and not shrink before
// the server gives up on it.
constexpr absl::Duration kListenerStuckAfter = absl::Seconds(5);

absl::StatusOr<ShardStoreOptions> StoreOptions(const proto::JobConfig& c) {
  ShardStoreOptions o;
  PSYNC_ASSIGN_OR_RETURN(o.server_rank, ResolveRank(Role::kServer, "--server_rank",
                                                     absl::GetFlag(FLAGS_server_rank),
                                                     c.cluster().num_servers()));
  o.num_servers = c.cluster().num_servers();
  o.num_workers = c.cluster().num_workers();
  o.deterministic = c.training().deterministic();
  o.max_message_bytes = int64_t{c.server().max_message_mb()} << 20;
  o.optimizer.momentum = static_cast<float>(c.optimizer().momentum());
  o.optimizer.weight_decay = static_cast<float>(c.optimizer().weight_decay());
  PSYNC_ASSIGN_OR_RETURN(o.optimizer.kind, ParseOptimizerKind(c.optimizer().optimizer()));
  o.optimizer.nesterov = c.optimizer().nesterov();
  o.optimizer.beta1 = static_cast<float>(c.optimizer().beta1());
  o.optimizer.beta2 = static_cast<float>(c.optimizer().beta2());
  o.optimizer.epsilon = static_cast<float>(c.optimizer().epsilon());
  o.lr_policy = LrPolicyOf(c);
  o.update_rule = UpdateRuleOf(c);
  o.worker_lease = absl::Milliseconds(c.timeouts().worker_lease_ms());
  o.peer_timeout = absl::Seconds(c.timeouts().peer_timeout_s());
  o.checkpoint_every = c.checkpoint().checkpoint_every();
  // Only a shutdown checkpoint reads version - 1's optimizer state.
  o.keep_previous_state = !c.checkpoint().checkpoint_dir().empty();
  o.available_memory = AvailableMemoryBytes;
  PSYNC_RETURN_IF_ERROR(o.Validate());
  return o;
}

// The form of --host that goes before ":port" (an IPv6 literal in
// brackets), once a socket could be bound to it: a name that does not
// resolve, or an address of another host, stops the server at start
// instead of failing inside gRPC.
absl::StatusOr<std::string> ListenHost(const std::string& host) {
  const std::string bare = absl::StartsWith(host, "[") && absl::EndsWith(host, "]")
                               ? host.substr(1, host.size() - 2)
                               : host;
  constexpr char kExpected[] =
      "expected an address of this host (IPv4, IPv6, in brackets or not, or a name), 0.0.0.0 "
      "or [::]";
  addrinfo hints = {};
  hints.ai_flags = AI_PASSIVE;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int error = getaddrinfo(bare.c_str(), nullptr, &hints, &found);
  if (error != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--host is '", host, "', which does not resolve (", gai_strerror(error), "); ", kExpected));
  }
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0);
  const bool bound = fd >= 0 && bind(fd, found->ai_addr, found->ai_addrlen) == 0;
  const int bind_error = errno;
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  if (!bound) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--host is '", host, "', where nothing can listen (", strerror(bind_error), "); ",
        kExpected));
  }
  return absl::StrContains(bare, ':') ? absl::StrCat("[", bare, "]") : bare;
}

// Logs, once every worker has said it trained every step, what a server
// started by hand has no other way to learn: the job is done, what is saved,
// and how to stop it. False (nothing logged) until then. `checkpoints` may
// be null (no --checkpoint_dir).
bool LogIfJobFinished(const ShardStore& store, int server_rank, CheckpointManager* checkpoints,
                      const std::string& checkpoint_dir) {
  const int64_t version = store.FinishedVersion();
  if (version == 0) return false;
  const std::string stop = absl::StrCat("stop me with SIGTERM (kill ", getpid(), ")");
  std::string saved;
  if (checkpoints == nullptr) {
    saved = absl::StrCat("no --checkpoint_dir, so nothing is saved here; ", stop);
  } else {
    const std::vector<CheckpointVersion> versions = checkpoints->Versions();
    saved = !versions.empty() && versions.front().version >= version
                ? absl::StrCat("final checkpoint written (version ", version, " in ",
                               checkpoint_dir, "); ", stop)
                : absl::StrCat(stop, ", which writes the final checkpoint (version ", version,
                               " in ", checkpoint_dir, ")");
  }
  LOG(INFO) << "server " << server_rank << ": the job finished at version " << version
            << " (every worker done); " << saved;
  return true;
}

int Run() {
  absl::StatusOr<LoadedJobConfig> loaded = LoadJobConfig();
  if (!loaded.ok()) {
    LOG(ERROR) << "bad configuration: " << loaded.status().message();
    return 2;
  }
  const proto::JobConfig& config = loaded->config;
  SetLogFormat(*ParseLogFormat(config.observability().log_format()));  // validated
  auto options = StoreOptions(config);
  if (!options.ok()) {
    LOG(ERROR) << "bad flags: " << options.status().message();
    return 2;
  }
  // Written once listening: a path that cannot take it fails now, with
  // the other bad flags, not after the port is open.
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    absl::Status writable = CheckOutputPath("--port_file", port_file);
    if (!writable.ok()) {
      LOG(ERROR) << "bad flags: " << writable.message();
      return 2;
    }
  }
  SetLogRank(options->server_rank);
  LOG(INFO) << "server " << options->server_rank << " starting; configuration: "
            << config.ShortDebugString();
  // Before the first gRPC object: the engine is chosen when gRPC starts.
  const int polling_threads =
      config.server().rpc_threads() + (config.server().health_port() > 0 ? 1 : 0);
  LOG(INFO) << "server " << options->server_rank << ": " << polling_threads
            << " gRPC polling thread(s), polling engine "
            << PollEachQueueOwnSockets(polling_threads);
  LOG(INFO) << "server " << options->server_rank << ": " << RaiseOpenFileLimit();

  // Block the stop signals in every thread (gRPC's inherit this mask) so the
  // main thread alone receives them through sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // A failed checkpoint write past a file size limit must return EFBIG,
  // not kill the server.
  signal(SIGXFSZ, SIG_IGN);

  auto store = ShardStore::Create(*options);
  if (!store.ok()) {
    LOG(ERROR) << store.status().message();
    return 2;
  }
  // Checked by LoadJobConfig; empty when none are given.
  const std::vector<std::string> addresses = ServerAddresses(config);
  if (options->num_servers > 1 && static_cast<int>(addresses.size()) != options->num_servers) {
    LOG(ERROR) << "bad flags: --servers lists " << addresses.size() << " addresses, expected "
               << options->num_servers << " (--num_servers): every server must reach server 0";
    return 2;
  }
  const absl::StatusOr<std::string> listen_host = ListenHost(config.server().host());
  if (!listen_host.ok()) {
    LOG(ERROR) << "bad flags: " << listen_host.status().message();
    return 2;
  }
  std::unique_ptr<CheckpointManager> checkpoints;
  const std::string& checkpoint_dir = config.checkpoint().checkpoint_dir();
  if (!checkpoint_dir.empty()) {
    CheckpointManagerOptions c;
    c.dir = checkpoint_dir;
    c.server_rank = options->server_rank;
    c.num_servers = options->num_servers;
    c.keep = config.checkpoint().keep_checkpoints();
    c.optimizer = options->DescribeOptimizer();
    // A checkpoint of another learning-rate policy is refused too (the
    // constant one keeps the text older checkpoints carry).
    if (!options->lr_policy.IsConstant()) {
      absl::StrAppend(&c.optimizer, " ", options->lr_policy.Describe());
    }
    auto opened = CheckpointManager::Open(c);
    if (!opened.ok()) {
      LOG(ERROR) << "server " << options->server_rank << ": " << opened.status();
      return 2;
    }
    checkpoints = std::move(*opened);
    const auto versions = checkpoints->Versions();
    LOG(INFO) << "server " << options->server_rank << ": checkpoints in " << checkpoint_dir
              << ": " << (versions.empty() ? std::string("none")
                                           : absl::StrCat("newest version ", versions.front().version,
                                                          ", ", versions.size(), " restorable"));
    (*store)->SetSnapshotSink([m = checkpoints.get()](Snapshot s) { m->Enqueue(std::move(s)); });
    checkpoints->SetOnDone(
        [st = store->get()](int64_t v, const absl::Status&) { st->CheckpointDone(v); });
  }

  absl::StatusOr<PeerSecurity> security = LoadPeerSecurity(config.security());
  if (!security.ok()) {
    LOG(ERROR) << "bad configuration: " << security.status().message();
    return 2;
  }
  absl::StatusOr<TcpCongestion> tcp_congestion =
      ParseTcpCongestion(config.cluster().tcp_congestion());
  if (!tcp_congestion.ok()) {
    LOG(ERROR) << "bad configuration: " << tcp_congestion.status().message();
    return 2;
  }
  LOG(INFO) << "server " << options->server_rank
            << ": TCP congestion control: " << DescribeTcpCongestion(*tcp_congestion);
  if (!security->token.empty() && security->cert_pem.empty()) {
    LOG(WARNING) << "server " << options->server_rank
                 << ": a token without TLS travels in clear text, and a request's body is read "
                    "before its token is checked; give security.tls_cert, tls_key and tls_ca";
  }
  std::unique_ptr<Coordinator> coordinator;
  JoinFunction join;
  if (options->server_rank == 0) {
    coordinator = std::make_unique<Coordinator>(options->num_servers);
    join = [c = coordinator.get()](const JoinInfo& info) { return c->Join(info); };
  } else {
    join = CreateGrpcJoinFn(addresses[0], options->num_servers, absl::Seconds(2), *security);
  }

  MetricRegistry metrics;
  AddProcessMetrics(&metrics);
  AddServerMetrics(&metrics, store->get(), checkpoints.get());
  Gauge* listener_stuck = metrics.GetGauge(
      "psync_server_listener_stuck",
      "1 once a listening port has had connections waiting to be accepted for 5 s: it no "
      "longer accepts, and the server (health NOT_SERVING) writes its final checkpoint and "
      "exits 4 to be started again.");

  GrpcServerOptions server_options;
  server_options.metrics = &metrics;
  server_options.handshake_timeout = absl::Seconds(config.timeouts().handshake_timeout_s());
  server_options.idle_timeout = absl::Seconds(config.timeouts().idle_timeout_s());
  server_options.address = absl::StrCat(*listen_host, ":", config.server().port());
  server_options.max_pull_wait = absl::Seconds(config.timeouts().pull_timeout_s());
  server_options.max_waiting_calls = config.server().max_waiting_calls();
  server_options.max_waiting_per_connection = config.server().max_waiting_per_connection();
  server_options.shared_memory = config.cluster().shared_memory();
  server_options.rpc_threads = config.server().rpc_threads();
  server_options.coordinator = coordinator.get();
  server_options.security = *security;
  server_options.tcp_congestion = *tcp_congestion;
  if (config.server().health_port() > 0) {
    server_options.health_address =
        absl::StrCat(*listen_host, ":", config.server().health_port());
  }
  const uint64_t incarnation = NewIncarnation();
  server_options.incarnation = incarnation;
  if (checkpoints != nullptr) {
    server_options.newest_checkpoint = [m = checkpoints.get()]() -> int64_t {
      const std::vector<CheckpointVersion> versions = m->Versions();
      return versions.empty() ? -1 : versions.front().version;
    };
  }
  auto server = GrpcServer::Start(store->get(), server_options);
  if (!server.ok()) {
    // The reason, e.g. a port below 1024 without root (final: exit 2, as
    // for a bad flag) or one another process holds (1: it may be freed).
    LOG(ERROR) << "server " << options->server_rank << ": " << server.status().message();
    const absl::StatusCode code = server.status().code();
    return code == absl::StatusCode::kPermissionDenied ||
                   code == absl::StatusCode::kInvalidArgument
               ? 2
               : 1;
  }
  LOG(INFO) << "server " << options->server_rank << "/" << options->num_servers
            << " listening on " << *listen_host << ":" << (*server)->port()
            << " for " << options->num_workers << " workers (" << options->DescribeOptimizer()
            << ", " << options->lr_policy.Describe() << ", deterministic "
            << (options->deterministic ? "on" : "off") << ", checkpoints "
            << (checkpoint_dir.empty() ? std::string("off")
                                       : absl::StrCat(checkpoint_dir, " every ",
                                                      options->checkpoint_every, " steps"))
            << ", TLS " << (security->cert_pem.empty() ? "off" : "on, mutual")
            << ", token " << (security->token.empty() ? "off" : "required")
            << ((*server)->health_port() > 0
                    ? absl::StrCat(", health service also on :", (*server)->health_port())
                    : std::string())
            << ")";
  std::unique_ptr<MetricsHttpServer> metrics_http;
  const proto::ObservabilityConfig& observability = config.observability();
  if (observability.metrics_port() > 0) {
    // Training does not depend on it: a taken port costs the metrics only.
    auto started =
        MetricsHttpServer::Start(&metrics, observability.metrics_host(), observability.metrics_port());
    if (started.ok()) {
      metrics_http = std::move(*started);
      LOG(INFO) << "server " << options->server_rank << ": metrics on http://"
                << observability.metrics_host() << ":" << metrics_http->port() << "/metrics";
    } else {
      LOG(ERROR) << "server " << options->server_rank << ": " << started.status().message()
                 << "; serving without metrics";
    }
  }
  if (!port_file.empty()) {
    absl::Status written =
        WriteFileAtomically("--port_file", port_file, absl::StrCat((*server)->port(), "\n"));
    if (!written.ok()) {
      LOG(ERROR) << written.message();
      (*server)->Shutdown(absl::Now());
      return 1;
    }
  }
  Membership membership(store->get(), checkpoints.get(), join, absl::Milliseconds(100),
                        incarnation);
  membership.Start();

  // A listener that stops accepting (descriptors ran out) cannot recover in
  // gRPC 1.51: this process exits for its supervisor to start a new one.
  std::vector<int> listening = {(*server)->port()};
  if ((*server)->health_port() > 0) listening.push_back((*server)->health_port());
  ListenerWatch listener_watch(listening, kListenerStuckAfter);

  // Until a stop signal, a missing worker fails the job, or a port stops
  // accepting.
  int exit_code = 0;
  int signal = 0;
  const timespec slice = {0, 250 * 1000 * 1000};
  bool finish_logged = false;
  while (true) {
    signal = sigtimedwait(&stop_signals, nullptr, &slice);
    if (signal > 0) break;
    const std::vector<std::string> stuck_ports = listener_watch.Check(absl::Now());
    if (!stuck_ports.empty()) {
      listener_stuck->Set(1);
      (*server)->SetServing(false);
      LOG(ERROR) << "server " << options->server_rank << ": port "
                 << absl::StrJoin(stuck_ports, ", ")
                 << " no longer accepts connections (none accepted for "
                 << absl::FormatDuration(kListenerStuckAfter)
                 << "; gRPC stops accepting on a port for good once accept4 fails, e.g. with "
                    "'Too many open files' at the descriptor limit: see process_open_fds); "
                    "health is NOT_SERVING; "
                 << (checkpoints != nullptr ? "writing a final checkpoint and " : "")
                 << "exiting " << kExitListenerStuck
                 << " so that a supervisor (psync_launch, Kubernetes, systemd) starts this "
                    "server again, listening afresh";
      exit_code = kExitListenerStuck;
      break;
    }
    absl::Status peers = (*store)->CheckPeers();
    if (!peers.ok()) {
      LOG(ERROR) << "server " << options->server_rank << ": " << peers.message();
      absl::SleepFor(absl::Seconds(1));  // waiting workers get the error first
      exit_code = 3;
      break;
    }
    if (!finish_logged) {
      finish_logged =
          LogIfJobFinished(**store, options->server_rank, checkpoints.get(), checkpoint_dir);
    }
  }
  const StoreStatus status = (*store)->GetStatus();
  if (signal > 0) {
    LOG(INFO) << "server " << options->server_rank << ": received "
              << (signal == SIGTERM ? "SIGTERM" : "SIGINT") << ", shutting down at version "
              << status.version
              << (checkpoints == nullptr && !finish_logged && status.version > 0
                      ? "; no --checkpoint_dir, so the training state is lost: the job cannot "
                        "be resumed"
                      : "");
  }
  if (exit_code == kExitListenerStuck) {
    // Its connections may hold every descriptor the checkpoint file needs:
    // close them first (waiting calls end UNAVAILABLE; workers retry).
    (*server)->Shutdown(absl::Now() + absl::Seconds(2));
    server->reset();
  }
  if (checkpoints != nullptr && (exit_code == 0 || exit_code == kExitListenerStuck)) {
    // Within Kubernetes' default grace of 30 s after SIGTERM.
    std::vector<Snapshot> snapshots = (*store)->SnapshotForShutdown();
    int64_t state_version = 0;
    for (const Snapshot& s : snapshots) state_version = std::max(state_version, s.version);
    absl::Status written = checkpoints->WriteNow(std::move(snapshots),
                                                 absl::Now() + absl::Seconds(20));
    if (!written.ok()) {
      // Unless a checkpoint on disk holds this state, the steps since the
      // newest one are lost: say so in the exit code too, not only in the
      // log. (A newer version on disk is of a run the cluster rolled back.)
      const std::vector<CheckpointVersion> on_disk = checkpoints->Versions();
      const int64_t newest = on_disk.empty() ? 0 : on_disk.front().version;
      const bool saved =
          std::any_of(on_disk.begin(), on_disk.end(),
                      [&](const CheckpointVersion& v) { return v.version == state_version; });
      if (saved) {
        LOG(WARNING) << "server " << options->server_rank << ": final checkpoint: " << written
                     << "; version " << state_version << " is already on disk, nothing is lost";
      } else {
        LOG(ERROR) << "server " << options->server_rank << ": final checkpoint: " << written
                   << "; the state at version " << state_version
                   << " is NOT saved (newest checkpoint on disk: "
                   << (newest > 0 ? absl::StrCat("version ", newest) : std::string("none"))
                   << "); exiting " << (exit_code == 0 ? 1 : exit_code);
        if (exit_code == 0) exit_code = 1;
      }
    }
  }
  if (*server != nullptr) {
    (*server)->Shutdown(absl::Now() + absl::Seconds(2));
    server->reset();
  }
  LOG(INFO) << "server " << options->server_rank << " stopped"
            << (checkpoints == nullptr
                    ? std::string()
                    : absl::StrCat(" (checkpoints: ", checkpoints->written(), " written, ",
                                   checkpoints->failed(), " failed)"));
  return exit_code;
}

}  // namespace
}  // namespace psync

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("psync parameter server: owns a shard of the model's chunks.");
  if (psync::PrintHelpIfRequested(argc, argv, __FILE__)) return 0;
  psync::ParseFlagsOnlyOrExit(argc, argv);
  psync::KeepLargeAllocationsInHeap();
  psync::SkipMutexDeadlockDetection();
  psync::OneHeapArena();
  psync::InitLogging(argv[0], "server");
  psync::RouteGrpcLogsToGlog();
  return psync::Run();
}
