#include "common/model/init.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace psync {
namespace {

TEST(InitTest, PiecesAgreeWithTheWhole) {
  TensorSpec t{"fc1.weight", {64, 100}};
  std::vector<float> whole(6400), piece(1000);
  InitialValues(3, t, 0, 6400, whole.data());
  InitialValues(3, t, 2500, 1000, piece.data());
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(piece[i], whole[2500 + i]);
}

TEST(InitTest, DependsOnSeedNameAndShapeWithinBound) {
  TensorSpec t{"w", {32, 50}};
  std::vector<float> a(1600), b(1600), c(1600);
  InitialValues(1, t, 0, 1600, a.data());
  InitialValues(2, t, 0, 1600, b.data());
  InitialValues(1, TensorSpec{"v", {32, 50}}, 0, 1600, c.data());
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  const float bound = std::sqrt(6.0f / 50);
  double mean = 0;
  for (float v : a) {
    EXPECT_LE(std::fabs(v), bound);
    mean += v;
  }
  EXPECT_LT(std::fabs(mean / 1600), 0.05 * bound);
}

TEST(InitTest, BiasesStartAtZero) {
  std::vector<float> b(10, 1.0f);
  InitialValues(1, TensorSpec{"fc.bias", {10}}, 0, 10, b.data());
  for (float v : b) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace psync
