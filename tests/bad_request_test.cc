// Every bad request of the protocol sent to a live psync_server process:
// each gets a status naming the bad value, and the server keeps serving.
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/model/layout.h"
#include "common/process/free_ports.h"
#include "common/process/subprocess.h"
#include "common/wire/layout_proto.h"
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
  // Server 0 (under test) and server 1 (so that server 0, the coordinator,
  // sees the whole cluster and opens for registration).
  static void SetUpTestSuite() {
    PortReservation reservation;
    int ports[2];
    for (int& port : ports) {
      auto picked = reservation.Add();
      ASSERT_TRUE(picked.ok()) << picked.status();
      port = *picked;
    }
    reservation.Release();
    const std::string list = absl::StrCat("127.0.0.1:", ports[0], ",127.0.0.1:", ports[1]);
    for (int rank = 1; rank >= 0; --rank) {
      auto server = Subprocess::Start(
          {Runfile("server/psync_server"), "--num_servers=2",
           absl::StrCat("--server_rank=", rank), absl::StrCat("--num_workers=", kWorkers),
           "--max_message_mb=4", "--pull_timeout_s=2", absl::StrCat("--port=", ports[rank]),
           "--servers=" + list},
          absl::StrCat("[server ", rank, "] "));
      ASSERT_TRUE(server.ok()) << server.status();
      servers_[rank] = server->release();
    }
    server_ = servers_[0];
    port0_ = ports[0];
    channel_ = new std::shared_ptr<grpc::Channel>(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", ports[0]), grpc::InsecureChannelCredentials()));
  }

  static void TearDownTestSuite() {
    delete channel_;
    for (Subprocess*& s : servers_) {
      if (s != nullptr) {
        EXPECT_EQ(s->Stop(absl::Seconds(5)), 0);
      }
      delete s;
      s = nullptr;
    }
  }


  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    stub_ = proto::ParameterServer::NewStub(*channel_);
    layout_ = std::make_unique<Layout>(
        *Layout::Create({{"w", {64, 64}}, {"b", {64}}}, 4096, 2, 9));
    // The servers open for registration once they agree on a version.
    const absl::Time until = absl::Now() + absl::Seconds(20);
    for (int w = 0; w < kWorkers; ++w) {
      grpc::Status s;
      while ((s = Register(w, *layout_)).error_code() == grpc::StatusCode::UNAVAILABLE &&
             absl::Now() < until) {
        absl::SleepFor(absl::Milliseconds(50));
      }
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
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
                        int64_t fingerprint_delta = 0, uint64_t incarnation = 0,
                        int64_t batch_per_device = 8) {
    proto::RegisterRequest req;
    req.set_worker_rank(rank);
    req.set_num_workers(num_workers);
    LayoutToProto(layout, req.mutable_layout());
    req.set_layout_fingerprint(layout.fingerprint() + fingerprint_delta);
    req.set_worker_incarnation(incarnation != 0 ? incarnation : 100 + rank);
    req.mutable_shape()->set_batch_per_device(batch_per_device);
    proto::RegisterResponse resp;
    grpc::Status s = Call(&proto::ParameterServer::Stub::Register, req, &resp);
    if (s.ok() && rank >= 0 && rank < kWorkers) sessions_[rank] = resp.session();
    return s;
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
    req.set_session(sessions_[0]);
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
  static Subprocess* servers_[2];
  static int port0_;
  static std::shared_ptr<grpc::Channel>* channel_;
  uint64_t sessions_[kWorkers] = {};
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
  std::unique_ptr<Layout> layout_;
};

Subprocess* BadRequestTest::server_ = nullptr;
Subprocess* BadRequestTest::servers_[2] = {nullptr, nullptr};
int BadRequestTest::port0_ = 0;
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
  req.set_worker_rank(1);  // a real rank, but rank 0's session
  ExpectError(Push(req), grpc::StatusCode::ABORTED, "worker 1 has no current session");
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
  pull.set_session(sessions_[0]);
  pull.add_chunk_ids(layout_->ChunksOnServer(0)[0]);
  proto::PullResponse resp;
  ExpectError(Call(&proto::ParameterServer::Stub::Pull, pull, &resp),
              grpc::StatusCode::FAILED_PRECONDITION, "version 50");
}

TEST_F(BadRequestTest, SecondRegistrationWithAnotherLayout) {
  auto other = Layout::Create({{"w", {64, 65}}, {"b", {64}}}, 4096, 2, 9);
  ExpectError(Register(1, *other), grpc::StatusCode::FAILED_PRECONDITION,
              "worker 1's layout (fingerprint ");
  ExpectError(Register(1, *other), grpc::StatusCode::FAILED_PRECONDITION,
              "tensor 0: w [64, 65] in the worker's, w [64, 64] in the server's");
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

TEST_F(BadRequestTest, CallersWithoutASessionAreRefused) {
  auto req = GoodPush();
  req.set_session(0);  // a process that never registered
  ExpectError(Push(req), grpc::StatusCode::ABORTED, "has no current session");
  proto::PullRequest pull;
  pull.set_worker_rank(0);
  pull.set_layout_fingerprint(layout_->fingerprint());
  pull.add_chunk_ids(layout_->ChunksOnServer(0)[0]);
  pull.set_session(sessions_[0] + 2);
  proto::PullResponse resp;
  ExpectError(Call(&proto::ParameterServer::Stub::Pull, pull, &resp), grpc::StatusCode::ABORTED,
              "register again");
}

TEST_F(BadRequestTest, ASecondLiveProcessCannotTakeARank) {
  ExpectError(Register(1, *layout_, kWorkers, 0, /*incarnation=*/999),
              grpc::StatusCode::ALREADY_EXISTS, "worker rank 1 is held by a live process");
}

TEST_F(BadRequestTest, AHoldNeedsTheRanksCurrentSession) {
  proto::HoldRequest hold;
  hold.set_worker_rank(1);
  hold.set_session(sessions_[1] + 1);
  proto::HoldResponse resp;
  ExpectError(Call(&proto::ParameterServer::Stub::Hold, hold, &resp), grpc::StatusCode::ABORTED,
              "Hold: worker 1 has no current session");
  hold.set_worker_rank(kWorkers);
  ExpectError(Call(&proto::ParameterServer::Stub::Hold, hold, &resp),
              grpc::StatusCode::INVALID_ARGUMENT, "Hold: worker rank 2 is out of range 0..1");
}

TEST_F(BadRequestTest, AWorkerWithAnotherShapeIsRefused) {
  ExpectError(Register(1, *layout_, kWorkers, 0, 0, /*batch_per_device=*/16),
              grpc::StatusCode::FAILED_PRECONDITION, "batch_per_device is '16', the job's is '8'");
}

TEST_F(BadRequestTest, ASecondServerCannotListenOnALivePort) {
  auto second = Subprocess::Start({Runfile("server/psync_server"), "--num_servers=1",
                                   absl::StrCat("--port=", port0_)},
                                  "[second server] ");
  ASSERT_TRUE(second.ok());
  auto code = (*second)->Wait(absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(code.has_value()) << "a second server started on a live port";
  EXPECT_EQ(*code, 1) << "the port may be freed: not final";
  EXPECT_NE((*second)->output().find(absl::StrCat(
                "server 0: cannot listen on 127.0.0.1:", port0_,
                ": Address already in use (is another server already listening there?)")),
            std::string::npos)
      << (*second)->output();
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

// 2 MB, under Register's 8 MiB, but some 70 MB once parsed: refused unparsed.
TEST_F(BadRequestTest, RegisterThatWouldTakeTooMuchMemoryParsed) {
  proto::RegisterRequest req;
  req.set_num_workers(kWorkers);
  for (int i = 0; i < 1000000; ++i) req.mutable_layout()->add_tensors();
  proto::RegisterResponse resp;
  const grpc::Status s = Call(&proto::ParameterServer::Stub::Register, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(s.error_message(), absl::StrCat("Register: the request (", req.ByteSizeLong(),
                                                       " bytes) would take more than 33554432 "
                                                       "bytes once parsed")))
      << s.error_message();
}

TEST_F(BadRequestTest, RetriedPushIsAcknowledged) {
  auto req = GoodPush();
  EXPECT_TRUE(Push(req).ok());
  EXPECT_TRUE(Push(req).ok());  // the same (worker, chunk, step): no effect
}

}  // namespace
}  // namespace psync
