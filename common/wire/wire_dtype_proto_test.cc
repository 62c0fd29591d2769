#include "common/wire/wire_dtype_proto.h"

#include "gtest/gtest.h"

namespace psync {
namespace {

TEST(WireDTypeProtoTest, RoundTripsEveryDType) {
  for (WireDType d : {WireDType::kFloat32, WireDType::kBf16, WireDType::kFp16}) {
    auto back = WireDTypeFromProto(WireDTypeToProto(d));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, d);
  }
  EXPECT_EQ(WireDTypeToProto(WireDType::kBf16), proto::DTYPE_BFLOAT16);
  EXPECT_EQ(WireDTypeToProto(WireDType::kFp16), proto::DTYPE_FLOAT16);
}

TEST(WireDTypeProtoTest, RefusesUnspecifiedAndUnknownByValue) {
  auto unspecified = WireDTypeFromProto(proto::DTYPE_UNSPECIFIED);
  ASSERT_EQ(unspecified.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unspecified.status().message(),
            "dtype 0 (DTYPE_UNSPECIFIED), expected DTYPE_FLOAT32 (1), DTYPE_BFLOAT16 (2) or "
            "DTYPE_FLOAT16 (3)");
  auto unknown = WireDTypeFromProto(77);
  ASSERT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message(),
            "dtype 77, expected DTYPE_FLOAT32 (1), DTYPE_BFLOAT16 (2) or DTYPE_FLOAT16 (3)");
}

}  // namespace
}  // namespace psync
