// The request plan without a server: request sizes, windows, shared slots
// and the cutting of a server's chunks into requests.
#include "worker/client/request_plan.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::ElementsAre;

// `floats` floats in chunks of `chunk_floats` on one server.
Layout OneServer(int64_t floats, int64_t chunk_floats) {
  return *Layout::Create({{"w", {floats}}}, 4 * chunk_floats, 1, 3);
}

RequestSizing Workers(int n) {
  RequestSizing sizing;
  sizing.num_workers = n;
  return sizing;
}

ServerLink AcrossNetwork() {
  ServerLink link;
  link.across_network = true;
  return link;
}

std::vector<std::vector<int32_t>> Ids(const std::vector<absl::Span<const int32_t>>& requests) {
  std::vector<std::vector<int32_t>> ids;
  for (absl::Span<const int32_t> r : requests) ids.emplace_back(r.begin(), r.end());
  return ids;
}

TEST(RequestPlanTest, AShareWithinOneRequestGoesWhole) {
  const Layout layout = OneServer(1 << 10, 64);  // 4 KiB in 256-byte chunks
  const ServerPlan plan = PlanServer(layout, 0, RequestSizing(), ServerLink());
  EXPECT_EQ(plan.share, 4 << 10);
  EXPECT_EQ(plan.request, 1 << 20);
  EXPECT_EQ(plan.window, 0);
}

TEST(RequestPlanTest, AcrossANetworkAShareIsCutIntoAtLeast256Requests) {
  const Layout layout = OneServer(1024, 2);  // 4 KiB
  ServerLink link = AcrossNetwork();
  EXPECT_EQ(PlanServer(layout, 0, RequestSizing(), link).request, 16);
  link.across_network = false;
  EXPECT_EQ(PlanServer(layout, 0, RequestSizing(), link).request, 1 << 20);
}

// At most 2048 / workers requests within 32..256, so that all workers'
// waiting calls on a server stay within its bound; on one host at most 64.
TEST(RequestPlanTest, ALargeShareIsCutIntoAtMostMaxRequestsPerServer) {
  EXPECT_EQ(MaxRequestsPerServer(1), 256);
  EXPECT_EQ(MaxRequestsPerServer(8), 256);
  EXPECT_EQ(MaxRequestsPerServer(16), 128);
  EXPECT_EQ(MaxRequestsPerServer(32), 64);
  EXPECT_EQ(MaxRequestsPerServer(64), 32);
  EXPECT_EQ(MaxRequestsPerServer(1000), 32);
  const Layout layout = OneServer(16 << 20, 1 << 16);  // 64 MiB
  RequestSizing sizing;
  sizing.max_request_bytes = 1 << 10;
  EXPECT_EQ(PlanServer(layout, 0, sizing, ServerLink()).request, 1 << 20);  // 64 on one host
  const ServerLink link = AcrossNetwork();
  sizing.num_workers = 4;
  EXPECT_EQ(PlanServer(layout, 0, sizing, link).request, 256 << 10);
  sizing.num_workers = 16;
  EXPECT_EQ(PlanServer(layout, 0, sizing, link).request, 512 << 10);
  sizing.num_workers = 64;
  EXPECT_EQ(PlanServer(layout, 0, sizing, link).request, 2 << 20);
}

// Chunks go whole, so a request of one and a half chunks would carry one:
// a share is never cut into more requests than the most, whatever the mix
// of chunk sizes.
TEST(RequestPlanTest, RequestsStayWithinTheMostInWholeChunks) {
  // 120 MiB in 256 KiB chunks, 8 workers, across a network: share / 256 is
  // 480 KiB, which would carry one chunk each, 480 requests; two chunks
  // each give 240.
  const Layout layout = OneServer(30 << 20, 1 << 16);
  RequestSizing sizing = Workers(8);
  ServerLink link = AcrossNetwork();
  const ServerPlan plan = PlanServer(layout, 0, sizing, link);
  EXPECT_EQ(plan.request, 512 << 10);
  EXPECT_EQ(
      CutIntoRequests(layout, layout.ChunksOnServer(0), WireDType::kFloat32, plan.request).size(),
      240u);
  // Tensors of 1.5 chunks (a full chunk and a half one each), and of 2.5.
  for (int64_t floats : {int64_t{3} << 15, int64_t{5} << 15}) {
    std::vector<TensorSpec> tensors;
    for (int i = 0; i < 500; ++i) tensors.push_back({absl::StrCat("t", i), {floats}});
    const Layout mixed = *Layout::Create(tensors, 256 << 10, 1, 3);
    for (int workers : {1, 8, 16, 100}) {
      for (bool across : {false, true}) {
        sizing.num_workers = workers;
        link.across_network = across;
        const int64_t request = PlanServer(mixed, 0, sizing, link).request;
        EXPECT_LE(static_cast<int64_t>(
                      CutIntoRequests(mixed, mixed.ChunksOnServer(0), WireDType::kFloat32, request)
                          .size()),
                  MaxRequestsPerServer(workers))
            << floats << " floats a tensor, " << workers << " workers, across " << across;
      }
    }
  }
}

TEST(RequestPlanTest, SharedMemoryTakesItsOwnRequestSize) {
  const Layout layout = OneServer(16 << 20, 1 << 16);
  ServerLink link;
  link.shared = true;
  EXPECT_EQ(PlanServer(layout, 0, RequestSizing(), link).request, 2 << 20);
}

TEST(RequestPlanTest, RequestsFitTheServersMessageLimit) {
  const Layout layout = OneServer(1 << 18, 1 << 14);  // 1 MiB in 64 KiB chunks
  ServerLink link;
  link.message_limit = (1 << 20) + (256 << 10);
  EXPECT_EQ(PlanServer(layout, 0, RequestSizing(), link).request, 256 << 10);
  link.message_limit = kMessageHeadroomBytes;  // no room: not applied
  EXPECT_EQ(PlanServer(layout, 0, RequestSizing(), link).request, 1 << 20);
}

TEST(RequestPlanTest, TheWindowFollowsTheNumberOfWorkers) {
  const Layout layout = OneServer(16 << 20, 1 << 16);  // 64 MiB
  RequestSizing sizing;
  sizing.num_workers = 1;
  // Two requests at least, or half the share: 32 MiB.
  EXPECT_EQ(PlanServer(layout, 0, sizing, ServerLink()).window, 32 << 20);
  sizing.num_workers = 4;
  EXPECT_EQ(PlanServer(layout, 0, sizing, ServerLink()).window, 2 << 20);
  sizing.push_window_bytes = 5 << 20;
  EXPECT_EQ(PlanServer(layout, 0, sizing, ServerLink()).window, 5 << 20);
  sizing.push_window_bytes = 64 << 20;  // the share fits: no window
  EXPECT_EQ(PlanServer(layout, 0, sizing, ServerLink()).window, 0);
}

// Where payloads cross a network the window is a request (two for a lone
// worker), however large the share; through shared memory (a server on
// this host at a non-loopback address) requests and window are loopback's.
TEST(RequestPlanTest, AcrossANetworkTheWindowIsARequest) {
  const Layout layout = OneServer(16 << 20, 1 << 16);  // 64 MiB in 256 KiB chunks
  RequestSizing sizing = Workers(4);
  ServerLink link = AcrossNetwork();
  ServerPlan plan = PlanServer(layout, 0, sizing, link);
  EXPECT_EQ(plan.request, 256 << 10);
  EXPECT_EQ(plan.window, 256 << 10);
  sizing.num_workers = 1;
  EXPECT_EQ(PlanServer(layout, 0, sizing, link).window, 512 << 10);
  // A share of a few chunks: requests of a chunk (share / 256 is less), and
  // a lone worker keeps two of them in flight.
  const Layout small = OneServer(1 << 18, 1 << 16);  // 1 MiB in 256 KiB chunks
  EXPECT_EQ(PlanServer(small, 0, sizing, link).window, 512 << 10);
  sizing.num_workers = 4;
  link.shared = true;
  plan = PlanServer(layout, 0, sizing, link);
  EXPECT_EQ(plan.request, 2 << 20);  // shared_request_bytes
  EXPECT_EQ(plan.window, 2 << 20);   // the share / (2 x workers^2)
}

TEST(RequestPlanTest, AShareOfOneChunkOrLessIsNotWindowed) {
  // A 256 KiB chunk on server 0 and small tensors, 48 KiB in all, on
  // server 1 (4 workers, across a network: requests of a few KiB, windows
  // of one request where a share is windowed).
  const Layout layout = *Layout::Create(
      {{"big", {64 << 10}}, {"a", {4 << 10}}, {"b", {4 << 10}}, {"c", {4 << 10}}}, 256 << 10, 2, 3);
  RequestSizing sizing = Workers(4);
  ServerLink link = AcrossNetwork();
  const ServerPlan small = PlanServer(layout, 1, sizing, link);
  EXPECT_EQ(small.share, 48 << 10);
  EXPECT_EQ(small.window, 0);
  EXPECT_EQ(PlanServer(layout, 0, sizing, link).window, 0);
  // Its chunk is one request: one slot and a spare.
  EXPECT_EQ(PlanSlots(layout, 0, sizing).slots, 2);
  // One float more than a chunk is windowed.
  const Layout larger = *Layout::Create({{"w", {(64 << 10) + 1}}}, 256 << 10, 1, 3);
  EXPECT_GT(PlanServer(larger, 0, sizing, link).window, 0);
  // A window asked for applies to any share larger than it.
  sizing.push_window_bytes = 16 << 10;
  EXPECT_EQ(PlanServer(layout, 1, sizing, link).window, 16 << 10);
}

TEST(RequestPlanTest, ANarrowDTypeHalvesTheShare) {
  const Layout layout = OneServer(1 << 10, 64);
  RequestSizing sizing;
  sizing.wire_dtype = WireDType::kBf16;
  EXPECT_EQ(PlanServer(layout, 0, sizing, ServerLink()).share, 2 << 10);
}

TEST(RequestPlanTest, SlotsHoldARequestEachAndOneToSpare) {
  const Layout layout = OneServer(1 << 20, 1 << 16);  // 4 MiB in 256 KiB chunks
  const SlotPlan slots = PlanSlots(layout, 0, RequestSizing());
  EXPECT_EQ(slots.slot_bytes, 2 << 20);  // shared_request_bytes
  EXPECT_EQ(slots.slots, 3);             // the whole share in flight, and a spare
}

TEST(RequestPlanTest, ASlotHoldsTheLargestChunk) {
  const Layout layout = OneServer(1 << 20, 1 << 20);  // one 4 MiB chunk
  const SlotPlan slots = PlanSlots(layout, 0, RequestSizing());
  EXPECT_EQ(slots.slot_bytes, 4 << 20);
  // The chunk goes whole, one request, and a spare (two requests of 2 MiB
  // would fit the share, but there is one).
  EXPECT_EQ(slots.slots, 2);
}

TEST(RequestPlanTest, AServerWithoutChunksGetsNoSlots) {
  const Layout layout = *Layout::Create({{"w", {2}}}, 8, 2, 3);  // one chunk, on server 0
  const int empty = layout.ChunksOnServer(0).empty() ? 0 : 1;
  const SlotPlan slots = PlanSlots(layout, empty, RequestSizing());
  EXPECT_EQ(slots.slots, 0);
  EXPECT_EQ(slots.slot_bytes, 0);
}

TEST(RequestPlanTest, RequestsAreConsecutiveChunksAndALargeChunkGoesAlone) {
  // Chunks of 2, 2, 2 and 1 floats: 8, 8, 8 and 4 bytes.
  const Layout layout = OneServer(7, 2);
  const std::vector<int32_t>& all = layout.ChunksOnServer(0);
  EXPECT_THAT(Ids(CutIntoRequests(layout, all, WireDType::kFloat32, 16)),
              ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)));
  EXPECT_THAT(Ids(CutIntoRequests(layout, all, WireDType::kFloat32, 4)),
              ElementsAre(ElementsAre(0), ElementsAre(1), ElementsAre(2), ElementsAre(3)));
  EXPECT_THAT(Ids(CutIntoRequests(layout, all, WireDType::kBf16, 16)),
              ElementsAre(ElementsAre(0, 1, 2, 3)));
  EXPECT_TRUE(CutIntoRequests(layout, {}, WireDType::kFloat32, 16).empty());
}

TEST(RequestPlanTest, TensorsMapToTheirChunksOnEachServer) {
  // w: 4 floats (chunks 0, 1), b: 2 floats (chunk 2), in chunks of 2.
  const Layout layout = *Layout::Create({{"w", {2, 2}}, {"b", {2}}}, 8, 2, 3);
  const std::vector<int32_t> first = FirstChunkOfTensors(layout);
  EXPECT_THAT(first, ElementsAre(0, 2, 3));
  std::vector<int32_t> b_chunks;
  for (int s = 0; s < layout.num_servers(); ++s) {
    for (int32_t id : ChunksWithin(layout.ChunksOnServer(s), first[1], first[2])) {
      b_chunks.push_back(id);
    }
  }
  EXPECT_THAT(b_chunks, ElementsAre(2));
  EXPECT_TRUE(ChunksWithin(layout.ChunksOnServer(0), 3, 3).empty());
}

}  // namespace
}  // namespace psync
