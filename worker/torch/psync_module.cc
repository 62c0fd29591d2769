// _psync: the Python extension module of the torch binding (pybind11). A
// Client wraps a TensorClient made from the job's arguments; tensors come
// in as Python objects and are viewed through torch_tensor.h, so this file
// includes no torch header. Every call that may wait releases the GIL. A
// Status that is not OK becomes psync.Error (a RuntimeError) with the
// client's message and its code, or psync.InvalidArgumentError (also a
// ValueError) for INVALID_ARGUMENT; a tensor torch_tensor.h refuses is a
// TypeError naming it. The files a run writes are output_binding.h's.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/config/job_config.h"
#include "common/config/worker_set.h"
#include "worker/torch/build_info.h"
#include "worker/torch/output_binding.h"
#include "worker/torch/py_status.h"
#include "worker/torch/tensor_client.h"
#include "worker/torch/tensor_client_factory.h"
#include "worker/torch/torch_job.h"
#include "worker/torch/torch_tensor.h"

namespace psync {
namespace {

namespace py = pybind11;

// The module's exception types, made once when it is imported (CPython
// keeps a module's exception types for the life of the interpreter).
PyObject* error_type = nullptr;
PyObject* invalid_argument_type = nullptr;

void TranslateStatus(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const StatusException& e) {
    PyObject* type = absl::IsInvalidArgument(e.status()) ? invalid_argument_type : error_type;
    py::object error = py::reinterpret_borrow<py::object>(type)(e.what());
    error.attr("code") = absl::StatusCodeToString(e.status().code());
    PyErr_SetObject(type, error.ptr());
  }
}

// Tensors [first, first + len(tensors)) of `layout` as views; a TypeError
// names the argument, the tensor and what is wrong with it.
std::vector<TensorView> Views(const char* what, const py::sequence& tensors, int first,
                              const Layout& layout) {
  std::vector<TensorView> views;
  for (size_t k = 0; k < tensors.size(); ++k) {
    py::object tensor = tensors[k];
    TorchTensorView view;
    char error[256] = {};
    if (!ViewTorchTensor(tensor.ptr(), &view, error, sizeof(error))) {
      const size_t i = first + k;
      const std::string name =
          i < layout.tensors().size() ? absl::StrCat(" '", layout.tensors()[i].name, "'") : "";
      throw py::type_error(absl::StrCat(what, "[", k, "] (tensor ", i, name, ") ", error));
    }
    views.push_back({view.data, std::vector<int64_t>(view.sizes, view.sizes + view.dims)});
  }
  return views;
}

void MarkWritten(const py::sequence& tensors) {
  for (size_t k = 0; k < tensors.size(); ++k) MarkTorchTensorWritten(py::object(tensors[k]).ptr());
}

PullPrecision ParsePrecision(const std::string& precision) {
  if (precision == "wire") return PullPrecision::kWire;
  if (precision == "master") return PullPrecision::kMaster;
  throw py::value_error(
      absl::StrCat("precision is '", precision, "', expected 'wire' or 'master'"));
}

// (first_step, ranks, weights), as psync.torch.Client.members gives a set.
py::tuple SetTuple(const WorkerSet& set) {
  return py::make_tuple(set.first_step, set.ranks, set.weights);
}

// Thread-safe as TensorClient is; its own state is guarded by the GIL.
class Client {
 public:
  Client(const std::vector<std::string>& args,
         const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
         int64_t train_samples, const std::string& unset_init,
         const std::optional<std::vector<std::pair<std::string, std::string>>>& frozen) {
    std::vector<TensorSpec> specs;
    for (const auto& [name, shape] : tensors) specs.push_back({name, shape});
    absl::StatusOr<InitSource> init = ParseInitSource(unset_init);
    Check(init.status());
    std::optional<std::vector<TensorDigest>> digests;
    if (frozen.has_value()) {
      digests.emplace();
      for (const auto& [name, sha256] : *frozen) digests->push_back({name, sha256});
    }
    absl::StatusOr<std::unique_ptr<TensorClient>> made =
        CreateTensorClient(args, std::move(specs), train_samples, *init, std::move(digests));
    Check(made.status());
    client_ = *std::move(made);
  }

  // A client dropped with push-pulls started and not waited for (an
  // optimizer abandoned after an error) cancels them rather than waiting
  // for their deadline, and lets other Python threads run while its calls
  // and threads end.
  ~Client() {
    if (!started_.empty()) client_->Cancel();
    py::gil_scoped_release release;
    client_.reset();
  }

  py::list Tensors() const {
    py::list tensors;
    for (const TensorSpec& spec : client_->layout().tensors()) {
      tensors.append(py::make_tuple(spec.name, py::tuple(py::cast(spec.shape))));
    }
    return tensors;
  }

  uint64_t Fingerprint() const { return client_->layout().fingerprint(); }

  int64_t Register() {
    absl::StatusOr<int64_t> version;
    {
      py::gil_scoped_release release;
      version = client_->Register();
    }
    Check(version.status());
    return *version;
  }

  void Pull(int64_t version, const py::sequence& weights, const std::string& precision) {
    const PullPrecision p = ParsePrecision(precision);
    const std::vector<TensorView> views = Views("weights", weights, 0, client_->layout());
    absl::Status pulled;
    {
      py::gil_scoped_release release;
      pulled = client_->Pull(version, p, views);
    }
    Check(pulled);
    MarkWritten(weights);
  }

  void StartPushPull(int64_t step, int64_t sample_count, int first_tensor,
                     const py::sequence& grads, const py::sequence& weights, float grad_scale) {
    const std::vector<TensorView> g = Views("grads", grads, first_tensor, client_->layout());
    const std::vector<TensorView> w = Views("weights", weights, first_tensor, client_->layout());
    started_.push_back(weights);  // alive until Wait has written them
    absl::Status started;
    {
      py::gil_scoped_release release;
      started = client_->StartPushPull(step, sample_count, first_tensor, g, w, grad_scale);
    }
    if (!started.ok()) started_.pop_back();
    Check(started);
  }

  void Wait() {
    // Those started before this call; another thread may start more meanwhile.
    const size_t waited_for = started_.size();
    absl::Status waited;
    {
      py::gil_scoped_release release;
      waited = client_->Wait();
    }
    std::vector<py::sequence> done(started_.begin(), started_.begin() + waited_for);
    started_.erase(started_.begin(), started_.begin() + waited_for);
    Check(waited);
    for (const py::sequence& weights : done) MarkWritten(weights);
  }

  void PushPull(int64_t step, int64_t sample_count, const py::sequence& grads,
                const py::sequence& weights) {
    StartPushPull(step, sample_count, 0, grads, weights, 1.0f);
    Wait();
  }

  void Finish(int64_t version) {
    absl::Status finished;
    {
      py::gil_scoped_release release;
      finished = client_->Finish(version);
    }
    Check(finished);
  }

  void Cancel() { client_->Cancel(); }

  // The servers' set of members at the last registration, as a list of one
  // (first_step, ranks, weights); None where they named none (a server
  // older than elastic jobs).
  py::object Members() {
    std::optional<WorkerSet> members;
    {
      py::gil_scoped_release release;
      members = client_->Members();
    }
    if (!members.has_value()) return py::none();
    py::list sets;
    sets.append(SetTuple(*members));
    return std::move(sets);
  }

  void Leave() {
    py::gil_scoped_release release;
    client_->Leave();
  }

 private:
  std::unique_ptr<TensorClient> client_;
  std::vector<py::sequence> started_;
};

// WorkerSet::ShareOf: the [begin, end) of `rank` among `samples` samples
// divided by `weights` among `ranks`, the rule psync_worker's sharding and
// the servers share; (0, 0) for a rank that is not among them.
std::pair<int64_t, int64_t> ShareOf(const std::vector<int>& ranks,
                                    const std::vector<double>& weights, int rank,
                                    int64_t samples) {
  if (samples < 0) {
    Check(absl::InvalidArgumentError(
        absl::StrCat("share_of: samples is ", samples, ", expected 0 or more")));
  }
  WorkerSet set;
  set.ranks = ranks;
  set.weights = weights;
  const int num_workers = ranks.empty() ? 0 : *std::max_element(ranks.begin(), ranks.end()) + 1;
  Check(set.Validate(num_workers));
  return set.ShareOf(rank, samples);
}

// The job `args` describe, as psync.torch.init shows it: what a torch
// worker needs to know of its configuration to cut its batches.
py::dict ReadJob(const std::vector<std::string>& args, int64_t train_samples) {
  absl::StatusOr<TorchJob> job = ReadTorchJob(args, train_samples);
  Check(job.status());
  py::dict d;
  d["worker_rank"] = job->worker_rank;
  d["num_workers"] = job->num_workers;
  d["min_workers"] = job->min_workers;
  d["devices"] = job->shape.devices;
  d["device"] = job->config.training().device();
  d["batch_per_device"] = job->shape.batch_per_device;
  d["accumulation_steps"] = job->shape.accumulation_steps;
  d["steps"] = job->shape.total_steps;
  d["seed"] = job->shape.seed;
  d["train_samples"] = train_samples;
  d["deterministic"] = job->config.training().deterministic();
  d["data_dir"] = job->config.data().data_dir();
  // Left out of the job's configuration, a torch worker starts from worker
  // 0's model, as DDP starts from rank 0's.
  d["init_from"] =
      std::string(InitSourceName(InitSourceOf(job->config).value_or(InitSource::kWorker)));
  d["overlap"] = job->config.training().overlap();
  d["overlap_min_kb"] = job->config.training().overlap_min_kb();
  d["wire_dtype"] = job->config.training().wire_dtype();
  d["export_path"] = job->config.output().export_path();
  d["checkpoint_dir"] = job->config.checkpoint().checkpoint_dir();
  d["summary"] = job->config.output().summary();
  return d;
}

void DefineErrors(py::module_& m) {
  error_type = PyErr_NewExceptionWithDoc(
      "psync.Error",
      "A call to the servers failed; `code` is the status code (e.g. 'ABORTED': register again).",
      PyExc_RuntimeError, nullptr);
  py::tuple bases = py::make_tuple(py::handle(error_type), py::handle(PyExc_ValueError));
  invalid_argument_type = PyErr_NewExceptionWithDoc(
      "psync.InvalidArgumentError", "The arguments of a call were wrong; also a ValueError.",
      bases.ptr(), nullptr);
  m.attr("Error") = py::handle(error_type);
  m.attr("InvalidArgumentError") = py::handle(invalid_argument_type);
  py::register_exception_translator(&TranslateStatus);
}

}  // namespace
}  // namespace psync

PYBIND11_MODULE(_psync, m) {
  namespace py = pybind11;
  using psync::Client;
  m.doc() = "psync's C++ client of the parameter servers (see psync.torch for the Python API).";
  m.attr("built_torch_version") = psync::kBuiltTorchVersion;
  m.attr("built_cxx11_abi") = psync::kBuiltTorchCxx11Abi;
  psync::DefineErrors(m);
  // The push step whose values are the servers' initial weights (--init_from=worker).
  m.attr("INITIAL_WEIGHTS_STEP") = psync::kInitialWeightsStep;
  m.def("read_job", &psync::ReadJob, py::arg("args"), py::arg("train_samples") = 0);
  m.def("share_of", &psync::ShareOf, py::arg("ranks"), py::arg("weights"), py::arg("rank"),
        py::arg("samples"));
  psync::DefineOutputs(m);
  py::class_<Client>(m, "Client")
      .def(py::init<const std::vector<std::string>&,
                    const std::vector<std::pair<std::string, std::vector<int64_t>>>&, int64_t,
                    const std::string&,
                    const std::optional<std::vector<std::pair<std::string, std::string>>>&>(),
           py::arg("args"), py::arg("tensors"), py::arg("train_samples"), py::arg("unset_init"),
           py::arg("frozen"))
      .def_property_readonly("tensors", &Client::Tensors)
      .def_property_readonly("layout_fingerprint", &Client::Fingerprint)
      .def("register", &Client::Register)
      .def("pull", &Client::Pull, py::arg("version"), py::arg("weights"),
           py::arg("precision") = "wire")
      .def("start_push_pull", &Client::StartPushPull, py::arg("step"), py::arg("sample_count"),
           py::arg("first_tensor"), py::arg("grads"), py::arg("weights"),
           py::arg("grad_scale") = 1.0f)
      .def("wait", &Client::Wait)
      .def("push_pull", &Client::PushPull, py::arg("step"), py::arg("sample_count"),
           py::arg("grads"), py::arg("weights"))
      .def("finish", &Client::Finish, py::arg("version"))
      .def("cancel", &Client::Cancel)
      .def("members", &Client::Members)
      .def("leave", &Client::Leave);
}
