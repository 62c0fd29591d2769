#include "worker/torch/torch_tensor.h"

#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>

#include <cstdio>
#include <string>

namespace psync {
namespace {

// As Python prints it: "torch.float64".
std::string DTypeName(PyObject* object) {
  std::string name = "another dtype";
  PyObject* dtype = PyObject_GetAttrString(object, "dtype");
  PyObject* text = dtype != nullptr ? PyObject_Str(dtype) : nullptr;
  const char* utf8 = text != nullptr ? PyUnicode_AsUTF8(text) : nullptr;
  if (utf8 != nullptr) name = utf8;
  Py_XDECREF(text);
  Py_XDECREF(dtype);
  PyErr_Clear();
  return name;
}

}  // namespace

bool ViewTorchTensor(PyObject* object, TorchTensorView* view, char* error, size_t error_size) {
  if (!THPVariable_Check(object)) {
    std::snprintf(error, error_size, "is a %s, expected a torch.Tensor", Py_TYPE(object)->tp_name);
    return false;
  }
  const at::Tensor& t = THPVariable_Unpack(object);
  if (t.layout() != at::kStrided) {
    std::snprintf(error, error_size, "is sparse, expected a dense tensor");
    return false;
  }
  if (!t.device().is_cpu()) {
    std::snprintf(error, error_size, "is on %s, expected a CPU tensor",
                  t.device().str().c_str());
    return false;
  }
  if (t.scalar_type() != at::kFloat) {
    std::snprintf(error, error_size, "is %s, expected torch.float32", DTypeName(object).c_str());
    return false;
  }
  if (!t.is_contiguous()) {
    std::snprintf(error, error_size, "is not contiguous, expected a contiguous tensor");
    return false;
  }
  view->data = t.data_ptr<float>();
  view->sizes = t.sizes().data();
  view->dims = static_cast<int64_t>(t.dim());
  return true;
}

void MarkTorchTensorWritten(PyObject* object) {
  torch::autograd::impl::bump_version(THPVariable_Unpack(object));
}

}  // namespace psync
