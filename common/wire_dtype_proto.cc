#include "common/wire_dtype_proto.h"

#include "absl/strings/str_cat.h"

namespace psync {

proto::DType WireDTypeToProto(WireDType dtype) {
  switch (dtype) {
    case WireDType::kFloat32:
      return proto::DTYPE_FLOAT32;
    case WireDType::kBf16:
      return proto::DTYPE_BFLOAT16;
    case WireDType::kFp16:
      return proto::DTYPE_FLOAT16;
  }
  return proto::DTYPE_UNSPECIFIED;
}

absl::StatusOr<WireDType> WireDTypeFromProto(int32_t value) {
  switch (value) {
    case proto::DTYPE_FLOAT32:
      return WireDType::kFloat32;
    case proto::DTYPE_BFLOAT16:
      return WireDType::kBf16;
    case proto::DTYPE_FLOAT16:
      return WireDType::kFp16;
    default:
      break;
  }
  const std::string name =
      proto::DType_IsValid(value) ? proto::DType_Name(static_cast<proto::DType>(value)) : "";
  return absl::InvalidArgumentError(absl::StrCat(
      "dtype ", value, name.empty() ? "" : absl::StrCat(" (", name, ")"),
      ", expected DTYPE_FLOAT32 (1), DTYPE_BFLOAT16 (2) or DTYPE_FLOAT16 (3)"));
}

}  // namespace psync
