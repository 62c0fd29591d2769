#include "server/rpc/grpc_server.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/layout_proto.h"
#include "common/rpc/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "proto/psync.grpc.pb.h"

namespace psync {
namespace {

class ParameterService final : public proto::ParameterServer::Service {
 public:
  ParameterService(ShardStore* store, absl::Duration max_pull_wait)
      : store_(store), max_pull_wait_(max_pull_wait) {}

  grpc::Status Register(grpc::ServerContext*, const proto::RegisterRequest* req,
                        proto::RegisterResponse* resp) override {
    absl::StatusOr<Layout> layout = LayoutFromProto(req->layout());
    if (!layout.ok()) {
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "Register: worker ", req->worker_rank(), ": ", layout.status().message())));
    }
    auto result = store_->Register(req->worker_rank(), req->num_workers(), *layout,
                                   req->layout_fingerprint());
    if (!result.ok()) return ToGrpcStatus(result.status());
    resp->set_server_rank(store_->options().server_rank);
    resp->set_layout_fingerprint(result->fingerprint);
    resp->set_version(result->version);
    for (int32_t id : result->chunk_ids) resp->add_chunk_ids(id);
    return grpc::Status::OK;
  }

  grpc::Status Push(grpc::ServerContext*, const proto::PushRequest* req,
                    proto::PushResponse*) override {
    return ToGrpcStatus(DoPush(*req));
  }

  grpc::Status Pull(grpc::ServerContext* ctx, const proto::PullRequest* req,
                    proto::PullResponse* resp) override {
    return ToGrpcStatus(DoPull(ctx, req->worker_rank(), req->layout_fingerprint(),
                               req->version(), req->chunk_ids(), resp));
  }

  grpc::Status PushPull(grpc::ServerContext* ctx, const proto::PushPullRequest* req,
                        proto::PullResponse* resp) override {
    const proto::PushRequest& push = req->push();
    absl::Status s = DoPush(push);
    if (!s.ok()) return ToGrpcStatus(s);
    std::vector<int32_t> ids;
    ids.reserve(push.chunks_size());
    for (const proto::Chunk& c : push.chunks()) ids.push_back(c.chunk_id());
    return ToGrpcStatus(DoPull(ctx, push.worker_rank(), push.layout_fingerprint(),
                               push.step() + 1, ids, resp));
  }

  grpc::Status GetStatus(grpc::ServerContext*, const proto::StatusRequest*,
                         proto::StatusResponse* resp) override {
    const ShardStoreOptions& o = store_->options();
    const StoreStatus s = store_->GetStatus();
    resp->set_server_rank(o.server_rank);
    resp->set_num_servers(o.num_servers);
    resp->set_num_workers(o.num_workers);
    resp->set_registered(s.registered);
    resp->set_layout_fingerprint(s.fingerprint);
    resp->set_version(s.version);
    resp->set_num_chunks(s.num_chunks);
    resp->set_bytes(s.bytes);
    return grpc::Status::OK;
  }

 private:
  absl::Status DoPush(const proto::PushRequest& req) {
    std::vector<ChunkPayload> payloads;
    payloads.reserve(req.chunks_size());
    for (const proto::Chunk& c : req.chunks()) {
      payloads.push_back({c.chunk_id(), c.dtype() == proto::DTYPE_FLOAT32, c.data()});
    }
    return store_->Push(req.worker_rank(), req.layout_fingerprint(), req.step(),
                        req.sample_count(), payloads);
  }

  template <typename Ids>
  absl::Status DoPull(grpc::ServerContext* ctx, int worker_rank, uint64_t fingerprint,
                      int64_t version, const Ids& ids, proto::PullResponse* resp) {
    const absl::Time deadline =
        std::min(absl::FromChrono(ctx->deadline()), absl::Now() + max_pull_wait_);
    std::vector<int32_t> id_list(ids.begin(), ids.end());
    return store_->Pull(worker_rank, fingerprint, version, id_list, deadline,
                        [resp](int32_t id, int64_t v, const float* w, int64_t n) {
                          proto::Chunk* c = resp->add_chunks();
                          c->set_chunk_id(id);
                          c->set_dtype(proto::DTYPE_FLOAT32);
                          c->set_version(v);
                          c->set_data(reinterpret_cast<const char*>(w), n * 4);
                        });
  }

  ShardStore* const store_;
  const absl::Duration max_pull_wait_;
};

class GrpcServerImpl final : public GrpcServer {
 public:
  GrpcServerImpl(ShardStore* store, absl::Duration max_pull_wait)
      : store_(store), service_(store, max_pull_wait) {}
  ~GrpcServerImpl() override { Shutdown(absl::Now()); }

  absl::Status Start(const std::string& address) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    const int limit = static_cast<int>(
        std::min<int64_t>(store_->options().max_message_bytes, INT32_MAX));
    builder.SetMaxReceiveMessageSize(limit);
    builder.SetMaxSendMessageSize(limit);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(absl::StrCat("GrpcServer: cannot listen on ", address));
    }
    return absl::OkStatus();
  }

  int port() const override { return port_; }

  void Shutdown(absl::Time deadline) override {
    absl::MutexLock lock(&mu_);
    if (stopped_ || server_ == nullptr) return;
    stopped_ = true;
    store_->Close();
    server_->Shutdown(absl::ToChronoTime(deadline));
  }

 private:
  ShardStore* const store_;
  ParameterService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(ShardStore* store,
                                                               const GrpcServerOptions& options) {
  auto server = std::make_unique<GrpcServerImpl>(store, options.max_pull_wait);
  absl::Status s = server->Start(options.address);
  if (!s.ok()) return s;
  return std::unique_ptr<GrpcServer>(std::move(server));
}

}  // namespace psync
