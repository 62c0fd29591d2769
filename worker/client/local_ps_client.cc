#include "worker/client/local_ps_client.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace psync {
namespace {

class LocalPsClient final : public PsClient {
 public:
  LocalPsClient(const Layout& layout, std::vector<ShardStore*> stores, int worker_rank,
                int num_workers, absl::Duration timeout, WireDType wire_dtype)
      : layout_(layout), stores_(std::move(stores)), rank_(worker_rank),
        num_workers_(num_workers), timeout_(timeout), wire_dtype_(wire_dtype) {}

  absl::StatusOr<int64_t> Register() override {
    int64_t version = INT64_MAX;
    sessions_.clear();
    RegisterArgs args;
    args.worker_rank = rank_;
    args.num_workers = num_workers_;
    args.layout = &layout_;
    args.claimed_fingerprint = layout_.fingerprint();
    args.incarnation = uint64_t{1000} + rank_;
    for (ShardStore* store : stores_) {
      PSYNC_ASSIGN_OR_RETURN(RegisterResult r, store->Register(args));
      if (r.has_chunks) version = std::min(version, r.version);
      sessions_.push_back(r.session);
      members_ = r.members;
    }
    return version == INT64_MAX ? 0 : version;
  }

  absl::Status Finish(int64_t version) override {
    const absl::Time deadline = absl::Now() + timeout_;
    while (true) {
      bool all_done = true;
      for (size_t s = 0; s < stores_.size(); ++s) {
        PSYNC_ASSIGN_OR_RETURN(HeartbeatResult beat,
                               stores_[s]->Heartbeat(rank_, sessions_[s], version));
        all_done = all_done && beat.all_done;
      }
      if (all_done) return absl::OkStatus();
      if (absl::Now() > deadline) return absl::DeadlineExceededError("Finish: peers did not finish");
      absl::SleepFor(absl::Milliseconds(1));
    }
  }

  void Cancel() override {}

  std::optional<WorkerSet> Members() const override { return members_; }

  absl::Status Pull(int64_t version, PullPrecision precision, float* weights) override {
    const WireDType dtype =
        precision == PullPrecision::kMaster ? WireDType::kFloat32 : wire_dtype_;
    for (int s = 0; s < static_cast<int>(stores_.size()); ++s) {
      PSYNC_RETURN_IF_ERROR(PullChunks(s, version, layout_.ChunksOnServer(s), dtype, weights));
    }
    return absl::OkStatus();
  }

  int num_tensors() const override { return static_cast<int>(layout_.tensors().size()); }

  // Pushes at once; the pull waits for Wait().
  absl::Status StartPushPull(int64_t step, int64_t sample_count, int first_tensor,
                             int end_tensor, const float* grads, float* weights) override {
    const int width = WireBytes(wire_dtype_);
    for (int s = 0; s < static_cast<int>(stores_.size()); ++s) {
      std::vector<ChunkPayload> payloads;
      std::vector<int32_t> ids;
      std::vector<std::vector<char>> narrowed;  // until the synchronous Push returns
      for (int32_t id : layout_.ChunksOnServer(s)) {
        const ChunkInfo& c = layout_.chunks()[id];
        if (c.tensor < first_tensor || c.tensor >= end_tensor) continue;
        ids.push_back(id);
        absl::string_view bytes(reinterpret_cast<const char*>(grads + c.flat_offset), c.bytes());
        if (wire_dtype_ != WireDType::kFloat32) {
          std::vector<char>& out = narrowed.emplace_back(c.num_elements * width);
          PSYNC_RETURN_IF_ERROR(EncodeWireChecked(wire_dtype_, grads + c.flat_offset,
                                                  c.num_elements, out.data(),
                                                  NarrowedValues::kGradient,
                                                  layout_.tensors()[c.tensor].name,
                                                  c.tensor_offset));
          bytes = absl::string_view(out.data(), out.size());
        }
        payloads.push_back({id, wire_dtype_, {bytes}});
      }
      if (ids.empty()) continue;
      PSYNC_RETURN_IF_ERROR(
          stores_[s]->Push(sessions_[s], rank_, layout_.fingerprint(), step, sample_count,
                           payloads));
      pending_.push_back({s, step + 1, std::move(ids), weights});
    }
    return absl::OkStatus();
  }

  absl::Status Wait() override {
    absl::Status first;
    for (const PendingPull& p : pending_) {
      absl::Status s = PullChunks(p.server, p.version, p.ids, wire_dtype_, p.weights);
      if (first.ok()) first = s;
    }
    pending_.clear();
    return first;
  }

 private:
  struct PendingPull {
    int server;
    int64_t version;
    std::vector<int32_t> ids;
    float* weights;
  };

  absl::Status PullChunks(int s, int64_t version, const std::vector<int32_t>& ids,
                          WireDType dtype, float* weights) {
    absl::Status refused;  // a chunk at another version or of the wrong size
    PSYNC_RETURN_IF_ERROR(stores_[s]->Pull(
        sessions_[s], rank_, layout_.fingerprint(), version, ids, dtype,
        absl::Now() + timeout_, [&](int32_t id, int64_t v, const WireWeights& w) {
          const ChunkInfo& c = layout_.chunks()[id];
          if (v != version) {
            refused = absl::FailedPreconditionError(
                absl::StrCat("Pull: chunk ", id, " is at version ", v, ", expected ", version));
          } else if (static_cast<int64_t>(w.bytes.size()) !=
                     c.num_elements * WireBytes(dtype)) {
            refused = absl::DataLossError(
                absl::StrCat("Pull: chunk ", id, " has ", w.bytes.size(), " bytes, layout says ",
                             ExpectedWireBytes(c.num_elements, dtype)));
          } else {
            DecodeWire(dtype, w.bytes.data(), c.num_elements, weights + c.flat_offset);
          }
        }));
    return refused;
  }

  const Layout layout_;
  const std::vector<ShardStore*> stores_;
  const int rank_;
  const int num_workers_;
  const absl::Duration timeout_;
  const WireDType wire_dtype_;
  std::vector<PendingPull> pending_;
  std::vector<uint64_t> sessions_;  // by server, from Register
  std::optional<WorkerSet> members_;
};

}  // namespace

std::unique_ptr<PsClient> CreateLocalPsClient(const Layout& layout, std::vector<ShardStore*> stores,
                                              int worker_rank, int num_workers,
                                              absl::Duration timeout, WireDType wire_dtype) {
  return std::make_unique<LocalPsClient>(layout, std::move(stores), worker_rank, num_workers,
                                         timeout, wire_dtype);
}

}  // namespace psync
