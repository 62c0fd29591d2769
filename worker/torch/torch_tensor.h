// Views of torch tensors given as Python objects: the one file of psync
// that includes torch's headers (they are heavy: nothing else pays for
// them). It is compiled with the _GLIBCXX_USE_CXX11_ABI torch was built
// with, which may differ from the rest of psync's (a pip torch older than
// 2.7 uses the old one): its interface therefore passes only plain C types,
// whose layout that define does not change. Thread-compatible; call with
// the GIL held.
#ifndef PSYNC_WORKER_TORCH_TORCH_TENSOR_H_
#define PSYNC_WORKER_TORCH_TORCH_TENSOR_H_

#include <Python.h>

#include <cstddef>
#include <cstdint>

namespace psync {

// A tensor's memory and shape, valid while the tensor lives and is not
// resized.
struct TorchTensorView {
  float* data = nullptr;
  const int64_t* sizes = nullptr;
  int64_t dims = 0;
};

// Fills `view` if `object` is a torch.Tensor that is dense, contiguous,
// float32 and on the CPU. Otherwise returns false and writes why into
// `error` (nul-terminated, at most `error_size` bytes), e.g. "is
// torch.float64, expected torch.float32".
bool ViewTorchTensor(PyObject* object, TorchTensorView* view, char* error, size_t error_size);

// A tensor's bytes, of any dtype a safetensors file holds, valid while the
// tensor lives and is not resized.
struct TorchTensorBytes {
  const void* data = nullptr;
  const int64_t* sizes = nullptr;
  int64_t dims = 0;
  const char* safetensors_dtype = nullptr;  // "F32", "I64", "BOOL", ...: static storage
};

// Fills `view` if `object` is a torch.Tensor that is dense, contiguous, on
// the CPU and of a dtype safetensors stores (float64, float32, float16,
// bfloat16, int64, int32, int16, int8, uint8, bool). Otherwise returns
// false and writes why into `error`, as ViewTorchTensor does.
bool ViewTorchTensorBytes(PyObject* object, TorchTensorBytes* view, char* error,
                          size_t error_size);

// A new CPU tensor (a new reference) of the safetensors dtype
// `safetensors_dtype` ("F32", "I64", ...) and shape sizes[0 .. dims), its
// memory uninitialised and given in `*data`. Null, with why in `error`,
// for a dtype torch lacks or a tensor it cannot allocate.
PyObject* NewTorchTensor(const char* safetensors_dtype, const int64_t* sizes, int64_t dims,
                         void** data, char* error, size_t error_size);

// Tells autograd that the data of `object` (a tensor ViewTorchTensor
// accepted) was written in place: its version moves on, so a backward that
// saved the old values fails instead of using the new ones.
void MarkTorchTensorWritten(PyObject* object);

}  // namespace psync

#endif  // PSYNC_WORKER_TORCH_TORCH_TENSOR_H_
