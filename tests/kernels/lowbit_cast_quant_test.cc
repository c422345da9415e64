// Cast, CastLike, QuantizeLinear and DequantizeLinear with the low-bit types (float8 x5,
// float4e2m1, int4, uint4, int2, uint2) through the reference kernels. Tensors of these types
// hold one element per byte (int4/int2 sign-extended), so expectations read the bytes. Every
// expectation is exact: the conversions are defined bit for bit (lowbit.h), so no tolerance.
#include <cmath>
#include <limits>

#include "tests/kernels/elementwise_testing.h"

namespace kiln::testing::ew {
namespace {

using ir::OpType;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A low-bit tensor from its stored bytes (int4/int2 as signed values).
ir::Tensor Low(DataType t, std::vector<int64_t> dims, const std::vector<int8_t>& v) {
  return MakeTensor<int8_t>(std::move(dims), v, t);
}
ir::Tensor LowCodes(DataType t, std::vector<int64_t> dims, const std::vector<uint8_t>& v) {
  return MakeTensor<uint8_t>(std::move(dims), v, t);
}

absl::StatusOr<ir::Tensor> Cast(ir::Tensor x, DataType to, Attrs extra = {}, int version = 25) {
  extra.push_back({"to", IntAttr(static_cast<int64_t>(to))});
  return RunOp(OpType::kCast, {std::move(x)}, std::move(extra), version);
}

TEST(LowBitCast, FloatToLowBitIntegersTruncatesThenWraps) {
  auto i4 = Cast(F32({5}, {-9, 8, 7.9f, -8.5f, 2.5f}), DataType::kI4);
  ASSERT_TRUE(i4.ok()) << i4.status();
  EXPECT_EQ(i4->dtype(), DataType::kI4);
  EXPECT_EQ(Values<int8_t>(*i4), (std::vector<int8_t>{7, -8, 7, -8, 2}));
  auto u2 = Cast(F16({4}, {-1, 4, 2.9f, -3}), DataType::kU2);
  ASSERT_TRUE(u2.ok()) << u2.status();
  EXPECT_EQ(Values<uint8_t>(*u2), (std::vector<uint8_t>{3, 0, 2, 1}));
  auto i2 = Cast(I64({3}, {2, -3, 5}), DataType::kI2);
  ASSERT_TRUE(i2.ok()) << i2.status();
  EXPECT_EQ(Values<int8_t>(*i2), (std::vector<int8_t>{-2, 1, 1}));
  auto u4 = Cast(Bool({2}, {1, 0}), DataType::kU4);
  ASSERT_TRUE(u4.ok()) << u4.status();
  EXPECT_EQ(Values<uint8_t>(*u4), (std::vector<uint8_t>{1, 0}));
}

TEST(LowBitCast, LowBitIntegersToWiderTypes) {
  const ir::Tensor x = Low(DataType::kI4, {3}, {-8, 7, -1});
  auto f = Cast(x, DataType::kF32);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(Values<float>(*f), (std::vector<float>{-8, 7, -1}));
  auto i8 = Cast(x, DataType::kI8);
  ASSERT_TRUE(i8.ok()) << i8.status();
  EXPECT_EQ(Values<int8_t>(*i8), (std::vector<int8_t>{-8, 7, -1}));
  auto u8 = Cast(x, DataType::kU8);  // integer -> integer wraps: -1 -> 255
  ASSERT_TRUE(u8.ok()) << u8.status();
  EXPECT_EQ(Values<uint8_t>(*u8), (std::vector<uint8_t>{248, 7, 255}));
  auto h = Cast(LowCodes(DataType::kU4, {1}, {15}), DataType::kF16);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(Bits16(*h), (std::vector<uint16_t>{0x4B80}));  // 15.0 in fp16
}

TEST(LowBitCast, FloatToFloat8SaturateOnAndOff) {
  const ir::Tensor x = F32({5}, {1000, -1000, kInf, kNaN, 0.3f});
  auto sat = Cast(x, DataType::kF8E4M3FN);  // saturate defaults to 1
  ASSERT_TRUE(sat.ok()) << sat.status();
  EXPECT_EQ(sat->dtype(), DataType::kF8E4M3FN);
  // 0.3 lies in [0.25, 0.5), spacing 2^-5: 9.6 steps round to 10 -> 0.3125 = 0x2a.
  EXPECT_EQ(Values<uint8_t>(*sat), (std::vector<uint8_t>{0x7e, 0xfe, 0x7e, 0x7f, 0x2a}));
  auto raw = Cast(x, DataType::kF8E4M3FN, {{"saturate", IntAttr(0)}});
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(Values<uint8_t>(*raw), (std::vector<uint8_t>{0x7f, 0xff, 0x7f, 0x7f, 0x2a}));
  auto e5 = Cast(x, DataType::kF8E5M2, {{"saturate", IntAttr(0)}});
  ASSERT_TRUE(e5.ok()) << e5.status();
  EXPECT_EQ(Values<uint8_t>(*e5)[0], 0x64);  // 1000 is in range: 1024 = 2^10
  EXPECT_EQ(Values<uint8_t>(*e5)[2], 0x7c);  // inf stays inf: e5m2 has one
  auto fnuz = Cast(F32({2}, {-0.0f, 1000}), DataType::kF8E4M3FNUZ, {{"saturate", IntAttr(0)}});
  ASSERT_TRUE(fnuz.ok()) << fnuz.status();
  EXPECT_EQ(Values<uint8_t>(*fnuz), (std::vector<uint8_t>{0x00, 0x80}));  // no -0; NaN is 0x80
}

TEST(LowBitCast, DoubleRoundsOnceNotThroughFloat) {
  // 1.0625 is the midpoint of 1.0 and 1.125 in e4m3fn. 1.0625 + 1e-10 must round up; rounded to
  // float first it would become the tie 1.0625 and go to the even 1.0 (0x38).
  auto y = Cast(F64({1}, {1.0625 + 1e-10}), DataType::kF8E4M3FN);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values<uint8_t>(*y), (std::vector<uint8_t>{0x39}));
}

TEST(LowBitCast, Float8ToOtherTypes) {
  auto f = Cast(LowCodes(DataType::kF8E5M2, {5}, {0x7c, 0xfc, 0x7e, 0x3c, 0x01}), DataType::kF32);
  ASSERT_TRUE(f.ok()) << f.status();
  const std::vector<float> v = Values<float>(*f);
  EXPECT_EQ(v[0], kInf);
  EXPECT_EQ(v[1], -kInf);
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_EQ(v[3], 1.0f);
  EXPECT_EQ(v[4], std::ldexp(1.0f, -16));
  // e4m3fn 448 (0x7e) is exact in e5m2: 1.11b x 2^8 -> 0x5f; 1.125 (0x39) is the tie between
  // e5m2's 1.0 and 1.25 and goes to the even 1.0 (0x3c).
  auto e5 = Cast(LowCodes(DataType::kF8E4M3FN, {2}, {0x7e, 0x39}), DataType::kF8E5M2);
  ASSERT_TRUE(e5.ok()) << e5.status();
  EXPECT_EQ(Values<uint8_t>(*e5), (std::vector<uint8_t>{0x5f, 0x3c}));
  // int4 -> float4e2m1: 7 saturates to 6 (0x7); -5 is the tie of 4 and 6 -> -4 (0xe).
  auto f4 = Cast(Low(DataType::kI4, {3}, {3, 7, -5}), DataType::kF4E2M1);
  ASSERT_TRUE(f4.ok()) << f4.status();
  EXPECT_EQ(Values<uint8_t>(*f4), (std::vector<uint8_t>{0x5, 0x7, 0xe}));
  // -> bool: -0 is false, NaN true.
  auto b = Cast(LowCodes(DataType::kF8E4M3FN, {3}, {0x80, 0x7f, 0x01}), DataType::kBool);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(Values<uint8_t>(*b), (std::vector<uint8_t>{0, 1, 1}));
  // -> int: truncation toward zero (e4m3fn 0xc3 is -2.75).
  auto i = Cast(LowCodes(DataType::kF8E4M3FN, {1}, {0xc3}), DataType::kI32);
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(Values<int32_t>(*i), (std::vector<int32_t>{-2}));
}

TEST(LowBitCast, E8M0RoundMode) {
  const ir::Tensor x = F32({3}, {1.1f, 1.5f, 3.0f});
  auto up = Cast(x, DataType::kF8E8M0);  // round_mode defaults to "up"
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(Values<uint8_t>(*up), (std::vector<uint8_t>{128, 128, 129}));
  auto down = Cast(x, DataType::kF8E8M0, {{"round_mode", StringAttr("down")}});
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(Values<uint8_t>(*down), (std::vector<uint8_t>{127, 127, 128}));
  auto nearest = Cast(x, DataType::kF8E8M0, {{"round_mode", StringAttr("nearest")}});
  ASSERT_TRUE(nearest.ok()) << nearest.status();
  EXPECT_EQ(Values<uint8_t>(*nearest), (std::vector<uint8_t>{127, 128, 129}));
  auto back = Cast(LowCodes(DataType::kF8E8M0, {2}, {126, 255}), DataType::kF32);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(Values<float>(*back)[0], 0.5f);
  EXPECT_TRUE(std::isnan(Values<float>(*back)[1]));
  ExpectStatusError(Cast(x, DataType::kF8E8M0, {{"round_mode", StringAttr("sideways")}}).status(),
                    absl::StatusCode::kInvalidArgument, "round_mode");
  ExpectStatusError(Cast(x, DataType::kF8E4M3FN, {{"saturate", IntAttr(2)}}).status(),
                    absl::StatusCode::kInvalidArgument, "saturate");
}

TEST(LowBitCast, CastLikeTakesSaturate) {
  auto y = RunOp(OpType::kCastLike, {F32({1}, {1000}), LowCodes(DataType::kF8E4M3FN, {0}, {})},
                 {{"saturate", IntAttr(0)}}, 19);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), DataType::kF8E4M3FN);
  EXPECT_EQ(Values<uint8_t>(*y), (std::vector<uint8_t>{0x7f}));
  auto d = RunOp(OpType::kCastLike, {Low(DataType::kI2, {2}, {-2, 1}), F32({0}, {})}, {}, 25);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(Values<float>(*d), (std::vector<float>{-2, 1}));
}

// ---- QuantizeLinear ----

TEST(LowBitQuantize, Int4RoundsHalfEvenAndSaturates) {
  auto y = RunOp(
      OpType::kQuantizeLinear,
      {F32({6}, {-20, -2.5f, 2.5f, 3.5f, 20, kNaN}), F32({}, {1}), Low(DataType::kI4, {}, {0})}, {},
      21);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), DataType::kI4);
  EXPECT_EQ(Values<int8_t>(*y), (std::vector<int8_t>{-8, -2, 2, 4, 7, 0}));
  // uint2 with zero point 1: -3 + 1 saturates to 0; 0.5 rounds to 0, + 1.
  auto u2 = RunOp(OpType::kQuantizeLinear,
                  {F32({5}, {0, 1, 2, -3, 0.5f}), F32({}, {1}), LowCodes(DataType::kU2, {}, {1})},
                  {}, 25);
  ASSERT_TRUE(u2.ok()) << u2.status();
  EXPECT_EQ(Values<uint8_t>(*u2), (std::vector<uint8_t>{1, 2, 3, 0, 1}));
  // output_dtype without a zero point (opset 21).
  auto od = RunOp(OpType::kQuantizeLinear, {F32({2}, {7.4f, -9}), F32({}, {1})},
                  {{"output_dtype", IntAttr(static_cast<int64_t>(DataType::kI4))}}, 21);
  ASSERT_TRUE(od.ok()) << od.status();
  EXPECT_EQ(od->dtype(), DataType::kI4);
  EXPECT_EQ(Values<int8_t>(*od), (std::vector<int8_t>{7, -8}));
}

TEST(LowBitQuantize, Float8SaturateAttribute) {
  const std::vector<ir::Tensor> in = {F32({3}, {1000, 0.3f, -2}), F32({}, {1}),
                                      LowCodes(DataType::kF8E4M3FN, {}, {0})};
  auto sat = RunOp(OpType::kQuantizeLinear, in, {}, 21);
  ASSERT_TRUE(sat.ok()) << sat.status();
  EXPECT_EQ(Values<uint8_t>(*sat), (std::vector<uint8_t>{0x7e, 0x2a, 0xc0}));
  auto raw = RunOp(OpType::kQuantizeLinear, in, {{"saturate", IntAttr(0)}}, 21);
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(Values<uint8_t>(*raw), (std::vector<uint8_t>{0x7f, 0x2a, 0xc0}));
}

TEST(LowBitQuantize, Float4Blocked) {
  // Blocks of 2 along axis 1: [1, 2] / 1 and [3, 12] / 2 -> 1, 2, 1.5, 6.
  auto y = RunOp(OpType::kQuantizeLinear,
                 {F32({1, 4}, {1, 2, 3, 12}), F32({1, 2}, {1, 2}),
                  LowCodes(DataType::kF4E2M1, {1, 2}, {0, 0})},
                 {{"axis", IntAttr(1)}, {"block_size", IntAttr(2)}}, 23);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->dtype(), DataType::kF4E2M1);
  EXPECT_EQ(Values<uint8_t>(*y), (std::vector<uint8_t>{0x2, 0x4, 0x3, 0x7}));
}

TEST(LowBitQuantize, E8M0Scale) {
  // Scale 2^(128-127) = 2: 3 / 2 = 1.5 -> 2 (half to even), -5 / 2 = -2.5 -> -2.
  auto y = RunOp(OpType::kQuantizeLinear,
                 {F32({2}, {3, -5}), LowCodes(DataType::kF8E8M0, {}, {128}), I8({}, {0})}, {}, 25);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values<int8_t>(*y), (std::vector<int8_t>{2, -2}));
}

// ---- DequantizeLinear ----

TEST(LowBitDequantize, IntegersPerAxisWithZeroPoint) {
  auto y = RunOp(OpType::kDequantizeLinear,
                 {Low(DataType::kI4, {2, 2}, {-8, 7, 1, -1}), F32({2}, {2, 0.5f}),
                  Low(DataType::kI4, {2}, {1, -1})},
                 {{"axis", IntAttr(0)}}, 21);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values<float>(*y), (std::vector<float>{-18, 12, 1, 0}));
  auto u2 = RunOp(OpType::kDequantizeLinear,
                  {LowCodes(DataType::kU2, {4}, {0, 1, 2, 3}), F32({}, {1.5f}),
                   LowCodes(DataType::kU2, {}, {2})},
                  {}, 25);
  ASSERT_TRUE(u2.ok()) << u2.status();
  EXPECT_EQ(Values<float>(*u2), (std::vector<float>{-3, -1.5f, 0, 1.5f}));
}

TEST(LowBitDequantize, FloatsKeepInfAndNaN) {
  auto y =
      RunOp(OpType::kDequantizeLinear,
            {LowCodes(DataType::kF8E5M2, {4}, {0x7c, 0x7e, 0x3c, 0xbc}), F32({}, {2})}, {}, 19);
  ASSERT_TRUE(y.ok()) << y.status();
  const std::vector<float> v = Values<float>(*y);
  EXPECT_EQ(v[0], kInf);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(v[2], 2.0f);
  EXPECT_EQ(v[3], -2.0f);
  // float4e2m1 to float16 through output_dtype (opset 23): 6 * 0.5 and -0.5 * 0.5.
  auto h = RunOp(OpType::kDequantizeLinear,
                 {LowCodes(DataType::kF4E2M1, {2}, {0x7, 0x9}), F32({}, {0.5f})},
                 {{"output_dtype", IntAttr(static_cast<int64_t>(DataType::kF16))}}, 23);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->dtype(), DataType::kF16);
  EXPECT_EQ(ToFloats(*h), (std::vector<float>{3, -0.25f}));
}

TEST(LowBitDequantize, E8M0ScaleNeedsOutputDtype) {
  const ir::Tensor x = Low(DataType::kI4, {2}, {3, -2});
  const ir::Tensor scale = LowCodes(DataType::kF8E8M0, {}, {126});  // 0.5
  ExpectStatusError(RunOp(OpType::kDequantizeLinear, {x, scale}, {}, 25).status(),
                    absl::StatusCode::kInvalidArgument, "output_dtype");
  auto y = RunOp(OpType::kDequantizeLinear, {x, scale},
                 {{"output_dtype", IntAttr(static_cast<int64_t>(DataType::kF32))}}, 25);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(Values<float>(*y), (std::vector<float>{1.5f, -1}));
  // The zero point must have x's type.
  ExpectStatusError(
      RunOp(OpType::kDequantizeLinear, {x, F32({}, {1}), LowCodes(DataType::kU4, {}, {0})}, {}, 25)
          .status(),
      absl::StatusCode::kInvalidArgument, "x_zero_point dtype uint4");
}

}  // namespace
}  // namespace kiln::testing::ew
