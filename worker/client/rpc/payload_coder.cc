#include "worker/client/rpc/payload_coder.h"

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/wire/wire_dtype_proto.h"
#include "proto/psync.pb.h"

namespace psync {

int64_t PayloadCoder::WireSize(int32_t id) const {
  return layout_.chunks()[id].num_elements * WireBytes(wire_dtype_);
}

grpc::ByteBuffer PayloadCoder::PullRequest(uint64_t session, int64_t version,
                                           const std::vector<int32_t>& ids, WireDType dtype,
                                           uint32_t slot, bool in_model) const {
  proto::PullRequest req;
  req.set_shared_slot(slot);
  req.set_in_shared_model(in_model);
  req.set_worker_rank(worker_rank_);
  req.set_layout_fingerprint(layout_.fingerprint());
  req.set_version(version);
  req.set_session(session);
  for (int32_t id : ids) req.add_chunk_ids(id);
  // Unset (float32) unless narrowed: the same bytes as before the field.
  if (dtype != WireDType::kFloat32) req.set_dtype(WireDTypeToProto(dtype));
  grpc::Slice slice(req.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

absl::StatusOr<grpc::ByteBuffer> PayloadCoder::PushRequest(const ChunkCall& call,
                                                           uint64_t session, const float* grads,
                                                           absl::Span<char> slot) const {
  WireMessageBuilder push;
  push.SetScalar(kWireWorkerRank, worker_rank_);
  push.SetScalar(kWireFingerprint, static_cast<int64_t>(layout_.fingerprint()));
  push.SetScalar(kWireStep, call.step);
  push.SetScalar(kWireSampleCount, call.sample_count);
  push.SetScalar(kWireSession, static_cast<int64_t>(session));
  push.SetScalar(kWireSharedSlot, call.slot);
  push.SetScalar(kWireInSharedModel, call.in_model);
  const proto::DType dtype = WireDTypeToProto(wire_dtype_);
  const absl::Span<const int32_t> ids = call.chunk_ids;
  if (call.in_model) {
    for (int32_t id : ids) push.AddChunk(id, dtype, 0, nullptr, 0);
    return push.Build();
  }
  if (wire_dtype_ == WireDType::kFloat32 && call.slot == 0) {
    for (int32_t id : ids) {
      const ChunkInfo& info = layout_.chunks()[id];
      push.AddChunk(id, dtype, 0, grads + info.flat_offset, info.bytes());
    }
    return push.Build();
  }
  std::shared_ptr<std::vector<char>> narrowed;
  char* out;
  if (call.slot != 0) {
    out = slot.data();
  } else {
    int64_t bytes = 0;
    for (int32_t id : ids) bytes += WireSize(id);
    narrowed = std::make_shared<std::vector<char>>(static_cast<size_t>(bytes));
    out = narrowed->data();
  }
  PSYNC_RETURN_IF_ERROR(AddNarrowed(call, grads, out, narrowed, push));
  return push.Build();
}

absl::Status PayloadCoder::AddNarrowed(const ChunkCall& call, const float* grads, char* out,
                                       const std::shared_ptr<std::vector<char>>& narrowed,
                                       WireMessageBuilder& push) const {
  const proto::DType dtype = WireDTypeToProto(wire_dtype_);
  for (int32_t id : call.chunk_ids) {
    const ChunkInfo& info = layout_.chunks()[id];
    const float* in = grads + info.flat_offset;
    if (wire_dtype_ == WireDType::kFloat32) {
      std::memcpy(out, in, info.bytes());
    } else {
      PSYNC_RETURN_IF_ERROR(EncodeWireChecked(wire_dtype_, in, info.num_elements, out,
                                              NarrowedValues::kGradient,
                                              layout_.tensors()[info.tensor].name,
                                              info.tensor_offset));
    }
    if (call.slot != 0) {
      push.AddChunk(id, dtype, 0, nullptr, 0);
    } else {
      push.AddChunk(id, dtype, 0, out, WireSize(id), narrowed);
    }
    out += WireSize(id);
  }
  return absl::OkStatus();
}

absl::Status PayloadCoder::DecodeWeights(const ChunkCall& call,
                                         absl::Span<const char> slot) const {
  WireMessage response;
  absl::Status s = DecodeWireMessage(call.response, call.chunk_ids.size(), &response);
  if (!s.ok()) {
    return absl::DataLossError(absl::StrCat(call.op, ": server ", call.server, ": ",
                                            s.message()));
  }
  PSYNC_RETURN_IF_ERROR(CheckAnswer(call, response));
  // Weights in the call's shared slot, one chunk after the other.
  const bool in_slot = response.scalars[kWireSharedSlot] != 0;
  const bool in_model = response.scalars[kWireInSharedModel] != 0;
  const char* shared = in_slot ? slot.data() : nullptr;
  const char* shared_end = shared != nullptr ? shared + slot.size() : nullptr;
  for (size_t i = 0; i < response.chunks.size(); ++i) {
    PSYNC_RETURN_IF_ERROR(
        DecodeChunk(call, i, response.chunks[i], in_model, shared, shared_end));
  }
  return absl::OkStatus();
}

std::vector<AnswerPlace> PayloadCoder::AnswerPlaces(const ChunkCall& call) const {
  std::vector<AnswerPlace> places;
  // Answers come in the wire dtype: a narrow one is widened as it is decoded.
  if (call.weights == nullptr || call.in_model || call.slot != 0 ||
      wire_dtype_ != WireDType::kFloat32) {
    return places;
  }
  for (int32_t id : call.chunk_ids) {
    const ChunkInfo& info = layout_.chunks()[id];
    places.push_back({id, call.version, reinterpret_cast<char*>(call.weights + info.flat_offset),
                      info.bytes()});
  }
  return places;
}

absl::Status PayloadCoder::CheckAnswer(const ChunkCall& call,
                                       const WireMessage& response) const {
  const uint64_t in_slot = response.scalars[kWireSharedSlot];
  if (in_slot != 0 && in_slot != call.slot) {
    return absl::DataLossError(absl::StrCat(call.op, ": server ", call.server,
                                            " answered in shared slot ", in_slot,
                                            ", expected ", call.slot));
  }
  const bool in_model = response.scalars[kWireInSharedModel] != 0;
  if (in_model != call.in_model) {
    return absl::DataLossError(absl::StrCat(
        call.op, ": server ", call.server, " answered ", in_model ? "in" : "outside",
        " the shared model, expected ", call.in_model ? "in" : "outside", " it"));
  }
  if (response.chunks.size() != call.chunk_ids.size()) {
    return absl::DataLossError(absl::StrCat(call.op, ": server ", call.server, " returned ",
                                            response.chunks.size(), " chunks, expected ",
                                            call.chunk_ids.size()));
  }
  return absl::OkStatus();
}

absl::Status PayloadCoder::DecodeChunk(const ChunkCall& call, size_t i, const WireChunk& c,
                                       bool in_model, const char*& shared,
                                       const char* shared_end) const {
  if (c.id != call.chunk_ids[i]) {
    return absl::DataLossError(absl::StrCat(call.op, ": server ", call.server,
                                            " returned chunk ", c.id, ", expected ",
                                            call.chunk_ids[i]));
  }
  const ChunkInfo& info = layout_.chunks()[c.id];
  if (c.version != call.version) {
    return absl::FailedPreconditionError(absl::StrCat(
        call.op, ": chunk ", c.id, " from server ", call.server, " is at version ", c.version,
        ", expected ", call.version));
  }
  absl::StatusOr<WireDType> dtype = WireDTypeFromProto(c.dtype);
  if (!dtype.ok()) {
    return absl::DataLossError(absl::StrCat(call.op, ": chunk ", c.id, " from server ",
                                            call.server, " has ", dtype.status().message()));
  }
  const int64_t size = info.num_elements * WireBytes(*dtype);
  if (in_model) {
    // The server wrote the weights in place.
    if (c.data_size != 0 || *dtype != WireDType::kFloat32) {
      return absl::DataLossError(absl::StrCat(
          call.op, ": chunk ", c.id, " from server ", call.server, " has ", c.data_size,
          " bytes of ", WireDTypeName(*dtype),
          " in the message; expected none, as its float32 weights are in the shared model"));
    }
    return absl::OkStatus();
  }
  if (shared != nullptr) {
    if (c.data_size != 0 || size > shared_end - shared) {
      return absl::DataLossError(absl::StrCat(
          call.op, ": chunk ", c.id, " from server ", call.server, " has ", c.data_size,
          " bytes in the message and ", shared_end - shared, " left in its shared slot; "
          "expected none and ", ExpectedWireBytes(info.num_elements, *dtype)));
    }
    DecodePieces(*dtype, {absl::string_view(shared, static_cast<size_t>(size))},
                 call.weights + info.flat_offset);
    shared += size;
    return absl::OkStatus();
  }
  if (c.data_size != size) {
    return absl::DataLossError(
        absl::StrCat(call.op, ": chunk ", c.id, " has ", c.data_size, " bytes, layout says ",
                     ExpectedWireBytes(info.num_elements, *dtype)));
  }
  DecodePieces(*dtype, c.data, call.weights + info.flat_offset);
  return absl::OkStatus();
}

}  // namespace psync
