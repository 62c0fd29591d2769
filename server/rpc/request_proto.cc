#include "server/rpc/request_proto.h"

#include "absl/strings/str_cat.h"
#include "common/config/init_source.h"
#include "common/config/training_shape.h"
#include "common/status_macros.h"
#include "common/wire/layout_proto.h"
#include "common/wire/wire_dtype_proto.h"

namespace psync {

absl::Status RegisterArgsFromProto(const proto::RegisterRequest& req, RegisterArgs* args) {
  args->worker_rank = req.worker_rank();
  args->num_workers = req.num_workers();
  args->claimed_fingerprint = req.layout_fingerprint();
  args->incarnation = req.worker_incarnation();
  args->shape = TrainingShapeFromProto(req.shape());
  args->update_rule = req.update_rule();
  args->blas_kernels = req.blas_kernels();
  args->worker_weight = req.worker_weight() == 0 ? 1 : req.worker_weight();
  if (req.wire_dtype() != proto::DTYPE_UNSPECIFIED) {
    PSYNC_ASSIGN_OR_RETURN(args->wire_dtype, WireDTypeFromProto(req.wire_dtype()));
  }
  if (req.has_frozen()) {
    args->frozen.emplace();
    for (const proto::TensorDigest& t : req.frozen().tensors()) {
      args->frozen->push_back({t.name(), t.sha256()});
    }
  }
  if (req.init_from() == proto::INIT_SOURCE_SEED) args->init_from = InitSource::kSeed;
  if (req.init_from() == proto::INIT_SOURCE_WORKER) args->init_from = InitSource::kWorker;
  return absl::OkStatus();
}

absl::Status PayloadsOf(const char* op, const WireMessage& push, bool pull,
                        std::vector<ChunkPayload>* payloads, int64_t* bytes) {
  const uint64_t shared_slot = push.scalars[kWireSharedSlot];
  const bool in_model = push.scalars[kWireInSharedModel] != 0;
  const bool one_dtype = pull || shared_slot != 0 || in_model;
  payloads->resize(push.chunks.size());
  for (size_t i = 0; i < payloads->size(); ++i) {
    const WireChunk& c = push.chunks[i];
    ChunkPayload& first = (*payloads)[0];
    *bytes += c.data_size;
    absl::StatusOr<WireDType> dtype = WireDTypeFromProto(c.dtype);
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": chunk ", c.id, " has ", dtype.status().message()));
    }
    if (one_dtype && i > 0 && *dtype != first.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": chunk ", c.id, " is ", WireDTypeName(*dtype), " but chunk ",
                       first.chunk_id, " is ", WireDTypeName(first.dtype),
                       "; expected one dtype for all chunks of a push-pull, which answers "
                       "in it, "
                       "and of a push through shared memory"));
    }
    if ((shared_slot != 0 || in_model) && c.data_size > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": chunk ", c.id, " carries ", c.data_size, " bytes of data but the push names ",
          in_model ? "the shared model" : absl::StrCat("shared slot ", shared_slot),
          "; expected its values in shared memory only"));
    }
    (*payloads)[i].chunk_id = c.id;
    (*payloads)[i].dtype = *dtype;
    (*payloads)[i].pieces = c.data;
  }
  return absl::OkStatus();
}

}  // namespace psync
