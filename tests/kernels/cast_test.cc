// Cast / CastLike reference kernels: every conversion class, rounding once into fp16/bf16,
// defined results for out-of-range float -> int, and the unsupported (string, float6) targets.
// The low-bit types (float8, float4, int4, int2) are tested in lowbit_cast_quant_test.cc.
#include <cmath>
#include <limits>

#include "tests/kernels/elementwise_testing.h"

namespace kiln::testing::ew {
namespace {

using ir::OpType;

absl::StatusOr<ir::Tensor> Cast(ir::Tensor x, DataType to, int since_version = 23) {
  return RunOp(OpType::kCast, {std::move(x)}, {{"to", IntAttr(static_cast<int64_t>(to))}},
               since_version);
}

TEST(Cast, FloatToIntTruncatesAndSaturates) {
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  auto out = Cast(F32({5}, {1.7f, -1.7f, 1e10f, -1e10f, kNaN}), DataType::kI32);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dtype(), DataType::kI32);
  EXPECT_EQ(Values<int32_t>(*out), (std::vector<int32_t>{1, -1, 2147483647, -2147483647 - 1, 0}));
  auto u8 = Cast(F64({3}, {-3.5, 255.9, 300}), DataType::kU8);
  ASSERT_TRUE(u8.ok()) << u8.status();
  EXPECT_EQ(Values<uint8_t>(*u8), (std::vector<uint8_t>{0, 255, 255}));
  auto i64 = Cast(F16({2}, {-2.5f, 65504}), DataType::kI64);
  ASSERT_TRUE(i64.ok()) << i64.status();
  EXPECT_EQ(Values<int64_t>(*i64), (std::vector<int64_t>{-2, 65504}));
}

TEST(Cast, IntegerToIntegerWraps) {
  auto out = Cast(I32({3}, {300, -1, 127}), DataType::kI8);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<int8_t>(*out), (std::vector<int8_t>{44, -1, 127}));
  auto u = Cast(I8({2}, {-1, 5}), DataType::kU8);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(Values<uint8_t>(*u), (std::vector<uint8_t>{255, 5}));
  auto wide = Cast(I8({2}, {-1, 5}), DataType::kI64);
  ASSERT_TRUE(wide.ok()) << wide.status();
  EXPECT_EQ(Values<int64_t>(*wide), (std::vector<int64_t>{-1, 5}));
}

TEST(Cast, BoolConversions) {
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  auto to_bool = Cast(F32({4}, {0, -0.0f, 0.5f, kNaN}), DataType::kBool);
  ASSERT_TRUE(to_bool.ok()) << to_bool.status();
  EXPECT_EQ(to_bool->dtype(), DataType::kBool);
  EXPECT_EQ(Values<uint8_t>(*to_bool), (std::vector<uint8_t>{0, 0, 1, 1}));
  auto from_bool = Cast(Bool({3}, {0, 1, 2}), DataType::kF32);  // a stray 2 is true -> 1
  ASSERT_TRUE(from_bool.ok()) << from_bool.status();
  EXPECT_EQ(Values<float>(*from_bool), (std::vector<float>{0, 1, 1}));
  auto i = Cast(I64({2}, {0, -7}), DataType::kBool);
  ASSERT_TRUE(i.ok()) << i.status();
  EXPECT_EQ(Values<uint8_t>(*i), (std::vector<uint8_t>{0, 1}));
  auto bh = Cast(Bool({2}, {1, 0}), DataType::kBF16);
  ASSERT_TRUE(bh.ok()) << bh.status();
  EXPECT_EQ(Bits16(*bh), (std::vector<uint16_t>{0x3F80, 0}));
}

TEST(Cast, ToHalfRoundsOnceToNearestEven) {
  // 1 + 2^-11 + 2^-40 lies just above the fp16 tie between 1 and 1 + 2^-10. Rounding through
  // fp32 first would drop the 2^-40 and tie to 1; direct rounding gives 1 + 2^-10.
  auto h = Cast(F64({1}, {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)}), DataType::kF16);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->dtype(), DataType::kF16);
  EXPECT_EQ(Bits16(*h)[0], 0x3C01);
  // Same for int64 -> bf16: 2^24 + 2^16 + 1 is above the tie 2^24 + 2^16; through fp32 it would
  // become exactly the tie and round to even (2^24).
  auto b = Cast(I64({1}, {(1 << 24) + (1 << 16) + 1}), DataType::kBF16);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(ToFloats(*b)[0], static_cast<float>((1 << 24) + (1 << 17)));
  // float -> fp16: 1 + 2^-11 exactly is a tie -> even (1); overflow -> inf.
  auto f = Cast(F32({2}, {1.0f + std::ldexp(1.0f, -11), 70000}), DataType::kF16);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(Bits16(*f), (std::vector<uint16_t>{0x3C00, 0x7C00}));
  // fp16 -> bf16: 1 + 2^-10 is not representable in bf16 (8 bits): rounds to 1 (below the tie).
  auto hb = Cast(F16({1}, {1.0f + std::ldexp(1.0f, -10)}), DataType::kBF16);
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(Bits16(*hb)[0], 0x3F80);
  // bf16 -> fp16 and -> float are exact here.
  auto bh = Cast(BF16({1}, {1.5f}), DataType::kF16);
  ASSERT_TRUE(bh.ok()) << bh.status();
  EXPECT_EQ(Bits16(*bh)[0], 0x3E00);
}

TEST(Cast, FloatWidening) {
  auto d = Cast(F32({1}, {0.1f}), DataType::kF64);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(Values<double>(*d)[0], static_cast<double>(0.1f));
  auto f = Cast(F64({1}, {0.1}), DataType::kF32);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(Values<float>(*f)[0], 0.1f);
  auto same = Cast(I64({2}, {1, 2}), DataType::kI64, 6);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(Values<int64_t>(*same), (std::vector<int64_t>{1, 2}));
}

TEST(CastLike, TakesTargetDtypeFromSecondInput) {
  auto out = RunOp(OpType::kCastLike, {F32({2}, {2.9f, -2.9f}), I64({0}, {})}, {}, 15);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dtype(), DataType::kI64);
  EXPECT_EQ(Values<int64_t>(*out), (std::vector<int64_t>{2, -2}));
  auto h = RunOp(OpType::kCastLike, {F32({1}, {1.0f / 3}), F16({1}, {0})}, {}, 19);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->dtype(), DataType::kF16);
  EXPECT_EQ(Bits16(*h)[0], 0x3555);  // 1/3 -> 0.33325195
}

TEST(Cast, UnsupportedTargetsAndBadAttributes) {
  ExpectStatusError(Cast(F32({1}, {1}), DataType::kString).status(),
                    absl::StatusCode::kUnimplemented);
  // 27 is float6e2m3, a type Kiln does not have.
  ExpectStatusError(RunOp(OpType::kCast, {F32({1}, {1})}, {{"to", IntAttr(27)}}).status(),
                    absl::StatusCode::kUnimplemented);
  ExpectStatusError(RunOp(OpType::kCast, {F32({1}, {1})}).status(),
                    absl::StatusCode::kInvalidArgument);
  ExpectStatusError(RunOp(OpType::kCast, {F32({1}, {1})}, {{"to", FloatAttr(1)}}).status(),
                    absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::testing::ew
