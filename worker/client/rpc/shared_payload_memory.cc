#include "worker/client/rpc/shared_payload_memory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace psync {

SharedPayloadMemory::SharedPayloadMemory(const Layout& layout, int worker_rank, bool enabled)
    : layout_(layout),
      worker_rank_(worker_rank),
      enabled_(enabled),
      servers_(layout.num_servers()) {
  if (!enabled_ || layout_.total_elements() == 0) return;
  absl::StatusOr<std::unique_ptr<SharedRegion>> model =
      SharedRegion::Create(8 * layout_.total_elements());
  if (model.ok()) {
    model_ = *std::move(model);
    model_offer_ = model_->offer();
    model_open_ = true;
  } else {
    LOG(WARNING) << "worker " << worker_rank_
                 << ": no shared memory for the model: " << model.status().message();
  }
}

PsClient::SharedModel SharedPayloadMemory::model() const {
  if (model_ == nullptr) return {};
  float* grads = reinterpret_cast<float*>(model_->data());
  return {grads, grads + layout_.total_elements()};
}

std::vector<SharedSlots> SharedPayloadMemory::Offer(
    const std::vector<SlotPlan>& slots, const std::vector<std::string>& elsewhere) const {
  std::vector<SharedSlots> offered(layout_.num_servers());
  for (int s = 0; s < layout_.num_servers() && enabled_; ++s) {
    if (static_cast<size_t>(s) < elsewhere.size() && !elsewhere[s].empty()) {
      offered[s].elsewhere = elsewhere[s];
      continue;
    }
    if (slots[s].slots == 0) continue;
    absl::StatusOr<std::unique_ptr<SharedRegion>> region =
        SharedRegion::Create(slots[s].slot_bytes * slots[s].slots);
    if (!region.ok()) {
      LOG(WARNING) << "worker " << worker_rank_ << ": no shared memory for server " << s << ": "
                   << region.status().message();
      continue;
    }
    offered[s].region = *std::move(region);
    offered[s].slot_bytes = slots[s].slot_bytes;
    for (int64_t k = slots[s].slots; k >= 1; --k) {
      offered[s].free.push_back(static_cast<uint32_t>(k));
    }
  }
  return offered;
}

void SharedPayloadMemory::AddOffer(int server, const std::vector<SharedSlots>& offered,
                                   proto::RegisterRequest* req) const {
  req->clear_shared_memory();
  req->clear_shared_model();
  if (!offered[server].elsewhere.empty()) return;
  if (const SharedSlots& shared = offered[server]; shared.region != nullptr) {
    const SharedRegion::Offer o = shared.region->offer();
    proto::SharedMemoryOffer* offer = req->mutable_shared_memory();
    offer->set_pid(o.pid);
    offer->set_fd(o.fd);
    offer->set_nonce(o.nonce);
    offer->set_slot_bytes(shared.slot_bytes);
    offer->set_slots(static_cast<int32_t>(shared.free.size()));
  }
  if (model_ != nullptr) {
    // Once every server has answered a registration the descriptor is
    // closed, and later ones name the region mapped then.
    proto::SharedModelOffer* offer = req->mutable_shared_model();
    offer->set_pid(model_offer_.pid);
    offer->set_fd(model_open_ ? model_offer_.fd : -1);
    offer->set_nonce(model_offer_.nonce);
    offer->set_elements(layout_.total_elements());
  }
}

void SharedPayloadMemory::Accept(const std::vector<proto::RegisterResponse>& responses,
                                 std::vector<SharedSlots> offered) {
  absl::MutexLock lock(&mu_);
  for (size_t s = 0; s < responses.size(); ++s) {
    const bool was_shared = servers_[s].region != nullptr, had_model = servers_[s].model;
    const bool model = model_ != nullptr && responses[s].shared_model();
    servers_[s] = SharedSlots();
    if (model_ != nullptr && model != had_model) {
      LOG(INFO) << "worker " << worker_rank_ << ": server " << s
                << (model ? " reads gradients from and writes weights to this worker's "
                            "model in place"
                          : absl::StrCat(" does not map this worker's model: ",
                                         responses[s].shared_model_refused()));
    }
    if (!offered[s].elsewhere.empty() && !accepted_) {
      LOG(INFO) << "worker " << worker_rank_ << ": payloads to server " << s
                << " travel in the messages: " << offered[s].elsewhere;
    } else if (offered[s].region != nullptr && !responses[s].shared_memory()) {
      LOG(INFO) << "worker " << worker_rank_ << ": payloads to server " << s
                << " travel in the messages: " << responses[s].shared_memory_refused();
    } else if (offered[s].region != nullptr) {
      // Mapped by the server: nothing else may open it from now on.
      offered[s].region->CloseDescriptor();
      if (!was_shared) {
        LOG(INFO) << "worker " << worker_rank_ << ": server " << s
                  << " shares memory with this worker: " << offered[s].free.size()
                  << " slots of " << (offered[s].slot_bytes >> 10) << " KiB for payloads";
      }
      servers_[s] = std::move(offered[s]);
    }
    servers_[s].model = model;
  }
  accepted_ = true;
  // Every server has answered: those that map the model have.
  if (model_open_) {
    model_->CloseDescriptor();
    model_open_ = false;
  }
}

bool SharedPayloadMemory::InModel(int server, const float* grads, const float* weights,
                                  WireDType dtype) const {
  const PsClient::SharedModel m = model();
  return servers_[server].model && dtype == WireDType::kFloat32 && weights == m.weights &&
         (grads == nullptr || grads == m.grads);
}

uint32_t SharedPayloadMemory::AcquireSlot(int server, int64_t payload_bytes) {
  absl::MutexLock lock(&mu_);
  std::vector<uint32_t>& free = servers_[server].free;
  if (free.empty() || payload_bytes > servers_[server].slot_bytes) return 0;
  const uint32_t slot = free.back();
  free.pop_back();
  return slot;
}

void SharedPayloadMemory::ReleaseSlot(int server, uint32_t slot, bool reusable) {
  if (slot == 0 || !reusable) return;
  absl::MutexLock lock(&mu_);
  servers_[server].free.push_back(slot);
}

absl::Span<char> SharedPayloadMemory::Slot(int server, uint32_t slot) const {
  if (slot == 0) return {};
  const SharedSlots& shared = servers_[server];
  return absl::Span<char>(
      shared.region->data() + (static_cast<int64_t>(slot) - 1) * shared.slot_bytes,
      static_cast<size_t>(shared.slot_bytes));
}

}  // namespace psync
