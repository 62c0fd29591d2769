#include "worker/client/request_plan.h"

#include <algorithm>

namespace psync {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t WireSize(const Layout& layout, int32_t id, WireDType dtype) {
  return layout.chunks()[id].num_elements * WireBytes(dtype);
}

// The request size, `request` at least, that cuts `ids` into at most `most`
// requests. Chunks go whole, so requests sized between one and two chunks
// would each carry one, up to twice as many as share / request: a size
// over a chunk that cuts too many is taken in whole chunks (`chunk`, a full
// one's bytes), then grown while a mix of chunk sizes still cuts too many.
int64_t WithinMostRequests(const Layout& layout, absl::Span<const int32_t> ids, WireDType dtype,
                           int64_t request, int64_t chunk, int64_t most) {
  while (true) {
    const auto count = static_cast<int64_t>(CutIntoRequests(layout, ids, dtype, request).size());
    if (count <= most) return request;
    if (request > chunk && request % chunk != 0) {
      request = CeilDiv(request, chunk) * chunk;
    } else {
      request = std::max(CeilDiv(request * count, most), request + request / 16 + 1);
    }
  }
}

}  // namespace

int64_t MaxRequestsPerServer(int num_workers) {
  return std::clamp<int64_t>(2048 / std::max(num_workers, 1), 32, kMaxRequestsPerServer);
}

ServerPlan PlanServer(const Layout& layout, int server, const RequestSizing& sizing,
                      const ServerLink& link) {
  ServerPlan plan;
  int64_t& share = plan.share;
  for (int32_t id : layout.ChunksOnServer(server)) share += WireSize(layout, id, sizing.wire_dtype);
  // About max_request_bytes (shared_request_bytes): smaller where payloads
  // cross a network and that would leave the share fewer than
  // kMinRequestsAcrossNetwork requests, larger where they do not and it
  // would cut it into more than kMaxRequestsOnOneHost, larger where it
  // would cut it into more than MaxRequestsPerServer, and always within
  // the server's message limit (a chunk goes whole: the server refuses at
  // Register a chunk that would not fit; a share many times that limit is
  // cut into as many requests as it takes).
  const bool payloads_cross_network = link.across_network && !link.shared;
  const int64_t n = sizing.num_workers;
  const int64_t chunk =
      layout.chunk_bytes() / int64_t{sizeof(float)} * WireBytes(sizing.wire_dtype);
  int64_t& request = plan.request;
  request = link.shared ? sizing.shared_request_bytes : sizing.max_request_bytes;
  request = payloads_cross_network ? std::min(request, CeilDiv(share, kMinRequestsAcrossNetwork))
                                   : std::max(request, CeilDiv(share, kMaxRequestsOnOneHost));
  const int64_t most = MaxRequestsPerServer(n);
  request = WithinMostRequests(layout, layout.ChunksOnServer(server), sizing.wire_dtype,
                               std::max({request, CeilDiv(share, most), int64_t{1}}), chunk, most);
  if (link.message_limit > kMessageHeadroomBytes) {
    request = std::min(request, link.message_limit - kMessageHeadroomBytes);
  }
  // The automatic window never holds back a share of one chunk's bytes or
  // less: a server holding one whole chunk takes that much in flight from
  // every worker anyway, and a window over a share of several small chunks
  // would send them a round trip at a time, behind the other servers'
  // queues. Where payloads cross a network it is a request of a chunk at
  // least (two for a lone worker), whatever the share: what a worker has in
  // flight to a server is then what the link's queue holds for it, not a
  // fraction of the model (GrpcPsClientOptions::push_window_bytes).
  int64_t limit = sizing.push_window_bytes;
  if (limit == 0) {
    if (share <= chunk) {
      limit = share;
    } else if (payloads_cross_network) {
      limit = CeilDiv(2, n) * std::max(request, chunk);
    } else {
      limit = std::max(CeilDiv(2, n) * request, share / (2 * n * n));
    }
  }
  plan.window = limit < share ? limit : 0;
  return plan;
}

SlotPlan PlanSlots(const Layout& layout, int server, const RequestSizing& sizing) {
  const ServerPlan plan = PlanServer(layout, server, sizing,
                                     {/*across_network=*/false, /*message_limit=*/0,
                                      /*shared=*/true});
  if (plan.share == 0) return {};
  int64_t largest = 0;
  for (int32_t id : layout.ChunksOnServer(server)) {
    largest = std::max(largest, WireSize(layout, id, sizing.wire_dtype));
  }
  SlotPlan slots;
  slots.slot_bytes = std::max(std::min(plan.request, plan.share), largest);
  const int64_t in_flight = plan.window > 0 ? plan.window : plan.share;
  // Never more than the requests the share is cut into (chunks go whole;
  // at most MaxRequestsPerServer of them, PlanServer) and a spare.
  const int64_t requests = static_cast<int64_t>(
      CutIntoRequests(layout, layout.ChunksOnServer(server), sizing.wire_dtype, plan.request)
          .size());
  slots.slots = std::min(CeilDiv(in_flight, plan.request) + 1, requests + 1);
  return slots;
}

std::vector<absl::Span<const int32_t>> CutIntoRequests(const Layout& layout,
                                                       absl::Span<const int32_t> ids,
                                                       WireDType dtype, int64_t request_bytes) {
  std::vector<absl::Span<const int32_t>> requests;
  for (size_t begin = 0; begin < ids.size();) {
    size_t end = begin;
    int64_t bytes = 0;
    while (end < ids.size()) {
      const int64_t size = WireSize(layout, ids[end], dtype);
      if (end > begin && bytes + size > request_bytes) break;
      bytes += size;
      ++end;
    }
    requests.push_back(ids.subspan(begin, end - begin));
    begin = end;
  }
  return requests;
}

std::vector<int32_t> FirstChunkOfTensors(const Layout& layout) {
  // Every tensor has at least one chunk, and a tensor's chunks are numbered
  // consecutively.
  std::vector<int32_t> first(layout.tensors().size() + 1,
                             static_cast<int32_t>(layout.chunks().size()));
  for (auto c = layout.chunks().rbegin(); c != layout.chunks().rend(); ++c) {
    first[c->tensor] = c->id;
  }
  return first;
}

absl::Span<const int32_t> ChunksWithin(const std::vector<int32_t>& server_chunks, int32_t lo,
                                       int32_t hi) {
  const auto begin = std::lower_bound(server_chunks.begin(), server_chunks.end(), lo);
  const auto end = std::lower_bound(server_chunks.begin(), server_chunks.end(), hi);
  return absl::MakeConstSpan(server_chunks).subspan(begin - server_chunks.begin(), end - begin);
}

}  // namespace psync
