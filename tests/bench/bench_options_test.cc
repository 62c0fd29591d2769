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
      {[](BenchOptions& o) { o.hosts = "h0=10.0.0.1"; },
       "--hosts needs --baselines=false: the driver runs on none of the hosts"},
      {[](BenchOptions& o) { o.hosts = "h0=10.0.0.1", o.baselines = false, o.compare_tls = true; },
       "--compare_tls is for one host"},
      {[](BenchOptions& o) { o.hosts = "h0"; },
       "--hosts is 'h0': 'h0' is not NETNS=IPV4 (e.g. pb-h0=10.77.1.1)"},
      {[](BenchOptions& o) { o.hosts = "h0=10.0.0.1,h1=host"; }, "'h1=host' is not NETNS=IPV4"},
      {[](BenchOptions& o) { o.hosts = "h0=10.0.0.1", o.server_hosts = "1"; },
       "--server_hosts is '1': '1' is not a host index 0..0"},
      {[](BenchOptions& o) { o.hosts = "h0=10.0.0.1,h1=10.0.0.2", o.worker_hosts = "0,1"; },
       "--worker_hosts is '0,1': 2 hosts, expected one per process: 1"},
      {[](BenchOptions& o) { o.hosts = "h0=10.0.0.1", o.server_netns = "x"; },
       "--hosts gives each host its address and namespace: leave --server_host and "
       "--server_netns unset"},
      {[](BenchOptions& o) { o.worker_hosts = "0"; }, "which is empty"},
  };
  for (const BadCase& c : cases) {
    BenchOptions o = Small();
    c.set(o);
    const absl::Status s = o.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), absl::string_view::npos) << s;
  }
}

TEST(BenchOptionsTest, HostsPlaceEveryProcess) {
  BenchOptions o = Small();
  o.num_servers = 2;
  o.num_workers = 3;
  o.hosts = "c-h0=10.77.1.1,c-h1=10.77.1.2,c-h2=10.77.1.3";
  o.server_hosts = "2,0";
  o.baselines = false;
  ASSERT_TRUE(o.Validate().ok()) << o.Validate();
  const BenchPlacement p = *o.Placement();
  EXPECT_TRUE(p.multi_host());
  EXPECT_EQ(p.ServerHost(0).address, "10.77.1.3");
  EXPECT_EQ(p.ServerHost(1).netns, "c-h0");
  EXPECT_EQ(p.WorkerNetns(2), "c-h2");  // round robin by default
  EXPECT_EQ(p.Describe(), "servers on c-h2 c-h0, workers on c-h0 c-h1 c-h2");
  // Without --hosts: servers on --server_host in --server_netns, workers here.
  o = Small();
  o.server_netns = "ns";
  const BenchPlacement one = *o.Placement();
  EXPECT_FALSE(one.multi_host());
  EXPECT_EQ(one.ServerHost(0).netns, "ns");
  EXPECT_EQ(one.WorkerNetns(0), "");
}

}  // namespace
}  // namespace psync
