// The low-bit scalar conversions and ONNX's 4-bit/2-bit packing (engine/common/lowbit.h):
// every float8/float4 code decoded and re-encoded, round-to-nearest-even on every midpoint, the
// saturate and NaN/inf rules of each type, float8e8m0's rounding modes, int4/int2 wrap and
// saturate, and packing of odd element counts. Every expectation is exact: these are bit-level
// conversions, so no tolerance applies.
#include "engine/common/lowbit.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/common/dtype.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The mini-float types and facts about them taken from their definitions (OCP FP8, the fnuz
// variants of Graphcore/AMD, OCP MX FP4), not from the code under test.
struct Facts {
  DataType type;
  int codes;         // 256 or 16
  uint8_t one;       // code of 1.0
  uint8_t max_code;  // code of the largest finite value
  double max;
  double min_subnormal;
  bool fnuz;
};
const Facts kMiniFloats[] = {
    {DataType::kF8E4M3FN, 256, 0x38, 0x7e, 448.0, std::ldexp(1.0, -9), false},
    {DataType::kF8E4M3FNUZ, 256, 0x40, 0x7f, 240.0, std::ldexp(1.0, -10), true},
    {DataType::kF8E5M2, 256, 0x3c, 0x7b, 57344.0, std::ldexp(1.0, -16), false},
    {DataType::kF8E5M2FNUZ, 256, 0x40, 0x7f, 57344.0, std::ldexp(1.0, -17), true},
    {DataType::kF4E2M1, 16, 0x2, 0x7, 6.0, 0.5, false},
};

TEST(LowBitDtype, NumbersNamesAndSizes) {
  EXPECT_EQ(DataTypeFromOnnx(17), DataType::kF8E4M3FN);
  EXPECT_EQ(DataTypeFromOnnx(22), DataType::kI4);
  EXPECT_EQ(DataTypeFromOnnx(26), DataType::kI2);
  EXPECT_EQ(DataTypeFromOnnx(27), DataType::kUndefined);  // float6e2m3: not a Kiln type
  EXPECT_STREQ(DataTypeName(DataType::kI4), "i4");
  EXPECT_STREQ(DataTypeOnnxName(DataType::kF8E5M2FNUZ), "float8e5m2fnuz");
  EXPECT_STREQ(DataTypeOnnxName(DataType::kF8E8M0), "float8e8m0");
  EXPECT_EQ(OnnxDataTypeName(23), "float4e2m1");
  for (int t = 17; t <= 26; ++t) {
    const DataType dt = DataTypeFromOnnx(t);
    EXPECT_EQ(DataTypeSize(dt), 1u) << t;  // one element per byte inside Kiln
    EXPECT_TRUE(IsLowBit(dt)) << t;
    EXPECT_FALSE(IsFloating(dt)) << t;  // precision policies never touch them
    EXPECT_FALSE(IsInteger(dt)) << t;
  }
  EXPECT_EQ(DataTypeBits(DataType::kU4), 4);
  EXPECT_EQ(DataTypeBits(DataType::kF4E2M1), 4);
  EXPECT_EQ(DataTypeBits(DataType::kI2), 2);
  EXPECT_EQ(DataTypeBits(DataType::kF8E8M0), 8);
  EXPECT_EQ(DataTypeBits(DataType::kF32), 32);
  EXPECT_TRUE(IsLowBitFloat(DataType::kF8E8M0));
  EXPECT_FALSE(IsLowBitFloat(DataType::kU4));
  EXPECT_TRUE(IsLowBitInteger(DataType::kU2));
}

TEST(MiniFloat, KnownValues) {
  for (const Facts& f : kMiniFloats) {
    SCOPED_TRACE(DataTypeOnnxName(f.type));
    EXPECT_EQ(LowBitToDouble(f.type, f.one), 1.0);
    EXPECT_EQ(LowBitToDouble(f.type, f.max_code), f.max);
    EXPECT_EQ(LowBitToDouble(f.type, 0x01), f.min_subnormal);
    EXPECT_EQ(LowBitToDouble(f.type, 0), 0.0);
    EXPECT_EQ(EncodeMiniFloat(f.type, 1.0, true), f.one);
    EXPECT_EQ(EncodeMiniFloat(f.type, -1.0, true), f.one | (f.codes == 16 ? 0x8 : 0x80));
  }
  // float4e2m1: every code.
  const double fp4[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(LowBitToDouble(DataType::kF4E2M1, static_cast<uint8_t>(c)), fp4[c]);
    EXPECT_EQ(LowBitToDouble(DataType::kF4E2M1, static_cast<uint8_t>(c | 8)), -fp4[c]);
  }
  // Only the low four bits of a float4 byte count.
  EXPECT_EQ(LowBitToDouble(DataType::kF4E2M1, 0xf7), 6.0);
  // Special codes.
  EXPECT_TRUE(std::isnan(LowBitToDouble(DataType::kF8E4M3FN, 0x7f)));
  EXPECT_TRUE(std::isnan(LowBitToDouble(DataType::kF8E4M3FN, 0xff)));
  EXPECT_TRUE(std::signbit(LowBitToDouble(DataType::kF8E4M3FN, 0x80)));  // -0
  EXPECT_TRUE(std::isnan(LowBitToDouble(DataType::kF8E4M3FNUZ, 0x80)));
  EXPECT_TRUE(std::isnan(LowBitToDouble(DataType::kF8E5M2FNUZ, 0x80)));
  EXPECT_EQ(LowBitToDouble(DataType::kF8E5M2, 0x7c), kInf);
  EXPECT_EQ(LowBitToDouble(DataType::kF8E5M2, 0xfc), -kInf);
  EXPECT_TRUE(std::isnan(LowBitToDouble(DataType::kF8E5M2, 0x7d)));
}

TEST(MiniFloat, EveryCodeRoundTripsAndDecodesInOrder) {
  for (const Facts& f : kMiniFloats) {
    SCOPED_TRACE(DataTypeOnnxName(f.type));
    double previous = -1;
    for (int c = 0; c < f.codes; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      const double v = LowBitToDouble(f.type, code);
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(LowBitToDouble(f.type, EncodeMiniFloat(f.type, v, true)))) << c;
        continue;
      }
      if (std::isinf(v)) {  // e5m2 only: kept without saturate, max with it
        EXPECT_EQ(EncodeMiniFloat(f.type, v, false), code) << c;
        EXPECT_EQ(EncodeMiniFloat(f.type, v, true), f.max_code | (code & 0x80)) << c;
        continue;
      }
      EXPECT_EQ(EncodeMiniFloat(f.type, v, true), code) << c;
      EXPECT_EQ(EncodeMiniFloat(f.type, v, false), code) << c;
      // The positive half decodes strictly increasing up to max (independent of the encoder).
      if (c <= f.max_code) {
        EXPECT_GT(v, previous) << c;
        previous = v;
      }
    }
  }
}

TEST(MiniFloat, RoundsToNearestEvenAtEveryMidpoint) {
  for (const Facts& f : kMiniFloats) {
    SCOPED_TRACE(DataTypeOnnxName(f.type));
    const uint8_t neg = f.codes == 16 ? 0x8 : 0x80;
    for (int c = 0; c < f.max_code; ++c) {
      const double lo = LowBitToDouble(f.type, static_cast<uint8_t>(c));
      const double hi = LowBitToDouble(f.type, static_cast<uint8_t>(c + 1));
      const double mid = (lo + hi) / 2;  // exact in double
      const uint8_t even = static_cast<uint8_t>(c % 2 == 0 ? c : c + 1);
      EXPECT_EQ(EncodeMiniFloat(f.type, mid, true), even) << c;
      EXPECT_EQ(EncodeMiniFloat(f.type, std::nextafter(mid, 0.0), true), c) << c;
      EXPECT_EQ(EncodeMiniFloat(f.type, std::nextafter(mid, kInf), true), c + 1) << c;
      if (c > 0) {  // negative side mirrors (the fnuz types have no -0, so skip c == 0 there)
        EXPECT_EQ(EncodeMiniFloat(f.type, -mid, true), even | neg) << c;
      }
    }
  }
}

TEST(MiniFloat, SaturateAndOverflow) {
  // Past max: saturate gives max; otherwise fn/fnuz give NaN and e5m2 inf.
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FN, 1000, true), 0x7e);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FN, -1000, true), 0xfe);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FN, 1000, false), 0x7f);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FN, -1000, false), 0xff);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FNUZ, 1000, false), 0x80);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E5M2, 1e6, false), 0x7c);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E5M2, -1e6, false), 0xfc);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E5M2FNUZ, 1e6, false), 0x80);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E5M2FNUZ, -1e6, true), 0xff);
  // The rounding decides overflow: e4m3fn 464 is the tie between 448 and (absent) 480 and
  // rounds to the even 448; anything above rounds to 480, past max.
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FN, 464, false), 0x7e);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FN, 465, false), 0x7f);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FN, 465, true), 0x7e);
  // e5m2 61440 is the tie between 57344 (odd mantissa) and 65536 (even): it overflows.
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E5M2, 61440, false), 0x7c);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E5M2, 61439, false), 0x7b);
  // Infinities.
  for (const Facts& f : kMiniFloats) {
    const uint8_t neg = f.codes == 16 ? 0x8 : 0x80;
    EXPECT_EQ(EncodeMiniFloat(f.type, kInf, true), f.max_code);
    EXPECT_EQ(EncodeMiniFloat(f.type, -kInf, true), f.max_code | neg);
  }
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FN, kInf, false), 0x7f);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FNUZ, -kInf, false), 0x80);
  // float4e2m1 has no inf or NaN: it saturates whatever `saturate` says.
  EXPECT_EQ(EncodeMiniFloat(DataType::kF4E2M1, 1e6, false), 0x7);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF4E2M1, -kInf, false), 0xf);
}

TEST(MiniFloat, NaNAndZeros) {
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FN, kNaN, true), 0x7f);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FN, -kNaN, true), 0xff);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FNUZ, -kNaN, false), 0x80);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E5M2FNUZ, kNaN, true), 0x80);
  EXPECT_TRUE(std::isnan(
      LowBitToDouble(DataType::kF8E5M2, EncodeMiniFloat(DataType::kF8E5M2, kNaN, false))));
  EXPECT_EQ(EncodeMiniFloat(DataType::kF4E2M1, kNaN, true), 0x8);  // the ONNX reference's code
  // -0 and negatives that round to zero: -0 where it exists, +0 in the fnuz types.
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FN, -0.0, true), 0x80);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E5M2, -1e-30, true), 0x80);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FNUZ, -0.0, true), 0x00);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E5M2FNUZ, -1e-30, true), 0x00);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF4E2M1, -0.1, true), 0x8);
  // Half the smallest subnormal is a tie with 0 (even): 0; just above it the subnormal.
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FN, std::ldexp(1.0, -10), true), 0x00);
  EXPECT_EQ(EncodeMiniFloat(DataType::kF8E4M3FN, std::ldexp(1.0001, -10), true), 0x01);
}

TEST(E8M0, DecodeEncodeAndRoundingModes) {
  EXPECT_EQ(LowBitToDouble(DataType::kF8E8M0, 127), 1.0);
  EXPECT_EQ(LowBitToDouble(DataType::kF8E8M0, 0), std::ldexp(1.0, -127));
  EXPECT_EQ(LowBitToDouble(DataType::kF8E8M0, 254), std::ldexp(1.0, 127));
  EXPECT_TRUE(std::isnan(LowBitToDouble(DataType::kF8E8M0, 255)));
  // Every power of two in range is exact in every mode.
  for (int c = 1; c < 255; ++c) {
    const float v = std::ldexp(1.0f, c - 127);
    for (E8M0Rounding r : {E8M0Rounding::kUp, E8M0Rounding::kDown, E8M0Rounding::kNearest}) {
      EXPECT_EQ(EncodeE8M0(v, true, r), c) << c;
    }
  }
  EXPECT_EQ(EncodeE8M0(1.1f, true, E8M0Rounding::kUp), 128);
  EXPECT_EQ(EncodeE8M0(1.9f, true, E8M0Rounding::kDown), 127);
  EXPECT_EQ(EncodeE8M0(1.4f, true, E8M0Rounding::kNearest), 127);
  EXPECT_EQ(EncodeE8M0(1.5f, true, E8M0Rounding::kNearest), 128);  // a tie rounds up
  EXPECT_EQ(EncodeE8M0(1.6f, true, E8M0Rounding::kNearest), 128);
  EXPECT_EQ(EncodeE8M0(-4.0f, true, E8M0Rounding::kUp), 129);  // the sign is ignored
  EXPECT_EQ(EncodeE8M0(0.0f, true, E8M0Rounding::kUp), 0);     // 2^-127, the smallest
  // Saturate keeps the largest exponent from rounding into the NaN code.
  const float big = std::ldexp(1.5f, 127);
  EXPECT_EQ(EncodeE8M0(big, true, E8M0Rounding::kUp), 254);
  EXPECT_EQ(EncodeE8M0(big, false, E8M0Rounding::kUp), 255);
  EXPECT_EQ(EncodeE8M0(std::numeric_limits<float>::infinity(), true, E8M0Rounding::kUp), 255);
  EXPECT_EQ(EncodeE8M0(std::numeric_limits<float>::quiet_NaN(), true, E8M0Rounding::kDown), 255);
}

TEST(LowBitInt, WrapSaturateAndRead) {
  EXPECT_EQ(static_cast<int8_t>(WrapLowBitInt(DataType::kI4, 8)), -8);
  EXPECT_EQ(static_cast<int8_t>(WrapLowBitInt(DataType::kI4, -9)), 7);
  EXPECT_EQ(static_cast<int8_t>(WrapLowBitInt(DataType::kI4, 15)), -1);
  EXPECT_EQ(WrapLowBitInt(DataType::kI4, 16), 0);
  EXPECT_EQ(WrapLowBitInt(DataType::kU4, -1), 15);
  EXPECT_EQ(WrapLowBitInt(DataType::kU4, 17), 1);
  EXPECT_EQ(static_cast<int8_t>(WrapLowBitInt(DataType::kI2, 2)), -2);
  EXPECT_EQ(WrapLowBitInt(DataType::kI2, -3), 1);
  EXPECT_EQ(WrapLowBitInt(DataType::kU2, -1), 3);
  EXPECT_EQ(WrapLowBitInt(DataType::kU2, 4), 0);
  EXPECT_EQ(static_cast<int8_t>(SaturateLowBitInt(DataType::kI4, -100)), -8);
  EXPECT_EQ(SaturateLowBitInt(DataType::kI4, 100), 7);
  EXPECT_EQ(SaturateLowBitInt(DataType::kU4, -3), 0);
  EXPECT_EQ(static_cast<int8_t>(SaturateLowBitInt(DataType::kI2, -5)), -2);
  EXPECT_EQ(SaturateLowBitInt(DataType::kU2, 9), 3);
  EXPECT_EQ(LowBitIntRange(DataType::kI2), std::make_pair(int64_t{-2}, int64_t{1}));
  // Every value of each type reads back as itself; only the element's own bits count.
  for (DataType t : {DataType::kI4, DataType::kU4, DataType::kI2, DataType::kU2}) {
    const auto [lo, hi] = LowBitIntRange(t);
    for (int64_t v = lo; v <= hi; ++v) {
      EXPECT_EQ(LowBitToDouble(t, WrapLowBitInt(t, v)), static_cast<double>(v));
      EXPECT_EQ(LowBitToDouble(t, SaturateLowBitInt(t, v)), static_cast<double>(v));
    }
  }
  EXPECT_EQ(LowBitToDouble(DataType::kI4, 0x0f), -1.0);
  EXPECT_EQ(LowBitToDouble(DataType::kU4, 0xff), 15.0);
  EXPECT_EQ(LowBitToDouble(DataType::kI2, 0xfe), -2.0);
  EXPECT_EQ(LowBitStorageByte(DataType::kI4, 0x0f), 0xff);
  EXPECT_EQ(LowBitStorageByte(DataType::kU4, 0xff), 0x0f);
  EXPECT_EQ(LowBitStorageByte(DataType::kF8E4M3FN, 0xab), 0xab);
}

TEST(Packing, PayloadSizes) {
  EXPECT_EQ(PackedBits(DataType::kI4), 4);
  EXPECT_EQ(PackedBits(DataType::kU2), 2);
  EXPECT_EQ(PackedBits(DataType::kF8E4M3FN), 0);
  EXPECT_EQ(OnnxPayloadBytes(DataType::kI4, 0), 0);
  EXPECT_EQ(OnnxPayloadBytes(DataType::kI4, 1), 1);
  EXPECT_EQ(OnnxPayloadBytes(DataType::kF4E2M1, 3), 2);
  EXPECT_EQ(OnnxPayloadBytes(DataType::kU4, 4), 2);
  EXPECT_EQ(OnnxPayloadBytes(DataType::kU2, 5), 2);
  EXPECT_EQ(OnnxPayloadBytes(DataType::kI2, 8), 2);
  EXPECT_EQ(OnnxPayloadBytes(DataType::kF8E5M2, 5), 5);
  EXPECT_EQ(OnnxPayloadBytes(DataType::kF32, 3), 12);
}

TEST(Packing, OddCountsFirstElementLow) {
  // int4 [1, -2, 3]: 0x1 | 0xe << 4, then 0x3 with a zero high half.
  const std::vector<uint8_t> i4 = {1, static_cast<uint8_t>(-2), 3};
  std::vector<uint8_t> packed(2, 0xaa);
  PackLowBit(DataType::kI4, i4.data(), 3, packed.data());
  EXPECT_EQ(packed, (std::vector<uint8_t>{0xe1, 0x03}));
  std::vector<uint8_t> back(3);
  UnpackLowBit(DataType::kI4, packed.data(), 3, back.data());
  EXPECT_EQ(back, i4);
  // int2 [-2, -1, 0, 1, -2]: codes 2, 3, 0, 1 | 2.
  const std::vector<uint8_t> i2 = {0xfe, 0xff, 0, 1, 0xfe};
  packed.assign(2, 0xaa);
  PackLowBit(DataType::kI2, i2.data(), 5, packed.data());
  EXPECT_EQ(packed, (std::vector<uint8_t>{0x4e, 0x02}));
  back.assign(5, 0);
  UnpackLowBit(DataType::kI2, packed.data(), 5, back.data());
  EXPECT_EQ(back, i2);
  // uint2 [3, 0, 1]: one byte, the top two bits zero.
  const std::vector<uint8_t> u2 = {3, 0, 1};
  packed.assign(1, 0xff);
  PackLowBit(DataType::kU2, u2.data(), 3, packed.data());
  EXPECT_EQ(packed[0], 0x13);
}

TEST(Packing, EveryByteRoundTrips) {
  for (DataType t :
       {DataType::kI4, DataType::kU4, DataType::kF4E2M1, DataType::kI2, DataType::kU2}) {
    const int per_byte = 8 / PackedBits(t);
    for (int b = 0; b < 256; ++b) {
      const uint8_t in = static_cast<uint8_t>(b);
      std::vector<uint8_t> elems(per_byte);
      UnpackLowBit(t, &in, per_byte, elems.data());
      for (int k = 0; k < per_byte; ++k) {  // each element is its field, as Kiln stores it
        const uint8_t field = static_cast<uint8_t>(in >> (k * PackedBits(t)));
        EXPECT_EQ(elems[k], LowBitStorageByte(t, field)) << b;
      }
      uint8_t out = 0;
      PackLowBit(t, elems.data(), per_byte, &out);
      EXPECT_EQ(out, in) << DataTypeOnnxName(t) << " byte " << b;
    }
  }
}

}  // namespace
}  // namespace kiln
