// fp16/bf16 conversions: the portable scalar code must round exactly like the hardware (F16C
// vcvtps2ph with round-to-nearest-even) and like bf16's definition (RNE on the top 16 bits).
#include "engine/common/half.h"

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "engine/common/cpu_features.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

__attribute__((target("f16c"))) uint16_t HardwareHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float HardwareHalfToFloat(uint16_t h) { return _cvtsh_ss(h); }

TEST(HalfTest, EveryHalfRoundTripsAndMatchesHardware) {
  bool hw = DetectCpuFeatures() & kCpuF16c;
  for (uint32_t b = 0; b < 65536; ++b) {
    uint16_t h = static_cast<uint16_t>(b);
    float f = HalfBitsToFloat(h);
    if (hw) {
      float g = HardwareHalfToFloat(h);
      ASSERT_TRUE((std::isnan(f) && std::isnan(g)) || FloatBits(f) == FloatBits(g)) << b;
    }
    if (!std::isnan(f)) ASSERT_EQ(FloatToHalfBits(f), h) << b;
  }
}

TEST(HalfTest, FloatToHalfMatchesF16cOnAStrideOfAllFloats) {
  if (!(DetectCpuFeatures() & kCpuF16c)) GTEST_SKIP() << "no F16C on this CPU";
  // A prime stride visits every exponent and many mantissa patterns, including the rounding
  // boundaries, subnormals, overflow to inf and NaNs, in a few million steps.
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 997) {
    float f = BitsToFloat(static_cast<uint32_t>(u));
    uint16_t want = HardwareHalf(f);
    uint16_t got = FloatToHalfBits(f);
    if (std::isnan(f)) {
      ASSERT_EQ(got & 0x7c00, 0x7c00);
      ASSERT_NE(got & 0x3ff, 0);
      continue;
    }
    ASSERT_EQ(got, want) << std::hexfloat << f;
  }
}

TEST(HalfTest, HalfRoundsToNearestEven) {
  // 1 + 2^-11 lies exactly between 1 and the next half (1 + 2^-10): ties go to even (1).
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 lies between 1 + 2^-10 (odd) and 1 + 2^-9 (even): goes up.
  EXPECT_EQ(FloatToHalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7c00);  // the tie above the max rounds to inf
  EXPECT_EQ(FloatToHalfBits(65519.0f), 0x7bff);
}

TEST(BFloat16Test, RoundsToNearestEvenAndKeepsNaN) {
  EXPECT_EQ(FloatToBFloat16Bits(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(FloatToBFloat16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBFloat16Bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  uint16_t nan = FloatToBFloat16Bits(std::nanf(""));
  EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(nan)));
  // A NaN whose payload sits only in the low 16 bits must not become inf.
  EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(FloatToBFloat16Bits(BitsToFloat(0x7f800001u)))));
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = BFloat16BitsToFloat(static_cast<uint16_t>(b));
    if (!std::isnan(f)) ASSERT_EQ(FloatToBFloat16Bits(f), b);
  }
}

}  // namespace
}  // namespace kiln
