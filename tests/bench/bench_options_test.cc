#include "tests/bench/bench_options.h"

#include "gtest/gtest.h"

namespace psync {
namespace {

BenchOptions Small() {
  BenchOptions o;
  o.model_mb = 1;
  return o;
}

TEST(BenchOptionsTest, ModelBytesIsWholeFloatsInEqualTensors) {
  BenchOptions o = Small();
  EXPECT_EQ(o.ModelBytes(), 1 << 20);
  o.tensors = 3;  // 262144 floats: 87381 each
  EXPECT_EQ(o.ModelBytes(), 87381 * 3 * 4);
}

TEST(BenchOptionsTest, CutThroughOnlyWhereTheModelTakesMoreThanOneRequest) {
  BenchOptions o = Small();
  o.request_kb = 1024;
  EXPECT_EQ(o.CutThroughBytes(), 0);
  o.request_kb = 256;
  EXPECT_EQ(o.CutThroughBytes(), 256 << 10);
}

TEST(BenchOptionsTest, EstimatedPeakCountsWorkersDeterminismAndCheckpoints) {
  BenchOptions o = Small();
  const int64_t processes = int64_t{64 << 20} * 2;
  EXPECT_EQ(o.EstimatedPeakBytes(), static_cast<int64_t>(7.5 * (1 << 20)) + processes);
  o.deterministic = true;
  o.checkpoints = true;
  EXPECT_EQ(o.EstimatedPeakBytes(), static_cast<int64_t>(9.5 * (1 << 20)) + processes);
}

TEST(BenchOptionsTest, DefaultsAreValid) { EXPECT_TRUE(Small().Validate().ok()); }

struct BadCase {
  void (*set)(BenchOptions&);
  const char* message;
};

TEST(BenchOptionsTest, ValidateNamesTheFlagItsValueAndWhatWasExpected) {
  const BadCase cases[] = {
      {[](BenchOptions& o) { o.num_servers = 0; }, "--num_servers is 0, expected 1 to 64"},
      {[](BenchOptions& o) { o.model_mb = 4097; },
       "--model_mb is 4097, expected one float (4 bytes) to 4096 MiB"},
      {[](BenchOptions& o) { o.tensors = 65537; }, "--tensors is 65537, expected 1 to 65536"},
      {[](BenchOptions& o) { o.chunk_kb = 0; }, "--chunk_kb is 0, expected 1 to "},
      {[](BenchOptions& o) { o.push_window_kb = -2; },
       "--push_window_kb is -2, expected 0 (automatic) to 1073741824"},
      {[](BenchOptions& o) { o.compute_ms = 60000.0001; },
       "--compute_ms is 60000.0001, expected 0 to 60000 (ms per tensor)"},
      {[](BenchOptions& o) { o.server_host = "::1"; },
       "--server_host is '::1', expected an IPv4 address"},
      {[](BenchOptions& o) { o.wire_dtype = "fp8"; }, "fp8"},
      {[](BenchOptions& o) { o.chunk_kb = 1, o.model_mb = 4096; }, "give no layout: "},
  };
  for (const BadCase& c : cases) {
    BenchOptions o = Small();
    c.set(o);
    const absl::Status s = o.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), absl::string_view::npos) << s;
  }
}

}  // namespace
}  // namespace psync
