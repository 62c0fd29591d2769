#include "server/membership.h"

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace psync {
namespace {

constexpr absl::Duration kWaitLogInterval = absl::Seconds(5);
constexpr absl::Duration kBusyPeriod = absl::Milliseconds(10);
constexpr absl::Duration kBusyFor = absl::Seconds(1);

}  // namespace

Membership::Membership(ShardStore* store, CheckpointManager* checkpoints, JoinFunction join,
                       absl::Duration period, uint64_t incarnation)
    : store_(store),
      checkpoints_(checkpoints),
      join_(std::move(join)),
      period_(period),
      rank_(store->options().server_rank),
      incarnation_(incarnation) {}

Membership::~Membership() {
  store_->SetMembershipWake(nullptr);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Membership::Start() {
  store_->SetMembershipWake([this] { Wake(); });
  thread_ = std::thread([this] {
    while (true) {
      Tick();
      absl::MutexLock lock(&mu_);
      auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || woken_; };
      // While an elastic job's workers change, every round trip moves the
      // change on: the first second of it goes at the busy pace.
      const bool busy = !ready_ && store_->options().elastic() &&
                        absl::Now() - not_ready_since_ < kBusyFor;
      const absl::Duration wait = busy ? std::min(period_, kBusyPeriod) : period_;
      mu_.AwaitWithTimeout(absl::Condition(&stop), wait);
      if (stopping_) return;
      woken_ = false;
    }
  });
}

void Membership::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

void Membership::Tick() {
  JoinInfo info;
  info.server_rank = rank_;
  info.incarnation = incarnation_;
  info.generation = store_->generation();
  info.failed_generation = failed_generation_;
  if (checkpoints_ != nullptr) info.checkpoints = checkpoints_->Versions();
  info.elastic = store_->GetElasticReport();
  absl::StatusOr<JoinReply> reply = join_(info);
  const absl::Time now = absl::Now();
  if (!reply.ok() || reply->target_generation == 0) {
    if (now - last_wait_log_ >= kWaitLogInterval) {
      LOG(INFO) << "server " << rank_ << ": waiting for the coordinator: "
                << (reply.ok() ? "not every server has joined yet" : reply.status().ToString());
      last_wait_log_ = now;
    }
    return;
  }
  if (!reply->failure.empty()) {
    store_->Fail(absl::DeadlineExceededError(reply->failure));
    return;
  }
  if (info.generation != reply->target_generation && reply->keep_state) {
    store_->KeepForGeneration(reply->target_generation);
    ready_ = false;
    not_ready_since_ = absl::Now();
    LOG(INFO) << "server " << rank_ << ": generation " << reply->target_generation
              << ": the job's workers change; keeping this server's chunks";
  } else if (info.generation != reply->target_generation) {
    std::optional<RestoredState> state;
    if (reply->target_version > 0) {
      absl::StatusOr<RestoredState> loaded =
          checkpoints_ != nullptr
              ? checkpoints_->Load(reply->target_version)
              : absl::NotFoundError("this server has no --checkpoint_dir");
      if (!loaded.ok()) {
        LOG(ERROR) << "server " << rank_ << ": cannot restore version " << reply->target_version
                   << ": " << loaded.status();
        failed_generation_ = reply->target_generation;
        return;
      }
      state = std::move(*loaded);
    }
    store_->Restore(reply->target_generation, std::move(state));
    ready_ = false;
    not_ready_since_ = absl::Now();
    LOG(INFO) << "server " << rank_ << ": generation " << reply->target_generation << ": "
              << (reply->target_version > 0
                      ? absl::StrCat("restored checkpoint version ", reply->target_version)
                      : std::string("starting from the initial weights"));
  }
  if (reply->members.has_value() && reply->members->id != store_->members_id()) {
    store_->SetMembers(*reply->members);
  }
  if (reply->ready != ready_) {
    store_->SetReady(reply->ready);
    ready_ = reply->ready;
    if (ready_) {
      LOG(INFO) << "server " << rank_ << ": every server is at generation "
                << reply->target_generation << "; workers may register";
    }
  }
}

}  // namespace psync
