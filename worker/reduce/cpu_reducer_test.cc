#include "worker/reduce/cpu_reducer.h"

#include <vector>

#include "gtest/gtest.h"

namespace psync {
namespace {

TEST(CpuReducerTest, SumsInDeviceOrder) {
  auto r = CpuReducer::Create(3);
  ASSERT_TRUE(r.ok());
  std::vector<float> a = {1e8f, 1, 2}, b = {1, 2, 3}, c = {-1e8f, 3, 4}, out(3);
  float* in[] = {a.data(), b.data(), c.data()};
  ASSERT_TRUE((*r)->Reduce(0, 1, in, 3, out.data()).ok());
  EXPECT_EQ(out[0], (1e8f + 1.0f) + -1e8f);  // order matters in float; device order used
  EXPECT_EQ(out[1], 6.0f);
  EXPECT_EQ(out[2], 9.0f);
}

TEST(CpuReducerTest, BroadcastCopiesToEveryDevice) {
  auto r = CpuReducer::Create(2);
  ASSERT_TRUE(r.ok());
  std::vector<float> host = {5, 6}, d0(2), d1(2);
  float* out[] = {d0.data(), d1.data()};
  ASSERT_TRUE((*r)->Broadcast(host.data(), 2, out).ok());
  EXPECT_EQ(d0, host);
  EXPECT_EQ(d1, host);
}

TEST(CpuReducerTest, WrongDeviceCountIsAnError) {
  EXPECT_EQ(CpuReducer::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
  auto r = CpuReducer::Create(2);
  std::vector<float> a(1), out(1);
  float* in[] = {a.data()};
  auto s = (*r)->Reduce(0, 1, in, 1, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("1 device buffers, expected 2"), std::string::npos) << s;
}

}  // namespace
}  // namespace psync
