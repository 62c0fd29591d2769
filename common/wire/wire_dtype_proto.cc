#include "common/wire/wire_dtype_proto.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config/enum_names.h"

namespace psync {
namespace {

// The one table both directions and the error's list of choices read.
struct DTypePair {
  WireDType wire;
  proto::DType proto;
};
constexpr DTypePair kDTypes[] = {{WireDType::kFloat32, proto::DTYPE_FLOAT32},
                                 {WireDType::kBf16, proto::DTYPE_BFLOAT16},
                                 {WireDType::kFp16, proto::DTYPE_FLOAT16}};

// "DTYPE_FLOAT32 (1), DTYPE_BFLOAT16 (2) or DTYPE_FLOAT16 (3)".
std::string DTypeChoices() {
  std::vector<std::string> choices;
  for (const DTypePair& d : kDTypes) {
    choices.push_back(absl::StrCat(proto::DType_Name(d.proto), " (", d.proto, ")"));
  }
  return JoinChoices(choices);
}

}  // namespace

proto::DType WireDTypeToProto(WireDType dtype) {
  for (const DTypePair& d : kDTypes) {
    if (d.wire == dtype) return d.proto;
  }
  return proto::DTYPE_UNSPECIFIED;
}

absl::StatusOr<WireDType> WireDTypeFromProto(int32_t value) {
  for (const DTypePair& d : kDTypes) {
    if (d.proto == value) return d.wire;
  }
  const std::string name =
      proto::DType_IsValid(value) ? proto::DType_Name(static_cast<proto::DType>(value)) : "";
  return absl::InvalidArgumentError(absl::StrCat("dtype ", value,
                                                 name.empty() ? "" : absl::StrCat(" (", name, ")"),
                                                 ", expected ", DTypeChoices()));
}

}  // namespace psync
