// SharedPayloadMemory owns this worker's shared memory with the servers on
// its host (common/wire/shared_region.h): the shared model (the flat gradients
// and weights, which such servers read and write in place) and, per
// server, a region of slots that carry the payloads of requests that are
// not in the model. It offers them at registration, takes the servers'
// answers, and hands slots to calls.
//
// Thread-safe for AcquireSlot/ReleaseSlot/Slot from any thread; Offer,
// AddOffer and Accept only while no call is in flight (during Register).
#ifndef PSYNC_WORKER_CLIENT_RPC_SHARED_PAYLOAD_MEMORY_H_
#define PSYNC_WORKER_CLIENT_RPC_SHARED_PAYLOAD_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/model/layout.h"
#include "common/wire/shared_region.h"
#include "common/wire/wire_dtype.h"
#include "proto/psync.pb.h"
#include "worker/client/ps_client.h"
#include "worker/client/request_plan.h"

namespace psync {

// A server's mapping of this worker's shared memory: the region of slots
// (null: none), its slots' size, and the free slots (numbered from 1); and
// whether the server maps the worker's shared model. As offered, why the
// server is on another host, where it is known to be: nothing is offered
// to it then.
struct SharedSlots {
  std::unique_ptr<SharedRegion> region;
  int64_t slot_bytes = 0;
  std::vector<uint32_t> free;
  bool model = false;
  std::string elsewhere;
};

class SharedPayloadMemory {
 public:
  // With `enabled` false (or no room to make it) there is no shared model
  // and Offer offers nothing. `worker_rank` names the worker in the log.
  SharedPayloadMemory(const Layout& layout, int worker_rank, bool enabled);

  SharedPayloadMemory(const SharedPayloadMemory&) = delete;
  SharedPayloadMemory& operator=(const SharedPayloadMemory&) = delete;

  // The flat gradients and then the weights; null where there is none.
  PsClient::SharedModel model() const;

  // A region for each server to map, sized by slots[s] (none where it has
  // no slots, shared memory is off or a region cannot be made), except for
  // servers with a reason in `elsewhere` (by server; missing or "": the
  // server may be on this host), which are on another host.
  std::vector<SharedSlots> Offer(const std::vector<SlotPlan>& slots,
                                 const std::vector<std::string>& elsewhere = {}) const;

  // Sets the offers of `server` in `req`: its region in `offered` and the
  // shared model, once every server has answered a registration by the
  // region mapped then (fd -1); none to a server on another host.
  void AddOffer(int server, const std::vector<SharedSlots>& offered,
                proto::RegisterRequest* req) const;

  // Takes the memory each server mapped, per `responses` (by server), and
  // closes the descriptors the servers needed to map it. Logs what changed
  // (at the first registration, which servers are on another host).
  void Accept(const std::vector<proto::RegisterResponse>& responses,
              std::vector<SharedSlots> offered);

  // Whether payloads to `server` travel in slots (it mapped a region).
  bool HasSlots(int server) const { return servers_[server].region != nullptr; }

  // Whether a call to `server` with these buffers (a pull's `grads` null)
  // in `dtype` leaves its payloads in place in the shared model.
  bool InModel(int server, const float* grads, const float* weights, WireDType dtype) const;

  // A free slot of `server` for a payload of `payload_bytes`; 0: none.
  uint32_t AcquireSlot(int server, int64_t payload_bytes);
  // Gives `slot` back if `reusable`: after a failed call the server may
  // still write an abandoned attempt's answer into it. A registration
  // brings a new region.
  void ReleaseSlot(int server, uint32_t slot, bool reusable);
  // Slot `slot` (from 1) of `server`'s region; empty for slot 0.
  absl::Span<char> Slot(int server, uint32_t slot) const;

 private:
  const Layout& layout_;
  const int worker_rank_;
  const bool enabled_;
  // Null: none. Its descriptor stays open (model_open_) until the first
  // registration has been answered.
  std::unique_ptr<SharedRegion> model_;
  SharedRegion::Offer model_offer_;
  bool model_open_ = false;
  bool accepted_ = false;  // a registration has been answered
  mutable absl::Mutex mu_;
  // By server: set by Accept, when no call is in flight; the free lists
  // under mu_.
  std::vector<SharedSlots> servers_;
};

}  // namespace psync

#endif  // PSYNC_WORKER_CLIENT_RPC_SHARED_PAYLOAD_MEMORY_H_
