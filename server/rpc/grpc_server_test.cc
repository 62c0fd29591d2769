// The gRPC adapter of the server, driven with the generated stubs (plain
// protobuf on the wire): what a client in any language would see.
#include "server/rpc/grpc_server.h"

#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model/init.h"
#include "common/rpc/channel.h"
#include "common/rpc/host_addresses.h"
#include "common/wire/layout_proto.h"
#include "common/wire/shared_region.h"
#include "common/wire/wire_dtype.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/psync.grpc.pb.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

// Two tensors, 4 + 2 floats, in chunks of 2 floats: chunks 0..2.
Layout TestLayout() { return *Layout::Create({{"w", {2, 2}}, {"b", {2}}}, 8, 1, 3); }

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::vector<float> FloatsOf(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

class GrpcServerTest : public ::testing::Test {
 protected:
  // Starts server `rank` of `num_servers` for two workers (SGD with lr 1 and
  // no momentum: one step subtracts the mean gradient).
  void StartServer(int rank = 0, int num_servers = 1, int64_t max_message_bytes = 64 << 20,
                   const PeerSecurity& security = {}, const std::string& health_address = "") {
    stub_.reset();
    server_.reset();
    ShardStoreOptions o;
    o.server_rank = rank;
    o.num_servers = num_servers;
    o.num_workers = 2;
    o.optimizer = {0.0f, 0.0f};
    o.lr_policy.lr = 1.0;
    o.max_message_bytes = max_message_bytes;
    auto store = ShardStore::Create(o);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    store_->SetReady(true);
    if (rank == 0) coordinator_ = std::make_unique<Coordinator>(CoordinatorOptions{num_servers});
    GrpcServerOptions so;
    so.coordinator = coordinator_.get();
    so.max_pull_wait = absl::Seconds(10);
    so.security = security;
    so.health_address = health_address;
    so.metrics = metrics_;
    so.max_waiting_calls = max_waiting_calls_;
    so.max_waiting_per_connection = max_waiting_calls_;
    so.rpc_threads = rpc_threads_;
    so.shared_memory = shared_memory_;
    so.address = listen_address_;
    auto server = GrpcServer::Start(store_.get(), so);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(256 << 20);
    args.SetMaxReceiveMessageSize(256 << 20);
    stub_ = proto::ParameterServer::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials(), args));
  }

  // Calls `method` with `request` as the raw message bytes, as a client
  // without psync's .proto would; returns the status and the reply's bytes.
  std::pair<grpc::Status, std::string> RawCall(const std::string& method,
                                               const std::string& request, int port = 0) {
    grpc::GenericStub generic(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port > 0 ? port : server_->port()),
                            grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    grpc::Slice slice(request);
    const grpc::ByteBuffer in(&slice, 1);
    grpc::ByteBuffer out;
    grpc::Status status;
    bool done = false;
    absl::Mutex mu;
    generic.UnaryCall(&ctx, method, grpc::StubOptions(), &in, &out, [&](grpc::Status s) {
      absl::MutexLock lock(&mu);
      status = s;
      done = true;
    });
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
    std::vector<grpc::Slice> slices;
    std::string reply;
    if (status.ok() && out.Dump(&slices).ok()) {
      for (const grpc::Slice& piece : slices) {
        reply.append(reinterpret_cast<const char*>(piece.begin()), piece.size());
      }
    }
    return {status, reply};
  }

  proto::RegisterRequest RegisterRequestFor(int rank) const {
    proto::RegisterRequest req;
    req.set_worker_rank(rank);
    req.set_num_workers(2);
    LayoutToProto(layout_, req.mutable_layout());
    req.set_layout_fingerprint(layout_.fingerprint());
    req.set_worker_incarnation(100 + rank);
    return req;
  }

  // Registers worker `rank`; returns its session.
  uint64_t Register(int rank) {
    proto::RegisterResponse resp;
    grpc::Status st = Call(&proto::ParameterServer::Stub::Register, RegisterRequestFor(rank), &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.session();
  }

  // A push of `value` for every element of every chunk of the layout.
  proto::PushRequest PushOf(int rank, uint64_t session, int64_t step, float value) const {
    proto::PushRequest req;
    req.set_worker_rank(rank);
    req.set_layout_fingerprint(layout_.fingerprint());
    req.set_step(step);
    req.set_sample_count(1);
    req.set_session(session);
    for (const ChunkInfo& c : layout_.chunks()) {
      proto::Chunk* chunk = req.add_chunks();
      chunk->set_chunk_id(c.id);
      chunk->set_dtype(proto::DTYPE_FLOAT32);
      chunk->set_data(Floats(std::vector<float>(c.num_elements, value)));
    }
    return req;
  }

  proto::PullRequest PullOf(int rank, uint64_t session, int64_t version) const {
    proto::PullRequest req;
    req.set_worker_rank(rank);
    req.set_layout_fingerprint(layout_.fingerprint());
    req.set_version(version);
    req.set_session(session);
    for (const ChunkInfo& c : layout_.chunks()) req.add_chunk_ids(c.id);
    return req;
  }

  template <typename Req, typename Resp>
  grpc::Status Call(grpc::Status (proto::ParameterServer::Stub::*method)(grpc::ClientContext*,
                                                                        const Req&, Resp*),
                    const Req& req, Resp* resp, absl::Duration timeout = absl::Seconds(10)) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    return (stub_.get()->*method)(&ctx, req, resp);
  }

  // The layout's initial weights, flat.
  std::vector<float> InitialWeights() const {
    std::vector<float> w(layout_.total_elements());
    for (size_t t = 0; t < layout_.tensors().size(); ++t) {
      InitialValues(layout_.init_seed(), layout_.tensors()[t], 0,
                    layout_.tensors()[t].NumElements(), w.data() + layout_.tensor_offset(t));
    }
    return w;
  }

  // The response's chunks, flat in layout order; checks each one's version.
  std::vector<float> Flat(const proto::PullResponse& resp, int64_t version) const {
    std::vector<float> w;
    for (const proto::Chunk& c : resp.chunks()) {
      EXPECT_EQ(c.version(), version) << "chunk " << c.chunk_id();
      const std::vector<float> v = FloatsOf(c.data());
      w.insert(w.end(), v.begin(), v.end());
    }
    return w;
  }

  const Layout layout_ = TestLayout();
  MetricRegistry* metrics_ = nullptr;  // given to the next StartServer
  int max_waiting_calls_ = 4096;        // likewise, also per connection
  int rpc_threads_ = 1;                 // likewise
  bool shared_memory_ = true;           // likewise
  std::string listen_address_ = "127.0.0.1:0";  // likewise
  std::unique_ptr<ShardStore> store_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<GrpcServer> server_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
};

TEST_F(GrpcServerTest, RegistrationAnswersEveryField) {
  StartServer();
  proto::RegisterResponse resp;
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Register, RegisterRequestFor(1), &resp).ok());
  EXPECT_EQ(resp.server_rank(), 0);
  EXPECT_EQ(resp.layout_fingerprint(), layout_.fingerprint());
  EXPECT_EQ(resp.version(), 0);
  EXPECT_EQ(resp.max_version(), 0);
  EXPECT_NE(resp.session(), 0u);
  EXPECT_TRUE(resp.has_chunks());
  EXPECT_THAT(resp.chunk_ids(), ::testing::ElementsAre(0, 1, 2));

  proto::StatusResponse status;
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::GetStatus, proto::StatusRequest(), &status).ok());
  EXPECT_TRUE(status.registered());
  EXPECT_TRUE(status.ready());
  EXPECT_EQ(status.num_workers(), 2);
  EXPECT_EQ(status.num_chunks(), 3);
  EXPECT_EQ(status.bytes(), layout_.total_elements() * 4);
  EXPECT_EQ(status.generation(), resp.generation());
}

// Protobuf bytes in, protobuf bytes out, although the server decodes and
// encodes them with its own zero-copy codec.
TEST_F(GrpcServerTest, AStepThroughTheGeneratedStubs) {
  StartServer();
  const uint64_t s0 = Register(0), s1 = Register(1);
  proto::PullResponse pulled;
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Pull, PullOf(0, s0, 0), &pulled).ok());
  const std::vector<float> w0 = Flat(pulled, 0);
  EXPECT_EQ(w0, InitialWeights());

  proto::PushResponse pushed;
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Push, PushOf(1, s1, 0, 3.0f), &pushed).ok());
  proto::PullResponse next;
  grpc::Status st = Call(&proto::ParameterServer::Stub::PushPull, PushOf(0, s0, 0, 1.0f), &next);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const std::vector<float> w1 = Flat(next, 1);
  ASSERT_EQ(w1.size(), w0.size());
  for (size_t i = 0; i < w0.size(); ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 2.0f) << i;  // mean 2

  // A repeat of an applied step is acknowledged and changes nothing.
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Push, PushOf(1, s1, 0, 50.0f), &pushed).ok());
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Pull, PullOf(1, s1, 1), &pulled).ok());
  EXPECT_EQ(Flat(pulled, 1), w1);
}

// With several RPC threads the workers' connections are spread over them,
// and a push-pull that waits for the other worker is answered from the
// thread that applies the step: another connection's, maybe another
// thread's. Every step reaches both workers.
TEST_F(GrpcServerTest, SeveralRpcThreadsServeEveryConnection) {
  rpc_threads_ = 3;
  StartServer();
  const uint64_t sessions[2] = {Register(0), Register(1)};
  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> stubs;
  for (int worker = 0; worker < 2; ++worker) {
    grpc::ChannelArguments args;
    args.SetInt("psync.test.connection", worker);  // a connection of its own
    stubs.push_back(proto::ParameterServer::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", server_->port()), grpc::InsecureChannelCredentials(), args)));
  }
  const std::vector<float> w0 = InitialWeights();
  for (int64_t step = 0; step < 5; ++step) {
    proto::PullResponse pulled[2];
    grpc::Status status[2];
    std::vector<std::thread> workers;
    for (int w = 0; w < 2; ++w) {
      workers.emplace_back([&, w] {
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
        status[w] = stubs[w]->PushPull(&ctx, PushOf(w, sessions[w], step, w == 0 ? 1.0f : 3.0f),
                                       &pulled[w]);
      });
    }
    for (std::thread& t : workers) t.join();
    for (int w = 0; w < 2; ++w) {
      ASSERT_TRUE(status[w].ok()) << "worker " << w << ", step " << step << ": "
                                  << status[w].error_message();
      const std::vector<float> weights = Flat(pulled[w], step + 1);
      ASSERT_EQ(weights.size(), w0.size());
      for (size_t i = 0; i < w0.size(); ++i) {
        EXPECT_FLOAT_EQ(weights[i], w0[i] - 2.0f * (step + 1)) << "worker " << w << ", " << i;
      }
    }
  }
}

// Bytes that are no protobuf, to each method with a typed request: refused
// before the method runs, naming the method and the message expected; the
// call's slot asks for the next call, and the server goes on serving.
TEST_F(GrpcServerTest, UnparsableRequestsAreRefusedAndServingGoesOn) {
  StartServer();
  const std::string garbage("\xff\xff\xff\xff\x0f not a protobuf", 20);
  for (int round = 0; round < 2 * 4 + 1; ++round) {  // more than the requests posted per method
    for (const char* method : {"Register", "Pull", "GetStatus", "Heartbeat", "Join"}) {
      const auto [status, unused] =
          RawCall(absl::StrCat("/psync.proto.ParameterServer/", method), garbage);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
      EXPECT_THAT(status.error_message(),
                  HasSubstr(absl::StrCat(method, ": the request (20 bytes) is not a valid "
                                                 "psync.proto.")));
    }
    const auto [health, unused] = RawCall("/grpc.health.v1.Health/Check", garbage);
    EXPECT_EQ(health.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(health.error_message(), HasSubstr("grpc.health.v1.HealthCheckRequest"));
  }
  const uint64_t session = Register(0);
  EXPECT_NE(session, 0u);
  proto::PullResponse pulled;
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Pull, PullOf(0, session, 0), &pulled).ok());
  EXPECT_EQ(Flat(pulled, 0), InitialWeights());
  EXPECT_EQ(RawCall("/grpc.health.v1.Health/Check", "").second, std::string("\x08\x01", 2));
}

TEST_F(GrpcServerTest, BadRequestsGetCodesThatNameTheProblem) {
  StartServer();
  const uint64_t s0 = Register(0);
  proto::PushResponse pushed;
  proto::PullResponse pulled;

  // Never registered, or a session of the past.
  grpc::Status st = Call(&proto::ParameterServer::Stub::Pull, PullOf(1, 0, 0), &pulled);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(st.error_message(), HasSubstr("worker 1 has no current session"));
  st = Call(&proto::ParameterServer::Stub::Push, PushOf(0, s0 + 2, 0, 1.0f), &pushed);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);

  // A step from the future.
  st = Call(&proto::ParameterServer::Stub::Push, PushOf(0, s0, 5, 1.0f), &pushed);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("step 5"));

  // An unknown chunk, a chunk of the wrong size, another layout.
  proto::PushRequest push = PushOf(0, s0, 0, 1.0f);
  push.mutable_chunks(0)->set_chunk_id(7);
  st = Call(&proto::ParameterServer::Stub::Push, push, &pushed);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("chunk 7 does not exist"));
  push = PushOf(0, s0, 0, 1.0f);
  push.mutable_chunks(1)->set_data("abc");
  st = Call(&proto::ParameterServer::Stub::Push, push, &pushed);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("3 bytes"));
  push = PushOf(0, s0, 0, 1.0f);
  push.set_layout_fingerprint(layout_.fingerprint() + 1);
  st = Call(&proto::ParameterServer::Stub::Push, push, &pushed);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("layout fingerprint"));

  // Bytes that are no PushRequest at all.
  const auto [garbled, unused] =
      RawCall("/psync.proto.ParameterServer/Push", std::string("\x2a\xff\xff\xff\xff\x0f", 6));
  EXPECT_EQ(garbled.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << garbled.error_message();

  // None of it changed the state: the step still waits for both workers.
  proto::StatusResponse status;
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::GetStatus, proto::StatusRequest(), &status).ok());
  EXPECT_EQ(status.version(), 0);
}

// A push in bf16 or fp16 is widened on the server, and a push-pull answers
// in its push's dtype: the server's float32 weights, narrowed once.
TEST_F(GrpcServerTest, NarrowDTypesThroughTheGeneratedStubs) {
  for (WireDType dtype : {WireDType::kBf16, WireDType::kFp16}) {
    SCOPED_TRACE(WireDTypeName(dtype));
    const proto::DType wire = dtype == WireDType::kBf16 ? proto::DTYPE_BFLOAT16 : proto::DTYPE_FLOAT16;
    StartServer();
    const uint64_t s0 = Register(0), s1 = Register(1);
    auto narrow_push = [&](int rank, uint64_t session, float value) {
      proto::PushRequest req = PushOf(rank, session, 0, value);
      for (proto::Chunk& c : *req.mutable_chunks()) {
        const std::vector<float> v = FloatsOf(c.data());
        std::string out(v.size() * 2, '\0');
        EncodeWire(dtype, v.data(), static_cast<int64_t>(v.size()), out.data());
        c.set_dtype(wire);
        c.set_data(out);
      }
      return req;
    };
    proto::PushResponse pushed;
    ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Push, narrow_push(1, s1, 3.0f), &pushed).ok());
    proto::PullResponse next;
    grpc::Status st =
        Call(&proto::ParameterServer::Stub::PushPull, narrow_push(0, s0, 1.0f), &next);
    ASSERT_TRUE(st.ok()) << st.error_message();

    // The float32 weights, and what a narrow pull makes of them.
    proto::PullResponse exact, pulled;
    ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Pull, PullOf(1, s1, 1), &exact).ok());
    const std::vector<float> w0 = InitialWeights(), w1 = Flat(exact, 1);
    for (size_t i = 0; i < w0.size(); ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 2.0f) << i;
    proto::PullRequest narrow_pull = PullOf(1, s1, 1);
    narrow_pull.set_dtype(wire);
    ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Pull, narrow_pull, &pulled).ok());
    ASSERT_EQ(next.chunks_size(), layout_.chunks().size());
    ASSERT_EQ(pulled.chunks_size(), layout_.chunks().size());
    size_t offset = 0;
    for (int i = 0; i < next.chunks_size(); ++i) {
      const proto::Chunk& c = next.chunks(i);
      EXPECT_EQ(c.dtype(), wire);
      EXPECT_EQ(c.version(), 1);
      const int64_t n = layout_.chunks()[c.chunk_id()].num_elements;
      std::string expected(n * 2, '\0');
      EncodeWire(dtype, w1.data() + offset, n, expected.data());
      EXPECT_EQ(c.data(), expected) << "chunk " << c.chunk_id();
      EXPECT_EQ(pulled.chunks(i).data(), expected) << "chunk " << c.chunk_id();
      EXPECT_EQ(pulled.chunks(i).dtype(), wire);
      offset += n;
    }
  }
}

TEST_F(GrpcServerTest, BadNarrowRequestsNameTheChunkAndTheValue) {
  StartServer();
  const uint64_t s0 = Register(0);
  proto::PushResponse pushed;
  proto::PullResponse pulled;
  // Chunk 1 holds 2 values: 4 bytes in bf16, not 8.
  proto::PushRequest push = PushOf(0, s0, 0, 1.0f);
  push.mutable_chunks(1)->set_dtype(proto::DTYPE_BFLOAT16);
  grpc::Status st = Call(&proto::ParameterServer::Stub::Push, push, &pushed);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message(), "Push: chunk 1 has 8 bytes, layout says 4 (2 values of bf16)");
  push.mutable_chunks(1)->set_dtype(static_cast<proto::DType>(9));
  st = Call(&proto::ParameterServer::Stub::Push, push, &pushed);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message(),
            "Push: chunk 1 has dtype 9, expected DTYPE_FLOAT32 (1), DTYPE_BFLOAT16 (2) or "
            "DTYPE_FLOAT16 (3)");
  // One push-pull answers in one dtype.
  push = PushOf(0, s0, 0, 1.0f);
  push.mutable_chunks(2)->set_dtype(proto::DTYPE_FLOAT16);
  push.mutable_chunks(2)->set_data(std::string(4, '\0'));
  st = Call(&proto::ParameterServer::Stub::PushPull, push, &pulled);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("PushPull: chunk 2 is fp16 but chunk 0 is float32"));
  proto::PullRequest pull = PullOf(0, s0, 0);
  pull.set_dtype(static_cast<proto::DType>(42));
  st = Call(&proto::ParameterServer::Stub::Pull, pull, &pulled);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("Pull: worker 0 asks for dtype 42, expected"));
  // Nothing was applied.
  proto::StatusResponse status;
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::GetStatus, proto::StatusRequest(), &status).ok());
  EXPECT_EQ(status.version(), 0);
  EXPECT_TRUE(status.waiting_for().empty());
}

TEST_F(GrpcServerTest, OversizedPushIsRefusedNamingTheLimit) {
  MetricRegistry metrics;
  metrics_ = &metrics;
  StartServer(0, 1, /*max_message_bytes=*/2 << 20);
  const uint64_t s0 = Register(0);
  proto::PushRequest push = PushOf(0, s0, 0, 1.0f);
  push.mutable_chunks(0)->set_data(std::string(3 << 20, '\0'));
  proto::PushResponse pushed;
  grpc::Status st = Call(&proto::ParameterServer::Stub::Push, push, &pushed);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_THAT(st.error_message(),
              HasSubstr(absl::StrCat("Push: the request has ", push.ByteSizeLong(),
                                     " bytes, over the message limit of 2097152 "
                                     "(--max_message_mb)")));
  // Counted, with its bytes, as every call is.
  const std::string text = metrics.Render();
  EXPECT_THAT(text, HasSubstr("psync_server_requests_total{method=\"Push\",code=\""
                              "RESOURCE_EXHAUSTED\"} 1\n"));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("psync_server_received_bytes_total{method=\"Push\"} ",
                                           push.ByteSizeLong(), "\n")));
  // The transport's own limit, a registration's bound, refuses more.
  push.mutable_chunks(0)->set_data(std::string(9 << 20, '\0'));
  st = Call(&proto::ParameterServer::Stub::Push, push, &pushed);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  // A PushPull whose answer (as large as its payload) would not fit in the
  // limit with its headroom is refused before its push is applied.
  push = PushOf(0, s0, 0, 1.0f);
  const std::string valid = push.SerializeAsString();
  push.mutable_chunks(0)->set_data(std::string(3 << 19, '\0'));
  auto [refused, unused] =
      RawCall("/psync.proto.ParameterServer/PushPull", push.SerializeAsString());
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(),
              HasSubstr(absl::StrCat("PushPull: its chunks hold ", (3 << 19) + 16,  // + 2 chunks
                                     " bytes, more than the message limit of 2097152 bytes less "
                                     "1 MiB headroom allows for its answer")));
  // The server goes on: a valid push is taken.
  std::tie(refused, unused) = RawCall("/psync.proto.ParameterServer/Push", valid);
  EXPECT_TRUE(refused.ok()) << refused.error_message();
  server_.reset();  // before `metrics`
  metrics_ = nullptr;
}

// The methods without a payload have bounds of their own, far below the
// message limit for payloads: a parsed request can take many times its
// bytes (2-byte empty tensors), so a large one is refused unparsed.
TEST_F(GrpcServerTest, OversizedControlRequestsAreRefusedUnparsed) {
  StartServer(0, 1, /*max_message_bytes=*/64 << 20);
  proto::RegisterRequest reg;
  for (int i = 0; i < (9 << 20) / 2; ++i) reg.mutable_layout()->add_tensors();
  auto [st, unused] = RawCall("/psync.proto.ParameterServer/Register", reg.SerializeAsString());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr(absl::StrCat("Register: the request has ",
                                                        reg.ByteSizeLong(),
                                                        " bytes, expected at most 8388608")));
  proto::PullRequest pull;
  for (int i = 0; i < (2 << 20); ++i) pull.add_chunk_ids(1);
  std::tie(st, unused) = RawCall("/psync.proto.ParameterServer/Pull", pull.SerializeAsString());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // 4 bytes per chunk id (Layout::kMaxChunks of them) and 4 KiB.
  EXPECT_THAT(st.error_message(), HasSubstr("expected at most 1052672"));
  for (const char* method : {"GetStatus", "Heartbeat", "Join"}) {
    std::tie(st, unused) =
        RawCall(absl::StrCat("/psync.proto.ParameterServer/", method), std::string(2 << 20, 'x'));
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_THAT(st.error_message(),
                HasSubstr(absl::StrCat(method, ": the request has 2097152 bytes, expected at most "
                                               "1048576")));
  }
  // A Register within the bound, of more tensors than a layout may have, is
  // refused before its tensors are copied; the server serves on.
  reg.mutable_layout()->mutable_tensors()->DeleteSubrange(70000, reg.layout().tensors_size() - 70000);
  std::tie(st, unused) = RawCall("/psync.proto.ParameterServer/Register", reg.SerializeAsString());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("70000 tensors, expected at most 65536"));
  EXPECT_NE(Register(0), 0u);
}

// A worker rank beyond int32 (the wire's varint is 64 bits) is named as sent.
TEST_F(GrpcServerTest, AWorkerRankBeyondInt32IsNamedAsSent) {
  StartServer();
  const uint64_t s0 = Register(0);
  std::string bytes = PushOf(0, s0, 0, 1.0f).SerializeAsString();
  bytes += std::string("\x08\x80\x80\x80\x80\x20", 6);  // field 1, 2^33
  const auto [st, unused] = RawCall("/psync.proto.ParameterServer/Push", bytes);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("Push: worker rank 8589934592 is out of range 0..1"));
}

TEST_F(GrpcServerTest, HeartbeatSaysWhomAStepWaitsFor) {
  StartServer();
  const uint64_t s0 = Register(0), s1 = Register(1);
  proto::PushResponse pushed;
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Push, PushOf(0, s0, 0, 1.0f), &pushed).ok());
  proto::HeartbeatRequest beat;
  beat.set_worker_rank(0);
  beat.set_session(s0);
  proto::HeartbeatResponse resp;
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Heartbeat, beat, &resp).ok());
  EXPECT_THAT(resp.waiting_for(), ::testing::ElementsAre(1));
  EXPECT_GT(resp.waiting_since_unix_ms(), 0);
  EXPECT_FALSE(resp.all_done());

  beat.set_session(s1);  // worker 0's rank with worker 1's session
  grpc::Status st = Call(&proto::ParameterServer::Stub::Heartbeat, beat, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);
}

TEST_F(GrpcServerTest, ARollbackAbortsAWaitingPullAndOldSessions) {
  StartServer();
  const uint64_t s0 = Register(0);
  Register(1);
  grpc::Status waited;
  std::thread puller([&] {
    proto::PullResponse resp;
    waited = Call(&proto::ParameterServer::Stub::PushPull, PushOf(0, s0, 0, 1.0f), &resp);
  });
  absl::SleepFor(absl::Milliseconds(300));  // the call now waits for worker 1
  const absl::Time rollback = absl::Now();
  store_->Restore(store_->generation() + 1, std::nullopt);
  puller.join();
  EXPECT_EQ(waited.error_code(), grpc::StatusCode::ABORTED) << waited.error_message();
  EXPECT_THAT(waited.error_message(), HasSubstr("rolled back"));
  EXPECT_LT(absl::Now() - rollback, absl::Seconds(5));

  // Not ready until the coordinator says so; then old sessions are refused
  // and a new registration starts the new generation.
  proto::RegisterResponse reg;
  grpc::Status st = Call(&proto::ParameterServer::Stub::Register, RegisterRequestFor(0), &reg);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  store_->SetReady(true);
  proto::PullResponse pulled;
  st = Call(&proto::ParameterServer::Stub::Pull, PullOf(0, s0, 0), &pulled);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);
  const uint64_t again = Register(0);
  EXPECT_NE(again, s0);
  EXPECT_TRUE(Call(&proto::ParameterServer::Stub::Pull, PullOf(0, again, 0), &pulled).ok());
}

// A push-pull refused for want of a waiting place changes nothing: its
// gradient is not in the step, and the worker's next push of it counts.
TEST_F(GrpcServerTest, APushPullRefusedForWaitingPlacesPushesNothing) {
  max_waiting_calls_ = 1;
  StartServer();
  const uint64_t s0 = Register(0), s1 = Register(1);
  const std::vector<float> w0 = InitialWeights();
  proto::PullResponse waited;
  grpc::Status pulled;
  std::thread puller(  // takes the only place until the step is applied
      [&] { pulled = Call(&proto::ParameterServer::Stub::Pull, PullOf(0, s0, 1), &waited); });
  absl::SleepFor(absl::Milliseconds(300));
  proto::PullResponse refused;
  grpc::Status st = Call(&proto::ParameterServer::Stub::PushPull, PushOf(1, s1, 0, 50.0f), &refused);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  proto::PushResponse pushed;
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Push, PushOf(1, s1, 0, 3.0f), &pushed).ok());
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Push, PushOf(0, s0, 0, 1.0f), &pushed).ok());
  puller.join();
  ASSERT_TRUE(pulled.ok()) << pulled.error_message();
  const std::vector<float> w1 = Flat(waited, 1);
  ASSERT_EQ(w1.size(), w0.size());
  for (size_t i = 0; i < w0.size(); ++i) EXPECT_FLOAT_EQ(w1[i], w0[i] - 2.0f) << i;  // mean 2
}

// A waiting call its client cancels gives its place back within a sweep
// of the store's timer, not at the server's --max_pull_wait (10 s here).
TEST_F(GrpcServerTest, ACancelledWaitingCallGivesItsPlaceBack) {
  max_waiting_calls_ = 1;
  StartServer();
  const uint64_t s0 = Register(0);
  Register(1);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  proto::PullResponse never;
  grpc::Status first;
  std::thread puller([&] { first = stub_->Pull(&ctx, PullOf(0, s0, 1), &never); });
  absl::SleepFor(absl::Milliseconds(300));
  proto::PullResponse resp;
  grpc::Status st = Call(&proto::ParameterServer::Stub::Pull, PullOf(0, s0, 1), &resp,
                         absl::Milliseconds(500));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  ctx.TryCancel();
  puller.join();
  EXPECT_EQ(first.error_code(), grpc::StatusCode::CANCELLED) << first.error_message();
  // Admitted again (it waits, for want of the step, until its own deadline).
  const absl::Time start = absl::Now();
  do {
    st = Call(&proto::ParameterServer::Stub::Pull, PullOf(0, s0, 1), &resp,
              absl::Milliseconds(300));
  } while (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
           absl::Now() - start < absl::Seconds(3));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
}

// A SIGTERM'd server (psync_server calls Shutdown) answers waiting calls
// with UNAVAILABLE, which clients retry until the server is back.
TEST_F(GrpcServerTest, ShutdownAnswersWaitingCallsUnavailable) {
  StartServer();
  const uint64_t s0 = Register(0);
  Register(1);
  grpc::Status waited;
  std::thread puller([&] {
    proto::PullResponse resp;
    waited = Call(&proto::ParameterServer::Stub::PushPull, PushOf(0, s0, 0, 1.0f), &resp);
  });
  absl::SleepFor(absl::Milliseconds(300));
  const absl::Time shutdown = absl::Now();
  server_->Shutdown(absl::Now() + absl::Seconds(5));
  puller.join();
  EXPECT_EQ(waited.error_code(), grpc::StatusCode::UNAVAILABLE) << waited.error_message();
  EXPECT_THAT(waited.error_message(), HasSubstr("shutting down"));
  EXPECT_LT(absl::Now() - shutdown, absl::Seconds(4));

  proto::StatusResponse status;
  grpc::Status st = Call(&proto::ParameterServer::Stub::GetStatus, proto::StatusRequest(), &status,
                         absl::Seconds(2));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
}

// The standard grpc.health.v1 service, as Kubernetes' gRPC probes call it
// (HealthCheckRequest {service: ""}: no bytes; the reply {status: SERVING}
// is field 1 = 1: bytes 08 01).
TEST_F(GrpcServerTest, ServesTheStandardHealthService) {
  StartServer();
  const auto [serving, reply] = RawCall("/grpc.health.v1.Health/Check", "");
  ASSERT_TRUE(serving.ok()) << serving.error_message();
  EXPECT_EQ(reply, std::string("\x08\x01", 2));
  // HealthCheckRequest {service: "nope"}: a service it does not know.
  const auto [unknown, unused] = RawCall("/grpc.health.v1.Health/Check", "\x0a\x04nope");
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND) << unknown.error_message();

  server_->Shutdown(absl::Now() + absl::Seconds(5));
  const auto [down, unused2] = RawCall("/grpc.health.v1.Health/Check", "");
  EXPECT_FALSE(down.ok());
}

// With a token, every call without it (or with another) is refused
// UNAUTHENTICATED before it touches the store; the health service still
// answers.
TEST_F(GrpcServerTest, WithATokenEveryCallMustCarryIt) {
  PeerSecurity security;
  security.token = "s3cret-token";
  StartServer(0, 1, 64 << 20, security);
  const auto expect_refused = [](const grpc::Status& st, const char* call) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED) << call << ": "
                                                                    << st.error_message();
    EXPECT_THAT(st.error_message(), ::testing::Not(HasSubstr("s3cret")));
  };
  proto::RegisterResponse registered;
  expect_refused(Call(&proto::ParameterServer::Stub::Register, RegisterRequestFor(0), &registered),
                 "Register");
  proto::PushResponse pushed;
  expect_refused(Call(&proto::ParameterServer::Stub::Push, PushOf(0, 1, 0, 1.0f), &pushed), "Push");
  proto::PullRequest pull;
  proto::PullResponse pulled;
  expect_refused(Call(&proto::ParameterServer::Stub::Pull, pull, &pulled), "Pull");
  expect_refused(Call(&proto::ParameterServer::Stub::PushPull, PushOf(0, 1, 0, 1.0f), &pulled),
                 "PushPull");
  proto::StatusResponse status;
  expect_refused(Call(&proto::ParameterServer::Stub::GetStatus, proto::StatusRequest(), &status),
                 "GetStatus");
  proto::HeartbeatResponse beat;
  expect_refused(Call(&proto::ParameterServer::Stub::Heartbeat, proto::HeartbeatRequest(), &beat),
                 "Heartbeat");
  proto::JoinResponse joined;
  expect_refused(Call(&proto::ParameterServer::Stub::Join, proto::JoinRequest(), &joined), "Join");
  const auto [health, unused] = RawCall("/grpc.health.v1.Health/Check", "");
  EXPECT_TRUE(health.ok()) << health.error_message();

  const std::string address = absl::StrCat("127.0.0.1:", server_->port());
  PeerSecurity wrong;
  wrong.token = "s3cret-tokeN";
  auto wrong_stub = proto::ParameterServer::NewStub(
      CreatePeerChannel(address, wrong, grpc::ChannelArguments()));
  grpc::ClientContext wrong_ctx;
  expect_refused(wrong_stub->GetStatus(&wrong_ctx, proto::StatusRequest(), &status), "wrong token");

  // The right token: nothing above changed the state.
  auto stub = proto::ParameterServer::NewStub(
      CreatePeerChannel(address, security, grpc::ChannelArguments()));
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->GetStatus(&ctx, proto::StatusRequest(), &status).ok());
  EXPECT_FALSE(status.registered());
  EXPECT_EQ(status.version(), 0);
  grpc::ClientContext register_ctx;
  EXPECT_TRUE(stub->Register(&register_ctx, RegisterRequestFor(0), &registered).ok());
}

// The plaintext health listener (for probes when the main port speaks
// TLS) serves the health service and nothing else.
TEST_F(GrpcServerTest, AHealthPortServesOnlyTheHealthService) {
  StartServer(0, 1, 64 << 20, {}, "127.0.0.1:0");
  const int health = server_->health_port();
  ASSERT_GT(health, 0);
  ASSERT_NE(health, server_->port());
  const auto [serving, reply] = RawCall("/grpc.health.v1.Health/Check", "", health);
  ASSERT_TRUE(serving.ok()) << serving.error_message();
  EXPECT_EQ(reply, std::string("\x08\x01", 2));
  const auto [status, unused] = RawCall("/psync.proto.ParameterServer/GetStatus", "", health);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();

  // A server that can no longer do its job (its listener stopped
  // accepting) answers NOT_SERVING (field 1 = 2) on both ports, so that a
  // liveness probe fails; and SERVING again once it recovers.
  server_->SetServing(false);
  for (int port : {health, server_->port()}) {
    const auto [not_serving, answer] = RawCall("/grpc.health.v1.Health/Check", "", port);
    ASSERT_TRUE(not_serving.ok()) << not_serving.error_message();
    EXPECT_EQ(answer, std::string("\x08\x02", 2)) << port;
  }
  server_->SetServing(true);
  EXPECT_EQ(RawCall("/grpc.health.v1.Health/Check", "", health).second, std::string("\x08\x01", 2));
  server_->Shutdown(absl::Now() + absl::Seconds(5));
  const auto [down, unused2] = RawCall("/grpc.health.v1.Health/Check", "", health);
  EXPECT_FALSE(down.ok());
}

// Every call is counted by method and status code, with its bytes and
// latency; waiting pulls are a gauge that returns to 0.
TEST_F(GrpcServerTest, CountsCallsByMethodAndCodeWithBytesAndLatency) {
  MetricRegistry metrics;
  metrics_ = &metrics;
  PeerSecurity security;
  security.token = "t0ken";
  StartServer(0, 1, 64 << 20, security);
  proto::StatusResponse status;
  EXPECT_EQ(Call(&proto::ParameterServer::Stub::GetStatus, proto::StatusRequest(), &status)
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  auto stub = proto::ParameterServer::NewStub(CreatePeerChannel(
      absl::StrCat("127.0.0.1:", server_->port()), security, grpc::ChannelArguments()));
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->GetStatus(&ctx, proto::StatusRequest(), &status).ok());
  }
  grpc::ClientContext register_ctx;
  proto::RegisterResponse registered;
  ASSERT_TRUE(stub->Register(&register_ctx, RegisterRequestFor(0), &registered).ok());
  const std::string text = metrics.Render();
  EXPECT_THAT(text, HasSubstr("psync_server_requests_total{method=\"GetStatus\",code=\"OK\"} 2\n"));
  EXPECT_THAT(text, HasSubstr(
      "psync_server_requests_total{method=\"GetStatus\",code=\"UNAUTHENTICATED\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("psync_server_requests_total{method=\"Register\",code=\"OK\"} 1\n"));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("psync_server_received_bytes_total{method=\"Register\"} ",
                                           RegisterRequestFor(0).ByteSizeLong(), "\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("psync_server_sent_bytes_total{method=\"GetStatus\"} ",
                                           2 * status.ByteSizeLong(), "\n")));
  EXPECT_THAT(text, HasSubstr(
      "psync_server_request_duration_seconds_count{method=\"GetStatus\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("psync_server_pulls_waiting 0\n"));
  server_.reset();
  metrics_ = nullptr;
}

TEST_F(GrpcServerTest, JoinIsForTheCoordinatorOfTheRightClusterSize) {
  StartServer(/*rank=*/1, /*num_servers=*/2);
  proto::JoinRequest join;
  join.set_server_rank(0);
  join.set_num_servers(2);
  join.set_incarnation(9);
  proto::JoinResponse resp;
  grpc::Status st = Call(&proto::ParameterServer::Stub::Join, join, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("not the coordinator"));

  server_->Shutdown(absl::Now());
  StartServer(/*rank=*/0, /*num_servers=*/2);
  join.set_num_servers(3);
  st = Call(&proto::ParameterServer::Stub::Join, join, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("3 servers"));

  // Both servers joined: the coordinator names a generation to start afresh.
  join.set_num_servers(2);
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Join, join, &resp).ok());
  join.set_server_rank(1);
  join.set_incarnation(10);
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Join, join, &resp).ok());
  EXPECT_GT(resp.target_generation(), 0);
  EXPECT_EQ(resp.target_version(), 0);
}

// A worker's shared memory: `slots` slots of `slot_bytes`.
struct WorkerMemory {
  WorkerMemory(int slots, int64_t slot_bytes) : slots(slots), slot_bytes(slot_bytes) {
    auto created = SharedRegion::Create(slots * slot_bytes);
    EXPECT_TRUE(created.ok()) << created.status();
    region = std::move(*created);
  }
  void OfferIn(proto::RegisterRequest& req) const {
    const SharedRegion::Offer o = region->offer();
    proto::SharedMemoryOffer* offer = req.mutable_shared_memory();
    offer->set_pid(o.pid);
    offer->set_fd(o.fd);
    offer->set_nonce(o.nonce);
    offer->set_slots(slots);
    offer->set_slot_bytes(slot_bytes);
  }
  char* Slot(int slot) const { return region->data() + (slot - 1) * slot_bytes; }

  int slots;
  int64_t slot_bytes;
  std::unique_ptr<SharedRegion> region;
};

// `push` with its chunks' data moved to slot `slot` of `memory`.
proto::PushRequest InSlot(proto::PushRequest push, const WorkerMemory& memory, int slot) {
  char* out = memory.Slot(slot);
  for (proto::Chunk& c : *push.mutable_chunks()) {
    std::memcpy(out, c.data().data(), c.data().size());
    out += c.data().size();
    c.clear_data();
  }
  push.set_shared_slot(slot);
  return push;
}

TEST_F(GrpcServerTest, PushPullsThroughSharedMemoryCarryNoPayloadBytes) {
  StartServer();
  WorkerMemory m0(2, 1024), m1(2, 1024);
  uint64_t sessions[2];
  for (int rank : {0, 1}) {
    proto::RegisterRequest req = RegisterRequestFor(rank);
    (rank == 0 ? m0 : m1).OfferIn(req);
    proto::RegisterResponse resp;
    ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Register, req, &resp).ok());
    EXPECT_TRUE(resp.shared_memory()) << resp.shared_memory_refused();
    sessions[rank] = resp.session();
  }
  // Worker 1 pushes through slot 2 and worker 0 through slot 1, by PushPull.
  proto::PushResponse ignored;
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Push,
                   InSlot(PushOf(1, sessions[1], 0, 3.0f), m1, 2), &ignored)
                  .ok());
  proto::PullResponse next;
  const proto::PushRequest push = InSlot(PushOf(0, sessions[0], 0, 1.0f), m0, 1);
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::PushPull, push, &next).ok());
  EXPECT_EQ(next.shared_slot(), 1u);
  ASSERT_EQ(next.chunks_size(), 3);
  std::vector<float> expected = InitialWeights(), got(expected.size());
  for (float& w : expected) w -= 2.0f;  // the mean of 1 and 3
  for (const proto::Chunk& c : next.chunks()) {
    EXPECT_TRUE(c.data().empty());
    EXPECT_EQ(c.version(), 1);
  }
  std::memcpy(got.data(), m0.Slot(1), got.size() * sizeof(float));
  EXPECT_EQ(got, expected);
  // A Pull through worker 1's slot 1: the same weights, in its memory.
  proto::PullRequest pull = PullOf(1, sessions[1], 1);
  pull.set_shared_slot(1);
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Pull, pull, &next).ok());
  EXPECT_EQ(next.shared_slot(), 1u);
  std::memcpy(got.data(), m1.Slot(1), got.size() * sizeof(float));
  EXPECT_EQ(got, expected);
}

// A worker on the server's host shares memory whichever of the host's
// addresses it connects to, as gRPC names the peer ("ipv4:…",
// "ipv6:%5B…%5D:…"): IPv4 and IPv6 loopback, and the host's own address.
TEST_F(GrpcServerTest, AWorkerOnTheServersHostSharesMemoryByAnyOfItsAddresses) {
  listen_address_ = "[::]:0";
  StartServer();
  std::vector<std::string> hosts = {"127.0.0.1", "[::1]"};
  if (const std::string own = NonLoopbackIpv4Address(); !own.empty()) hosts.push_back(own);
  for (const std::string& host : hosts) {
    stub_ = proto::ParameterServer::NewStub(grpc::CreateChannel(
        absl::StrCat(host, ":", server_->port()), grpc::InsecureChannelCredentials()));
    WorkerMemory memory(2, 1024);
    proto::RegisterRequest req = RegisterRequestFor(0);
    memory.OfferIn(req);
    proto::RegisterResponse resp;
    ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Register, req, &resp).ok()) << host;
    EXPECT_TRUE(resp.shared_memory()) << host << ": " << resp.shared_memory_refused();
  }
}

TEST_F(GrpcServerTest, BadSharedSlotsAreRefusedAndChangeNothing) {
  StartServer();
  WorkerMemory m0(2, 16);  // room for two of the layout's 8-byte chunks
  proto::RegisterRequest req = RegisterRequestFor(0);
  m0.OfferIn(req);
  proto::RegisterResponse resp;
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Register, req, &resp).ok());
  ASSERT_TRUE(resp.shared_memory());
  const uint64_t s0 = resp.session(), s1 = Register(1);
  proto::PullResponse next;
  // Slot 3 of 2, all three chunks in a slot of two, data in both, a session
  // with no region.
  grpc::Status st = Call(&proto::ParameterServer::Stub::PushPull,
                         InSlot(PushOf(0, s0, 0, 1.0f), m0, 1), &next);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(),
              HasSubstr("its chunks take 24 bytes, more than a shared slot's 16"));
  proto::PushRequest push = PushOf(0, s0, 0, 1.0f);
  push.mutable_chunks()->RemoveLast();
  proto::PushRequest bad = InSlot(push, m0, 1);
  bad.set_shared_slot(3);
  st = Call(&proto::ParameterServer::Stub::PushPull, bad, &next);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("shared slot 3; the region has slots 1 to 2"));
  bad = push;
  bad.set_shared_slot(1);
  st = Call(&proto::ParameterServer::Stub::PushPull, bad, &next);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(),
              HasSubstr("carries 8 bytes of data but the push names shared slot 1"));
  proto::PullRequest pull = PullOf(0, s0, 0);
  pull.set_shared_slot((uint64_t{1} << 32) + 1);  // not slot 1
  st = Call(&proto::ParameterServer::Stub::Pull, pull, &next);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("shared slot 4294967297; the region has slots 1 to 2"));
  st = Call(&proto::ParameterServer::Stub::PushPull, InSlot(PushOf(1, s1, 0, 1.0f), m0, 1), &next);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(st.error_message(), HasSubstr("has no shared memory on server 0"));
  // Nothing was applied: both workers' full pushes still make step 0.
  proto::PushResponse ignored;
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Push, PushOf(1, s1, 0, 3.0f), &ignored).ok());
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::PushPull, PushOf(0, s0, 0, 1.0f), &next).ok());
  std::vector<float> expected = InitialWeights();
  for (float& w : expected) w -= 2.0f;
  EXPECT_EQ(Flat(next, 1), expected);
}

TEST_F(GrpcServerTest, AnOfferThatCannotBeMappedLeavesPayloadsInTheMessages) {
  shared_memory_ = false;
  StartServer();
  WorkerMemory m0(1, 64);
  proto::RegisterRequest req = RegisterRequestFor(0);
  m0.OfferIn(req);
  proto::RegisterResponse resp;
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Register, req, &resp).ok());
  EXPECT_FALSE(resp.shared_memory());
  EXPECT_THAT(resp.shared_memory_refused(), HasSubstr("--shared_memory=false"));
  shared_memory_ = true;
  StartServer();
  for (auto [slots, nonce_flip, why] :
       {std::tuple{1, 1, "offered shared memory is not usable"},
        std::tuple{0, 0, "expected 1 to 1024 slots"},
        std::tuple{1 << 20, 0, "expected 1 to 1024 slots"}}) {
    req = RegisterRequestFor(0);
    m0.OfferIn(req);
    req.mutable_shared_memory()->set_nonce(req.shared_memory().nonce() ^ nonce_flip);
    req.mutable_shared_memory()->set_slots(slots);
    ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Register, req, &resp).ok());
    EXPECT_FALSE(resp.shared_memory());
    EXPECT_THAT(resp.shared_memory_refused(), HasSubstr(why));
  }
  // A slot named without a region: the session must register again.
  proto::PullResponse next;
  const grpc::Status st = Call(&proto::ParameterServer::Stub::PushPull,
                               InSlot(PushOf(0, resp.session(), 0, 1.0f), m0, 1), &next);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);
}

// A worker's flat model in shared memory: `elements` gradients, then as
// many weights.
struct WorkerModel {
  explicit WorkerModel(int64_t elements) : elements(elements) {
    auto created = SharedRegion::Create(8 * elements);
    EXPECT_TRUE(created.ok()) << created.status();
    region = std::move(*created);
    offer = region->offer();
  }
  // With `closed`, names the region an earlier session mapped (fd -1).
  void OfferIn(proto::RegisterRequest& req, bool closed = false) const {
    proto::SharedModelOffer* o = req.mutable_shared_model();
    o->set_pid(offer.pid);
    o->set_fd(closed ? -1 : offer.fd);
    o->set_nonce(offer.nonce);
    o->set_elements(elements);
  }
  float* grads() const { return reinterpret_cast<float*>(region->data()); }
  std::vector<float> weights() const { return {grads() + elements, grads() + 2 * elements}; }

  int64_t elements;
  std::unique_ptr<SharedRegion> region;
  SharedRegion::Offer offer;  // as created: the descriptor may be closed since
};

// `push` (of every chunk, in layout order) with its chunks' data moved to
// their places in `model`.
proto::PushRequest InModel(proto::PushRequest push, const WorkerModel& model) {
  char* out = reinterpret_cast<char*>(model.grads());
  for (proto::Chunk& c : *push.mutable_chunks()) {
    std::memcpy(out, c.data().data(), c.data().size());
    out += c.data().size();
    c.clear_data();
  }
  push.set_in_shared_model(true);
  return push;
}

TEST_F(GrpcServerTest, PushPullsInTheSharedModelWriteTheWeightsInPlace) {
  StartServer();
  const int64_t n = layout_.total_elements();
  WorkerModel w0(n), w1(n);
  uint64_t sessions[2];
  auto register_worker = [&](int rank, bool closed) {
    proto::RegisterRequest req = RegisterRequestFor(rank);
    (rank == 0 ? w0 : w1).OfferIn(req, closed);
    proto::RegisterResponse resp;
    ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Register, req, &resp).ok());
    EXPECT_TRUE(resp.shared_model()) << resp.shared_model_refused();
    EXPECT_FALSE(resp.shared_memory());  // no slots offered
    sessions[rank] = resp.session();
  };
  register_worker(0, false);
  register_worker(1, false);
  // Each worker's server has mapped its model: nothing else needs to open it.
  w0.region->CloseDescriptor();
  w1.region->CloseDescriptor();
  std::vector<float> expected = InitialWeights();
  for (int64_t step : {0, 1}) {
    proto::PushResponse ignored;
    ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Push,
                     InModel(PushOf(1, sessions[1], step, 3.0f), w1), &ignored)
                    .ok());
    proto::PullResponse next;
    ASSERT_TRUE(Call(&proto::ParameterServer::Stub::PushPull,
                     InModel(PushOf(0, sessions[0], step, 1.0f), w0), &next)
                    .ok());
    for (float& w : expected) w -= 2.0f;  // the mean of 1 and 3
    EXPECT_TRUE(next.in_shared_model());
    EXPECT_EQ(next.shared_slot(), 0u);
    ASSERT_EQ(next.chunks_size(), 3);
    for (const proto::Chunk& c : next.chunks()) {
      EXPECT_TRUE(c.data().empty());
      EXPECT_EQ(c.version(), step + 1);
    }
    EXPECT_EQ(w0.weights(), expected);
    EXPECT_EQ(std::vector<float>(w0.grads(), w0.grads() + n), std::vector<float>(n, 1.0f));
    // A Pull into worker 1's model: the same weights.
    proto::PullRequest pull = PullOf(1, sessions[1], step + 1);
    pull.set_in_shared_model(true);
    ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Pull, pull, &next).ok());
    EXPECT_TRUE(next.in_shared_model());
    EXPECT_EQ(w1.weights(), expected);
    // Registering again (as after a rollback), the workers name the regions
    // mapped before by their nonces.
    register_worker(0, true);
    register_worker(1, true);
  }
}

TEST_F(GrpcServerTest, BadSharedModelOffersAndRequestsAreRefused) {
  const int64_t n = layout_.total_elements();
  WorkerModel w0(n);
  proto::RegisterResponse resp;
  auto offer = [&](int64_t elements, uint64_t nonce_flip, bool closed) {
    proto::RegisterRequest req = RegisterRequestFor(0);
    w0.OfferIn(req, closed);
    req.mutable_shared_model()->set_elements(elements);
    req.mutable_shared_model()->set_nonce(w0.offer.nonce ^ nonce_flip);
    EXPECT_TRUE(Call(&proto::ParameterServer::Stub::Register, req, &resp).ok());
    return resp.shared_model() ? std::string("mapped") : resp.shared_model_refused();
  };
  shared_memory_ = false;
  StartServer();
  EXPECT_THAT(offer(n, 0, false), HasSubstr("--shared_memory=false"));
  shared_memory_ = true;
  StartServer();
  EXPECT_THAT(offer(n - 1, 0, false), HasSubstr("shared model of 5 parameters; the layout has 6"));
  EXPECT_THAT(offer(n, 1, false), HasSubstr("offered shared memory is not usable"));
  EXPECT_THAT(offer(n, 0, true), HasSubstr("this server holds none of that nonce"));
  // In the model without one (the last offer was refused), in a slot and
  // the model at once, narrow, with data in the message.
  uint64_t s0 = resp.session();
  proto::PullResponse next;
  grpc::Status st = Call(&proto::ParameterServer::Stub::PushPull,
                         InModel(PushOf(0, s0, 0, 1.0f), w0), &next);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(st.error_message(), HasSubstr("has no shared memory on server 0"));
  ASSERT_EQ(offer(n, 0, false), "mapped");
  s0 = resp.session();
  WorkerMemory m1(1, 64);
  proto::RegisterRequest req = RegisterRequestFor(1);
  m1.OfferIn(req);
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Register, req, &resp).ok());
  ASSERT_TRUE(resp.shared_memory());
  st = Call(&proto::ParameterServer::Stub::PushPull,
            InModel(PushOf(1, resp.session(), 0, 1.0f), w0), &next);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("has no shared model on server 0"));
  proto::PushRequest bad = InModel(PushOf(0, s0, 0, 1.0f), w0);
  bad.set_shared_slot(1);
  st = Call(&proto::ParameterServer::Stub::PushPull, bad, &next);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("names shared slot 1 and the shared model"));
  bad = InModel(PushOf(0, s0, 0, 1.0f), w0);
  for (proto::Chunk& c : *bad.mutable_chunks()) c.set_dtype(proto::DTYPE_BFLOAT16);
  st = Call(&proto::ParameterServer::Stub::PushPull, bad, &next);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("bf16 chunks in the shared model; expected float32"));
  bad = PushOf(0, s0, 0, 1.0f);
  bad.set_in_shared_model(true);
  st = Call(&proto::ParameterServer::Stub::PushPull, bad, &next);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(),
              HasSubstr("carries 8 bytes of data but the push names the shared model"));
  // Nothing was applied: both workers' full pushes still make step 0.
  proto::PushResponse ignored;
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::Push, PushOf(1, resp.session(), 0, 3.0f),
                   &ignored)
                  .ok());
  ASSERT_TRUE(Call(&proto::ParameterServer::Stub::PushPull, PushOf(0, s0, 0, 1.0f), &next).ok());
  std::vector<float> expected = InitialWeights();
  for (float& w : expected) w -= 2.0f;
  EXPECT_EQ(Flat(next, 1), expected);
}

}  // namespace
}  // namespace psync
