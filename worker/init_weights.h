// The initial weights worker 0 sends in a job whose init_from is worker:
// read from --init_weights (a safetensors file checked against the model's
// tensors), or computed from the seed as the servers would.
#ifndef PSYNC_WORKER_INIT_WEIGHTS_H_
#define PSYNC_WORKER_INIT_WEIGHTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/layout.h"

namespace psync {

// The F32 tensors of the safetensors file `path` as the layout's flat
// parameter vector. The file must hold exactly the layout's tensors, by
// name and shape, every value finite: anything else is an error naming
// --init_weights, the file, the tensor and what was expected (a missing
// tensor, one the model lacks, another shape, another dtype, a non-finite
// value). Reads the file once; thread-compatible.
absl::StatusOr<std::vector<float>> ReadInitWeights(const std::string& path, const Layout& layout);

// The layout's initial weights from its seed (common/model/init.h), as the
// flat parameter vector: what servers that initialise from the seed hold at
// version 0.
std::vector<float> SeedInitWeights(const Layout& layout);

}  // namespace psync

#endif  // PSYNC_WORKER_INIT_WEIGHTS_H_
