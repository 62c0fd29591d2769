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
    LayoutToProto(layout_, &layout_spec_);
  }

  absl::StatusOr<int64_t> Register() override {
    std::vector<proto::RegisterResponse> responses(stubs_.size());
    absl::Status s = CallAll<proto::RegisterResponse>(
        "Register", absl::Now() + options_.connect_timeout, /*wait_for_ready=*/true, responses,
        [this](int server, grpc::ClientContext* ctx, proto::RegisterResponse* resp,
               std::function<void(grpc::Status)> done) {
          auto req = std::make_shared<proto::RegisterRequest>();
          req->set_worker_rank(options_.worker_rank);
          req->set_num_workers(options_.num_workers);
          *req->mutable_layout() = layout_spec_;
          req->set_layout_fingerprint(layout_.fingerprint());
          stubs_[server]->async()->Register(ctx, req.get(), resp,
                                            [req, done](grpc::Status st) { done(st); });
        });
    if (!s.ok()) return s;
    int64_t version = INT64_MAX;
    for (size_t server = 0; server < responses.size(); ++server) {
      const proto::RegisterResponse& r = responses[server];
      if (r.server_rank() != static_cast<int>(server)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "Register: ", options_.server_addresses[server], " is server ", r.server_rank(),
            ", expected server ", server, " (check the order of --servers)"));
      }
      version = std::min(version, r.version());
    }
    return version;
  }

  absl::Status Pull(int64_t version, float* weights) override {
    std::vector<proto::PullResponse> responses(stubs_.size());
    absl::Status s = CallAll<proto::PullResponse>(
        "Pull", absl::Now() + options_.call_timeout, /*wait_for_ready=*/false, responses,
        [&](int server, grpc::ClientContext* ctx, proto::PullResponse* resp,
            std::function<void(grpc::Status)> done) {
          auto req = std::make_shared<proto::PullRequest>();
          req->set_worker_rank(options_.worker_rank);
          req->set_layout_fingerprint(layout_.fingerprint());
          req->set_version(version);
          for (int32_t id : layout_.ChunksOnServer(server)) req->add_chunk_ids(id);
          stubs_[server]->async()->Pull(ctx, req.get(), resp,
                                        [req, done](grpc::Status st) { done(st); });
        });
    if (!s.ok()) return s;
    return CopyWeights("Pull", version, responses, weights);
  }

  absl::Status PushPull(int64_t step, int64_t sample_count, const float* grads,
                        float* weights) override {
    std::vector<proto::PullResponse> responses(stubs_.size());
    absl::Status s = CallAll<proto::PullResponse>(
        "PushPull", absl::Now() + options_.call_timeout, /*wait_for_ready=*/false, responses,
        [&](int server, grpc::ClientContext* ctx, proto::PullResponse* resp,
            std::function<void(grpc::Status)> done) {
          auto req = std::make_shared<proto::PushPullRequest>();
          proto::PushRequest* push = req->mutable_push();
          push->set_worker_rank(options_.worker_rank);
          push->set_layout_fingerprint(layout_.fingerprint());
          push->set_step(step);
          push->set_sample_count(sample_count);
          for (int32_t id : layout_.ChunksOnServer(server)) {
            const ChunkInfo& info = layout_.chunks()[id];
            proto::Chunk* c = push->add_chunks();
            c->set_chunk_id(id);
            c->set_dtype(proto::DTYPE_FLOAT32);
            c->set_data(reinterpret_cast<const char*>(grads + info.flat_offset), info.bytes());
          }
          stubs_[server]->async()->PushPull(ctx, req.get(), resp,
                                            [req, done](grpc::Status st) { done(st); });
        });
    if (!s.ok()) return s;
    return CopyWeights("PushPull", step + 1, responses, weights);
  }

 private:

  // Runs one call on every server at once and waits for all of them.
  // Unavailable servers are retried with backoff until `deadline`: every
  // call is idempotent, so a retry is always safe.
  template <typename Resp>
  absl::Status CallAll(absl::string_view op, absl::Time deadline, bool wait_for_ready,
                       std::vector<Resp>& responses,
                       const std::function<void(int, grpc::ClientContext*, Resp*,
                                                std::function<void(grpc::Status)>)>& start) {
    std::vector<int> pending(stubs_.size());
    for (size_t i = 0; i < pending.size(); ++i) pending[i] = static_cast<int>(i);
    absl::Duration backoff = absl::Milliseconds(50);
    while (true) {
      struct Call {
        grpc::ClientContext ctx;
        grpc::Status status;
        absl::Notification done;
      };
      std::vector<std::unique_ptr<Call>> calls;
      for (int server : pending) {
        calls.push_back(std::make_unique<Call>());
        Call* call = calls.back().get();
        call->ctx.set_deadline(absl::ToChronoTime(deadline));
        call->ctx.set_wait_for_ready(wait_for_ready);
        responses[server].Clear();
        start(server, &call->ctx, &responses[server], [call](grpc::Status st) {
          call->status = std::move(st);
          call->done.Notify();
        });
      }
      std::vector<int> retry;
      absl::Status first_error;
      for (size_t i = 0; i < calls.size(); ++i) {
        calls[i]->done.WaitForNotification();
        const grpc::Status& st = calls[i]->status;
        if (st.ok()) continue;
        const int server = pending[i];
        if (st.error_code() == grpc::StatusCode::UNAVAILABLE && absl::Now() + backoff < deadline) {
          retry.push_back(server);
        } else if (first_error.ok()) {
          first_error = absl::Status(FromGrpcStatus(st).code(),
                                     absl::StrCat(op, " to server ", server, " (",
                                                  options_.server_addresses[server],
                                                  "): ", st.error_message()));
        }
      }
      if (!first_error.ok()) return first_error;
      if (retry.empty()) return absl::OkStatus();
      absl::SleepFor(backoff);
      backoff = std::min(2 * backoff, absl::Seconds(1));
      pending = std::move(retry);
    }
  }

  // Checks that each server returned exactly its chunks at `version` and
  // copies them into the flat vector.
  absl::Status CopyWeights(absl::string_view op, int64_t version,
                           const std::vector<proto::PullResponse>& responses, float* weights) {
    for (size_t server = 0; server < responses.size(); ++server) {
      const auto& expected = layout_.ChunksOnServer(static_cast<int>(server));
      const auto& chunks = responses[server].chunks();
      if (chunks.size() != static_cast<int>(expected.size())) {
        return absl::DataLossError(absl::StrCat(op, ": server ", server, " returned ",
                                                chunks.size(), " chunks, expected ",
                                                expected.size()));
      }
      for (int i = 0; i < chunks.size(); ++i) {
        const proto::Chunk& c = chunks[i];
        if (c.chunk_id() != expected[i]) {
          return absl::DataLossError(absl::StrCat(op, ": server ", server, " returned chunk ",
                                                  c.chunk_id(), ", expected ", expected[i]));
        }
        const ChunkInfo& info = layout_.chunks()[c.chunk_id()];
        if (c.version() != version) {
          return absl::FailedPreconditionError(absl::StrCat(
              op, ": chunk ", c.chunk_id(), " from server ", server, " is at version ",
              c.version(), ", expected ", version));
        }
        if (static_cast<int64_t>(c.data().size()) != info.bytes()) {
          return absl::DataLossError(absl::StrCat(op, ": chunk ", c.chunk_id(), " has ",
                                                  c.data().size(), " bytes, layout says ",
                                                  info.bytes()));
        }
        std::memcpy(weights + info.flat_offset, c.data().data(), info.bytes());
      }
    }
    return absl::OkStatus();
  }

  const Layout layout_;
  const GrpcPsClientOptions options_;
  proto::LayoutSpec layout_spec_;
  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> stubs_;
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
