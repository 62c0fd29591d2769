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
      PSYNC_RETURN_IF_ERROR(PullServer(s, version, weights));
    }
    return absl::OkStatus();
  }

  absl::Status PushPull(int64_t step, int64_t sample_count, const float* grads,
                        float* weights) override {
    for (int s = 0; s < static_cast<int>(stores_.size()); ++s) {
      std::vector<ChunkPayload> payloads;
      for (int32_t id : layout_.ChunksOnServer(s)) {
        const ChunkInfo& c = layout_.chunks()[id];
        payloads.push_back({id, true,
                            absl::string_view(reinterpret_cast<const char*>(grads + c.flat_offset),
                                              c.bytes())});
      }
      PSYNC_RETURN_IF_ERROR(
          stores_[s]->Push(rank_, layout_.fingerprint(), step, sample_count, payloads));
    }
    return Pull(step + 1, weights);
  }

 private:
  absl::Status PullServer(int s, int64_t version, float* weights) {
    const auto& ids = layout_.ChunksOnServer(s);
    absl::Status bad_version;
    PSYNC_RETURN_IF_ERROR(stores_[s]->Pull(
        rank_, layout_.fingerprint(), version, ids, absl::Now() + timeout_,
        [&](int32_t id, int64_t v, const float* w, int64_t n) {
          if (v != version) {
            bad_version = absl::FailedPreconditionError(
                absl::StrCat("Pull: chunk ", id, " is at version ", v, ", expected ", version));
          }
          std::memcpy(weights + layout_.chunks()[id].flat_offset, w, n * sizeof(float));
        }));
    return bad_version;
  }

  const Layout layout_;
  const std::vector<ShardStore*> stores_;
  const int rank_;
  const int num_workers_;
  const absl::Duration timeout_;
};

}  // namespace

std::unique_ptr<PsClient> CreateLocalPsClient(const Layout& layout, std::vector<ShardStore*> stores,
                                              int worker_rank, int num_workers,
                                              absl::Duration timeout) {
  return std::make_unique<LocalPsClient>(layout, std::move(stores), worker_rank, num_workers,
                                         timeout);
}

}  // namespace psync
