// End-to-end with real processes through psync_launch: distributed training
// matches single-device training, deterministic runs are reproducible, and a
// failing process fails the whole run.
#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/format/safetensors.h"
#include "common/process/subprocess.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"
#include "worker/gpu/gpu.h"

namespace psync {
namespace {

struct LaunchResult {
  int exit_code = -1;
  std::string output;
  std::string summary;
  std::string weights_path;
};

LaunchResult Launch(const std::string& name, std::vector<std::string> flags) {
  LaunchResult run;
  run.weights_path = absl::StrCat(TempDir(), "/", name, ".safetensors");
  const std::string summary_path = absl::StrCat(TempDir(), "/", name, ".json");
  std::vector<std::string> argv = {Runfile("deploy/local/psync_launch"),
                                   "--export_path=" + run.weights_path, "--summary=" + summary_path,
                                   "--timeout_s=240"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto p = Subprocess::Start(argv, absl::StrCat("[", name, "] "));
  if (!p.ok()) {
    ADD_FAILURE() << p.status();
    return run;
  }
  run.exit_code = (*p)->Wait(absl::Now() + absl::Seconds(300)).value_or(-1);
  run.output = (*p)->DrainedOutput(absl::Now() + absl::Seconds(5));
  p->reset();  // joins the output relay
  std::stringstream s;
  s << std::ifstream(summary_path).rdbuf();
  run.summary = s.str();
  return run;
}

// Every weight of `b` within 1e-5 * (1 + |w|) of `a`'s; returns the largest
// relative difference.
double ExpectSameWeights(const LaunchResult& a, const LaunchResult& b) {
  auto wa = ReadSafetensors(a.weights_path);
  auto wb = ReadSafetensors(b.weights_path);
  EXPECT_TRUE(wa.ok()) << wa.status();
  EXPECT_TRUE(wb.ok()) << wb.status();
  if (!wa.ok() || !wb.ok()) return INFINITY;
  EXPECT_EQ(wa->size(), wb->size());
  int64_t compared = 0;
  double worst = 0;
  for (const auto& [name, ta] : *wa) {
    if (!wb->count(name)) {
      ADD_FAILURE() << name << " missing";
      continue;
    }
    const LoadedTensor& tb = wb->at(name);
    EXPECT_EQ(ta.shape, tb.shape) << name;
    for (size_t i = 0; i < ta.values.size() && i < tb.values.size(); ++i) {
      const double w = ta.values[i], v = tb.values[i];
      worst = std::max(worst, std::fabs(w - v) / (1 + std::fabs(w)));
      if (std::fabs(w - v) > 1e-5 * (1 + std::fabs(w))) {
        ADD_FAILURE() << name << "[" << i << "]: " << w << " vs " << v;
        return worst;
      }
      ++compared;
    }
  }
  EXPECT_EQ(compared, 235146);
  return worst;
}

const std::vector<std::string> kCommon = {"--deterministic", "--seed=7", "--steps=30",
                                          "--lr=0.05", "--momentum=0.9", "--weight_decay=0.0001",
                                          "--chunk_kb=64"};

std::vector<std::string> Shape(int servers, int workers, int devices, int batch) {
  std::vector<std::string> flags = kCommon;
  flags.push_back(absl::StrCat("--num_servers=", servers));
  flags.push_back(absl::StrCat("--num_workers=", workers));
  flags.push_back(absl::StrCat("--devices=", devices));
  flags.push_back(absl::StrCat("--batch_per_device=", batch));
  return flags;
}

// Shape() whose workers keep one request at a time in flight to each
// server (--push_window_kb): each request a Push, then a Pull; with
// payloads in the messages rather than in shared memory (as between hosts).
std::vector<std::string> Windowed(std::vector<std::string> flags) {
  flags.push_back("--push_window_kb=1");
  flags.push_back("--shared_memory=false");
  return flags;
}

// The repeat runs through the windowed transport over TCP: the same bits.
TEST(EquivalenceTest, DistributedMatchesSingleDeviceAndIsReproducible) {
  const LaunchResult single = Launch("single", Shape(1, 1, 1, 32));
  const LaunchResult dist = Launch("dist", Shape(2, 2, 2, 8));
  const LaunchResult again = Launch("again", Windowed(Shape(2, 2, 2, 8)));
  ASSERT_EQ(single.exit_code, 0);
  ASSERT_EQ(dist.exit_code, 0);
  ASSERT_EQ(again.exit_code, 0);

  EXPECT_EQ(JsonField(dist.summary, "steps"), "30");
  EXPECT_EQ(JsonField(dist.summary, "global_batch"), "32");
  const std::string sha = JsonField(dist.summary, "weights_sha256");
  EXPECT_EQ(sha.size(), 64u);
  EXPECT_EQ(sha, JsonField(again.summary, "weights_sha256"));

  const double worst = ExpectSameWeights(single, dist);
  // The runs trained: the test accuracy is well above chance.
  EXPECT_GT(std::stod(JsonField(single.summary, "test_accuracy")), 0.3);
  std::printf("largest |w_single - w_dist| / (1 + |w|) = %.3g\n", worst);
}

// Every server computes each step's learning rate alike (each holds some
// of every layer's chunks here): a run with linear scaling, warmup and a
// cosine schedule on 2 servers matches one device with the same policy.
TEST(EquivalenceTest, ALearningRatePolicyMatchesSingleDevice) {
  const std::vector<std::string> policy = {"--lr_scaling=linear", "--base_batch=16",
                                           "--warmup_steps=10", "--lr_schedule=cosine",
                                           "--lr_final=0.001"};
  std::vector<std::string> single = Shape(1, 1, 1, 32), dist = Shape(2, 2, 2, 8);
  single.insert(single.end(), policy.begin(), policy.end());
  dist.insert(dist.end(), policy.begin(), policy.end());
  const LaunchResult a = Launch("lr_single", single);
  const LaunchResult b = Launch("lr_dist", dist);
  ASSERT_EQ(a.exit_code, 0);
  ASSERT_EQ(b.exit_code, 0);
  ExpectSameWeights(a, b);
  // lr 0.05 x 32/16, a tenth of it in the first warmup step; lr_final last.
  EXPECT_EQ(JsonField(b.summary, "learning_rate_first"), "0.01");
  EXPECT_EQ(JsonField(b.summary, "learning_rate_last"), "0.001");
  // Without the policy the weights differ: the rates mattered.
  EXPECT_NE(JsonField(b.summary, "weights_sha256"),
            JsonField(Launch("lr_none", Shape(2, 2, 2, 8)).summary, "weights_sha256"));
}

// Gradient accumulation: 4 devices x batch 32, 1 device x batch 32 x 4
// micro-batches, and 2 workers x 2 devices x batch 8 x 4 micro-batches each
// train what 1 device with batch 128 trains; deterministic runs repeat bit
// for bit.
TEST(EquivalenceTest, AccumulationMatchesMoreDevicesAndALargerBatch) {
  auto accumulated = [](std::vector<std::string> flags, int k) {
    flags.push_back(absl::StrCat("--accumulation_steps=", k));
    return flags;
  };
  const LaunchResult single = Launch("batch128", Shape(1, 1, 1, 128));
  const LaunchResult devices = Launch("devices4", Shape(1, 1, 4, 32));
  const LaunchResult micro = Launch("accum4", accumulated(Shape(1, 1, 1, 32), 4));
  const LaunchResult dist = Launch("dist_accum4", accumulated(Shape(2, 2, 2, 8), 4));
  const LaunchResult again = Launch("dist_accum4_again", accumulated(Shape(2, 2, 2, 8), 4));
  for (const LaunchResult* r : {&single, &devices, &micro, &dist, &again}) {
    ASSERT_EQ(r->exit_code, 0);
    EXPECT_EQ(JsonField(r->summary, "global_batch"), "128");
  }
  EXPECT_EQ(JsonField(micro.summary, "accumulation_steps"), "4");
  ExpectSameWeights(single, devices);
  ExpectSameWeights(single, micro);
  ExpectSameWeights(single, dist);
  EXPECT_EQ(JsonField(dist.summary, "weights_sha256"), JsonField(again.summary, "weights_sha256"));
}

// With a 2-byte wire dtype, distributed training no longer matches one
// device to float tolerance (gradients and weights are rounded in transit),
// but deterministic mode still repeats bit for bit in each dtype, and the
// runs train. The repeat runs through the windowed transport over TCP.
TEST(EquivalenceTest, DeterministicRunsRepeatBitForBitInEachWireDType) {
  std::string sha[2];
  int i = 0;
  for (const std::string dtype : {"bf16", "fp16"}) {
    std::vector<std::string> flags = Shape(2, 2, 2, 8);
    flags.push_back("--wire_dtype=" + dtype);
    const LaunchResult a = Launch("wire_" + dtype, flags);
    const LaunchResult b = Launch("wire_" + dtype + "_again", Windowed(flags));
    ASSERT_EQ(a.exit_code, 0) << dtype;
    ASSERT_EQ(b.exit_code, 0) << dtype;
    sha[i] = JsonField(a.summary, "weights_sha256");
    EXPECT_EQ(sha[i].size(), 64u) << dtype;
    EXPECT_EQ(sha[i], JsonField(b.summary, "weights_sha256")) << dtype;
    EXPECT_GT(std::stod(JsonField(a.summary, "test_accuracy")), 0.3) << dtype;
    ++i;
  }
  EXPECT_NE(sha[0], sha[1]);  // the dtype reached the wire
}

// The same on GPUs: NCCL local reduction and the CUDA MLP. Skipped where
// fewer than 2 GPUs are usable.
TEST(EquivalenceTest, DistributedOnGpusMatchesSingleDevice) {
  const GpuInfo gpus = ProbeGpus();
  if (gpus.count < 2) GTEST_SKIP() << "needs 2 GPUs: " << gpus.detail;
  std::vector<std::string> single = Shape(1, 1, 1, 32), dist = Shape(2, 2, 2, 8);
  single.push_back("--device=cuda");
  dist.push_back("--device=cuda");
  const LaunchResult a = Launch("gpu_single", single);
  const LaunchResult b = Launch("gpu_dist", dist);
  ASSERT_EQ(a.exit_code, 0);
  ASSERT_EQ(b.exit_code, 0);
  ExpectSameWeights(a, b);
}

// A server's share several times its message limit travels in requests
// that fit, with the same bits as in one (1 and 2 workers: a PushPull per
// request, and a Push then a Pull); a chunk that cannot fit stops the job
// at registration, the worker not restarted.
TEST(EquivalenceTest, AShareOverTheMessageLimitTrainsTheSameBits) {
  for (int workers : {1, 2}) {
    std::vector<std::string> flags = Shape(1, workers, 1, 32 / workers);
    flags.push_back("--model=mlp:784-1024-256-10");  // 4.3 MB
    const std::string name = absl::StrCat("share_", workers, "w");
    const LaunchResult whole = Launch(name, flags);
    flags.push_back("--max_message_mb=2");
    const LaunchResult cut = Launch(name + "_limit2", flags);
    ASSERT_EQ(whole.exit_code, 0) << whole.output;
    ASSERT_EQ(cut.exit_code, 0) << cut.output;
    EXPECT_EQ(JsonField(whole.summary, "weights_sha256").size(), 64u);
    EXPECT_EQ(JsonField(whole.summary, "weights_sha256"), JsonField(cut.summary, "weights_sha256"))
        << workers << " worker(s)";
    if (workers == 2) {
      flags.push_back("--chunk_kb=2048");
      const LaunchResult refused = Launch("share_chunk_over_limit", flags);
      EXPECT_EQ(refused.exit_code, 3);
      EXPECT_TRUE(Contains(refused.output,
                           "exited with code 3: the job cannot continue (never restarted)"))
          << refused.output;
      EXPECT_TRUE(Contains(refused.output, "chunk 0 of tensor 'fc1.weight' has 2097152 bytes, "
                                           "more than the message limit of 2097152 bytes"))
          << refused.output;
    }
  }
}

// A flag only the workers check (their data): they exit 2, bad flags, which
// the launcher does not restart and passes on, with the worker's own error.
TEST(EquivalenceTest, AFailingWorkerFailsTheRun) {
  std::vector<std::string> flags = Shape(2, 2, 1, 8);
  flags.push_back("--data_dir=/nonexistent/fashion-mnist");
  const absl::Time start = absl::Now();
  const LaunchResult run = Launch("failing", flags);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(Contains(run.output,
                       "exited with code 2: bad flags (never restarted); its last error: worker "))
      << run.output;
  EXPECT_TRUE(Contains(run.output, "cannot open /nonexistent/fashion-mnist/")) << run.output;
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
}

TEST(EquivalenceTest, BadFlagsFailTheRun) {
  std::vector<std::string> flags = Shape(1, 1, 1, 8);
  flags.push_back("--lr=-3");
  EXPECT_EQ(Launch("badflags", flags).exit_code, 2);
  EXPECT_EQ(Launch("badworkers", {"--num_workers=0"}).exit_code, 2);
}

}  // namespace
}  // namespace psync
