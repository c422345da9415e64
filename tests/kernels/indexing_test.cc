// Tests of the indexing reference kernels: Gather*, Scatter*, Shape, Size, Constant*,
// EyeLike, Range, OneHot, NonZero, Trilu, QuantizeLinear, DequantizeLinear.
// Expected values are computed by hand (most are the examples of the ONNX operator docs).
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

ir::Tensor I32(std::vector<int64_t> dims, const std::vector<int32_t>& v) {
  return MakeTensor<int32_t>(std::move(dims), v, DataType::kI32);
}
std::vector<int64_t> Int64sOf(const ir::Tensor& t) {
  std::vector<int64_t> v(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = ir::ElementAsInt64(t, i);
  return v;
}

// ---- Gather ---------------------------------------------------------------------------------

TEST(Gather, Axis0) {
  NodeSpec s{ir::OpType::kGather};
  s.inputs = {MakeFloat({3, 2}, {1, 2, 3, 4, 5, 6}), MakeInt64({2, 2}, {0, 1, 1, 2})};
  ir::Tensor out = RunNodeOk0(s);
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_THAT(ToFloats(out), ElementsAre(1, 2, 3, 4, 3, 4, 5, 6));
}

TEST(Gather, Axis1NegativeInt32Indices) {
  NodeSpec s{ir::OpType::kGather, {{"axis", IntAttr(1)}}};
  s.inputs = {MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6}), I32({2}, {-1, 0})};
  ir::Tensor out = RunNodeOk0(s);
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_THAT(ToFloats(out), ElementsAre(3, 1, 6, 4));
}

TEST(Gather, ScalarIndexDropsAxis) {
  NodeSpec s{ir::OpType::kGather, {{"axis", IntAttr(-1)}}};
  s.inputs = {MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6}), MakeInt64({}, {2})};
  ir::Tensor out = RunNodeOk0(s);
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{2}));
  EXPECT_THAT(ToFloats(out), ElementsAre(3, 6));
}

TEST(Gather, CopiesFp16BitsExactly) {
  // Data movement must not round-trip through float: a NaN payload and -0 survive.
  NodeSpec s{ir::OpType::kGather};
  s.inputs = {MakeTensor<uint16_t>({3}, {0x7e01, 0x8000, 0x3c00}, DataType::kF16),
              MakeInt64({3}, {2, 1, 0})};
  ir::Tensor out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kF16);
  EXPECT_THAT(Bits16(out), ElementsAre(0x3c00, 0x8000, 0x7e01));
}

TEST(Gather, Errors) {
  NodeSpec s{ir::OpType::kGather};
  s.inputs = {MakeFloat({3}, {1, 2, 3}), MakeInt64({1}, {3})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "out of range");
  s.inputs[1] = MakeInt64({1}, {-4});
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "out of range");
  s.inputs[1] = MakeInt64({1}, {0});
  s.attrs = {{"axis", IntAttr(1)}};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "axis");
  s.attrs = {};
  s.inputs[1] = MakeFloat({1}, {0});
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "int32 or int64");
}

// ---- GatherElements -------------------------------------------------------------------------

TEST(GatherElements, OnnxExamples) {
  NodeSpec s{ir::OpType::kGatherElements, {{"axis", IntAttr(1)}}};
  s.inputs = {MakeFloat({2, 2}, {1, 2, 3, 4}), MakeInt64({2, 2}, {0, 0, 1, 0})};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 1, 4, 3));

  NodeSpec s0{ir::OpType::kGatherElements, {{"axis", IntAttr(0)}}};
  s0.inputs = {MakeFloat({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}), I32({2, 3}, {1, 2, 0, 2, 0, 0})};
  ir::Tensor out = RunNodeOk0(s0);
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(ToFloats(out), ElementsAre(4, 8, 3, 7, 2, 3));
}

TEST(GatherElements, NegativeIndicesAndSmallerIndexShape) {
  // indices [2, 2] on data [3, 3], axis 0: other dims of indices may be smaller than data's.
  NodeSpec s{ir::OpType::kGatherElements};
  s.inputs = {MakeFloat({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}), MakeInt64({2, 2}, {-1, -2, 0, 2})};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(7, 5, 1, 8));
}

TEST(GatherElements, Errors) {
  NodeSpec s{ir::OpType::kGatherElements};
  s.inputs = {MakeFloat({2, 2}, {1, 2, 3, 4}), MakeInt64({2, 2}, {0, 2, 0, 0})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "out of range");
  s.inputs[1] = MakeInt64({2}, {0, 0});
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "rank");
  s.inputs[1] = MakeInt64({1, 3}, {0, 0, 0});
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "exceeds");
}

// ---- GatherND -------------------------------------------------------------------------------

TEST(GatherND, OnnxExamples) {
  NodeSpec s{ir::OpType::kGatherND};
  s.inputs = {MakeFloat({2, 2}, {0, 1, 2, 3}), MakeInt64({2, 2}, {0, 0, 1, 1})};
  ir::Tensor out = RunNodeOk0(s);
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{2}));
  EXPECT_THAT(ToFloats(out), ElementsAre(0, 3));

  s.inputs[1] = MakeInt64({2, 1}, {1, 0});
  out = RunNodeOk0(s);
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_THAT(ToFloats(out), ElementsAre(2, 3, 0, 1));

  // data [2, 2, 2], indices [2, 1, 2] -> [2, 1, 2]
  s.inputs = {MakeFloat({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), MakeInt64({2, 1, 2}, {0, 1, 1, 0})};
  out = RunNodeOk0(s);
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{2, 1, 2}));
  EXPECT_THAT(ToFloats(out), ElementsAre(2, 3, 4, 5));
}

TEST(GatherND, BatchDims) {
  NodeSpec s{ir::OpType::kGatherND, {{"batch_dims", IntAttr(1)}}};
  s.inputs = {MakeFloat({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), MakeInt64({2, 1}, {1, 0})};
  ir::Tensor out = RunNodeOk0(s);
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_THAT(ToFloats(out), ElementsAre(2, 3, 4, 5));
  // Negative index, int32.
  s.inputs[1] = I32({2, 1}, {-1, -2});
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(2, 3, 4, 5));
}

TEST(GatherND, Errors) {
  NodeSpec s{ir::OpType::kGatherND};
  s.inputs = {MakeFloat({2, 2}, {0, 1, 2, 3}), MakeInt64({1, 3}, {0, 0, 0})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "last dim of indices");
  s.inputs[1] = MakeInt64({1, 2}, {0, 2});
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "out of range");
  s.attrs = {{"batch_dims", IntAttr(1)}};
  s.inputs[1] = MakeInt64({3, 1}, {0, 0, 0});
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "batch dims");
  s.since_version = 11;
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "opset 12");
}

// ---- ScatterElements ------------------------------------------------------------------------

TEST(ScatterElements, OnnxExamples) {
  NodeSpec s{ir::OpType::kScatterElements};
  s.inputs = {MakeFloat({3, 3}, std::vector<float>(9, 0)), MakeInt64({2, 3}, {1, 0, 2, 0, 2, 1}),
              MakeFloat({2, 3}, {1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f})};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)),
              ElementsAre(2.0f, 1.1f, 0.0f, 1.0f, 0.0f, 2.2f, 0.0f, 2.1f, 1.2f));

  NodeSpec s1{ir::OpType::kScatterElements, {{"axis", IntAttr(1)}}};
  s1.inputs = {MakeFloat({1, 5}, {1, 2, 3, 4, 5}), I32({1, 2}, {1, -2}),
               MakeFloat({1, 2}, {1.1f, 2.1f})};
  EXPECT_THAT(ToFloats(RunNodeOk0(s1)), ElementsAre(1.0f, 1.1f, 3.0f, 2.1f, 5.0f));
}

TEST(ScatterElements, Reductions) {
  NodeSpec s{ir::OpType::kScatterElements, {{"axis", IntAttr(1)}}};
  s.since_version = 18;
  s.inputs = {MakeFloat({1, 5}, {1, 2, 3, 4, 5}), MakeInt64({1, 2}, {1, 1}),
              MakeFloat({1, 2}, {1.5f, 2.5f})};
  s.attrs.push_back({"reduction", StringAttr("add")});
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 6, 3, 4, 5));
  s.attrs.back().second = StringAttr("mul");
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 7.5f, 3, 4, 5));
  s.attrs.back().second = StringAttr("max");
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 2.5f, 3, 4, 5));
  s.attrs.back().second = StringAttr("min");
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 1.5f, 3, 4, 5));
  // Without reduction, the later duplicate wins.
  s.attrs.pop_back();
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 2.5f, 3, 4, 5));
}

TEST(ScatterElements, IntegerAddWraps) {
  NodeSpec s{ir::OpType::kScatterElements, {{"reduction", StringAttr("add")}}};
  s.since_version = 16;
  s.inputs = {I32({2}, {std::numeric_limits<int32_t>::max(), 7}), MakeInt64({1}, {0}),
              I32({1}, {1})};
  ir::Tensor out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kI32);
  EXPECT_EQ(out.data<int32_t>()[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(out.data<int32_t>()[1], 7);
}

TEST(ScatterElements, Fp16AddRoundsOnce) {
  // 1 + 2^-11 + 2^-11 = 1 + 2^-10 is an fp16 value. Rounding after each add would tie back to
  // 1.0 both times (2^-11 is half an fp16 ulp at 1); accumulating in fp32 and rounding once
  // gives 0x3c01.
  NodeSpec s{ir::OpType::kScatterElements, {{"reduction", StringAttr("add")}}};
  s.since_version = 18;
  s.inputs = {MakeTensor<uint16_t>({1}, {0x3c00}, DataType::kF16), MakeInt64({2}, {0, 0}),
              MakeTensor<uint16_t>({2}, {0x1000, 0x1000}, DataType::kF16)};
  EXPECT_THAT(Bits16(RunNodeOk0(s)), ElementsAre(0x3c01));
  // Same for bf16: 2^-8 is half a bf16 ulp at 1 (0x3f80 -> 0x3f81 once summed twice).
  s.inputs = {MakeTensor<uint16_t>({1}, {0x3f80}, DataType::kBF16), MakeInt64({2}, {0, 0}),
              MakeTensor<uint16_t>({2}, {0x3b80, 0x3b80}, DataType::kBF16)};
  EXPECT_THAT(Bits16(RunNodeOk0(s)), ElementsAre(0x3f81));
}

TEST(ScatterElements, Errors) {
  NodeSpec s{ir::OpType::kScatterElements, {{"reduction", StringAttr("max")}}};
  s.since_version = 16;
  s.inputs = {MakeFloat({2}, {1, 2}), MakeInt64({1}, {0}), MakeFloat({1}, {1})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "opset 18");
  s.since_version = 13;
  s.attrs = {{"reduction", StringAttr("add")}};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "opset 16");
  s.since_version = 18;
  s.attrs = {{"reduction", StringAttr("avg")}};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "unknown reduction");
  s.attrs = {};
  s.inputs[1] = MakeInt64({1}, {2});
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "out of range");
  s.inputs[1] = MakeInt64({2}, {0, 1});
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "updates shape");
}

// ---- ScatterND ------------------------------------------------------------------------------

TEST(ScatterND, OnnxExample1) {
  NodeSpec s{ir::OpType::kScatterND};
  s.inputs = {MakeFloat({8}, {1, 2, 3, 4, 5, 6, 7, 8}), MakeInt64({4, 1}, {4, 3, 1, 7}),
              MakeFloat({4}, {9, 10, 11, 12})};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 11, 3, 10, 9, 6, 7, 12));
}

TEST(ScatterND, SlicesAndReductions) {
  NodeSpec s{ir::OpType::kScatterND};
  s.inputs = {MakeFloat({2, 2}, {1, 2, 3, 4}), MakeInt64({2, 1}, {1, -1}),
              MakeFloat({2, 2}, {5, 6, 7, 8})};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 2, 7, 8));
  s.since_version = 16;
  s.attrs = {{"reduction", StringAttr("add")}};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 2, 15, 18));
  s.attrs = {{"reduction", StringAttr("mul")}};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 2, 105, 192));
  s.since_version = 18;
  s.attrs = {{"reduction", StringAttr("max")}};
  s.inputs[2] = MakeFloat({2, 2}, {5, 9, 2, 1});
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 2, 5, 9));
  s.attrs = {{"reduction", StringAttr("min")}};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 2, 2, 1));
}

TEST(ScatterND, Errors) {
  NodeSpec s{ir::OpType::kScatterND};
  s.inputs = {MakeFloat({2, 2}, {1, 2, 3, 4}), MakeInt64({1, 1}, {1}), MakeFloat({3}, {1, 2, 3})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "updates shape");
  s.inputs[1] = MakeInt64({1, 1}, {2});
  s.inputs[2] = MakeFloat({1, 2}, {1, 2});
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "out of range");
  s.inputs[1] = MakeInt64({1, 1}, {0});
  s.inputs[2] = I32({1, 2}, {1, 2});
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "dtype");
}

// ---- Shape / Size ---------------------------------------------------------------------------

TEST(Shape, StartEnd) {
  NodeSpec s{ir::OpType::kShape};
  s.inputs = {MakeFloat({2, 3, 4}, std::vector<float>(24, 0))};
  EXPECT_THAT(Int64sOf(RunNodeOk0(s)), ElementsAre(2, 3, 4));
  s.attrs = {{"start", IntAttr(-1)}};
  EXPECT_THAT(Int64sOf(RunNodeOk0(s)), ElementsAre(4));
  s.attrs = {{"start", IntAttr(1)}, {"end", IntAttr(-1)}};
  EXPECT_THAT(Int64sOf(RunNodeOk0(s)), ElementsAre(3));
  s.attrs = {{"start", IntAttr(-10)}, {"end", IntAttr(10)}};
  EXPECT_THAT(Int64sOf(RunNodeOk0(s)), ElementsAre(2, 3, 4));
  s.attrs = {{"start", IntAttr(2)}, {"end", IntAttr(1)}};
  ir::Tensor out = RunNodeOk0(s);
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{0}));
  s.since_version = 13;
  s.attrs = {{"start", IntAttr(1)}};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "opset 15");
}

TEST(Size, CountsElements) {
  NodeSpec s{ir::OpType::kSize};
  s.inputs = {MakeTensor<uint16_t>({2, 3, 4}, std::vector<uint16_t>(24, 0), DataType::kBF16)};
  ir::Tensor out = RunNodeOk0(s);
  EXPECT_EQ(out.dtype(), DataType::kI64);
  EXPECT_EQ(out.rank(), 0);
  EXPECT_THAT(Int64sOf(out), ElementsAre(24));
}

// ---- Constant -------------------------------------------------------------------------------

TEST(Constant, ValueAttributes) {
  NodeSpec s{ir::OpType::kConstant, {{"value", TensorAttr(I32({2}, {7, -3}))}}};
  s.inputs = {};
  s.output_dtypes = {DataType::kI32};
  ir::Tensor out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kI32);
  EXPECT_THAT(Int64sOf(out), ElementsAre(7, -3));

  NodeSpec f{ir::OpType::kConstant, {{"value_float", FloatAttr(2.5f)}}};
  f.output_dtypes = {DataType::kF32};
  out = RunNodeOk0(f);
  EXPECT_EQ(out.rank(), 0);
  EXPECT_THAT(ToFloats(out), ElementsAre(2.5f));

  NodeSpec fs{ir::OpType::kConstant, {{"value_floats", FloatsAttr({1, 2})}}};
  fs.output_dtypes = {DataType::kF32};
  out = RunNodeOk0(fs);
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{2}));

  NodeSpec is{ir::OpType::kConstant, {{"value_ints", IntsAttr({4, 5, 6})}}};
  is.output_dtypes = {DataType::kI64};
  EXPECT_THAT(Int64sOf(RunNodeOk0(is)), ElementsAre(4, 5, 6));

  NodeSpec i{ir::OpType::kConstant, {{"value_int", IntAttr(-9)}}};
  i.output_dtypes = {DataType::kI64};
  out = RunNodeOk0(i);
  EXPECT_EQ(out.rank(), 0);
  EXPECT_THAT(Int64sOf(out), ElementsAre(-9));
}

TEST(Constant, Errors) {
  NodeSpec s{ir::OpType::kConstant, {{"value_string", StringAttr("hi")}}};
  s.output_dtypes = {DataType::kString};
  ExpectNodeError(s, absl::StatusCode::kUnimplemented, "value_string");
  ir::Attribute sparse;
  sparse.type = ir::Attribute::Type::kTensor;
  s.attrs = {{"sparse_value", sparse}};
  s.output_dtypes = {DataType::kF32};
  ExpectNodeError(s, absl::StatusCode::kUnimplemented, "sparse_value");
  // The declared output dtype must match the value.
  s.attrs = {{"value_int", IntAttr(1)}};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "declared");
  s.attrs = {{"value_int", IntAttr(1)}, {"value_float", FloatAttr(1)}};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "exactly one");
}

// ---- ConstantOfShape ------------------------------------------------------------------------

TEST(ConstantOfShape, ValueAndDefault) {
  NodeSpec s{ir::OpType::kConstantOfShape, {{"value", TensorAttr(I32({1}, {7}))}}};
  s.inputs = {MakeInt64({2}, {2, 3})};
  s.output_dtypes = {DataType::kI32};
  ir::Tensor out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kI32);
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(Int64sOf(out), ElementsAre(7, 7, 7, 7, 7, 7));

  NodeSpec d{ir::OpType::kConstantOfShape};
  d.inputs = {MakeInt64({1}, {3})};
  d.output_dtypes = {DataType::kF32};
  EXPECT_THAT(ToFloats(RunNodeOk0(d)), ElementsAre(0, 0, 0));
  // An empty shape gives a scalar; a zero dim an empty tensor. (Allocate, not MakeInt64: the
  // shared helper memcpys from a null pointer for empty data, which UBSan reports.)
  d.inputs = {*ir::Tensor::Allocate(DataType::kI64, {0})};
  out = RunNodeOk0(d);
  EXPECT_EQ(out.rank(), 0);
  EXPECT_THAT(ToFloats(out), ElementsAre(0));
  d.inputs = {MakeInt64({2}, {0, 4})};
  EXPECT_EQ(RunNodeOk0(d).num_elements(), 0);
}

TEST(ConstantOfShape, Errors) {
  NodeSpec s{ir::OpType::kConstantOfShape};
  s.inputs = {MakeInt64({2}, {2, -1})};
  s.output_dtypes = {DataType::kF32};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "negative");
  s.attrs = {{"value", TensorAttr(MakeFloat({2}, {1, 2}))}};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "one element");
  s.attrs = {{"value", TensorAttr(MakeInt64({1}, {1}))}};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "declared");
}

// ---- EyeLike --------------------------------------------------------------------------------

TEST(EyeLike, OffsetsAndDtype) {
  NodeSpec s{ir::OpType::kEyeLike, {{"k", IntAttr(1)}}};
  s.inputs = {MakeFloat({3, 4}, std::vector<float>(12, 5))};
  s.output_dtypes = {DataType::kF32};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1));

  s.attrs = {{"k", IntAttr(-2)}, {"dtype", IntAttr(static_cast<int>(DataType::kI32))}};
  s.inputs = {MakeFloat({3, 3}, std::vector<float>(9, 5))};
  s.output_dtypes = {DataType::kI32};
  ir::Tensor out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kI32);
  EXPECT_THAT(Int64sOf(out), ElementsAre(0, 0, 0, 0, 0, 0, 1, 0, 0));

  s.attrs = {{"k", IntAttr(7)}, {"dtype", IntAttr(static_cast<int>(DataType::kBF16))}};
  s.output_dtypes = {DataType::kBF16};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAreArray(std::vector<float>(9, 0)));
  s.attrs = {{"dtype", IntAttr(static_cast<int>(DataType::kBF16))}};
  EXPECT_THAT(Bits16(RunNodeOk0(s)), ElementsAre(0x3f80, 0, 0, 0, 0x3f80, 0, 0, 0, 0x3f80));
}

TEST(EyeLike, Errors) {
  NodeSpec s{ir::OpType::kEyeLike};
  s.inputs = {MakeFloat({3}, {0, 0, 0})};
  s.output_dtypes = {DataType::kF32};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "2-D");
  s.inputs = {MakeFloat({2, 2}, {0, 0, 0, 0})};
  s.attrs = {{"dtype", IntAttr(static_cast<int>(DataType::kI64))}};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "declared");
}

// ---- Range ----------------------------------------------------------------------------------

TEST(Range, FloatAndInt) {
  NodeSpec s{ir::OpType::kRange};
  s.inputs = {MakeFloat({}, {1}), MakeFloat({}, {5}), MakeFloat({}, {2})};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 3));
  s.inputs = {I32({}, {10}), I32({}, {4}), I32({}, {-3})};
  ir::Tensor out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kI32);
  EXPECT_THAT(Int64sOf(out), ElementsAre(10, 7));
  s.inputs = {MakeInt64({}, {0}), MakeInt64({}, {-5}), MakeInt64({}, {1})};
  EXPECT_EQ(RunNodeOk0(s).num_elements(), 0);
  // Fractional count rounds up: [0, 1) step 0.3 -> 0, 0.3, 0.6, 0.9.
  s.inputs = {MakeTensor<double>({}, {0}, DataType::kF64),
              MakeTensor<double>({}, {1}, DataType::kF64),
              MakeTensor<double>({}, {0.3}, DataType::kF64)};
  out = RunNodeOk0(s);
  ASSERT_EQ(out.num_elements(), 4);
  EXPECT_DOUBLE_EQ(out.data<double>()[3], 0.3 * 3);
}

TEST(Range, Fp16ValuesRoundOnce) {
  // [2048, 2052) step 1 in fp16: 2049 and 2051 are ties between fp16 neighbours (ulp 2), so
  // start + i * delta rounded once gives 2048, 2048, 2050, 2052. Accumulating in fp16 would
  // stay at 2048 forever.
  NodeSpec s{ir::OpType::kRange};
  s.inputs = {MakeHalf({}, {2048}), MakeHalf({}, {2052}), MakeHalf({}, {1})};
  ir::Tensor out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kF16);
  EXPECT_THAT(ToFloats(out), ElementsAre(2048, 2048, 2050, 2052));
}

TEST(Range, Errors) {
  NodeSpec s{ir::OpType::kRange};
  s.inputs = {MakeFloat({}, {1}), MakeFloat({}, {5}), MakeFloat({}, {0})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "non-zero");
  s.inputs = {MakeFloat({}, {1}), MakeFloat({2}, {5, 6}), MakeFloat({}, {1})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "scalar");
  s.inputs = {MakeFloat({}, {1}), MakeInt64({}, {5}), MakeFloat({}, {1})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "same dtype");
}

// ---- OneHot ---------------------------------------------------------------------------------

TEST(OneHot, LastAxisNegativeWraps) {
  NodeSpec s{ir::OpType::kOneHot};
  s.since_version = 11;
  s.inputs = {MakeInt64({3}, {0, 2, -1}), MakeFloat({}, {3}), MakeFloat({2}, {0, 1})};
  ir::Tensor out = RunNodeOk0(s);
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{3, 3}));
  EXPECT_THAT(ToFloats(out), ElementsAre(1, 0, 0, 0, 0, 1, 0, 0, 1));
  // Opset 9: negative indices are out of range, so the row is all off_value.
  s.since_version = 9;
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 0, 0, 0, 0, 1, 0, 0, 0));
}

TEST(OneHot, Axis0FloatIndicesAndValues) {
  NodeSpec s{ir::OpType::kOneHot, {{"axis", IntAttr(0)}}};
  s.inputs = {MakeFloat({2}, {1.7f, 5}), MakeInt64({1}, {3}), I32({2}, {-1, 4})};
  ir::Tensor out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kI32);
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{3, 2}));
  // 1.7 truncates to 1; 5 is out of range -> all off.
  EXPECT_THAT(Int64sOf(out), ElementsAre(-1, -1, 4, -1, -1, -1));
}

TEST(OneHot, Errors) {
  NodeSpec s{ir::OpType::kOneHot};
  s.inputs = {MakeInt64({1}, {0}), MakeFloat({}, {0}), MakeFloat({2}, {0, 1})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "depth");
  s.inputs[1] = MakeFloat({}, {2});
  s.inputs[2] = MakeFloat({3}, {0, 1, 2});
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "off_value");
  s.inputs[2] = MakeFloat({2}, {0, 1});
  s.attrs = {{"axis", IntAttr(2)}};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "axis");
}

// ---- NonZero --------------------------------------------------------------------------------

TEST(NonZero, Coordinates) {
  NodeSpec s{ir::OpType::kNonZero};
  s.inputs = {MakeFloat({2, 2}, {1, 0, 1, 1})};
  ir::Tensor out = RunNodeOk0(s);
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT(Int64sOf(out), ElementsAre(0, 1, 1, 0, 0, 1));
  s.inputs = {MakeTensor<uint8_t>({3}, {0, 1, 0}, DataType::kBool)};
  EXPECT_THAT(Int64sOf(RunNodeOk0(s)), ElementsAre(1));
  // -0 is zero, NaN is not.
  s.inputs = {MakeTensor<uint16_t>({3}, {0x8000, 0x7e00, 0}, DataType::kF16)};
  EXPECT_THAT(Int64sOf(RunNodeOk0(s)), ElementsAre(1));
  s.inputs = {MakeFloat({}, {3})};
  out = RunNodeOk0(s);
  EXPECT_EQ(out.dims(), (std::vector<int64_t>{1, 1}));
}

// ---- Trilu ----------------------------------------------------------------------------------

TEST(Trilu, UpperLowerK) {
  const std::vector<float> m = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  NodeSpec s{ir::OpType::kTrilu};
  s.inputs = {MakeFloat({3, 3}, m)};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 2, 3, 0, 5, 6, 0, 0, 9));
  s.inputs.push_back(MakeInt64({}, {1}));
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(0, 2, 3, 0, 0, 6, 0, 0, 0));
  s.attrs = {{"upper", IntAttr(0)}};
  s.inputs[1] = MakeInt64({}, {-1});
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(0, 0, 0, 4, 0, 0, 7, 8, 0));
  s.inputs[1] = MakeInt64({}, {std::numeric_limits<int64_t>::min()});
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAreArray(std::vector<float>(9, 0)));
  s.inputs[1] = MakeInt64({}, {std::numeric_limits<int64_t>::max()});
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAreArray(m));
}

TEST(Trilu, BatchedNonSquare) {
  NodeSpec s{ir::OpType::kTrilu, {{"upper", IntAttr(0)}}};
  s.inputs = {MakeFloat({2, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 0, 0, 4, 5, 0, 7, 0, 0, 10, 11, 0));
}

TEST(Trilu, Errors) {
  NodeSpec s{ir::OpType::kTrilu};
  s.inputs = {MakeFloat({3}, {1, 2, 3})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "rank");
  s.inputs = {MakeFloat({1, 1}, {1}), MakeInt64({2}, {0, 1})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "scalar");
}

// ---- QuantizeLinear ------------------------------------------------------------------------

ir::Tensor U8(std::vector<int64_t> dims, const std::vector<uint8_t>& v) {
  return MakeTensor<uint8_t>(std::move(dims), v, DataType::kU8);
}
ir::Tensor I8(std::vector<int64_t> dims, const std::vector<int8_t>& v) {
  return MakeTensor<int8_t>(std::move(dims), v, DataType::kI8);
}
ir::Tensor I16(std::vector<int64_t> dims, const std::vector<int16_t>& v) {
  return MakeTensor<int16_t>(std::move(dims), v, DataType::kI16);
}

TEST(QuantizeLinear, OnnxExampleSaturatesAndRoundsHalfEven) {
  NodeSpec s{ir::OpType::kQuantizeLinear};
  s.since_version = 10;
  s.inputs = {MakeFloat({6}, {0, 2, 3, 1000, -254, -1000}), MakeFloat({}, {2}), U8({}, {128})};
  ir::Tensor out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kU8);
  EXPECT_THAT(Int64sOf(out), ElementsAre(128, 129, 130, 255, 1, 0));
  // Halves go to even: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> 0, -1.5 -> -2; int8 saturates.
  s.inputs = {MakeFloat({7}, {1, 3, 5, -1, -3, -300, 300}), MakeFloat({}, {2}), I8({}, {0})};
  out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kI8);
  EXPECT_THAT(Int64sOf(out), ElementsAre(0, 2, 2, 0, -2, -128, 127));
  // No zero point: uint8.
  s.inputs = {MakeFloat({2}, {-5, 7}), MakeFloat({}, {1})};
  out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kU8);
  EXPECT_THAT(Int64sOf(out), ElementsAre(0, 7));
}

TEST(QuantizeLinear, OutputDtypeInt16) {
  NodeSpec s{ir::OpType::kQuantizeLinear,
             {{"output_dtype", IntAttr(static_cast<int>(DataType::kI16))}}};
  s.since_version = 21;
  s.inputs = {MakeFloat({3}, {40000, -1234.5f, -40000}), MakeFloat({}, {1})};
  ir::Tensor out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kI16);
  EXPECT_THAT(Int64sOf(out), ElementsAre(32767, -1234, -32768));
  s.attrs = {{"output_dtype", IntAttr(static_cast<int>(DataType::kU16))}};
  out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kU16);
  EXPECT_THAT(Int64sOf(out), ElementsAre(40000, 0, 0));
}

TEST(QuantizeLinear, PerAxis) {
  NodeSpec s{ir::OpType::kQuantizeLinear};
  s.since_version = 13;
  // Default axis 1: scale per column.
  s.inputs = {MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6}), MakeFloat({3}, {1, 2, 4})};
  EXPECT_THAT(Int64sOf(RunNodeOk0(s)), ElementsAre(1, 1, 1, 4, 2, 2));
  s.attrs = {{"axis", IntAttr(0)}};
  s.inputs = {MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6}), MakeFloat({2}, {1, 2}), U8({2}, {0, 10})};
  EXPECT_THAT(Int64sOf(RunNodeOk0(s)), ElementsAre(1, 2, 3, 12, 12, 13));
}

TEST(QuantizeLinear, Blocked) {
  NodeSpec s{ir::OpType::kQuantizeLinear, {{"axis", IntAttr(1)}, {"block_size", IntAttr(2)}}};
  s.since_version = 21;
  s.inputs = {MakeFloat({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}), MakeFloat({2, 2}, {1, 2, 4, 8}),
              I8({2, 2}, {0, 0, 0, 1})};
  // Row 0: 1, 2, 1.5->2, 2. Row 1: 1.25->1, 1.5->2, 0.875->1 (+1), 1 (+1).
  EXPECT_THAT(Int64sOf(RunNodeOk0(s)), ElementsAre(1, 2, 2, 2, 1, 2, 2, 2));
  // A remainder block: 5 columns in blocks of 2 -> 3 scales.
  s.inputs = {MakeFloat({1, 5}, {2, 2, 2, 2, 2}), MakeFloat({1, 3}, {1, 2, 0.5f})};
  EXPECT_THAT(Int64sOf(RunNodeOk0(s)), ElementsAre(2, 2, 1, 1, 4));
}

TEST(QuantizeLinear, HalfInputsAndPrecision) {
  NodeSpec s{ir::OpType::kQuantizeLinear};
  s.since_version = 21;
  s.inputs = {MakeHalf({3}, {3, -3, 100}), MakeHalf({}, {2})};
  EXPECT_THAT(Int64sOf(RunNodeOk0(s)), ElementsAre(2, 0, 50));
  s.inputs = {MakeTensor<uint16_t>({1}, {0x4060}, DataType::kBF16),
              MakeTensor<uint16_t>({}, {0x3f80}, DataType::kBF16),
              I8({}, {0})};  // bf16 3.5 / 1 -> 4
  EXPECT_THAT(Int64sOf(RunNodeOk0(s)), ElementsAre(4));
  // 3.4999 / 1 rounds to 3 in fp32; with precision = float16 the quotient first rounds to
  // fp16 3.5 and then to even 4.
  s.since_version = 23;
  s.inputs = {MakeFloat({1}, {3.4999f}), MakeFloat({}, {1}), I8({}, {0})};
  EXPECT_THAT(Int64sOf(RunNodeOk0(s)), ElementsAre(3));
  s.attrs = {{"precision", IntAttr(static_cast<int>(DataType::kF16))}};
  EXPECT_THAT(Int64sOf(RunNodeOk0(s)), ElementsAre(4));
}

TEST(QuantizeLinear, Int32Input) {
  NodeSpec s{ir::OpType::kQuantizeLinear};
  s.since_version = 21;
  s.inputs = {I32({3}, {7, -7, 1000}), I32({}, {2}), I8({}, {0})};
  EXPECT_THAT(Int64sOf(RunNodeOk0(s)), ElementsAre(4, -4, 127));
}

TEST(DequantizeLinear, SingleScaleAndZeroPointMayDifferInRank) {
  // Exporters pair a [1] scale with a scalar zero point (and the reverse); both are per-tensor,
  // as ONNX Runtime reads them: (q - zp) * scale.
  NodeSpec s{ir::OpType::kDequantizeLinear};
  s.since_version = 21;
  s.inputs = {I8({3}, {-4, 0, 10}), MakeFloat({1}, {0.5f}), I8({}, {2})};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(-3.0f, -1.0f, 4.0f));
  s.inputs = {I8({3}, {-4, 0, 10}), MakeFloat({}, {0.5f}), I8({1}, {2})};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(-3.0f, -1.0f, 4.0f));
}

TEST(QuantizeLinear, Errors) {
  NodeSpec s{ir::OpType::kQuantizeLinear, {{"block_size", IntAttr(2)}}};
  s.since_version = 19;
  s.inputs = {MakeFloat({2, 4}, std::vector<float>(8, 1)), MakeFloat({2, 2}, {1, 1, 1, 1})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "opset 21");
  s.since_version = 21;
  s.inputs[1] = MakeFloat({2, 3}, std::vector<float>(6, 1));
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "blocked scale shape");
  s.attrs = {};
  s.inputs[1] = MakeFloat({3}, {1, 1, 1});
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "per-axis");
  s.inputs = {MakeFloat({2}, {1, 1}), MakeFloat({2}, {1, 1}), U8({1}, {0})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "zero point shape");
  s.attrs = {{"output_dtype", IntAttr(static_cast<int>(DataType::kI8))}};
  s.inputs = {MakeFloat({2}, {1, 1}), MakeFloat({}, {1}), U8({}, {0})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "differs");
  s.attrs = {{"output_dtype", IntAttr(static_cast<int>(DataType::kI32))}};
  s.inputs.pop_back();
  ExpectNodeError(s, absl::StatusCode::kUnimplemented, "output_dtype");
}

// ---- DequantizeLinear ----------------------------------------------------------------------

TEST(DequantizeLinear, OnnxExample) {
  NodeSpec s{ir::OpType::kDequantizeLinear};
  s.since_version = 10;
  s.inputs = {U8({4}, {0, 3, 128, 255}), MakeFloat({}, {2}), U8({}, {128})};
  ir::Tensor out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kF32);
  EXPECT_THAT(ToFloats(out), ElementsAre(-256, -250, 0, 254));
  s.inputs = {I32({2}, {100000, -3}), MakeFloat({}, {0.5f})};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(50000, -1.5f));
}

TEST(DequantizeLinear, PerAxisAndBlocked) {
  NodeSpec s{ir::OpType::kDequantizeLinear, {{"axis", IntAttr(0)}}};
  s.since_version = 13;
  s.inputs = {I8({2, 2}, {1, 2, 3, 4}), MakeFloat({2}, {1, 0.5f}), I8({2}, {0, 2})};
  EXPECT_THAT(ToFloats(RunNodeOk0(s)), ElementsAre(1, 2, 0.5f, 1));

  NodeSpec b{ir::OpType::kDequantizeLinear, {{"axis", IntAttr(-1)}, {"block_size", IntAttr(2)}}};
  b.since_version = 21;
  b.inputs = {I16({1, 4}, {10, 20, 30, 40}), MakeFloat({1, 2}, {0.5f, 2}), I16({1, 2}, {0, 10})};
  EXPECT_THAT(ToFloats(RunNodeOk0(b)), ElementsAre(5, 10, 40, 60));
}

TEST(DequantizeLinear, HalfScalesRoundOnce) {
  // 2049 is a tie between fp16 neighbours 2048 and 2050: rounds to even 2048. With
  // output_dtype = float (opset 23) the exact 2049 is kept.
  NodeSpec s{ir::OpType::kDequantizeLinear};
  s.since_version = 21;
  s.inputs = {I16({2}, {2049, -3}), MakeHalf({}, {1}), I16({}, {0})};
  ir::Tensor out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kF16);
  EXPECT_THAT(ToFloats(out), ElementsAre(2048, -3));
  s.since_version = 23;
  s.attrs = {{"output_dtype", IntAttr(static_cast<int>(DataType::kF32))}};
  out = RunNodeOk0(s);
  ASSERT_EQ(out.dtype(), DataType::kF32);
  EXPECT_THAT(ToFloats(out), ElementsAre(2049, -3));
  // bf16: 257 is a tie between 256 and 258 -> 256.
  s.attrs = {};
  s.inputs = {I16({1}, {257}), MakeTensor<uint16_t>({}, {0x3f80}, DataType::kBF16)};
  EXPECT_THAT(Bits16(RunNodeOk0(s)), ElementsAre(0x4380));
}

TEST(DequantizeLinear, Errors) {
  NodeSpec s{ir::OpType::kDequantizeLinear};
  s.since_version = 21;
  s.inputs = {U8({2}, {1, 2}), MakeFloat({}, {1}), I8({}, {0})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "differs from x dtype");
  s.inputs[2] = U8({}, {0});
  s.attrs = {{"output_dtype", IntAttr(static_cast<int>(DataType::kF32))}};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "opset 23");
  s.since_version = 23;
  s.attrs = {{"output_dtype", IntAttr(static_cast<int>(DataType::kI32))}};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "output_dtype");
  s.attrs = {{"axis", IntAttr(3)}};
  s.inputs = {U8({2}, {1, 2}), MakeFloat({2}, {1, 1})};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "axis");
}

}  // namespace
}  // namespace kiln::testing
