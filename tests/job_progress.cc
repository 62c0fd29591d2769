#include "tests/job_progress.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace psync {

JobProgress::JobProgress(const std::vector<std::string>& servers)
    : versions_(new std::atomic<int64_t>[servers.size()]) {
  // A restarted server is asked again at once: gRPC's default backoff
  // (1 s, growing with each failure) let a job run past a kill's version.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 10);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 10);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 50);
  for (size_t i = 0; i < servers.size(); ++i) {
    versions_[i] = -1;
    stubs_.push_back(proto::ParameterServer::NewStub(
        grpc::CreateCustomChannel(servers[i], grpc::InsecureChannelCredentials(), args)));
  }
  for (size_t i = 0; i < servers.size(); ++i) {
    askers_.emplace_back([this, i] { Ask(stubs_[i].get(), &versions_[i]); });
  }
}

JobProgress::~JobProgress() {
  done_ = true;
  for (std::thread& t : askers_) t.join();
}

void JobProgress::Ask(proto::ParameterServer::Stub* stub, std::atomic<int64_t>* version) {
  while (!done_) {
    grpc::ClientContext context;
    // Generous: on a loaded machine a busy server answers late, and a late
    // answer is better than none (each server has its own asker).
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    proto::StatusResponse status;
    const bool answered = stub->GetStatus(&context, proto::StatusRequest(), &status).ok();
    *version = answered && status.registered() ? status.version() : -1;
    absl::SleepFor(absl::Milliseconds(1));
  }
}

std::unique_ptr<JobProgress> JobProgress::OfLaunch(Subprocess& launcher, absl::Time deadline) {
  while (absl::Now() < deadline) {
    const std::vector<std::string> servers = LaunchedServers(launcher.output());
    if (!servers.empty()) return std::make_unique<JobProgress>(servers);
    if (launcher.Poll().has_value()) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  ADD_FAILURE() << "psync_launch never said where its servers are:\n" << launcher.output();
  return nullptr;
}

int64_t JobProgress::Version() const {
  int64_t version = -1;
  for (size_t i = 0; i < stubs_.size(); ++i) version = std::max<int64_t>(version, versions_[i]);
  return version;
}

int64_t JobProgress::AwaitVersion(int64_t version, Subprocess& running, absl::Time deadline) {
  while (absl::Now() < deadline && !running.Poll().has_value()) {
    const int64_t now = Version();
    if (now >= version) return now;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return -1;
}

}  // namespace psync
