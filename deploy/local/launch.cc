// psync_launch: runs a whole cluster on this host as real processes on
// 127.0.0.1 — K servers, N workers — relays their logs with role prefixes,
// and stops everything if any process fails or the deadline passes.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/flags_help.h"
#include "common/output_path.h"
#include "common/runfiles.h"
#include "common/status_macros.h"
#include "common/subprocess.h"

ABSL_FLAG(int, servers, 2, "Parameter servers to start.");
ABSL_FLAG(int, workers, 2, "Workers to start.");
ABSL_FLAG(int, devices_per_worker, 2, "CPU devices per worker.");
ABSL_FLAG(std::string, model, "mlp", "Model: mlp or cnn.");
ABSL_FLAG(std::string, device, "auto", "Worker devices: auto, cpu or cuda.");
ABSL_FLAG(int64_t, batch_per_device, 32, "Samples per device per step.");
ABSL_FLAG(std::string, device_weights, "", "Relative device speeds, e.g. 1,3 (default: equal).");
ABSL_FLAG(int, epochs, 1, "Epochs to train (ignored if --steps > 0).");
ABSL_FLAG(int64_t, steps, 0, "If > 0, total steps to train instead of --epochs.");
ABSL_FLAG(double, lr, 0.1, "SGD learning rate.");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum.");
ABSL_FLAG(double, weight_decay, 0.0, "L2 weight decay.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the initial weights and the data order.");
ABSL_FLAG(bool, deterministic, false, "Servers sum gradients in worker-rank order.");
ABSL_FLAG(int64_t, chunk_kb, 256, "Largest chunk of a tensor on one server, in KiB.");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist", "Fashion-MNIST directory.");
ABSL_FLAG(int64_t, synthetic_samples, 0, "If > 0, train on this many synthetic samples.");
ABSL_FLAG(std::string, export, "", "Write the final weights here (safetensors).");
ABSL_FLAG(std::string, summary, "", "Write a JSON summary of the run here.");
ABSL_FLAG(int, timeout_s, 1800, "Stop everything and fail after this many seconds.");
ABSL_FLAG(std::string, bin_dir, "", "Directory holding psync_server and psync_worker "
          "(default: found next to this binary in the Bazel output tree).");

namespace psync {
namespace {

std::atomic<int> g_stop_signal{0};

void OnStopSignal(int signal) { g_stop_signal.store(signal); }

absl::Status Validate() {
  const int servers = absl::GetFlag(FLAGS_servers), workers = absl::GetFlag(FLAGS_workers);
  const int devices = absl::GetFlag(FLAGS_devices_per_worker);
  if (servers < 1 || servers > 64) {
    return absl::InvalidArgumentError(absl::StrCat("--servers is ", servers, ", expected 1..64"));
  }
  if (workers < 1 || workers > 64) {
    return absl::InvalidArgumentError(absl::StrCat("--workers is ", workers, ", expected 1..64"));
  }
  if (devices < 1 || devices > 64) {
    return absl::InvalidArgumentError(absl::StrCat("--devices_per_worker is ", devices,
                                                   ", expected 1..64"));
  }
  if (absl::GetFlag(FLAGS_timeout_s) < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--timeout_s is ",
                                                   absl::GetFlag(FLAGS_timeout_s), ", expected >= 1"));
  }
  // Checked before any process starts (worker 0 checks them again).
  const std::string export_path = absl::GetFlag(FLAGS_export);
  const std::string summary = absl::GetFlag(FLAGS_summary);
  if (!export_path.empty()) PSYNC_RETURN_IF_ERROR(CheckOutputPath("--export", export_path));
  if (!summary.empty()) PSYNC_RETURN_IF_ERROR(CheckOutputPath("--summary", summary));
  // Everything else (learning rate, batch, model, ...) is validated by the
  // daemons themselves, which fail at start with the same messages.
  return absl::OkStatus();
}

class Launcher {
 public:
  absl::Status Run() {
    PSYNC_RETURN_IF_ERROR(Validate());
    const std::string bin_dir = absl::GetFlag(FLAGS_bin_dir);
    PSYNC_ASSIGN_OR_RETURN(const std::string server_bin,
                           FindBinary("server", "psync_server", bin_dir));
    PSYNC_ASSIGN_OR_RETURN(const std::string worker_bin,
                           FindBinary("worker", "psync_worker", bin_dir));
    char dir_template[] = "/tmp/psync_launch.XXXXXX";
    if (mkdtemp(dir_template) == nullptr) return absl::InternalError("cannot create a temp dir");
    dir_ = dir_template;
    deadline_ = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
    absl::Status s = Supervise(server_bin, worker_bin);
    StopAll(s.ok());
    std::filesystem::remove_all(dir_);
    return s;
  }

 private:
  absl::Status Supervise(const std::string& server_bin, const std::string& worker_bin) {
    const int num_servers = absl::GetFlag(FLAGS_servers);
    const int num_workers = absl::GetFlag(FLAGS_workers);
    for (int i = 0; i < num_servers; ++i) {
      PSYNC_ASSIGN_OR_RETURN(
          auto p, Subprocess::Start(
                      {server_bin, absl::StrCat("--server_rank=", i),
                       absl::StrCat("--num_servers=", num_servers),
                       absl::StrCat("--num_workers=", num_workers), "--host=127.0.0.1", "--port=0",
                       absl::StrCat("--port_file=", dir_, "/server", i, ".port"),
                       absl::StrCat("--lr=", absl::GetFlag(FLAGS_lr)),
                       absl::StrCat("--momentum=", absl::GetFlag(FLAGS_momentum)),
                       absl::StrCat("--weight_decay=", absl::GetFlag(FLAGS_weight_decay)),
                       absl::StrCat("--deterministic=", absl::GetFlag(FLAGS_deterministic))},
                      absl::StrCat("[server ", i, "] ")));
      servers_.push_back(std::move(p));
    }
    std::vector<std::string> addresses;
    for (int i = 0; i < num_servers; ++i) {
      PSYNC_ASSIGN_OR_RETURN(const int port, WaitForPort(i));
      addresses.push_back(absl::StrCat("127.0.0.1:", port));
    }
    const std::string server_list = absl::StrJoin(addresses, ",");
    std::printf("[launch] %d servers up at %s; starting %d workers x %d devices\n", num_servers,
                server_list.c_str(), num_workers, absl::GetFlag(FLAGS_devices_per_worker));
    std::fflush(stdout);
    for (int w = 0; w < num_workers; ++w) {
      std::vector<std::string> argv = {
          worker_bin,
          absl::StrCat("--servers=", server_list),
          absl::StrCat("--worker_rank=", w),
          absl::StrCat("--num_workers=", num_workers),
          absl::StrCat("--devices=", absl::GetFlag(FLAGS_devices_per_worker)),
          absl::StrCat("--model=", absl::GetFlag(FLAGS_model)),
          absl::StrCat("--device=", absl::GetFlag(FLAGS_device)),
          absl::StrCat("--batch_per_device=", absl::GetFlag(FLAGS_batch_per_device)),
          absl::StrCat("--device_weights=", absl::GetFlag(FLAGS_device_weights)),
          absl::StrCat("--epochs=", absl::GetFlag(FLAGS_epochs)),
          absl::StrCat("--steps=", absl::GetFlag(FLAGS_steps)),
          absl::StrCat("--seed=", absl::GetFlag(FLAGS_seed)),
          absl::StrCat("--chunk_kb=", absl::GetFlag(FLAGS_chunk_kb)),
          absl::StrCat("--data_dir=", absl::GetFlag(FLAGS_data_dir)),
          absl::StrCat("--synthetic_samples=", absl::GetFlag(FLAGS_synthetic_samples))};
      if (w == 0) {
        argv.push_back(absl::StrCat("--export_path=", absl::GetFlag(FLAGS_export)));
        argv.push_back(absl::StrCat("--summary=", absl::GetFlag(FLAGS_summary)));
      }
      PSYNC_ASSIGN_OR_RETURN(auto p, Subprocess::Start(argv, absl::StrCat("[worker ", w, "] ")));
      workers_.push_back(std::move(p));
    }
    // Watch until every worker has finished.
    std::vector<bool> done(num_workers, false);
    int remaining = num_workers;
    while (remaining > 0) {
      PSYNC_RETURN_IF_ERROR(CheckStopAndDeadline("training"));
      for (int i = 0; i < num_servers; ++i) {
        if (auto code = servers_[i]->Poll()) {
          return absl::AbortedError(absl::StrCat("server ", i, " exited with code ", *code,
                                                 " while workers were running"));
        }
      }
      for (int w = 0; w < num_workers; ++w) {
        if (done[w]) continue;
        if (auto code = workers_[w]->Poll()) {
          if (*code != 0) {
            return absl::AbortedError(absl::StrCat("worker ", w, " exited with code ", *code));
          }
          done[w] = true;
          --remaining;
        }
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int> WaitForPort(int server) {
    const std::string path = absl::StrCat(dir_, "/server", server, ".port");
    const absl::Time until = std::min(deadline_, absl::Now() + absl::Seconds(30));
    while (true) {
      std::ifstream in(path);
      int port = 0;
      if (in >> port && port > 0) return port;
      if (auto code = servers_[server]->Poll()) {
        return absl::AbortedError(absl::StrCat("server ", server, " exited with code ", *code,
                                               " before listening"));
      }
      PSYNC_RETURN_IF_ERROR(CheckStopAndDeadline("server start"));
      if (absl::Now() > until) {
        return absl::DeadlineExceededError(absl::StrCat("server ", server,
                                                        " did not start listening within 30 s"));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  absl::Status CheckStopAndDeadline(const char* phase) {
    if (const int sig = g_stop_signal.load()) {
      return absl::CancelledError(absl::StrCat("received signal ", sig, " during ", phase));
    }
    if (absl::Now() > deadline_) {
      return absl::DeadlineExceededError(absl::StrCat(
          "--timeout_s=", absl::GetFlag(FLAGS_timeout_s), " passed during ", phase));
    }
    return absl::OkStatus();
  }

  // Workers first (they may still be running after a failure), then servers.
  void StopAll(bool success) {
    for (auto& w : workers_) {
      if (!w->Poll().has_value()) w->Stop(absl::Seconds(2));
    }
    for (size_t i = 0; i < servers_.size(); ++i) {
      const int code = servers_[i]->Stop(absl::Seconds(5));
      if (success && code != 0) {
        std::printf("[launch] server %zu exited with code %d at shutdown\n", i, code);
      }
    }
    workers_.clear();
    servers_.clear();
  }

  std::string dir_;
  absl::Time deadline_;
  std::vector<std::unique_ptr<Subprocess>> servers_, workers_;
};

}  // namespace
}  // namespace psync

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Runs a psync cluster (servers and workers) on 127.0.0.1.");
  if (psync::PrintHelpIfRequested(argc, argv, __FILE__)) return 0;
  absl::ParseCommandLine(argc, argv);
  struct sigaction sa = {};
  sa.sa_handler = psync::OnStopSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  const absl::Time start = absl::Now();
  absl::Status s = psync::Launcher().Run();
  if (!s.ok()) {
    std::printf("[launch] FAILED: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("[launch] done in %.1f s\n", absl::ToDoubleSeconds(absl::Now() - start));
  return 0;
}
