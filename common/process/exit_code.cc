#include "common/process/exit_code.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"

namespace psync {
namespace {

constexpr char kExitCodePayload[] = "psync.exit_code";

}  // namespace

absl::Status WithExitCode(int code, absl::Status s) {
  if (!s.ok()) s.SetPayload(kExitCodePayload, absl::Cord(absl::StrCat(code)));
  return s;
}

int ExitCodeOf(const absl::Status& s, int otherwise) {
  if (s.ok()) return 0;
  const absl::optional<absl::Cord> payload = s.GetPayload(kExitCodePayload);
  int code = otherwise;
  if (payload.has_value() && !absl::SimpleAtoi(std::string(*payload), &code)) code = otherwise;
  return code;
}

}  // namespace psync
