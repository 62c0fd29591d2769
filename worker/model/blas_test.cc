#include "worker/model/blas.h"

#include <stdlib.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

extern "C" void openblas_set_num_threads(int);

namespace psync {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(BlasTest, SaysTheLibraryTheKernelsAndTheThreads) {
  openblas_set_num_threads(1);
  const BlasInfo blas = CurrentBlas(/*pinned=*/true);
  EXPECT_THAT(blas.library, StartsWith("OpenBLAS 0."));
  EXPECT_FALSE(blas.core.empty());
  EXPECT_EQ(blas.threads, 1);
  EXPECT_EQ(blas.Kernels(), blas.library + " " + blas.core);
  EXPECT_EQ(blas.Describe(),
            blas.library + ", " + blas.core + " kernels (pinned by --blas_core), 1 thread");
}

TEST(BlasTest, PinningTheKernelsThatRunIsDoneAtOnceWhateverTheCase) {
  const std::string core = CurrentBlas().core;
  char* argv[] = {nullptr};  // never executed: nothing to change
  EXPECT_TRUE(PinBlasCore(core, argv).ok());
  std::string upper = core;
  for (char& c : upper) c = static_cast<char>(toupper(c));
  EXPECT_TRUE(PinBlasCore(upper, argv).ok());
}

TEST(BlasTest, TheEnvironmentsChoiceIsReportedWithItsLettersAndDigitsOnly) {
  setenv("OPENBLAS_CORETYPE", "Has\"well\n\\", 1);
  const BlasInfo blas = CurrentBlas();
  unsetenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(blas.chosen_by, "$OPENBLAS_CORETYPE=Haswell");
}

// The variable already asks for the core, and OpenBLAS runs others: no
// second start would change that.
TEST(BlasTest, ACoreOpenBlasDoesNotRunIsRefusedNamingBoth) {
  setenv("OPENBLAS_CORETYPE", "Pentium9000", 1);
  char* argv[] = {nullptr};
  const absl::Status s = PinBlasCore("Pentium9000", argv);
  unsetenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("--blas_core is 'Pentium9000' but OpenBLAS runs its " +
                                     CurrentBlas().core + " kernels"));
  EXPECT_THAT(s.message(), HasSubstr("expected one such as Haswell"));
}

TEST(BlasTest, GenericKernelsPickedForAnAvx2CpuAreWarnedAbout) {
  BlasInfo info{"OpenBLAS 0.3.21", "Prescott", 1, "picked for this CPU"};
  EXPECT_THAT(SlowKernelsWarning(info, /*avx2=*/true),
              HasSubstr("OpenBLAS 0.3.21 does not know this CPU and picked its generic Prescott "
                        "kernels, though the CPU runs AVX2: --blas_core=Haswell"));
  EXPECT_EQ(SlowKernelsWarning(info, /*avx2=*/false), "");  // the right kernels for that CPU
  info.chosen_by = "pinned by --blas_core";  // asked for: no warning
  EXPECT_EQ(SlowKernelsWarning(info, true), "");
  info.chosen_by = "picked for this CPU";
  info.core = "Haswell";
  EXPECT_EQ(SlowKernelsWarning(info, true), "");
}

}  // namespace
}  // namespace psync
