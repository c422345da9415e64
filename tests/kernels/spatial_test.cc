// Reference kernels of the spatial family: LpPool, GlobalLpPool, MaxUnpool, Col2Im, GridSample,
// AffineGrid.
#include <cmath>
#include <vector>

#include "tests/kernels/nn_test_util.h"

namespace kiln::testing::spatial {
namespace {

using ir::OpType;
using nn::Attrs;
using nn::ExpectInvalid;
using nn::ExpectNear;
using nn::RunOp;

std::vector<float> RunV(OpType op, std::vector<ir::Tensor> inputs, Attrs attrs = {},
                        int since_version = 23, std::vector<int64_t>* dims = nullptr) {
  auto r = RunOp(op, std::move(inputs), std::move(attrs), 1, since_version);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  if (dims) *dims = (*r)[0].dims();
  return ToFloats((*r)[0]);
}

// Float results below are sums of a few exactly representable terms and one root or division;
// 1e-6 covers the last-bit rounding of those in fp32.
constexpr float kTol = 1e-6f;

// ---------------------------------------------------------------- LpPool / GlobalLpPool

TEST(LpPoolTest, P2StridedWindows) {
  std::vector<int64_t> dims;
  auto y = RunV(OpType::kLpPool, {MakeFloat({1, 1, 4}, {3, 4, 0, -5})},
                {{"kernel_shape", IntsAttr({2})}, {"strides", IntsAttr({2})}}, 18, &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{1, 1, 2}));
  ExpectNear(y, {5, 5}, kTol);
}

TEST(LpPoolTest, PadsAddNothingToTheSum) {
  // p = 1 over [pad, 1, -2, 3, pad] with windows of 2: |1|, |1|+|-2|, |-2|+|3|, |3|.
  auto y =
      RunV(OpType::kLpPool, {MakeFloat({1, 1, 3}, {1, -2, 3})},
           {{"kernel_shape", IntsAttr({2})}, {"pads", IntsAttr({1, 1})}, {"p", IntAttr(1)}}, 11);
  ExpectNear(y, {1, 3, 5, 3}, kTol);
  // p = 3: (1 + 8)^(1/3).
  y = RunV(OpType::kLpPool, {MakeFloat({1, 1, 2}, {1, -2})},
           {{"kernel_shape", IntsAttr({2})}, {"p", IntAttr(3)}}, 11);
  ExpectNear(y, {std::cbrt(9.0f)}, kTol);
}

TEST(LpPoolTest, DilationsAndCeilMode) {
  // Windows {0, 2}, {2, 4}, and with ceil_mode a third {4, 6} of which only cell 4 exists.
  const auto x = MakeFloat({1, 1, 6}, {1, 2, 3, 4, 5, 6});
  Attrs attrs = {{"kernel_shape", IntsAttr({2})},
                 {"dilations", IntsAttr({2})},
                 {"strides", IntsAttr({2})},
                 {"p", IntAttr(1)}};
  ExpectNear(RunV(OpType::kLpPool, {x}, attrs, 18), {4, 8}, kTol);
  attrs.push_back({"ceil_mode", IntAttr(1)});
  ExpectNear(RunV(OpType::kLpPool, {x}, attrs, 18), {4, 8, 5}, kTol);
}

TEST(LpPoolTest, SameUpper2d) {
  // 2x2 input, 2x2 kernel, SAME_UPPER pads one row / column at the end.
  auto y = RunV(OpType::kLpPool, {MakeFloat({1, 1, 2, 2}, {1, 2, 2, 4})},
                {{"kernel_shape", IntsAttr({2, 2})}, {"auto_pad", StringAttr("SAME_UPPER")}});
  ExpectNear(y, {5, std::sqrt(20.0f), std::sqrt(20.0f), 4}, kTol);
}

TEST(GlobalLpPoolTest, PerPlaneNorm) {
  std::vector<int64_t> dims;
  auto y = RunV(OpType::kGlobalLpPool, {MakeFloat({1, 2, 2}, {3, -4, 6, 8})}, {}, 2, &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{1, 2, 1}));
  ExpectNear(y, {5, 10}, kTol);
}

TEST(GlobalLpPoolTest, Fp16AndBf16AccumulateInFp32AndRoundOnce) {
  // 1 + e + e: each fp16 (bf16) step would round back to 1; the fp32 sum 1 + 2e is exact in the
  // narrow type.
  const float e16 = std::ldexp(1.0f, -11), e8 = std::ldexp(1.0f, -8);
  ExpectNear(RunV(OpType::kGlobalLpPool, {MakeHalf({1, 1, 3}, {1, e16, e16})}, {{"p", IntAttr(1)}}),
             {1 + 2 * e16});
  ExpectNear(RunV(OpType::kLpPool, {MakeBf16({1, 1, 3}, {1, e8, e8})},
                  {{"p", IntAttr(1)}, {"kernel_shape", IntsAttr({3})}}),
             {1 + 2 * e8});
}

TEST(LpPoolTest, Errors) {
  auto x = MakeFloat({1, 1, 4}, {1, 2, 3, 4});
  ExpectInvalid(
      RunOp(OpType::kLpPool, {x}, {{"kernel_shape", IntsAttr({2})}, {"p", IntAttr(0)}}).status());
  ExpectInvalid(RunOp(OpType::kLpPool, {x}).status());  // kernel_shape required
  ExpectInvalid(RunOp(OpType::kLpPool, {x}, {{"kernel_shape", IntsAttr({2, 2})}}).status());
  ExpectInvalid(RunOp(OpType::kLpPool, {x}, {{"kernel_shape", IntsAttr({5})}}).status());
  ExpectInvalid(RunOp(OpType::kGlobalLpPool, {MakeFloat({3}, {1, 2, 3})}).status());
}

// ---------------------------------------------------------------- MaxUnpool

TEST(MaxUnpoolTest, ScattersIntoInferredShape) {
  std::vector<int64_t> dims;
  auto y = RunV(OpType::kMaxUnpool,
                {MakeFloat({1, 1, 2, 2}, {5, 6, 7, 8}), MakeInt64({1, 1, 2, 2}, {5, 7, 13, 15})},
                {{"kernel_shape", IntsAttr({2, 2})}, {"strides", IntsAttr({2, 2})}}, 11, &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{1, 1, 4, 4}));
  ExpectNear(y, {0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 7, 0, 8});
}

TEST(MaxUnpoolTest, OutputShapePadsAroundTheInferredTensor) {
  std::vector<int64_t> dims;
  auto y = RunV(OpType::kMaxUnpool,
                {MakeHalf({1, 1, 1, 2}, {5, 6}), MakeInt64({1, 1, 1, 2}, {0, 3}),
                 MakeInt64({4}, {1, 1, 3, 3})},
                {{"kernel_shape", IntsAttr({2, 2})}, {"strides", IntsAttr({2, 2})}}, 11, &dims);
  // Inferred 2x4: index 0 -> (0, 0), 3 -> (0, 3), which falls outside the 3x3 output.
  EXPECT_EQ(dims, (std::vector<int64_t>{1, 1, 3, 3}));
  ExpectNear(y, {5, 0, 0, 0, 0, 0, 0, 0, 0});
}

TEST(MaxUnpoolTest, Errors) {
  auto x = MakeFloat({1, 1, 2, 2}, {5, 6, 7, 8});
  Attrs attrs = {{"kernel_shape", IntsAttr({2, 2})}, {"strides", IntsAttr({2, 2})}};
  ExpectInvalid(RunOp(OpType::kMaxUnpool, {x, MakeInt64({1, 1, 2, 2}, {0, 1, 2, 16})}, attrs)
                    .status());  // index past the 4x4 output
  ExpectInvalid(
      RunOp(OpType::kMaxUnpool, {x, MakeInt64({1, 1, 2, 2}, {0, 1, 2, -1})}, attrs).status());
  ExpectInvalid(RunOp(OpType::kMaxUnpool, {x, MakeInt64({4}, {0, 1, 2, 3})}, attrs).status());
  ExpectInvalid(RunOp(OpType::kMaxUnpool, {x, MakeInt64({1, 1, 2, 2}, {0, 1, 2, 3})}).status());
}

// ---------------------------------------------------------------- Col2Im

TEST(Col2ImTest, OverlappingBlocksSum1d) {
  // Image of 3, block of 2, stride 1: two positions; cell 1 gets column (k=0, l=1) + (k=1, l=0).
  std::vector<int64_t> dims;
  auto y = RunV(OpType::kCol2Im,
                {MakeFloat({1, 2, 2}, {1, 2, 10, 20}), MakeInt64({1}, {3}), MakeInt64({1}, {2})},
                {}, 18, &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{1, 1, 3}));
  ExpectNear(y, {1, 12, 20});
}

TEST(Col2ImTest, StridesPadsAndChannels2d) {
  // 2 channels, image 2x3, block 1x2, stride (1, 2), pads (0, 1, 0, 1): per row the block
  // positions start at columns -1, 1, so cells -1 and 3 fall in the padding.
  auto x = MakeTensor<int32_t>({1, 4, 4},
                               {1, 2, 3, 4,          // c0 k0: (row, pos) = (0,0) (0,1) (1,0) (1,1)
                                10, 20, 30, 40,      // c0 k1
                                100, 200, 300, 400,  // c1 k0
                                1000, 2000, 3000, 4000},  // c1 k1
                               DataType::kI32);
  std::vector<int64_t> dims;
  auto y = RunV(OpType::kCol2Im, {x, MakeInt64({2}, {2, 3}), MakeInt64({2}, {1, 2})},
                {{"strides", IntsAttr({1, 2})}, {"pads", IntsAttr({0, 1, 0, 1})}}, 18, &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{1, 2, 2, 3}));
  // Position 0 covers columns -1, 0; position 1 covers 1, 2.
  ExpectNear(y, {10, 2, 20, 30, 4, 40, 1000, 200, 2000, 3000, 400, 4000});
}

TEST(Col2ImTest, Fp16AccumulatesInFp32) {
  // Image 3, block 3, pads 2: cell 2 sums (k=2, l=2), (k=1, l=3), (k=0, l=4) = 1 + e + e.
  const float e = std::ldexp(1.0f, -11);
  std::vector<float> col(15, 0.0f);
  col[2 * 5 + 2] = 1;
  col[1 * 5 + 3] = e;
  col[0 * 5 + 4] = e;
  auto y =
      RunV(OpType::kCol2Im, {MakeHalf({1, 3, 5}, col), MakeInt64({1}, {3}), MakeInt64({1}, {3})},
           {{"pads", IntsAttr({2, 2})}}, 18);
  ExpectNear(y, {0, 0, 1 + 2 * e});
}

TEST(Col2ImTest, Errors) {
  auto x = MakeFloat({1, 2, 2}, {1, 2, 3, 4});
  ExpectInvalid(
      RunOp(OpType::kCol2Im, {x, MakeInt64({1}, {4}), MakeInt64({1}, {2})}).status());  // L=3
  ExpectInvalid(
      RunOp(OpType::kCol2Im, {x, MakeInt64({1}, {3}), MakeInt64({1}, {3})}).status());  // C*K
  ExpectInvalid(RunOp(OpType::kCol2Im, {x, MakeInt64({2}, {3, 1}), MakeInt64({1}, {2})}).status());
  ExpectInvalid(RunOp(OpType::kCol2Im, {x, MakeInt64({1}, {3}), MakeInt64({1}, {2})},
                      {{"strides", IntsAttr({0})}})
                    .status());
}

// ---------------------------------------------------------------- GridSample

// 2x2 image [[1, 2], [3, 4]]; grid points are (x, y) pairs.
ir::Tensor Image2x2() { return MakeFloat({1, 1, 2, 2}, {1, 2, 3, 4}); }

TEST(GridSampleTest, BilinearAlignCorners) {
  std::vector<int64_t> dims;
  auto y = RunV(OpType::kGridSample, {Image2x2(), MakeFloat({1, 1, 3, 2}, {-1, -1, 0, 0, 1, -1})},
                {{"align_corners", IntAttr(1)}}, 16, &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{1, 1, 1, 3}));
  ExpectNear(y, {1, 2.5f, 2}, kTol);
}

TEST(GridSampleTest, PaddingModesAtTheCorner) {
  // Without align_corners (-1, -1) is the image's outer corner, pixel (-0.5, -0.5): a quarter of
  // the weight on pixel (0, 0) and the rest outside.
  auto grid = MakeFloat({1, 1, 2, 2}, {-1, -1, 0, 0});
  ExpectNear(RunV(OpType::kGridSample, {Image2x2(), grid}, {}, 16), {0.25f, 2.5f}, kTol);
  ExpectNear(
      RunV(OpType::kGridSample, {Image2x2(), grid}, {{"padding_mode", StringAttr("border")}}, 20),
      {1, 2.5f}, kTol);
  ExpectNear(RunV(OpType::kGridSample, {Image2x2(), grid},
                  {{"padding_mode", StringAttr("reflection")}}, 22),
             {1, 2.5f}, kTol);
  // Far outside: border clamps to the last pixel, reflection bounces back from x = 1.5 by 1.
  auto far = MakeFloat({1, 1, 1, 2}, {2, 1});  // pixel (x, y) = (2.5, 1.5)
  ExpectNear(RunV(OpType::kGridSample, {Image2x2(), far}, {{"padding_mode", StringAttr("border")}}),
             {4}, kTol);
  ExpectNear(
      RunV(OpType::kGridSample, {Image2x2(), far}, {{"padding_mode", StringAttr("reflection")}}),
      {3.5f}, kTol);  // x reflects to 0.5 on the bottom row: (3 + 4) / 2
  ExpectNear(RunV(OpType::kGridSample, {Image2x2(), far}), {0}, kTol);
}

TEST(GridSampleTest, NearestRoundsHalfToEven) {
  // align_corners: (0.1, -0.6) -> pixel (0.55, 0.2) -> (1, 0); (0, 0) -> (0.5, 0.5) -> (0, 0).
  auto y = RunV(OpType::kGridSample, {Image2x2(), MakeFloat({1, 1, 2, 2}, {0.1f, -0.6f, 0, 0})},
                {{"mode", StringAttr("nearest")}, {"align_corners", IntAttr(1)}}, 16);
  ExpectNear(y, {2, 1});
}

TEST(GridSampleTest, Cubic1dHandComputed) {
  // Opset 20 1-D: image [0, 0, 1, 0], align_corners, pixel x = 1.25: the tap at 2 has Keys
  // weight near(0.75) = (1.25 * 0.75 - 2.25) * 0.75^2 + 1 = 0.26171875.
  const float g = 2 * 1.25f / 3 - 1;
  auto y =
      RunV(OpType::kGridSample, {MakeFloat({1, 1, 4}, {0, 0, 1, 0}), MakeFloat({1, 1, 1}, {g})},
           {{"mode", StringAttr("cubic")}, {"align_corners", IntAttr(1)}}, 20);
  ExpectNear(y, {0.26171875f}, kTol);
  // A ramp is reproduced at the midpoint between pixels (symmetric weights sum to 1).
  y = RunV(OpType::kGridSample, {MakeFloat({1, 1, 4}, {0, 1, 2, 3}), MakeFloat({1, 1, 1}, {0})},
           {{"mode", StringAttr("cubic")}, {"align_corners", IntAttr(1)}}, 20);
  ExpectNear(y, {1.5f}, kTol);
}

TEST(GridSampleTest, Volumetric3dLinear) {
  // 2x2x2 volume with value = 4z + 2y + x; trilinear at the centre is the mean 3.5.
  std::vector<float> v(8);
  for (int i = 0; i < 8; ++i) v[i] = static_cast<float>(i);
  auto y = RunV(OpType::kGridSample,
                {MakeFloat({1, 1, 2, 2, 2}, v), MakeFloat({1, 1, 1, 2, 3}, {0, 0, 0, 1, -1, -1})},
                {{"align_corners", IntAttr(1)}}, 20);
  ExpectNear(y, {3.5f, 1}, kTol);  // (1, -1, -1) is x = 1, y = 0, z = 0
}

TEST(GridSampleTest, Fp16ImageWithFloatGrid) {
  // 0.25 * 1 + 0.75 * (1 + 2^-10) = 1 + 0.75 * 2^-10, rounded once to fp16: 1 + 2^-10.
  const float u = std::ldexp(1.0f, -10);
  auto x = MakeHalf({1, 1, 1, 2}, {1, 1 + u});
  auto r = RunOp(OpType::kGridSample, {x, MakeFloat({1, 1, 1, 2}, {0.5f, 0})},
                 {{"align_corners", IntAttr(1)}, {"padding_mode", StringAttr("border")}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DataType::kF16);
  ExpectNear(ToFloats((*r)[0]), {1 + u});
}

TEST(GridSampleTest, EmptyImageReadsPadding) {
  // No pixel to clamp or reflect to: every mode reads the zero padding.
  auto y = RunV(OpType::kGridSample, {MakeFloat({1, 1, 0, 2}, {}), MakeFloat({1, 1, 1, 2}, {0, 0})},
                {{"padding_mode", StringAttr("border")}});
  ExpectNear(y, {0});
}

TEST(GridSampleTest, Errors) {
  auto grid = MakeFloat({1, 1, 1, 2}, {0, 0});
  // Opset 16 spells the modes bilinear / bicubic, opset 20 linear / cubic.
  ExpectInvalid(
      RunOp(OpType::kGridSample, {Image2x2(), grid}, {{"mode", StringAttr("linear")}}, 1, 16)
          .status());
  ExpectInvalid(
      RunOp(OpType::kGridSample, {Image2x2(), grid}, {{"mode", StringAttr("bicubic")}}, 1, 20)
          .status());
  ExpectInvalid(
      RunOp(OpType::kGridSample, {Image2x2(), grid}, {{"padding_mode", StringAttr("wrap")}})
          .status());
  ExpectInvalid(RunOp(OpType::kGridSample, {Image2x2(), MakeFloat({1, 1, 1, 3}, {0, 0, 0})})
                    .status());  // grid's last dim must be 2
  ExpectInvalid(RunOp(OpType::kGridSample,
                      {MakeFloat({1, 1, 2}, {1, 2}), MakeFloat({1, 1, 1}, {0})}, {}, 1, 16)
                    .status());  // 1-D needs opset 20
}

// ---------------------------------------------------------------- AffineGrid

TEST(AffineGridTest, Identity2dBothAlignments) {
  auto theta = MakeFloat({1, 2, 3}, {1, 0, 0, 0, 1, 0});
  auto size = MakeInt64({4}, {1, 1, 2, 2});
  std::vector<int64_t> dims;
  auto y = RunV(OpType::kAffineGrid, {theta, size}, {}, 20, &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{1, 2, 2, 2}));
  ExpectNear(y, {-0.5f, -0.5f, 0.5f, -0.5f, -0.5f, 0.5f, 0.5f, 0.5f}, kTol);
  y = RunV(OpType::kAffineGrid, {theta, size}, {{"align_corners", IntAttr(1)}}, 20);
  ExpectNear(y, {-1, -1, 1, -1, -1, 1, 1, 1}, kTol);
}

TEST(AffineGridTest, Translation2dAnd3d) {
  // x' = x + 0.5, y' = 2y on a 1x2 (H x W) grid with align_corners: x in {-1, 1}, y = -1.
  auto y = RunV(OpType::kAffineGrid,
                {MakeFloat({1, 2, 3}, {1, 0, 0.5f, 0, 2, 0}), MakeInt64({4}, {1, 3, 1, 2})},
                {{"align_corners", IntAttr(1)}}, 20);
  ExpectNear(y, {-0.5f, -2, 1.5f, -2}, kTol);
  std::vector<int64_t> dims;
  y = RunV(OpType::kAffineGrid,
           {MakeFloat({1, 3, 4}, {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0.25f}),
            MakeInt64({5}, {1, 1, 1, 1, 2})},
           {{"align_corners", IntAttr(1)}}, 20, &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{1, 1, 1, 2, 3}));
  ExpectNear(y, {-1, -1, -0.75f, 1, -1, -0.75f}, kTol);
}

TEST(AffineGridTest, Bf16ComputesInFp32) {
  // theta row (1, 1, 2^-8) at point (-0.5, -0.5): -1 + 2^-8 is exact in bf16 once rounded.
  const float e = std::ldexp(1.0f, -8);
  auto r = RunOp(OpType::kAffineGrid,
                 {MakeBf16({1, 2, 3}, {1, 1, e, 0, 0, 0}), MakeInt64({4}, {1, 1, 2, 2})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DataType::kBF16);
  EXPECT_EQ(ToFloats((*r)[0])[0], -1 + e);
}

TEST(AffineGridTest, Errors) {
  auto theta = MakeFloat({1, 2, 3}, {1, 0, 0, 0, 1, 0});
  ExpectInvalid(RunOp(OpType::kAffineGrid, {theta, MakeInt64({5}, {1, 1, 2, 2, 2})}).status());
  ExpectInvalid(RunOp(OpType::kAffineGrid, {theta, MakeInt64({4}, {2, 1, 2, 2})}).status());
  ExpectInvalid(RunOp(OpType::kAffineGrid, {theta, MakeInt64({3}, {1, 2, 2})}).status());
}

}  // namespace
}  // namespace kiln::testing::spatial
