#include "worker/run_summary.h"

#include <signal.h>

#include <limits>

#include "common/config/job_config.h"
#include "common/process/exit_code.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

TEST(RunSummaryTest, TheEpochLineSaysWhenItCoversPartOfTheEpoch) {
  // Epoch 2 up to step 40: loss, train_acc, trained_steps of epoch_steps,
  // test_loss, test_acc, samples/s.
  EpochReport r{2, 40, 0.51234, 0.8, 20, 20, 0.6, 0.75, 1234.4};
  EXPECT_EQ(EpochLine(r),
            "epoch 2 step 40 loss 0.5123 train_acc 0.8000 test_loss 0.6000 test_acc 0.7500 "
            "samples/s 1234");
  r.trained_steps = 5;
  EXPECT_EQ(EpochLine(r),
            "epoch 2 step 40 loss 0.5123 train_acc 0.8000 test_loss 0.6000 test_acc 0.7500 "
            "samples/s 1234 (loss, train_acc and samples/s over the last 5 of the epoch's 20 "
            "steps: this worker restarted or rolled back)");
}

TEST(RunSummaryTest, FiguresThatAreNotNumbersAreNull) {
  EXPECT_EQ(JsonNumber(0.25, 3), "0.250");
  EXPECT_EQ(JsonNumber(0.25, 3, /*measured=*/false), "null");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::quiet_NaN(), 1), "null");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity(), 1), "null");
}

TEST(RunSummaryTest, TheSummaryIsOneJsonLine) {
  LoadedJobConfig loaded;
  ASSERT_TRUE(ParseJobConfig("job.pbtxt",
                             "cluster { num_workers: 2 } training { model: \"mlp:784-10\" }",
                             &loaded)
                  .ok());
  const absl::Status finished = FinishJobConfig(&loaded);
  ASSERT_TRUE(finished.ok()) << finished;
  TrainResult r;
  r.steps = 10;
  r.samples_per_sec = 5000.04;
  r.last.loss = 0.5;
  BlasInfo blas{"OpenBLAS 0.3.21", "Haswell", 1, "picked for this CPU"};
  // Not evaluated (test_loss -1): null test figures.
  EXPECT_EQ(RunSummaryJson(loaded.config, r, 64, 640, 3, "ab12", blas),
            "{\"test_accuracy\": null, \"test_loss\": null, \"final_loss\": 0.500000, "
            "\"steps\": 10, \"global_batch\": 64, \"samples_per_sec\": 5000.0, "
            "\"weights_sha256\": \"ab12\", \"model\": \"mlp:784-10\", \"servers\": 3, "
            "\"workers\": 2, \"devices_per_worker\": 1, \"batch_per_device\": 32, "
            "\"accumulation_steps\": 1, \"seed\": 1, \"lr_policy\": "
            "\"lr=0.1 scaling=none warmup_steps=0 schedule=constant\", "
            "\"learning_rate_first\": 0.1, \"learning_rate_last\": 0.1, "
            "\"blas_library\": \"OpenBLAS 0.3.21\", \"blas_core\": \"Haswell\", "
            "\"blas_threads\": 1, \"blas_chosen_by\": \"picked for this CPU\"}\n");
}

TEST(RunSummaryTest, AStopBySignalExits128PlusItAndSaysHowToResume) {
  const absl::Status trained = absl::CancelledError("stopped before step 7");
  const absl::Status lost = StoppedBySignal(SIGTERM, trained, "");
  EXPECT_EQ(ExitCodeOf(lost, 1), 128 + SIGTERM);
  EXPECT_TRUE(absl::IsCancelled(lost));
  EXPECT_EQ(lost.message(),
            "stopped by a signal before the last step (stopped before step 7); a worker started "
            "again rejoins while the servers run, but without --checkpoint_dir the training of "
            "this job is lost once they stop: then run it again from step 0");
  const absl::Status resumable = StoppedBySignal(SIGINT, trained, "/ckpt");
  EXPECT_EQ(ExitCodeOf(resumable, 1), 128 + SIGINT);
  EXPECT_EQ(resumable.message(),
            "stopped by a signal before the last step (stopped before step 7); the job can be "
            "resumed: a worker started again rejoins while the servers run, and once they stop, "
            "from their newest checkpoint in /ckpt");
}

TEST(RunSummaryTest, WorkerZeroLeavingSaysWhatMayNotBeWritten) {
  EXPECT_EQ(OutputsLeftUnwritten("", "", "/ckpt"), "");
  EXPECT_EQ(OutputsLeftUnwritten("w.safetensors", "", ""),
            "worker 0 left the job before its end; only worker 0 writes --export_path "
            "(w.safetensors), so they are written only if it joins again before the end. "
            "Otherwise, without --checkpoint_dir, the final weights are lost once the servers "
            "stop");
  EXPECT_EQ(OutputsLeftUnwritten("w.safetensors", "s.json", "/ckpt"),
            "worker 0 left the job before its end; only worker 0 writes --export_path "
            "(w.safetensors) and --summary (s.json), so they are written only if it joins again "
            "before the end. Otherwise the final weights are in the servers' newest checkpoint "
            "once they stop: psync_ckpt export --checkpoint_dir=/ckpt --out=FILE writes them");
}

}  // namespace
}  // namespace psync
