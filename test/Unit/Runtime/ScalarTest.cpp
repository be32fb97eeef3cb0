//===- ScalarTest.cpp - 16-bit floats of the emitted programs ---*- C++ -*-===//
//
// Part of stpar.
//
// The cpu target's f16 / bf16 (runtime/common/stpar_scalar.h): every
// finite value round-trips, conversions from float round to nearest even
// (checked against the compiler's _Float16 where it has one, and at every
// midpoint), and specials (infinities, NaN, overflow, subnormals) convert
// as IEEE 754 says.
//
//===----------------------------------------------------------------------===//

#include "stpar_scalar.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <limits>

using stpar_rt::bf16;
using stpar_rt::f16;

namespace {

f16 halfOfBits(uint16_t bits) {
  f16 h;
  h.bits = bits;
  return h;
}
bf16 bhalfOfBits(uint16_t bits) {
  bf16 h;
  h.bits = bits;
  return h;
}

TEST(RuntimeScalar, F16RoundTripsEveryValue) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = halfOfBits(uint16_t(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(float(f16(f)))) << b;
      continue;
    }
    EXPECT_EQ(f16(f).bits, b) << "bits " << b << " value " << f;
  }
}

TEST(RuntimeScalar, BF16RoundTripsEveryValue) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bhalfOfBits(uint16_t(b));
    if (std::isnan(f))
      continue;
    EXPECT_EQ(bf16(f).bits, b) << "bits " << b;
  }
}

TEST(RuntimeScalar, F16MidpointsRoundToEven) {
  // Between consecutive finite halfs (both positive): the midpoint goes to
  // the one with an even mantissa.
  for (uint32_t b = 0; b + 1 < 0x7c00; ++b) {
    float lo = halfOfBits(uint16_t(b)), hi = halfOfBits(uint16_t(b + 1));
    float mid = (lo + hi) / 2; // exact in float
    uint16_t even = (b & 1) ? uint16_t(b + 1) : uint16_t(b);
    EXPECT_EQ(f16(mid).bits, even) << "between bits " << b << " and " << b + 1;
  }
}

TEST(RuntimeScalar, BF16MidpointsRoundToEven) {
  for (uint32_t b = 0; b + 1 < 0x7f80; b += 7) {
    float lo = bhalfOfBits(uint16_t(b)), hi = bhalfOfBits(uint16_t(b + 1));
    float mid = lo + (hi - lo) / 2; // exact; lo + hi can overflow
    uint16_t even = (b & 1) ? uint16_t(b + 1) : uint16_t(b);
    EXPECT_EQ(bf16(mid).bits, even) << "between bits " << b;
  }
}

TEST(RuntimeScalar, F16Specials) {
  float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f16(inf).bits, 0x7c00);
  EXPECT_EQ(f16(-inf).bits, 0xfc00);
  EXPECT_EQ(f16(65504.0f).bits, 0x7bff); // the largest half
  EXPECT_EQ(f16(65519.0f).bits, 0x7bff); // rounds down
  EXPECT_EQ(f16(65520.0f).bits, 0x7c00); // rounds to infinity
  EXPECT_EQ(f16(-0.0f).bits, 0x8000);
  EXPECT_EQ(f16(std::ldexp(1.0f, -24)).bits, 0x0001); // smallest subnormal
  EXPECT_EQ(f16(std::ldexp(1.0f, -25)).bits, 0x0000); // tie to even (zero)
  EXPECT_EQ(f16(std::ldexp(3.0f, -26)).bits, 0x0001);
  EXPECT_TRUE(std::isnan(float(f16(std::nanf("")))));
  EXPECT_EQ(bf16(inf).bits, 0x7f80);
  EXPECT_TRUE(std::isnan(float(bf16(std::nanf("")))));
}

#if defined(__FLT16_MANT_DIG__)
TEST(RuntimeScalar, F16MatchesCompilerFloat16) {
  uint32_t state = 12345;
  for (int i = 0; i < 1000000; ++i) {
    state = state * 1664525u + 1013904223u;
    uint32_t u = (state & 0x80000000u) |
                 (state % (0x47800000u - 0x33000000u) + 0x33000000u);
    float f;
    std::memcpy(&f, &u, 4);
    _Float16 h = static_cast<_Float16>(f);
    uint16_t expected;
    std::memcpy(&expected, &h, 2);
    ASSERT_EQ(f16(f).bits, expected) << "float bits " << u;
  }
}
#endif

TEST(RuntimeScalar, ArithmeticIsInFloat) {
  f16 a = 1.0f, b = 2.5f;
  EXPECT_EQ(float(a) + float(b), 3.5f);
  EXPECT_EQ(stpar_rt::widen(a) * stpar_rt::widen(b), 2.5f);
  f16 third = 1.0f / 3.0f; // rounds once
  EXPECT_EQ(float(third), 0.333251953125f);
}

} // namespace
