#include "common/wire/wire_dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"
#include "common/wire/wire_dtype_internal.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psync {
namespace {

namespace wi = wire_dtype_internal;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

uint16_t Load16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

bool IsNaN16(WireDType dtype, uint16_t v) {
  return (v & 0x7fffu) > (dtype == WireDType::kBf16 ? 0x7f80u : 0x7c00u);
}

// The test's own bfloat16 rounding, from the definition rather than the
// library's carry trick: keep the upper half, and step it up when the lower
// half is more than half its last place, or exactly half with an odd upper
// half (a step past the largest finite value reaches Inf's bits).
uint16_t ReferenceBf16(uint32_t x) {
  if (std::isnan(FromBits(x))) return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint16_t upper = static_cast<uint16_t>(x >> 16);
  const uint32_t lower = x & 0xffffu;
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u) != 0)) ++upper;
  return upper;
}

#ifdef __FLT16_MAX__
constexpr bool kHaveFloat16 = true;
// GCC's conversions (libgcc's soft-float, round to nearest even).
uint16_t GccFp16(uint32_t x) {
  const _Float16 h = static_cast<_Float16>(FromBits(x));
  uint16_t b;
  std::memcpy(&b, &h, sizeof(b));
  return b;
}
float GccFp16ToFloat(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, sizeof(h));
  return static_cast<float>(h);
}
#else
constexpr bool kHaveFloat16 = false;
uint16_t GccFp16(uint32_t) { return 0; }
float GccFp16ToFloat(uint16_t) { return 0; }
#endif

using EncodeFn = void (*)(const float*, int64_t, char*);
using DecodeFn = void (*)(const char*, int64_t, float*);

struct Fp16Kernels {
  std::string name;
  EncodeFn encode;
  DecodeFn decode;
  DecodeFn decode_add;
};

// The public entry points, and each implementation behind them by name
// (the F16C one only where the CPU has it: it would only repeat the other).
std::vector<Fp16Kernels> AllFp16Kernels() {
  std::vector<Fp16Kernels> all = {
      {"EncodeWire",
       [](const float* in, int64_t n, char* out) { EncodeWire(WireDType::kFp16, in, n, out); },
       [](const char* in, int64_t n, float* out) { DecodeWire(WireDType::kFp16, in, n, out); },
       [](const char* in, int64_t n, float* out) { DecodeAddWire(WireDType::kFp16, in, n, out); }},
      {"portable", wi::EncodeFp16Portable, wi::DecodeFp16Portable, wi::DecodeAddFp16Portable},
  };
  if (wi::HaveF16c()) {
    all.push_back({"F16C", wi::EncodeFp16F16c, wi::DecodeFp16F16c, wi::DecodeAddFp16F16c});
  }
  return all;
}

// Float bit patterns where rounding is decided: for every pair of
// neighbouring 16-bit values (fp16 or bf16) of either sign, the float
// halfway between them and its two neighbours; past the largest finite
// value too, where the next value would be (the overflow ties).
std::vector<uint32_t> HalfwayCases(WireDType dtype) {
  std::vector<uint32_t> out;
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t v = 0; v < (dtype == WireDType::kBf16 ? 0x7f80u : 0x7c00u); ++v) {
      uint32_t mid;
      if (dtype == WireDType::kBf16) {
        mid = (v << 16) | 0x8000u;
      } else {
        // Past the largest finite value (65504), the next would be 65536.
        const double lo = GccFp16ToFloat(static_cast<uint16_t>(v));
        const double hi = v == 0x7bffu ? 65536.0 : GccFp16ToFloat(static_cast<uint16_t>(v + 1));
        mid = Bits(static_cast<float>((lo + hi) / 2));
      }
      for (uint32_t m : {mid - 1, mid, mid + 1}) out.push_back(m | sign);
    }
  }
  return out;
}

// A sample of float bit patterns in batches of at most 1M, each given to
// `check`: every 1021st pattern (all signs, exponents and NaNs, with ever
// different low bits), and every 509th of those whose magnitude lies
// between 2^-26 and 2^17, where fp16 has something to round.
template <typename Check>
void ForSampledFloats(Check check) {
  std::vector<uint32_t> batch;
  auto add = [&](uint64_t u) {
    batch.push_back(static_cast<uint32_t>(u));
    if (batch.size() == (1u << 20)) {
      check(batch);
      batch.clear();
    }
  };
  for (uint64_t u = 0; u <= 0xffffffffu; u += 1021) add(u);
  for (uint64_t sign : {0u, 0x80000000u}) {
    for (uint64_t u = 0x32800000u; u < 0x48000000u; u += 509) add(u | sign);
  }
  check(batch);
}

std::vector<uint16_t> Expected(const std::vector<uint32_t>& bits, uint16_t (*convert)(uint32_t)) {
  std::vector<uint16_t> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = convert(bits[i]);
  return out;
}

// Encodes `bits` (as floats) in one call, for the vectorised loops, and
// counts the values that differ from `want`: a NaN must give a NaN of the
// same sign, anything else the same bits. Logs the first few.
int64_t CountEncodeMismatches(WireDType dtype, EncodeFn encode, const std::vector<uint32_t>& bits,
                              const std::vector<uint16_t>& want) {
  const int64_t n = static_cast<int64_t>(bits.size());
  std::vector<char> wire(2 * n + 1);
  encode(reinterpret_cast<const float*>(bits.data()), n, wire.data());
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t got = Load16(wire.data() + 2 * i);
    const bool ok = std::isnan(FromBits(bits[i]))
                        ? IsNaN16(dtype, got) && (got & 0x8000u) == (want[i] & 0x8000u)
                        : got == want[i];
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << std::hex << "float 0x" << bits[i] << " (" << FromBits(bits[i])
                    << ") gave 0x" << got << ", expected 0x" << want[i];
    }
  }
  return bad;
}

TEST(WireDTypeTest, ParsesTheThreeNames) {
  for (WireDType d : {WireDType::kFloat32, WireDType::kBf16, WireDType::kFp16}) {
    absl::StatusOr<WireDType> parsed = ParseWireDType(WireDTypeName(d));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(WireDTypeName(WireDType::kBf16), "bf16");
  EXPECT_EQ(WireBytes(WireDType::kFloat32), 4);
  EXPECT_EQ(WireBytes(WireDType::kBf16), 2);
  EXPECT_EQ(WireBytes(WireDType::kFp16), 2);
}

TEST(WireDTypeTest, ParseErrorsNameTheValue) {
  absl::StatusOr<WireDType> bad = ParseWireDType("fp8");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "--wire_dtype is 'fp8', expected float32, bf16 or fp16");
  for (const char* text : {"", "FP16", "float", "bfloat16", " bf16", "fp16 "}) {
    EXPECT_THAT(ParseWireDType(text).status().message(),
                ::testing::HasSubstr(absl::StrCat("'", text, "'")));
  }
}

TEST(WireDTypeTest, KnownValues) {
  struct Case {
    float in;
    uint16_t bf16, fp16;
  };
  const float inf = std::numeric_limits<float>::infinity();
  for (const Case& c : std::vector<Case>{
           {1.0f, 0x3f80, 0x3c00},
           {-2.0f, 0xc000, 0xc000},
           {0.0f, 0x0000, 0x0000},
           {-0.0f, 0x8000, 0x8000},
           {inf, 0x7f80, 0x7c00},
           {-inf, 0xff80, 0xfc00},
           {65504.0f, 0x4780, 0x7bff},     // fp16's largest
           {65519.99f, 0x4780, 0x7bff},    // below its tie: stays finite
           {65520.0f, 0x4780, 0x7c00},     // the tie rounds to even: Inf
           {1e5f, 0x47c3, 0x7c00},         // overflow
           {std::ldexp(1.0f, -24), 0x3380, 0x0001},        // smallest subnormal
           {std::ldexp(1.0f, -25), 0x3300, 0x0000},        // tie to even: 0
           {std::ldexp(3.0f, -25), 0x33c0, 0x0002},        // tie to even: up
           {std::ldexp(1023.0f, -24), 0x3880, 0x03ff},     // largest subnormal
           {FromBits(0x7f7fffffu), 0x7f80, 0x7c00},        // float's largest: Inf
           {FromBits(0x7f7f7fffu), 0x7f7f, 0x7c00},        // below bf16's tie
           {FromBits(0x3f808000u), 0x3f80, 0x3c04},        // bf16 tie, even: down
           {FromBits(0x3f818000u), 0x3f82, 0x3c0c},        // bf16 tie, odd: up
       }) {
    SCOPED_TRACE(c.in);
    char wire[2];
    EncodeWire(WireDType::kBf16, &c.in, 1, wire);
    EXPECT_EQ(Load16(wire), c.bf16);
    EncodeWire(WireDType::kFp16, &c.in, 1, wire);
    EXPECT_EQ(Load16(wire), c.fp16);
  }
}

TEST(WireDTypeTest, NaNsStayQuietNaNsWithTheirSignAndUpperPayload) {
  struct Case {
    uint32_t in;
    uint16_t bf16, fp16;
  };
  // A signalling NaN whose payload lies only in the dropped bits would
  // otherwise come out as Inf.
  for (const Case& c : std::vector<Case>{{0x7f800001u, 0x7fc0, 0x7e00},
                                         {0xffc00000u, 0xffc0, 0xfe00},
                                         {0x7fa46000u, 0x7fe4, 0x7f23},
                                         {0xffffffffu, 0xffff, 0xffff}}) {
    SCOPED_TRACE(c.in);
    const float in = FromBits(c.in);
    char wire[2];
    EncodeWire(WireDType::kBf16, &in, 1, wire);
    EXPECT_EQ(Load16(wire), c.bf16);
    for (const Fp16Kernels& k : AllFp16Kernels()) {
      k.encode(&in, 1, wire);
      EXPECT_EQ(Load16(wire), c.fp16) << k.name;
    }
  }
}

// Every 16-bit pattern widens exactly and narrows back to itself (a NaN to
// a NaN of the same sign): nothing but rounding is lost on the wire.
TEST(WireDTypeTest, EveryBf16PatternRoundTrips) {
  std::vector<char> wire(2 * 65536), back(2 * 65536);
  for (uint32_t v = 0; v < 65536; ++v) {
    const uint16_t b = static_cast<uint16_t>(v);
    std::memcpy(wire.data() + 2 * v, &b, 2);
  }
  std::vector<float> floats(65536);
  DecodeWire(WireDType::kBf16, wire.data(), 65536, floats.data());
  EncodeWire(WireDType::kBf16, floats.data(), 65536, back.data());
  for (uint32_t v = 0; v < 65536; ++v) {
    const uint16_t b = static_cast<uint16_t>(v);
    ASSERT_EQ(Bits(floats[v]), uint32_t{b} << 16) << std::hex << v;
    const uint16_t again = Load16(back.data() + 2 * v);
    if (IsNaN16(WireDType::kBf16, b)) {
      ASSERT_TRUE(IsNaN16(WireDType::kBf16, again) && (again & 0x8000u) == (b & 0x8000u))
          << std::hex << v << " -> " << again;
    } else {
      ASSERT_EQ(again, b) << std::hex << v;
    }
  }
}

TEST(WireDTypeTest, EveryFp16PatternRoundTrips) {
  if (!kHaveFloat16) GTEST_SKIP() << "this compiler has no _Float16";
  std::vector<char> wire(2 * 65536), back(2 * 65536);
  for (uint32_t v = 0; v < 65536; ++v) {
    const uint16_t h = static_cast<uint16_t>(v);
    std::memcpy(wire.data() + 2 * v, &h, 2);
  }
  for (const Fp16Kernels& k : AllFp16Kernels()) {
    SCOPED_TRACE(k.name);
    std::vector<float> floats(65536);
    k.decode(wire.data(), 65536, floats.data());
    k.encode(floats.data(), 65536, back.data());
    for (uint32_t v = 0; v < 65536; ++v) {
      const uint16_t h = static_cast<uint16_t>(v);
      const uint16_t again = Load16(back.data() + 2 * v);
      if (IsNaN16(WireDType::kFp16, h)) {
        ASSERT_TRUE(std::isnan(floats[v]) && std::signbit(floats[v]) == ((h >> 15) != 0))
            << std::hex << v;
        ASSERT_TRUE(IsNaN16(WireDType::kFp16, again) && (again & 0x8000u) == (h & 0x8000u))
            << std::hex << v << " -> " << again;
      } else {
        ASSERT_EQ(Bits(floats[v]), Bits(GccFp16ToFloat(h))) << std::hex << v;
        ASSERT_EQ(again, h) << std::hex << v;
      }
    }
  }
}

TEST(WireDTypeTest, Fp16RoundingAgreesWithGcc) {
  if (!kHaveFloat16) GTEST_SKIP() << "this compiler has no _Float16";
  const std::vector<Fp16Kernels> kernels = AllFp16Kernels();
  std::vector<int64_t> bad(kernels.size());
  auto check = [&](const std::vector<uint32_t>& bits) {
    const std::vector<uint16_t> want = Expected(bits, GccFp16);
    for (size_t k = 0; k < kernels.size(); ++k) {
      SCOPED_TRACE(kernels[k].name);
      if (bad[k] >= 5) continue;  // enough logged
      bad[k] += CountEncodeMismatches(WireDType::kFp16, kernels[k].encode, bits, want);
    }
  };
  check(HalfwayCases(WireDType::kFp16));
  ForSampledFloats(check);
  for (size_t k = 0; k < kernels.size(); ++k) EXPECT_EQ(bad[k], 0) << kernels[k].name;
}

TEST(WireDTypeTest, Bf16RoundingAgreesWithTheReference) {
  auto encode = [](const float* in, int64_t n, char* out) {
    EncodeWire(WireDType::kBf16, in, n, out);
  };
  int64_t bad = 0;
  auto check = [&](const std::vector<uint32_t>& bits) {
    if (bad < 5) {
      bad += CountEncodeMismatches(WireDType::kBf16, encode, bits, Expected(bits, ReferenceBf16));
    }
  };
  check(HalfwayCases(WireDType::kBf16));
  ForSampledFloats(check);
  EXPECT_EQ(bad, 0);
}

// Values of every kind, 1000 + 37 of them: whole blocks and a remainder.
std::vector<float> MixedValues() {
  std::vector<float> v;
  for (int i = 0; v.size() < 1037; ++i) {
    v.push_back(std::ldexp(static_cast<float>((i * 7919) % 2001 - 1000) / 1000.0f,
                           (i % 60) - 30));
  }
  v[3] = std::numeric_limits<float>::infinity();
  v[5] = -0.0f;
  v[9] = 70000.0f;
  return v;
}

TEST(WireDTypeTest, DecodeAddAddsToWhatIsThere) {
  const std::vector<float> values = MixedValues();
  const int64_t n = static_cast<int64_t>(values.size());
  for (WireDType d : {WireDType::kFloat32, WireDType::kBf16, WireDType::kFp16}) {
    SCOPED_TRACE(WireDTypeName(d));
    std::vector<char> wire(4 * n);
    EncodeWire(d, values.data(), n, wire.data());
    std::vector<float> decoded(n);
    DecodeWire(d, wire.data(), n, decoded.data());
    std::vector<float> sum(n);
    for (int64_t i = 0; i < n; ++i) sum[i] = static_cast<float>(i % 13) - 6.5f;
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = sum[i] + decoded[i];
    DecodeAddWire(d, wire.data(), n, sum.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(Bits(sum[i]), Bits(want[i])) << i;
    if (d != WireDType::kFp16) continue;
    for (const Fp16Kernels& k : AllFp16Kernels()) {
      std::vector<float> again(n);
      for (int64_t i = 0; i < n; ++i) again[i] = static_cast<float>(i % 13) - 6.5f;
      k.decode_add(wire.data(), n, again.data());
      EXPECT_EQ(again, want) << k.name;
    }
  }
}

TEST(WireDTypeTest, AnyAlignmentAndLength) {
  const std::vector<float> values = MixedValues();
  for (WireDType d : {WireDType::kFloat32, WireDType::kBf16, WireDType::kFp16}) {
    SCOPED_TRACE(WireDTypeName(d));
    const int bytes = WireBytes(d);
    for (int64_t n : {0, 1, 7, 8, 9, 63, 64, 65, 203}) {
      std::vector<char> aligned(bytes * n + 1);
      EncodeWire(d, values.data(), n, aligned.data());
      std::vector<float> decoded(n + 1);
      DecodeWire(d, aligned.data(), n, decoded.data());
      for (int in_offset = 0; in_offset < 4; ++in_offset) {
        for (int out_offset = 0; out_offset < 4; ++out_offset) {
          SCOPED_TRACE(absl::StrCat("n ", n, ", offsets ", in_offset, " ", out_offset));
          // Floats at a misaligned address, as a pointer into a received
          // message may be.
          std::vector<char> floats(4 * n + 8, 0);
          std::memcpy(floats.data() + in_offset, values.data(), 4 * n);
          std::vector<char> wire(bytes * n + 8, 0x5a);
          EncodeWire(d, reinterpret_cast<const float*>(floats.data() + in_offset), n,
                     wire.data() + out_offset);
          EXPECT_EQ(0, std::memcmp(wire.data() + out_offset, aligned.data(), bytes * n));
          EXPECT_EQ(wire[out_offset + bytes * n], 0x5a) << "wrote past the end";

          std::vector<char> out(4 * n + 8, 0);
          float* out_floats = reinterpret_cast<float*>(out.data() + out_offset);
          DecodeWire(d, wire.data() + out_offset, n, out_floats);
          EXPECT_EQ(0, std::memcmp(out_floats, decoded.data(), 4 * n));
          DecodeAddWire(d, wire.data() + out_offset, n, out_floats);
          for (int64_t i = 0; i < n; ++i) {
            float got;
            std::memcpy(&got, out.data() + out_offset + 4 * i, 4);
            ASSERT_EQ(Bits(got), Bits(decoded[i] + decoded[i])) << i;
          }
        }
      }
    }
  }
}

// CheckNarrowable refuses exactly the finite values EncodeWire turns into
// +-Inf, at the rounding boundary of each dtype, and names the first.
TEST(WireDTypeTest, CheckNarrowableRefusesWhatWouldBecomeInf) {
  const float fp16_limit = 65520.0f, bf16_limit = absl::bit_cast<float>(uint32_t{0x7F7F8000});
  const float inf = std::numeric_limits<float>::infinity();
  for (WireDType dtype : {WireDType::kFloat32, WireDType::kBf16, WireDType::kFp16}) {
    SCOPED_TRACE(WireDTypeName(dtype));
    const float limit = dtype == WireDType::kFp16 ? fp16_limit : bf16_limit;
    for (float v : {1.0f, std::nextafter(limit, 0.0f), limit, -limit, std::nextafter(limit, inf),
                    std::numeric_limits<float>::max(), inf, -inf,
                    std::numeric_limits<float>::quiet_NaN()}) {
      for (int at : {29, 36}) {  // in a group of four, and in the tail after them
        std::vector<float> in(37, 0.5f);
        in[at] = v;
        std::vector<char> out(in.size() * WireBytes(dtype));
        EncodeWire(dtype, in.data(), static_cast<int64_t>(in.size()), out.data());
        float back;
        DecodeWire(dtype, out.data() + at * WireBytes(dtype), 1, &back);
        const bool became_inf = std::isfinite(v) && std::isinf(back);
        for (NarrowedValues what : {NarrowedValues::kGradient, NarrowedValues::kWeights}) {
          const bool gradient = what == NarrowedValues::kGradient;
          const absl::Status s = CheckNarrowable(dtype, in.data(), static_cast<int64_t>(in.size()),
                                                 what, "fc1.weight", 100);
          EXPECT_EQ(!s.ok(), became_inf) << v << " at " << at << ": " << s;
          std::vector<char> checked(out.size());
          EXPECT_EQ(EncodeWireChecked(dtype, in.data(), static_cast<int64_t>(in.size()),
                                      checked.data(), what, "fc1.weight", 100),
                    s);
          EXPECT_EQ(checked, out);
          if (!s.ok()) {
            EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
            EXPECT_THAT(std::string(s.message()),
                        ::testing::HasSubstr(absl::StrCat(
                            gradient ? "the gradient of tensor 'fc1.weight' holds "
                                     : "the weights of tensor 'fc1.weight' hold ",
                            v, " at element ", 100 + at, ", beyond the range of ",
                            WireDTypeName(dtype), " (--wire_dtype): it would reach the ",
                            gradient ? "servers" : "workers", " as inf")));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace psync
