#include "server/rpc/worker_regions.h"

#include <memory>

#include "common/model/layout.h"
#include "common/wire/shared_region.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

using ::testing::HasSubstr;

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
  regions.Take(SlotsOffer(**region, 2, 512), /*session=*/5, &resp);
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
  regions.Take(SlotsOffer(**region, 5000, 1), 5, &resp);
  EXPECT_FALSE(resp.shared_memory());
  EXPECT_THAT(resp.shared_memory_refused(),
              HasSubstr("shared memory offer of 5000 slots of 1 bytes; expected 1 to 1024 slots"));
}

TEST(WorkerRegionsTest, ChunksLieOneAfterAnotherInTheirSlot) {
  auto region = SharedRegion::Create(1024);
  ASSERT_TRUE(region.ok()) << region.status();
  WorkerRegions regions(0, 1 << 20, true, TestLayout);
  proto::RegisterResponse resp;
  regions.Take(SlotsOffer(**region, 2, 512), 5, &resp);
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
  regions.Take(SlotsOffer(**region, 2, 512), 5, &resp);
  ASSERT_TRUE(resp.shared_memory());
  auto held = regions.UseOf("Push", 1, false, 5, {0}, WireDType::kFloat32);
  ASSERT_TRUE(held.ok());

  proto::RegisterRequest again;
  again.set_worker_rank(0);  // offers nothing this time
  regions.Take(again, 6, &resp);
  EXPECT_FALSE(resp.shared_memory());
  const auto old = regions.UseOf("Push", 1, false, 5, {0}, WireDType::kFloat32);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kAborted);
  // A call in flight keeps the region it took.
  EXPECT_NE((*held)->region->memory, nullptr);
}

}  // namespace
}  // namespace psync
