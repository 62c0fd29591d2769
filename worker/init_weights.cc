#include "worker/init_weights.h"

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/format/safetensors.h"
#include "common/model/init.h"
#include "common/status_macros.h"

namespace psync {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::Status Refused(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("--init_weights ", path, ": ", what));
}

// Where each of the file's entries goes in the flat vector `flat`; errors
// name the first tensor that does not fit the layout.
absl::StatusOr<std::vector<char*>> Destinations(const SafetensorsReader& file,
                                                const Layout& layout, std::vector<float>& flat) {
  std::map<std::string, int> model;  // name -> tensor index
  for (int i = 0; i < static_cast<int>(layout.tensors().size()); ++i) {
    model[layout.tensors()[i].name] = i;
  }
  std::map<std::string, int> seen;
  std::vector<char*> dest;
  for (const SafetensorsEntryInfo& e : file.entries()) {
    const auto it = model.find(e.name);
    if (it == model.end()) {
      return Refused(file.path(), absl::StrCat("tensor '", e.name, "' ", ShapeText(e.shape),
                                               " is not in the model, which has ",
                                               layout.tensors().size(), " tensors"));
    }
    const TensorSpec& spec = layout.tensors()[it->second];
    if (e.shape != spec.shape) {
      return Refused(file.path(), absl::StrCat("tensor '", e.name, "' has shape ",
                                               ShapeText(e.shape), ", the model's is ",
                                               ShapeText(spec.shape)));
    }
    seen[e.name] = it->second;
    dest.push_back(reinterpret_cast<char*>(flat.data() + layout.tensor_offset(it->second)));
  }
  for (const TensorSpec& spec : layout.tensors()) {
    if (seen.count(spec.name) == 0) {
      return Refused(file.path(), absl::StrCat("tensor '", spec.name, "' ",
                                               ShapeText(spec.shape),
                                               " of the model is missing from the file"));
    }
  }
  return dest;
}

}  // namespace

absl::StatusOr<std::vector<float>> ReadInitWeights(const std::string& path, const Layout& layout) {
  absl::StatusOr<SafetensorsReader> file = SafetensorsReader::Open(path);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("--init_weights: ", file.status().message()));
  }
  std::vector<float> flat(layout.total_elements());
  PSYNC_ASSIGN_OR_RETURN(std::vector<char*> dest, Destinations(*file, layout, flat));
  absl::Status read = file->ReadEntries(dest, [](const char*, size_t) {});
  if (!read.ok()) {
    return absl::Status(read.code(), absl::StrCat("--init_weights: ", read.message()));
  }
  for (int t = 0; t < static_cast<int>(layout.tensors().size()); ++t) {
    const TensorSpec& spec = layout.tensors()[t];
    const float* values = flat.data() + layout.tensor_offset(t);
    for (int64_t i = 0; i < spec.NumElements(); ++i) {
      if (!std::isfinite(values[i])) {
        return Refused(path, absl::StrCat("value ", i, " of tensor '", spec.name, "' is ",
                                          values[i], ", expected a finite value"));
      }
    }
  }
  return flat;
}

std::vector<float> SeedInitWeights(const Layout& layout) {
  std::vector<float> flat(layout.total_elements());
  for (int t = 0; t < static_cast<int>(layout.tensors().size()); ++t) {
    const TensorSpec& spec = layout.tensors()[t];
    InitialValues(layout.init_seed(), spec, 0, spec.NumElements(),
                  flat.data() + layout.tensor_offset(t));
  }
  return flat;
}

}  // namespace psync
