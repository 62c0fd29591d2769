#include "tests/bench/server_memory_sampler.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace psync {
namespace {

TEST(ServerMemorySamplerTest, SeesThisProcessesOwnMemory) {
  ServerMemorySampler sampler({static_cast<int>(getpid())});
  sampler.Stop();
  EXPECT_GT(sampler.PeakMib(), 0);
  sampler.Stop();  // again: nothing to join
}

TEST(ServerMemorySamplerTest, AProcessThatIsGoneCountsNothing) {
  ServerMemorySampler sampler({-1});  // no such process
  EXPECT_EQ(sampler.PeakMib(), 0);
}  // the destructor stops it

}  // namespace
}  // namespace psync
