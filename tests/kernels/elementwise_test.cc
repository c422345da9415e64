// Unary math and activation reference kernels: hand-computed values, integer edge cases, the
// fp16/bf16 rounding rule and attribute errors.
#include <cmath>
#include <limits>

#include "tests/kernels/elementwise_testing.h"

namespace kiln::testing::ew {
namespace {

using ir::OpType;

constexpr float kPi = 3.14159265358979f;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Expected values below are written to 7-8 significant digits; float32 results are within a few
// ulp (~1e-7 relative) of the exact value, so 1e-6 relative checks the formula, not the libm.
constexpr float kTol = 1e-6f;

struct UnaryCase {
  OpType op;
  std::vector<float> in;
  std::vector<float> want;
  Attrs attrs = {};
};

class UnaryFloatTest : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryFloatTest, MatchesHandValues) {
  const UnaryCase& c = GetParam();
  const int64_t n = static_cast<int64_t>(c.in.size());
  auto out = RunOp(c.op, {F32({n}, c.in)}, c.attrs);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dtype(), DataType::kF32);
  EXPECT_EQ(out->dims(), std::vector<int64_t>{n});
  ExpectClose(Values<float>(*out), c.want, kTol);
}

INSTANTIATE_TEST_SUITE_P(
    Math, UnaryFloatTest,
    ::testing::Values(UnaryCase{OpType::kAbs, {-1.5f, 2, -0.0f}, {1.5f, 2, 0}},
                      UnaryCase{OpType::kAcos, {1, 0}, {0, kPi / 2}},
                      UnaryCase{OpType::kAcosh, {1, 2}, {0, 1.3169579f}},
                      UnaryCase{OpType::kAsin, {0, 1}, {0, kPi / 2}},
                      UnaryCase{OpType::kAsinh, {0, 1}, {0, 0.88137359f}},
                      UnaryCase{OpType::kAtan, {0, 1}, {0, kPi / 4}},
                      UnaryCase{OpType::kAtanh, {0, 0.5f}, {0, 0.54930614f}},
                      UnaryCase{OpType::kCeil, {-1.5f, 1.2f, 3}, {-1, 2, 3}},
                      UnaryCase{OpType::kCos, {0, kPi}, {1, -1}},
                      UnaryCase{OpType::kCosh, {0, 1}, {1, 1.5430806f}},
                      UnaryCase{OpType::kErf, {0, 1, -1}, {0, 0.84270079f, -0.84270079f}},
                      UnaryCase{OpType::kExp, {0, 1}, {1, 2.7182818f}},
                      UnaryCase{OpType::kFloor, {-1.5f, 1.2f, 3}, {-2, 1, 3}},
                      UnaryCase{OpType::kLog, {1, 2.7182818f}, {0, 1}},
                      UnaryCase{OpType::kNeg, {1.5f, -2}, {-1.5f, 2}},
                      UnaryCase{OpType::kReciprocal, {2, -4}, {0.5f, -0.25f}},
                      // Round: halves to even.
                      UnaryCase{OpType::kRound,
                                {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f, -2.6f},
                                {0, 2, 2, -0.0f, -2, 2, -3}},
                      UnaryCase{OpType::kSign, {-3, 0, 2, kNaN}, {-1, 0, 1, kNaN}},
                      UnaryCase{OpType::kSin, {0, kPi / 2}, {0, 1}},
                      UnaryCase{OpType::kSinh, {0, 1}, {0, 1.1752012f}},
                      UnaryCase{OpType::kSqrt, {4, 2.25f}, {2, 1.5f}},
                      UnaryCase{OpType::kTan, {0, kPi / 4}, {0, 1}},
                      UnaryCase{OpType::kTanh, {0, 1}, {0, 0.76159416f}}));

INSTANTIATE_TEST_SUITE_P(
    Activations, UnaryFloatTest,
    ::testing::Values(
        UnaryCase{OpType::kRelu, {-1, 0, 2, kNaN}, {0, 0, 2, kNaN}},
        UnaryCase{OpType::kLeakyRelu, {-2, 3}, {-0.02f, 3}},
        UnaryCase{OpType::kLeakyRelu, {-2, 3}, {-0.2f, 3}, {{"alpha", FloatAttr(0.1f)}}},
        UnaryCase{OpType::kElu, {-1, 1}, {-1.2642411f, 1}, {{"alpha", FloatAttr(2)}}},
        UnaryCase{OpType::kSelu, {-1, 0, 1}, {-1.1113307f, 0, 1.0507010f}},
        UnaryCase{OpType::kCelu, {-2, 3}, {-1.2642411f, 3}, {{"alpha", FloatAttr(2)}}},
        // The stable form must not give NaN at the extremes.
        UnaryCase{OpType::kSigmoid, {0, 2, -1000, 1000}, {0.5f, 0.88079708f, 0, 1}},
        UnaryCase{OpType::kHardSigmoid, {-3, 0, 1, 3}, {0, 0.5f, 0.7f, 1}},
        UnaryCase{OpType::kHardSigmoid,
                  {1},
                  {0.75f},
                  {{"alpha", FloatAttr(0.5f)}, {"beta", FloatAttr(0.25f)}}},
        UnaryCase{OpType::kHardSwish, {-4, 0, 1, 4}, {0, 0, 0.66666667f, 4}},
        UnaryCase{OpType::kSoftplus, {0, 1, 100, -100}, {0.69314718f, 1.3132617f, 100, 0}},
        UnaryCase{OpType::kSoftsign, {1, -3}, {0.5f, -0.75f}},
        UnaryCase{OpType::kMish, {0, 1}, {0, 0.86509839f}},
        UnaryCase{OpType::kGelu, {1, -2}, {0.84134475f, -0.045500264f}},
        UnaryCase{OpType::kGelu,
                  {1, -2},
                  {0.84119199f, -0.045402306f},
                  {{"approximate", StringAttr("tanh")}}},
        UnaryCase{OpType::kThresholdedRelu, {0.5f, 1, 2}, {0, 0, 2}},
        UnaryCase{OpType::kShrink,
                  {-2, -1, 0, 1, 2},
                  {-1.5f, 0, 0, 0, 1.5f},
                  {{"lambd", FloatAttr(1.5f)}, {"bias", FloatAttr(0.5f)}}}));

TEST(ElementwiseUnary, IntegerAbsNegWrapAtMinimum) {
  const int32_t kMin = std::numeric_limits<int32_t>::min();
  auto abs = RunOp(OpType::kAbs, {I32({3}, {-5, 7, kMin})});
  ASSERT_TRUE(abs.ok()) << abs.status();
  EXPECT_EQ(Values<int32_t>(*abs), (std::vector<int32_t>{5, 7, kMin}));
  auto neg = RunOp(OpType::kNeg, {I8({3}, {5, -128, 0})});
  ASSERT_TRUE(neg.ok()) << neg.status();
  EXPECT_EQ(Values<int8_t>(*neg), (std::vector<int8_t>{-5, -128, 0}));
}

TEST(ElementwiseUnary, IntegerSignReluShrinkErf) {
  auto sign = RunOp(OpType::kSign, {U8({3}, {0, 1, 200})});
  ASSERT_TRUE(sign.ok()) << sign.status();
  EXPECT_EQ(Values<uint8_t>(*sign), (std::vector<uint8_t>{0, 1, 1}));
  auto relu = RunOp(OpType::kRelu, {I64({3}, {-4, 0, 9})});
  ASSERT_TRUE(relu.ok()) << relu.status();
  EXPECT_EQ(Values<int64_t>(*relu), (std::vector<int64_t>{0, 0, 9}));
  // Shrink on int8 computes in double: -3 + 1.5 = -1.5 truncates to -1.
  auto shrink = RunOp(OpType::kShrink, {I8({3}, {-3, 1, 3})},
                      {{"lambd", FloatAttr(1.5f)}, {"bias", FloatAttr(1.5f)}});
  ASSERT_TRUE(shrink.ok()) << shrink.status();
  EXPECT_EQ(Values<int8_t>(*shrink), (std::vector<int8_t>{-1, 0, 1}));
  auto erf = RunOp(OpType::kErf, {I32({3}, {0, 3, -3})}, {}, 9);
  ASSERT_TRUE(erf.ok()) << erf.status();
  EXPECT_EQ(Values<int32_t>(*erf), (std::vector<int32_t>{0, 0, 0}));  // erf(3) = 0.99998 -> 0
}

TEST(ElementwiseUnary, DoubleComputesInDouble) {
  auto out = RunOp(OpType::kExp, {F64({1}, {1.0})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<double>(*out)[0], std::exp(1.0));  // float exp would differ at 1e-8
}

TEST(ElementwiseUnary, LogicalAndPredicates) {
  auto n = RunOp(OpType::kNot, {Bool({3}, {0, 1, 2})});  // a stray 2 still reads as true
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->dtype(), DataType::kBool);
  EXPECT_EQ(Values<uint8_t>(*n), (std::vector<uint8_t>{1, 0, 0}));

  std::vector<float> x = {kInf, -kInf, kNaN, 1};
  auto nan = RunOp(OpType::kIsNaN, {F32({4}, x)});
  ASSERT_TRUE(nan.ok()) << nan.status();
  EXPECT_EQ(nan->dtype(), DataType::kBool);
  EXPECT_EQ(Values<uint8_t>(*nan), (std::vector<uint8_t>{0, 0, 1, 0}));
  auto inf = RunOp(OpType::kIsInf, {F32({4}, x)});
  ASSERT_TRUE(inf.ok()) << inf.status();
  EXPECT_EQ(Values<uint8_t>(*inf), (std::vector<uint8_t>{1, 1, 0, 0}));
  auto pos = RunOp(OpType::kIsInf, {F32({4}, x)}, {{"detect_negative", IntAttr(0)}});
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(Values<uint8_t>(*pos), (std::vector<uint8_t>{1, 0, 0, 0}));
  auto neg = RunOp(OpType::kIsInf, {F16({4}, x)}, {{"detect_positive", IntAttr(0)}});
  ASSERT_TRUE(neg.ok()) << neg.status();
  EXPECT_EQ(Values<uint8_t>(*neg), (std::vector<uint8_t>{0, 1, 0, 0}));
}

// fp16/bf16: computed in fp32 and rounded once to nearest even.
TEST(ElementwiseUnary, HalfPrecisionRoundsOnce) {
  auto sq = RunOp(OpType::kSqrt, {F16({1}, {2})});
  ASSERT_TRUE(sq.ok()) << sq.status();
  EXPECT_EQ(sq->dtype(), DataType::kF16);
  EXPECT_EQ(Bits16(*sq)[0], 0x3DA8);  // sqrt(2)=1.41421356 -> 1.4140625
  auto e16 = RunOp(OpType::kExp, {F16({1}, {1})});
  ASSERT_TRUE(e16.ok()) << e16.status();
  EXPECT_EQ(Bits16(*e16)[0], 0x4170);  // 2.7182817 -> 2.71875
  auto e = RunOp(OpType::kExp, {BF16({1}, {1})});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->dtype(), DataType::kBF16);
  EXPECT_EQ(Bits16(*e)[0], 0x402E);  // 0x402DF854 rounds up to 2.71875
  // Gelu(1) in fp32 is 0.8413447; bf16 neighbours 0.83984375 (0x3F57) and 0.84375 (0x3F58).
  auto g = RunOp(OpType::kGelu, {BF16({1}, {1})});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Bits16(*g)[0], 0x3F57);
}

TEST(ElementwiseUnary, Errors) {
  ExpectStatusError(
      RunOp(OpType::kGelu, {F32({1}, {1})}, {{"approximate", StringAttr("erf")}}).status(),
      absl::StatusCode::kInvalidArgument);
  ExpectStatusError(RunOp(OpType::kCelu, {F32({1}, {1})}, {{"alpha", FloatAttr(0)}}).status(),
                    absl::StatusCode::kInvalidArgument);
  // Float-only op on an integer tensor: no kernel for that dtype.
  ExpectStatusError(RunOp(OpType::kSin, {I32({1}, {1})}).status(),
                    absl::StatusCode::kUnimplemented);
  // Neg has no unsigned kernel (the schema has none).
  ExpectStatusError(RunOp(OpType::kNeg, {U8({1}, {1})}).status(), absl::StatusCode::kUnimplemented);
}

TEST(ElementwiseUnary, EmptyAndScalarTensors) {
  auto empty = RunOp(OpType::kRelu, {F32({0, 3}, {})});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->dims(), (std::vector<int64_t>{0, 3}));
  auto scalar = RunOp(OpType::kNeg, {F32({}, {2})});
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->dims(), std::vector<int64_t>{});
  EXPECT_EQ(Values<float>(*scalar)[0], -2);
}

}  // namespace
}  // namespace kiln::testing::ew
