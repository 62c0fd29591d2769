#include "worker/torch/torch_tensor.h"

#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>

#include <cstdio>
#include <cstring>
#include <exception>
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

// The dtypes a safetensors file and torch share, by their names in each.
struct DtypeName {
  at::ScalarType type;
  const char* safetensors;
};

constexpr DtypeName kDtypes[] = {
    {at::kDouble, "F64"}, {at::kFloat, "F32"}, {at::kHalf, "F16"}, {at::kBFloat16, "BF16"},
    {at::kLong, "I64"},   {at::kInt, "I32"},   {at::kShort, "I16"}, {at::kChar, "I8"},
    {at::kByte, "U8"},    {at::kBool, "BOOL"},
};

// Dense, CPU and contiguous: memory the caller can read or write as it is.
bool CheckPlain(const at::Tensor& t, char* error, size_t error_size) {
  if (t.layout() != at::kStrided) {
    std::snprintf(error, error_size, "is sparse, expected a dense tensor");
    return false;
  }
  if (!t.device().is_cpu()) {
    std::snprintf(error, error_size, "is on %s, expected a CPU tensor",
                  t.device().str().c_str());
    return false;
  }
  if (!t.is_contiguous()) {
    std::snprintf(error, error_size, "is not contiguous, expected a contiguous tensor");
    return false;
  }
  return true;
}

}  // namespace

bool ViewTorchTensorBytes(PyObject* object, TorchTensorBytes* view, char* error,
                          size_t error_size) {
  if (!THPVariable_Check(object)) {
    std::snprintf(error, error_size, "is a %s, expected a torch.Tensor", Py_TYPE(object)->tp_name);
    return false;
  }
  const at::Tensor& t = THPVariable_Unpack(object);
  const DtypeName* found = nullptr;
  for (const DtypeName& d : kDtypes) {
    if (d.type == t.scalar_type()) found = &d;
  }
  if (found == nullptr) {
    std::snprintf(error, error_size,
                  "is %s, expected a dtype safetensors stores (float64, float32, float16, "
                  "bfloat16, int64, int32, int16, int8, uint8 or bool)",
                  DTypeName(object).c_str());
    return false;
  }
  if (!CheckPlain(t, error, error_size)) return false;
  view->data = t.data_ptr();
  view->sizes = t.sizes().data();
  view->dims = static_cast<int64_t>(t.dim());
  view->safetensors_dtype = found->safetensors;
  return true;
}

PyObject* NewTorchTensor(const char* safetensors_dtype, const int64_t* sizes, int64_t dims,
                         void** data, char* error, size_t error_size) {
  for (const DtypeName& d : kDtypes) {
    if (std::strcmp(d.safetensors, safetensors_dtype) != 0) continue;
    try {
      at::Tensor t = at::empty(at::IntArrayRef(sizes, static_cast<size_t>(dims)),
                               at::TensorOptions().dtype(d.type));
      *data = t.data_ptr();
      return THPVariable_Wrap(std::move(t));
    } catch (const std::exception& e) {
      std::snprintf(error, error_size, "cannot be allocated: %s", e.what());
      return nullptr;
    }
  }
  std::snprintf(error, error_size, "has dtype %s, which torch lacks", safetensors_dtype);
  return nullptr;
}

bool ViewTorchTensor(PyObject* object, TorchTensorView* view, char* error, size_t error_size) {
  if (!THPVariable_Check(object)) {
    std::snprintf(error, error_size, "is a %s, expected a torch.Tensor", Py_TYPE(object)->tp_name);
    return false;
  }
  const at::Tensor& t = THPVariable_Unpack(object);
  // The dtype before contiguity, as before: a float64 tensor is refused as one.
  if (t.layout() == at::kStrided && t.device().is_cpu() && t.scalar_type() != at::kFloat) {
    std::snprintf(error, error_size, "is %s, expected torch.float32", DTypeName(object).c_str());
    return false;
  }
  if (!CheckPlain(t, error, error_size)) return false;
  view->data = t.data_ptr<float>();
  view->sizes = t.sizes().data();
  view->dims = static_cast<int64_t>(t.dim());
  return true;
}

void MarkTorchTensorWritten(PyObject* object) {
  torch::autograd::impl::bump_version(THPVariable_Unpack(object));
}

}  // namespace psync
