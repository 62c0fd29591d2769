#include "tests/job_progress.h"

#include <algorithm>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace psync {

JobProgress::JobProgress(const std::vector<std::string>& servers) {
  for (const std::string& address : servers) {
    stubs_.push_back(proto::ParameterServer::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials())));
  }
}

std::unique_ptr<JobProgress> JobProgress::OfLaunch(Subprocess& launcher, absl::Time deadline) {
  const std::string up = " servers up at ";
  while (absl::Now() < deadline) {
    const std::string output = launcher.output();
    if (const size_t at = output.find(up); at != std::string::npos) {
      const size_t from = at + up.size();
      const std::string list = output.substr(from, output.find_first_of(" ;\n", from) - from);
      return std::make_unique<JobProgress>(absl::StrSplit(list, ','));
    }
    if (launcher.Poll().has_value()) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  ADD_FAILURE() << "psync_launch never said where its servers are:\n" << launcher.output();
  return nullptr;
}

int64_t JobProgress::Version() {
  int64_t version = -1;
  for (auto& stub : stubs_) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    proto::StatusResponse status;
    if (stub->GetStatus(&context, proto::StatusRequest(), &status).ok() && status.registered()) {
      version = std::max<int64_t>(version, status.version());
    }
  }
  return version;
}

int64_t JobProgress::AwaitVersion(int64_t version, Subprocess& running, absl::Time deadline) {
  while (absl::Now() < deadline && !running.Poll().has_value()) {
    const int64_t now = Version();
    if (now >= version) return now;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return -1;
}

}  // namespace psync
