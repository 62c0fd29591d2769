// Unary methods on gRPC's asynchronous (completion-queue) API, driven by
// threads of our own: a call runs on the thread that received it.
//
// Why not the callback API: gRPC 1.51 runs callbacks on a pool of
// "nexting" threads that all poll the process's one epoll set, so every
// event wakes a second thread to take over polling. Measured on 2 cores,
// 4 KiB push-pull with one worker: about 3 context switches and 0.15 ms of
// server CPU per step on the callback API, 1 and 0.08 ms here. No service
// of the process may use the callback API (gRPC's default health service
// does): its threads would poll as well.
#ifndef PSYNC_SERVER_RPC_ASYNC_SERVICE_H_
#define PSYNC_SERVER_RPC_ASYNC_SERVICE_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/impl/codegen/rpc_service_method.h"
#include "grpcpp/support/async_stream.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "server/rpc/parsed_size.h"

namespace psync {

// One call, from the request posted for it on a completion queue to its
// end. Its events (it arrived, its answer went out, it is over) are tags of
// that queue, which one thread drives; the answer may be given on any
// thread.
class ServerCall {
 public:
  // A completion-queue tag: one event of a call.
  struct Event {
    ServerCall* call;
    void (ServerCall::*handle)(bool ok);
  };
  // Handles a tag the queue returned.
  static void Handle(void* tag, bool ok) {
    const Event& e = *static_cast<Event*>(tag);
    (e.call->*e.handle)(ok);
  }

  virtual ~ServerCall() = default;

  const grpc::ServerContext& context() const { return ctx_; }
  // The client's address and port: its connection.
  std::string peer() const { return ctx_.peer(); }
  absl::Time deadline() const { return absl::FromChrono(ctx_.deadline()); }
  // Whether the call is over. Before it is answered: its client cancelled
  // it, its deadline passed or its connection closed.
  bool over() const { return over_.load(std::memory_order_acquire); }

 protected:
  ServerCall() { ctx_.AsyncNotifyWhenDone(&over_event_); }
  // The call arrived, with its metadata but not its request: ask for the
  // next one, admit it or refuse it, and read its request if admitted.
  virtual void Start() = 0;
  // Its request was read (ok), or will never be.
  virtual void Received(bool ok) = 0;

  grpc::ServerContext ctx_;
  Event arrived_{this, &ServerCall::Arrived};
  Event read_{this, &ServerCall::Received};
  Event answered_{this, &ServerCall::Ended};

 private:
  void Arrived(bool ok) {
    if (ok) return Start();
    delete this;  // the server is shutting down: the call never started, no `over` follows
  }
  void Over(bool ok) {
    over_.store(true, std::memory_order_release);
    OnOver();
    Ended(ok);
  }
  // The call is over, answered or not (ServerContext::IsCancelled tells
  // which: a call that wants to know asks, the others pay nothing).
  virtual void OnOver() {}
  // Answered, or over: the call goes once both are.
  void Ended(bool) {
    if (--events_left_ == 0) delete this;
  }

  Event over_event_{this, &ServerCall::Over};
  int events_left_ = 2;  // on the queue's thread only
  std::atomic<bool> over_{false};
};

// A unary call of a method whose request is Req: a grpc::ByteBuffer (a
// payload the method decodes itself, within its method's bound: the job's
// message limit), or a protobuf message.
//
// The call is admitted (its metadata checked: the token) before its request
// is read. gRPC reads a unary method's request whole before it hands the
// call to the server, so the methods are registered with gRPC as
// client-streaming (the same on the wire: one message, then the client's
// half-close) and read their one message themselves: a refused call's body
// is never read past the transport's flow-control window, and the answer
// resets the stream. A protobuf request arrives as bytes
// and is parsed here, only if it is within the method's own bound: parsed
// messages can take far more memory than their bytes (an empty repeated
// submessage is 2 bytes on the wire and some 70 in memory), so the methods
// that carry no payload are not given the limit sized for payloads, and a
// request whose parsed form would take more than kParsedPerRequestByte
// times that bound is refused before it is parsed.
template <typename Req, typename Resp>
class UnaryCall final : public ServerCall {
 public:
  static constexpr bool kProtobufRequest = !std::is_same_v<Req, grpc::ByteBuffer>;

  // A method as served: runs a call that arrived (which answers through
  // Finish, now or later), and asks gRPC for the next call of the method.
  struct Served {
    std::string name;               // the method's own name, for errors
    int64_t max_request_bytes = 0;  // of a request, on the wire
    // Whether a call may be run, from its metadata alone (e.g. its token):
    // a call it refuses is answered with its status, its request unread.
    // Null: every call is.
    std::function<grpc::Status(const grpc::ServerContext&)> admit;
    // Told of a call refused for its request (over its bound, or not
    // parsing) before `run`, with the request's bytes. Null: not told.
    std::function<void(const grpc::Status&, size_t)> refused;
    std::function<void(UnaryCall*)> run;
    std::function<void(UnaryCall*, grpc::ServerCompletionQueue*)> request;
  };

  // Asks for the next call of `method` on `cq`.
  static void Post(const Served* method, grpc::ServerCompletionQueue* cq) {
    method->request(new UnaryCall(method, cq), cq);
  }

  // Runs `dropped` on the call's thread if the call is dropped before it is
  // answered (its client cancelled it, its deadline passed or its connection
  // closed): set it from the method's `run`, whose
  // thread that is, so that the two never race.
  void OnDropped(std::function<void()> dropped) { dropped_ = std::move(dropped); }

  const Req& request() const { return request_; }
  Req* mutable_request() { return &request_; }  // e.g. to free its bytes early
  Resp* response() { return &response_; }

  // Answers, with the response if OK. Once, from any thread; the call may
  // be gone when this returns.
  void Finish(const grpc::Status& status) {
    if (status.ok()) {
      reader_.Finish(response_, status, &answered_);
    } else {
      reader_.FinishWithError(status, &answered_);
    }
  }

 private:
  friend class AsyncService;  // hands the call's slots to gRPC (Served::request)

  UnaryCall(const Served* method, grpc::ServerCompletionQueue* cq) : method_(method), cq_(cq) {}

  void Start() override {
    Post(method_, cq_);
    if (method_->admit) {
      const grpc::Status admitted = method_->admit(ctx_);
      if (!admitted.ok()) return Finish(admitted);
    }
    reader_.Read(bytes(), &read_);
  }

  // Runs `dropped_` if the call was dropped before it was answered: its
  // client cancelled it, its deadline passed or its connection closed.
  void OnOver() override {
    if (dropped_ && ctx_.IsCancelled()) dropped_();
  }

  void Received(bool ok) override {
    if (!ok) {
      // No message: the client half-closed without one, or the call is
      // over (cancelled, or its message over the server's size limit).
      return Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 absl::StrCat(method_->name, ": the call carried no request")));
    }
    grpc::Status refused;
    size_t bytes = 0;
    if constexpr (kProtobufRequest) {
      bytes = received_.Length();
      refused = Parse();
    } else {
      bytes = request_.Length();
      // A payload's bound is the job's message limit, which the transport's
      // own limit (the largest of all methods' bounds) may exceed.
      if (bytes > static_cast<size_t>(method_->max_request_bytes)) {
        refused = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                               absl::StrCat(method_->name, ": the request has ", bytes,
                                            " bytes, over the message limit of ",
                                            method_->max_request_bytes, " (--max_message_mb)"));
      }
    }
    if (!refused.ok()) {
      if (method_->refused) method_->refused(refused, bytes);
      return Finish(refused);
    }
    method_->run(this);
  }

  // Where the request's bytes are read to.
  grpc::ByteBuffer* bytes() {
    if constexpr (kProtobufRequest) {
      return &received_;
    } else {
      return &request_;
    }
  }

  // What a parsed request may take, at most (EstimateParsedBytes), for each
  // byte of its method's bound.
  static constexpr int64_t kParsedPerRequestByte = 4;

  // Parses the received bytes into request_, within the method's bound and
  // what that may take once parsed: refused unparsed past either.
  grpc::Status Parse() {
    const size_t bytes = received_.Length();
    if (bytes > static_cast<size_t>(method_->max_request_bytes)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat(method_->name, ": the request has ", bytes,
                                       " bytes, expected at most ", method_->max_request_bytes));
    }
    const int64_t max_parsed = kParsedPerRequestByte * method_->max_request_bytes;
    grpc::ProtoBufferReader reader(&received_);
    const int64_t parsed = EstimateParsedBytes(&reader, *Req::descriptor(), max_parsed);
    if (parsed > max_parsed) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat(method_->name, ": the request (", bytes,
                                       " bytes) would take more than ", max_parsed,
                                       " bytes once parsed, expected at most ",
                                       kParsedPerRequestByte, " times its bound of ",
                                       method_->max_request_bytes));
    }
    if (parsed < 0 || !grpc::SerializationTraits<Req>::Deserialize(&received_, &request_).ok()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat(method_->name, ": the request (", bytes,
                                       " bytes) is not a valid ", request_.GetTypeName()));
    }
    return grpc::Status::OK;
  }

  const Served* const method_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::ByteBuffer received_;  // a protobuf request's bytes, until Parse
  Req request_;
  Resp response_;
  std::function<void()> dropped_;
  grpc::ServerAsyncReader<Resp, grpc::ByteBuffer> reader_{&ctx_};
};

// A service of unary methods on the asynchronous API. Register it with a
// grpc::ServerBuilder, then call Serve for each of the server's completion
// queues once the server has started.
class AsyncService : public grpc::Service {
 public:
  // A request's bound unless its method names another.
  static constexpr int64_t kMaxControlRequestBytes = int64_t{1} << 20;

  // Answers every call the service holds open, and every later one at
  // once: before the server shuts down, after which no call may be
  // answered.
  virtual void Close() {}

  // Asks for calls of every method on `cq`, a few of each at a time: each
  // call that arrives asks for the next.
  void Serve(grpc::ServerCompletionQueue* cq) {
    for (const auto& post : posts_) {
      for (int i = 0; i < kPostedCalls; ++i) post(cq);
    }
  }

 protected:
  // Adds the method `name` ("/package.Service/Method"); `run` handles each
  // call of it, on the thread of the queue it arrived on. A protobuf
  // request of more than `max_request_bytes` is refused with
  // INVALID_ARGUMENT, as is one that does not parse, a byte buffer one
  // (a payload) with RESOURCE_EXHAUSTED, before `run`, and told to
  // `refused` (if set); `admit` (if set) sees each call's metadata before
  // its request is read (UnaryCall::Served::admit).
  template <typename Req, typename Resp>
  void AddUnary(std::string name, std::function<void(UnaryCall<Req, Resp>*)> run,
                int64_t max_request_bytes = kMaxControlRequestBytes,
                std::function<grpc::Status(const grpc::ServerContext&)> admit = nullptr,
                std::function<void(const grpc::Status&, size_t)> refused = nullptr) {
    using Call = UnaryCall<Req, Resp>;
    names_.push_back(std::move(name));
    const int index = static_cast<int>(names_.size()) - 1;  // this method's, in order added
    AddMethod(new grpc::internal::RpcServiceMethod(
        names_.back().c_str(), grpc::internal::RpcMethod::CLIENT_STREAMING, nullptr));
    MarkMethodRaw(index);  // every request arrives as bytes
    auto method = std::make_shared<typename Call::Served>();
    method->name = names_.back().substr(names_.back().rfind('/') + 1);
    method->max_request_bytes = max_request_bytes;
    method->run = std::move(run);
    method->admit = std::move(admit);
    method->refused = std::move(refused);
    method->request = [this, index](Call* call, grpc::ServerCompletionQueue* cq) {
      RequestAsyncClientStreaming(index, &call->ctx_, &call->reader_, cq, cq, &call->arrived_);
    };
    // Owns the method's entry, which its calls point at.
    posts_.push_back([method](grpc::ServerCompletionQueue* cq) { Call::Post(method.get(), cq); });
  }

 private:
  static constexpr int kPostedCalls = 4;

  std::deque<std::string> names_;  // RpcServiceMethod keeps the char pointers
  // By method: asks for one call of it on a completion queue.
  std::vector<std::function<void(grpc::ServerCompletionQueue*)>> posts_;
};

// A started grpc::Server of AsyncServices, with one thread per completion
// queue; the server spreads its connections over the queues.
class AsyncServer {
 public:
  // Builds and starts the server from `builder` (with the services
  // registered), serving `services` on `threads` queues. Null if gRPC
  // cannot start it.
  static std::unique_ptr<AsyncServer> Start(grpc::ServerBuilder& builder,
                                            const std::vector<AsyncService*>& services,
                                            int threads) {
    auto server = std::unique_ptr<AsyncServer>(new AsyncServer);
    for (int i = 0; i < threads; ++i) server->cqs_.push_back(builder.AddCompletionQueue());
    server->server_ = builder.BuildAndStart();
    if (server->server_ == nullptr) return nullptr;
    for (const auto& cq : server->cqs_) {
      for (AsyncService* service : services) service->Serve(cq.get());
      server->threads_.emplace_back([cq = cq.get()] {
        void* tag;
        bool ok;
        while (cq->Next(&tag, &ok)) ServerCall::Handle(tag, ok);
      });
    }
    return server;
  }

  ~AsyncServer() { Shutdown(absl::Now()); }

  // Stops accepting calls and returns once every call is over and gone:
  // gRPC cancels those still running at `deadline`, whose methods must
  // still answer them. Idempotent; not concurrently.
  void Shutdown(absl::Time deadline) {
    if (threads_.empty()) return;
    server_->Shutdown(absl::ToChronoTime(deadline));
    for (const auto& cq : cqs_) cq->Shutdown();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

 private:
  AsyncServer() = default;

  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::thread> threads_;
};

}  // namespace psync

#endif  // PSYNC_SERVER_RPC_ASYNC_SERVICE_H_
