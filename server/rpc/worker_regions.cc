#include "server/rpc/worker_regions.h"

#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace psync {

absl::Status WorkerRegions::MayShare(absl::string_view peer) const {
  if (!enabled_) {
    return absl::FailedPreconditionError(
        "this server does not share memory (--shared_memory=false)");
  }
  absl::StatusOr<HostAddresses> host = host_();
  if (!host.ok()) {
    // Loopback is this host's all the same.
    LOG(WARNING) << "server " << server_rank_ << ": only loopback peers share memory: "
                 << host.status().message();
    host = HostAddresses({});
  }
  return PeerOnHost(peer, *host);
}

void WorkerRegions::Take(const proto::RegisterRequest& req, uint64_t session,
                         absl::string_view peer, proto::RegisterResponse* resp) {
  auto region = std::make_shared<WorkerRegion>();
  region->worker_rank = req.worker_rank();
  const absl::Status off = req.has_shared_memory() || req.has_shared_model()
                               ? MayShare(peer)
                               : absl::OkStatus();
  const absl::Status slots = !req.has_shared_memory() ? absl::OkStatus()
                             : !off.ok()              ? off
                                                      : MapSlots(req.shared_memory(), *region);
  const absl::Status model = !req.has_shared_model() ? absl::OkStatus()
                             : !off.ok()             ? off
                                                     : MapModel(req.shared_model(), *region);
  {
    absl::MutexLock lock(&mu_);
    for (auto it = regions_.begin(); it != regions_.end();) {
      auto here = it++;
      if (here->second->worker_rank == req.worker_rank()) regions_.erase(here);
    }
    if (region->memory != nullptr || region->model != nullptr) regions_[session] = region;
  }
  resp->set_shared_memory(region->memory != nullptr);
  resp->set_shared_model(region->model != nullptr);
  for (const auto& [what, why, refused] :
       {std::tuple{"payloads travel in the messages", &slots,
                   resp->mutable_shared_memory_refused()},
        std::tuple{"model is not shared", &model, resp->mutable_shared_model_refused()}}) {
    if (why->ok()) continue;
    *refused = std::string(why->message());
    LOG(INFO) << "server " << server_rank_ << ": worker " << req.worker_rank()
              << "'s " << what << ": " << why->message();
  }
}

absl::Status WorkerRegions::MapSlots(const proto::SharedMemoryOffer& o, WorkerRegion& region) {
  const int64_t limit = max_message_bytes_;
  if (o.slots() < 1 || o.slots() > kMaxSharedSlots || o.slot_bytes() < 1 ||
      o.slot_bytes() > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory offer of ", o.slots(), " slots of ", o.slot_bytes(),
        " bytes; expected 1 to ", kMaxSharedSlots, " slots of 1 to ", limit, " bytes"));
  }
  PSYNC_ASSIGN_OR_RETURN(region.memory,
                         SharedRegion::Open({o.pid(), o.fd(), o.nonce(),
                                             o.slot_bytes() * o.slots()}));
  region.slots = o.slots();
  region.slot_bytes = o.slot_bytes();
  return absl::OkStatus();
}

absl::Status WorkerRegions::MapModel(const proto::SharedModelOffer& o, WorkerRegion& region) {
  const std::shared_ptr<const Layout> layout = layout_();
  const int64_t total = layout != nullptr ? layout->total_elements() : 0;
  if (o.elements() != total) {
    return absl::InvalidArgumentError(absl::StrCat("shared model of ", o.elements(),
                                                   " parameters; the layout has ", total));
  }
  region.model_nonce = o.nonce();
  region.model_elements = total;
  if (o.fd() != -1) {
    PSYNC_ASSIGN_OR_RETURN(region.model,
                           SharedRegion::Open({o.pid(), o.fd(), o.nonce(), 8 * total}));
    return absl::OkStatus();
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [session, earlier] : regions_) {
    if (earlier->worker_rank == region.worker_rank && earlier->model != nullptr &&
        earlier->model_nonce == o.nonce() && earlier->model_elements == total) {
      region.model = earlier->model;
      return absl::OkStatus();
    }
  }
  return absl::FailedPreconditionError(
      "the worker offers the shared model an earlier session of it mapped (fd -1), and this "
      "server holds none of that nonce (it restarted since)");
}

absl::StatusOr<std::optional<SharedUse>> WorkerRegions::UseOf(
    const char* op, uint64_t slot, bool in_model, uint64_t session, absl::Span<const int32_t> ids,
    WireDType dtype) {
  if (slot == 0 && !in_model) return std::nullopt;
  if (slot != 0 && in_model) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": names shared slot ", slot, " and the shared model; expected one of them"));
  }
  SharedUse use;
  {
    absl::MutexLock lock(&mu_);
    const auto it = regions_.find(session);
    if (it != regions_.end()) use.region = it->second;
  }
  const WorkerRegion* region = use.region.get();
  if (region == nullptr) {
    return absl::AbortedError(absl::StrCat(
        op, ": session ", session, " has no shared memory on server ",
        server_rank_, " (it restarted, or the worker registered again); "
        "register again"));
  }
  if (in_model && region->model == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": session ", session, " has no shared model on server ",
        server_rank_, " (RegisterResponse.shared_model was false)"));
  }
  if (in_model && dtype != WireDType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", WireDTypeName(dtype), " chunks in the shared model; expected float32"));
  }
  if (slot != 0 && (region->memory == nullptr || slot > static_cast<uint64_t>(region->slots))) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": shared slot ", slot,
                                                   "; the region has slots 1 to ",
                                                   region->slots));
  }
  use.slot = static_cast<uint32_t>(slot);
  const std::shared_ptr<const Layout> layout = layout_();
  char* at = slot != 0 ? region->Slot(use.slot) : nullptr;
  int64_t total = 0;
  for (int32_t id : ids) {
    // An unknown id takes no room: the store refuses it, naming it.
    const bool known =
        layout != nullptr && id >= 0 && id < static_cast<int32_t>(layout->chunks().size());
    const ChunkInfo* info = known ? &layout->chunks()[id] : nullptr;
    const int64_t size = known ? info->num_elements * WireBytes(dtype) : 0;
    use.sizes.push_back(size);
    total += size;
    if (slot != 0) {
      use.in.push_back(at);
      use.out.push_back(at);
      at += size;
      continue;
    }
    if (known && info->flat_offset + info->num_elements > region->model_elements) {
      // Only after a rollback to another layout.
      return absl::AbortedError(absl::StrCat(
          op, ": chunk ", id, " ends at parameter ", info->flat_offset + info->num_elements,
          ", past the shared model's ", region->model_elements, "; register again"));
    }
    char* const model = region->model->data();
    const int64_t offset = known ? info->flat_offset * 4 : 0;
    use.in.push_back(model + offset);
    use.out.push_back(model + region->model_elements * 4 + offset);
  }
  if (slot != 0 && total > region->slot_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": its chunks take ", total, " bytes, more than a shared slot's ",
        region->slot_bytes));
  }
  return use;
}

}  // namespace psync
