#include "worker/torch/output_binding.h"

#include <pybind11/stl.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config/job_config.h"
#include "common/format/output_path.h"
#include "common/format/safetensors.h"
#include "common/format/sha256.h"
#include "worker/summary_json.h"
#include "worker/torch/build_info.h"
#include "worker/torch/py_status.h"
#include "worker/torch/torch_job.h"
#include "worker/torch/torch_tensor.h"

namespace psync {
namespace {

namespace py = pybind11;

// The entries of `tensors` ({name: tensor}, in the dict's order), viewing
// the tensors' memory: valid while the dict holds them. A TypeError names
// the entry and what is wrong with it.
std::vector<SafetensorsEntry> Entries(const py::dict& tensors) {
  std::vector<SafetensorsEntry> entries;
  for (const auto& [key, value] : tensors) {
    if (!py::isinstance<py::str>(key)) {
      throw py::type_error(absl::StrCat("tensors: a key is a ", Py_TYPE(key.ptr())->tp_name,
                                        ", expected a str (the state_dict name)"));
    }
    const std::string name = key.cast<std::string>();
    TorchTensorBytes view;
    char error[256] = {};
    if (!ViewTorchTensorBytes(value.ptr(), &view, error, sizeof(error))) {
      throw py::type_error(absl::StrCat("tensors['", name, "'] ", error));
    }
    absl::StatusOr<SafetensorsDtype> dtype = ParseSafetensorsDtype(view.safetensors_dtype);
    Check(dtype.status());
    entries.push_back({name, std::vector<int64_t>(view.sizes, view.sizes + view.dims), view.data,
                       *dtype});
  }
  return entries;
}

// SHA-256 of the entries' bytes in order: a file's data section.
std::string DataSha256(const std::vector<SafetensorsEntry>& entries) {
  Sha256 sha;
  for (const SafetensorsEntry& e : entries) {
    uint64_t bytes = SafetensorsDtypeSize(e.dtype);
    for (int64_t d : e.shape) bytes *= static_cast<uint64_t>(d);
    sha.Update(e.data, bytes);
  }
  return sha.HexDigest();
}

std::string TensorsSha256(const py::dict& tensors) {
  const std::vector<SafetensorsEntry> entries = Entries(tensors);
  py::gil_scoped_release release;
  return DataSha256(entries);
}

// Writes `tensors` to `path` atomically; returns the SHA-256 of the data
// written. `flag`, when given, starts the message of an error.
std::string SaveFile(const py::dict& tensors, const std::string& path, const std::string& flag) {
  const std::vector<SafetensorsEntry> entries = Entries(tensors);
  absl::Status written;
  std::string digest;
  {
    py::gil_scoped_release release;
    written = WriteSafetensorsFile(path, entries, {{"format", "pt"}, {"producer", "psync"}});
    if (written.ok()) digest = DataSha256(entries);
  }
  if (!written.ok() && !flag.empty()) {
    written = absl::Status(written.code(), absl::StrCat(flag, ": ", written.message()));
  }
  Check(written);
  return digest;
}

// {name: tensor} of the file at `path`, in the file's data order.
py::dict LoadFile(const std::string& path) {
  absl::StatusOr<SafetensorsReader> reader = SafetensorsReader::Open(path, SafetensorsDtypes::kAll);
  if (!reader.ok()) {
    Check(absl::Status(reader.status().code(),
                       absl::StrCat("load_file: ", reader.status().message())));
  }
  py::dict out;
  std::vector<char*> dest;
  for (const SafetensorsEntryInfo& e : reader->entries()) {
    void* data = nullptr;
    char error[256] = {};
    PyObject* tensor = NewTorchTensor(std::string(SafetensorsDtypeName(e.dtype)).c_str(),
                                      e.shape.data(), static_cast<int64_t>(e.shape.size()),
                                      &data, error, sizeof(error));
    if (tensor == nullptr) {
      Check(absl::ResourceExhaustedError(
          absl::StrCat("load_file: ", path, ": tensor '", e.name, "' ", error)));
    }
    out[py::str(e.name)] = py::reinterpret_steal<py::object>(tensor);
    dest.push_back(static_cast<char*>(data));
  }
  absl::Status read;
  {
    py::gil_scoped_release release;
    read = reader->ReadEntries(dest, [](const char*, size_t) {});
  }
  if (!read.ok()) Check(absl::Status(read.code(), absl::StrCat("load_file: ", read.message())));
  return out;
}

// A user's figure as a JSON value: null, true/false, an integer, a number
// (null if not finite) or a string. A TypeError names the metric otherwise.
std::string MetricJson(const std::string& key, const py::handle& value) {
  if (value.is_none()) return "null";
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>() ? "true" : "false";
  if (py::isinstance<py::int_>(value)) return py::str(value).cast<std::string>();
  if (py::isinstance<py::float_>(value)) {
    const double v = value.cast<double>();
    return std::isfinite(v) ? absl::StrFormat("%.17g", v) : "null";
  }
  if (py::isinstance<py::str>(value)) return JsonString(value.cast<std::string>());
  throw py::type_error(absl::StrCat("metrics['", key, "'] is a ", Py_TYPE(value.ptr())->tp_name,
                                    ", expected a number, a str, a bool or None"));
}

// test_accuracy, test_loss and final_loss, which psync_worker measures
// itself, are the user's to give: a number or None.
double Figure(const std::string& key, const py::handle& value) {
  if (value.is_none()) return std::nan("");
  if (py::isinstance<py::bool_>(value) ||
      !(py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value))) {
    throw py::type_error(absl::StrCat("metrics['", key, "'] is a ", Py_TYPE(value.ptr())->tp_name,
                                      ", expected a number or None"));
  }
  return value.cast<double>();
}

// The --summary line of a torch worker's run of the job `args`: the members
// psync_worker writes (worker/summary_json.h), "torch_version", then the
// user's `metrics` in their order.
std::string RunSummary(const std::vector<std::string>& args, int64_t train_samples, int64_t steps,
                       double samples_per_sec, const std::string& weights_sha256,
                       const std::string& model, const py::dict& metrics) {
  absl::StatusOr<TorchJob> job = ReadTorchJob(args, train_samples);
  Check(job.status());
  RunFigures f;
  f.steps = steps;
  f.samples_per_sec = samples_per_sec;
  f.weights_sha256 = weights_sha256;
  f.model = model;
  std::string extra;
  for (const auto& [key, value] : metrics) {
    if (!py::isinstance<py::str>(key)) {
      throw py::type_error(absl::StrCat("metrics: a key is a ", Py_TYPE(key.ptr())->tp_name,
                                        ", expected a str"));
    }
    const std::string name = key.cast<std::string>();
    if (name == "test_accuracy") {
      f.test_accuracy = Figure(name, value);
    } else if (name == "test_loss") {
      f.test_loss = Figure(name, value);
    } else if (name == "final_loss") {
      f.final_loss = Figure(name, value);
    } else if (IsRunSummaryKey(name) || name == "torch_version") {
      throw py::value_error(absl::StrCat("metrics['", name, "']: the summary writes '", name,
                                         "' itself, expected another name"));
    } else {
      absl::StrAppend(&extra, ", ", JsonString(name), ": ", MetricJson(name, value));
    }
  }
  const int64_t global_batch = job->shape.GlobalBatch(job->num_workers);
  const int servers = static_cast<int>(ServerAddresses(job->config).size());
  return absl::StrCat("{", RunSummaryMembers(job->config, f, global_batch, train_samples, servers),
                      ", \"torch_version\": ", JsonString(kBuiltTorchVersion), extra, "}\n");
}

}  // namespace

void DefineOutputs(py::module_& m) {
  m.def("save_file", &SaveFile, py::arg("tensors"), py::arg("path"), py::arg("flag") = "");
  m.def("tensors_sha256", &TensorsSha256, py::arg("tensors"));
  m.def("load_file", &LoadFile, py::arg("path"));
  m.def(
      "check_output_path",
      [](const std::string& flag, const std::string& path) { Check(CheckOutputPath(flag, path)); },
      py::arg("flag"), py::arg("path"));
  m.def(
      "write_text_file",
      [](const std::string& flag, const std::string& path, const std::string& contents) {
        absl::Status written;
        {
          py::gil_scoped_release release;
          written = WriteFileAtomically(flag, path, contents);
        }
        Check(written);
      },
      py::arg("flag"), py::arg("path"), py::arg("contents"));
  m.def("run_summary", &RunSummary, py::arg("args"), py::arg("train_samples"), py::arg("steps"),
        py::arg("samples_per_sec"), py::arg("weights_sha256"), py::arg("model"),
        py::arg("metrics"));
}

}  // namespace psync
