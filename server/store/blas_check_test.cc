#include "server/store/blas_check.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BlasCheckTest, TheFirstRegisteredWorkerSetsTheKernelsOthersAreComparedWith) {
  BlasCheck check;
  EXPECT_EQ(check.Record(1, "OpenBLAS 0.3.21 Haswell"), "");
  EXPECT_EQ(check.Record(0, "OpenBLAS 0.3.21 Haswell"), "");
  const std::string warning = check.Record(2, "OpenBLAS 0.3.21 Zen");
  EXPECT_THAT(warning, HasSubstr("worker 2 computes with OpenBLAS 0.3.21 Zen, worker 1 "
                                 "(registered first) with OpenBLAS 0.3.21 Haswell"));
  EXPECT_THAT(warning, HasSubstr("--blas_core"));
  EXPECT_THAT(check.Mixed(), ElementsAre(warning));
}

TEST(BlasCheckTest, AWorkerThatRegistersAgainWithTheSameKernelsIsNoLongerMixed) {
  BlasCheck check;
  check.Record(0, "OpenBLAS 0.3.21 Haswell");
  EXPECT_NE(check.Record(1, "OpenBLAS 0.3.21 SkylakeX"), "");
  EXPECT_NE(check.Record(2, "OpenBLAS 0.3.21 Sandybridge"), "");
  EXPECT_EQ(check.Mixed().size(), 2u);
  EXPECT_EQ(check.Record(1, "OpenBLAS 0.3.21 Haswell"), "");
  ASSERT_EQ(check.Mixed().size(), 1u);
  EXPECT_THAT(check.Mixed()[0], HasSubstr("worker 2 computes with OpenBLAS 0.3.21 Sandybridge"));
}

TEST(BlasCheckTest, TheFirstWorkerRestartedWithOtherKernelsResetsTheReference) {
  BlasCheck check;
  check.Record(0, "OpenBLAS 0.3.21 Haswell");
  EXPECT_NE(check.Record(1, "OpenBLAS 0.3.21 Zen"), "");
  EXPECT_EQ(check.Record(0, "OpenBLAS 0.3.21 Zen"), "");
  EXPECT_TRUE(check.Mixed().empty());
  EXPECT_EQ(check.Record(1, "OpenBLAS 0.3.21 Zen"), "");
}

TEST(BlasCheckTest, KernelsNotSaidAreNotChecked) {
  BlasCheck check;
  EXPECT_EQ(check.Record(0, ""), "");
  EXPECT_EQ(check.Record(1, "OpenBLAS 0.3.21 Haswell"), "");
  EXPECT_EQ(check.Record(2, ""), "");
  EXPECT_TRUE(check.Mixed().empty());
}

}  // namespace
}  // namespace psync
