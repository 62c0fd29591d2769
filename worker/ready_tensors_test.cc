#include "worker/ready_tensors.h"

#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

// Five tensors of 10 floats (40 bytes) each.
const std::vector<int64_t> kOffsets = {0, 10, 20, 30, 40, 50};

struct Pushes {
  std::vector<std::pair<int, int>> runs;
  ReadyTensors::PushFn Fn() {
    return [this](int first, int end) { runs.emplace_back(first, end); };
  }
};

TEST(ReadyTensorsTest, ARunGoesOnceEveryDeviceHasFinishedIt) {
  Pushes pushes;
  ReadyTensors ready(2, &kOffsets, /*min_bytes=*/0, pushes.Fn());
  ready.Report(3, 5, absl::OkStatus());  // device 0
  EXPECT_TRUE(pushes.runs.empty());
  // Device 1, with an empty batch, reports every tensor at once.
  ready.Report(0, 5, absl::OkStatus());
  EXPECT_THAT(pushes.runs, ElementsAre(Pair(3, 5)));
  ready.Report(0, 3, absl::OkStatus());  // device 0
  EXPECT_TRUE(ready.Finish(1).ok());
  EXPECT_THAT(pushes.runs, ElementsAre(Pair(3, 5), Pair(0, 3)));
}

TEST(ReadyTensorsTest, AdjoiningRunsAreHeldUntilTheyReachTheLeastPayload) {
  Pushes pushes;
  ReadyTensors ready(1, &kOffsets, /*min_bytes=*/80, pushes.Fn());
  ready.Report(4, 5, absl::OkStatus());  // 40 bytes: held
  EXPECT_TRUE(pushes.runs.empty());
  ready.Report(3, 4, absl::OkStatus());  // adjoins: 80 bytes go
  ready.Report(2, 3, absl::OkStatus());  // held, and left for Finish
  ready.Report(0, 1, absl::OkStatus());  // does not adjoin: [2, 3) goes first
  EXPECT_THAT(pushes.runs, ElementsAre(Pair(3, 5), Pair(2, 3)));
  ready.Report(1, 2, absl::OkStatus());  // adjoins [0, 1): 80 bytes go
  EXPECT_TRUE(ready.Finish(1).ok());
  EXPECT_THAT(pushes.runs, ElementsAre(Pair(3, 5), Pair(2, 3), Pair(0, 2)));
}

TEST(ReadyTensorsTest, FinishPushesWhatIsHeld) {
  Pushes pushes;
  ReadyTensors ready(1, &kOffsets, /*min_bytes=*/1 << 20, pushes.Fn());
  ready.Report(2, 5, absl::OkStatus());
  ready.Report(0, 2, absl::OkStatus());
  EXPECT_TRUE(pushes.runs.empty());
  EXPECT_TRUE(ready.Finish(1).ok());
  EXPECT_THAT(pushes.runs, ElementsAre(Pair(0, 5)));
}

TEST(ReadyTensorsTest, ATensorADeviceNeverReportedIsAnInternalError) {
  Pushes pushes;
  ReadyTensors ready(2, &kOffsets, /*min_bytes=*/1 << 20, pushes.Fn());
  ready.Report(0, 5, absl::OkStatus());
  ready.Report(1, 5, absl::OkStatus());
  const absl::Status finished = ready.Finish(7);
  EXPECT_TRUE(absl::IsInternal(finished));
  EXPECT_EQ(finished.message(), "step 7: tensor 0 was reported ready by 1 of 2 devices");
  EXPECT_THAT(pushes.runs, ElementsAre());  // the held [1, 5) does not go
}

TEST(ReadyTensorsTest, TheFirstFailureOfTheReducerIsKept) {
  Pushes pushes;
  ReadyTensors ready(1, &kOffsets, 0, pushes.Fn());
  EXPECT_TRUE(ready.first_error().ok());
  ready.Report(0, 1, absl::OkStatus());
  ready.Report(1, 2, absl::InternalError("first"));
  ready.Report(2, 3, absl::InternalError("second"));
  EXPECT_EQ(ready.first_error(), absl::InternalError("first"));
}

TEST(ReadyTensorsTest, DevicesReportingAtOnceEachTensorOnce) {
  constexpr int kDevices = 4;
  Pushes pushes;
  ReadyTensors ready(kDevices, &kOffsets, 0, pushes.Fn());
  std::vector<std::thread> devices;
  for (int d = 0; d < kDevices; ++d) {
    devices.emplace_back([&ready] {
      for (int t = 4; t >= 0; --t) ready.Report(t, t + 1, absl::OkStatus());
    });
  }
  for (std::thread& d : devices) d.join();
  EXPECT_TRUE(ready.Finish(1).ok());
  std::vector<int> pushed(5, 0);
  for (const auto& [first, end] : pushes.runs) {
    for (int t = first; t < end; ++t) ++pushed[t];
  }
  EXPECT_THAT(pushed, ElementsAre(1, 1, 1, 1, 1));
}

}  // namespace
}  // namespace psync
