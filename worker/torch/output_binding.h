// The files a torch worker writes and reads, bound into _psync: safetensors
// of a state_dict (common/format/safetensors.h, any dtype torch and the
// format share), the --summary JSON (worker/summary_json.h, the keys
// psync_worker writes) and the output paths' checks and atomic writes
// (common/format/output_path.h). No Python writes or parses these formats.
#ifndef PSYNC_WORKER_TORCH_OUTPUT_BINDING_H_
#define PSYNC_WORKER_TORCH_OUTPUT_BINDING_H_

#include <pybind11/pybind11.h>

namespace psync {

// Adds save_file, tensors_sha256, load_file, check_output_path,
// write_text_file and run_summary to `m`.
void DefineOutputs(pybind11::module_& m);

}  // namespace psync

#endif  // PSYNC_WORKER_TORCH_OUTPUT_BINDING_H_
