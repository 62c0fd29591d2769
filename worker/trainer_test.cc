#include "worker/trainer.h"

#include <cmath>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/wire/wire_dtype.h"
#include "gtest/gtest.h"
#include "server/shard_store.h"
#include "worker/client/local_ps_client.h"
#include "worker/init_weights.h"
#include "worker/model/mlp.h"
#include "worker/reduce/cpu_reducer.h"

namespace psync {
namespace {

const std::vector<int64_t> kSizes = {12, 16, 8, 10};

// A CpuReducer that claims to be asynchronous, so that the trainer takes
// the GPU path: marks from device threads, reduces on its communication
// thread. Checks that every reduced tensor was marked by every device.
class AsyncCpuReducer final : public Reducer {
 public:
  explicit AsyncCpuReducer(int devices) : cpu_(*CpuReducer::Create(devices)) {}
  int num_devices() const override { return cpu_->num_devices(); }
  bool asynchronous() const override { return true; }
  absl::StatusOr<Buffer> AllocateDevice(int d, int64_t n) override { return cpu_->AllocateDevice(d, n); }
  absl::StatusOr<Buffer> AllocateHost(int64_t n) override { return cpu_->AllocateHost(n); }
  absl::Status MarkReady(int device, int first, int end) override {
    absl::MutexLock lock(&mu_);
    for (int t = first; t < end; ++t) ++marks_[{device, t}];
    return absl::OkStatus();
  }
  absl::Status Reduce(int first, int end, absl::Span<float* const> in, int64_t count,
                      float* out) override {
    {
      absl::MutexLock lock(&mu_);
      for (int d = 0; d < num_devices(); ++d) {
        for (int t = first; t < end; ++t) {
          if (marks_[{d, t}]-- <= 0) return absl::InternalError("reduced before marked");
        }
      }
    }
    return cpu_->Reduce(first, end, in, count, out);
  }
  absl::Status Broadcast(const float* in, int64_t count, absl::Span<float* const> out) override {
    return cpu_->Broadcast(in, count, out);
  }

 private:
  std::unique_ptr<Reducer> cpu_;
  absl::Mutex mu_;
  std::map<std::pair<int, int>, int> marks_ ABSL_GUARDED_BY(mu_);
};

struct Shape {
  int servers, workers, devices;
  int64_t batch;
  std::vector<double> device_weights = {};
};

// Forwards to another client, recording the tensor runs of step 0's
// push-pulls in the order they start.
class RecordingPsClient final : public PsClient {
 public:
  explicit RecordingPsClient(std::unique_ptr<PsClient> inner) : inner_(std::move(inner)) {}
  absl::StatusOr<int64_t> Register() override { return inner_->Register(); }
  absl::Status Finish(int64_t version) override { return inner_->Finish(version); }
  void Cancel() override { inner_->Cancel(); }
  absl::Status Pull(int64_t version, PullPrecision precision, float* weights) override {
    return inner_->Pull(version, precision, weights);
  }
  absl::Status StartPushPull(int64_t step, int64_t sample_count, int first_tensor, int end_tensor,
                             const float* grads, float* weights) override {
    if (step == 0) step0_runs.emplace_back(first_tensor, end_tensor);
    return inner_->StartPushPull(step, sample_count, first_tensor, end_tensor, grads, weights);
  }
  absl::Status Wait() override { return inner_->Wait(); }
  int num_tensors() const override { return inner_->num_tensors(); }

  std::vector<std::pair<int, int>> step0_runs;

 private:
  std::unique_ptr<PsClient> inner_;
};

// A whole cluster in one process: ShardStores as servers, workers as threads.
class Cluster {
 public:
  Cluster(Shape shape, bool deterministic, const Dataset* train, int64_t chunk_bytes = 64,
          bool overlap = true, bool async_reducer = false,
          WireDType wire_dtype = WireDType::kFloat32)
      : shape_(shape), train_(train), overlap_(overlap), async_reducer_(async_reducer),
        wire_dtype_(wire_dtype) {
    layout_ = std::make_unique<Layout>(
        *Layout::Create(CpuMlp(kSizes).parameters(), chunk_bytes, shape.servers, 11));
    MakeStores(deterministic, InitSource::kSeed);
  }

  // Servers that take their initial weights from worker 0, which sends
  // `initial` (the layout's flat order).
  void InitFromWorker0(bool deterministic, std::vector<float> initial) {
    initial_ = std::move(initial);
    MakeStores(deterministic, InitSource::kWorker);
  }

  // Trains every worker to `steps` steps in total; returns rank 0's weights.
  std::vector<float> Train(int64_t steps) {
    std::vector<std::vector<float>> weights(shape_.workers);
    std::vector<std::thread> threads;
    std::vector<ShardStore*> stores;
    for (auto& s : stores_) stores.push_back(s.get());
    for (int w = 0; w < shape_.workers; ++w) {
      threads.emplace_back([&, w] {
        auto client = std::make_unique<RecordingPsClient>(CreateLocalPsClient(
            *layout_, stores, w, shape_.workers, absl::Seconds(30), wire_dtype_));
        std::vector<std::unique_ptr<Model>> replicas;
        for (int d = 0; d < shape_.devices; ++d) replicas.push_back(std::make_unique<CpuMlp>(kSizes));
        TrainerOptions o;
        o.worker_rank = w;
        o.num_workers = shape_.workers;
        o.batch_per_device = shape_.batch;
        o.max_steps = steps;
        o.seed = 11;
        o.overlap = overlap_;
        o.overlap_min_bytes = overlap_min_bytes;
        o.device_weights = shape_.device_weights;
        if (w == 0) o.initial_weights = initial_;
        std::unique_ptr<Reducer> reducer =
            async_reducer_ ? std::make_unique<AsyncCpuReducer>(shape_.devices)
                           : *CpuReducer::Create(shape_.devices);
        auto trainer = Trainer::Create(o, std::move(replicas), std::move(reducer), client.get(),
                                       train_, nullptr);
        ASSERT_TRUE(trainer.ok()) << trainer.status();
        auto result = (*trainer)->Run(nullptr);
        ASSERT_TRUE(result.ok()) << result.status();
        EXPECT_EQ(result->steps, steps);
        weights[w] = result->weights;
        if (w == 0) worker0_step0_runs = client->step0_runs;
      });
    }
    for (auto& t : threads) t.join();
    for (int w = 1; w < shape_.workers; ++w) EXPECT_EQ(weights[w], weights[0]) << "worker " << w;
    return weights[0];
  }

  // The servers' weights at `version`, as a restarted worker 0 pulls them.
  std::vector<float> Pulled(int64_t version, PullPrecision precision) {
    std::vector<ShardStore*> stores;
    for (auto& s : stores_) stores.push_back(s.get());
    auto client = CreateLocalPsClient(*layout_, stores, 0, shape_.workers, absl::Seconds(30),
                                      wire_dtype_);
    EXPECT_TRUE(client->Register().ok());
    std::vector<float> weights(layout_->total_elements());
    EXPECT_TRUE(client->Pull(version, precision, weights.data()).ok());
    return weights;
  }

  // TrainerOptions::overlap_min_bytes of every worker: by default each
  // layer goes as soon as it is ready.
  int64_t overlap_min_bytes = 0;
  // The tensor runs of worker 0's push-pulls of step 0, in order.
  std::vector<std::pair<int, int>> worker0_step0_runs;

 private:
  void MakeStores(bool deterministic, InitSource init_from) {
    stores_.clear();
    for (int s = 0; s < shape_.servers; ++s) {
      ShardStoreOptions o;
      o.server_rank = s;
      o.num_servers = shape_.servers;
      o.num_workers = shape_.workers;
      o.deterministic = deterministic;
      o.optimizer = {0.9f, 1e-3f};
      o.lr_policy.lr = 0.05;
      o.init_from = init_from;
      stores_.push_back(*ShardStore::Create(o));
      stores_.back()->SetReady(true);
    }
  }

  Shape shape_;
  const Dataset* train_;
  bool overlap_;
  bool async_reducer_;
  WireDType wire_dtype_;
  std::unique_ptr<Layout> layout_;
  std::vector<std::unique_ptr<ShardStore>> stores_;
  std::vector<float> initial_;  // worker 0's, with InitFromWorker0
};

void ExpectClose(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::fabs(a[i] - b[i]) > 1e-5 * (1 + std::fabs(b[i])) && ++bad < 5) {
      ADD_FAILURE() << "weight " << i << ": " << a[i] << " vs " << b[i];
    }
  }
}

// 101 samples with a global batch of 16: every epoch ends with a 5-sample
// step, where some devices get no samples at all.
TEST(TrainerTest, ClusterShapesTrainTheSameModel) {
  const Dataset data = SyntheticDataset(101, kSizes[0], 10, 3);
  const auto single = Cluster({1, 1, 1, 16}, true, &data).Train(20);
  ExpectClose(Cluster({2, 2, 2, 4}, true, &data).Train(20), single);
  ExpectClose(Cluster({3, 4, 1, 4}, false, &data).Train(20), single);
  ExpectClose(Cluster({1, 1, 4, 4}, false, &data, 1 << 20).Train(20), single);
  // Heterogeneous devices: 2 workers x 2 devices, the second 3x as fast.
  ExpectClose(Cluster({2, 2, 2, 4, {1.0, 3.0}}, true, &data).Train(20), single);
  // And the weights did move.
  Cluster fresh({1, 1, 1, 16}, true, &data);
  EXPECT_NE(fresh.Train(1), single);
}

TEST(TrainerTest, OverlapDoesNotChangeTheResult) {
  const Dataset data = SyntheticDataset(90, kSizes[0], 10, 8);
  EXPECT_EQ(Cluster({2, 2, 3, 4}, true, &data, 64, /*overlap=*/true).Train(12),
            Cluster({2, 2, 3, 4}, true, &data, 64, /*overlap=*/false).Train(12));
}

// Ready layers wait until they add up to overlap_min_bytes. kSizes' backward
// reports the last layer (tensors 4 and 5, 360 bytes), then the middle one
// (2 and 3, 544 bytes), then the first (0 and 1, 832 bytes).
TEST(TrainerTest, OverlapHoldsLayersUntilTheyAddUpToItsMinimum) {
  const Dataset data = SyntheticDataset(90, kSizes[0], 10, 8);
  using Runs = std::vector<std::pair<int, int>>;
  const std::vector<std::pair<int64_t, Runs>> cases = {
      {0, {{4, 6}, {2, 4}, {0, 2}}},
      {360, {{4, 6}, {2, 4}, {0, 2}}},
      {361, {{2, 6}, {0, 2}}},
      {905, {{0, 6}}},
      {1 << 20, {{0, 6}}},
  };
  std::vector<float> first;
  for (const auto& [min_bytes, runs] : cases) {
    SCOPED_TRACE(min_bytes);
    Cluster cluster({2, 2, 1, 4}, true, &data);
    cluster.overlap_min_bytes = min_bytes;
    const std::vector<float> weights = cluster.Train(6);
    EXPECT_EQ(cluster.worker0_step0_runs, runs);
    if (first.empty()) first = weights;
    EXPECT_EQ(weights, first);
  }
}

TEST(TrainerTest, AsynchronousReducersGoThroughTheCommunicationThread) {
  const Dataset data = SyntheticDataset(90, kSizes[0], 10, 8);
  const auto reference = Cluster({2, 2, 3, 4}, true, &data).Train(12);
  EXPECT_EQ(Cluster({2, 2, 3, 4}, true, &data, 64, true, /*async_reducer=*/true).Train(12),
            reference);
  EXPECT_EQ(Cluster({2, 2, 3, 4}, true, &data, 64, false, /*async_reducer=*/true).Train(12),
            reference);
}

TEST(TrainerTest, DeterministicModeIsBitwiseReproducible) {
  const Dataset data = SyntheticDataset(100, kSizes[0], 10, 4);
  EXPECT_EQ(Cluster({2, 3, 2, 3}, true, &data).Train(15),
            Cluster({2, 3, 2, 3}, true, &data).Train(15));
}

// Rounding on the wire is deterministic too: in each 2-byte dtype two runs
// (and a run without overlap, whose requests group chunks differently) give
// the same bits, and not float32's (the dtype was used).
TEST(TrainerTest, DeterministicModeIsBitwiseReproducibleInEachWireDType) {
  const Dataset data = SyntheticDataset(100, kSizes[0], 10, 4);
  const std::vector<float> float32 = Cluster({2, 3, 2, 3}, true, &data).Train(15);
  for (WireDType dtype : {WireDType::kBf16, WireDType::kFp16}) {
    SCOPED_TRACE(WireDTypeName(dtype));
    const std::vector<float> a =
        Cluster({2, 3, 2, 3}, true, &data, 64, true, false, dtype).Train(15);
    EXPECT_EQ(a, Cluster({2, 3, 2, 3}, true, &data, 64, true, false, dtype).Train(15));
    EXPECT_EQ(a, Cluster({2, 3, 2, 3}, true, &data, 64, false, false, dtype).Train(15));
    EXPECT_NE(a, float32);
  }
}

// Workers train with the weights rounded to the wire dtype, but a run ends
// with the servers' float32 master weights (what worker 0 exports).
TEST(TrainerTest, FinalWeightsAreTheMasterWeightsInEachWireDType) {
  const Dataset data = SyntheticDataset(100, kSizes[0], 10, 4);
  for (WireDType dtype : {WireDType::kFloat32, WireDType::kBf16, WireDType::kFp16}) {
    SCOPED_TRACE(WireDTypeName(dtype));
    Cluster cluster({2, 2, 2, 3}, false, &data, 64, true, false, dtype);
    const std::vector<float> final_weights = cluster.Train(6);
    EXPECT_EQ(final_weights, cluster.Pulled(6, PullPrecision::kMaster));
    const std::vector<float> rounded = cluster.Pulled(6, PullPrecision::kWire);
    if (dtype == WireDType::kFloat32) {
      EXPECT_EQ(rounded, final_weights);
    } else {
      EXPECT_NE(rounded, final_weights);
    }
  }
}

// Worker 0 sending the seed's values to servers that await them trains the
// same bits as servers that compute them: the other worker (and worker 0)
// trained from exactly those values.
TEST(TrainerTest, InitialWeightsFromWorker0TrainLikeTheSeeds) {
  const Dataset train = SyntheticDataset(256, kSizes[0], 10, 3);
  const Shape shape{2, 2, 1, 8};
  Cluster seed(shape, true, &train);
  const std::vector<float> from_seed = seed.Train(6);
  const Layout layout = *Layout::Create(CpuMlp(kSizes).parameters(), 64, shape.servers, 11);
  Cluster worker(shape, true, &train);
  worker.InitFromWorker0(true, SeedInitWeights(layout));
  EXPECT_EQ(worker.Train(6), from_seed);
  // Other values: other weights.
  std::vector<float> other = SeedInitWeights(layout);
  for (float& v : other) v *= 0.5f;
  Cluster halved(shape, true, &train);
  halved.InitFromWorker0(true, other);
  EXPECT_NE(halved.Train(6), from_seed);
}

TEST(TrainerTest, ResumesFromTheServersVersion) {
  const Dataset data = SyntheticDataset(64, kSizes[0], 10, 5);
  Cluster resumed({2, 2, 1, 8}, true, &data);
  resumed.Train(3);  // the workers stop; the servers keep version 3
  const auto a = resumed.Train(10);
  EXPECT_EQ(a, Cluster({2, 2, 1, 8}, true, &data).Train(10));
}

TEST(TrainerTest, LearnsSyntheticData) {
  const Dataset train = SyntheticDataset(2000, kSizes[0], 10, 6);
  ShardStoreOptions so;
  so.optimizer = {0.9f, 0.0f};
  so.lr_policy.lr = 0.1;
  auto store = *ShardStore::Create(so);
  store->SetReady(true);
  auto layout = *Layout::Create(CpuMlp(kSizes).parameters(), 256, 1, 1);
  auto client = CreateLocalPsClient(layout, {store.get()}, 0, 1);
  std::vector<std::unique_ptr<Model>> replicas;
  replicas.push_back(std::make_unique<CpuMlp>(kSizes));
  TrainerOptions o;
  o.batch_per_device = 32;
  o.epochs = 20;
  o.evaluate = true;
  auto trainer = Trainer::Create(o, std::move(replicas), *CpuReducer::Create(1), client.get(),
                                 &train, &train);
  ASSERT_TRUE(trainer.ok());
  std::vector<EpochReport> reports;
  auto result = (*trainer)->Run([&](const EpochReport& r) { reports.push_back(r); });
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(reports.size(), 20u);
  EXPECT_EQ(reports.back().step, 20 * 63);
  EXPECT_LT(reports.back().loss, reports.front().loss);
  EXPECT_GT(reports.back().test_accuracy, 0.5);
}

TEST(TrainerTest, BadOptionsAreRefused) {
  const Dataset data = SyntheticDataset(10, kSizes[0], 10, 1);
  auto make = [&](TrainerOptions o, int replicas, int devices) {
    std::vector<std::unique_ptr<Model>> r;
    for (int i = 0; i < replicas; ++i) r.push_back(std::make_unique<CpuMlp>(kSizes));
    return Trainer::Create(o, std::move(r), *CpuReducer::Create(devices), nullptr, &data, nullptr)
        .status();
  };
  TrainerOptions o;
  EXPECT_TRUE(make(o, 1, 1).ok());
  EXPECT_EQ(make(o, 1, 2).code(), absl::StatusCode::kInvalidArgument);
  o.batch_per_device = 0;
  EXPECT_EQ(make(o, 1, 1).code(), absl::StatusCode::kInvalidArgument);
  o = {};
  o.worker_rank = 3;
  o.num_workers = 2;
  EXPECT_EQ(make(o, 1, 1).code(), absl::StatusCode::kInvalidArgument);
  o = {};
  o.device_weights = {1.0, 2.0};  // two weights, one device
  EXPECT_EQ(make(o, 1, 1).code(), absl::StatusCode::kInvalidArgument);
  o.device_weights = {-1.0};
  EXPECT_EQ(make(o, 1, 1).code(), absl::StatusCode::kInvalidArgument);
  for (double huge : {1e308, 1e307, 2e6}) {  // finite, but the sharding's products overflow
    o.device_weights = {huge, huge};
    EXPECT_EQ(make(o, 2, 2).message(),
              absl::StrCat("--device_weights has ", huge,
                           ", expected relative speeds > 0 and at most 1e+06 (e.g. 1,3)"));
  }
  // Each within the bound, their sum (the worker's weight) not: the servers
  // would refuse the worker at registration.
  o.device_weights = {1e6, 1};
  EXPECT_EQ(make(o, 2, 2).message(),
            "--device_weights sum to 1000001, expected at most 1e+06: a worker's weight against "
            "the others' is the sum of its devices' (e.g. 1,3)");
  o.device_weights = {999999, 1};
  EXPECT_TRUE(make(o, 2, 2).ok());
  o = {};
  o.initial_weights = {1.0f, 2.0f};  // not the model's parameter count
  EXPECT_EQ(make(o, 1, 1).code(), absl::StatusCode::kInvalidArgument);
  o.num_workers = 2;
  o.worker_rank = 1;
  EXPECT_EQ(make(o, 1, 1).message(), "worker 1 was given initial weights; only worker 0 sends them");
  o = {};
  o.overlap_min_bytes = -1024;
  EXPECT_EQ(make(o, 1, 1).message(), "--overlap_min_kb is -1, expected >= 0");
  o = {};
  o.evaluate = true;  // without a test set
  EXPECT_EQ(make(o, 1, 1).code(), absl::StatusCode::kInvalidArgument);
  const Dataset wide = SyntheticDataset(10, 13, 10, 1);
  std::vector<std::unique_ptr<Model>> r;
  r.push_back(std::make_unique<CpuMlp>(kSizes));
  EXPECT_EQ(Trainer::Create({}, std::move(r), *CpuReducer::Create(1), nullptr, &wide, nullptr)
                .status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace psync
