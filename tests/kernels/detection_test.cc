// Tests of the detection reference kernels NonMaxSuppression and RoiAlign, and of DeformConv.
// Expected values are exact where the arithmetic is (selections, sums of dyadic fractions);
// RoiAlign's and DeformConv's general cases compare with ONNX Runtime's outputs (which equal the
// ONNX reference's) on deterministic inputs larger than the conformance data.
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

// NodeSpec literals leave the trailing fields to their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace kiln::testing {
namespace {

using ir::OpType;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using Attrs = std::vector<std::pair<std::string, ir::Attribute>>;

// A deterministic test input: scale * sin(a i + b), rounded to float (numpy computes the same).
std::vector<float> Wave(int64_t n, double a, double b, double scale = 1.0) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * std::sin(a * i + b));
  return v;
}

void ExpectAllNear(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// ---------------------------------------------------------------- NonMaxSuppression

NodeSpec Nms(ir::Tensor boxes, ir::Tensor scores, std::optional<int64_t> max_out,
             std::optional<float> iou = std::nullopt, std::optional<float> score = std::nullopt,
             int center_point_box = 0) {
  return {OpType::kNonMaxSuppression,
          {{"center_point_box", IntAttr(center_point_box)}},
          {std::move(boxes), std::move(scores), max_out ? MakeInt64({1}, {*max_out}) : ir::Tensor(),
           iou ? MakeFloat({1}, {*iou}) : ir::Tensor(),
           score ? MakeFloat({1}, {*score}) : ir::Tensor()},
          1,
          11};
}

std::vector<int64_t> Selected(const NodeSpec& spec) {
  ir::Tensor y = RunNodeOk0(spec);
  EXPECT_EQ(y.dtype(), DataType::kI64);
  EXPECT_EQ(y.rank(), 2);
  if (y.rank() == 2) {
    EXPECT_EQ(y.dim(1), 3);
  }
  return y.defined() ? Values<int64_t>(y) : std::vector<int64_t>{};
}

// The ONNX example: three clusters of overlapping boxes along y.
const std::vector<float> kClusters = {0, 0,  1, 1,  0, 0.1f,  1, 1.1f,  0, -0.1f, 1, 0.9f,
                                      0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100,   1, 101};
const std::vector<float> kClusterScores = {0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f};

TEST(NmsTest, SuppressesOverlapsByScoreOrder) {
  const NodeSpec spec =
      Nms(MakeFloat({1, 6, 4}, kClusters), MakeFloat({1, 1, 6}, kClusterScores), 3, 0.5f, 0.0f);
  EXPECT_THAT(Selected(spec), ElementsAre(0, 0, 3, 0, 0, 0, 0, 0, 5));
  // A score threshold of 0.4 drops box 5 (0.3); the limit of 2 stops after two.
  EXPECT_THAT(Selected(Nms(MakeFloat({1, 6, 4}, kClusters), MakeFloat({1, 1, 6}, kClusterScores), 3,
                           0.5f, 0.4f)),
              ElementsAre(0, 0, 3, 0, 0, 0));
  EXPECT_THAT(
      Selected(Nms(MakeFloat({1, 6, 4}, kClusters), MakeFloat({1, 1, 6}, kClusterScores), 2, 0.5f)),
      ElementsAre(0, 0, 3, 0, 0, 0));
}

TEST(NmsTest, CenterPointBoxes) {
  // The same clusters as [x_center, y_center, width, height].
  const std::vector<float> centers = {0.5f, 0.5f,  1, 1, 0.5f, 0.6f,  1, 1, 0.5f, 0.4f,   1, 1,
                                      0.5f, 10.5f, 1, 1, 0.5f, 10.6f, 1, 1, 0.5f, 100.5f, 1, 1};
  EXPECT_THAT(Selected(Nms(MakeFloat({1, 6, 4}, centers), MakeFloat({1, 1, 6}, kClusterScores), 3,
                           0.5f, 0.0f, 1)),
              ElementsAre(0, 0, 3, 0, 0, 0, 0, 0, 5));
  // Flipped corners ([y2, x2, y1, x1]) are the same boxes.
  std::vector<float> flipped = kClusters;
  for (size_t i = 0; i < flipped.size(); i += 4) {
    std::swap(flipped[i], flipped[i + 2]);
    std::swap(flipped[i + 1], flipped[i + 3]);
  }
  EXPECT_THAT(Selected(Nms(MakeFloat({1, 6, 4}, flipped), MakeFloat({1, 1, 6}, kClusterScores), 3,
                           0.5f, 0.0f)),
              ElementsAre(0, 0, 3, 0, 0, 0, 0, 0, 5));
}

TEST(NmsTest, NoBoxesOrNoLimitSelectNothing) {
  std::vector<int64_t> none = Selected(Nms(MakeFloat({1, 0, 4}, {}), MakeFloat({1, 1, 0}, {}), 10));
  EXPECT_TRUE(none.empty());
  // max_output_boxes_per_class omitted (or 0, or negative): nothing is selected.
  for (std::optional<int64_t> m :
       {std::optional<int64_t>(), std::optional<int64_t>(0), std::optional<int64_t>(-3)}) {
    EXPECT_TRUE(
        Selected(Nms(MakeFloat({1, 6, 4}, kClusters), MakeFloat({1, 1, 6}, kClusterScores), m))
            .empty());
  }
}

TEST(NmsTest, TiesGoToTheLowerIndex) {
  // Equal scores: boxes in index order; identical boxes: the first suppresses the others.
  const std::vector<float> boxes = {0, 0, 1, 1, 0, 0, 1, 1, 5, 5, 6, 6, 0, 0, 1, 1};
  EXPECT_THAT(Selected(Nms(MakeFloat({1, 4, 4}, boxes),
                           MakeFloat({1, 1, 4}, {0.5f, 0.5f, 0.5f, 0.5f}), 10, 0.5f)),
              ElementsAre(0, 0, 0, 0, 0, 2));
  // Non-overlapping boxes: decreasing score, ties by index.
  const std::vector<float> apart = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5};
  EXPECT_THAT(Selected(Nms(MakeFloat({1, 3, 4}, apart), MakeFloat({1, 1, 3}, {0.5f, 0.7f, 0.5f}),
                           10, 0.5f)),
              ElementsAre(0, 0, 1, 0, 0, 0, 0, 0, 2));
}

TEST(NmsTest, ThresholdsAreStrict) {
  // IoU of [0,0,1,1] and [0,0,1,2] is exactly 1/2: kept at threshold 0.5, suppressed below.
  const std::vector<float> boxes = {0, 0, 1, 1, 0, 0, 1, 2};
  const ir::Tensor scores = MakeFloat({1, 1, 2}, {0.9f, 0.8f});
  EXPECT_THAT(Selected(Nms(MakeFloat({1, 2, 4}, boxes), scores, 2, 0.5f)),
              ElementsAre(0, 0, 0, 0, 0, 1));
  EXPECT_THAT(Selected(Nms(MakeFloat({1, 2, 4}, boxes), scores, 2, 0.49f)), ElementsAre(0, 0, 0));
  // A score equal to score_threshold is dropped.
  EXPECT_THAT(Selected(Nms(MakeFloat({1, 2, 4}, boxes), scores, 2, 1.0f, 0.8f)),
              ElementsAre(0, 0, 0));
  // A box of zero area overlaps nothing, even at IoU threshold 0.
  EXPECT_THAT(Selected(Nms(MakeFloat({1, 2, 4}, {0, 0, 0, 1, 0, 0, 1, 1}), scores, 2, 0.0f)),
              ElementsAre(0, 0, 0, 0, 0, 1));
  // A NaN score cannot be ranked: its box is never selected.
  EXPECT_THAT(
      Selected(Nms(MakeFloat({1, 2, 4}, {0, 0, 1, 1, 5, 5, 6, 6}),
                   MakeFloat({1, 1, 2}, {std::numeric_limits<float>::quiet_NaN(), 0.1f}), 2)),
      ElementsAre(0, 0, 1));
}

TEST(NmsTest, BatchesAndClassesInOrder) {
  const std::vector<float> boxes = {0, 0, 1, 1, 5, 5, 6, 6, 0, 0, 1, 1, 5, 5, 6, 6};
  const std::vector<float> scores = {0.1f, 0.9f, 0.8f, 0.2f, 0.5f, 0.6f, 0.3f, 0.3f};
  EXPECT_THAT(Selected(Nms(MakeFloat({2, 2, 4}, boxes), MakeFloat({2, 2, 2}, scores), 1)),
              ElementsAre(0, 0, 1, 0, 1, 0, 1, 0, 1, 1, 1, 0));
  // Double boxes and scores select the same.
  std::vector<double> boxes64(boxes.begin(), boxes.end()), scores64(scores.begin(), scores.end());
  EXPECT_THAT(Selected(Nms(MakeTensor<double>({2, 2, 4}, boxes64, DataType::kF64),
                           MakeTensor<double>({2, 2, 2}, scores64, DataType::kF64), 1)),
              ElementsAre(0, 0, 1, 0, 1, 0, 1, 0, 1, 1, 1, 0));
}

TEST(NmsTest, Errors) {
  const auto code = absl::StatusCode::kInvalidArgument;
  const ir::Tensor scores = MakeFloat({1, 1, 2}, {0.9f, 0.8f});
  ExpectNodeError(Nms(MakeFloat({2, 4}, Wave(8, 1, 0)), scores, 1), code,
                  "boxes must be [num_batches, spatial_dimension, 4]");
  ExpectNodeError(Nms(MakeFloat({1, 2, 5}, Wave(10, 1, 0)), scores, 1), code, "boxes must be");
  ExpectNodeError(Nms(MakeFloat({1, 3, 4}, Wave(12, 1, 0)), scores, 1), code,
                  "scores must be [num_batches, num_classes, spatial_dimension] = [1, C, 3]");
  ExpectNodeError(Nms(MakeFloat({1, 2, 4}, Wave(8, 1, 0)), scores, 1, 1.5f), code,
                  "iou_threshold must be in [0, 1]");
  ExpectNodeError(Nms(MakeFloat({1, 2, 4}, Wave(8, 1, 0)), scores, 1, 0.5f, 0.0f, 2), code,
                  "'center_point_box' must be 0 or 1");
  NodeSpec two = Nms(MakeFloat({1, 2, 4}, Wave(8, 1, 0)), scores, 1);
  two.inputs[2] = MakeInt64({2}, {1, 2});
  ExpectNodeError(two, code, "max_output_boxes_per_class must be a scalar");
}

// ---------------------------------------------------------------- RoiAlign

NodeSpec RoiAlign(ir::Tensor x, std::vector<float> rois, std::vector<int64_t> batch, Attrs attrs,
                  int since_version = 16) {
  const int64_t n = static_cast<int64_t>(batch.size());
  return {OpType::kRoiAlign,
          std::move(attrs),
          {std::move(x), MakeFloat({n, 4}, rois), MakeInt64({n}, batch)},
          1,
          since_version};
}

// ONNX Runtime's outputs (opset 16) for X = Wave([1, 2, 6, 7], 0.37, 0.1) and these RoIs. Kiln
// computes coordinates and sums in double, ONNX Runtime in fp32: over 4 to 16 samples of values
// below 1, fp32 rounding stays below 1e-6, so 2e-6 bounds the difference.
const std::vector<float> kRois = {0.5f, 1.2f, 4.3f, 5.1f, -2, -1, 3, 2, 2.2f, 0.3f, 8.5f, 4.9f};
constexpr float kRoiTol = 2e-6f;

TEST(RoiAlignTest, AverageHalfPixelMatchesOnnxRuntime) {
  ir::Tensor y = RunNodeOk0(RoiAlign(MakeFloat({1, 2, 6, 7}, Wave(84, 0.37, 0.1)), kRois, {0, 0, 0},
                                     {{"output_height", IntAttr(3)},
                                      {"output_width", IntAttr(2)},
                                      {"spatial_scale", FloatAttr(0.9f)},
                                      {"sampling_ratio", IntAttr(0)}}));
  ASSERT_THAT(y.dims(), ElementsAre(3, 2, 3, 2));
  ExpectAllNear(
      ToFloats(y),
      {-0.014696177f, -0.28309771f,   -0.10964461f,  0.14504723f,   -0.019363806f, -0.17380388f,
       -0.061395328f, 0.21881741f,    0.17367357f,   -0.078687228f, -0.025141299f, 0.13728987f,
       0.033277806f,  0.46097645f,    0.033277806f,  0.46097645f,   0.12863804f,   0.11298581f,
       0.022636987f,  -0.31279042f,   0.022636987f,  -0.31279042f,  -0.16112861f,  -0.22704901f,
       0.21955909f,   -0.0047515831f, -0.056115221f, 0.26094389f,   0.062544495f,  -0.26309815f,
       -0.2427094f,   -0.041363567f,  0.11369314f,   -0.21557967f,  -0.12120114f,  0.21612304f},
      kRoiTol);
}

TEST(RoiAlignTest, MaxOutputHalfPixelMatchesOnnxRuntime) {
  ir::Tensor y =
      RunNodeOk0(RoiAlign(MakeFloat({1, 2, 6, 7}, Wave(84, 0.37, 0.1)), kRois, {0, 0, 0},
                          {{"output_height", IntAttr(3)},
                           {"output_width", IntAttr(2)},
                           {"spatial_scale", FloatAttr(0.9f)},
                           {"sampling_ratio", IntAttr(2)},
                           {"mode", StringAttr("max")},
                           {"coordinate_transformation_mode", StringAttr("output_half_pixel")}}));
  ExpectAllNear(ToFloats(y),
                {0.044877626f, 0.19445492f, 0.70928103f,  0.26185808f,  0.23371717f, 0.1747358f,
                 0.60339904f,  0.21050967f, 0.28830814f,  0.078868285f, 0.59076303f, 0.384489f,
                 0.099833414f, 0.64225465f, 0.29456931f,  0.49774739f,  0.38184923f, 0.070422962f,
                 0.067910962f, 0.0f,        0.052631002f, 0.069951601f, 0.52968878f, 0.4077777f,
                 0.34407926f,  0.28608993f, 0.40813702f,  0.93330997f,  0.1852124f,  0.10601499f,
                 0.47091872f,  0.69469464f, 0.12942551f,  0.32675737f,  0.59615475f, 0.29813629f},
                kRoiTol);
}

TEST(RoiAlignTest, RoisOutsideTheImage) {
  const ir::Tensor x = MakeFloat({1, 1, 4, 4}, std::vector<float>(16, 2.5f));
  const Attrs attrs = {{"output_height", IntAttr(2)},
                       {"output_width", IntAttr(2)},
                       {"sampling_ratio", IntAttr(2)},
                       {"coordinate_transformation_mode", StringAttr("output_half_pixel")}};
  // Entirely outside (more than a pixel past the border): every sample reads 0, in both modes.
  EXPECT_THAT(ToFloats(RunNodeOk0(RoiAlign(x, {100, 100, 110, 110}, {0}, attrs))),
              ElementsAre(0, 0, 0, 0));
  Attrs max_attrs = attrs;
  max_attrs.push_back({"mode", StringAttr("max")});
  EXPECT_THAT(ToFloats(RunNodeOk0(RoiAlign(x, {-20, -20, -10, -10}, {0}, max_attrs))),
              ElementsAre(0, 0, 0, 0));
  // Within a pixel of the border, samples read the border: a constant image stays constant.
  EXPECT_THAT(ToFloats(RunNodeOk0(RoiAlign(x, {-0.9f, -0.9f, 4.5f, 4.5f}, {0}, attrs))),
              ElementsAre(2.5f, 2.5f, 2.5f, 2.5f));
  // Half outside: the samples past -1 count as 0 in the average (2 of 4 per left bin).
  EXPECT_THAT(ToFloats(RunNodeOk0(RoiAlign(x, {-4, 0, 4, 4}, {0}, attrs))),
              ElementsAre(1.25f, 2.5f, 1.25f, 2.5f));
}

TEST(RoiAlignTest, Opset10HasNoHalfPixelShift) {
  const ir::Tensor x = MakeFloat({1, 1, 5, 5}, Wave(25, 0.7, 0.0));
  const Attrs base = {{"output_height", IntAttr(2)}, {"output_width", IntAttr(2)}};
  Attrs explicit_mode = base;
  explicit_mode.push_back({"coordinate_transformation_mode", StringAttr("output_half_pixel")});
  const std::vector<float> rois = {0.3f, 0.6f, 3.1f, 3.7f};
  const std::vector<float> v10 = ToFloats(RunNodeOk0(RoiAlign(x, rois, {0}, base, 10)));
  EXPECT_EQ(v10, ToFloats(RunNodeOk0(RoiAlign(x, rois, {0}, explicit_mode, 16))));
  EXPECT_NE(v10, ToFloats(RunNodeOk0(RoiAlign(x, rois, {0}, base, 16))));  // half_pixel
}

TEST(RoiAlignTest, Errors) {
  const auto code = absl::StatusCode::kInvalidArgument;
  const ir::Tensor x = MakeFloat({1, 1, 4, 4}, std::vector<float>(16, 1.0f));
  ExpectNodeError(RoiAlign(x, {0, 0, 1, 1}, {1}, {}), code,
                  "batch_indices[0] = 1 is out of range for batch size 1");
  ExpectNodeError(RoiAlign(x, {0, 0, 1, 1}, {0}, {{"mode", StringAttr("median")}}), code,
                  "mode must be 'avg' or 'max'");
  ExpectNodeError(RoiAlign(x, {0, 0, 1, 1}, {0}, {{"output_height", IntAttr(0)}}), code,
                  "output_height and output_width must be positive");
  ExpectNodeError(
      RoiAlign(x, {0, 0, 1, 1}, {0}, {{"coordinate_transformation_mode", StringAttr("align")}}),
      code, "coordinate_transformation_mode must be");
  ExpectNodeError(
      {OpType::kRoiAlign, {}, {x, MakeFloat({1, 5}, {0, 0, 1, 1, 0}), MakeInt64({1}, {0})}, 1, 16},
      code, "rois must be [num_rois, 4]");
  ExpectNodeError(
      RoiAlign(MakeFloat({1, 4, 4}, std::vector<float>(16, 1.0f)), {0, 0, 1, 1}, {0}, {}), code,
      "X must be 4-D");
  ExpectNodeError(RoiAlign(x, {0, 0, 1e30f, 1e30f}, {0}, {}), code, "sampling grid");
}

// ---------------------------------------------------------------- DeformConv

NodeSpec DeformConv(std::vector<ir::Tensor> inputs, Attrs attrs = {}) {
  return {OpType::kDeformConv, std::move(attrs), std::move(inputs), 1, 19};
}

TEST(DeformConvTest, ZeroOffsetsAreAConvolution) {
  // 2x2 kernel of ones over a 3x3 ramp: each output is the sum of a 2x2 window.
  const ir::Tensor x = MakeFloat({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  const ir::Tensor w = MakeFloat({1, 1, 2, 2}, {1, 1, 1, 1});
  ir::Tensor y = RunNodeOk0(DeformConv({x, w, MakeFloat({1, 8, 2, 2}, std::vector<float>(32, 0))}));
  ASSERT_THAT(y.dims(), ElementsAre(1, 1, 2, 2));
  EXPECT_THAT(ToFloats(y), ElementsAre(12, 16, 24, 28));
}

TEST(DeformConvTest, OffsetsMoveTapsAndMasksScaleThem) {
  const ir::Tensor x = MakeFloat({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  const ir::Tensor w = MakeFloat({1, 1, 2, 2}, {1, 1, 1, 1});
  // Every tap moved by +1 along x: windows one column right; past the border reads 0.
  std::vector<float> off(32, 0.0f);
  for (int k = 0; k < 4; ++k) {
    for (int p = 0; p < 4; ++p) off[(k * 2 + 1) * 4 + p] = 1.0f;  // [k][d = x][p]
  }
  EXPECT_THAT(ToFloats(RunNodeOk0(DeformConv({x, w, MakeFloat({1, 8, 2, 2}, off)}))),
              ElementsAre(16, 9, 28, 15));
  // +0.5 along y: halfway between rows; the last row's lower neighbour is outside (0).
  std::fill(off.begin(), off.end(), 0.0f);
  for (int k = 0; k < 4; ++k) {
    for (int p = 0; p < 4; ++p) off[(k * 2) * 4 + p] = 0.5f;
  }
  EXPECT_THAT(ToFloats(RunNodeOk0(DeformConv({x, w, MakeFloat({1, 8, 2, 2}, off)}))),
              ElementsAre(18, 22, 19.5f, 22.5f));
  // A mask of 0.5 on every tap and a bias of 1: half the plain convolution plus 1.
  EXPECT_THAT(ToFloats(RunNodeOk0(DeformConv(
                  {x, w, MakeFloat({1, 8, 2, 2}, std::vector<float>(32, 0)), MakeFloat({1}, {1}),
                   MakeFloat({1, 4, 2, 2}, std::vector<float>(16, 0.5f))}))),
              ElementsAre(7, 9, 13, 15));
}

TEST(DeformConvTest, GroupsStridesDilationsPadsMatchOnnxRuntime) {
  // ONNX Runtime's output (equal to the ONNX reference's within 5e-7) for deterministic inputs.
  // Each output sums 18 weighted samples of magnitude below 1 in fp32 on both sides: rounding
  // stays below 2e-6 each, so 5e-6 bounds the difference.
  ir::Tensor y = RunNodeOk0(DeformConv(
      {MakeFloat({1, 4, 5, 6}, Wave(120, 0.23, 0.4)), MakeFloat({6, 2, 3, 3}, Wave(108, 0.61, 0.2)),
       MakeFloat({1, 36, 3, 3}, Wave(324, 0.17, 0.3, 1.5)), MakeFloat({6}, Wave(6, 1.1, 0.0)),
       MakeFloat({1, 18, 3, 3}, Wave(162, 0.29, 0.5))},
      {{"group", IntAttr(2)},
       {"offset_group", IntAttr(2)},
       {"strides", IntsAttr({1, 2})},
       {"dilations", IntsAttr({2, 1})},
       {"pads", IntsAttr({1, 1, 1, 0})},
       {"kernel_shape", IntsAttr({3, 3})}}));
  ASSERT_THAT(y.dims(), ElementsAre(1, 6, 3, 3));
  ExpectAllNear(ToFloats(y),
                {-0.36062899f, 0.63645846f,  1.2393132f,   0.98818159f,  1.5981922f,   0.55201614f,
                 -1.0167623f,  -1.0364382f,  -0.32349092f, 0.9681952f,   1.9041145f,   0.44775617f,
                 0.34846568f,  0.70633817f,  0.96418661f,  2.1733022f,   2.99458f,     2.8944714f,
                 1.1667274f,   0.14048868f,  -0.41700447f, -0.16278017f, -0.78393757f, 0.25420719f,
                 1.7853248f,   1.7794203f,   1.0695912f,   -1.0424795f,  -2.9120879f,  -1.8026949f,
                 0.95029354f,  -0.33024025f, -0.40261135f, -0.78160143f, -0.45247498f, 1.2293433f,
                 -3.1676099f,  -3.6492374f,  -3.3868456f,  -2.5340719f,  -2.3730416f,  -1.0076892f,
                 -0.10784602f, 1.0720876f,   0.76577604f,  0.24821615f,  2.1328259f,   1.0152601f,
                 -1.7642899f,  -0.4887718f,  -0.45892763f, -0.10796535f, -0.47384346f, -2.1461208f},
                5e-6f);
}

TEST(DeformConvTest, OneAndThreeSpatialDims) {
  // 1-D: pairs of a ramp; with every tap moved by 0.5, each reads the midpoint.
  const ir::Tensor x = MakeFloat({1, 1, 5}, {1, 2, 3, 4, 5});
  const ir::Tensor w = MakeFloat({1, 1, 2}, {1, 1});
  EXPECT_THAT(
      ToFloats(RunNodeOk0(DeformConv({x, w, MakeFloat({1, 2, 4}, std::vector<float>(8, 0))}))),
      ElementsAre(3, 5, 7, 9));
  EXPECT_THAT(
      ToFloats(RunNodeOk0(DeformConv({x, w, MakeFloat({1, 2, 4}, std::vector<float>(8, 0.5f))}))),
      ElementsAre(4, 6, 8, 7));  // the last reads 4.5 and 5 * 0.5 + 0 * 0.5
  // 3-D: a 2x2x2 kernel of ones over ones.
  ir::Tensor y3 = RunNodeOk0(DeformConv({MakeFloat({1, 1, 2, 2, 2}, std::vector<float>(8, 1)),
                                         MakeFloat({1, 1, 2, 2, 2}, std::vector<float>(8, 1)),
                                         MakeFloat({1, 24, 1, 1, 1}, std::vector<float>(24, 0))}));
  ASSERT_THAT(y3.dims(), ElementsAre(1, 1, 1, 1, 1));
  EXPECT_THAT(ToFloats(y3), ElementsAre(8));
}

TEST(DeformConvTest, Errors) {
  const auto code = absl::StatusCode::kInvalidArgument;
  const ir::Tensor x = MakeFloat({1, 2, 3, 3}, std::vector<float>(18, 1));
  const ir::Tensor w = MakeFloat({2, 2, 2, 2}, std::vector<float>(16, 1));
  const ir::Tensor off = MakeFloat({1, 8, 2, 2}, std::vector<float>(32, 0));
  ExpectNodeError(DeformConv({x, w, MakeFloat({1, 8, 3, 3}, std::vector<float>(72, 0))}), code,
                  "offset must be [1,8,2,2]");
  ExpectNodeError(DeformConv({x, w, off, {}, MakeFloat({1, 8, 2, 2}, std::vector<float>(32, 1))}),
                  code, "mask must be [1,4,2,2]");
  ExpectNodeError(DeformConv({x, w, off}, {{"offset_group", IntAttr(3)}}), code,
                  "not divisible by offset_group 3");
  ExpectNodeError(DeformConv({x, MakeFloat({2, 1, 2, 2}, std::vector<float>(8, 1)), off}), code,
                  "must be [oC, C / group, k...]");
  ExpectNodeError(DeformConv({x, w, off}, {{"group", IntAttr(0)}}), code, "group must be positive");
  ExpectNodeError(DeformConv({x, w, off, MakeFloat({3}, {1, 1, 1})}), code, "B must be [2]");
  ExpectNodeError(DeformConv({x, w, off}, {{"kernel_shape", IntsAttr({3, 3})}}), code,
                  "does not match W's");
}

}  // namespace
}  // namespace kiln::testing
