// psync_server: serves this server's shard of the parameters until SIGTERM.
#include <signal.h>

#include <cstdio>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/flags_help.h"
#include "common/malloc_tuning.h"
#include "glog/logging.h"
#include "server/rpc/grpc_server.h"
#include "server/shard_store.h"

ABSL_FLAG(std::string, host, "127.0.0.1", "Address to listen on (0.0.0.0 for all).");
ABSL_FLAG(int, port, 0, "Port to listen on; 0 picks a free one (see --port_file).");
ABSL_FLAG(std::string, port_file, "", "If set, the chosen port is written here once listening.");
ABSL_FLAG(int, server_rank, 0, "This server's rank in 0..num_servers-1.");
ABSL_FLAG(int, num_servers, 1, "Number of servers in the cluster.");
ABSL_FLAG(int, num_workers, 1, "Number of workers that push each step.");
ABSL_FLAG(double, lr, 0.1, "SGD learning rate.");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum.");
ABSL_FLAG(double, weight_decay, 0.0, "L2 weight decay.");
ABSL_FLAG(bool, deterministic, false, "Sum worker gradients in rank order (bitwise reproducible).");
ABSL_FLAG(int, max_message_mb, 256, "Largest gRPC message accepted or sent, in MiB.");
ABSL_FLAG(int, pull_timeout_s, 120, "Longest a pull waits for its version.");

namespace psync {
namespace {

absl::StatusOr<ShardStoreOptions> OptionsFromFlags() {
  ShardStoreOptions o;
  o.server_rank = absl::GetFlag(FLAGS_server_rank);
  o.num_servers = absl::GetFlag(FLAGS_num_servers);
  o.num_workers = absl::GetFlag(FLAGS_num_workers);
  o.deterministic = absl::GetFlag(FLAGS_deterministic);
  const int mb = absl::GetFlag(FLAGS_max_message_mb);
  if (mb < 2 || mb > 2047) {
    return absl::InvalidArgumentError(absl::StrCat("--max_message_mb is ", mb, ", expected 2..2047"));
  }
  o.max_message_bytes = int64_t{mb} << 20;
  o.sgd.learning_rate = static_cast<float>(absl::GetFlag(FLAGS_lr));
  o.sgd.momentum = static_cast<float>(absl::GetFlag(FLAGS_momentum));
  o.sgd.weight_decay = static_cast<float>(absl::GetFlag(FLAGS_weight_decay));
  absl::Status s = o.Validate();
  if (!s.ok()) return s;
  return o;
}

int Run() {
  auto options = OptionsFromFlags();
  if (!options.ok()) {
    LOG(ERROR) << "bad flags: " << options.status().message();
    return 2;
  }
  const int port = absl::GetFlag(FLAGS_port);
  const int pull_timeout_s = absl::GetFlag(FLAGS_pull_timeout_s);
  if (port < 0 || port > 65535 || pull_timeout_s < 1) {
    LOG(ERROR) << "bad flags: --port is " << port << " (expected 0..65535), --pull_timeout_s is "
               << pull_timeout_s << " (expected >= 1)";
    return 2;
  }

  // Block the stop signals in every thread (gRPC's inherit this mask) so the
  // main thread alone receives them through sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto store = ShardStore::Create(*options);
  if (!store.ok()) {
    LOG(ERROR) << store.status().message();
    return 2;
  }
  GrpcServerOptions server_options;
  server_options.address = absl::StrCat(absl::GetFlag(FLAGS_host), ":", port);
  server_options.max_pull_wait = absl::Seconds(pull_timeout_s);
  auto server = GrpcServer::Start(store->get(), server_options);
  if (!server.ok()) {
    LOG(ERROR) << server.status().message();
    return 1;
  }
  LOG(INFO) << "server " << options->server_rank << "/" << options->num_servers
            << " listening on " << absl::GetFlag(FLAGS_host) << ":" << (*server)->port()
            << " for " << options->num_workers << " workers (lr " << options->sgd.learning_rate
            << ", momentum " << options->sgd.momentum << ", weight decay "
            << options->sgd.weight_decay << ", deterministic "
            << (options->deterministic ? "on" : "off") << ")";
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    // Write then rename, so a reader never sees a partial file.
    const std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << (*server)->port() << "\n";
    if (std::rename(tmp.c_str(), port_file.c_str()) != 0) {
      LOG(ERROR) << "cannot write --port_file " << port_file;
      (*server)->Shutdown(absl::Now());
      return 1;
    }
  }

  int signal = 0;
  sigwait(&stop_signals, &signal);
  const StoreStatus status = (*store)->GetStatus();
  LOG(INFO) << "received " << (signal == SIGTERM ? "SIGTERM" : "SIGINT")
            << ", shutting down at version " << status.version;
  (*server)->Shutdown(absl::Now() + absl::Seconds(2));
  server->reset();
  LOG(INFO) << "server " << options->server_rank << " stopped";
  return 0;
}

}  // namespace
}  // namespace psync

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("psync parameter server: owns a shard of the model's chunks.");
  if (psync::PrintHelpIfRequested(argc, argv, __FILE__)) return 0;
  absl::ParseCommandLine(argc, argv);
  psync::KeepLargeAllocationsInHeap();
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  return psync::Run();
}
