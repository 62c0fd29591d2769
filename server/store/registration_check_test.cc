#include "server/store/registration_check.h"

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using absl::StatusCode;
using ::testing::HasSubstr;

// One tensor of 6 floats in chunks of 2: chunks 0..2.
Layout SmallLayout(uint64_t seed = 5) { return *Layout::Create({{"w", {2, 3}}}, 8, 1, seed); }

RegisterArgs Args(const Layout& layout, int rank = 0, int workers = 2) {
  RegisterArgs a;
  a.worker_rank = rank;
  a.num_workers = workers;
  a.layout = &layout;
  a.claimed_fingerprint = layout.fingerprint();
  a.incarnation = 7;
  return a;
}

ShardStoreOptions TwoWorkers() {
  ShardStoreOptions o;
  o.num_workers = 2;
  return o;
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(RegistrationCheckTest, ARequestThatFitsPasses) {
  const Layout layout = SmallLayout();
  const RegistrationCheck check(TwoWorkers());
  EXPECT_TRUE(check.CheckRequest(Args(layout, 1)).ok());
  EXPECT_TRUE(check.CheckJob(Args(layout, 1), nullptr).ok());
}

TEST(RegistrationCheckTest, TheRequestIsCheckedAgainstTheServersOptions) {
  const Layout layout = SmallLayout();
  const RegistrationCheck check(TwoWorkers());
  absl::Status s = check.CheckRequest(Args(layout, 0, 3));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(s), "Register: worker says the cluster has 3 workers, this server was "
                        "started for 2");
  s = check.CheckRequest(Args(layout, 2));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(s), "Register: worker rank 2 is out of range 0..1");
  RegisterArgs lying = Args(layout);
  lying.claimed_fingerprint ^= 1;
  s = check.CheckRequest(lying);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("Register: worker 0 claims layout fingerprint"));
  const Layout two_servers = *Layout::Create({{"w", {2, 3}}}, 8, 2, 5);
  s = check.CheckRequest(Args(two_servers));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(s), "Register: layout is for 2 servers, this cluster has 1");
}

TEST(RegistrationCheckTest, AChunkBeyondTheMessageLimitIsRefused) {
  ShardStoreOptions o;
  o.max_message_bytes = 2 << 20;
  const Layout chunky = *Layout::Create({{"w", {1 << 20}}}, 2 << 20, 1, 0);
  const absl::Status s = RegistrationCheck(o).CheckRequest(Args(chunky, 0, 1));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(Message(s), HasSubstr("chunk 0 of tensor 'w' has 2097152 bytes, more than the "
                                    "message limit of 2097152 bytes less 1 MiB headroom allows"));
}

TEST(RegistrationCheckTest, DeterministicGradientBuffersAreBounded) {
  ShardStoreOptions o;
  o.num_workers = 4;
  o.deterministic = true;
  o.max_message_bytes = int64_t{2} << 30;
  // 8 GiB in 1 GiB chunks (a layout allocates nothing): 4 x 8 GiB > 16 GiB.
  const Layout big = *Layout::Create({{"w", {int64_t{1} << 31}}}, int64_t{1} << 30, 1, 0);
  const absl::Status s = RegistrationCheck(o).CheckRequest(Args(big, 0, 4));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(Message(s), HasSubstr("deterministic mode keeps one gradient per worker: 4 x "
                                    "8589934592 bytes is over the 17179869184-byte limit"));
  o.deterministic = false;
  EXPECT_TRUE(RegistrationCheck(o).CheckRequest(Args(big, 0, 4)).ok());
}

TEST(RegistrationCheckTest, AnotherLayoutThanTheShardsIsRefusedNamingItsOrigin) {
  const Layout layout = SmallLayout();
  auto shard = NewShard(TwoWorkers(), layout, TrainingShape(), 0);
  shard->origin = "set by worker 0's registration";
  const RegistrationCheck check(TwoWorkers());
  EXPECT_TRUE(check.CheckJob(Args(layout, 1), shard.get()).ok());
  const Layout other = SmallLayout(6);
  const absl::Status s = check.CheckJob(Args(other, 1), shard.get());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(s), HasSubstr("worker 1's layout"));
  EXPECT_THAT(Message(s), HasSubstr("set by worker 0's registration"));
  EXPECT_THAT(Message(s), HasSubstr("the seed: 6 in the worker's, 5 in the server's"));
}

TEST(RegistrationCheckTest, TheTrainingShapeMustBeValidAndTheJobs) {
  const Layout layout = SmallLayout();
  TrainingShape job;
  job.devices = 2;
  job.batch_per_device = 32;
  auto shard = NewShard(TwoWorkers(), layout, job, 0);
  const RegistrationCheck check(TwoWorkers());
  RegisterArgs a = Args(layout, 1);
  a.shape = job;
  EXPECT_TRUE(check.CheckJob(a, shard.get()).ok());
  a.shape.batch_per_device = 16;
  absl::Status s = check.CheckJob(a, shard.get());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(s), HasSubstr("Register: worker 1: "));
  EXPECT_THAT(Message(s), HasSubstr("batch_per_device is '16', the job's is '32'"));
  a.shape.batch_per_device = -1;
  s = check.CheckJob(a, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("Register: worker 1: "));
}

// A server whose rate `lr` is scaled linearly from `base_batch`.
ShardStoreOptions LinearlyScaled(double lr, int64_t base_batch) {
  ShardStoreOptions o;
  o.lr_policy.lr = lr;
  o.lr_policy.scaling = LrScaling::kLinear;
  o.lr_policy.base_batch = base_batch;
  return o;
}

// The lone worker's registration, one device of `batch` samples.
RegisterArgs OneDevice(const Layout& layout, int64_t batch) {
  RegisterArgs a = Args(layout, 0, 1);
  a.shape.devices = 1;
  a.shape.batch_per_device = batch;
  return a;
}

TEST(RegistrationCheckTest, AScaledLearningRatePastFloat32IsRefused) {
  ShardStoreOptions o = LinearlyScaled(3e38, 1);
  const Layout layout = SmallLayout();
  RegisterArgs a = OneDevice(layout, 2);
  const absl::Status s = RegistrationCheck(o).CheckJob(a, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("with a global batch of 2 the learning rate (lr=3e+38 "
                                    "scaling=linear base_batch=1"));
  EXPECT_THAT(Message(s), HasSubstr(") reaches inf, past float32's range"));
  a.shape.batch_per_device = 1;
  EXPECT_TRUE(RegistrationCheck(o).CheckJob(a, nullptr).ok());
}

// A rate that float32 rounds to 0 would leave every weight as it is, step
// after step, and the job would report success.
TEST(RegistrationCheckTest, AScaledLearningRateThatVanishesInFloat32IsRefused) {
  ShardStoreOptions o = LinearlyScaled(1e-44, 1000000000);
  const Layout layout = SmallLayout();
  const RegisterArgs a = OneDevice(layout, 64);
  const absl::Status s = RegistrationCheck(o).CheckJob(a, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s), HasSubstr("with a global batch of 64 the learning rate (lr=1e-44 "));
  EXPECT_THAT(Message(s), HasSubstr(") reaches 6.4e-52, which is 0 in float32: no step would "
                                    "change the weights; raise --lr or lower --base_batch"));
  o.lr_policy.base_batch = 64;  // 1e-44 itself: a subnormal float32, but not 0
  EXPECT_TRUE(RegistrationCheck(o).CheckJob(a, nullptr).ok());
}

TEST(RegistrationCheckTest, OtherOptimizerSettingsAreRefusedUnlessEitherIsUnsaid) {
  ShardStoreOptions o = TwoWorkers();
  o.update_rule = "optimizer { lr: 0.1 }";
  const RegistrationCheck check(o);
  const Layout layout = SmallLayout();
  RegisterArgs a = Args(layout);
  a.update_rule = "optimizer { }";
  const absl::Status s = check.CheckJob(a, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(s), HasSubstr("worker 0's optimizer settings are 'optimizer { }', "
                                    "server 0's are 'optimizer { lr: 0.1 }'"));
  a.update_rule.clear();
  EXPECT_TRUE(check.CheckJob(a, nullptr).ok());
  a.update_rule = "optimizer { }";
  EXPECT_TRUE(RegistrationCheck(TwoWorkers()).CheckJob(a, nullptr).ok());
}

TEST(RegistrationCheckTest, AnotherInitialWeightsSourceIsRefusedUnlessUnsaid) {
  ShardStoreOptions o = TwoWorkers();
  o.init_from = InitSource::kWorker;
  const RegistrationCheck check(o);
  const Layout layout = SmallLayout();
  RegisterArgs a = Args(layout, 1);
  a.init_from = InitSource::kSeed;
  const absl::Status s = check.CheckJob(a, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(s), HasSubstr("worker 1 takes its initial weights from the seed, server 0 "
                                    "from the worker: every server and worker of a job needs "
                                    "the same --init_from"));
  a.init_from = std::nullopt;  // a tool
  EXPECT_TRUE(check.CheckJob(a, nullptr).ok());
  a.init_from = InitSource::kWorker;
  EXPECT_TRUE(check.CheckJob(a, nullptr).ok());
}

// A worker of another --wire_dtype would hold weights rounded unlike the
// others' (and change them through its rounded gradients).
TEST(RegistrationCheckTest, AnotherWireDTypeIsRefusedUnlessUnsaid) {
  ShardStoreOptions o = TwoWorkers();
  o.wire_dtype = WireDType::kFloat32;
  const RegistrationCheck check(o);
  const Layout layout = SmallLayout();
  RegisterArgs a = Args(layout, 1);
  a.wire_dtype = WireDType::kBf16;
  const absl::Status s = check.CheckJob(a, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(s), HasSubstr("worker 1 sends gradients and weights as bf16, server 0's "
                                    "job says float32: every server and worker of a job needs "
                                    "the same --wire_dtype"));
  a.wire_dtype = std::nullopt;  // a tool
  EXPECT_TRUE(check.CheckJob(a, nullptr).ok());
  a.wire_dtype = WireDType::kFloat32;
  EXPECT_TRUE(check.CheckJob(a, nullptr).ok());
}

TEST(RegistrationCheckTest, OtherFrozenTensorsAreRefusedNamingTheFirst) {
  const RegistrationCheck check(TwoWorkers());
  const Layout layout = SmallLayout();
  const std::string a64(64, 'a'), b64(64, 'b');
  const std::optional<JobFrozenTensors> job =
      JobFrozenTensors{{{"proj.weight", a64}, {"proj.bias", b64}}, "worker 0's registration"};
  RegisterArgs a = Args(layout, 1);
  a.frozen = std::vector<TensorDigest>{{"proj.bias", b64}, {"proj.weight", a64}};
  EXPECT_EQ(*check.CheckFrozen(a, job), false);  // in any order
  a.frozen = std::vector<TensorDigest>{{"proj.weight", b64}, {"proj.bias", b64}};
  absl::Status s = check.CheckFrozen(a, job).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(s), HasSubstr("Register: worker 1's frozen parameter 'proj.weight' holds "
                                    "other values, dtype or shape (SHA-256 bbbbbbbbbbbb... "
                                    "against the job's aaaaaaaaaaaa...), fixed by worker 0's "
                                    "registration: frozen parameters (requires_grad=False) are "
                                    "neither trained nor sent through the servers"));
  a.frozen = std::vector<TensorDigest>{{"proj.weight", a64}};
  EXPECT_THAT(Message(check.CheckFrozen(a, job).status()),
              HasSubstr("Register: worker 1 lacks the job's frozen parameter 'proj.bias'"));
  a.frozen->push_back({"proj.bias", b64});
  a.frozen->push_back({"extra", b64});
  EXPECT_THAT(Message(check.CheckFrozen(a, job).status()),
              HasSubstr("Register: worker 1 has frozen parameter 'extra', which the job's lack"));
  EXPECT_EQ(*check.CheckFrozen(a, std::nullopt), false);  // none fixed yet
  a.frozen = std::nullopt;  // a tool
  EXPECT_EQ(*check.CheckFrozen(a, job), false);
  // Others than the job's from the only worker that registered with those:
  // it may replace them.
  std::optional<JobFrozenTensors> own = job;
  own->ranks = {1};
  a.frozen = std::vector<TensorDigest>{{"proj.weight", b64}};
  EXPECT_EQ(*check.CheckFrozen(a, own), true);
  check.NoteFrozen(a, true, own);
  EXPECT_EQ(own->tensors, *a.frozen);
  EXPECT_EQ(own->ranks, std::set<int>{1});
  own->ranks.insert(0);  // worker 0 registered with them too: no more
  a.frozen = std::vector<TensorDigest>{{"proj.weight", a64}};
  EXPECT_EQ(check.CheckFrozen(a, own).status().code(), StatusCode::kFailedPrecondition);
}

TEST(RegistrationCheckTest, MalformedFrozenDigestsAreRefused) {
  const RegistrationCheck check(TwoWorkers());
  const Layout layout = SmallLayout();
  RegisterArgs a = Args(layout, 1);
  a.frozen = std::vector<TensorDigest>{{"w", std::string(64, 'f')}, {"w", std::string(64, 'f')}};
  absl::Status s = check.CheckRequest(a);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(s), "Register: worker 1's frozen parameter 'w' is named twice, expected one "
                        "entry per named tensor");
  a.frozen = std::vector<TensorDigest>{{"w", "ABC"}};
  EXPECT_EQ(Message(check.CheckRequest(a)),
            "Register: worker 1's frozen parameter 'w' has digest 'ABC', expected a SHA-256 as "
            "64 lowercase hex digits");
  a.frozen = std::vector<TensorDigest>{{"", std::string(64, '0')}};
  EXPECT_THAT(Message(check.CheckRequest(a)), HasSubstr("frozen parameter '' is unnamed"));
  a.frozen = std::vector<TensorDigest>{{std::string(1025, 'n'), std::string(64, '0')}};
  EXPECT_EQ(Message(check.CheckRequest(a)), "Register: worker 1 names a frozen parameter in "
                                            "1025 bytes, expected at most 1024");
  a.frozen = std::vector<TensorDigest>(Layout::kMaxTensors + 1, {"w", std::string(64, '0')});
  EXPECT_EQ(Message(check.CheckRequest(a)), "Register: worker 1 says 65537 frozen parameters, "
                                            "expected at most 65536");
}

// Asked only when this registration would fix the layout: a server that
// holds its share already has the memory.
TEST(RegistrationCheckTest, TheFirstShareMustFitTheMemoryLeft) {
  int64_t available = (16 << 20) - 1;
  ShardStoreOptions o = TwoWorkers();
  o.optimizer.momentum = 0.9f;  // weights x2 + momentum x2
  o.available_memory = [&] { return available; };
  const RegistrationCheck check(o);
  const Layout layout = *Layout::Create({{"w", {1 << 20}}}, 1 << 20, 1, 0);  // 4 MiB
  absl::Status s = check.CheckJob(Args(layout), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(Message(s), HasSubstr("server 0's share of the model is 4194304 bytes, and "
                                    "holding it takes at least 4x that (the weights of two "
                                    "versions and the optimizer state), more than the "
                                    "16777215 bytes"));
  auto shard = NewShard(o, layout, TrainingShape(), 0);
  EXPECT_TRUE(check.CheckJob(Args(layout), shard.get()).ok());
  available = 16 << 20;
  EXPECT_TRUE(check.CheckJob(Args(layout), nullptr).ok());
  available = -1;  // unknown
  EXPECT_TRUE(check.CheckJob(Args(layout), nullptr).ok());
}

}  // namespace
}  // namespace psync
