// The number formats gradients and weights may travel in between workers
// and servers (--wire_dtype), and the conversions between them and the
// float32 everything is computed in. A 2-byte format halves the bytes of a
// step; precision is lost only in transit: servers keep float32 master
// weights and sum gradients in float32.
//
//   float32  IEEE binary32, copied as is.
//   bf16     bfloat16: float32's upper half (float32's range, 8 significant
//            bits), rounded to nearest, ties to even.
//   fp16     IEEE binary16 (largest finite 65504, 11 significant bits,
//            subnormals down to 2^-24), rounded to nearest, ties to even,
//            subnormals included.
// Rounding past the largest finite value gives +-Inf (as round-to-nearest-
// even does); +-Inf and +-0 stay themselves; a NaN stays a NaN, made quiet,
// its sign and the upper bits of its payload kept. Widening is exact.
//
// Wire values are little-endian, and no pointer here needs any alignment
// (payloads sit at arbitrary offsets of received messages). Ranges passed to
// one call must not overlap.
//
// Thread-safe: nothing here keeps state. The conversions run over whole
// gradients (tens of MiB a step), so they are written to be memory bound:
// branch-free loops GCC vectorises at -O2, and F16C instructions for fp16
// where the CPU has them (chosen at run time; same results bit for bit).
// They assume the default floating-point rounding mode (to nearest).
#ifndef PSYNC_COMMON_WIRE_WIRE_DTYPE_H_
#define PSYNC_COMMON_WIRE_WIRE_DTYPE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/wire/byte_pieces.h"

namespace psync {

enum class WireDType { kFloat32, kBf16, kFp16 };

// The names ParseWireDType takes, as errors list them: "float32, bf16 or
// fp16".
std::string WireDTypeChoices();

// "float32", "bf16" or "fp16", as --wire_dtype takes it; anything else is an
// InvalidArgument error naming the value.
absl::StatusOr<WireDType> ParseWireDType(absl::string_view text);

// The name ParseWireDType takes.
absl::string_view WireDTypeName(WireDType dtype);

// Bytes of one value on the wire: 4, 2 or 2.
int WireBytes(WireDType dtype);

// What a chunk of `num_elements` values must have on the wire, as errors
// say it: "1024" for float32, "512 (256 values of bf16)" otherwise.
std::string ExpectedWireBytes(int64_t num_elements, WireDType dtype);

// Writes in[0..n) as n * WireBytes(dtype) bytes at `out`. REQUIRES: n >= 0.
void EncodeWire(WireDType dtype, const float* in, int64_t n, char* out);

// What narrowed values are: a worker's gradients on their way to the
// servers, or the servers' weights on their way to the workers.
enum class NarrowedValues { kGradient, kWeights };

// OK unless a finite value of in[0..n), elements first.. of `what` of
// tensor `tensor`, would narrow to +-Inf in `dtype` (fp16: magnitude 65520
// and above; bf16: near float32's largest): OUT_OF_RANGE naming the tensor,
// the element and its value, and the dtypes that hold it. Values already
// infinite or NaN pass (the model's own, as in float32).
absl::Status CheckNarrowable(WireDType dtype, const float* in, int64_t n, NarrowedValues what,
                             absl::string_view tensor, int64_t first);

// EncodeWire, then CheckNarrowable's verdict: the encoded values are looked
// at (half the bytes, just written), and the input only where one of them
// is infinite or NaN.
absl::Status EncodeWireChecked(WireDType dtype, const float* in, int64_t n, char* out,
                               NarrowedValues what, absl::string_view tensor, int64_t first);

// Reads n values (n * WireBytes(dtype) bytes at `in`) into out[0..n).
void DecodeWire(WireDType dtype, const char* in, int64_t n, float* out);

// out[i] += the i-th value at `in`, for i < n: sums received gradients
// without a float32 copy of each.
void DecodeAddWire(WireDType dtype, const char* in, int64_t n, float* out);

// DecodeWire (or, with `add`, DecodeAddWire) over a received payload's
// pieces, whose values may straddle two pieces: float32 is copied as is.
// REQUIRES: the pieces hold exactly as many whole values as `out` takes.
void DecodePieces(WireDType dtype, const BytePieces& pieces, float* out, bool add = false);

}  // namespace psync

#endif  // PSYNC_COMMON_WIRE_WIRE_DTYPE_H_
