// psync_server: serves this server's shard of the parameters until SIGTERM
// (server/server_process.h).
#include "absl/flags/flag.h"
#include "common/config/job_flags.h"
#include "common/monitoring/logging.h"
#include "common/process/daemon_start.h"
#include "common/process/process_tuning.h"
#include "common/rpc/grpc_logging.h"
#include "server/server_process.h"

// The job's settings (--config and a flag per field) are in
// common/config/job_flags.h; these are this server's own.
ABSL_FLAG(std::string, port_file, "", "If set, the chosen port is written here once listening.");
ABSL_FLAG(std::string, server_rank, "0",
          "This server's rank in 0..num_servers-1, or auto: the ordinal its StatefulSet pod "
          "name ends in.");

int main(int argc, char** argv) {
  if (!psync::StartDaemon(argc, argv,
                          "psync parameter server: owns a shard of the model's chunks.",
                          __FILE__)) {
    return 0;  // --help
  }
  psync::OneHeapArena();
  psync::InitLogging(argv[0], "server");
  psync::RouteGrpcLogsToGlog();
  psync::ServerProcess server(
      {absl::GetFlag(FLAGS_server_rank), absl::GetFlag(FLAGS_port_file)});
  return server.Run();
}
