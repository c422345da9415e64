// Tests of the integer quantized reference kernels: MatMulInteger, ConvInteger, QLinearMatMul,
// QLinearConv. Every expected value is exact (integer outputs): the ONNX operator doc examples,
// hand-computed cases, and values from numpy / onnx.reference (the script lines are quoted).
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

#pragma GCC diagnostic ignored \
    "-Wmissing-field-initializers"  // NodeSpec{op}, as the other kernel tests

namespace kiln::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

ir::Tensor U8(std::vector<int64_t> dims, const std::vector<uint8_t>& v) {
  return MakeTensor<uint8_t>(std::move(dims), v, DataType::kU8);
}
ir::Tensor I8(std::vector<int64_t> dims, const std::vector<int8_t>& v) {
  return MakeTensor<int8_t>(std::move(dims), v, DataType::kI8);
}
ir::Tensor I32(std::vector<int64_t> dims, const std::vector<int32_t>& v) {
  return MakeTensor<int32_t>(std::move(dims), v, DataType::kI32);
}
std::vector<int32_t> Ints(const ir::Tensor& t) {
  std::vector<int32_t> v(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i)
    v[i] = static_cast<int32_t>(ir::ElementAsInt64(t, i));
  return v;
}

// ---- MatMulInteger --------------------------------------------------------------------------

TEST(MatMulInteger, OnnxExample) {
  NodeSpec s{ir::OpType::kMatMulInteger};
  s.since_version = 10;
  s.inputs = {U8({4, 3}, {11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0}), U8({3, 2}, {1, 4, 2, 5, 3, 6}),
              U8({}, {12}), U8({}, {0})};
  ir::Tensor y = RunNodeOk0(s);
  ASSERT_EQ(y.dtype(), DataType::kI32);
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{4, 2}));
  EXPECT_THAT(Ints(y), ElementsAre(-38, -83, -44, -98, -50, -113, -56, -128));
}

TEST(MatMulInteger, PerRowAndPerColumnZeroPointsBatched) {
  // A [2, 2, 3] int8 against B [3, 2] (broadcast batch); a_zero_point per row of A ([M] = [2],
  // read as [M, 1]), b_zero_point per column. numpy:
  //   matmul(A - azp.reshape(2, 1), B - bzp)
  NodeSpec s{ir::OpType::kMatMulInteger};
  s.since_version = 10;
  s.inputs = {I8({2, 2, 3}, {-5, 7, 100, 3, -128, 9, 127, 0, -1, 20, -20, 4}),
              I8({3, 2}, {1, -2, 3, 4, -5, 6}), I8({2}, {2, -3}), I8({2}, {-1, 5})};
  ir::Tensor y = RunNodeOk0(s);
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_THAT(Ints(y), ElementsAre(-386, 142, -536, 95, 254, -876, -50, -137));
}

TEST(MatMulInteger, NoZeroPointsMixedSignedness) {
  // uint8 A, int8 B: the extreme products 255 * -128 accumulate exactly.
  NodeSpec s{ir::OpType::kMatMulInteger};
  s.inputs = {U8({1, 2}, {255, 255}), I8({2, 1}, {-128, -128})};
  EXPECT_THAT(Ints(RunNodeOk0(s)), ElementsAre(-65280));
}

TEST(MatMulInteger, Errors) {
  NodeSpec s{ir::OpType::kMatMulInteger};
  s.inputs = {U8({1, 2}, {1, 2}), U8({2, 1}, {1, 2}), I8({}, {0})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "a_zero_point dtype int8");
  s.inputs = {U8({1, 2}, {1, 2}), U8({3, 1}, {1, 2, 3})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "");
  s.inputs = {U8({2, 2}, {1, 2, 3, 4}), U8({2, 2}, {1, 2, 3, 4}), U8({}, {0}), U8({3}, {1, 2, 3})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "broadcast");
}

// ---- ConvInteger ----------------------------------------------------------------------------

TEST(ConvInteger, OnnxExamples) {
  NodeSpec s{ir::OpType::kConvInteger};
  s.since_version = 10;
  s.inputs = {U8({1, 1, 3, 3}, {2, 3, 4, 5, 6, 7, 8, 9, 10}), U8({1, 1, 2, 2}, {1, 1, 1, 1}),
              U8({}, {1})};
  ir::Tensor y = RunNodeOk0(s);
  ASSERT_EQ(y.dtype(), DataType::kI32);
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_THAT(Ints(y), ElementsAre(12, 16, 24, 28));
  // With pads: the padding holds x_zero_point (0 after centering), as the reference pads X - zp.
  s.attrs = {{"pads", IntsAttr({1, 1, 1, 1})}};
  y = RunNodeOk0(s);
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{1, 1, 4, 4}));
  EXPECT_THAT(Ints(y), ElementsAre(1, 3, 5, 3, 5, 12, 16, 9, 11, 24, 28, 15, 7, 15, 17, 9));
}

TEST(ConvInteger, PerChannelWeightZeroPointStridedPadded) {
  // onnx.reference ConvInteger (pads 1, strides 2), x_zero_point 1, w_zero_point [1, -1].
  NodeSpec s{ir::OpType::kConvInteger,
             {{"pads", IntsAttr({1, 1, 1, 1})}, {"strides", IntsAttr({2, 2})}}};
  s.since_version = 10;
  s.inputs = {I8({1, 1, 4, 4}, {1, 2, -3, 4, 5, -6, 7, 8, 9, 10, -11, 12, 13, 14, 15, -16}),
              I8({2, 1, 2, 2}, {1, -1, 2, 0, 3, 1, -2, -1}), I8({}, {1}), I8({2}, {1, -1})};
  ir::Tensor y = RunNodeOk0(s);
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{1, 2, 3, 3}));
  EXPECT_THAT(Ints(y),
              ElementsAre(0, 5, 3, -16, 9, 11, -24, -28, 0, 0, -1, -3, 8, -25, 17, 24, 80, -68));
}

TEST(ConvInteger, Errors) {
  NodeSpec s{ir::OpType::kConvInteger};
  s.inputs = {U8({1, 1, 3, 3}, std::vector<uint8_t>(9, 1)),
              U8({2, 1, 2, 2}, std::vector<uint8_t>(8, 1)), U8({2}, {1, 1})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "x_zero_point must have one element");
  s.inputs = {U8({1, 1, 3, 3}, std::vector<uint8_t>(9, 1)),
              U8({2, 1, 2, 2}, std::vector<uint8_t>(8, 1)), U8({}, {1}), U8({3}, {1, 1, 1})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "w_zero_point must have one element");
  s.inputs = {U8({1, 2, 3, 3}, std::vector<uint8_t>(18, 1)),
              U8({2, 1, 2, 2}, std::vector<uint8_t>(8, 1))};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "inconsistent with group");
}

// ---- QLinearMatMul --------------------------------------------------------------------------

TEST(QLinearMatMul, OnnxExample) {
  NodeSpec s{ir::OpType::kQLinearMatMul};
  s.since_version = 10;
  s.inputs = {U8({2, 4}, {208, 236, 0, 238, 3, 214, 255, 29}),
              MakeFloat({}, {0.0066f}),
              U8({}, {113}),
              U8({4, 3}, {152, 51, 244, 60, 26, 255, 0, 127, 246, 127, 254, 247}),
              MakeFloat({}, {0.00705f}),
              U8({}, {114}),
              MakeFloat({}, {0.0107f}),
              U8({}, {118})};
  ir::Tensor y = RunNodeOk0(s);
  ASSERT_EQ(y.dtype(), DataType::kU8);
  EXPECT_THAT(Ints(y), ElementsAre(168, 115, 255, 1, 66, 151));
}

TEST(QLinearMatMul, RoundsHalfToEvenAndSaturates) {
  // Exact scales 1 * 0.5 / 1: accumulators 5, 7, -5, -7 land on ties 2.5, 3.5, -2.5, -3.5,
  // which round to even (2, 4, -2, -4); 255 * 127 * 0.5 and 255 * -128 * 0.5 saturate int8.
  NodeSpec s{ir::OpType::kQLinearMatMul};
  s.since_version = 21;
  s.inputs = {U8({2, 1}, {1, 255}),  MakeFloat({}, {1.0f}),
              U8({}, {0}),           I8({1, 4}, {5, 7, -5, -7}),
              MakeFloat({}, {0.5f}), I8({}, {0}),
              MakeFloat({}, {1.0f}), I8({}, {0})};
  ir::Tensor y = RunNodeOk0(s);
  ASSERT_EQ(y.dtype(), DataType::kI8);
  EXPECT_THAT(Ints(y), ElementsAre(2, 4, -2, -4, 127, 127, -128, -128));
}

TEST(QLinearMatMul, PerRowAAndPerColumnB) {
  // numpy: C = (a - az[:, None]) @ (b - bz); M = fp32(as[:, None] * bs) / fp32(0.1);
  //        clip(rint(C * M) + 10, 0, 255)  ->  C = [[-70, 154], [3780, -7172]]
  NodeSpec s{ir::OpType::kQLinearMatMul};
  s.inputs = {U8({2, 3}, {1, 2, 3, 200, 100, 50}),
              MakeFloat({2}, {0.5f, 0.01f}),
              U8({2}, {1, 128}),
              I8({3, 2}, {10, -20, 30, 40, -50, 60}),
              MakeFloat({2}, {0.03f, 0.07f}),
              I8({2}, {0, 2}),
              MakeFloat({}, {0.1f}),
              U8({}, {10})};
  EXPECT_THAT(Ints(RunNodeOk0(s)), ElementsAre(0, 64, 21, 0));
}

TEST(QLinearMatMul, Fp16ScalesOpset21) {
  // fp16 scales: 0.5 and 0.25 are exact in fp16, so the result equals
  // the fp32 computation: acc [3, -6] * (0.5 * 0.25 / 0.25) = [1.5, -3] -> [2, -3], plus the
  // zero point 5.
  NodeSpec s{ir::OpType::kQLinearMatMul};
  s.since_version = 21;
  s.inputs = {
      I8({1, 1}, {3}),       MakeHalf({}, {0.5f}), I8({}, {0}),           I8({1, 2}, {1, -2}),
      MakeHalf({}, {0.25f}), I8({}, {0}),          MakeHalf({}, {0.25f}), I8({}, {5})};
  EXPECT_THAT(Ints(RunNodeOk0(s)), ElementsAre(7, 2));
}

TEST(QLinearMatMul, Errors) {
  NodeSpec s{ir::OpType::kQLinearMatMul};
  s.inputs = {U8({2, 3}, {1, 2, 3, 4, 5, 6}),
              MakeFloat({3}, {1, 1, 1}),
              U8({}, {0}),
              U8({3, 2}, {1, 2, 3, 4, 5, 6}),
              MakeFloat({}, {1}),
              U8({}, {0}),
              MakeFloat({}, {1}),
              U8({}, {0})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "a_scale has 3 elements");
  s.inputs[1] = MakeFloat({}, {1});
  s.inputs[6] = MakeFloat({2}, {1, 1});
  ExpectNodeError(s, absl::StatusCode::kUnimplemented, "per-tensor");
  s.inputs[6] = MakeTensor<int32_t>({}, {1}, DataType::kI32);
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "y_scale dtype int32");
}

// ---- QLinearConv ----------------------------------------------------------------------------

TEST(QLinearConv, PerChannelWeightScalesBiasInt8Output) {
  // onnx.reference QLinearConv: x uint8 (scale 0.05, zp 20), w int8 per channel (scales
  // [0.1, 0.02], zps [0, 1]), y int8 (scale 0.2, zp -3), bias [100, -2000].
  NodeSpec s{ir::OpType::kQLinearConv};
  s.since_version = 10;
  s.inputs = {U8({1, 1, 3, 3}, {10, 20, 30, 40, 50, 60, 70, 80, 90}),
              MakeFloat({}, {0.05f}),
              U8({}, {20}),
              I8({2, 1, 2, 2}, {1, 2, 3, 4, -1, -2, -3, -4}),
              MakeFloat({2}, {0.1f, 0.02f}),
              I8({2}, {0, 1}),
              MakeFloat({}, {0.2f}),
              I8({}, {-3}),
              I32({2}, {100, -2000})};
  ir::Tensor y = RunNodeOk0(s);
  ASSERT_EQ(y.dtype(), DataType::kI8);
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{1, 2, 2, 2}));
  EXPECT_THAT(Ints(y), ElementsAre(4, 6, 11, 14, -14, -15, -16, -17));
}

TEST(QLinearConv, SaturatesAndRoundsHalfToEven) {
  // 1x1 kernel, all scales exact: y = rint(x * w * 0.5) + 0 for x = [1, 3, 5, 255], w = 1:
  // 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, 127.5 -> 128 -> saturates to 127 (int8).
  NodeSpec s{ir::OpType::kQLinearConv};
  s.inputs = {U8({1, 1, 1, 4}, {1, 3, 5, 255}),
              MakeFloat({}, {1.0f}),
              U8({}, {0}),
              I8({1, 1, 1, 1}, {1}),
              MakeFloat({}, {0.5f}),
              I8({}, {0}),
              MakeFloat({}, {1.0f}),
              I8({}, {0})};
  EXPECT_THAT(Ints(RunNodeOk0(s)), ElementsAre(0, 2, 2, 127));
}

TEST(QLinearConv, Errors) {
  NodeSpec s{ir::OpType::kQLinearConv};
  s.inputs = {U8({1, 1, 2, 2}, {1, 2, 3, 4}),
              MakeFloat({}, {1}),
              U8({}, {0}),
              I8({2, 1, 1, 1}, {1, 1}),
              MakeFloat({3}, {1, 1, 1}),
              I8({}, {0}),
              MakeFloat({}, {1}),
              I8({}, {0})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument,
                  "w_scale must have one element or shape [2]");
  s.inputs[4] = MakeFloat({}, {1});
  s.inputs.push_back(I32({3}, {1, 2, 3}));
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "B must be int32 of shape [2]");
  s.inputs.pop_back();
  s.inputs[1] = MakeFloat({2}, {1, 1});
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "x_scale must have one element");
}

}  // namespace
}  // namespace kiln::testing
