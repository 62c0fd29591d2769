// Training curves end to end: a job with --metrics_csv writes a row per
// step and per epoch, and deploy/local/plot_run.py draws them into a PNG.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace psync {
namespace {

TEST(CurvesTest, AJobsCsvIsDrawn) {
  const std::string dir = FreshDir("curves");
  const std::string csv = dir + "/curves.csv";
  const JobRun run = RunLaunch("curves", {"--num_servers=1", "--num_workers=2", "--devices=1",
                                          "--batch_per_device=16", "--synthetic_samples=640",
                                          "--epochs=3", "--metrics_csv=" + csv,
                                          "--metrics_csv_every=5", "--timeout_s=120"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string text = ReadFile(csv);
  // 640 samples / 32 a step: 20 steps an epoch, 60 in all; a row every 5.
  EXPECT_EQ(Count(text, "\nstep,"), 12) << text;
  EXPECT_EQ(Count(text, "\nepoch,"), 3) << text;

  const std::string png = dir + "/curves.png";
  const Ended plot = RunToEnd({"/usr/bin/python3", Runfile("deploy/local/plot_run.py"), csv,
                               "--out", png});
  ASSERT_EQ(plot.exit_code, 0) << plot.output;
  EXPECT_EQ(ReadFile(png).substr(0, 8), "\x89PNG\r\n\x1a\n");

  WriteFile(dir + "/bad.csv", "kind,epoch\nstep,1\n");
  const Ended bad = RunToEnd({"/usr/bin/python3", Runfile("deploy/local/plot_run.py"),
                              dir + "/bad.csv", "--out", dir + "/bad.png"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(Contains(bad.output, "bad.csv: header")) << bad.output;
}

}  // namespace
}  // namespace psync
