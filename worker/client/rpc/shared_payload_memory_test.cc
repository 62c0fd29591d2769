// SharedPayloadMemory without a server: what it offers, what it takes from
// the answers, and how slots go out and come back.
#include "worker/client/rpc/shared_payload_memory.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

Layout TestLayout() { return *Layout::Create({{"w", {2, 2}}, {"b", {2}}}, 8, 2, 3); }

// Both servers map the slots; server 0 the model too.
std::vector<proto::RegisterResponse> BothMap() {
  std::vector<proto::RegisterResponse> responses(2);
  for (auto& r : responses) r.set_shared_memory(true);
  responses[0].set_shared_model(true);
  return responses;
}

TEST(SharedPayloadMemoryTest, OffersSlotsAndTheModel) {
  const Layout layout = TestLayout();
  SharedPayloadMemory memory(layout, 0, /*enabled=*/true);
  ASSERT_NE(memory.model().grads, nullptr);
  EXPECT_EQ(memory.model().weights, memory.model().grads + layout.total_elements());
  std::vector<SharedSlots> offered = memory.Offer({{16, 3}, {0, 0}});
  ASSERT_NE(offered[0].region, nullptr);
  EXPECT_EQ(offered[1].region, nullptr);
  proto::RegisterRequest req;
  memory.AddOffer(0, offered, &req);
  EXPECT_EQ(req.shared_memory().slots(), 3);
  EXPECT_EQ(req.shared_memory().slot_bytes(), 16);
  EXPECT_GE(req.shared_model().fd(), 0);
  EXPECT_EQ(req.shared_model().elements(), layout.total_elements());
  memory.AddOffer(1, offered, &req);
  EXPECT_FALSE(req.has_shared_memory());
  // Once every server has answered, the model is named by the region mapped.
  memory.Accept(BothMap(), std::move(offered));
  memory.AddOffer(1, std::vector<SharedSlots>(2), &req);
  EXPECT_EQ(req.shared_model().fd(), -1);
}

// A server known to be on another host is offered neither slots nor the
// model; the others are, as before.
TEST(SharedPayloadMemoryTest, OffersNothingToAServerOnAnotherHost) {
  const Layout layout = TestLayout();
  SharedPayloadMemory memory(layout, 0, /*enabled=*/true);
  std::vector<SharedSlots> offered =
      memory.Offer({{16, 3}, {16, 3}}, {"", "it is on another host (10.0.0.2:7070 ...)"});
  EXPECT_NE(offered[0].region, nullptr);
  EXPECT_EQ(offered[1].region, nullptr);
  EXPECT_EQ(offered[1].elsewhere, "it is on another host (10.0.0.2:7070 ...)");
  proto::RegisterRequest req;
  memory.AddOffer(0, offered, &req);
  EXPECT_TRUE(req.has_shared_memory());
  EXPECT_TRUE(req.has_shared_model());
  memory.AddOffer(1, offered, &req);
  EXPECT_FALSE(req.has_shared_memory());
  EXPECT_FALSE(req.has_shared_model());
  std::vector<proto::RegisterResponse> responses(2);
  responses[0].set_shared_memory(true);
  memory.Accept(responses, std::move(offered));
  EXPECT_TRUE(memory.HasSlots(0));
  EXPECT_FALSE(memory.HasSlots(1));
}

TEST(SharedPayloadMemoryTest, SlotsGoOutAndComeBackOnlyAfterSuccess) {
  const Layout layout = TestLayout();
  SharedPayloadMemory memory(layout, 0, true);
  memory.Accept(BothMap(), memory.Offer({{16, 2}, {0, 0}}));
  ASSERT_TRUE(memory.HasSlots(0));
  EXPECT_FALSE(memory.HasSlots(1));
  EXPECT_EQ(memory.AcquireSlot(0, 17), 0u);  // too large
  EXPECT_EQ(memory.AcquireSlot(0, 16), 1u);
  EXPECT_EQ(memory.AcquireSlot(0, 8), 2u);
  EXPECT_EQ(memory.AcquireSlot(0, 8), 0u);  // none left
  EXPECT_EQ(memory.Slot(0, 2).data(), memory.Slot(0, 1).data() + 16);
  EXPECT_EQ(memory.Slot(0, 2).size(), 16u);
  EXPECT_TRUE(memory.Slot(0, 0).empty());
  memory.ReleaseSlot(0, 2, /*reusable=*/false);
  EXPECT_EQ(memory.AcquireSlot(0, 8), 0u);
  memory.ReleaseSlot(0, 1, /*reusable=*/true);
  EXPECT_EQ(memory.AcquireSlot(0, 8), 1u);
}

TEST(SharedPayloadMemoryTest, OnlyFloat32CallsOnTheModelItselfStayInPlace) {
  const Layout layout = TestLayout();
  SharedPayloadMemory memory(layout, 0, true);
  memory.Accept(BothMap(), memory.Offer({{0, 0}, {0, 0}}));
  const PsClient::SharedModel model = memory.model();
  EXPECT_TRUE(memory.InModel(0, model.grads, model.weights, WireDType::kFloat32));
  EXPECT_TRUE(memory.InModel(0, nullptr, model.weights, WireDType::kFloat32));
  EXPECT_FALSE(memory.InModel(0, model.grads, model.weights, WireDType::kBf16));
  EXPECT_FALSE(memory.InModel(1, model.grads, model.weights, WireDType::kFloat32));
  std::vector<float> other(layout.total_elements());
  EXPECT_FALSE(memory.InModel(0, model.grads, other.data(), WireDType::kFloat32));
}

TEST(SharedPayloadMemoryTest, RefusedOrDisabledMemoryCarriesNothing) {
  const Layout layout = TestLayout();
  SharedPayloadMemory refused(layout, 0, true);
  refused.Accept(std::vector<proto::RegisterResponse>(2), refused.Offer({{16, 2}, {16, 2}}));
  EXPECT_FALSE(refused.HasSlots(0));
  EXPECT_FALSE(refused.InModel(0, nullptr, refused.model().weights, WireDType::kFloat32));
  SharedPayloadMemory off(layout, 0, false);
  EXPECT_EQ(off.model().grads, nullptr);
  EXPECT_EQ(off.Offer({{16, 2}, {16, 2}})[0].region, nullptr);
}

}  // namespace
}  // namespace psync
