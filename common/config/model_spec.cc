#include "common/config/model_spec.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/model/layout.h"

namespace psync {
namespace {

constexpr char kExpected[] =
    "mlp, mlp:<input>-<hidden>...-<classes> (e.g. mlp:784-512-512-10), cnn or "
    "cnn:<conv1 channels>-<conv2 channels>-<hidden> (e.g. cnn:16-32-128)";
constexpr int64_t kMaxWidth = 1 << 20;
constexpr int64_t kMaxChannels = 4096;

}  // namespace

int64_t ModelSpec::ParameterCount() const {
  int64_t n = 0;
  if (kind == "mlp") {
    for (size_t k = 1; k < widths.size(); ++k) n += widths[k] * widths[k - 1] + widths[k];
    return n;
  }
  const int64_t c1 = widths[0], c2 = widths[1], hidden = widths[2];
  return c1 * 25 + c1 + c2 * c1 * 25 + c2 + hidden * c2 * 49 + hidden + 10 * hidden + 10;
}

std::string ModelSpec::Describe() const {
  return absl::StrCat(kind, ":", absl::StrJoin(widths, "-"));
}

absl::StatusOr<ModelSpec> ParseModelSpec(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model is '", text, "', expected ", kExpected, " (", why, ")"));
  };
  const std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits(':', 1));
  ModelSpec spec;
  spec.kind = parts[0];
  if (spec.kind != "mlp" && spec.kind != "cnn") return bad("unknown model");
  if (parts.size() == 1) {
    spec.widths = spec.kind == "mlp" ? std::vector<int64_t>{784, 256, 128, 10}
                                     : std::vector<int64_t>{16, 32, 128};
    return spec;
  }
  for (absl::string_view piece : absl::StrSplit(parts[1], '-')) {
    int64_t width;
    if (!absl::SimpleAtoi(piece, &width)) return bad(absl::StrCat("'", piece, "' is not a number"));
    const int64_t max = spec.kind == "mlp" ? kMaxWidth : kMaxChannels;
    if (width < 1 || width > max) {
      return bad(absl::StrCat("width ", width, " is out of range 1..", max));
    }
    spec.widths.push_back(width);
  }
  if (spec.kind == "mlp" && spec.widths.size() < 2) {
    return bad("an MLP needs at least the input and class widths");
  }
  if (spec.kind == "cnn" && spec.widths.size() != 3) {
    return bad("a CNN takes exactly three numbers");
  }
  // An MLP layer is two tensors (weight and bias), and a layout holds at most
  // Layout::kMaxTensors.
  const int64_t max_layers = static_cast<int64_t>(Layout::kMaxTensors / 2);
  if (spec.kind == "mlp" && static_cast<int64_t>(spec.widths.size()) - 1 > max_layers) {
    return bad(absl::StrCat("it has ", spec.widths.size() - 1, " layers, at most ", max_layers,
                            " fit"));
  }
  if (spec.ParameterCount() > kMaxModelParameters) {
    return bad(absl::StrCat("it has ", spec.ParameterCount(), " parameters, at most ",
                            kMaxModelParameters, " fit"));
  }
  return spec;
}

}  // namespace psync
