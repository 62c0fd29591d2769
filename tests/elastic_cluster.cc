#include "tests/elastic_cluster.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/format/safetensors.h"
#include "common/process/free_ports.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/psync.grpc.pb.h"
#include "tests/test_util.h"

namespace psync {

std::vector<std::string> ElasticJob::TrainingFlags(const std::string& run) const {
  std::vector<std::string> flags = {
      "--deterministic", absl::StrCat("--seed=", seed), absl::StrCat("--steps=", steps),
      "--synthetic_samples=4000", "--lr=0.05", "--momentum=0.9", "--model=" + model,
      absl::StrCat("--chunk_kb=", chunk_kb), absl::StrCat("--devices=", devices),
      absl::StrCat("--batch_per_device=", batch), absl::StrCat("--num_servers=", servers),
      absl::StrCat("--num_workers=", max_workers)};
  if (checkpoint_every > 0) {
    flags.push_back(absl::StrCat("--checkpoint_every=", checkpoint_every));
    flags.push_back("--checkpoint_dir=" + FreshDir(absl::StrCat(name, "_", run, "_ckpt")));
  }
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

std::string ElasticJob::ExportPath(const std::string& run) const {
  return absl::StrCat(TempDir(), "/", name, "_", run, ".safetensors");
}

std::string RunFixed(const ElasticJob& job) {
  const std::string path = job.ExportPath("fixed");
  std::vector<std::string> flags = job.TrainingFlags("fixed");
  flags.insert(flags.end(), {"--export_path=" + path, "--timeout_s=60"});
  const JobRun run = RunLaunch(job.name + "_fixed", flags);
  if (run.exit_code != 0) {
    ADD_FAILURE() << "the fixed run of " << job.name << " failed:\n" << run.output;
    return "";
  }
  return path;
}

double RelativeDifference(const std::string& a_path, const std::string& b_path) {
  auto a = ReadSafetensors(a_path);
  auto b = ReadSafetensors(b_path);
  if (!a.ok() || !b.ok()) {
    ADD_FAILURE() << a.status() << "; " << b.status();
    return INFINITY;
  }
  if (a->size() != b->size()) {
    ADD_FAILURE() << a->size() << " tensors vs " << b->size();
    return INFINITY;
  }
  double worst = 0;
  for (const auto& [name, ta] : *a) {
    auto tb = b->find(name);
    if (tb == b->end() || tb->second.shape != ta.shape) {
      ADD_FAILURE() << name << " is missing or of another shape in " << b_path;
      return INFINITY;
    }
    for (size_t i = 0; i < ta.values.size(); ++i) {
      const double w = ta.values[i], v = tb->second.values[i];
      const double d = std::fabs(w - v) / (1 + std::fabs(w));
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
  }
  return worst;
}

ElasticCluster::ElasticCluster(ElasticJob job)
    : job_(std::move(job)),
      flags_(job_.TrainingFlags("elastic")),
      servers_(job_.servers),
      workers_(job_.max_workers) {}

// Workers first: a server that dies before them would only make them retry.
ElasticCluster::~ElasticCluster() {
  progress_.reset();
  for (auto& w : workers_) w.reset();
  for (auto& s : servers_) s.reset();
}

std::vector<std::string> ElasticCluster::ServerArgv(int i) const {
  std::vector<std::string> argv = {Runfile("server/psync_server"),
                                   absl::StrCat("--server_rank=", i),
                                   absl::StrCat("--port=", ports_[i]),
                                   "--servers=" + absl::StrJoin(addresses_, ","),
                                   absl::StrCat("--min_workers=", job_.min_workers)};
  argv.insert(argv.end(), flags_.begin(), flags_.end());
  return argv;
}

bool ElasticCluster::Start() {
  PortReservation reserved;
  for (int i = 0; i < job_.servers; ++i) {
    absl::StatusOr<int> port = reserved.Add();
    if (!port.ok()) {
      ADD_FAILURE() << port.status();
      return false;
    }
    ports_.push_back(*port);
    addresses_.push_back(absl::StrCat("127.0.0.1:", *port));
  }
  reserved.Release();
  for (int i = 0; i < job_.servers; ++i) {
    servers_[i] = StartProcess(ServerArgv(i), absl::StrCat(job_.name, " server ", i));
    if (servers_[i] == nullptr) return false;
  }
  // Asked once they listen: a channel made before waits out gRPC's backoff.
  for (int i = 0; i < job_.servers; ++i) {
    if (!WaitForOutput(*servers_[i], "listening on", absl::Now() + absl::Seconds(30))) {
      ADD_FAILURE() << "server " << i << " of " << job_.name << " never listened:\n"
                    << servers_[i]->output();
      return false;
    }
  }
  progress_ = std::make_unique<JobProgress>(addresses_);
  return true;
}

bool ElasticCluster::RestartServer(int i) {
  servers_[i].reset();
  servers_[i] = StartProcess(ServerArgv(i), absl::StrCat(job_.name, " server ", i));
  return servers_[i] != nullptr;
}

bool ElasticCluster::StartWorker(int rank) {
  std::vector<std::string> argv = {Runfile("worker/psync_worker"),
                                   absl::StrCat("--worker_rank=", rank),
                                   "--servers=" + absl::StrJoin(addresses_, ","),
                                   absl::StrCat("--min_workers=", job_.min_workers),
                                   "--export_path=" + job_.ExportPath("elastic")};
  argv.insert(argv.end(), flags_.begin(), flags_.end());
  workers_[rank].reset();
  workers_[rank] = StartProcess(argv, absl::StrCat(job_.name, " worker ", rank));
  return workers_[rank] != nullptr;
}

int64_t ElasticCluster::AwaitVersion(int64_t version) {
  return progress_->AwaitVersion(version, *workers_[0], absl::Now() + absl::Minutes(1));
}

bool ElasticCluster::KillInThePushes(int rank, absl::Time deadline) {
  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> stubs;
  for (const std::string& a : addresses_) {
    stubs.push_back(proto::ParameterServer::NewStub(
        grpc::CreateChannel(a, grpc::InsecureChannelCredentials())));
  }
  auto status = [&](int i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    proto::StatusResponse s;
    if (!stubs[i]->GetStatus(&context, proto::StatusRequest(), &s).ok()) s.Clear();
    return s;
  };
  auto waits_for = [rank](const proto::StatusResponse& s) {
    return std::count(s.waiting_for().begin(), s.waiting_for().end(), rank) > 0;
  };
  bool seen = false;
  while (!seen && absl::Now() < deadline && !workers_[rank]->Poll().has_value()) {
    const proto::StatusResponse a = status(0), b = status(1);
    seen = a.version() == b.version() && a.waiting_for_size() > 0 &&
           b.waiting_for_size() > 0 && waits_for(a) != waits_for(b);
    if (seen) break;
  }
  workers_[rank]->Signal(SIGKILL);
  return seen;
}

bool ElasticCluster::AwaitFinished(const std::vector<int>& ranks, absl::Time deadline) {
  bool all = true;
  for (int r : ranks) {
    const std::optional<int> code = workers_[r]->Wait(deadline);
    if (code != 0) {
      ADD_FAILURE() << "worker " << r << " of " << job_.name << " ended with "
                    << (code.has_value() ? absl::StrCat(*code) : "nothing (still running)");
      all = false;
    }
  }
  return all;
}

std::string ElasticCluster::Logs() const {
  std::string logs;
  for (const auto& s : servers_) {
    if (s != nullptr) absl::StrAppend(&logs, s->output());
  }
  for (const auto& w : workers_) {
    if (w != nullptr) absl::StrAppend(&logs, w->output());
  }
  return logs;
}

}  // namespace psync
