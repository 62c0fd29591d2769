#include "server/rpc/parsed_size.h"

#include <string>

#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"
#include "proto/psync.pb.h"

namespace psync {
namespace {

template <typename Message>
int64_t Estimate(const std::string& bytes, int64_t stop_above = INT64_MAX) {
  google::protobuf::io::ArrayInputStream in(bytes.data(), static_cast<int>(bytes.size()));
  return EstimateParsedBytes(&in, *Message::descriptor(), stop_above);
}

TEST(ParsedSizeTest, CountsEachMessageAndField) {
  EXPECT_EQ(Estimate<proto::RegisterRequest>(""), kParsedMessageBytes);
  proto::RegisterRequest req;
  req.set_worker_rank(1);  // an int32: 4 bytes
  for (int i = 0; i < 1000; ++i) req.mutable_layout()->add_tensors();
  EXPECT_EQ(Estimate<proto::RegisterRequest>(req.SerializeAsString()),
            kParsedMessageBytes * 1002 + 4);
}

TEST(ParsedSizeTest, CountsPackedElementsOneByOne) {
  proto::PullRequest req;
  for (int i = 0; i < 1000; ++i) req.add_chunk_ids(i * 300);  // 1 to 3 bytes each
  EXPECT_EQ(Estimate<proto::PullRequest>(req.SerializeAsString()),
            kParsedMessageBytes + 1000 * 4);
}

// The estimate is near what protobuf reports once parsed, for a layout of
// named tensors with shapes.
TEST(ParsedSizeTest, IsNearTheParsedSize) {
  proto::RegisterRequest req;
  for (int i = 0; i < 5000; ++i) {
    proto::TensorSpec* t = req.mutable_layout()->add_tensors();
    t->set_name("layer" + std::to_string(i) + ".weight");
    t->add_shape(64);
    t->add_shape(i + 1);
  }
  const std::string bytes = req.SerializeAsString();
  proto::RegisterRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  const int64_t estimate = Estimate<proto::RegisterRequest>(bytes);
  EXPECT_GT(estimate, static_cast<int64_t>(parsed.SpaceUsedLong()) / 2);
  EXPECT_LT(estimate, static_cast<int64_t>(parsed.SpaceUsedLong()) * 2);
}

TEST(ParsedSizeTest, StopsOncePastTheBound) {
  proto::RegisterRequest req;
  for (int i = 0; i < 100000; ++i) req.mutable_layout()->add_tensors();
  const int64_t estimate = Estimate<proto::RegisterRequest>(req.SerializeAsString(), 10000);
  EXPECT_GT(estimate, 10000);
  EXPECT_LT(estimate, 10000 + 3 * kParsedMessageBytes);
}

TEST(ParsedSizeTest, BrokenBytesAreNotAMessage) {
  EXPECT_EQ(Estimate<proto::RegisterRequest>("\x1a\x05\x0a"), -1);  // a length past the end
  EXPECT_EQ(Estimate<proto::RegisterRequest>("\xff"), -1);          // a broken tag
  EXPECT_EQ(Estimate<proto::RegisterRequest>(std::string("\x0b\x0c", 2)), -1);  // a group
}

}  // namespace
}  // namespace psync
