// What the elastic-job tests share: a job's flags, its fixed-size
// reference run, the comparison of two exports, and a cluster of real
// psync_server and psync_worker processes (no launcher) whose workers and
// servers a test starts, stops and kills while the job runs.
#ifndef PSYNC_TESTS_ELASTIC_CLUSTER_H_
#define PSYNC_TESTS_ELASTIC_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/process/subprocess.h"
#include "tests/job_progress.h"

namespace psync {

// One job: the same flags train its elastic run and its fixed-size
// reference (max_workers workers throughout: the same global batch).
struct ElasticJob {
  std::string name;
  int servers = 1;
  int max_workers = 3;
  int min_workers = 1;
  int devices = 1;
  int batch = 8;
  int steps = 200;
  int seed = 1;
  std::string model = "mlp";
  int chunk_kb = 256;
  int checkpoint_every = 0;  // > 0: each run checkpoints into a fresh folder of its own
  std::vector<std::string> extra;  // more flags for every process of both runs

  // The training flags every process of run `run` ("fixed", "elastic") gets.
  std::vector<std::string> TrainingFlags(const std::string& run) const;
  // Where each run's worker 0 exports the weights.
  std::string ExportPath(const std::string& run) const;
};

// Runs the fixed-size reference through psync_launch; its export's path,
// empty (and a test failure) if it failed.
std::string RunFixed(const ElasticJob& job);

// max |a-b| / (1 + |a|) over every weight of two exports; infinity (and a
// test failure) if they cannot be read or differ in names or shapes.
double RelativeDifference(const std::string& a_path, const std::string& b_path);

// The servers and workers of an elastic run on 127.0.0.1. Every process
// is killed when this is destroyed. Not thread-safe.
class ElasticCluster {
 public:
  explicit ElasticCluster(ElasticJob job);
  ~ElasticCluster();

  // Starts every server (ports chosen now); false and a test failure if
  // one cannot start.
  bool Start();
  bool StartWorker(int rank);
  // Starts server `i` again with the same port and flags.
  bool RestartServer(int i);

  Subprocess& server(int i) { return *servers_[i]; }
  Subprocess& worker(int rank) { return *workers_[rank]; }
  JobProgress& progress() { return *progress_; }
  const std::vector<std::string>& addresses() const { return addresses_; }

  // Waits until `version` is reached, watching worker 0; -1 if worker 0
  // ended or a minute passed first.
  int64_t AwaitVersion(int64_t version);

  // SIGKILLs worker `rank` once it has pushed part of a step but not all
  // of it: server A's oldest chunk no longer waits for it while server
  // B's still does (GetStatus's waiting_for). Needs 2 servers. True if it
  // saw that before `deadline`; else kills it anyway and returns false.
  bool KillInThePushes(int rank, absl::Time deadline);

  // Waits for every worker in `ranks` to exit; true if each exited 0.
  bool AwaitFinished(const std::vector<int>& ranks, absl::Time deadline);

  // Every process's output, each line prefixed by its name.
  std::string Logs() const;

 private:
  std::vector<std::string> ServerArgv(int i) const;

  const ElasticJob job_;
  const std::vector<std::string> flags_;  // job_.TrainingFlags("elastic")
  std::vector<int> ports_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<Subprocess>> servers_, workers_;
  std::unique_ptr<JobProgress> progress_;
};

}  // namespace psync

#endif  // PSYNC_TESTS_ELASTIC_CLUSTER_H_
