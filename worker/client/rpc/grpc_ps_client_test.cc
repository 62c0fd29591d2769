// GrpcPsClient against in-process psync servers (a ShardStore behind the
// real gRPC adapter) and against a small fake service that misbehaves on
// purpose: retries, refusals, rollbacks and re-registration.
#include "worker/client/rpc/grpc_ps_client.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/model/init.h"
#include "common/monitoring/metrics.h"
#include "common/process/free_ports.h"
#include "common/rpc/host_addresses.h"
#include "common/wire/wire_dtype.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/psync.grpc.pb.h"
#include "server/rpc/grpc_server.h"
#include "server/shard_store.h"

namespace psync {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Two tensors, 4 + 2 floats, in chunks of 2 floats: chunks 0..2.
Layout TestLayout(int num_servers) {
  return *Layout::Create({{"w", {2, 2}}, {"b", {2}}}, 8, num_servers, 3);
}

std::vector<float> InitialWeights(const Layout& layout) {
  std::vector<float> w(layout.total_elements());
  for (size_t t = 0; t < layout.tensors().size(); ++t) {
    InitialValues(layout.init_seed(), layout.tensors()[t], 0, layout.tensors()[t].NumElements(),
                  w.data() + layout.tensor_offset(t));
  }
  return w;
}

// Every test runs three times: in this binary's grpc_ps_client_test target
// with payloads in shared memory (where servers and clients are, in one
// process), in grpc_ps_client_tcp_test (PSYNC_TEST_SHARED_MEMORY=0) in the
// gRPC messages, and in grpc_ps_client_lane_test (also
// PSYNC_TEST_PAYLOAD_LANE=1) on the servers' payload lanes.
bool SharedMemoryOn() {
  const char* on = std::getenv("PSYNC_TEST_SHARED_MEMORY");
  return on == nullptr || std::string(on) != "0";
}
bool PayloadLaneOn() {
  const char* on = std::getenv("PSYNC_TEST_PAYLOAD_LANE");
  return on != nullptr && std::string(on) == "1";
}

// A psync server in this process: the real store and gRPC adapter, SGD with
// lr 1 and no momentum (a step subtracts the mean gradient).
struct InProcessServer {
  // checkpoint_every > 0 keeps those versions' snapshots, for RollBackTo.
  InProcessServer(int rank, int num_servers, int num_workers, int port = 0,
                  absl::Duration worker_lease = absl::Seconds(2), int64_t checkpoint_every = 0,
                  int64_t max_message_bytes = 64 << 20, MetricRegistry* metrics = nullptr) {
    ShardStoreOptions o;
    o.max_message_bytes = max_message_bytes;
    o.server_rank = rank;
    o.num_servers = num_servers;
    o.num_workers = num_workers;
    o.optimizer = {0.0f, 0.0f};
    o.lr_policy.lr = 1.0;
    o.worker_lease = worker_lease;
    o.checkpoint_every = checkpoint_every;
    store = std::move(*ShardStore::Create(o));
    store->SetSnapshotSink([this](Snapshot s) {
      absl::MutexLock lock(&mu);
      snapshots.push_back(std::move(s));
    });
    store->SetReady(true);
    GrpcServerOptions so;
    so.address = absl::StrCat("127.0.0.1:", port);
    so.shared_memory = SharedMemoryOn();
    so.payload_lane = PayloadLaneOn();
    so.metrics = metrics;
    auto started = GrpcServer::Start(store.get(), so);
    EXPECT_TRUE(started.ok()) << started.status();
    if (started.ok()) server = std::move(*started);
  }
  ~InProcessServer() {
    if (server != nullptr) server->Shutdown(absl::Now());
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", server->port()); }

  // Rolls back to the snapshot of `version`, as the coordinator would.
  void RollBackTo(int64_t version) {
    std::optional<RestoredState> state;
    {
      absl::MutexLock lock(&mu);
      for (const Snapshot& s : snapshots) {
        if (s.version == version) state = RestoredState{*s.layout, s.shape, s.version, s.chunks};
      }
    }
    ASSERT_TRUE(state.has_value()) << "no snapshot of version " << version;
    store->Restore(store->generation() + 1, std::move(state));
    store->SetReady(true);
  }

  std::unique_ptr<ShardStore> store;
  std::unique_ptr<GrpcServer> server;
  absl::Mutex mu;
  std::vector<Snapshot> snapshots ABSL_GUARDED_BY(mu);
};

// A ParameterServer that answers what the test tells it to and counts calls.
// A push-pull is answered with the pushed gradients as the new weights.
class FakeService final : public proto::ParameterServer::Service {
 public:
  absl::Mutex mu;
  int server_rank ABSL_GUARDED_BY(mu) = 0;
  // Generations answered to successive Register calls (the last repeats).
  std::vector<int64_t> generations ABSL_GUARDED_BY(mu) = {1};
  int register_calls ABSL_GUARDED_BY(mu) = 0;
  int push_pull_calls ABSL_GUARDED_BY(mu) = 0;
  // The first `failures` push-pulls fail with `failure`; the first chunks
  // of those that did.
  int failures ABSL_GUARDED_BY(mu) = 0;
  std::set<int32_t> failed_chunks ABSL_GUARDED_BY(mu);
  grpc::Status failure ABSL_GUARDED_BY(mu){grpc::StatusCode::UNAVAILABLE, "restarting"};
  int64_t version_skew ABSL_GUARDED_BY(mu) = 0;  // added to answered versions
  bool drop_last_chunk ABSL_GUARDED_BY(mu) = false;
  // Answered chunks lose their last byte / get this dtype (0: as pushed).
  bool truncate_data ABSL_GUARDED_BY(mu) = false;
  int answer_dtype ABSL_GUARDED_BY(mu) = 0;
  // The dtype of the last push-pull's first chunk.
  int pushed_dtype ABSL_GUARDED_BY(mu) = 0;
  // Register answers these versions and message limit, or fails with
  // `register_failure`.
  int64_t version ABSL_GUARDED_BY(mu) = 0;
  int64_t max_message_bytes ABSL_GUARDED_BY(mu) = 0;
  int64_t max_version ABSL_GUARDED_BY(mu) = 0;
  grpc::Status register_failure ABSL_GUARDED_BY(mu);
  // The first `heartbeat_failures` heartbeats fail with `heartbeat_failure`;
  // the others answer `all_done`.
  int heartbeat_calls ABSL_GUARDED_BY(mu) = 0;
  int heartbeat_failures ABSL_GUARDED_BY(mu) = 0;
  grpc::Status heartbeat_failure ABSL_GUARDED_BY(mu);
  bool all_done ABSL_GUARDED_BY(mu) = false;
  // While set, Register and GetStatus wait (at most 20 s) for it to clear:
  // a server busy with something else.
  bool busy ABSL_GUARDED_BY(mu) = false;
  // Windowed push-pulls: a Push keeps its chunks and answers once as many
  // Pulls as Pushes have arrived (within 5 s: an error otherwise), or fails
  // with `push_failure` if set; a Pull echoes the kept chunks once they are
  // in (within 5 s), or with `pulls_wait` waits (20 s at most) until its
  // call is cancelled.
  int push_calls ABSL_GUARDED_BY(mu) = 0;
  int pull_calls ABSL_GUARDED_BY(mu) = 0;
  grpc::Status push_failure ABSL_GUARDED_BY(mu);
  bool pulls_wait ABSL_GUARDED_BY(mu) = false;
  std::map<int32_t, proto::Chunk> pushed ABSL_GUARDED_BY(mu);

  grpc::Status Register(grpc::ServerContext*, const proto::RegisterRequest* req,
                        proto::RegisterResponse* resp) override {
    absl::MutexLock lock(&mu);
    WaitWhileBusyLocked();
    ++register_calls;
    if (!register_failure.ok()) return register_failure;
    resp->set_server_rank(server_rank);
    resp->set_layout_fingerprint(req->layout_fingerprint());
    resp->set_session(77);
    resp->set_generation(
        generations[std::min<size_t>(register_calls - 1, generations.size() - 1)]);
    resp->set_has_chunks(true);
    resp->set_version(version);
    resp->set_max_version(max_version);
    resp->set_max_message_bytes(max_message_bytes);
    return grpc::Status::OK;
  }

  grpc::Status PushPull(grpc::ServerContext*, const proto::PushRequest* req,
                        proto::PullResponse* resp) override {
    absl::MutexLock lock(&mu);
    if (push_pull_calls++ < failures) {
      if (req->chunks_size() > 0) failed_chunks.insert(req->chunks(0).chunk_id());
      return failure;
    }
    for (const proto::Chunk& c : req->chunks()) {
      proto::Chunk* out = resp->add_chunks();
      *out = c;
      out->set_version(req->step() + 1 + version_skew);
      if (truncate_data) out->mutable_data()->pop_back();
      if (answer_dtype != 0) out->set_dtype(static_cast<proto::DType>(answer_dtype));
    }
    if (req->chunks_size() > 0) pushed_dtype = req->chunks(0).dtype();
    if (drop_last_chunk) resp->mutable_chunks()->RemoveLast();
    return grpc::Status::OK;
  }

  grpc::Status Push(grpc::ServerContext*, const proto::PushRequest* req,
                    proto::PushResponse*) override {
    absl::MutexLock lock(&mu);
    for (const proto::Chunk& c : req->chunks()) {
      pushed[c.chunk_id()] = c;
      pushed[c.chunk_id()].set_version(req->step() + 1);
    }
    // Handlers run side by side: this Push's Pull may have come first.
    const int pushes = ++push_calls;
    auto pulled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return pull_calls >= pushes; };
    const bool pulled_too = mu.AwaitWithTimeout(absl::Condition(&pulled), absl::Seconds(5));
    if (!push_failure.ok()) return push_failure;
    if (!pulled_too) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no Pull arrived");
    return grpc::Status::OK;
  }

  grpc::Status Pull(grpc::ServerContext* ctx, const proto::PullRequest* req,
                    proto::PullResponse* resp) override {
    absl::MutexLock lock(&mu);
    ++pull_calls;
    if (pulls_wait) {
      const absl::Time until = absl::Now() + absl::Seconds(20);
      auto never = [] { return false; };
      while (!ctx->IsCancelled() && absl::Now() < until) {
        mu.AwaitWithTimeout(absl::Condition(&never), absl::Milliseconds(10));
      }
      return grpc::Status(grpc::StatusCode::CANCELLED, "waited");
    }
    // Handlers run side by side: the Push may not be in yet.
    auto in = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      for (int32_t id : req->chunk_ids()) {
        auto it = pushed.find(id);
        if (it == pushed.end() || it->second.version() < req->version()) return false;
      }
      return true;
    };
    if (!mu.AwaitWithTimeout(absl::Condition(&in), absl::Seconds(5))) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "not pushed");
    }
    for (int32_t id : req->chunk_ids()) *resp->add_chunks() = pushed[id];
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const proto::HeartbeatRequest*,
                         proto::HeartbeatResponse* resp) override {
    absl::MutexLock lock(&mu);
    if (heartbeat_calls++ < heartbeat_failures) return heartbeat_failure;
    resp->set_all_done(all_done);
    return grpc::Status::OK;
  }

  grpc::Status GetStatus(grpc::ServerContext*, const proto::StatusRequest*,
                         proto::StatusResponse*) override {
    absl::MutexLock lock(&mu);
    WaitWhileBusyLocked();
    return grpc::Status::OK;
  }

 private:
  void WaitWhileBusyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    mu.AwaitWithTimeout(absl::Condition(
                            +[](bool* busy) { return !*busy; }, &busy),
                        absl::Seconds(20));
  }
};

struct FakeServer {
  explicit FakeServer(std::string host = "127.0.0.1") : host(std::move(host)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(this->host + ":0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~FakeServer() { server->Shutdown(std::chrono::system_clock::now()); }
  std::string address() const { return absl::StrCat(host, ":", port); }

  const std::string host;
  FakeService service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

std::unique_ptr<PsClient> Client(const Layout& layout, std::vector<std::string> addresses,
                                 int rank = 0, int workers = 1,
                                 absl::Duration connect_timeout = absl::Seconds(10),
                                 absl::Duration call_timeout = absl::Seconds(20),
                                 WireDType wire_dtype = WireDType::kFloat32,
                                 int64_t push_window_bytes = 0) {
  GrpcPsClientOptions o;
  o.shared_memory = SharedMemoryOn();
  o.wire_dtype = wire_dtype;
  if (push_window_bytes > 0) {
    o.max_request_bytes = 1;  // a request per chunk
    o.shared_request_bytes = 1;
    o.push_window_bytes = push_window_bytes;
  }
  o.server_addresses = std::move(addresses);
  o.worker_rank = rank;
  o.num_workers = workers;
  o.connect_timeout = connect_timeout;
  o.call_timeout = call_timeout;
  o.finish_timeout = absl::Seconds(20);
  auto client = CreateGrpcPsClient(layout, o);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

// One push-pull of step 0 to a FakeServer, which answers with the pushed
// gradients (0, 1, 2, ...) as the new weights.
void ExpectPushPullEchoed(const Layout& layout, PsClient& client) {
  std::vector<float> grads(layout.total_elements()), w(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i);
  ASSERT_EQ(client.PushPull(0, 1, grads.data(), w.data()), absl::OkStatus());
  EXPECT_EQ(w, grads);
}

void ExpectVersion(const absl::StatusOr<int64_t>& version, int64_t expected) {
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, expected);
}

// Runs `f` on a thread of its own; Get() waits for its result.
class Async {
 public:
  explicit Async(std::function<absl::Status()> f)
      : thread_([this, f = std::move(f)] {
          absl::Status s = f();
          absl::MutexLock lock(&mu_);
          status_ = std::move(s);
          done_ = true;
        }) {}
  ~Async() {
    if (thread_.joinable()) thread_.join();
  }
  bool Done() {
    absl::MutexLock lock(&mu_);
    return done_;
  }
  absl::Status Get() {
    thread_.join();
    thread_ = std::thread();
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

TEST(GrpcPsClientTest, TrainsStepsAgainstTwoServers) {
  const Layout layout = TestLayout(2);
  InProcessServer s0(0, 2, 1), s1(1, 2, 1);
  auto client = Client(layout, {s0.address(), s1.address()});
  ExpectVersion(client->Register(), 0);
  const std::vector<float> w0 = InitialWeights(layout);
  std::vector<float> w(w0.size());
  ASSERT_TRUE(client->Pull(0, PullPrecision::kWire, w.data()).ok());
  EXPECT_EQ(w, w0);

  const std::vector<float> grads(w0.size(), 2.0f);  // over 2 samples: mean 1
  ASSERT_TRUE(client->PushPull(0, 2, grads.data(), w.data()).ok());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_FLOAT_EQ(w[i], w0[i] - 1.0f) << i;

  // Layer by layer, as backward produces them.
  for (int t = client->num_tensors() - 1; t >= 0; --t) {
    ASSERT_TRUE(client->StartPushPull(1, 2, t, t + 1, grads.data(), w.data()).ok());
  }
  ASSERT_TRUE(client->Wait().ok());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_FLOAT_EQ(w[i], w0[i] - 2.0f) << i;
  EXPECT_EQ(client->Finish(2), absl::OkStatus());
}

// With shared memory, payloads skip the messages (and the sockets): a
// push-pull's request and answer hold only the chunks' ids and versions.
// Without, they travel on the server's payload lane where it has one.
TEST(GrpcPsClientTest, PayloadsTravelInSharedMemoryWhereBothSidesAllowIt) {
  const Layout layout = *Layout::Create({{"w", {512, 256}}, {"b", {256}}}, 64 << 10, 1, 3);
  MetricRegistry metrics;
  InProcessServer server(0, 1, 1, 0, absl::Seconds(2), 0, 64 << 20, &metrics);
  auto client = Client(layout, {server.address()});
  ExpectVersion(client->Register(), 0);
  std::vector<float> w = InitialWeights(layout);
  const std::vector<float> grads(w.size(), 2.0f);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(client->PushPull(step, 2, grads.data(), w.data()).ok());
  }
  const std::vector<float> w0 = InitialWeights(layout);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_FLOAT_EQ(w[i], w0[i] - 3.0f) << i;
  const std::string text = metrics.Render();
  // Bytes the method received, or -1 if it has no calls.
  auto received = [&text](absl::string_view method) {
    const std::string key =
        absl::StrCat("psync_server_received_bytes_total{method=\"", method, "\"} ");
    const size_t at = text.find(key);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + key.size()));
  };
  const double payload = 3.0 * layout.total_elements() * sizeof(float);
  if (SharedMemoryOn()) {
    EXPECT_LT(received("PushPull"), payload / 10) << text;
  } else if (PayloadLaneOn()) {
    EXPECT_GE(received("lane/PushPull"), payload) << text;
    EXPECT_LE(received("PushPull"), 0) << text;
  } else {
    EXPECT_GE(received("PushPull"), payload) << text;
  }
}

// Given its shared model's buffers, a client leaves payloads in place for
// servers on this host, whole push-pulls and per-layer ones, windowed Push
// and Pull pairs included; the steps come out as from buffers of its own.
TEST(GrpcPsClientTest, TrainsInPlaceInItsSharedModel) {
  const Layout layout = *Layout::Create({{"w", {256, 64}}, {"b", {64}}}, 4 << 10, 2, 3);
  MetricRegistry metrics;
  InProcessServer s0(0, 2, 2, 0, absl::Seconds(2), 0, 64 << 20, &metrics), s1(1, 2, 2);
  // Worker 1 keeps windows of single-chunk Push and Pull calls.
  std::unique_ptr<PsClient> clients[2] = {
      Client(layout, {s0.address(), s1.address()}, 0, 2),
      Client(layout, {s0.address(), s1.address()}, 1, 2, absl::Seconds(10), absl::Seconds(20),
             WireDType::kFloat32, 8 << 10)};
  const int64_t n = layout.total_elements();
  std::vector<float> own(n);  // worker 1's weights after the first step
  for (auto& c : clients) {
    const PsClient::SharedModel m = c->shared_model();
    ASSERT_EQ(m.grads != nullptr, SharedMemoryOn());
    ASSERT_EQ(m.weights != nullptr, SharedMemoryOn());
    if (m.grads != nullptr) {
      EXPECT_EQ(m.weights, m.grads + n);
    }
  }
  if (!SharedMemoryOn()) return;
  std::vector<std::thread> threads;
  for (int rank : {0, 1}) {
    threads.emplace_back([&, rank] {
      PsClient& c = *clients[rank];
      ExpectVersion(c.Register(), 0);
      const PsClient::SharedModel m = c.shared_model();
      ASSERT_TRUE(c.Pull(0, PullPrecision::kWire, m.weights).ok());
      std::fill_n(m.grads, n, rank == 0 ? 1.0f : 3.0f);
      ASSERT_TRUE(c.PushPull(0, 1, m.grads, m.weights).ok());
      // The same step's weights into a buffer of the client's own (worker 1).
      if (rank == 1) {
        ASSERT_TRUE(c.Pull(1, PullPrecision::kWire, own.data()).ok());
      }
      for (int t = c.num_tensors() - 1; t >= 0; --t) {
        ASSERT_TRUE(c.StartPushPull(1, 1, t, t + 1, m.grads, m.weights).ok());
      }
      ASSERT_TRUE(c.Wait().ok());
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<float> expected = InitialWeights(layout);
  for (float& w : expected) w -= 2.0f;  // the mean of 1 and 3
  EXPECT_EQ(own, expected);
  for (float& w : expected) w -= 2.0f;
  for (auto& c : clients) {
    const PsClient::SharedModel m = c->shared_model();
    EXPECT_EQ(std::vector<float>(m.weights, m.weights + n), expected);
  }
  // Server 0 received no payload bytes but worker 1's one Pull request.
  const std::string text = metrics.Render();
  for (const char* method : {"PushPull", "Push"}) {
    const std::string key =
        absl::StrCat("psync_server_received_bytes_total{method=\"", method, "\"} ");
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << text;
    EXPECT_LT(std::stod(text.substr(at + key.size())), n * sizeof(float) / 10) << method;
  }
}

// With a 2-byte wire dtype the client narrows gradients and widens weights:
// it trains with the servers' float32 weights rounded through the dtype, and
// a kMaster pull gives them exactly.
TEST(GrpcPsClientTest, TrainsStepsInEachNarrowDType) {
  for (WireDType dtype : {WireDType::kBf16, WireDType::kFp16}) {
    SCOPED_TRACE(WireDTypeName(dtype));
    const Layout layout = TestLayout(2);
    InProcessServer s0(0, 2, 1), s1(1, 2, 1);
    auto client = Client(layout, {s0.address(), s1.address()}, 0, 1, absl::Seconds(10),
                         absl::Seconds(20), dtype);
    ExpectVersion(client->Register(), 0);
    auto rounded = [dtype](std::vector<float> v) {
      std::vector<char> wire(v.size() * 2);
      EncodeWire(dtype, v.data(), static_cast<int64_t>(v.size()), wire.data());
      DecodeWire(dtype, wire.data(), static_cast<int64_t>(v.size()), v.data());
      return v;
    };
    std::vector<float> expected = InitialWeights(layout);
    std::vector<float> w(expected.size());
    ASSERT_TRUE(client->Pull(0, PullPrecision::kWire, w.data()).ok());
    EXPECT_EQ(w, rounded(expected));

    // 2 and 6 are exact in both dtypes: the servers subtract exactly 1 and 3.
    const std::vector<float> grads(w.size(), 2.0f), more(w.size(), 6.0f);
    ASSERT_TRUE(client->PushPull(0, 2, grads.data(), w.data()).ok());
    for (float& v : expected) v -= 1.0f;
    EXPECT_EQ(w, rounded(expected));
    for (int t = client->num_tensors() - 1; t >= 0; --t) {
      ASSERT_TRUE(client->StartPushPull(1, 2, t, t + 1, more.data(), w.data()).ok());
    }
    ASSERT_TRUE(client->Wait().ok());
    for (float& v : expected) v -= 3.0f;
    EXPECT_EQ(w, rounded(expected));
    ASSERT_NE(rounded(expected), expected);
    ASSERT_TRUE(client->Pull(2, PullPrecision::kMaster, w.data()).ok());
    EXPECT_EQ(w, expected);
    EXPECT_EQ(client->Finish(2), absl::OkStatus());
  }
}

// A client whose requests go one chunk each, one at a time (the window of
// GrpcPsClientOptions::push_window_bytes at its smallest).
std::unique_ptr<PsClient> OneAtATimeClient(const Layout& layout,
                                           std::vector<std::string> addresses, int rank = 0,
                                           int workers = 1) {
  return Client(layout, std::move(addresses), rank, workers, absl::Seconds(10),
                absl::Seconds(20), WireDType::kFloat32, /*push_window_bytes=*/1);
}

// With more than one worker a windowed push-pull is a Push then a Pull per
// request: workers that send their chunks in different orders (one whole,
// one layer by layer from the last) cannot wait on each other's windows.
TEST(GrpcPsClientTest, WindowedPushPullsOfWorkersInDifferentChunkOrders) {
  const Layout layout = TestLayout(2);
  InProcessServer s0(0, 2, 2), s1(1, 2, 2);
  auto c0 = OneAtATimeClient(layout, {s0.address(), s1.address()}, 0, 2);
  auto c1 = OneAtATimeClient(layout, {s0.address(), s1.address()}, 1, 2);
  ASSERT_TRUE(c0->Register().ok());
  ASSERT_TRUE(c1->Register().ok());
  std::vector<float> expected = InitialWeights(layout);
  std::vector<float> w0(expected.size()), w1(expected.size());
  const std::vector<float> twos(w0.size(), 2.0f), fours(w0.size(), 4.0f);
  for (int64_t step = 0; step < 3; ++step) {
    // Worker 0 whole, worker 1 by layer; sums of 2 and 4 over one sample
    // each: the mean 3 is subtracted.
    Async whole([&] { return c0->PushPull(step, 1, twos.data(), w0.data()); });
    for (int t = c1->num_tensors() - 1; t >= 0; --t) {
      ASSERT_TRUE(c1->StartPushPull(step, 1, t, t + 1, fours.data(), w1.data()).ok());
    }
    ASSERT_EQ(c1->Wait(), absl::OkStatus());
    ASSERT_EQ(whole.Get(), absl::OkStatus());
    for (float& v : expected) v -= 3.0f;
    EXPECT_EQ(w0, expected) << "step " << step;
    EXPECT_EQ(w1, expected) << "step " << step;
  }
}

// Where payloads travel in the messages, a windowed push-pull's Pull goes
// right behind its Push, before the Push is answered: sent once the Push has
// ended, it would queue behind the window's later Pushes and reach the
// server late, and the server's answer with it.
TEST(GrpcPsClientTest, AWindowedPullGoesBeforeItsPushIsAnswered) {
  const Layout layout = TestLayout(1);
  FakeServer fake;  // takes no shared memory
  auto client = OneAtATimeClient(layout, {fake.address()}, 0, 2);
  ASSERT_TRUE(client->Register().ok());
  ExpectPushPullEchoed(layout, *client);
  absl::MutexLock lock(&fake.service.mu);
  EXPECT_GT(fake.service.push_calls, 1);  // a call a chunk
  EXPECT_EQ(fake.service.pull_calls, fake.service.push_calls);
}

// A windowed Push that fails for good ends its Pull at once, which would
// otherwise wait until its deadline for weights that cannot come.
TEST(GrpcPsClientTest, AFailedWindowedPushEndsItsPull) {
  const Layout layout = TestLayout(1);
  FakeServer fake;
  {
    absl::MutexLock lock(&fake.service.mu);
    fake.service.push_failure = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad chunk");
    fake.service.pulls_wait = true;
  }
  auto client = OneAtATimeClient(layout, {fake.address()}, 0, 2);  // calls' deadline 20 s
  ASSERT_TRUE(client->Register().ok());
  std::vector<float> grads(layout.total_elements()), w(grads.size());
  const absl::Time start = absl::Now();
  const absl::Status s = client->PushPull(0, 1, grads.data(), w.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("bad chunk"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  absl::MutexLock lock(&fake.service.mu);
  EXPECT_EQ(fake.service.push_calls, 1);  // the requests queued behind it are not sent
  EXPECT_EQ(fake.service.pull_calls, 1);
}

// A server's share goes as one request of up to max_request_bytes on
// loopback (the cores bound a step there), and in at least 256 across a
// network (the link does, and the pipeline fills and drains a request).
TEST(GrpcPsClientTest, ASmallShareIsCutIntoMoreRequestsAcrossANetwork) {
  // 8 chunks of 2 floats on one server: 64 bytes. Across a network at
  // least 256 requests, a chunk at least each: 8 calls.
  const Layout layout = *Layout::Create({{"w", {16}}}, 8, 1, 3);
  std::vector<float> grads(layout.total_elements(), 0.5f), w(grads.size());
  const std::string other = NonLoopbackIpv4Address();
  if (other.empty()) GTEST_SKIP() << "no IPv4 address besides loopback";
  for (const std::string& host : {std::string("127.0.0.1"), other}) {
    FakeServer fake(host);
    auto client = Client(layout, {fake.address()});
    ASSERT_TRUE(client->Register().ok());
    ASSERT_TRUE(client->PushPull(0, 1, grads.data(), w.data()).ok());
    EXPECT_EQ(w, grads);
    absl::MutexLock lock(&fake.service.mu);
    EXPECT_EQ(fake.service.push_pull_calls, host == other ? 8 : 1) << host;
  }
}

// Requests fit the message limit the server answers at Register: 1 MiB in
// 64 KiB chunks goes as one request (max_request_bytes) to a server that
// takes 2 MiB messages or says nothing, in 256 KiB ones to one that takes
// 1.25 MiB (1 MiB of it is headroom).
TEST(GrpcPsClientTest, RequestsFitTheServersMessageLimit) {
  const Layout layout = *Layout::Create({{"w", {1 << 18}}}, 64 << 10, 1, 3);
  std::vector<float> grads(layout.total_elements(), 0.5f), w(grads.size());
  for (const auto& [limit, calls] : {std::pair<int64_t, int>{0, 1}, {2 << 20, 1},
                                     {(1 << 20) + (256 << 10), 4}}) {
    FakeServer fake;
    {
      absl::MutexLock lock(&fake.service.mu);
      fake.service.max_message_bytes = limit;
    }
    auto client = Client(layout, {fake.address()});
    ASSERT_TRUE(client->Register().ok());
    ASSERT_TRUE(client->PushPull(0, 1, grads.data(), w.data()).ok());
    EXPECT_EQ(w, grads);
    absl::MutexLock lock(&fake.service.mu);
    EXPECT_EQ(fake.service.push_pull_calls, calls) << limit;
  }
}

// A model of many small tensors registers, though its registration (every
// tensor's name and shape) is larger than any push-pull: 20,000 one-float
// tensors with 120-byte names, about 2.6 MB of Register against 80 KB of
// weights, also with a server whose message limit (2 MiB, the smallest
// --max_message_mb) is below it: a registration has its own bound.
TEST(GrpcPsClientTest, RegistersAModelWhoseRegistrationIsLargerThanItsWeights) {
  std::vector<TensorSpec> tensors;
  for (int i = 0; i < 20000; ++i) {
    tensors.push_back({absl::StrCat(std::string(114, 'p'), absl::Dec(i, absl::kZeroPad6)), {1}});
  }
  const Layout layout = *Layout::Create(tensors, 256 << 10, 1, 3);
  for (int64_t limit : {int64_t{64} << 20, int64_t{2} << 20}) {
    SCOPED_TRACE(limit);
    InProcessServer server(0, 1, 1, 0, absl::Seconds(2), 0, limit);
    auto client = Client(layout, {server.address()});
    ASSERT_EQ(client->Register().status(), absl::OkStatus());
    std::vector<float> grads(layout.total_elements(), 0.5f), w(grads.size());
    ASSERT_EQ(client->PushPull(0, 1, grads.data(), w.data()), absl::OkStatus());
    std::vector<float> expected = InitialWeights(layout);
    for (float& v : expected) v -= 0.5f;
    EXPECT_EQ(w, expected);
  }
  // One over the servers' bound is refused before it is sent, saying why.
  InProcessServer server(0, 1, 1);
  for (TensorSpec& t : tensors) t.name += std::string(330, 'q');
  auto over = Client(*Layout::Create(tensors, 256 << 10, 1, 3), {server.address()});
  const absl::Status refused = over->Register().status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("20000 tensors and 0 frozen ones"));
  EXPECT_THAT(refused.message(), HasSubstr("over the servers' bound of 8388608 less 4096"));
}

// A server's share may be several times its message limit: pulls and
// push-pulls go in requests that fit, in every wire dtype, and two workers'
// windowed Push-then-Pull requests give the exact mean.
TEST(GrpcPsClientTest, TrainsAShareLargerThanTheServersMessageLimit) {
  // 6 MiB in 256 KiB chunks, a server that takes 2 MiB messages.
  const Layout layout = *Layout::Create({{"w", {1 << 20}}, {"b", {1 << 19}}}, 256 << 10, 1, 3);
  // A lone worker's PushPull requests of exactly the limit less 1 MiB of
  // chunks are taken (the server counts their payload, not their framing).
  {
    InProcessServer server(0, 1, 1, 0, absl::Seconds(2), 0, /*max_message_bytes=*/2 << 20);
    auto client = Client(layout, {server.address()});
    ASSERT_TRUE(client->Register().ok());
    std::vector<float> expected = InitialWeights(layout), w(expected.size());
    const std::vector<float> twos(w.size(), 2.0f);
    ASSERT_EQ(client->PushPull(0, 1, twos.data(), w.data()), absl::OkStatus());
    for (float& v : expected) v -= 2.0f;
    EXPECT_EQ(w, expected);
  }
  for (WireDType dtype : {WireDType::kFloat32, WireDType::kBf16, WireDType::kFp16}) {
    SCOPED_TRACE(WireDTypeName(dtype));
    InProcessServer server(0, 1, 2, 0, absl::Seconds(2), 0, /*max_message_bytes=*/2 << 20);
    std::vector<std::unique_ptr<PsClient>> clients;
    for (int rank : {0, 1}) {
      clients.push_back(Client(layout, {server.address()}, rank, 2, absl::Seconds(10),
                               absl::Seconds(20), dtype));
      ASSERT_TRUE(clients.back()->Register().ok());
    }
    std::vector<float> expected = InitialWeights(layout);
    std::vector<float> w0(expected.size()), w1(expected.size());
    ASSERT_TRUE(clients[0]->Pull(0, PullPrecision::kMaster, w0.data()).ok());
    EXPECT_EQ(w0, expected);
    // Sums of 2 and 4 over one sample each: the mean 3, exact in each dtype.
    const std::vector<float> twos(w0.size(), 2.0f), fours(w0.size(), 4.0f);
    for (int64_t step = 0; step < 2; ++step) {
      Async whole([&] { return clients[0]->PushPull(step, 1, twos.data(), w0.data()); });
      for (int t = clients[1]->num_tensors() - 1; t >= 0; --t) {
        ASSERT_TRUE(clients[1]->StartPushPull(step, 1, t, t + 1, fours.data(), w1.data()).ok());
      }
      ASSERT_EQ(clients[1]->Wait(), absl::OkStatus());
      ASSERT_EQ(whole.Get(), absl::OkStatus());
      for (float& v : expected) v -= 3.0f;
      EXPECT_EQ(w0, w1) << "step " << step;
    }
    ASSERT_TRUE(clients[1]->Pull(2, PullPrecision::kMaster, w1.data()).ok());
    EXPECT_EQ(w1, expected);
    ASSERT_TRUE(clients[0]->Pull(2, PullPrecision::kWire, w0.data()).ok());
    if (dtype == WireDType::kFloat32) {
      EXPECT_EQ(w0, expected);
    }
  }
}

TEST(GrpcPsClientTest, NarrowAnswersOfTheWrongSizeOrDTypeAreRefused) {
  const Layout layout = TestLayout(1);
  FakeServer fake;
  auto client = Client(layout, {fake.address()}, 0, 1, absl::Seconds(10), absl::Seconds(20),
                       WireDType::kBf16);
  ASSERT_TRUE(client->Register().ok());
  std::vector<float> grads(layout.total_elements(), 0.5f), w(grads.size());
  // The fake answers the pushed gradients: bf16, widened back.
  ASSERT_TRUE(client->PushPull(0, 1, grads.data(), w.data()).ok());
  EXPECT_EQ(w, grads);
  {
    absl::MutexLock lock(&fake.service.mu);
    EXPECT_EQ(fake.service.pushed_dtype, proto::DTYPE_BFLOAT16);
    fake.service.truncate_data = true;
  }
  absl::Status s = client->PushPull(0, 1, grads.data(), w.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("chunk 0 has 3 bytes, layout says 4 (2 values of bf16)"));
  {
    absl::MutexLock lock(&fake.service.mu);
    fake.service.truncate_data = false;
    fake.service.answer_dtype = 9;
  }
  s = client->PushPull(0, 1, grads.data(), w.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("chunk 0 from server 0 has dtype 9, expected"));
  {
    // A server that answers float32 (one that predates narrow pulls) is read as such.
    absl::MutexLock lock(&fake.service.mu);
    fake.service.answer_dtype = proto::DTYPE_FLOAT32;
  }
  s = client->PushPull(0, 1, grads.data(), w.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("chunk 0 has 4 bytes, layout says 8"));
}

// Both with all requests in flight and with one at a time (a lone worker
// windows PushPull calls: each is retried in its turn).
TEST(GrpcPsClientTest, RetriesUnavailableUntilTheServerAnswers) {
  const Layout layout = TestLayout(1);
  for (bool one_at_a_time : {false, true}) {
    SCOPED_TRACE(one_at_a_time ? "one request at a time" : "one request");
    FakeServer fake;
    {
      absl::MutexLock lock(&fake.service.mu);
      fake.service.failures = 3;
    }
    auto client = one_at_a_time ? OneAtATimeClient(layout, {fake.address()})
                                : Client(layout, {fake.address()});
    ASSERT_TRUE(client->Register().ok());
    ExpectPushPullEchoed(layout, *client);
    absl::MutexLock lock(&fake.service.mu);
    EXPECT_EQ(fake.service.push_pull_calls, 3 + (one_at_a_time ? 3 : 1));  // + a call a chunk
  }
}

// Counts the log lines holding `text` while it lives.
class LogLines : public google::LogSink {
 public:
  explicit LogLines(std::string text) : text_(std::move(text)) { google::AddLogSink(this); }
  ~LogLines() override { google::RemoveLogSink(this); }
  using google::LogSink::send;
  void send(google::LogSeverity, const char*, const char*, int, const google::LogMessageTime&,
            const char* message, size_t length) override {
    if (absl::string_view(message, length).find(text_) != absl::string_view::npos) ++count_;
  }
  int count() const { return count_.load(); }

 private:
  const std::string text_;
  std::atomic<int> count_{0};
};

// Every call to a server that lost its connection retries; the worker says
// so once for the server, not once a call, and once that one went through.
// A loss that ends in the calls failing for good is said again next time.
TEST(GrpcPsClientTest, ALostServerIsSaidOnceForAllItsCalls) {
  const Layout layout = TestLayout(1);  // 3 chunks: 3 requests, all in flight
  FakeServer fake;
  LogLines lost("retrying until its deadline"), back("went through after all");
  auto client = Client(layout, {fake.address()}, 0, 1, absl::Seconds(10), absl::Seconds(20),
                       WireDType::kFloat32, /*push_window_bytes=*/1 << 20);
  ASSERT_TRUE(client->Register().ok());
  // Every push-pull fails with `failure` until each request has failed at
  // least twice; then the server answers `then` (OK: the calls go through).
  auto lose_then = [&](grpc::Status then) {
    int before;
    {
      absl::MutexLock lock(&fake.service.mu);
      fake.service.failure = grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting");
      fake.service.failures = 1 << 30;
      fake.service.failed_chunks.clear();
      before = fake.service.push_pull_calls;
    }
    std::vector<float> grads(layout.total_elements()), w(grads.size());
    Async push_pull([&] { return client->PushPull(0, 1, grads.data(), w.data()); });
    {
      absl::MutexLock lock(&fake.service.mu);
      auto tried = [&fake, before]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(fake.service.mu) {
        return fake.service.push_pull_calls >= before + 6;
      };
      EXPECT_TRUE(fake.service.mu.AwaitWithTimeout(absl::Condition(&tried), absl::Seconds(20)));
      EXPECT_EQ(fake.service.failed_chunks.size(), 3u);  // each request lost its connection
      if (then.ok()) {
        fake.service.failures = 0;
      } else {
        fake.service.failure = then;
      }
    }
    return push_pull.Get();
  };
  EXPECT_TRUE(lose_then(grpc::Status::OK).ok());
  EXPECT_EQ(lost.count(), 1);
  EXPECT_EQ(back.count(), 1);
  EXPECT_EQ(lose_then(grpc::Status(grpc::StatusCode::ABORTED, "rolled back")).code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(lost.count(), 2);
  EXPECT_TRUE(lose_then(grpc::Status::OK).ok());
  EXPECT_EQ(lost.count(), 3);
  EXPECT_EQ(back.count(), 2);
}

TEST(GrpcPsClientTest, OtherErrorsAreNotRetriedAndNameTheServer) {
  const Layout layout = TestLayout(1);
  for (bool one_at_a_time : {false, true}) {
    SCOPED_TRACE(one_at_a_time ? "one request at a time" : "one request");
    FakeServer fake;
    {
      absl::MutexLock lock(&fake.service.mu);
      fake.service.failures = 100;
      fake.service.failure = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad chunk");
    }
    auto client = one_at_a_time ? OneAtATimeClient(layout, {fake.address()})
                                : Client(layout, {fake.address()});
    ASSERT_TRUE(client->Register().ok());
    std::vector<float> grads(layout.total_elements()), w(grads.size());
    absl::Status s = client->PushPull(0, 1, grads.data(), w.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(),
                HasSubstr(absl::StrCat("server 0 (", fake.address(), "): bad chunk")));
    absl::MutexLock lock(&fake.service.mu);
    // Once: the requests queued behind a failure for good are not sent.
    EXPECT_EQ(fake.service.push_pull_calls, 1);
  }
}

TEST(GrpcPsClientTest, RetriesEndAtTheCallDeadline) {
  const Layout layout = TestLayout(1);
  FakeServer fake;
  {
    absl::MutexLock lock(&fake.service.mu);
    fake.service.failures = 1 << 30;
  }
  auto client = Client(layout, {fake.address()}, 0, 1, absl::Seconds(10), absl::Seconds(1));
  ASSERT_TRUE(client->Register().ok());
  std::vector<float> grads(layout.total_elements()), w(grads.size());
  const absl::Time start = absl::Now();
  absl::Status s = client->PushPull(0, 1, grads.data(), w.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  absl::MutexLock lock(&fake.service.mu);
  EXPECT_GT(fake.service.push_pull_calls, 2);
}

TEST(GrpcPsClientTest, RefusesAnswersThatDoNotMatchTheRequest) {
  const Layout layout = TestLayout(1);
  FakeServer fake;
  auto client = Client(layout, {fake.address()});
  ASSERT_TRUE(client->Register().ok());
  std::vector<float> grads(layout.total_elements()), w(grads.size());
  {
    absl::MutexLock lock(&fake.service.mu);
    fake.service.version_skew = 1;
  }
  absl::Status s = client->PushPull(0, 1, grads.data(), w.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("is at version 2, expected 1"));
  {
    absl::MutexLock lock(&fake.service.mu);
    fake.service.version_skew = 0;
    fake.service.drop_last_chunk = true;
  }
  s = client->PushPull(0, 1, grads.data(), w.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("expected 3"));
}

TEST(GrpcPsClientTest, RegisterWaitsForAServerThatIsNotUpYet) {
  const Layout layout = TestLayout(1);
  PortReservation ports;
  absl::StatusOr<int> port = ports.Add();
  ASSERT_TRUE(port.ok()) << port.status();
  ports.Release();
  auto client = Client(layout, {absl::StrCat("127.0.0.1:", *port)});
  absl::StatusOr<int64_t> version;
  std::thread registering([&] { version = client->Register(); });
  absl::SleepFor(absl::Milliseconds(700));
  InProcessServer server(0, 1, 1, *port);
  registering.join();
  ExpectVersion(version, 0);
}

TEST(GrpcPsClientTest, RegisterGivesUpAfterTheConnectTimeout) {
  const Layout layout = TestLayout(1);
  PortReservation ports;
  absl::StatusOr<int> port = ports.Add();  // held: nothing listens there
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string address = absl::StrCat("127.0.0.1:", *port);
  auto client = Client(layout, {address}, 0, 1, absl::Seconds(1));
  const absl::Time start = absl::Now();
  absl::StatusOr<int64_t> version = client->Register();
  EXPECT_FALSE(version.ok());
  EXPECT_THAT(version.status().message(), HasSubstr(address));
  EXPECT_THAT(version.status().message(), HasSubstr("--connect_timeout_s=1"));
  EXPECT_THAT(version.status().message(),
              HasSubstr("could not be reached: failed to connect to all addresses"));
  EXPECT_THAT(version.status().message(), HasSubstr("is it running, at that address?"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(8));
}

// An elastic job's server takes a Register from a worker that is not a
// member as its asking to join: a worker that cannot reach every server asks
// none of them.
TEST(GrpcPsClientTest, RegisterAsksNoServerUntilItReachesEveryOne) {
  const Layout layout = TestLayout(2);
  FakeServer reachable;
  PortReservation ports;
  absl::StatusOr<int> port = ports.Add();  // held: nothing listens there
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string unreachable = absl::StrCat("127.0.0.1:", *port);
  auto client = Client(layout, {reachable.address(), unreachable}, 0, 1, absl::Seconds(2));
  absl::StatusOr<int64_t> version = client->Register();
  ASSERT_FALSE(version.ok());
  EXPECT_THAT(version.status().message(),
              HasSubstr(absl::StrCat("Register: server 1 (", unreachable, ") could not be reached")));
  absl::MutexLock lock(&reachable.service.mu);
  EXPECT_EQ(reachable.service.register_calls, 0);
}

// A server that accepted the connection but answers nothing (busy) is not
// asked whether it is running.
TEST(GrpcPsClientTest, RegisterTellsABusyServerFromAnUnreachableOne) {
  const Layout layout = TestLayout(1);
  FakeServer fake;
  {
    absl::MutexLock lock(&fake.service.mu);
    fake.service.busy = true;
  }
  auto client = Client(layout, {fake.address()}, 0, 1, absl::Seconds(2));
  const absl::StatusOr<int64_t> version = client->Register();
  {
    absl::MutexLock lock(&fake.service.mu);
    fake.service.busy = false;
  }
  ASSERT_FALSE(version.ok());
  EXPECT_EQ(version.status().code(), absl::StatusCode::kDeadlineExceeded);
  // Register waited what was left of the 2 s once the channel connected.
  EXPECT_THAT(version.status().message(),
              HasSubstr(absl::StrCat("Register: server 0 (", fake.address(),
                                     ") is connected but slow to answer: neither Register (")));
  EXPECT_THAT(version.status().message(),
              HasSubstr("s) nor a status request (1s) got an answer; it is busy"));
  EXPECT_THAT(version.status().message(), HasSubstr("(gave up after --connect_timeout_s=2)"));
  EXPECT_THAT(version.status().message(), Not(HasSubstr("is it running")));
}

TEST(GrpcPsClientTest, RegisterChecksTheOrderOfServers) {
  const Layout layout = TestLayout(2);
  FakeServer a, b;
  {
    absl::MutexLock lock(&a.service.mu);
    a.service.server_rank = 1;  // listed first, but says it is server 1
  }
  auto client = Client(layout, {a.address(), b.address()});
  absl::StatusOr<int64_t> version = client->Register();
  EXPECT_EQ(version.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(version.status().message(), HasSubstr("check the order of --servers"));
}

TEST(GrpcPsClientTest, RegisterWaitsUntilEveryServerIsInTheSameGeneration) {
  const Layout layout = TestLayout(2);
  FakeServer a, b;
  {
    absl::MutexLock lock(&a.service.mu);
    a.service.generations = {2};
  }
  {
    absl::MutexLock lock(&b.service.mu);
    b.service.server_rank = 1;
    b.service.generations = {1, 1, 2};  // still restoring for two rounds
  }
  auto client = Client(layout, {a.address(), b.address()});
  ASSERT_TRUE(client->Register().ok());
  absl::MutexLock lock(&b.service.mu);
  EXPECT_EQ(b.service.register_calls, 3);
}

TEST(GrpcPsClientTest, RegisterDoesNotRetryAPermanentRefusal) {
  const Layout layout = TestLayout(1);
  FakeServer fake;
  {
    absl::MutexLock lock(&fake.service.mu);
    // What a server answers for a layout over its message limit.
    fake.service.register_failure =
        grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "layout too large");
  }
  auto client = Client(layout, {fake.address()});
  absl::StatusOr<int64_t> version = client->Register();
  EXPECT_EQ(version.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(version.status().message(), HasSubstr("layout too large"));
  absl::MutexLock lock(&fake.service.mu);
  EXPECT_EQ(fake.service.register_calls, 1);
}

TEST(GrpcPsClientTest, RegisterRefusesGarbageVersions) {
  const Layout layout = TestLayout(1);
  FakeServer fake;
  for (auto [version, max_version] : {std::pair<int64_t, int64_t>{-1, 0}, {5, 4}}) {
    {
      absl::MutexLock lock(&fake.service.mu);
      fake.service.version = version;
      fake.service.max_version = max_version;
    }
    auto client = Client(layout, {fake.address()});
    absl::StatusOr<int64_t> registered = client->Register();
    EXPECT_EQ(registered.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(registered.status().message(),
                HasSubstr(absl::StrCat("server 0 (", fake.address(), ") answered version ",
                                       version, " and max_version ", max_version)));
  }
}

TEST(GrpcPsClientTest, CallsAfterCancelFailWithoutAnRpc) {
  const Layout layout = TestLayout(1);
  FakeServer fake;
  auto client = Client(layout, {fake.address()});
  ASSERT_TRUE(client->Register().ok());
  client->Cancel();
  std::vector<float> grads(layout.total_elements()), w(grads.size());
  EXPECT_EQ(client->PushPull(0, 1, grads.data(), w.data()).code(), absl::StatusCode::kCancelled);
  for (int t = client->num_tensors() - 1; t >= 0; --t) {  // deferred, on the poller
    ASSERT_TRUE(client->StartPushPull(0, 1, t, t + 1, grads.data(), w.data()).ok());
  }
  EXPECT_EQ(client->Wait().code(), absl::StatusCode::kCancelled);
  absl::MutexLock lock(&fake.service.mu);
  EXPECT_EQ(fake.service.push_pull_calls, 0);
}

TEST(GrpcPsClientTest, FinishWaitsThroughTransientHeartbeatErrors) {
  const Layout layout = TestLayout(1);
  FakeServer fake;
  {
    absl::MutexLock lock(&fake.service.mu);
    fake.service.heartbeat_failures = 4;
    fake.service.heartbeat_failure =
        grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too many calls");
    fake.service.all_done = true;
  }
  auto client = Client(layout, {fake.address()});
  ASSERT_TRUE(client->Register().ok());
  EXPECT_EQ(client->Finish(1), absl::OkStatus());
  absl::MutexLock lock(&fake.service.mu);
  EXPECT_GT(fake.service.heartbeat_calls, 4);
}

TEST(GrpcPsClientTest, FinishEndsOnAnAbortedHeartbeat) {
  const Layout layout = TestLayout(1);
  FakeServer fake;
  {
    absl::MutexLock lock(&fake.service.mu);
    fake.service.heartbeat_failures = 1 << 30;
    fake.service.heartbeat_failure = grpc::Status(grpc::StatusCode::ABORTED, "rolled back");
  }
  auto client = Client(layout, {fake.address()});
  ASSERT_TRUE(client->Register().ok());
  const absl::Status s = client->Finish(1);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr("rolled back"));
}

TEST(GrpcPsClientTest, AfterARollbackCallsAreAbortedAndRegisteringAgainResumes) {
  const Layout layout = TestLayout(2);
  InProcessServer s0(0, 2, 1, 0, absl::Seconds(2), 1), s1(1, 2, 1, 0, absl::Seconds(2), 1);
  auto client = Client(layout, {s0.address(), s1.address()});
  ASSERT_TRUE(client->Register().ok());
  std::vector<float> grads(layout.total_elements(), 1.0f), w(grads.size()), at1;
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(client->PushPull(step, 1, grads.data(), w.data()).ok());
    if (step == 0) at1 = w;
  }
  s0.RollBackTo(1);
  s1.RollBackTo(1);

  absl::Status s = client->PushPull(3, 1, grads.data(), w.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  ExpectVersion(client->Register(), 1);
  ASSERT_TRUE(client->Pull(1, PullPrecision::kWire, w.data()).ok());
  EXPECT_EQ(w, at1);
  ASSERT_TRUE(client->PushPull(1, 1, grads.data(), w.data()).ok());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_FLOAT_EQ(w[i], at1[i] - 1.0f) << i;
}

TEST(GrpcPsClientTest, ARollbackEndsAWaitingCallAtOnce) {
  const Layout layout = TestLayout(1);
  InProcessServer server(0, 1, 2);
  auto c0 = Client(layout, {server.address()}, 0, 2);
  auto c1 = Client(layout, {server.address()}, 1, 2);
  ASSERT_TRUE(c0->Register().ok());
  ASSERT_TRUE(c1->Register().ok());
  std::vector<float> grads(layout.total_elements(), 1.0f), w(grads.size());
  Async waiting([&] { return c0->PushPull(0, 1, grads.data(), w.data()); });  // waits for c1
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(waiting.Done());
  const absl::Time rollback = absl::Now();
  server.store->Restore(server.store->generation() + 1, std::nullopt);
  EXPECT_EQ(waiting.Get().code(), absl::StatusCode::kAborted);
  EXPECT_LT(absl::Now() - rollback, absl::Seconds(5));
}

TEST(GrpcPsClientTest, ARankHeldByALiveProcessIsRefusedUntilItDies) {
  const Layout layout = TestLayout(1);
  InProcessServer server(0, 1, 1, 0, /*worker_lease=*/absl::Milliseconds(600));
  auto first = Client(layout, {server.address()});
  ASSERT_TRUE(first->Register().ok());
  // The first holder's heartbeats keep its lease while it computes.
  auto second = Client(layout, {server.address()}, 0, 1, absl::Seconds(2));
  absl::StatusOr<int64_t> refused = second->Register();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("held by a live process"));

  first.reset();  // dies: its lease runs out
  auto third = Client(layout, {server.address()}, 0, 1, absl::Seconds(10));
  EXPECT_TRUE(third->Register().ok());
}

// Also a call of the windowed transport: its Push done, its Pull waiting.
TEST(GrpcPsClientTest, CancelEndsAWaitingCall) {
  const Layout layout = TestLayout(1);
  for (bool one_at_a_time : {false, true}) {
    SCOPED_TRACE(one_at_a_time ? "one request at a time" : "one request");
    InProcessServer server(0, 1, 2);
    auto c0 = one_at_a_time ? OneAtATimeClient(layout, {server.address()}, 0, 2)
                            : Client(layout, {server.address()}, 0, 2);
    auto c1 = Client(layout, {server.address()}, 1, 2);
    ASSERT_TRUE(c0->Register().ok());
    ASSERT_TRUE(c1->Register().ok());
    std::vector<float> grads(layout.total_elements(), 1.0f), w(grads.size());
    // Worker 1 never pushes.
    Async waiting([&] { return c0->PushPull(0, 1, grads.data(), w.data()); });
    absl::SleepFor(absl::Milliseconds(300));
    EXPECT_FALSE(waiting.Done());
    const absl::Time cancel = absl::Now();
    c0->Cancel();
    EXPECT_EQ(waiting.Get().code(), absl::StatusCode::kCancelled);
    EXPECT_LT(absl::Now() - cancel, absl::Seconds(5));
  }
}

TEST(GrpcPsClientTest, FinishWaitsForEveryWorker) {
  const Layout layout = TestLayout(1);
  InProcessServer server(0, 1, 2);
  auto c0 = Client(layout, {server.address()}, 0, 2);
  auto c1 = Client(layout, {server.address()}, 1, 2);
  ASSERT_TRUE(c0->Register().ok());
  ASSERT_TRUE(c1->Register().ok());
  std::vector<float> grads(layout.total_elements(), 1.0f), w0(grads.size()), w1(grads.size());
  {
    Async step([&] { return c1->PushPull(0, 1, grads.data(), w1.data()); });
    ASSERT_TRUE(c0->PushPull(0, 1, grads.data(), w0.data()).ok());
    ASSERT_TRUE(step.Get().ok());
  }
  Async finishing([&] { return c0->Finish(1); });
  absl::SleepFor(absl::Milliseconds(800));
  EXPECT_FALSE(finishing.Done());  // worker 1 has not said it is done
  EXPECT_EQ(c1->Finish(1), absl::OkStatus());
  EXPECT_EQ(finishing.Get(), absl::OkStatus());
}

}  // namespace
}  // namespace psync
