// Tests of the reduce family's reference kernels: Reduce*, ArgMax/ArgMin, Softmax, LogSoftmax,
// Hardmax, LpNormalization, CumSum, TopK.
#include <cmath>
#include <limits>
#include <vector>

#include "engine/common/half.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

// NodeSpec literals leave output_dtypes (unused here) to its default.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace kiln::testing {
namespace {

using ir::OpType;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pointwise;

constexpr float kInf = std::numeric_limits<float>::infinity();

// fp32 results of short transcendental chains: a few ulps of error from exp/log/sqrt.
constexpr float kTol = 1e-6f;

std::vector<int64_t> Ints(const ir::Tensor& t) {
  std::vector<int64_t> v(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = ir::ElementAsInt64(t, i);
  return v;
}

ir::Tensor MakeI32(std::vector<int64_t> dims, const std::vector<int32_t>& v) {
  return MakeTensor<int32_t>(std::move(dims), v, DataType::kI32);
}

// ---- Reduce* ----

TEST(ReduceTest, SumAxesInputKeepdims) {
  ir::Tensor y = RunNodeOk0(
      {OpType::kReduceSum, {}, {MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6}), MakeInt64({1}, {1})}});
  EXPECT_THAT(y.dims(), ElementsAre(2, 1));
  EXPECT_THAT(ToFloats(y), ElementsAre(6, 15));
}

TEST(ReduceTest, SumAxesAttributeBeforeOpset13) {
  ir::Tensor y = RunNodeOk0({OpType::kReduceSum,
                             {{"axes", IntsAttr({0})}, {"keepdims", IntAttr(0)}},
                             {MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6})},
                             1,
                             11});
  EXPECT_THAT(y.dims(), ElementsAre(3));
  EXPECT_THAT(ToFloats(y), ElementsAre(5, 7, 9));
}

TEST(ReduceTest, DefaultReducesAllAxes) {
  ir::Tensor y = RunNodeOk0(
      {OpType::kReduceSum, {{"keepdims", IntAttr(0)}}, {MakeFloat({2, 2}, {1, 2, 3, 4})}});
  EXPECT_TRUE(y.dims().empty());
  EXPECT_THAT(ToFloats(y), ElementsAre(10));
  // An explicitly empty axes input means the same.
  y = RunNodeOk0({OpType::kReduceMean, {}, {MakeFloat({2, 2}, {1, 2, 3, 4}), MakeInt64({0}, {})}});
  EXPECT_THAT(y.dims(), ElementsAre(1, 1));
  EXPECT_THAT(ToFloats(y), ElementsAre(2.5f));
}

TEST(ReduceTest, NoopWithEmptyAxesAppliesElementwisePart) {
  const ir::Tensor x = MakeFloat({3}, {-1, 2, -3});
  EXPECT_THAT(
      ToFloats(RunNodeOk0({OpType::kReduceSum, {{"noop_with_empty_axes", IntAttr(1)}}, {x}})),
      ElementsAre(-1, 2, -3));
  EXPECT_THAT(
      ToFloats(RunNodeOk0({OpType::kReduceSumSquare, {{"noop_with_empty_axes", IntAttr(1)}}, {x}})),
      ElementsAre(1, 4, 9));
  EXPECT_THAT(
      ToFloats(RunNodeOk0({OpType::kReduceL1, {{"noop_with_empty_axes", IntAttr(1)}}, {x}})),
      ElementsAre(1, 2, 3));
}

// Reducing the middle axis and the outer+inner axes of a 3-D tensor exercises every path of the
// loop (inner kept / inner reduced, outer odometer).
TEST(ReduceTest, MiddleAndOuterAxesOf3D) {
  // x[i][j][k] = 6i + 2j + k, shape [2, 3, 2].
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = static_cast<float>(i);
  const ir::Tensor x = MakeFloat({2, 3, 2}, v);
  ir::Tensor y =
      RunNodeOk0({OpType::kReduceSum, {{"keepdims", IntAttr(0)}}, {x, MakeInt64({1}, {1})}});
  EXPECT_THAT(y.dims(), ElementsAre(2, 2));
  EXPECT_THAT(ToFloats(y), ElementsAre(0 + 2 + 4, 1 + 3 + 5, 6 + 8 + 10, 7 + 9 + 11));
  y = RunNodeOk0({OpType::kReduceMax, {}, {x, MakeInt64({2}, {0, -1})}});
  EXPECT_THAT(y.dims(), ElementsAre(1, 3, 1));
  EXPECT_THAT(ToFloats(y), ElementsAre(7, 9, 11));
  y = RunNodeOk0({OpType::kReduceMin, {{"axes", IntsAttr({0, 2})}}, {x}, 1, 13});
  EXPECT_THAT(ToFloats(y), ElementsAre(0, 2, 4));
}

TEST(ReduceTest, EachOpOnOneRow) {
  const ir::Tensor x = MakeFloat({1, 4}, {1, -2, 3, 4});
  auto run = [&](OpType op) {
    return ToFloats(RunNodeOk0({op, {{"keepdims", IntAttr(0)}}, {x, MakeInt64({1}, {1})}}))[0];
  };
  EXPECT_EQ(run(OpType::kReduceSum), 6);
  EXPECT_EQ(run(OpType::kReduceSumSquare), 30);
  EXPECT_EQ(run(OpType::kReduceL1), 10);
  EXPECT_NEAR(run(OpType::kReduceL2), std::sqrt(30.0f), kTol * 6);
  EXPECT_NEAR(run(OpType::kReduceLogSum), std::log(6.0f), kTol);
  EXPECT_NEAR(run(OpType::kReduceLogSumExp),
              std::log(std::exp(1.0) + std::exp(-2.0) + std::exp(3.0) + std::exp(4.0)), kTol * 5);
  EXPECT_EQ(run(OpType::kReduceMean), 1.5f);
  EXPECT_EQ(run(OpType::kReduceProd), -24);
  EXPECT_EQ(run(OpType::kReduceMax), 4);
  EXPECT_EQ(run(OpType::kReduceMin), -2);
}

TEST(ReduceTest, LogSumExpDoesNotOverflow) {
  ir::Tensor y = RunNodeOk0({OpType::kReduceLogSumExp, {}, {MakeFloat({2}, {1000, 1000})}});
  // log(2 e^1000) = 1000 + log 2; 1000 has ulp 6e-5 in fp32.
  EXPECT_NEAR(ToFloats(y)[0], 1000.0f + std::log(2.0f), 1e-4f);
  y = RunNodeOk0({OpType::kReduceLogSumExp, {}, {MakeFloat({2}, {-kInf, -kInf})}});
  EXPECT_EQ(ToFloats(y)[0], -kInf);
  y = RunNodeOk0({OpType::kReduceLogSumExp, {}, {MakeFloat({2}, {kInf, 3})}});
  EXPECT_EQ(ToFloats(y)[0], kInf);
}

TEST(ReduceTest, EmptyReductionsFollowTheSpec) {
  const ir::Tensor x = MakeFloat({2, 0, 3}, {});
  auto run = [&](OpType op) {
    ir::Tensor y = RunNodeOk0({op, {}, {x, MakeInt64({1}, {1})}});
    EXPECT_THAT(y.dims(), ElementsAre(2, 1, 3));
    return ToFloats(y);
  };
  EXPECT_THAT(run(OpType::kReduceSum), ::testing::Each(0.0f));
  EXPECT_THAT(run(OpType::kReduceProd), ::testing::Each(1.0f));
  EXPECT_THAT(run(OpType::kReduceMax), ::testing::Each(-kInf));
  EXPECT_THAT(run(OpType::kReduceMin), ::testing::Each(kInf));
  EXPECT_THAT(run(OpType::kReduceL1), ::testing::Each(0.0f));
  EXPECT_THAT(run(OpType::kReduceL2), ::testing::Each(0.0f));
  EXPECT_THAT(run(OpType::kReduceSumSquare), ::testing::Each(0.0f));
  EXPECT_THAT(run(OpType::kReduceLogSum), ::testing::Each(-kInf));
  EXPECT_THAT(run(OpType::kReduceLogSumExp), ::testing::Each(-kInf));
  // Integers have no infinity: the type's lowest value.
  ir::Tensor yi = RunNodeOk0({OpType::kReduceMax, {}, {MakeI32({0}, {})}});
  EXPECT_THAT(Ints(yi), ElementsAre(std::numeric_limits<int32_t>::min()));
}

TEST(ReduceTest, IntegerTypes) {
  ir::Tensor y = RunNodeOk0({OpType::kReduceSum, {}, {MakeI32({3}, {5, -7, 9})}});
  EXPECT_EQ(y.dtype(), DataType::kI32);
  EXPECT_THAT(Ints(y), ElementsAre(7));
  // Integer mean truncates like integer division.
  y = RunNodeOk0({OpType::kReduceMean, {}, {MakeI32({2}, {3, 4})}});
  EXPECT_THAT(Ints(y), ElementsAre(3));
  // Sums wrap in two's complement rather than invoking undefined behaviour.
  y = RunNodeOk0(
      {OpType::kReduceSum, {}, {MakeI32({2}, {std::numeric_limits<int32_t>::max(), 1})}});
  EXPECT_THAT(Ints(y), ElementsAre(std::numeric_limits<int32_t>::min()));
  y = RunNodeOk0({OpType::kReduceMax,
                  {},
                  {MakeTensor<int8_t>({3}, {-5, 7, 2}, DataType::kI8), MakeInt64({1}, {0})}});
  EXPECT_THAT(Ints(y), ElementsAre(7));
}

TEST(ReduceTest, BoolMaxMinAtOpset20) {
  const ir::Tensor b = MakeTensor<uint8_t>({2, 2}, {1, 0, 0, 0}, DataType::kBool);
  ir::Tensor y = RunNodeOk0({OpType::kReduceMax, {}, {b, MakeInt64({1}, {1})}, 1, 20});
  EXPECT_EQ(y.dtype(), DataType::kBool);
  EXPECT_THAT(Ints(y), ElementsAre(1, 0));
  y = RunNodeOk0({OpType::kReduceMin, {}, {b, MakeInt64({1}, {0})}, 1, 20});
  EXPECT_THAT(Ints(y), ElementsAre(0, 0));
}

// fp16/bf16 accumulate in fp32 and round once. In fp16, 2048 + 1 rounds back to 2048 (ties to
// even), so a fp16 accumulator would return 2048; fp32 gives 2050, which fp16 represents.
TEST(ReduceTest, HalfAccumulatesInFloat) {
  ir::Tensor y = RunNodeOk0({OpType::kReduceSum, {}, {MakeHalf({3}, {2048, 1, 1})}});
  EXPECT_EQ(y.dtype(), DataType::kF16);
  EXPECT_THAT(ToFloats(y), ElementsAre(2050));
  // Same for bf16 at 256 (8 significant bits).
  y = RunNodeOk0({OpType::kReduceSum, {}, {MakeBf16({3}, {256, 1, 1})}});
  EXPECT_EQ(y.dtype(), DataType::kBF16);
  EXPECT_THAT(ToFloats(y), ElementsAre(258));
  // And L2 of {3, 4} in bf16 is exactly 5.
  y = RunNodeOk0({OpType::kReduceL2, {}, {MakeBf16({2}, {3, 4})}});
  EXPECT_THAT(ToFloats(y), ElementsAre(5));
}

TEST(ReduceTest, DoubleStaysDouble) {
  // 1 + 1e-12 is lost in fp32 but kept in double.
  ir::Tensor x = MakeTensor<double>({2}, {1.0, 1e-12}, DataType::kF64);
  ir::Tensor y = RunNodeOk0({OpType::kReduceSum, {}, {x}});
  EXPECT_EQ(y.dtype(), DataType::kF64);
  EXPECT_EQ(y.data<double>()[0], 1.0 + 1e-12);
}

TEST(ReduceTest, Errors) {
  const ir::Tensor x = MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6});
  auto st = RunNode({OpType::kReduceSum, {}, {x, MakeInt64({1}, {2})}}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("test_node"));
  st = RunNode({OpType::kReduceSum, {}, {x, MakeInt64({2}, {1, -1})}}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("repeated"));
  st = RunNode({OpType::kReduceMax, {{"axes", IntsAttr({0})}}, {x}, 1, 18}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  st = RunNode({OpType::kReduceMean, {{"axes", IntsAttr({-3})}}, {x}, 1, 13}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  st = RunNode({OpType::kReduceSum, {}, {x, MakeFloat({1}, {0})}}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

// ---- ArgMax / ArgMin ----

TEST(ArgTest, MaxMinKeepdimsAndLastIndex) {
  const ir::Tensor x = MakeFloat({2, 3}, {1, 5, 5, 7, 2, 7});
  ir::Tensor y = RunNodeOk0({OpType::kArgMax, {{"axis", IntAttr(1)}}, {x}});
  EXPECT_EQ(y.dtype(), DataType::kI64);
  EXPECT_THAT(y.dims(), ElementsAre(2, 1));
  EXPECT_THAT(Ints(y), ElementsAre(1, 0));
  y = RunNodeOk0(
      {OpType::kArgMax, {{"axis", IntAttr(-1)}, {"select_last_index", IntAttr(1)}}, {x}});
  EXPECT_THAT(Ints(y), ElementsAre(2, 2));
  y = RunNodeOk0({OpType::kArgMin, {{"keepdims", IntAttr(0)}}, {x}});
  EXPECT_THAT(y.dims(), ElementsAre(3));
  EXPECT_THAT(Ints(y), ElementsAre(0, 1, 0));
  y = RunNodeOk0({OpType::kArgMin, {{"axis", IntAttr(1)}, {"select_last_index", IntAttr(1)}}, {x}});
  EXPECT_THAT(Ints(y), ElementsAre(0, 1));
}

TEST(ArgTest, HalfAndIntInputs) {
  ir::Tensor y =
      RunNodeOk0({OpType::kArgMax, {{"axis", IntAttr(0)}}, {MakeHalf({3}, {0.5f, 2, -1})}});
  EXPECT_THAT(Ints(y), ElementsAre(1));
  y = RunNodeOk0({OpType::kArgMin, {{"axis", IntAttr(0)}}, {MakeI32({3}, {4, -9, 0})}});
  EXPECT_THAT(Ints(y), ElementsAre(1));
}

TEST(ArgTest, Errors) {
  auto st = RunNode({OpType::kArgMax, {{"axis", IntAttr(2)}}, {MakeFloat({2, 2}, {1, 2, 3, 4})}})
                .status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  st = RunNode({OpType::kArgMax, {{"axis", IntAttr(1)}}, {MakeFloat({2, 0}, {})}}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  st = RunNode({OpType::kArgMax, {{"select_last_index", IntAttr(1)}}, {MakeFloat({1}, {1})}, 1, 11})
           .status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

// ---- Softmax family ----

TEST(SoftmaxTest, Opset13SingleAxis) {
  ir::Tensor y = RunNodeOk0({OpType::kSoftmax, {}, {MakeFloat({2, 2}, {0, 0, 1, 3})}});
  const float e2 = std::exp(2.0f);
  EXPECT_THAT(ToFloats(y),
              Pointwise(::testing::FloatNear(kTol), {0.5f, 0.5f, 1 / (1 + e2), e2 / (1 + e2)}));
  // axis 0 of a [2, 2]: columns.
  y = RunNodeOk0({OpType::kSoftmax, {{"axis", IntAttr(0)}}, {MakeFloat({2, 2}, {0, 0, 0, 0})}});
  EXPECT_THAT(ToFloats(y), ElementsAre(0.5f, 0.5f, 0.5f, 0.5f));
}

// Before opset 13, axis=1 on [1, 2, 2] normalises over all 4 trailing elements together.
TEST(SoftmaxTest, Opset11CoercesTo2D) {
  const ir::Tensor x = MakeFloat({1, 2, 2}, {0, 0, 0, 0});
  EXPECT_THAT(ToFloats(RunNodeOk0({OpType::kSoftmax, {}, {x}, 1, 11})), ::testing::Each(0.25f));
  EXPECT_THAT(ToFloats(RunNodeOk0({OpType::kSoftmax, {{"axis", IntAttr(1)}}, {x}, 1, 13})),
              ::testing::Each(0.5f));
  EXPECT_THAT(
      ToFloats(RunNodeOk0({OpType::kHardmax, {}, {MakeFloat({1, 2, 2}, {1, 3, 3, 2})}, 1, 11})),
      ElementsAre(0, 1, 0, 0));
}

TEST(SoftmaxTest, LogSoftmaxLargeNumbers) {
  ir::Tensor y = RunNodeOk0({OpType::kLogSoftmax, {}, {MakeFloat({2}, {1000, 1000})}});
  EXPECT_THAT(ToFloats(y),
              Pointwise(::testing::FloatNear(kTol), {-std::log(2.0f), -std::log(2.0f)}));
}

TEST(SoftmaxTest, HardmaxFirstMaximum) {
  ir::Tensor y = RunNodeOk0({OpType::kHardmax, {}, {MakeFloat({2, 3}, {1, 4, 4, 5, 0, 5})}});
  EXPECT_THAT(ToFloats(y), ElementsAre(0, 1, 0, 1, 0, 0));
}

// fp16: computed in fp32, rounded once. softmax([0, ln 3]) = [0.25, 0.75] exactly representable.
TEST(SoftmaxTest, HalfRoundsOnce) {
  const float ln3 = static_cast<float>(Float16(std::log(3.0f)));
  ir::Tensor y = RunNodeOk0({OpType::kSoftmax, {}, {MakeHalf({2}, {0, ln3})}});
  EXPECT_EQ(y.dtype(), DataType::kF16);
  const float e = std::exp(ln3);
  EXPECT_THAT(ToFloats(y), ElementsAre(static_cast<float>(Float16(1 / (1 + e))),
                                       static_cast<float>(Float16(e / (1 + e)))));
}

TEST(SoftmaxTest, AxisOutOfRange) {
  auto st = RunNode({OpType::kSoftmax, {{"axis", IntAttr(2)}}, {MakeFloat({2}, {1, 2})}}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

TEST(LpNormTest, P1P2AndZeroRow) {
  const ir::Tensor x = MakeFloat({2, 2}, {3, -4, 0, 0});
  EXPECT_THAT(ToFloats(RunNodeOk0({OpType::kLpNormalization, {}, {x}, 1, 22})),
              Pointwise(::testing::FloatNear(kTol), {0.6f, -0.8f, 0.0f, 0.0f}));
  EXPECT_THAT(
      ToFloats(RunNodeOk0(
          {OpType::kLpNormalization, {{"p", IntAttr(1)}, {"axis", IntAttr(0)}}, {x}, 1, 1})),
      ElementsAre(1, -1, 0, 0));
  auto st = RunNode({OpType::kLpNormalization, {{"p", IntAttr(3)}}, {x}}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

// ---- CumSum ----

TEST(CumSumTest, Modes) {
  const ir::Tensor x = MakeFloat({3}, {1, 2, 3});
  const ir::Tensor axis = MakeInt64({}, {0});
  auto run = [&](int exclusive, int reverse) {
    return ToFloats(RunNodeOk0({OpType::kCumSum,
                                {{"exclusive", IntAttr(exclusive)}, {"reverse", IntAttr(reverse)}},
                                {x, axis}}));
  };
  EXPECT_THAT(run(0, 0), ElementsAre(1, 3, 6));
  EXPECT_THAT(run(1, 0), ElementsAre(0, 1, 3));
  EXPECT_THAT(run(0, 1), ElementsAre(6, 5, 3));
  EXPECT_THAT(run(1, 1), ElementsAre(5, 3, 0));
}

TEST(CumSumTest, AxesAndInts) {
  const ir::Tensor x = MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(ToFloats(RunNodeOk0({OpType::kCumSum, {}, {x, MakeInt64({}, {0})}})),
              ElementsAre(1, 2, 3, 5, 7, 9));
  EXPECT_THAT(ToFloats(RunNodeOk0({OpType::kCumSum, {}, {x, MakeI32({1}, {-1})}})),
              ElementsAre(1, 3, 6, 4, 9, 15));
  ir::Tensor y =
      RunNodeOk0({OpType::kCumSum, {}, {MakeI32({3}, {1, 2, 3}), MakeInt64({}, {0})}, 1, 11});
  EXPECT_EQ(y.dtype(), DataType::kI32);
  EXPECT_THAT(Ints(y), ElementsAre(1, 3, 6));
  // fp16 running sum kept in fp32: 2048 + 1 + 1 -> 2049 (rounds to 2048), 2050.
  y = RunNodeOk0({OpType::kCumSum, {}, {MakeHalf({3}, {2048, 1, 1}), MakeInt64({}, {0})}});
  EXPECT_THAT(ToFloats(y), ElementsAre(2048, 2048, 2050));
}

TEST(CumSumTest, Errors) {
  const ir::Tensor x = MakeFloat({2}, {1, 2});
  EXPECT_EQ(RunNode({OpType::kCumSum, {}, {x, MakeInt64({}, {1})}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunNode({OpType::kCumSum, {}, {x}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunNode({OpType::kCumSum, {}, {x, MakeInt64({2}, {0, 0})}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- TopK ----

TEST(TopKTest, LargestWithTiesByLowerIndex) {
  auto out = RunNode(
      {OpType::kTopK, {}, {MakeFloat({2, 4}, {1, 3, 3, 2, 4, 4, 0, 4}), MakeInt64({1}, {3})}, 2});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT((*out)[0].dims(), ElementsAre(2, 3));
  EXPECT_THAT(ToFloats((*out)[0]), ElementsAre(3, 3, 2, 4, 4, 4));
  EXPECT_THAT(Ints((*out)[1]), ElementsAre(1, 2, 3, 0, 1, 3));
}

TEST(TopKTest, SmallestAlongAxis0AndOpset1Attr) {
  const ir::Tensor x = MakeFloat({3, 2}, {5, 1, 2, 1, 9, 0});
  auto out = RunNode({OpType::kTopK,
                      {{"axis", IntAttr(0)}, {"largest", IntAttr(0)}},
                      {x, MakeInt64({1}, {2})},
                      2,
                      11});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(ToFloats((*out)[0]), ElementsAre(2, 0, 5, 1));
  EXPECT_THAT(Ints((*out)[1]), ElementsAre(1, 2, 0, 0));
  out = RunNode({OpType::kTopK, {{"axis", IntAttr(0)}, {"k", IntAttr(1)}}, {x}, 2, 1});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(ToFloats((*out)[0]), ElementsAre(9, 1));
  EXPECT_THAT(Ints((*out)[1]), ElementsAre(2, 0));
}

TEST(TopKTest, NanIsLargestAndIntInputs) {
  auto out =
      RunNode({OpType::kTopK, {}, {MakeFloat({3}, {1, std::nanf(""), 2}), MakeInt64({1}, {2})}, 2});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Ints((*out)[1]), ElementsAre(1, 2));
  out = RunNode({OpType::kTopK, {}, {MakeI32({3}, {-1, 7, 3}), MakeInt64({1}, {1})}, 2});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Ints((*out)[0]), ElementsAre(7));
}

TEST(TopKTest, Errors) {
  const ir::Tensor x = MakeFloat({3}, {1, 2, 3});
  EXPECT_EQ(RunNode({OpType::kTopK, {}, {x, MakeInt64({1}, {4})}, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunNode({OpType::kTopK, {}, {x, MakeInt64({1}, {-1})}, 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      RunNode({OpType::kTopK, {{"axis", IntAttr(1)}}, {x, MakeInt64({1}, {1})}, 2}).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunNode({OpType::kTopK, {}, {x}, 2, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::testing
