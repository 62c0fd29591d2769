// PayloadCoder without a server: requests decoded as a server would, and
// answers built as a server would, in the message and in a shared slot.
#include "worker/client/rpc/payload_coder.h"

#include <memory>
#include <string>
#include <vector>

#include "common/rpc/byte_buffer_bytes.h"
#include "common/wire/wire_dtype_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/psync.pb.h"

namespace psync {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Three chunks of 2 floats (w: 0, 1; b: 2) on one server.
Layout TestLayout() { return *Layout::Create({{"w", {2, 2}}, {"b", {2}}}, 8, 1, 3); }

// A push-pull of chunks `ids` for step 4.
ChunkCall PushPull(std::vector<int32_t> ids) {
  ChunkCall call;
  call.op = "PushPull";
  call.version = 5;
  call.step = 4;
  call.sample_count = 32;
  call.chunk_ids = std::move(ids);
  return call;
}

// A server's answer: chunks `ids` at `version`, float32 `data` each (none
// when empty), in shared slot `slot`.
grpc::ByteBuffer Answer(const std::vector<int32_t>& ids, int64_t version,
                        const std::vector<float>& data, uint32_t slot = 0) {
  WireMessageBuilder answer;
  answer.SetScalar(kWireSharedSlot, slot);
  auto owned = std::make_shared<std::vector<float>>(data);  // held by the buffer
  for (size_t i = 0; i < ids.size(); ++i) {
    answer.AddChunk(ids[i], WireDTypeToProto(WireDType::kFloat32), version,
                    data.empty() ? nullptr : owned->data() + 2 * i, data.empty() ? 0 : 8, owned);
  }
  return answer.Build();
}

// A float32 coder over TestLayout, and the weights its answers fill.
class PayloadAnswerTest : public ::testing::Test {
 protected:
  // A push-pull of chunks `ids` whose answer fills weights_.
  ChunkCall Into(std::vector<int32_t> ids) {
    ChunkCall call = PushPull(std::move(ids));
    call.weights = weights_.data();
    return call;
  }

  const Layout layout_ = TestLayout();
  const PayloadCoder coder_{layout_, 1, WireDType::kFloat32};
  std::vector<float> weights_ = std::vector<float>(6);
};

TEST(PayloadCoderTest, PullRequestNamesTheChunksAndANarrowDType) {
  const Layout layout = TestLayout();
  const PayloadCoder coder(layout, 1, WireDType::kFloat32);
  proto::PullRequest req;
  ASSERT_TRUE(req.ParseFromString(
      BufferBytes(coder.PullRequest(77, 5, {0, 2}, WireDType::kFloat32, 3, false))));
  EXPECT_EQ(req.worker_rank(), 1);
  EXPECT_EQ(req.session(), 77u);
  EXPECT_EQ(req.version(), 5);
  EXPECT_EQ(req.shared_slot(), 3u);
  EXPECT_EQ(req.layout_fingerprint(), layout.fingerprint());
  EXPECT_THAT(req.chunk_ids(), ElementsAre(0, 2));
  EXPECT_EQ(req.dtype(), 0);  // unset: the bytes of a float32 pull as before the field
  ASSERT_TRUE(req.ParseFromString(
      BufferBytes(coder.PullRequest(77, 5, {0}, WireDType::kBf16, 0, false))));
  EXPECT_EQ(req.dtype(), WireDTypeToProto(WireDType::kBf16));
}

TEST(PayloadCoderTest, AFloat32PushCarriesTheGradientsInTheMessage) {
  const Layout layout = TestLayout();
  const PayloadCoder coder(layout, 1, WireDType::kFloat32);
  const std::vector<float> grads = {1, 2, 3, 4, 5, 6};
  absl::StatusOr<grpc::ByteBuffer> push = coder.PushRequest(PushPull({1, 2}), 9, grads.data(), {});
  ASSERT_TRUE(push.ok()) << push.status();
  WireMessage m;
  ASSERT_TRUE(DecodeWireMessage(*push, 3, &m).ok());
  EXPECT_EQ(m.Int(kWireStep), 4);
  EXPECT_EQ(m.Int(kWireSampleCount), 32);
  EXPECT_EQ(m.Int(kWireSession), 9);
  ASSERT_EQ(m.chunks.size(), 2u);
  EXPECT_EQ(m.chunks[0].id, 1);
  EXPECT_EQ(m.chunks[1].data_size, 8);
  std::vector<float> got(2);
  DecodePieces(WireDType::kFloat32, m.chunks[1].data, got.data());
  EXPECT_THAT(got, ElementsAre(5, 6));
}

TEST(PayloadCoderTest, ANarrowPushInASlotLeavesTheMessageWithoutPayload) {
  const Layout layout = TestLayout();
  const PayloadCoder coder(layout, 1, WireDType::kBf16);
  const std::vector<float> grads = {1, 2, 3, 4, 5, 6};
  std::vector<char> slot(16);
  ChunkCall call = PushPull({0, 2});
  call.slot = 1;
  absl::StatusOr<grpc::ByteBuffer> push =
      coder.PushRequest(call, 9, grads.data(), absl::MakeSpan(slot));
  ASSERT_TRUE(push.ok()) << push.status();
  WireMessage m;
  ASSERT_TRUE(DecodeWireMessage(*push, 3, &m).ok());
  EXPECT_EQ(m.Int(kWireSharedSlot), 1);
  ASSERT_EQ(m.chunks.size(), 2u);
  EXPECT_EQ(m.chunks[0].data_size, 0);
  std::vector<float> got(4);
  DecodePieces(WireDType::kBf16, {absl::string_view(slot.data(), 8)}, got.data());
  EXPECT_THAT(got, ElementsAre(1, 2, 5, 6));
}

TEST(PayloadCoderTest, AGradientTheDTypeCannotHoldIsRefused) {
  const Layout layout = TestLayout();
  const PayloadCoder coder(layout, 1, WireDType::kFp16);
  const std::vector<float> grads = {1, 1e9f, 3, 4, 5, 6};
  absl::StatusOr<grpc::ByteBuffer> push = coder.PushRequest(PushPull({0}), 9, grads.data(), {});
  EXPECT_FALSE(push.ok());
  EXPECT_THAT(push.status().message(), HasSubstr("w"));
}

TEST_F(PayloadAnswerTest, AnAnswerInTheMessageFillsTheWeights) {
  ChunkCall call = Into({0, 2});
  call.response = Answer({0, 2}, 5, {1, 2, 5, 6});
  ASSERT_TRUE(coder_.DecodeWeights(call, {}).ok());
  EXPECT_THAT(weights_, ElementsAre(1, 2, 0, 0, 5, 6));
}

// A lane reads each float32 chunk of the answer into its place in the
// weights; decoding an answer whose data is already there leaves them right.
TEST_F(PayloadAnswerTest, AnswerPlacesAreTheChunksInTheWeights) {
  ChunkCall call = Into({0, 2});
  const std::vector<AnswerPlace> places = coder_.AnswerPlaces(call);
  ASSERT_EQ(places.size(), 2u);
  EXPECT_EQ(places[1].chunk_id, 2);
  EXPECT_EQ(places[1].version, 5);
  EXPECT_EQ(places[1].to, reinterpret_cast<char*>(weights_.data() + 4));
  EXPECT_EQ(places[1].bytes, 8);
  weights_ = {1, 2, 0, 0, 5, 6};  // as the lane left them
  WireMessageBuilder answer;
  answer.AddChunk(0, WireDTypeToProto(WireDType::kFloat32), 5, weights_.data(), 8);
  answer.AddChunk(2, WireDTypeToProto(WireDType::kFloat32), 5, weights_.data() + 4, 8);
  call.response = answer.Build();
  ASSERT_TRUE(coder_.DecodeWeights(call, {}).ok());
  EXPECT_THAT(weights_, ElementsAre(1, 2, 0, 0, 5, 6));
  // None where the weights come another way, or there are none.
  call.slot = 2;
  EXPECT_TRUE(coder_.AnswerPlaces(call).empty());
  call.slot = 0;
  call.in_model = true;
  EXPECT_TRUE(coder_.AnswerPlaces(call).empty());
  EXPECT_TRUE(coder_.AnswerPlaces(PushPull({0})).empty());
  // Nor where answers come in a narrow dtype.
  const PayloadCoder narrow(layout_, 1, WireDType::kBf16);
  EXPECT_TRUE(narrow.AnswerPlaces(Into({0})).empty());
}

TEST_F(PayloadAnswerTest, AnAnswerInASlotFillsTheWeights) {
  const std::vector<float> slot = {7, 8, 9, 10};
  ChunkCall call = Into({1, 2});
  call.slot = 2;
  call.response = Answer({1, 2}, 5, {}, 2);
  const absl::Span<const char> memory(reinterpret_cast<const char*>(slot.data()), 16);
  ASSERT_TRUE(coder_.DecodeWeights(call, memory).ok());
  EXPECT_THAT(weights_, ElementsAre(0, 0, 7, 8, 9, 10));
  // A slot too small for what the answer says is in it.
  EXPECT_TRUE(absl::IsDataLoss(coder_.DecodeWeights(call, memory.subspan(0, 12))));
}

TEST_F(PayloadAnswerTest, AnswersThatDoNotMatchTheRequestAreRefused) {
  ChunkCall call = Into({0, 2});
  call.response = Answer({0, 1}, 5, {1, 2, 3, 4});
  EXPECT_THAT(coder_.DecodeWeights(call, {}).message(), HasSubstr("returned chunk 1, expected 2"));
  call.response = Answer({0}, 5, {1, 2});
  EXPECT_THAT(coder_.DecodeWeights(call, {}).message(), HasSubstr("returned 1 chunks, expected 2"));
  call.response = Answer({0, 2}, 4, {1, 2, 3, 4});
  EXPECT_TRUE(absl::IsFailedPrecondition(coder_.DecodeWeights(call, {})));
  call.response = Answer({0, 2}, 5, {}, 1);
  EXPECT_THAT(coder_.DecodeWeights(call, {}).message(),
              HasSubstr("answered in shared slot 1, expected 0"));
  call.response = Answer({0, 2}, 5, {});
  EXPECT_THAT(coder_.DecodeWeights(call, {}).message(), HasSubstr("has 0 bytes, layout says"));
}

}  // namespace
}  // namespace psync
