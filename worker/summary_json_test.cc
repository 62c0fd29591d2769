#include "worker/summary_json.h"

#include "common/config/job_config.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

TEST(SummaryJsonTest, StringsAreQuotedAndEscaped) {
  EXPECT_EQ(JsonString("Mlp"), "\"Mlp\"");
  EXPECT_EQ(JsonString("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\u000a\\u0001\"");
}

TEST(SummaryJsonTest, FiguresNotMeasuredAreNullAndTheKeysAreKnown) {
  LoadedJobConfig loaded;
  ASSERT_TRUE(ParseJobConfig("job.pbtxt",
                             "cluster { num_workers: 3 } training { batch_per_device: 8 "
                             "devices: 2 seed: 5 }",
                             &loaded)
                  .ok());
  ASSERT_TRUE(FinishJobConfig(&loaded).ok());
  RunFigures f;
  f.steps = 4;
  f.weights_sha256 = "ff";
  f.model = "torch:Net";
  f.test_accuracy = 0.5;
  EXPECT_EQ(RunSummaryMembers(loaded.config, f, 48, 0, 2),
            "\"test_accuracy\": 0.500000, \"test_loss\": null, \"final_loss\": null, "
            "\"steps\": 4, \"global_batch\": 48, \"samples_per_sec\": null, "
            "\"weights_sha256\": \"ff\", \"model\": \"torch:Net\", \"servers\": 2, "
            "\"workers\": 3, \"devices_per_worker\": 2, \"batch_per_device\": 8, "
            "\"accumulation_steps\": 1, \"seed\": 5, "
            "\"lr_policy\": \"lr=0.1 scaling=none warmup_steps=0 schedule=constant\", "
            "\"learning_rate_first\": 0.1, \"learning_rate_last\": 0.1");
  EXPECT_TRUE(IsRunSummaryKey("steps"));
  EXPECT_TRUE(IsRunSummaryKey("learning_rate_last"));
  EXPECT_FALSE(IsRunSummaryKey("torch_version"));
}

}  // namespace
}  // namespace psync
