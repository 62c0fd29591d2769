#include "common/wire/layout_proto.h"

#include "absl/strings/str_cat.h"

namespace psync {

void LayoutToProto(const Layout& layout, proto::LayoutSpec* spec) {
  spec->Clear();
  for (const TensorSpec& t : layout.tensors()) {
    proto::TensorSpec* out = spec->add_tensors();
    out->set_name(t.name);
    for (int64_t d : t.shape) out->add_shape(d);
    out->set_dtype(proto::DTYPE_FLOAT32);
  }
  spec->set_chunk_bytes(layout.chunk_bytes());
  spec->set_num_servers(layout.num_servers());
  spec->set_init_seed(layout.init_seed());
}

absl::StatusOr<Layout> LayoutFromProto(const proto::LayoutSpec& spec) {
  if (static_cast<size_t>(spec.tensors_size()) > Layout::kMaxTensors) {  // before copying them
    return absl::InvalidArgumentError(absl::StrCat("Layout: the model has ", spec.tensors_size(),
                                                   " tensors, expected at most ",
                                                   Layout::kMaxTensors));
  }
  std::vector<TensorSpec> tensors;
  tensors.reserve(spec.tensors_size());
  for (const proto::TensorSpec& t : spec.tensors()) {
    if (t.dtype() != proto::DTYPE_FLOAT32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Layout: tensor '", t.name(), "' has dtype ",
          proto::DType_IsValid(t.dtype()) ? proto::DType_Name(t.dtype())
                                          : absl::StrCat(static_cast<int>(t.dtype())),
          ", expected DTYPE_FLOAT32"));
    }
    tensors.push_back(TensorSpec{t.name(), {t.shape().begin(), t.shape().end()}, DType::kFloat32});
  }
  return Layout::Create(std::move(tensors), spec.chunk_bytes(), spec.num_servers(),
                        spec.init_seed());
}

void TrainingShapeToProto(const TrainingShape& shape, proto::TrainingShape* out) {
  out->set_devices(shape.devices);
  out->set_batch_per_device(shape.batch_per_device);
  out->set_total_steps(shape.total_steps);
  out->set_train_samples(shape.train_samples);
  out->set_seed(shape.seed);
  out->set_device_weights(shape.device_weights);
  out->set_accumulation_steps(shape.accumulation_steps);
}

TrainingShape TrainingShapeFromProto(const proto::TrainingShape& shape) {
  return TrainingShape{shape.devices(),       shape.batch_per_device(), shape.total_steps(),
                       shape.train_samples(), shape.seed(),             shape.device_weights(),
                       // Absent (0): a client without accumulation.
                       shape.accumulation_steps() == 0 ? 1 : shape.accumulation_steps()};
}

}  // namespace psync
