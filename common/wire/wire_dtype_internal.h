// The two implementations of the fp16 conversions behind common/wire/wire_dtype.h,
// so that wire_dtype_test can check the portable one on a CPU that has F16C
// and compare the two. Not for other callers: EncodeWire and friends choose.
#ifndef PSYNC_COMMON_WIRE_WIRE_DTYPE_INTERNAL_H_
#define PSYNC_COMMON_WIRE_WIRE_DTYPE_INTERNAL_H_

#include <cstdint>

namespace psync {
namespace wire_dtype_internal {

// Whether this CPU (and OS) can run the F16C kernels; where not, they fall
// back to the portable ones. False on every CPU other than x86.
bool HaveF16c();

// Plain C++ the compiler vectorises.
void EncodeFp16Portable(const float* in, int64_t n, char* out);
void DecodeFp16Portable(const char* in, int64_t n, float* out);
void DecodeAddFp16Portable(const char* in, int64_t n, float* out);

// VCVTPS2PH / VCVTPH2PS, 8 values at a time.
void EncodeFp16F16c(const float* in, int64_t n, char* out);
void DecodeFp16F16c(const char* in, int64_t n, float* out);
void DecodeAddFp16F16c(const char* in, int64_t n, float* out);

}  // namespace wire_dtype_internal
}  // namespace psync

#endif  // PSYNC_COMMON_WIRE_WIRE_DTYPE_INTERNAL_H_
