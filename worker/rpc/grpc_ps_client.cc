#include "worker/rpc/grpc_ps_client.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/layout_proto.h"
#include "common/rpc/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "proto/psync.grpc.pb.h"

namespace psync {
namespace {

constexpr int64_t kMessageHeadroomBytes = 1 << 20;

// One RPC to one server that returns chunks, retried on UNAVAILABLE until
// its deadline (every psync call is idempotent, so retrying is safe).
struct ChunkCall {
  using Start = std::function<void(grpc::ClientContext*, proto::PullResponse*,
                                   std::function<void(grpc::Status)>)>;
  int server = 0;
  const char* op = "";
  int64_t version = 0;  // expected in the response
  std::vector<int32_t> chunk_ids;
  float* weights = nullptr;
  absl::Time deadline;
  Start start;  // owns the request

  // Per attempt.
  std::unique_ptr<grpc::ClientContext> ctx;
  proto::PullResponse response;
  grpc::Status status;
  std::unique_ptr<absl::Notification> done;

  void Issue() {
    ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(deadline));
    done = std::make_unique<absl::Notification>();
    response.Clear();
    start(ctx.get(), &response, [this](grpc::Status s) {
      status = std::move(s);
      done->Notify();
    });
  }
};

class GrpcPsClient final : public PsClient {
 public:
  GrpcPsClient(const Layout& layout, GrpcPsClientOptions options)
      : layout_(layout), options_(std::move(options)) {
    int64_t largest = 0;
    for (int s = 0; s < layout_.num_servers(); ++s) {
      largest = std::max(largest, layout_.ServerBytes(s));
    }
    grpc::ChannelArguments args;
    const int limit = static_cast<int>(std::min<int64_t>(largest + kMessageHeadroomBytes, INT32_MAX));
    args.SetMaxReceiveMessageSize(limit);
    args.SetMaxSendMessageSize(limit);
    for (const std::string& address : options_.server_addresses) {
      stubs_.push_back(proto::ParameterServer::NewStub(
          grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
    }
    // Every tensor has at least one chunk, and a tensor's chunks are numbered
    // consecutively.
    first_chunk_.assign(layout_.tensors().size() + 1,
                        static_cast<int32_t>(layout_.chunks().size()));
    for (auto c = layout_.chunks().rbegin(); c != layout_.chunks().rend(); ++c) {
      first_chunk_[c->tensor] = c->id;
    }
  }

  ~GrpcPsClient() override { Wait().IgnoreError(); }

  int num_tensors() const override { return static_cast<int>(layout_.tensors().size()); }

  absl::StatusOr<int64_t> Register() override {
    proto::RegisterRequest req;
    req.set_worker_rank(options_.worker_rank);
    req.set_num_workers(options_.num_workers);
    LayoutToProto(layout_, req.mutable_layout());
    req.set_layout_fingerprint(layout_.fingerprint());
    int64_t version = INT64_MAX;
    // Sequential: registration happens once, and each call may wait for its
    // server to come up.
    for (size_t server = 0; server < stubs_.size(); ++server) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.connect_timeout));
      ctx.set_wait_for_ready(true);
      proto::RegisterResponse resp;
      grpc::Status st = stubs_[server]->Register(&ctx, req, &resp);
      if (!st.ok()) return ServerError("Register", static_cast<int>(server), st);
      if (resp.server_rank() != static_cast<int>(server)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "Register: ", options_.server_addresses[server], " is server ", resp.server_rank(),
            ", expected server ", server, " (check the order of --servers)"));
      }
      version = std::min(version, resp.version());
    }
    return version;
  }

  absl::Status Pull(int64_t version, float* weights) override {
    for (int server = 0; server < layout_.num_servers(); ++server) {
      const auto& ids = layout_.ChunksOnServer(server);
      if (ids.empty()) continue;
      auto req = std::make_shared<proto::PullRequest>();
      req->set_worker_rank(options_.worker_rank);
      req->set_layout_fingerprint(layout_.fingerprint());
      req->set_version(version);
      for (int32_t id : ids) req->add_chunk_ids(id);
      proto::ParameterServer::Stub* stub = stubs_[server].get();
      Launch(server, "Pull", version, ids, weights,
             [stub, req](grpc::ClientContext* ctx, proto::PullResponse* resp,
                         std::function<void(grpc::Status)> done) {
               stub->async()->Pull(ctx, req.get(), resp, std::move(done));
             });
    }
    return Wait();
  }

  absl::Status StartPushPull(int64_t step, int64_t sample_count, int first_tensor,
                             int end_tensor, const float* grads, float* weights) override {
    if (first_tensor < 0 || end_tensor > num_tensors() || first_tensor >= end_tensor) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PushPull: tensor range [", first_tensor, ", ", end_tensor, ") is not within [0, ",
          num_tensors(), ")"));
    }
    const int32_t lo = first_chunk_[first_tensor], hi = first_chunk_[end_tensor];
    for (int server = 0; server < layout_.num_servers(); ++server) {
      const auto& all = layout_.ChunksOnServer(server);
      std::vector<int32_t> ids(std::lower_bound(all.begin(), all.end(), lo),
                               std::lower_bound(all.begin(), all.end(), hi));
      if (ids.empty()) continue;
      auto req = std::make_shared<proto::PushPullRequest>();
      proto::PushRequest* push = req->mutable_push();
      push->set_worker_rank(options_.worker_rank);
      push->set_layout_fingerprint(layout_.fingerprint());
      push->set_step(step);
      push->set_sample_count(sample_count);
      for (int32_t id : ids) {
        const ChunkInfo& info = layout_.chunks()[id];
        proto::Chunk* c = push->add_chunks();
        c->set_chunk_id(id);
        c->set_dtype(proto::DTYPE_FLOAT32);
        c->set_data(reinterpret_cast<const char*>(grads + info.flat_offset), info.bytes());
      }
      proto::ParameterServer::Stub* stub = stubs_[server].get();
      Launch(server, "PushPull", step + 1, std::move(ids), weights,
             [stub, req](grpc::ClientContext* ctx, proto::PullResponse* resp,
                         std::function<void(grpc::Status)> done) {
               stub->async()->PushPull(ctx, req.get(), resp, std::move(done));
             });
    }
    return absl::OkStatus();
  }

  absl::Status Wait() override {
    absl::Status first;
    for (auto& call : calls_) {
      absl::Status s = Finish(*call);
      if (first.ok()) first = s;
    }
    calls_.clear();
    return first;
  }

 private:
  void Launch(int server, const char* op, int64_t version, std::vector<int32_t> ids,
              float* weights, ChunkCall::Start start) {
    auto call = std::make_unique<ChunkCall>();
    call->server = server;
    call->op = op;
    call->version = version;
    call->chunk_ids = std::move(ids);
    call->weights = weights;
    call->deadline = absl::Now() + options_.call_timeout;
    call->start = std::move(start);
    call->Issue();
    calls_.push_back(std::move(call));
  }

  // Waits for `call`, retrying UNAVAILABLE with backoff, then checks and
  // copies its chunks.
  absl::Status Finish(ChunkCall& call) {
    absl::Duration backoff = absl::Milliseconds(50);
    while (true) {
      call.done->WaitForNotification();
      if (call.status.ok()) return CopyWeights(call);
      if (call.status.error_code() != grpc::StatusCode::UNAVAILABLE ||
          absl::Now() + backoff >= call.deadline) {
        return ServerError(call.op, call.server, call.status);
      }
      absl::SleepFor(backoff);
      backoff = std::min(2 * backoff, absl::Seconds(1));
      call.Issue();
    }
  }

  absl::Status ServerError(const char* op, int server, const grpc::Status& st) const {
    return absl::Status(FromGrpcStatus(st).code(),
                        absl::StrCat(op, " to server ", server, " (",
                                     options_.server_addresses[server], "): ", st.error_message()));
  }

  // Checks that the server returned exactly the chunks asked for, at the
  // expected version, and copies them into the flat vector.
  absl::Status CopyWeights(const ChunkCall& call) {
    const auto& chunks = call.response.chunks();
    if (chunks.size() != static_cast<int>(call.chunk_ids.size())) {
      return absl::DataLossError(absl::StrCat(call.op, ": server ", call.server, " returned ",
                                              chunks.size(), " chunks, expected ",
                                              call.chunk_ids.size()));
    }
    for (int i = 0; i < chunks.size(); ++i) {
      const proto::Chunk& c = chunks[i];
      if (c.chunk_id() != call.chunk_ids[i]) {
        return absl::DataLossError(absl::StrCat(call.op, ": server ", call.server,
                                                " returned chunk ", c.chunk_id(), ", expected ",
                                                call.chunk_ids[i]));
      }
      const ChunkInfo& info = layout_.chunks()[c.chunk_id()];
      if (c.version() != call.version) {
        return absl::FailedPreconditionError(absl::StrCat(
            call.op, ": chunk ", c.chunk_id(), " from server ", call.server, " is at version ",
            c.version(), ", expected ", call.version));
      }
      if (static_cast<int64_t>(c.data().size()) != info.bytes()) {
        return absl::DataLossError(absl::StrCat(call.op, ": chunk ", c.chunk_id(), " has ",
                                                c.data().size(), " bytes, layout says ",
                                                info.bytes()));
      }
      std::memcpy(call.weights + info.flat_offset, c.data().data(), info.bytes());
    }
    return absl::OkStatus();
  }

  const Layout layout_;
  const GrpcPsClientOptions options_;
  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> stubs_;
  // first_chunk_[t]: id of tensor t's first chunk; first_chunk_[T] = #chunks.
  std::vector<int32_t> first_chunk_;
  std::vector<std::unique_ptr<ChunkCall>> calls_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PsClient>> CreateGrpcPsClient(const Layout& layout,
                                                             GrpcPsClientOptions options) {
  if (static_cast<int>(options.server_addresses.size()) != layout.num_servers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GrpcPsClient: ", options.server_addresses.size(), " server addresses, the layout has ",
        layout.num_servers(), " servers"));
  }
  if (options.num_workers < 1 || options.worker_rank < 0 ||
      options.worker_rank >= options.num_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GrpcPsClient: worker rank ", options.worker_rank, " is out of range 0..",
        options.num_workers - 1));
  }
  return std::unique_ptr<PsClient>(new GrpcPsClient(layout, std::move(options)));
}

}  // namespace psync
