// Every bad request of the protocol sent to a live psync_server process:
// each gets a status naming the bad value, and the server keeps serving.
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/layout.h"
#include "common/layout_proto.h"
#include "common/subprocess.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/psync.grpc.pb.h"
#include "tests/test_util.h"

namespace psync {
namespace {

constexpr int kWorkers = 2;

class BadRequestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string port_file = TempDir() + "/bad_request.port";
    std::remove(port_file.c_str());
    auto server = Subprocess::Start({Runfile("server/psync_server"), "--num_servers=2",
                                     "--server_rank=0", absl::StrCat("--num_workers=", kWorkers),
                                     "--max_message_mb=4", "--pull_timeout_s=2",
                                     "--port_file=" + port_file},
                                    "[server] ");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    int port = 0;
    for (int i = 0; i < 500 && port == 0; ++i) {
      std::ifstream(port_file) >> port;
      if (port == 0) absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_GT(port, 0) << "server did not start";
    channel_ = new std::shared_ptr<grpc::Channel>(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  static void TearDownTestSuite() {
    delete channel_;
    if (server_ != nullptr) EXPECT_EQ(server_->Stop(absl::Seconds(5)), 0);
    delete server_;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    stub_ = proto::ParameterServer::NewStub(*channel_);
    layout_ = std::make_unique<Layout>(
        *Layout::Create({{"w", {64, 64}}, {"b", {64}}}, 4096, 2, 9));
    for (int w = 0; w < kWorkers; ++w) ASSERT_TRUE(Register(w, *layout_).ok());
  }

  void TearDown() override {
    // The server is still up and answering.
    EXPECT_FALSE(server_->Poll().has_value()) << "server exited";
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    proto::StatusRequest req;
    proto::StatusResponse resp;
    ASSERT_TRUE(stub_->GetStatus(&ctx, req, &resp).ok());
    EXPECT_TRUE(resp.registered());
    EXPECT_EQ(resp.layout_fingerprint(), layout_->fingerprint());
  }

  grpc::Status Register(int rank, const Layout& layout, int num_workers = kWorkers,
                        int64_t fingerprint_delta = 0) {
    proto::RegisterRequest req;
    req.set_worker_rank(rank);
    req.set_num_workers(num_workers);
    LayoutToProto(layout, req.mutable_layout());
    req.set_layout_fingerprint(layout.fingerprint() + fingerprint_delta);
    proto::RegisterResponse resp;
    return Call(&proto::ParameterServer::Stub::Register, req, &resp);
  }

  template <typename Method, typename Req, typename Resp>
  grpc::Status Call(Method method, const Req& req, Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ((*stub_).*method)(&ctx, req, resp);
  }

  // A valid push of one chunk owned by server 0, for tests to spoil.
  proto::PushRequest GoodPush() {
    proto::PushRequest req;
    req.set_worker_rank(0);
    req.set_layout_fingerprint(layout_->fingerprint());
    req.set_step(0);
    req.set_sample_count(1);
    const int32_t id = layout_->ChunksOnServer(0)[0];
    proto::Chunk* c = req.add_chunks();
    c->set_chunk_id(id);
    c->set_dtype(proto::DTYPE_FLOAT32);
    c->set_data(std::string(layout_->chunks()[id].bytes(), '\0'));
    return req;
  }

  grpc::Status Push(const proto::PushRequest& req) {
    proto::PushResponse resp;
    return Call(&proto::ParameterServer::Stub::Push, req, &resp);
  }

  static void ExpectError(const grpc::Status& s, grpc::StatusCode code, const std::string& text) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(text), std::string::npos)
        << "message '" << s.error_message() << "' lacks '" << text << "'";
  }

  static Subprocess* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
  std::unique_ptr<Layout> layout_;
};

Subprocess* BadRequestTest::server_ = nullptr;
std::shared_ptr<grpc::Channel>* BadRequestTest::channel_ = nullptr;

TEST_F(BadRequestTest, UnknownChunk) {
  auto req = GoodPush();
  req.mutable_chunks(0)->set_chunk_id(9999);
  ExpectError(Push(req), grpc::StatusCode::NOT_FOUND, "chunk 9999 does not exist");
  req.mutable_chunks(0)->set_chunk_id(layout_->ChunksOnServer(1)[0]);
  ExpectError(Push(req), grpc::StatusCode::NOT_FOUND, "is on server 1, not on server 0");
}

TEST_F(BadRequestTest, WrongByteSize) {
  auto req = GoodPush();
  req.mutable_chunks(0)->set_data(std::string(12, '\0'));
  ExpectError(Push(req), grpc::StatusCode::INVALID_ARGUMENT, "has 12 bytes, layout says 4096");
}

TEST_F(BadRequestTest, WrongDtype) {
  auto req = GoodPush();
  req.mutable_chunks(0)->set_dtype(proto::DTYPE_UNSPECIFIED);
  ExpectError(Push(req), grpc::StatusCode::INVALID_ARGUMENT, "dtype");
  req.mutable_chunks(0)->set_dtype(static_cast<proto::DType>(77));
  ExpectError(Push(req), grpc::StatusCode::INVALID_ARGUMENT, "dtype");
}

TEST_F(BadRequestTest, FingerprintMismatch) {
  auto req = GoodPush();
  req.set_layout_fingerprint(layout_->fingerprint() + 1);
  ExpectError(Push(req), grpc::StatusCode::FAILED_PRECONDITION,
              absl::StrCat("expected ", layout_->fingerprint()));
  ExpectError(Register(0, *layout_, kWorkers, 1), grpc::StatusCode::INVALID_ARGUMENT,
              "claims layout fingerprint");
}

TEST_F(BadRequestTest, RankOutOfRange) {
  auto req = GoodPush();
  req.set_worker_rank(kWorkers);
  ExpectError(Push(req), grpc::StatusCode::INVALID_ARGUMENT, "worker rank 2 is out of range 0..1");
  req.set_worker_rank(-1);
  ExpectError(Push(req), grpc::StatusCode::INVALID_ARGUMENT, "worker rank -1");
  ExpectError(Register(5, *layout_), grpc::StatusCode::INVALID_ARGUMENT, "worker rank 5");
  ExpectError(Register(0, *layout_, 3), grpc::StatusCode::INVALID_ARGUMENT, "started for 2");
}

TEST_F(BadRequestTest, StepFromTheFuture) {
  auto req = GoodPush();
  req.set_step(1000);
  ExpectError(Push(req), grpc::StatusCode::FAILED_PRECONDITION, "step 1000");
  proto::PullRequest pull;
  pull.set_worker_rank(0);
  pull.set_layout_fingerprint(layout_->fingerprint());
  pull.set_version(50);
  pull.add_chunk_ids(layout_->ChunksOnServer(0)[0]);
  proto::PullResponse resp;
  ExpectError(Call(&proto::ParameterServer::Stub::Pull, pull, &resp),
              grpc::StatusCode::FAILED_PRECONDITION, "version 50");
}

TEST_F(BadRequestTest, SecondRegistrationWithAnotherLayout) {
  auto other = Layout::Create({{"w", {64, 65}}, {"b", {64}}}, 4096, 2, 9);
  ExpectError(Register(1, *other), grpc::StatusCode::FAILED_PRECONDITION, "worker 1 has layout");
  auto bad_dtype = Layout::Create({{"w", {4}}}, 4096, 2, 9);
  proto::RegisterRequest req;
  req.set_worker_rank(0);
  req.set_num_workers(kWorkers);
  LayoutToProto(*bad_dtype, req.mutable_layout());
  req.mutable_layout()->mutable_tensors(0)->set_dtype(proto::DTYPE_UNSPECIFIED);
  proto::RegisterResponse resp;
  ExpectError(Call(&proto::ParameterServer::Stub::Register, req, &resp),
              grpc::StatusCode::INVALID_ARGUMENT, "dtype");
  req.mutable_layout()->mutable_tensors(0)->set_dtype(proto::DTYPE_FLOAT32);
  req.mutable_layout()->mutable_tensors(0)->set_shape(0, -4);
  ExpectError(Call(&proto::ParameterServer::Stub::Register, req, &resp),
              grpc::StatusCode::INVALID_ARGUMENT, "dimension -4");
}

TEST_F(BadRequestTest, OversizedMessage) {
  auto req = GoodPush();
  req.mutable_chunks(0)->set_data(std::string(5 << 20, '\0'));  // over --max_message_mb=4
  EXPECT_EQ(Push(req).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(BadRequestTest, MalformedBytes) {
  grpc::GenericStub generic(*channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const std::string garbage = "\xff\xff\xff\xff\x0f garbage that is not a protobuf";
  grpc::Slice slice(garbage);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::Status status;
  absl::Notification done;
  generic.UnaryCall(&ctx, "/psync.proto.ParameterServer/Push", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status s) {
                      status = s;
                      done.Notify();
                    });
  done.WaitForNotification();
  EXPECT_FALSE(status.ok());
}

TEST_F(BadRequestTest, RetriedPushIsAcknowledged) {
  auto req = GoodPush();
  EXPECT_TRUE(Push(req).ok());
  EXPECT_TRUE(Push(req).ok());  // the same (worker, chunk, step): no effect
}

}  // namespace
}  // namespace psync
