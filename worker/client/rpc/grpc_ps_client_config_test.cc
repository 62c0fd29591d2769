#include "worker/client/rpc/grpc_ps_client_config.h"

#include <fstream>
#include <string>

#include "common/config/job_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

LoadedJobConfig Config(const std::string& text) {
  LoadedJobConfig loaded;
  EXPECT_TRUE(ParseJobConfig("test", text, &loaded).ok());
  EXPECT_TRUE(FinishJobConfig(&loaded).ok());
  return loaded;
}

TEST(GrpcPsClientConfigTest, TakesEverySettingFromTheConfiguration) {
  const LoadedJobConfig loaded = Config(R"(
    cluster { servers: "a:1,b:2" num_workers: 4 shared_memory: false }
    training { devices: 2 batch_per_device: 8 epochs: 3 seed: 7 wire_dtype: "bf16"
               push_window_kb: 64 accumulation_steps: 2 device_weights: "1, 3.0"
               init_from: "worker" }
    timeouts { rpc_timeout_s: 9 connect_timeout_s: 8 peer_timeout_s: 7 worker_lease_ms: 600 }
  )");
  absl::StatusOr<GrpcPsClientOptions> o =
      GrpcPsClientOptionsFromConfig(loaded.config, /*worker_rank=*/3, /*train_samples=*/1000,
                                    /*unset_init=*/InitSource::kSeed);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_THAT(o->server_addresses, ElementsAre("a:1", "b:2"));
  EXPECT_EQ(o->worker_rank, 3);
  EXPECT_EQ(o->num_workers, 4);
  EXPECT_EQ(o->call_timeout, absl::Seconds(9));
  EXPECT_EQ(o->connect_timeout, absl::Seconds(8));
  EXPECT_EQ(o->finish_timeout, absl::Seconds(7));
  EXPECT_EQ(o->heartbeat_interval, absl::Milliseconds(300));
  EXPECT_EQ(o->wire_dtype, WireDType::kBf16);
  EXPECT_EQ(o->push_window_bytes, 64 << 10);
  EXPECT_FALSE(o->shared_memory);
  EXPECT_EQ(o->update_rule, UpdateRuleOf(loaded.config));
  EXPECT_EQ(o->init_from, InitSource::kWorker);
  EXPECT_TRUE(o->security.token.empty());
  // Global batch 4 x 2 x 8 x 2 = 128: 8 steps an epoch, 3 epochs.
  EXPECT_EQ(o->shape.Describe(), JobTrainingShape(loaded.config, 1000)->Describe());
  EXPECT_EQ(o->shape.total_steps, 24);
  EXPECT_EQ(o->shape.device_weights, "1,3");
  EXPECT_EQ(o->shape.seed, 7u);
}

TEST(GrpcPsClientConfigTest, InitFromLeftOutIsTheWorkersKinds) {
  const LoadedJobConfig loaded = Config("cluster { servers: \"a:1\" }");
  for (InitSource kind : {InitSource::kSeed, InitSource::kWorker}) {
    absl::StatusOr<GrpcPsClientOptions> o = GrpcPsClientOptionsFromConfig(loaded.config, 0, 0, kind);
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(o->init_from, kind);
  }
  const LoadedJobConfig seed = Config("cluster { servers: \"a:1\" } training { init_from: \"seed\" }");
  EXPECT_EQ(GrpcPsClientOptionsFromConfig(seed.config, 0, 0, InitSource::kWorker)->init_from,
            InitSource::kSeed);
}

TEST(GrpcPsClientConfigTest, StepsOverrideEpochs) {
  const LoadedJobConfig loaded = Config("cluster { servers: \"a:1\" } training { steps: 5 }");
  EXPECT_EQ(JobTrainingShape(loaded.config, 0)->total_steps, 5);
}

TEST(GrpcPsClientConfigTest, AMissingTokenFileIsNamed) {
  const LoadedJobConfig loaded = Config(
      "cluster { servers: \"a:1\" } security { auth_token_file: \"/nonexistent/token\" }");
  absl::StatusOr<GrpcPsClientOptions> o = GrpcPsClientOptionsFromConfig(loaded.config, 0, 0, InitSource::kSeed);
  EXPECT_THAT(o.status().message(), HasSubstr("/nonexistent/token"));
}

TEST(GrpcPsClientConfigTest, ReadsTheTokenFile) {
  const std::string path = std::string(getenv("TEST_TMPDIR")) + "/token";
  std::ofstream(path) << "s3cret\n";
  const LoadedJobConfig loaded =
      Config("cluster { servers: \"a:1\" } security { auth_token_file: \"" + path + "\" }");
  absl::StatusOr<GrpcPsClientOptions> o = GrpcPsClientOptionsFromConfig(loaded.config, 0, 0, InitSource::kSeed);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->security.token, "s3cret");
}

}  // namespace
}  // namespace psync
