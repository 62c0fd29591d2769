#include "common/wire/wire_dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "common/config/enum_names.h"
#include "common/wire/wire_dtype_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PSYNC_WIRE_X86 1
#endif

// Values are stored with the host's byte order; the wire's is little.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "wire_dtype.cc writes wire values in the host's byte order");

namespace psync {
namespace wire_dtype_internal {
namespace {

// Values per inner loop. GCC 12 at -O2 vectorises only loops its "very
// cheap" cost model accepts: no scalar remainder and no run-time alias
// check. So each kernel runs whole blocks of a constant kBlock values
// between __restrict pointers, and the last n % kBlock one at a time.
constexpr int64_t kBlock = 64;

// Every load and store in the loops goes through __builtin_memcpy, not
// std::memcpy: with -D_FORTIFY_SOURCE (Bazel's opt mode sets it) the latter
// becomes a __memcpy_chk call the vectoriser cannot see through, and every
// loop stays scalar (2-4x slower).
template <typename T>
inline T Load(const char* p) {
  T v;
  __builtin_memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
inline void Store(char* p, T v) {
  __builtin_memcpy(p, &v, sizeof(T));
}

inline uint32_t BitsOf(float f) { return Load<uint32_t>(reinterpret_cast<const char*>(&f)); }

inline float FloatOf(uint32_t u) { return Load<float>(reinterpret_cast<const char*>(&u)); }

// All ones if `c`, else 0. The fp16 selects are written as masks because
// with ?: GCC 12 kept the loops scalar ("control flow in loop").
inline uint32_t MaskIf(bool c) { return 0u - static_cast<uint32_t>(c); }

inline uint32_t Select(uint32_t mask, uint32_t if_set, uint32_t if_clear) {
  return (if_set & mask) | (if_clear & ~mask);
}

// float32 bits -> bfloat16 bits. Adding 0x7fff plus the kept half's lowest
// bit carries into the kept half exactly when the dropped half is above
// 0x8000, or equal to it with an odd kept half: ties to even. A carry out of
// the largest finite mantissa lands on the exponent, giving Inf. A NaN gets
// its quiet bit set and its dropped half cleared first, so that no carry
// can turn it into Inf (or wrap the sign); one select on 32 bits, so that
// the vectorised loop narrows to 16 bits once.
inline uint32_t Bf16Bits(uint32_t x) {
  const uint32_t nan = MaskIf((x & 0x7fffffffu) > 0x7f800000u);
  x = (x | (nan & 0x00400000u)) & ~(nan & 0xffffu);
  return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}

// float32 bits -> binary16 bits (after Fabian Giesen's float_to_half_fast3_rtne),
// every case computed and the right one selected.
inline uint32_t Fp16Bits(uint32_t x) {
  const uint32_t a = x & 0x7fffffffu;
  // |x| >= 2^-14: rebias the exponent (127 -> 15) and round the 13 dropped
  // bits as Bf16Bits does; a carry may run on into the exponent, up to Inf.
  const uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // |x| < 2^-14: adding 0.5 lines the subnormal's 10 bits up with the last
  // bits of a float in [0.5, 1), and the FPU rounds them to nearest even.
  const uint32_t subnormal = BitsOf(FloatOf(a) + 0.5f) - BitsOf(0.5f);
  // |x| >= 2^16, Inf and NaN. (65520 up to 2^16, the largest finite's tie
  // and above, reach Inf through the carry above.)
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  const uint32_t huge = Select(MaskIf(a > 0x7f800000u), nan, 0x7c00u);
  uint32_t h = Select(MaskIf(a < (113u << 23)), subnormal, normal);
  h = Select(MaskIf(a >= (143u << 23)), huge, h);
  return h | ((x >> 16) & 0x8000u);
}

// binary16 bits -> float32 bits, exact.
inline uint32_t Fp16ToFloatBits(uint32_t h) {
  const uint32_t shifted = (h & 0x7fffu) << 13;  // exponent and mantissa
  const uint32_t exponent = shifted & (0x1fu << 23);
  const uint32_t normal = shifted + (112u << 23);  // rebias 15 -> 127
  const uint32_t inf_nan = shifted + (224u << 23);  // exponent 31 -> 255
  // Exponent 0: as if 2^-14 * 1.m, less the 2^-14 that the implicit bit
  // added (exact: both are floats of the same exponent).
  const uint32_t subnormal =
      BitsOf(FloatOf(shifted + (113u << 23)) - FloatOf(113u << 23));
  uint32_t f = Select(MaskIf(exponent == (0x1fu << 23)), inf_nan, normal);
  f = Select(MaskIf(exponent == 0), subnormal, f);
  return f | ((h & 0x8000u) << 16);
}

// out value i = op(in value i, out value i) for i < count, values of types
// In and Out read and written at any alignment; the out value
// is read only when kReadOut (DecodeAdd). __restrict here, in the function
// that holds the loop, is what spares the loop an alias check.
template <typename In, typename Out, bool kReadOut, typename Op>
inline void MapRange(const char* __restrict in, int64_t count, char* __restrict out, Op op) {
  for (int64_t i = 0; i < count; ++i) {
    Out y{};
    if constexpr (kReadOut) y = Load<Out>(out + i * sizeof(Out));
    Store<Out>(out + i * sizeof(Out), op(Load<In>(in + i * sizeof(In)), y));
  }
}

// MapRange over n values: whole blocks (vectorised), then the rest.
template <typename In, typename Out, bool kReadOut, typename Op>
inline void Map(const char* in, int64_t n, char* out, Op op) {
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    MapRange<In, Out, kReadOut>(in + i * sizeof(In), kBlock, out + i * sizeof(Out), op);
  }
  MapRange<In, Out, kReadOut>(in + i * sizeof(In), n - i, out + i * sizeof(Out), op);
}

// The byte pointers below: float pointers may be misaligned too, and the
// compiler must not assume otherwise.
void EncodeBf16(const char* in, int64_t n, char* out) {
  Map<uint32_t, uint16_t, false>(
      in, n, out, [](uint32_t x, uint16_t) { return static_cast<uint16_t>(Bf16Bits(x)); });
}

void DecodeBf16(const char* in, int64_t n, char* out) {
  Map<uint16_t, float, false>(in, n, out,
                              [](uint16_t b, float) { return FloatOf(uint32_t{b} << 16); });
}

void DecodeAddBf16(const char* in, int64_t n, char* out) {
  Map<uint16_t, float, true>(
      in, n, out, [](uint16_t b, float sum) { return sum + FloatOf(uint32_t{b} << 16); });
}

void DecodeAddFloat32(const char* in, int64_t n, char* out) {
  Map<float, float, true>(in, n, out, [](float x, float sum) { return sum + x; });
}

}  // namespace

void EncodeFp16Portable(const float* in, int64_t n, char* out) {
  Map<uint32_t, uint16_t, false>(
      reinterpret_cast<const char*>(in), n, out,
      [](uint32_t x, uint16_t) { return static_cast<uint16_t>(Fp16Bits(x)); });
}

void DecodeFp16Portable(const char* in, int64_t n, float* out) {
  Map<uint16_t, float, false>(in, n, reinterpret_cast<char*>(out), [](uint16_t h, float) {
    return FloatOf(Fp16ToFloatBits(h));
  });
}

void DecodeAddFp16Portable(const char* in, int64_t n, float* out) {
  Map<uint16_t, float, true>(in, n, reinterpret_cast<char*>(out), [](uint16_t h, float sum) {
    return sum + FloatOf(Fp16ToFloatBits(h));
  });
}

#ifdef PSYNC_WIRE_X86

bool HaveF16c() {
  // Checks that the OS saves AVX state too; runs once.
  static const bool have = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") != 0 && __builtin_cpu_supports("f16c") != 0;
  }();
  return have;
}

namespace {

// The F16C loops convert whole groups of 8 and return how many values they
// did; the rest is left to portable code outside them, since everything
// inside a target("avx") function may be VEX-encoded (the fallback too,
// which would then fault on the CPUs it exists for).

// Immediate 0 of VCVTPS2PH: round to nearest even, whatever MXCSR says.
__attribute__((target("avx,f16c"))) int64_t EncodeFp16Groups(const float* in, int64_t n,
                                                             char* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  return i;
}

// out[i] = value i, or with kAdd out[i] += value i (DecodeAdd).
template <bool kAdd>
__attribute__((target("avx,f16c"))) int64_t DecodeFp16Groups(const char* in, int64_t n,
                                                             float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    if constexpr (kAdd) {
      _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), _mm256_cvtph_ps(h)));
    } else {
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
  }
  return i;
}

}  // namespace

void EncodeFp16F16c(const float* in, int64_t n, char* out) {
  const int64_t done = HaveF16c() ? EncodeFp16Groups(in, n, out) : 0;
  EncodeFp16Portable(in + done, n - done, out + 2 * done);
}

void DecodeFp16F16c(const char* in, int64_t n, float* out) {
  const int64_t done = HaveF16c() ? DecodeFp16Groups<false>(in, n, out) : 0;
  DecodeFp16Portable(in + 2 * done, n - done, out + done);
}

void DecodeAddFp16F16c(const char* in, int64_t n, float* out) {
  const int64_t done = HaveF16c() ? DecodeFp16Groups<true>(in, n, out) : 0;
  DecodeAddFp16Portable(in + 2 * done, n - done, out + done);
}

#else  // !PSYNC_WIRE_X86

bool HaveF16c() { return false; }

void EncodeFp16F16c(const float* in, int64_t n, char* out) { EncodeFp16Portable(in, n, out); }

void DecodeFp16F16c(const char* in, int64_t n, float* out) { DecodeFp16Portable(in, n, out); }

void DecodeAddFp16F16c(const char* in, int64_t n, float* out) {
  DecodeAddFp16Portable(in, n, out);
}

#endif  // PSYNC_WIRE_X86

}  // namespace wire_dtype_internal

namespace {

constexpr EnumName<WireDType> kWireDTypes[] = {
    {WireDType::kFloat32, "float32"}, {WireDType::kBf16, "bf16"}, {WireDType::kFp16, "fp16"}};

}  // namespace

absl::StatusOr<WireDType> ParseWireDType(absl::string_view text) {
  return ParseEnumName(kWireDTypes, "--wire_dtype", text);
}

std::string WireDTypeChoices() { return EnumChoices(kWireDTypes); }

absl::string_view WireDTypeName(WireDType dtype) { return EnumNameOf(kWireDTypes, dtype); }

int WireBytes(WireDType dtype) { return dtype == WireDType::kFloat32 ? 4 : 2; }

std::string ExpectedWireBytes(int64_t num_elements, WireDType dtype) {
  const int64_t bytes = num_elements * WireBytes(dtype);
  if (dtype == WireDType::kFloat32) return absl::StrCat(bytes);
  return absl::StrCat(bytes, " (", num_elements, " values of ", WireDTypeName(dtype), ")");
}

// One dispatch per call; the kernels run the loops.
void EncodeWire(WireDType dtype, const float* in, int64_t n, char* out) {
  namespace wi = wire_dtype_internal;
  if (n <= 0) return;
  switch (dtype) {
    case WireDType::kFloat32:
      std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
      return;
    case WireDType::kBf16:
      return wi::EncodeBf16(reinterpret_cast<const char*>(in), n, out);
    case WireDType::kFp16:
      return wi::EncodeFp16F16c(in, n, out);  // portable where the CPU lacks F16C
  }
}

absl::Status CheckNarrowable(WireDType dtype, const float* in, int64_t n, NarrowedValues what,
                             absl::string_view tensor, int64_t first) {
  // The least magnitude that rounds past the largest finite value (half an
  // ulp above it; the tie goes up, as the largest's last bit is odd).
  float limit = 0;  // every case sets it; gcc cannot tell
  switch (dtype) {
    case WireDType::kFloat32:
      return absl::OkStatus();
    case WireDType::kBf16:
      limit = absl::bit_cast<float>(uint32_t{0x7F7F8000});
      break;
    case WireDType::kFp16:
      limit = 65520.0f;
      break;
  }
  // Off the hot path: EncodeWireChecked calls this only for a chunk whose
  // encoded values hold an Inf or NaN.
  constexpr float kMax = std::numeric_limits<float>::max();
  int64_t i = 0;
  while (i < n && !(std::fabs(in[i]) >= limit && std::fabs(in[i]) <= kMax)) ++i;  // NaN: no
  if (i == n) return absl::OkStatus();
  const bool gradient = what == NarrowedValues::kGradient;
  return absl::OutOfRangeError(absl::StrCat(
      "the ", gradient ? "gradient" : "weights", " of tensor '", tensor, "' hold",
      gradient ? "s " : " ", in[i], " at element ", first + i, ", beyond the range of ",
      WireDTypeName(dtype), " (--wire_dtype): it would reach the ",
      gradient ? "servers" : "workers", " as inf. Use --wire_dtype=bf16 (float32's range) or "
      "float32; ",
      gradient ? "a gradient is a sum over a device's batch, so larger batches hold larger values"
               : "the servers keep the weights in float32, which holds it"));
}

absl::Status EncodeWireChecked(WireDType dtype, const float* in, int64_t n, char* out,
                               NarrowedValues what, absl::string_view tensor, int64_t first) {
  EncodeWire(dtype, in, n, out);
  if (dtype == WireDType::kFloat32 || n <= 0) return absl::OkStatus();
  // A 2-byte value whose exponent bits are all ones is infinite or NaN.
  const uint16_t exponent = dtype == WireDType::kBf16 ? 0x7F80 : 0x7C00;
  int64_t i = 0;
  int any = 0;
#if defined(__SSE2__)
  const __m128i mask = _mm_set1_epi16(static_cast<int16_t>(exponent));
  __m128i hit = _mm_setzero_si128();
  for (; i + 8 <= n; i += 8) {  // little-endian, as the wire
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(out + 2 * i));
    hit = _mm_or_si128(hit, _mm_cmpeq_epi16(_mm_and_si128(v, mask), mask));
  }
  any = _mm_movemask_epi8(hit);
#endif
  for (; i < n; ++i) {
    const auto* b = reinterpret_cast<const unsigned char*>(out + 2 * i);
    any |= ((b[0] | b[1] << 8) & exponent) == exponent;
  }
  return any == 0 ? absl::OkStatus() : CheckNarrowable(dtype, in, n, what, tensor, first);
}

// EncodeWire's twin in the other direction, kept apart so that each reads
// as one dispatch.
void DecodeWire(WireDType dtype, const char* in, int64_t n, float* out) {
  namespace wi = wire_dtype_internal;
  if (n <= 0) return;
  switch (dtype) {
    case WireDType::kFloat32:
      std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
      return;
    case WireDType::kBf16:
      return wi::DecodeBf16(in, n, reinterpret_cast<char*>(out));
    case WireDType::kFp16:
      return wi::DecodeFp16F16c(in, n, out);
  }
}

void DecodeAddWire(WireDType dtype, const char* in, int64_t n, float* out) {
  namespace wi = wire_dtype_internal;
  if (n <= 0) return;
  switch (dtype) {
    case WireDType::kFloat32:
      return wi::DecodeAddFloat32(in, n, reinterpret_cast<char*>(out));
    case WireDType::kBf16:
      return wi::DecodeAddBf16(in, n, reinterpret_cast<char*>(out));
    case WireDType::kFp16:
      return wi::DecodeAddFp16F16c(in, n, out);
  }
}

void DecodePieces(WireDType dtype, const BytePieces& pieces, float* out, bool add) {
  if (!add && dtype == WireDType::kFloat32) {
    CopyPieces(pieces, out);  // no per-run calls
    return;
  }
  ForEachValueRun(pieces, WireBytes(dtype), [&](int64_t first, const char* bytes, int64_t count) {
    if (add) {
      DecodeAddWire(dtype, bytes, count, out + first);
    } else {
      DecodeWire(dtype, bytes, count, out + first);
    }
  });
}

}  // namespace psync
