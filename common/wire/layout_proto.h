// Conversions between the layout (and the training shape) and their wire
// forms (proto::LayoutSpec, proto::TrainingShape).
#ifndef PSYNC_COMMON_WIRE_LAYOUT_PROTO_H_
#define PSYNC_COMMON_WIRE_LAYOUT_PROTO_H_

#include "absl/status/statusor.h"
#include "common/config/training_shape.h"
#include "common/model/layout.h"
#include "proto/psync.pb.h"

namespace psync {

void LayoutToProto(const Layout& layout, proto::LayoutSpec* spec);

// Validates everything a peer may have sent: unknown dtypes, bad shapes and
// sizes come back as InvalidArgument naming the value.
absl::StatusOr<Layout> LayoutFromProto(const proto::LayoutSpec& spec);

void TrainingShapeToProto(const TrainingShape& shape, proto::TrainingShape* out);
TrainingShape TrainingShapeFromProto(const proto::TrainingShape& shape);

}  // namespace psync

#endif  // PSYNC_COMMON_WIRE_LAYOUT_PROTO_H_
