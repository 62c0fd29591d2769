#include "server/rpc/lane_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/rpc/byte_buffer_bytes.h"
#include "common/rpc/chunk_wire.h"
#include "common/rpc/payload_lane.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/client/rpc/lane_client.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

grpc::ByteBuffer Bytes(const std::string& text) {
  grpc::Slice s(text);
  return grpc::ByteBuffer(&s, 1);
}

// A lane server whose calls answer with their request reversed, or, for a
// request "fail", with FAILED_PRECONDITION; "hold" is kept unanswered until
// the test answers it.
class LaneServerTest : public ::testing::Test {
 protected:
  void Start(LaneServerOptions o = {}) {
    o.host = "127.0.0.1";
    if (o.token.empty()) o.token = "secret";
    o.max_payload_bytes = 1 << 20;
    auto listening = LaneServer::Listen(o);
    ASSERT_TRUE(listening.ok()) << listening.status();
    server_ = *std::move(listening);
    server_->Serve([this](LaneCall* call) {
      const std::string request = BufferBytes(call->request());
      ++calls_;
      if (request == "hold") {
        held_ = call;
        held_in_.Notify();
        return;
      }
      if (request == "fail") return call->Finish(absl::FailedPreconditionError("told to fail"));
      *call->response() = Bytes(std::string(request.rbegin(), request.rend()));
      call->Finish(absl::OkStatus());
    });
  }
  void TearDown() override {
    if (held_ != nullptr) held_->Finish(absl::CancelledError("test over"));
    server_.reset();
  }

  // A raw connection to the server.
  int Connect() const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(server_->port()));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    timeval timeout{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    return fd;
  }
  static void Send(int fd, uint32_t kind, uint64_t id, const std::string& body,
                   uint32_t timeout_ms = 10000, uint32_t version = 0) {
    LaneHeader h;
    h.kind = kind;
    h.call_id = id;
    h.body_bytes = body.size();
    h.aux = timeout_ms;
    h.version = version;
    LaneFrame frame(h, "", Bytes(body));
    ASSERT_TRUE(WriteLaneFrame(fd, frame, /*wait=*/true).ok());
  }
  // Says hello, and takes the server's welcome.
  static void Hello(int fd, const std::string& token = "secret") {
    SendHello(fd, token);
    const Answer welcome = Receive(fd);
    EXPECT_EQ(welcome.id, 0u);
    EXPECT_EQ(welcome.code, absl::StatusCode::kOk) << welcome.message;
    EXPECT_EQ(welcome.version, kLaneVersion);
  }
  static void SendHello(int fd, const std::string& token, uint32_t version = kLaneVersion) {
    Send(fd, static_cast<uint32_t>(LaneMethod::kHello), 0, token, 0, version);
  }
  struct Answer {
    uint64_t id = 0;
    uint32_t version = 0;
    absl::StatusCode code = absl::StatusCode::kUnknown;
    std::string message, body;
  };
  static Answer Receive(int fd) {
    char head[LaneHeader::kBytes];
    Answer a;
    if (!ReadFully(fd, head, sizeof head, "test").ok()) {
      a.message = "connection closed";
      return a;
    }
    const absl::StatusOr<LaneHeader> h = DecodeLaneHeader(head);
    EXPECT_TRUE(h.ok()) << h.status();
    a.id = h->call_id;
    a.version = h->version;
    a.code = static_cast<absl::StatusCode>(h->kind);
    a.message.resize(h->aux);
    a.body.resize(h->body_bytes);
    EXPECT_TRUE(ReadFully(fd, a.message.data(), a.message.size(), "test").ok());
    EXPECT_TRUE(ReadFully(fd, a.body.data(), a.body.size(), "test").ok());
    return a;
  }
  // A connection that said hello and sent call `id`, which the server
  // holds unanswered (held_) by the time this returns.
  int ConnectWithAHeldCall(uint64_t id) {
    const int fd = Connect();
    Hello(fd);
    Send(fd, static_cast<uint32_t>(LaneMethod::kPushPull), id, "hold");
    held_in_.WaitForNotification();
    return fd;
  }
  static bool Closed(int fd) {
    char c;
    return recv(fd, &c, 1, 0) <= 0;
  }

  std::unique_ptr<LaneServer> server_;
  std::atomic<int> calls_{0};
  LaneCall* held_ = nullptr;
  absl::Notification held_in_;
};

TEST_F(LaneServerTest, AnswersEachCallByItsIdInAnyOrder) {
  Start();
  const int fd = ConnectWithAHeldCall(7);
  Send(fd, static_cast<uint32_t>(LaneMethod::kPush), 8, "abc");
  Send(fd, static_cast<uint32_t>(LaneMethod::kPull), 9, "fail");
  Answer a = Receive(fd);
  EXPECT_EQ(a.id, 8u);
  EXPECT_EQ(a.code, absl::StatusCode::kOk);
  EXPECT_EQ(a.body, "cba");
  a = Receive(fd);
  EXPECT_EQ(a.id, 9u);
  EXPECT_EQ(a.code, absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.message, "told to fail");
  EXPECT_EQ(a.body, "");
  EXPECT_FALSE(held_->over());
  *held_->response() = Bytes("late");
  std::exchange(held_, nullptr)->Finish(absl::OkStatus());
  a = Receive(fd);
  EXPECT_EQ(a.id, 7u);
  EXPECT_EQ(a.body, "late");
  close(fd);
}

TEST_F(LaneServerTest, AWrongTokenIsRefusedAndTheConnectionClosed) {
  Start();
  const int fd = Connect();
  SendHello(fd, "guess");
  Send(fd, static_cast<uint32_t>(LaneMethod::kPush), 1, "abc");
  const Answer a = Receive(fd);
  EXPECT_EQ(a.id, 0u);
  EXPECT_EQ(a.code, absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(a.message, HasSubstr("missing or wrong token"));
  EXPECT_TRUE(Closed(fd));
  EXPECT_EQ(calls_.load(), 0);
  close(fd);
}

TEST_F(LaneServerTest, MalformedFramesCloseTheirConnectionOnly) {
  Start();
  struct Case {
    std::string what;
    std::function<void(int)> send;
    absl::StatusCode code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"no hello first", [](int fd) { Send(fd, static_cast<uint32_t>(LaneMethod::kPush), 1, "x"); },
       absl::StatusCode::kInvalidArgument, "expected a hello"},
      {"garbage",
       [](int fd) {
         const std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n" + std::string(32, '.');
         ASSERT_EQ(write(fd, http.data(), http.size()), static_cast<ssize_t>(http.size()));
       },
       absl::StatusCode::kInvalidArgument, "is this a psync payload lane?"},
      {"a hello of a build before lane versions",
       [](int fd) { SendHello(fd, "secret", 0); },
       absl::StatusCode::kFailedPrecondition,
       absl::StrCat("the worker speaks lane version 0 (a build before versions), this server ",
                    kLaneVersion, ": run one psync build")},
      {"a hello of a later lane version",
       [](int fd) { SendHello(fd, "secret", kLaneVersion + 1); },
       absl::StatusCode::kFailedPrecondition,
       absl::StrCat("the worker speaks lane version ", kLaneVersion + 1, ", this server ",
                    kLaneVersion)},
      {"an unknown method",
       [](int fd) {
         Hello(fd);
         Send(fd, 77, 3, "x");
       },
       absl::StatusCode::kInvalidArgument, "method 77 is not one of"},
      {"a second hello",
       [](int fd) {
         Hello(fd);
         SendHello(fd, "secret");
       },
       absl::StatusCode::kInvalidArgument, "method 1 is not one of"},
      {"a body over the message limit",
       [](int fd) {
         Hello(fd);
         LaneHeader h;
         h.kind = static_cast<uint32_t>(LaneMethod::kPushPull);
         h.call_id = 4;
         h.body_bytes = uint64_t{1} << 40;
         h.aux = 1000;
         LaneFrame frame(h, "", grpc::ByteBuffer());
         ASSERT_TRUE(WriteLaneFrame(fd, frame, /*wait=*/true).ok());
       },
       absl::StatusCode::kResourceExhausted, "over the message limit of 1048576"},
      {"a call without a deadline",
       [](int fd) {
         Hello(fd);
         Send(fd, static_cast<uint32_t>(LaneMethod::kPull), 5, "x", 0);
       },
       absl::StatusCode::kInvalidArgument, "no deadline"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const int fd = Connect();
    c.send(fd);
    const Answer a = Receive(fd);
    EXPECT_EQ(a.code, c.code);
    EXPECT_THAT(a.message, HasSubstr(c.says));
    EXPECT_TRUE(Closed(fd));
    close(fd);
  }
  EXPECT_EQ(calls_.load(), 0);
  // The server still serves.
  const int fd = Connect();
  Hello(fd);
  Send(fd, static_cast<uint32_t>(LaneMethod::kPush), 6, "ok");
  EXPECT_EQ(Receive(fd).body, "ko");
  close(fd);
}

TEST_F(LaneServerTest, ASilentConnectionIsClosedAfterTheHelloTimeout) {
  LaneServerOptions o;
  o.hello_timeout = absl::Milliseconds(200);
  Start(o);
  const int fd = Connect();
  EXPECT_TRUE(Closed(fd));
  close(fd);
}

TEST_F(LaneServerTest, AHelloPastTheMostConnectionsIsRefused) {
  LaneServerOptions o;
  o.max_connections = 2;
  Start(o);
  std::vector<int> fds = {Connect(), Connect()};
  for (int fd : fds) Hello(fd);
  for (int fd : fds) {
    Send(fd, static_cast<uint32_t>(LaneMethod::kPush), 1, "ab");
    EXPECT_EQ(Receive(fd).body, "ba");
  }
  const int extra = Connect();
  SendHello(extra, "secret");
  const Answer a = Receive(extra);
  EXPECT_EQ(a.code, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(a.message, HasSubstr("2 connections are open"));
  EXPECT_TRUE(Closed(extra));
  close(extra);
  close(fds[0]);
  // Its place is free again once the server has seen it close.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  Answer again;
  while (again.code != absl::StatusCode::kOk && absl::Now() < give_up) {
    const int fd = Connect();
    Hello(fd);
    Send(fd, static_cast<uint32_t>(LaneMethod::kPush), 2, "cd");
    again = Receive(fd);
    close(fd);
  }
  EXPECT_EQ(again.body, "dc");
  close(fds[1]);
}

TEST_F(LaneServerTest, AHelloDribbledPastTheTimeoutIsClosed) {
  LaneServerOptions o;
  o.hello_timeout = absl::Milliseconds(300);
  Start(o);
  const int fd = Connect();
  // A byte every 50 ms, each well within the timeout of the one before:
  // only the hello's own deadline closes the connection (the hello never
  // ends: 200 bytes do not make a header and its 4 KiB token).
  bool closed = false;
  for (int i = 0; i < 200 && !closed; ++i) {
    closed = send(fd, "P", 1, MSG_NOSIGNAL) != 1;
    absl::SleepFor(absl::Milliseconds(50));
    pollfd p{fd, POLLIN, 0};
    closed = closed || (poll(&p, 1, 0) > 0 && Closed(fd));
  }
  EXPECT_TRUE(closed);
  close(fd);
}

TEST_F(LaneServerTest, AHeldCallIsOverOnceItsConnectionCloses) {
  Start();
  const int fd = ConnectWithAHeldCall(1);
  EXPECT_FALSE(held_->over());
  close(fd);
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!held_->over() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(held_->over());
}

// The worker's end: calls go through, a wrong token ends them with the
// server's refusal, and a cancelled call ends at once.
TEST_F(LaneServerTest, ALaneClientsCallsEndOnceEach) {
  Start();
  struct End {
    grpc::ByteBuffer response;
    grpc::Status status;
    absl::Notification done;
  };
  auto start = [](LaneClient& client, const std::string& request, End* end) {
    const uint64_t id =
        client.Start(LaneMethod::kPushPull, Bytes(request), absl::Now() + absl::Seconds(10),
                     {&end->response, &end->status, [end] { end->done.Notify(); }});
    client.Send(id);
    return id;
  };
  {
    LaneClient client("127.0.0.1", "secret", {}, "test");
    client.SetPort(server_->port(), 1 << 20);
    End ok, held;
    start(client, "hello", &ok);
    ok.done.WaitForNotification();
    EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
    EXPECT_EQ(BufferBytes(ok.response), "olleh");
    const uint64_t id = start(client, "hold", &held);
    held_in_.WaitForNotification();
    client.Cancel(id);
    held.done.WaitForNotification();
    EXPECT_EQ(held.status.error_code(), grpc::StatusCode::CANCELLED);
  }
  // Cancelled once sent, a call closes its connection: the rest of its
  // request is never read from the caller's buffers, and the server's
  // call is over.
  {
    LaneClient client("127.0.0.1", "secret", {}, "test");
    client.SetPort(server_->port(), 1 << 20);
    End held;
    const uint64_t id = start(client, "hold", &held);
    held_in_.WaitForNotification();
    client.Cancel(id);
    held.done.WaitForNotification();
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (!held_->over() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
    EXPECT_TRUE(held_->over());
  }
  LaneClient wrong("127.0.0.1", "guess", {}, "test");
  wrong.SetPort(server_->port(), 1 << 20);
  End refused;
  start(wrong, "hello", &refused);
  refused.done.WaitForNotification();
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("missing or wrong token"));
}

// A socket bound to a free port of 127.0.0.1 (`port`), not listening.
int BoundLoopbackSocket(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// A push of one byte on `client`, to its end.
grpc::Status PushOnce(LaneClient& client) {
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  client.Send(client.Start(LaneMethod::kPush, Bytes("x"), absl::Now() + absl::Seconds(10),
                           {&response, &status, [&done] { done.Notify(); }}));
  done.WaitForNotification();
  return status;
}

// Accepts a connection on `listener`, reads its hello (of this build's lane
// version, no token) and answers it with a welcome of `version`; the
// connection, -1 if that failed.
int AcceptAndWelcome(int listener, uint32_t version = kLaneVersion) {
  const int fd = accept(listener, nullptr, nullptr);
  char head[LaneHeader::kBytes] = {};
  bool ok = fd >= 0 && recv(fd, head, sizeof head, MSG_WAITALL) == sizeof head;
  const absl::StatusOr<LaneHeader> hello = DecodeLaneHeader(head);
  EXPECT_TRUE(ok && hello.ok() && hello->version == kLaneVersion);
  LaneHeader welcome;
  welcome.version = version;
  EncodeLaneHeader(welcome, head);
  ok = ok && send(fd, head, sizeof head, MSG_NOSIGNAL) == sizeof head;
  if (!ok && fd >= 0) close(fd);
  return ok ? fd : -1;
}

// A push of one byte from a fresh LaneClient to a lane server of the
// test's own, `serve` (given the listening socket) on a thread of its own:
// the push's end, and whether the lane stayed open.
struct LaneEnd {
  grpc::Status status;
  bool open = false;
};
LaneEnd PushOnceTo(const std::function<void(int listener)>& serve) {
  int port;
  const int listener = BoundLoopbackSocket(&port);
  EXPECT_EQ(listen(listener, 4), 0);
  std::thread server(serve, listener);
  LaneClient client("127.0.0.1", "", {}, "worker 0 to server 0");
  client.SetPort(port, 1 << 20);
  LaneEnd end;
  end.status = PushOnce(client);
  end.open = client.open();
  server.join();
  close(listener);
  return end;
}

// A lane that cannot be reached ends its calls UNAVAILABLE (which callers
// retry) and closes for a while, so that the retries go through gRPC.
TEST(LaneClientTest, AnUnreachableLaneClosesForAWhile) {
  int port;
  close(BoundLoopbackSocket(&port));  // nobody listens there now
  LaneClient client("127.0.0.1", "", {}, "worker 0 to server 0");
  client.SetPort(port, 1 << 20);
  EXPECT_TRUE(client.open());
  const grpc::Status status = PushOnce(client);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("payload lane of worker 0 to server 0: cannot "
                                                "connect to 127.0.0.1:"));
  EXPECT_FALSE(client.open());
}

// A connection closed before it answered anything, its welcome first (a
// server out of places), closes the lane for a while too.
TEST(LaneClientTest, AConnectionClosedBeforeAnyAnswerClosesTheLane) {
  const LaneEnd end = PushOnceTo([](int listener) {
    const int fd = accept(listener, nullptr, nullptr);
    if (fd >= 0) close(fd);
  });
  EXPECT_EQ(end.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_FALSE(end.open);
}

// A welcome of another lane version (a server of another build) closes the
// lane for a while, saying which versions met: the calls go through gRPC.
TEST(LaneClientTest, AWelcomeOfAnotherVersionClosesTheLane) {
  for (const uint32_t version : {0u, kLaneVersion + 1}) {
    SCOPED_TRACE(absl::StrCat("the server's version ", version));
    const LaneEnd end = PushOnceTo([version](int listener) {
      const int fd = AcceptAndWelcome(listener, version);
      if (fd < 0) return;
      char byte;
      recv(fd, &byte, 1, MSG_WAITALL);  // until the worker closes
      close(fd);
    });
    EXPECT_EQ(end.status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(end.status.error_message(),
                HasSubstr(absl::StrCat("the server speaks lane version ", version)));
    EXPECT_THAT(end.status.error_message(),
                HasSubstr(absl::StrCat(", this worker ", kLaneVersion)));
    EXPECT_FALSE(end.open);
  }
}

// A lane server of the test's own on `listener`: welcomes one connection,
// reads its first call, and answers it with `answer`: the first `first`
// bytes at once (then notifies `sent`, if given), the rest once `more` is
// notified.
void AnswerInTwoParts(int listener, const std::string& answer, size_t first,
                      absl::Notification* more, absl::Notification* sent = nullptr) {
  const int fd = AcceptAndWelcome(listener);
  ASSERT_GE(fd, 0);
  char head[LaneHeader::kBytes];
  ASSERT_EQ(recv(fd, head, sizeof head, MSG_WAITALL), sizeof head);
  const absl::StatusOr<LaneHeader> call = DecodeLaneHeader(head);
  ASSERT_TRUE(call.ok()) << call.status();
  std::string request(call->body_bytes, '\0');
  recv(fd, request.data(), request.size(), MSG_WAITALL);
  LaneHeader reply;
  reply.call_id = call->call_id;
  reply.body_bytes = answer.size();
  EncodeLaneHeader(reply, head);
  const std::string frame = std::string(head, sizeof head) + answer;
  const size_t at = sizeof head + first;
  send(fd, frame.data(), at, MSG_NOSIGNAL);
  if (sent != nullptr) sent->Notify();
  more->WaitForNotification();
  send(fd, frame.data() + at, frame.size() - at, MSG_NOSIGNAL);  // fails if it closed
  close(fd);
}

// A call whose answer is being read into the caller's memory ends only once
// that read has stopped, cancelled or past its deadline: the memory is then
// the caller's again, and no more of the answer is written there, though
// all of it but its last 1000 bytes had been sent when it ended.
TEST(LaneClientTest, ACallEndsOnlyOnceItsAnswerIsNoLongerReadIntoPlace) {
  std::vector<float> weights(1 << 20);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>(i);
  WireMessageBuilder builder;
  builder.AddChunk(3, /*DTYPE_FLOAT32*/ 1, 7, weights.data(), 4 << 20);
  const std::string answer = BufferBytes(builder.Build());
  for (const bool cancel : {true, false}) {
    SCOPED_TRACE(cancel ? "cancelled" : "past its deadline");
    int port;
    const int listener = BoundLoopbackSocket(&port);
    ASSERT_EQ(listen(listener, 4), 0);
    absl::Notification more;
    std::thread server(AnswerInTwoParts, listener, answer, answer.size() - 1000, &more,
                       nullptr);
    std::vector<float> to(weights.size(), -1.0f);
    LaneClient client("127.0.0.1", "", {}, "worker 0 to server 0");
    client.SetPort(port, 8 << 20);
    grpc::ByteBuffer response;
    grpc::Status status;
    std::atomic<int> ends{0};
    absl::Notification done;
    const absl::Time deadline = absl::Now() + (cancel ? absl::Seconds(20) : absl::Seconds(2));
    const uint64_t id = client.Start(LaneMethod::kPull, Bytes("x"), deadline,
                                     {&response, &status, [&] {
                                        ++ends;
                                        done.Notify();
                                      }},
                                     {{3, 7, reinterpret_cast<char*>(to.data()), 4 << 20}});
    client.Send(id);
    // The first part of the answer has reached its place (read as the
    // reader writes it).
    const float expected = 5000.0f;
    uint32_t written, placed;
    std::memcpy(&placed, &expected, sizeof placed);
    do {
      absl::SleepFor(absl::Milliseconds(1));
      written = __atomic_load_n(reinterpret_cast<uint32_t*>(&to[5000]), __ATOMIC_ACQUIRE);
    } while (written != placed && !done.HasBeenNotified());
    if (cancel) client.Cancel(id);
    done.WaitForNotification();
    std::fill(to.begin(), to.end(), -2.0f);  // the caller's again
    more.Notify();
    server.join();
    close(listener);
    absl::SleepFor(absl::Milliseconds(50));  // for a read that went on, to show
    EXPECT_EQ(to, std::vector<float>(weights.size(), -2.0f));
    EXPECT_EQ(ends.load(), 1);
    if (cancel) {
      // Cancelled, or ended by the read's own end, which comes as close (a
      // call that its deadline ended is not either: placing never began).
      EXPECT_THAT(status.error_code(), ::testing::AnyOf(grpc::StatusCode::CANCELLED,
                                                        grpc::StatusCode::UNAVAILABLE));
    } else {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    }
  }
}

// An answer whose body stalls for longer than a reader's look at the
// deadlines (a lost segment, a busy host) still comes whole, and the lane's
// lock stays free meanwhile.
TEST(LaneClientTest, AnAnswerThatStallsMidBodyStillComes) {
  int port;
  const int listener = BoundLoopbackSocket(&port);
  ASSERT_EQ(listen(listener, 4), 0);
  const std::string answer(100000, 'a');
  absl::Notification more, sent;
  std::thread server(AnswerInTwoParts, listener, answer, 10, &more, &sent);
  LaneClient client("127.0.0.1", "", {}, "worker 0 to server 0");
  client.SetPort(port, 1 << 20);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  client.Send(client.Start(LaneMethod::kPush, Bytes("x"), absl::Now() + absl::Seconds(20),
                           {&response, &status, [&done] { done.Notify(); }}));
  sent.WaitForNotification();                           // the body has begun,
  absl::SleepFor(3 * absl::Milliseconds(kLaneTickMs));  // and stalls
  EXPECT_TRUE(client.open());                           // the lane's lock is free
  more.Notify();
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(15)));
  server.join();
  close(listener);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(BufferBytes(response), answer);
}

}  // namespace
}  // namespace psync
