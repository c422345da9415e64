// Tests of the data-ops reference kernels: Compress, ReverseSequence, CenterCropPad,
// MeanVarianceNormalization and DynamicQuantizeLinear.
#include <cmath>
#include <string>
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
using ::testing::FloatNear;
using ::testing::Pointwise;

using Dims = std::vector<int64_t>;

ir::Tensor Bools(Dims dims, const std::vector<uint8_t>& v) {
  return MakeTensor<uint8_t>(std::move(dims), v, DataType::kBool);
}

std::vector<int> U8s(const ir::Tensor& t) {
  std::vector<int> v;
  for (int64_t i = 0; i < t.num_elements(); ++i) v.push_back(t.data<uint8_t>()[i]);
  return v;
}

const ir::Tensor k3x2 = MakeFloat({3, 2}, {1, 2, 3, 4, 5, 6});

// ---- Compress ----

TEST(CompressTest, Axes) {
  ir::Tensor a0 =
      RunNodeOk0({OpType::kCompress, {{"axis", IntAttr(0)}}, {k3x2, Bools({3}, {0, 1, 1})}});
  EXPECT_EQ(a0.dims(), (Dims{2, 2}));
  EXPECT_THAT(ToFloats(a0), ElementsAre(3, 4, 5, 6));
  // Condition shorter than the axis: the missing entries count as false.
  ir::Tensor a1 = RunNodeOk0({OpType::kCompress, {{"axis", IntAttr(-1)}}, {k3x2, Bools({1}, {1})}});
  EXPECT_EQ(a1.dims(), (Dims{3, 1}));
  EXPECT_THAT(ToFloats(a1), ElementsAre(1, 3, 5));
  // No axis: the flattened input.
  ir::Tensor flat = RunNodeOk0({OpType::kCompress, {}, {k3x2, Bools({5}, {0, 1, 0, 0, 1})}});
  EXPECT_EQ(flat.dims(), (Dims{2}));
  EXPECT_THAT(ToFloats(flat), ElementsAre(2, 5));
  ir::Tensor none = RunNodeOk0({OpType::kCompress, {{"axis", IntAttr(0)}}, {k3x2, Bools({3}, {})}});
  EXPECT_EQ(none.dims(), (Dims{0, 2}));
}

TEST(CompressTest, Errors) {
  ExpectNodeError({OpType::kCompress, {{"axis", IntAttr(0)}}, {k3x2, Bools({4}, {1, 0, 0, 1})}},
                  absl::StatusCode::kInvalidArgument, "condition has 4 elements");
  ExpectNodeError({OpType::kCompress, {{"axis", IntAttr(2)}}, {k3x2, Bools({1}, {1})}},
                  absl::StatusCode::kInvalidArgument, "axis");
  ExpectNodeError({OpType::kCompress, {}, {k3x2, MakeInt64({1}, {1})}},
                  absl::StatusCode::kInvalidArgument, "bool");
}

// ---- ReverseSequence (the spec's two examples) ----

TEST(ReverseSequenceTest, TimeMajor) {
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(i);
  ir::Tensor out = RunNodeOk0({OpType::kReverseSequence,
                               {{"batch_axis", IntAttr(1)}, {"time_axis", IntAttr(0)}},
                               {MakeFloat({4, 4}, x), MakeInt64({4}, {4, 3, 2, 1})}});
  EXPECT_THAT(ToFloats(out), ElementsAre(12, 9, 6, 3, 8, 5, 2, 7, 4, 1, 10, 11, 0, 13, 14, 15));
}

TEST(ReverseSequenceTest, BatchMajorWithInnerDim) {
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(i);
  // Shape (4, 2, 2): batch 4, time 2, 2 features per step; lengths 1 and 2.
  ir::Tensor out = RunNodeOk0({OpType::kReverseSequence,
                               {{"batch_axis", IntAttr(0)}, {"time_axis", IntAttr(1)}},
                               {MakeFloat({4, 2, 2}, x), MakeInt64({4}, {1, 2, 0, 2})}});
  EXPECT_THAT(ToFloats(out), ElementsAre(0, 1, 2, 3, 6, 7, 4, 5, 8, 9, 10, 11, 14, 15, 12, 13));
}

TEST(ReverseSequenceTest, Errors) {
  ExpectNodeError({OpType::kReverseSequence, {}, {k3x2, MakeInt64({2}, {4, 1})}},
                  absl::StatusCode::kInvalidArgument, "out of range");
  ExpectNodeError({OpType::kReverseSequence, {}, {k3x2, MakeInt64({3}, {1, 1, 1})}},
                  absl::StatusCode::kInvalidArgument, "sequence_lens must have shape");
  ExpectNodeError({OpType::kReverseSequence,
                   {{"batch_axis", IntAttr(0)}, {"time_axis", IntAttr(0)}},
                   {k3x2, MakeInt64({3}, {1, 1, 1})}},
                  absl::StatusCode::kInvalidArgument, "batch_axis");
}

// ---- CenterCropPad ----

TEST(CenterCropPadTest, CropAndPad) {
  std::vector<float> x(12);
  for (int i = 0; i < 12; ++i) x[i] = static_cast<float>(i + 1);
  // Rows 3 -> 2 (crop, odd difference: the extra row goes from the end), columns 4 -> 6 (pad one
  // zero each side).
  ir::Tensor out = RunNodeOk0(
      {OpType::kCenterCropPad, {}, {MakeFloat({3, 4}, x), MakeInt64({2}, {2, 6})}, 1, 18});
  EXPECT_EQ(out.dims(), (Dims{2, 6}));
  EXPECT_THAT(ToFloats(out), ElementsAre(0, 1, 2, 3, 4, 0, 0, 5, 6, 7, 8, 0));
  // Only the last axis, 4 -> 2: columns 1 and 2.
  ir::Tensor last = RunNodeOk0({OpType::kCenterCropPad,
                                {{"axes", IntsAttr({-1})}},
                                {MakeFloat({3, 4}, x), MakeInt64({1}, {2})},
                                1,
                                18});
  EXPECT_EQ(last.dims(), (Dims{3, 2}));
  EXPECT_THAT(ToFloats(last), ElementsAre(2, 3, 6, 7, 10, 11));
  // 3 -> 6 rows: odd-sized padding puts the extra zero row at the end (start 1).
  ir::Tensor pad = RunNodeOk0({OpType::kCenterCropPad,
                               {{"axes", IntsAttr({0})}},
                               {MakeFloat({3, 1}, {1, 2, 3}), MakeInt64({1}, {6})},
                               1,
                               18});
  EXPECT_THAT(ToFloats(pad), ElementsAre(0, 1, 2, 3, 0, 0));
}

TEST(CenterCropPadTest, Errors) {
  ExpectNodeError({OpType::kCenterCropPad, {}, {k3x2, MakeInt64({1}, {2})}, 1, 18},
                  absl::StatusCode::kInvalidArgument, "shape has 1");
  ExpectNodeError({OpType::kCenterCropPad,
                   {{"axes", IntsAttr({0, -2})}},
                   {k3x2, MakeInt64({2}, {1, 1})},
                   1,
                   18},
                  absl::StatusCode::kInvalidArgument, "twice");
  ExpectNodeError(
      {OpType::kCenterCropPad, {{"axes", IntsAttr({2})}}, {k3x2, MakeInt64({1}, {1})}, 1, 18},
      absl::StatusCode::kInvalidArgument, "axis");
}

// ---- MeanVarianceNormalization ----

// Channel 0 holds {1, 3} (mean 2, std 1), channel 1 {2, 6} (mean 4, std 2): both give {-1, 1}.
// The spec's 1e-9 added to the std is below half an fp32 ulp of 1 and 2.
TEST(MvnTest, DefaultAxes) {
  for (int version : {9, 13}) {
    ir::Tensor out = RunNodeOk0({OpType::kMeanVarianceNormalization,
                                 {},
                                 {MakeFloat({1, 2, 1, 2}, {1, 3, 2, 6})},
                                 1,
                                 version});
    EXPECT_THAT(ToFloats(out), ElementsAre(-1, 1, -1, 1)) << version;
  }
}

TEST(MvnTest, AxesAttribute) {
  // Normalise each row of {{1, 2, 3}, {0, 0, 6}}: population std sqrt(2/3) and sqrt(8).
  ir::Tensor out = RunNodeOk0({OpType::kMeanVarianceNormalization,
                               {{"axes", IntsAttr({1})}},
                               {MakeFloat({2, 3}, {1, 2, 3, 0, 0, 6})}});
  const float s0 = std::sqrt(2.0f / 3), s1 = std::sqrt(8.0f);
  constexpr float kTol = 1e-6f;  // a few fp32 ulps: one sqrt and one division
  EXPECT_THAT(ToFloats(out),
              Pointwise(FloatNear(kTol), {-1 / s0, 0.0f, 1 / s0, -2 / s1, -2 / s1, 4 / s1}));
}

// fp16: the statistics are fp32, each output rounded once: (x - 7/3) / std of {1, 2, 4}.
TEST(MvnTest, Float16RoundsOnce) {
  ir::Tensor out = RunNodeOk0({OpType::kMeanVarianceNormalization,
                               {{"axes", IntsAttr({0})}},
                               {MakeHalf({3}, {1.0f, 2.0f, 4.0f})}});
  ASSERT_EQ(out.dtype(), DataType::kF16);
  const double mean = 7.0 / 3, sd = std::sqrt(((16.0 / 9) + (1.0 / 9) + (25.0 / 9)) / 3);
  std::vector<float> want;
  for (double x : {1.0, 2.0, 4.0}) want.push_back(Float16(static_cast<float>((x - mean) / sd)));
  EXPECT_THAT(ToFloats(out), ElementsAre(want[0], want[1], want[2]));
}

TEST(MvnTest, Errors) {
  // Default axes {0, 2, 3} need rank 4.
  ExpectNodeError({OpType::kMeanVarianceNormalization, {}, {k3x2}},
                  absl::StatusCode::kInvalidArgument, "axis");
}

// ---- DynamicQuantizeLinear ----

TEST(DynamicQuantizeLinearTest, SpecExample) {
  auto out = RunNodeOk({OpType::kDynamicQuantizeLinear,
                        {},
                        {MakeFloat({6}, {0, 2, -3, -2.5f, 1.34f, 0.5f})},
                        3,
                        11});
  ASSERT_EQ(out[0].dtype(), DataType::kU8);
  EXPECT_THAT(U8s(out[0]), ElementsAre(153, 255, 0, 26, 221, 179));
  EXPECT_THAT(ToFloats(out[1]), ElementsAre(5.0f / 255));
  EXPECT_THAT(U8s(out[2]), ElementsAre(153));
}

// Range [0, 255] gives scale 1 and zero point 0, so x / scale is x: halves round to even.
TEST(DynamicQuantizeLinearTest, RoundHalfToEven) {
  auto out = RunNodeOk(
      {OpType::kDynamicQuantizeLinear, {}, {MakeFloat({5}, {0, 255, 2.5f, 3.5f, 254.5f})}, 3, 11});
  EXPECT_THAT(U8s(out[0]), ElementsAre(0, 255, 2, 4, 254));
  EXPECT_THAT(ToFloats(out[1]), ElementsAre(1));
  EXPECT_THAT(U8s(out[2]), ElementsAre(0));
}

// All negative: the range is [-255, 0], scale 1, zero point 255.
TEST(DynamicQuantizeLinearTest, NegativeAndZeroInputs) {
  auto neg = RunNodeOk(
      {OpType::kDynamicQuantizeLinear, {}, {MakeFloat({3}, {-255, -1.5f, -2.5f})}, 3, 11});
  EXPECT_THAT(U8s(neg[0]), ElementsAre(0, 253, 253));
  EXPECT_THAT(U8s(neg[2]), ElementsAre(255));
  // All zeros: max == min, scale is 1 (not 0) and everything quantizes to 0.
  auto zero = RunNodeOk({OpType::kDynamicQuantizeLinear, {}, {MakeFloat({2}, {0, 0})}, 3, 11});
  EXPECT_THAT(U8s(zero[0]), ElementsAre(0, 0));
  EXPECT_THAT(ToFloats(zero[1]), ElementsAre(1));
}

}  // namespace
}  // namespace kiln::testing
