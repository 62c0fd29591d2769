#include "worker/local_ps_client.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace psync {
namespace {

class LocalPsClient final : public PsClient {
 public:
  LocalPsClient(const Layout& layout, std::vector<ShardStore*> stores, int worker_rank,
                int num_workers, absl::Duration timeout)
      : layout_(layout), stores_(std::move(stores)), rank_(worker_rank),
        num_workers_(num_workers), timeout_(timeout) {}

  absl::StatusOr<int64_t> Register() override {
    int64_t version = INT64_MAX;
    for (ShardStore* store : stores_) {
      PSYNC_ASSIGN_OR_RETURN(RegisterResult r,
                             store->Register(rank_, num_workers_, layout_, layout_.fingerprint()));
      version = std::min(version, r.version);
    }
    return version;
  }

  absl::Status Pull(int64_t version, float* weights) override {
    for (int s = 0; s < static_cast<int>(stores_.size()); ++s) {
      PSYNC_RETURN_IF_ERROR(PullChunks(s, version, layout_.ChunksOnServer(s), weights));
    }
    return absl::OkStatus();
  }

  int num_tensors() const override { return static_cast<int>(layout_.tensors().size()); }

  // Pushes at once; the pull waits for Wait().
  absl::Status StartPushPull(int64_t step, int64_t sample_count, int first_tensor,
                             int end_tensor, const float* grads, float* weights) override {
    for (int s = 0; s < static_cast<int>(stores_.size()); ++s) {
      std::vector<ChunkPayload> payloads;
      std::vector<int32_t> ids;
      for (int32_t id : layout_.ChunksOnServer(s)) {
        const ChunkInfo& c = layout_.chunks()[id];
        if (c.tensor < first_tensor || c.tensor >= end_tensor) continue;
        ids.push_back(id);
        payloads.push_back({id, true,
                            {absl::string_view(reinterpret_cast<const char*>(grads + c.flat_offset),
                                               c.bytes())}});
      }
      if (ids.empty()) continue;
      PSYNC_RETURN_IF_ERROR(
          stores_[s]->Push(rank_, layout_.fingerprint(), step, sample_count, payloads));
      pending_.push_back({s, step + 1, std::move(ids), weights});
    }
    return absl::OkStatus();
  }

  absl::Status Wait() override {
    absl::Status first;
    for (const PendingPull& p : pending_) {
      absl::Status s = PullChunks(p.server, p.version, p.ids, p.weights);
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
                          float* weights) {
    absl::Status bad_version;
    PSYNC_RETURN_IF_ERROR(stores_[s]->Pull(
        rank_, layout_.fingerprint(), version, ids, absl::Now() + timeout_,
        [&](int32_t id, int64_t v, const WeightsRef& w) {
          if (v != version) {
            bad_version = absl::FailedPreconditionError(
                absl::StrCat("Pull: chunk ", id, " is at version ", v, ", expected ", version));
          }
          std::memcpy(weights + layout_.chunks()[id].flat_offset, w->data(),
                      w->size() * sizeof(float));
        }));
    return bad_version;
  }

  const Layout layout_;
  const std::vector<ShardStore*> stores_;
  const int rank_;
  const int num_workers_;
  const absl::Duration timeout_;
  std::vector<PendingPull> pending_;
};

}  // namespace

std::unique_ptr<PsClient> CreateLocalPsClient(const Layout& layout, std::vector<ShardStore*> stores,
                                              int worker_rank, int num_workers,
                                              absl::Duration timeout) {
  return std::make_unique<LocalPsClient>(layout, std::move(stores), worker_rank, num_workers,
                                         timeout);
}

}  // namespace psync
