#include "server/rpc/worker_regions.h"

#include <memory>
#include <string>

#include "common/model/layout.h"
#include "common/wire/shared_region.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

// A worker on the server's host, connected over loopback.
constexpr char kLoopbackPeer[] = "ipv4:127.0.0.1:40000";

// 96 parameters in 3 chunks of 32 (128 bytes in float32), on one server.
std::shared_ptr<const Layout> TestLayout() {
  auto layout = Layout::Create({{"w", {64}}, {"b", {32}}}, 128, 1, 7);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return std::make_shared<const Layout>(*std::move(layout));
}

proto::RegisterRequest SlotsOffer(const SharedRegion& region, int slots, int64_t slot_bytes) {
  proto::RegisterRequest req;
  req.set_worker_rank(0);
  const SharedRegion::Offer o = region.offer();
  proto::SharedMemoryOffer* offer = req.mutable_shared_memory();
  offer->set_pid(o.pid);
  offer->set_fd(o.fd);
  offer->set_nonce(o.nonce);
  offer->set_slots(slots);
  offer->set_slot_bytes(slot_bytes);
  return req;
}

TEST(WorkerRegionsTest, AServerThatDoesNotShareMemoryRefusesOffersSayingSo) {
  auto region = SharedRegion::Create(1024);
  ASSERT_TRUE(region.ok()) << region.status();
  WorkerRegions regions(/*server_rank=*/0, /*max_message_bytes=*/1 << 20, /*enabled=*/false,
                        TestLayout);
  proto::RegisterResponse resp;
  regions.Take(SlotsOffer(**region, 2, 512), /*session=*/5, kLoopbackPeer, &resp);
  EXPECT_FALSE(resp.shared_memory());
  EXPECT_THAT(resp.shared_memory_refused(), HasSubstr("--shared_memory=false"));
  const auto use = regions.UseOf("Push", 1, false, 5, {0}, WireDType::kFloat32);
  EXPECT_EQ(use.status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(use.status().message(), HasSubstr("session 5 has no shared memory on server 0"));
}

TEST(WorkerRegionsTest, AnOfferOutOfBoundsIsRefusedNamingTheBounds) {
  auto region = SharedRegion::Create(4096);
  ASSERT_TRUE(region.ok()) << region.status();
  WorkerRegions regions(0, 1 << 20, true, TestLayout);
  proto::RegisterResponse resp;
  regions.Take(SlotsOffer(**region, 5000, 1), 5, kLoopbackPeer, &resp);
  EXPECT_FALSE(resp.shared_memory());
  EXPECT_THAT(resp.shared_memory_refused(),
              HasSubstr("shared memory offer of 5000 slots of 1 bytes; expected 1 to 1024 slots"));
}

TEST(WorkerRegionsTest, ChunksLieOneAfterAnotherInTheirSlot) {
  auto region = SharedRegion::Create(1024);
  ASSERT_TRUE(region.ok()) << region.status();
  WorkerRegions regions(0, 1 << 20, true, TestLayout);
  proto::RegisterResponse resp;
  regions.Take(SlotsOffer(**region, 2, 512), 5, kLoopbackPeer, &resp);
  ASSERT_TRUE(resp.shared_memory()) << resp.shared_memory_refused();

  auto use = regions.UseOf("Push", 2, false, 5, {2, 0}, WireDType::kFloat32);
  ASSERT_TRUE(use.ok()) << use.status();
  ASSERT_TRUE(use->has_value());
  const SharedUse& u = **use;
  EXPECT_EQ(u.slot, 2u);
  EXPECT_EQ(u.sizes, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(u.in[0] - u.region->Slot(2), 0);  // its first chunk at the slot's start
  EXPECT_EQ(u.in[1] - u.in[0], 128);
  EXPECT_EQ(u.out, u.in);  // the weights over the gradients

  EXPECT_FALSE(regions.UseOf("Push", 0, false, 5, {0}, WireDType::kFloat32)
                   ->has_value());  // names no shared memory
  const auto past = regions.UseOf("Pull", 3, false, 5, {0}, WireDType::kFloat32);
  EXPECT_THAT(past.status().message(), HasSubstr("Pull: shared slot 3; the region has slots 1 to 2"));
  const auto both = regions.UseOf("Pull", 1, true, 5, {0}, WireDType::kFloat32);
  EXPECT_THAT(both.status().message(), HasSubstr("expected one of them"));
  const auto big = regions.UseOf("Push", 1, false, 5, {0, 1, 2, 0, 1}, WireDType::kFloat32);
  EXPECT_THAT(big.status().message(),
              HasSubstr("its chunks take 640 bytes, more than a shared slot's 512"));
}

TEST(WorkerRegionsTest, AWorkersNextRegistrationReplacesItsRegion) {
  auto region = SharedRegion::Create(1024);
  ASSERT_TRUE(region.ok()) << region.status();
  WorkerRegions regions(0, 1 << 20, true, TestLayout);
  proto::RegisterResponse resp;
  regions.Take(SlotsOffer(**region, 2, 512), 5, kLoopbackPeer, &resp);
  ASSERT_TRUE(resp.shared_memory());
  auto held = regions.UseOf("Push", 1, false, 5, {0}, WireDType::kFloat32);
  ASSERT_TRUE(held.ok());

  proto::RegisterRequest again;
  again.set_worker_rank(0);  // offers nothing this time
  regions.Take(again, 6, kLoopbackPeer, &resp);
  EXPECT_FALSE(resp.shared_memory());
  const auto old = regions.UseOf("Push", 1, false, 5, {0}, WireDType::kFloat32);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kAborted);
  // A call in flight keeps the region it took.
  EXPECT_NE((*held)->region->memory, nullptr);
}

proto::RegisterRequest SlotsAndModelOffer(const SharedRegion& slots, const SharedRegion& model) {
  proto::RegisterRequest req = SlotsOffer(slots, 2, 512);
  const SharedRegion::Offer o = model.offer();
  proto::SharedModelOffer* offer = req.mutable_shared_model();
  offer->set_pid(o.pid);
  offer->set_fd(o.fd);
  offer->set_nonce(o.nonce);
  offer->set_elements(96);
  return req;
}

// Memory is shared within one host only: a worker that connects from
// another host's address is refused both regions, whatever its offer says
// (processes in two network namespaces of one kernel could map them); one
// that connects from loopback or from one of the server's own addresses
// has them.
TEST(WorkerRegionsTest, OnlyAWorkerOnTheServersHostSharesMemory) {
  auto slots = SharedRegion::Create(1024);
  auto model = SharedRegion::Create(8 * 96);
  ASSERT_TRUE(slots.ok() && model.ok());
  WorkerRegions regions(0, 1 << 20, true, TestLayout,
                        [] { return HostAddresses({"10.1.2.1", "fd00::1"}); });
  proto::RegisterResponse resp;
  for (const char* peer : {"ipv4:10.1.2.2:40000", "ipv6:%5Bfd00::2%5D:40000",
                           "unix:/run/psync.sock"}) {
    resp.Clear();
    regions.Take(SlotsAndModelOffer(**slots, **model), 5, peer, &resp);
    EXPECT_FALSE(resp.shared_memory()) << peer;
    EXPECT_FALSE(resp.shared_model()) << peer;
    EXPECT_THAT(resp.shared_memory_refused(), HasSubstr("this server's host")) << peer;
    EXPECT_EQ(resp.shared_model_refused(), resp.shared_memory_refused()) << peer;
  }
  EXPECT_THAT(resp.shared_memory_refused(),
              HasSubstr("cannot tell whether the worker is on this server's host"));
  const auto use = regions.UseOf("Push", 1, false, 5, {0}, WireDType::kFloat32);
  EXPECT_EQ(use.status().code(), absl::StatusCode::kAborted);

  for (const char* peer : {"ipv4:10.1.2.1:40000", "ipv6:%5Bfd00::1%5D:40000", kLoopbackPeer}) {
    auto fresh_slots = SharedRegion::Create(1024);
    auto fresh_model = SharedRegion::Create(8 * 96);
    ASSERT_TRUE(fresh_slots.ok() && fresh_model.ok());
    resp.Clear();
    regions.Take(SlotsAndModelOffer(**fresh_slots, **fresh_model), 6, peer, &resp);
    EXPECT_TRUE(resp.shared_memory()) << peer << ": " << resp.shared_memory_refused();
    EXPECT_TRUE(resp.shared_model()) << peer << ": " << resp.shared_model_refused();
  }
}

// A server that cannot list its addresses still knows loopback.
TEST(WorkerRegionsTest, WithoutItsAddressesAServerSharesOverLoopbackOnly) {
  WorkerRegions regions(0, 1 << 20, true, TestLayout,
                        [] { return absl::InternalError("getifaddrs: no memory"); });
  for (const char* peer : {kLoopbackPeer, "ipv4:10.1.2.1:40000"}) {
    auto slots = SharedRegion::Create(1024);
    ASSERT_TRUE(slots.ok());
    proto::RegisterResponse resp;
    regions.Take(SlotsOffer(**slots, 2, 512), 5, peer, &resp);
    EXPECT_EQ(resp.shared_memory(), peer == std::string(kLoopbackPeer)) << peer;
  }
}

}  // namespace
}  // namespace psync
