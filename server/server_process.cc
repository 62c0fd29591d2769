#include "server/server_process.h"

#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/job_flags.h"
#include "common/config/optimizer_kind.h"
#include "common/format/output_path.h"
#include "common/monitoring/logging.h"
#include "common/monitoring/process_metrics.h"
#include "common/process/exit_code.h"
#include "common/process/incarnation.h"
#include "common/process/process_tuning.h"
#include "common/security/certificate_names.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/listener_watch.h"
#include "server/membership.h"
#include "server/rpc/coordinator_client.h"
#include "server/run_summary.h"
#include "server/server_metrics.h"

namespace psync {
namespace {

// How long a port's accept queue must stay non-empty and not shrink before
// the server gives up on it.
constexpr absl::Duration kListenerStuckAfter = absl::Seconds(5);

// Found before serving; the same configuration would fail the same way
// after a restart.
absl::Status BadConfig(absl::Status s) {
  return WithExitCode(kExitBadConfig, std::move(s));
}

absl::Status Prefixed(absl::string_view prefix, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

// Workers and the other servers dial this server at its --servers entry,
// and gRPC refuses a certificate that does not name that host, but only in
// their handshakes, where every retry fails the same way: refused here,
// before serving. Without --servers (one server) nothing names the host.
absl::Status CheckCertificateNamesAddress(const proto::JobConfig& config, int rank,
                                          const PeerSecurity& security) {
  const std::vector<std::string> addresses = ServerAddresses(config);
  if (security.cert_pem.empty() || rank >= static_cast<int>(addresses.size())) {
    return absl::OkStatus();
  }
  const std::string host = HostOfAddress(addresses[rank]);
  return Prefixed("bad configuration: ",
                  CheckTlsCertNamesHost(
                      config.security().tls_cert(), security.cert_pem, host,
                      absl::StrCat("server ", rank, "'s address in --servers (", addresses[rank],
                                   ") that workers and servers dial, which gRPC would refuse in "
                                   "each handshake ('Peer name ", host,
                                   " is not in peer certificate')")));
}

absl::StatusOr<ShardStoreOptions> StoreOptions(const proto::JobConfig& c,
                                               const std::string& server_rank) {
  ShardStoreOptions o;
  PSYNC_ASSIGN_OR_RETURN(o.server_rank, ResolveRank(Role::kServer, "--server_rank", server_rank,
                                                     c.cluster().num_servers()));
  o.num_servers = c.cluster().num_servers();
  o.num_workers = c.cluster().num_workers();
  o.min_workers = c.cluster().min_workers();
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
  PSYNC_ASSIGN_OR_RETURN(o.wire_dtype, ParseWireDType(c.training().wire_dtype()));
  o.init_from = InitSourceOf(c);
  o.worker_lease = absl::Milliseconds(c.timeouts().worker_lease_ms());
  o.peer_timeout = absl::Seconds(c.timeouts().peer_timeout_s());
  o.checkpoint_every = c.checkpoint().checkpoint_every();
  // Only a shutdown checkpoint reads version - 1's optimizer state.
  // An elastic job's change of workers takes chunks a step back
  // (SetShardMembers), optimizer state included.
  o.keep_previous_state = !c.checkpoint().checkpoint_dir().empty() || o.min_workers > 0;
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

}  // namespace

int ServerProcess::Run() {
  // A failed checkpoint write past a file size limit must return EFBIG,
  // not kill the server.
  signal(SIGXFSZ, SIG_IGN);
  absl::Status started = Configure();
  if (started.ok()) started = OpenCheckpoints();
  if (started.ok()) started = StartServing();
  if (!started.ok()) {
    LOG(ERROR) << started.message();
    if (server_ != nullptr) server_->Shutdown(absl::Now());
    return ExitCodeOf(started, kExitFailed);
  }
  Membership membership(store_.get(), checkpoints_.get(), join_, absl::Milliseconds(100),
                        incarnation_);
  membership.Start();
  int signal = 0;
  const int exit_code = Serve(&signal);
  return Stop(exit_code, signal);
}

absl::Status ServerProcess::Configure() {
  absl::StatusOr<LoadedJobConfig> loaded = LoadJobConfig();
  if (!loaded.ok()) return BadConfig(Prefixed("bad configuration: ", loaded.status()));
  loaded_ = *std::move(loaded);
  const proto::JobConfig& config = loaded_.config;
  SetLogFormat(*ParseLogFormat(config.observability().log_format()));  // validated
  absl::StatusOr<ShardStoreOptions> options = StoreOptions(config, flags_.server_rank);
  if (!options.ok()) return BadConfig(Prefixed("bad flags: ", options.status()));
  options_ = *std::move(options);
  // Written once listening: a path that cannot take it fails now, with
  // the other bad flags, not after the port is open.
  if (!flags_.port_file.empty()) {
    absl::Status writable = CheckOutputPath("--port_file", flags_.port_file);
    if (!writable.ok()) return BadConfig(Prefixed("bad flags: ", writable));
  }
  const int rank = options_.server_rank;
  SetLogRank(rank);
  LOG(INFO) << "server " << rank << " starting; configuration: " << config.ShortDebugString();
  // Before the first gRPC object: the engine is chosen when gRPC starts.
  const int polling_threads =
      config.server().rpc_threads() + (config.server().health_port() > 0 ? 1 : 0);
  LOG(INFO) << "server " << rank << ": " << polling_threads
            << " gRPC polling thread(s), polling engine "
            << PollEachQueueOwnSockets(polling_threads);
  LOG(INFO) << "server " << rank << ": " << RaiseOpenFileLimit();

  absl::StatusOr<std::unique_ptr<ShardStore>> store = ShardStore::Create(options_);
  if (!store.ok()) return BadConfig(store.status());
  store_ = *std::move(store);
  // Checked by LoadJobConfig; empty when none are given.
  const std::vector<std::string> addresses = ServerAddresses(config);
  if (options_.num_servers > 1 && static_cast<int>(addresses.size()) != options_.num_servers) {
    return BadConfig(absl::InvalidArgumentError(absl::StrCat(
        "bad flags: --servers lists ", addresses.size(), " addresses, expected ",
        options_.num_servers, " (--num_servers): every server must reach server 0")));
  }
  absl::StatusOr<std::string> listen_host = ListenHost(config.server().host());
  if (!listen_host.ok()) return BadConfig(Prefixed("bad flags: ", listen_host.status()));
  listen_host_ = *std::move(listen_host);
  return absl::OkStatus();
}

absl::Status ServerProcess::OpenCheckpoints() {
  const proto::JobConfig& config = loaded_.config;
  const std::string& dir = config.checkpoint().checkpoint_dir();
  if (dir.empty()) return absl::OkStatus();
  CheckpointManagerOptions c;
  c.dir = dir;
  c.server_rank = options_.server_rank;
  c.num_servers = options_.num_servers;
  c.keep = config.checkpoint().keep_checkpoints();
  c.optimizer = options_.DescribeOptimizer();
  // A checkpoint of another learning-rate policy is refused too (the
  // constant one keeps the text older checkpoints carry).
  if (!options_.lr_policy.IsConstant()) {
    absl::StrAppend(&c.optimizer, " ", options_.lr_policy.Describe());
  }
  auto opened = CheckpointManager::Open(c);
  if (!opened.ok()) {
    return BadConfig(absl::Status(opened.status().code(),
                                  absl::StrCat("server ", options_.server_rank, ": ",
                                               opened.status().ToString())));
  }
  checkpoints_ = *std::move(opened);
  const auto versions = checkpoints_->Versions();
  LOG(INFO) << "server " << options_.server_rank << ": checkpoints in " << dir << ": "
            << (versions.empty() ? std::string("none")
                                 : absl::StrCat("newest version ", versions.front().version, ", ",
                                                versions.size(), " restorable"));
  store_->SetSnapshotSink([m = checkpoints_.get()](Snapshot s) { m->Enqueue(std::move(s)); });
  checkpoints_->SetOnDone(
      [st = store_.get()](int64_t v, const absl::Status&) { st->CheckpointDone(v); });
  return absl::OkStatus();
}

absl::Status ServerProcess::StartServing() {
  const proto::JobConfig& config = loaded_.config;
  const int rank = options_.server_rank;
  absl::StatusOr<PeerSecurity> security = LoadServerSecurity(config.security());
  if (!security.ok()) return BadConfig(Prefixed("bad configuration: ", security.status()));
  PSYNC_RETURN_IF_ERROR(BadConfig(CheckCertificateNamesAddress(config, rank, *security)));
  absl::StatusOr<TcpCongestion> congestion = ParseTcpCongestion(config.cluster().tcp_congestion());
  if (!congestion.ok()) return BadConfig(Prefixed("bad configuration: ", congestion.status()));
  LOG(INFO) << "server " << rank << ": TCP congestion control: "
            << DescribeTcpCongestion(*congestion);
  if (!security->token.empty() && security->cert_pem.empty()) {
    LOG(WARNING) << "server " << rank
                 << ": a token without TLS travels in clear text, for anyone on the path to "
                    "read and replay; give security.tls_cert, tls_key and tls_ca";
  }
  if (security->server_token.empty() && (!security->token.empty() || !security->cert_pem.empty())) {
    LOG(WARNING) << "server " << rank
                 << ": no security.server_token_file: Join takes the job's credential, so any "
                    "worker could join as a server and roll the job back; give the servers a "
                    "token of their own (docs/security.md#roles)";
  }
  if (rank == 0) {
    CoordinatorOptions c;
    c.num_servers = options_.num_servers;
    c.num_workers = options_.num_workers;
    c.min_workers = options_.min_workers;
    c.peer_timeout = options_.peer_timeout;
    coordinator_ = std::make_unique<Coordinator>(c);
    join_ = [c = coordinator_.get()](const JoinInfo& info) { return c->Join(info); };
  } else {
    join_ = CreateGrpcJoinFn(ServerAddresses(config)[0], options_.num_servers,
                             options_.num_workers, absl::Seconds(2), *security);
  }
  AddProcessMetrics(&metrics_);
  AddServerMetrics(&metrics_, store_.get(), checkpoints_.get(), coordinator_.get());
  listener_stuck_ = metrics_.GetGauge(
      "psync_server_listener_stuck",
      "1 once a listening port has had connections waiting to be accepted for 5 s: it no "
      "longer accepts, and the server (health NOT_SERVING) writes its final checkpoint and "
      "exits 4 to be started again.");
  incarnation_ = NewIncarnation();
  auto server = GrpcServer::Start(store_.get(), ServerOptions(*security, *congestion));
  if (!server.ok()) {
    // The reason, e.g. a port below 1024 without root (final, as for a bad
    // flag) or one another process holds (it may be freed).
    const absl::StatusCode code = server.status().code();
    return WithExitCode(code == absl::StatusCode::kPermissionDenied ||
                                code == absl::StatusCode::kInvalidArgument
                            ? kExitBadConfig
                            : kExitFailed,
                        Prefixed(absl::StrCat("server ", rank, ": "), server.status()));
  }
  server_ = *std::move(server);
  LogListening(*security);
  StartMetricsHttp();
  if (!flags_.port_file.empty()) {
    PSYNC_RETURN_IF_ERROR(WriteFileAtomically("--port_file", flags_.port_file,
                                              absl::StrCat(server_->port(), "\n")));
  }
  return absl::OkStatus();
}

GrpcServerOptions ServerProcess::ServerOptions(const PeerSecurity& security,
                                               TcpCongestion congestion) {
  const proto::JobConfig& config = loaded_.config;
  GrpcServerOptions o;
  o.metrics = &metrics_;
  o.handshake_timeout = absl::Seconds(config.timeouts().handshake_timeout_s());
  o.idle_timeout = absl::Seconds(config.timeouts().idle_timeout_s());
  o.address = absl::StrCat(listen_host_, ":", config.server().port());
  o.max_pull_wait = absl::Seconds(config.timeouts().pull_timeout_s());
  o.max_waiting_calls = config.server().max_waiting_calls();
  o.max_waiting_per_connection = config.server().max_waiting_per_connection();
  o.shared_memory = config.cluster().shared_memory();
  o.payload_lane = config.cluster().payload_lane();
  o.payload_port = config.server().payload_port();
  o.rpc_threads = config.server().rpc_threads();
  o.coordinator = coordinator_.get();
  o.security = security;
  o.tcp_congestion = congestion;
  if (config.server().health_port() > 0) {
    o.health_address = absl::StrCat(listen_host_, ":", config.server().health_port());
  }
  o.incarnation = incarnation_;
  if (checkpoints_ != nullptr) {
    o.newest_checkpoint = [m = checkpoints_.get()]() -> int64_t {
      const std::vector<CheckpointVersion> versions = m->Versions();
      return versions.empty() ? -1 : versions.front().version;
    };
  }
  return o;
}

void ServerProcess::LogListening(const PeerSecurity& security) const {
  const std::string& checkpoint_dir = loaded_.config.checkpoint().checkpoint_dir();
  LOG(INFO) << "server " << options_.server_rank << "/" << options_.num_servers
            << " listening on " << listen_host_ << ":" << server_->port() << " for "
            << options_.num_workers << " workers (" << options_.DescribeOptimizer() << ", "
            << options_.lr_policy.Describe() << ", deterministic "
            << (options_.deterministic ? "on" : "off") << ", checkpoints "
            << (checkpoint_dir.empty() ? std::string("off")
                                       : absl::StrCat(checkpoint_dir, " every ",
                                                      options_.checkpoint_every, " steps"))
            << ", TLS " << (security.cert_pem.empty() ? "off" : "on, mutual") << ", token "
            << (security.token.empty() ? "off" : "required")
            << (security.server_token.empty() ? "" : ", Join by the servers' token")
            << (server_->health_port() > 0
                    ? absl::StrCat(", health service also on :", server_->health_port())
                    : std::string())
            << (server_->payload_port() > 0
                    ? absl::StrCat(", payload lane on :", server_->payload_port())
                    : std::string())
            << ")";
}

void ServerProcess::StartMetricsHttp() {
  const proto::ObservabilityConfig& observability = loaded_.config.observability();
  if (observability.metrics_port() <= 0) return;
  // Training does not depend on it: a taken port costs the metrics only.
  auto started = MetricsHttpServer::Start(&metrics_, observability.metrics_host(),
                                          observability.metrics_port());
  if (!started.ok()) {
    LOG(ERROR) << "server " << options_.server_rank << ": " << started.status().message()
               << "; serving without metrics";
    return;
  }
  metrics_http_ = *std::move(started);
  LOG(INFO) << "server " << options_.server_rank << ": metrics on http://"
            << observability.metrics_host() << ":" << metrics_http_->port() << "/metrics";
}

int ServerProcess::Serve(int* signal) {
  // A listener that stops accepting (descriptors ran out) cannot recover in
  // gRPC 1.51: this process exits for its supervisor to start a new one.
  std::vector<int> listening = {server_->port()};
  if (server_->health_port() > 0) listening.push_back(server_->health_port());
  ListenerWatch listener_watch(listening, kListenerStuckAfter);
  const int rank = options_.server_rank;
  while (true) {
    *signal = stop_signals_.Wait(absl::Milliseconds(250));
    if (*signal > 0) return 0;
    const std::vector<std::string> stuck_ports = listener_watch.Check(absl::Now());
    if (!stuck_ports.empty()) {
      listener_stuck_->Set(1);
      server_->SetServing(false);
      LOG(ERROR) << "server " << rank << ": port " << absl::StrJoin(stuck_ports, ", ")
                 << " no longer accepts connections (none accepted for "
                 << absl::FormatDuration(kListenerStuckAfter)
                 << "; gRPC stops accepting on a port for good once accept4 fails, e.g. with "
                    "'Too many open files' at the descriptor limit: see process_open_fds); "
                    "health is NOT_SERVING; "
                 << (checkpoints_ != nullptr ? "writing a final checkpoint and " : "")
                 << "exiting " << kExitListenerStuck
                 << " so that a supervisor (psync_launch, Kubernetes, systemd) starts this "
                    "server again, listening afresh";
      return kExitListenerStuck;
    }
    absl::Status peers = store_->CheckPeers();
    if (!peers.ok()) {
      LOG(ERROR) << "server " << rank << ": " << peers.message();
      absl::SleepFor(absl::Seconds(1));  // waiting workers get the error first
      return kExitCannotContinue;
    }
    if (!finish_logged_) {
      finish_logged_ = LogIfJobFinished(*store_, rank, checkpoints_.get(),
                                        loaded_.config.checkpoint().checkpoint_dir());
    }
  }
}

int ServerProcess::Stop(int exit_code, int signal) {
  const int rank = options_.server_rank;
  if (signal > 0) {
    const StoreStatus status = store_->GetStatus();
    LOG(INFO) << "server " << rank << ": received " << StopSignals::Name(signal)
              << ", shutting down at version " << status.version
              << (checkpoints_ == nullptr && !finish_logged_ && status.version > 0
                      ? "; no --checkpoint_dir, so the training state is lost: the job cannot "
                        "be resumed"
                      : "");
  }
  if (exit_code == kExitListenerStuck) {
    // Its connections may hold every descriptor the checkpoint file needs:
    // close them first (waiting calls end UNAVAILABLE; workers retry).
    server_->Shutdown(absl::Now() + absl::Seconds(2));
    server_.reset();
  }
  if (checkpoints_ != nullptr && (exit_code == 0 || exit_code == kExitListenerStuck)) {
    exit_code = WriteFinalCheckpoint(*store_, *checkpoints_, rank, exit_code);
  }
  if (server_ != nullptr) {
    server_->Shutdown(absl::Now() + absl::Seconds(2));
    server_.reset();
  }
  LogStopped(rank, checkpoints_.get());
  return exit_code;
}

}  // namespace psync
