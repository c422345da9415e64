// Reference layout kernels: Reshape, Transpose, Concat, Split, Slice, Squeeze, Unsqueeze,
// Flatten, Expand, Tile, Pad, DepthToSpace, SpaceToDepth, Identity, Dropout. Expected values are
// worked out by hand (or are the ONNX spec's examples). Data-movement ops must reproduce bits
// exactly, so comparisons are exact.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ir::OpType;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------------
TEST(Reshape, ZeroCopiesAndMinusOneInfers) {
  auto out = RunNodeOk(
      {OpType::kReshape, {}, {MakeFloat({2, 3, 4}, Iota(24, 0)), MakeInt64({3}, {0, -1, 2})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].dims(), ElementsAre(2, 6, 2));
  EXPECT_EQ(ToFloats(out[0]), Iota(24, 0));
}

TEST(Reshape, AllowZeroKeepsZeroDims) {
  auto out = RunNodeOk({OpType::kReshape,
                        {{"allowzero", IntAttr(1)}},
                        {MakeFloat({0, 3}, {}), MakeInt64({3}, {3, 0, 1})},
                        1,
                        14});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].dims(), ElementsAre(3, 0, 1));
}

TEST(Reshape, Errors) {
  ExpectNodeError({OpType::kReshape, {}, {MakeFloat({2, 3}, Iota(6, 0)), MakeInt64({2}, {4, 2})}},
                  absl::StatusCode::kInvalidArgument, "elements");
  ExpectNodeError({OpType::kReshape, {}, {MakeFloat({2, 3}, Iota(6, 0)), MakeInt64({2}, {-1, -1})}},
                  absl::StatusCode::kInvalidArgument, "two -1");
  ExpectNodeError({OpType::kReshape, {}, {MakeFloat({2, 3}, Iota(6, 0)), MakeInt64({2}, {4, -1})}},
                  absl::StatusCode::kInvalidArgument, "infer");
  ExpectNodeError({OpType::kReshape, {}, {MakeFloat({6}, Iota(6, 0)), MakeInt64({2}, {6, 0})}},
                  absl::StatusCode::kInvalidArgument, "copies dim 1");
  ExpectNodeError({OpType::kReshape,
                   {{"allowzero", IntAttr(1)}},
                   {MakeFloat({0, 3}, {}), MakeInt64({2}, {0, -1})},
                   1,
                   14},
                  absl::StatusCode::kInvalidArgument, "allowzero");
}

// ---------------------------------------------------------------------------------------------
TEST(Transpose, DefaultReversesAxes) {
  auto out = RunNodeOk({OpType::kTranspose, {}, {MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].dims(), ElementsAre(3, 2));
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(1, 4, 2, 5, 3, 6));
}

TEST(Transpose, Perm3dInt64) {
  // x[i][j][k] = 100i + 10j + k, dims 2x2x3; perm (1, 2, 0) -> y[j][k][i].
  std::vector<int64_t> v;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 3; ++k) v.push_back(100 * i + 10 * j + k);
  auto out =
      RunNodeOk({OpType::kTranspose, {{"perm", IntsAttr({1, 2, 0})}}, {MakeInt64({2, 2, 3}, v)}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].dims(), ElementsAre(2, 3, 2));
  const int64_t* y = out[0].data<int64_t>();
  EXPECT_THAT(std::vector<int64_t>(y, y + 12),
              ElementsAre(0, 100, 1, 101, 2, 102, 10, 110, 11, 111, 12, 112));
}

TEST(Transpose, Fp16BitsUnchanged) {
  // A signalling-looking NaN payload and a subnormal must survive untouched.
  std::vector<uint16_t> bits = {0x7d01, 0x0001, 0x3c00, 0xfc00};
  auto out =
      RunNodeOk({OpType::kTranspose, {}, {MakeTensor<uint16_t>({2, 2}, bits, DataType::kF16)}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].dtype(), DataType::kF16);
  EXPECT_THAT(Bits16(out[0]), ElementsAre(0x7d01, 0x3c00, 0x0001, 0xfc00));
}

// Every permutation of 4 axes, on shapes with size-1 axes, odd sizes and tiles larger than 32
// (the batched-transpose path: NCHW to NHWC and back, [S, H*D] to [H*D, S]; the general gather
// for the rest), against the index formula; and one large enough to run on the threads.
TEST(Transpose, EveryPermutationMatchesTheIndexFormula) {
  const std::vector<std::vector<int64_t>> shapes = {
      {2, 3, 5, 7}, {1, 3, 37, 40}, {1, 40, 1, 33}, {3, 1, 1, 2}, {1, 128, 12, 64}};
  for (const auto& dims : shapes) {
    std::vector<int64_t> perm = {0, 1, 2, 3};
    do {
      const int64_t n = dims[0] * dims[1] * dims[2] * dims[3];
      std::vector<int64_t> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = i * 7919 + 13;
      auto out = RunNodeOk({OpType::kTranspose, {{"perm", IntsAttr(perm)}}, {MakeInt64(dims, v)}});
      ASSERT_EQ(out.size(), 1u);
      std::vector<int64_t> od(4);
      for (int a = 0; a < 4; ++a) od[a] = dims[perm[a]];
      ASSERT_THAT(out[0].dims(), ElementsAreArray(od));
      const int64_t* y = out[0].data<int64_t>();
      int64_t at = 0;
      std::vector<int64_t> idx(4, 0), in_idx(4, 0);
      for (idx[0] = 0; idx[0] < od[0]; ++idx[0]) {
        for (idx[1] = 0; idx[1] < od[1]; ++idx[1]) {
          for (idx[2] = 0; idx[2] < od[2]; ++idx[2]) {
            for (idx[3] = 0; idx[3] < od[3]; ++idx[3], ++at) {
              for (int a = 0; a < 4; ++a) in_idx[perm[a]] = idx[a];
              const int64_t src =
                  ((in_idx[0] * dims[1] + in_idx[1]) * dims[2] + in_idx[2]) * dims[3] + in_idx[3];
              ASSERT_EQ(y[at], v[src]) << ir::DimsToString(dims) << " perm "
                                       << ir::DimsToString(perm) << " element " << at;
            }
          }
        }
      }
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
}

TEST(Transpose, BadPerm) {
  ExpectNodeError(
      {OpType::kTranspose, {{"perm", IntsAttr({0, 0})}}, {MakeFloat({2, 2}, Iota(4, 0))}},
      absl::StatusCode::kInvalidArgument, "permutation");
  ExpectNodeError({OpType::kTranspose, {{"perm", IntsAttr({0})}}, {MakeFloat({2, 2}, Iota(4, 0))}},
                  absl::StatusCode::kInvalidArgument, "perm");
}

// ---------------------------------------------------------------------------------------------
TEST(Concat, Axis1AndNegativeAxis) {
  for (int64_t axis : {1, -1}) {
    auto out = RunNodeOk(
        {OpType::kConcat,
         {{"axis", IntAttr(axis)}},
         {MakeFloat({2, 1}, {1, 2}), MakeFloat({2, 2}, {3, 4, 5, 6}), MakeFloat({2, 0}, {})}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_THAT(out[0].dims(), ElementsAre(2, 3));
    EXPECT_THAT(ToFloats(out[0]), ElementsAre(1, 3, 4, 2, 5, 6));
  }
}

TEST(Concat, Mismatch) {
  ExpectNodeError({OpType::kConcat,
                   {{"axis", IntAttr(0)}},
                   {MakeFloat({2, 1}, {1, 2}), MakeFloat({1, 2}, {3, 4})}},
                  absl::StatusCode::kInvalidArgument, "does not match");
  ExpectNodeError({OpType::kConcat, {{"axis", IntAttr(2)}}, {MakeFloat({2, 1}, {1, 2})}},
                  absl::StatusCode::kInvalidArgument, "out of range");
}

// ---------------------------------------------------------------------------------------------
TEST(Split, AttributeBeforeOpset13) {
  NodeSpec s{OpType::kSplit,
             {{"axis", IntAttr(1)}, {"split", IntsAttr({1, 2})}},
             {MakeFloat({2, 3}, Iota(6, 0))},
             2,
             11};
  auto out = RunNodeOk(s);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_THAT(out[0].dims(), ElementsAre(2, 1));
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(0, 3));
  EXPECT_THAT(out[1].dims(), ElementsAre(2, 2));
  EXPECT_THAT(ToFloats(out[1]), ElementsAre(1, 2, 4, 5));
}

TEST(Split, InputFromOpset13AndEqualDefault) {
  auto out = RunNodeOk(
      {OpType::kSplit, {}, {MakeFloat({6}, Iota(6, 0)), MakeInt64({3}, {2, 0, 4})}, 3, 13});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(0, 1));
  EXPECT_THAT(out[1].dims(), ElementsAre(0));
  EXPECT_THAT(ToFloats(out[2]), ElementsAre(2, 3, 4, 5));
  auto eq = RunNodeOk({OpType::kSplit, {}, {MakeFloat({6}, Iota(6, 0))}, 3, 13});
  ASSERT_EQ(eq.size(), 3u);
  EXPECT_THAT(ToFloats(eq[2]), ElementsAre(4, 5));
}

TEST(Split, NumOutputsUnevenLastChunk) {
  auto out = RunNodeOk(
      {OpType::kSplit, {{"num_outputs", IntAttr(3)}}, {MakeFloat({7}, Iota(7, 0))}, 3, 18});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(0, 1, 2));
  EXPECT_THAT(ToFloats(out[1]), ElementsAre(3, 4, 5));
  EXPECT_THAT(ToFloats(out[2]), ElementsAre(6));
}

TEST(Split, Errors) {
  ExpectNodeError({OpType::kSplit, {}, {MakeFloat({6}, Iota(6, 0)), MakeInt64({2}, {2, 3})}, 2, 13},
                  absl::StatusCode::kInvalidArgument, "sums to 5");
  ExpectNodeError({OpType::kSplit, {}, {MakeFloat({7}, Iota(7, 0))}, 2, 13},
                  absl::StatusCode::kInvalidArgument, "evenly");
  ExpectNodeError(
      {OpType::kSplit, {{"num_outputs", IntAttr(2)}}, {MakeFloat({7}, Iota(7, 0))}, 3, 18},
      absl::StatusCode::kInvalidArgument, "num_outputs");
  ExpectNodeError({OpType::kSplit,
                   {{"num_outputs", IntAttr(2)}},
                   {MakeFloat({7}, Iota(7, 0)), MakeInt64({2}, {3, 4})},
                   2,
                   18},
                  absl::StatusCode::kInvalidArgument, "both");
}

// ---------------------------------------------------------------------------------------------
TEST(Slice, Opset1Attributes) {
  // x = 0..11 as 3x4; rows 1..3, cols 1..3.
  auto out = RunNodeOk({OpType::kSlice,
                        {{"starts", IntsAttr({1, 1})}, {"ends", IntsAttr({3, 3})}},
                        {MakeFloat({3, 4}, Iota(12, 0))},
                        1,
                        1});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].dims(), ElementsAre(2, 2));
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(5, 6, 9, 10));
}

TEST(Slice, NegativeStepsAndClamping) {
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  // Axis 1 reversed completely (start past the end clamps to dim-1, end INT64_MIN to -1);
  // axis 0 from -2 to INT64_MAX with step 1.
  auto out =
      RunNodeOk({OpType::kSlice,
                 {},
                 {MakeFloat({3, 4}, Iota(12, 0)), MakeInt64({2}, {100, -2}),
                  MakeInt64({2}, {kMin, kMax}), MakeInt64({2}, {-1, 0}), MakeInt64({2}, {-1, 1})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].dims(), ElementsAre(2, 4));
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(7, 6, 5, 4, 11, 10, 9, 8));
  // Step -2 from 3 down to (not including) 0: 3, 1. Huge steps select one element.
  auto s2 = RunNodeOk({OpType::kSlice,
                       {},
                       {MakeFloat({4}, {10, 11, 12, 13}),
                        MakeInt64({1}, {3}),
                        MakeInt64({1}, {0}),
                        {},
                        MakeInt64({1}, {-2})}});
  EXPECT_THAT(ToFloats(s2[0]), ElementsAre(13, 11));
  auto s3 = RunNodeOk({OpType::kSlice,
                       {},
                       {MakeFloat({4}, {10, 11, 12, 13}),
                        MakeInt64({1}, {1}),
                        MakeInt64({1}, {kMax}),
                        {},
                        MakeInt64({1}, {kMax})}});
  EXPECT_THAT(ToFloats(s3[0]), ElementsAre(11));
  // Negative step with an adjusted start before the axis: the spec (and ONNX Runtime) clamp the
  // start to 0 and the end to -1, which keeps element 0 (numpy would give an empty slice).
  auto s5 = RunNodeOk({OpType::kSlice,
                       {},
                       {MakeFloat({4}, {10, 11, 12, 13}),
                        MakeInt64({1}, {-6}),
                        MakeInt64({1}, {-6}),
                        {},
                        MakeInt64({1}, {-2})}});
  EXPECT_THAT(ToFloats(s5[0]), ElementsAre(10));
  // Empty when start >= end for a positive step.
  auto s4 =
      RunNodeOk({OpType::kSlice,
                 {},
                 {MakeFloat({4}, {10, 11, 12, 13}), MakeInt64({1}, {3}), MakeInt64({1}, {1})}});
  EXPECT_THAT(s4[0].dims(), ElementsAre(0));
}

TEST(Slice, Errors) {
  ir::Tensor x = MakeFloat({4}, Iota(4, 0));
  ExpectNodeError(
      {OpType::kSlice, {}, {x, MakeInt64({1}, {0}), MakeInt64({1}, {2}), {}, MakeInt64({1}, {0})}},
      absl::StatusCode::kInvalidArgument, "step");
  ExpectNodeError(
      {OpType::kSlice, {}, {x, MakeInt64({1}, {0}), MakeInt64({1}, {2}), MakeInt64({1}, {1})}},
      absl::StatusCode::kInvalidArgument, "out of range");
  ExpectNodeError({OpType::kSlice,
                   {},
                   {MakeFloat({2, 2}, Iota(4, 0)), MakeInt64({2}, {0, 0}), MakeInt64({2}, {1, 1}),
                    MakeInt64({2}, {0, -2})}},
                  absl::StatusCode::kInvalidArgument, "repeated");
  ExpectNodeError({OpType::kSlice, {}, {x, MakeInt64({2}, {0, 0}), MakeInt64({1}, {2})}},
                  absl::StatusCode::kInvalidArgument, "ends");
}

// ---------------------------------------------------------------------------------------------
TEST(Squeeze, AttributeInputAndDefault) {
  ir::Tensor x = MakeFloat({1, 3, 1, 2}, Iota(6, 0));
  auto a = RunNodeOk({OpType::kSqueeze, {{"axes", IntsAttr({-2})}}, {x}, 1, 11});
  EXPECT_THAT(a[0].dims(), ElementsAre(1, 3, 2));
  auto b = RunNodeOk({OpType::kSqueeze, {}, {x, MakeInt64({2}, {0, 2})}, 1, 13});
  EXPECT_THAT(b[0].dims(), ElementsAre(3, 2));
  EXPECT_EQ(ToFloats(b[0]), Iota(6, 0));
  auto c = RunNodeOk({OpType::kSqueeze, {}, {x}, 1, 13});
  EXPECT_THAT(c[0].dims(), ElementsAre(3, 2));
  auto e = RunNodeOk({OpType::kSqueeze, {}, {x, MakeInt64({0}, {})}, 1, 13});  // empty = not given
  EXPECT_THAT(e[0].dims(), ElementsAre(3, 2));
  ExpectNodeError({OpType::kSqueeze, {}, {x, MakeInt64({1}, {1})}, 1, 13},
                  absl::StatusCode::kInvalidArgument, "size 3");
  ExpectNodeError({OpType::kSqueeze, {}, {x, MakeInt64({1}, {4})}, 1, 13},
                  absl::StatusCode::kInvalidArgument, "out of range");
}

TEST(Unsqueeze, AttributeAndUnsortedNegativeInput) {
  ir::Tensor x = MakeFloat({3, 2}, Iota(6, 0));
  auto a = RunNodeOk({OpType::kUnsqueeze, {{"axes", IntsAttr({0})}}, {x}, 1, 11});
  EXPECT_THAT(a[0].dims(), ElementsAre(1, 3, 2));
  auto b = RunNodeOk({OpType::kUnsqueeze, {}, {x, MakeInt64({3}, {4, -5, 2})}, 1, 13});
  EXPECT_THAT(b[0].dims(), ElementsAre(1, 3, 1, 2, 1));
  EXPECT_EQ(ToFloats(b[0]), Iota(6, 0));
  ExpectNodeError({OpType::kUnsqueeze, {}, {x, MakeInt64({2}, {1, -3})}, 1, 13},
                  absl::StatusCode::kInvalidArgument, "repeated");
  ExpectNodeError({OpType::kUnsqueeze, {}, {x, MakeInt64({1}, {3})}, 1, 13},
                  absl::StatusCode::kInvalidArgument, "out of range");
}

TEST(Flatten, Axes) {
  ir::Tensor x = MakeFloat({2, 3, 4}, Iota(24, 0));
  auto a = RunNodeOk({OpType::kFlatten, {{"axis", IntAttr(0)}}, {x}});
  EXPECT_THAT(a[0].dims(), ElementsAre(1, 24));
  auto b = RunNodeOk({OpType::kFlatten, {{"axis", IntAttr(-1)}}, {x}});
  EXPECT_THAT(b[0].dims(), ElementsAre(6, 4));
  auto c = RunNodeOk({OpType::kFlatten, {}, {x}});
  EXPECT_THAT(c[0].dims(), ElementsAre(2, 12));
  auto d = RunNodeOk({OpType::kFlatten, {{"axis", IntAttr(3)}}, {x}});
  EXPECT_THAT(d[0].dims(), ElementsAre(24, 1));
  EXPECT_EQ(ToFloats(d[0]), Iota(24, 0));
  ExpectNodeError({OpType::kFlatten, {{"axis", IntAttr(4)}}, {x}},
                  absl::StatusCode::kInvalidArgument, "out of range");
}

// ---------------------------------------------------------------------------------------------
TEST(Expand, BroadcastsBothWays) {
  auto out =
      RunNodeOk({OpType::kExpand, {}, {MakeFloat({3, 1}, {1, 2, 3}), MakeInt64({3}, {2, 1, 2})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].dims(), ElementsAre(2, 3, 2));
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3));
  ExpectNodeError({OpType::kExpand, {}, {MakeFloat({3}, {1, 2, 3}), MakeInt64({1}, {2})}},
                  absl::StatusCode::kInvalidArgument, "broadcast");
}

TEST(Tile, RepeatsEachAxis) {
  std::vector<uint8_t> v = {1, 2, 3, 4};
  auto out = RunNodeOk(
      {OpType::kTile, {}, {MakeTensor<uint8_t>({2, 2}, v, DataType::kU8), MakeInt64({2}, {2, 2})}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].dims(), ElementsAre(4, 4));
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(1, 2, 1, 2, 3, 4, 3, 4, 1, 2, 1, 2, 3, 4, 3, 4));
  ExpectNodeError({OpType::kTile, {}, {MakeFloat({2}, {1, 2}), MakeInt64({2}, {1, 1})}},
                  absl::StatusCode::kInvalidArgument, "repeats");
  ExpectNodeError({OpType::kTile, {}, {MakeFloat({2}, {1, 2}), MakeInt64({1}, {-1})}},
                  absl::StatusCode::kInvalidArgument, ">= 0");
}

// ---------------------------------------------------------------------------------------------
TEST(Pad, ConstantOpset2AttributeRoundsValueToFp16) {
  // value 0.1 is stored as the nearest fp16 (0x2e66).
  auto out = RunNodeOk({OpType::kPad,
                        {{"pads", IntsAttr({1, 0, 0, 1})}, {"value", FloatAttr(0.1f)}},
                        {MakeTensor<uint16_t>({1, 2}, {0x3c00, 0x4000}, DataType::kF16)},
                        1,
                        2});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].dims(), ElementsAre(2, 3));
  EXPECT_THAT(Bits16(out[0]), ElementsAre(0x2e66, 0x2e66, 0x2e66, 0x3c00, 0x4000, 0x2e66));
}

TEST(Pad, ModesOnOneAxis) {
  // 1-D [1, 2, 3] padded by 4 before and 5 after; spec / numpy semantics.
  ir::Tensor x = MakeFloat({3}, {1, 2, 3});
  ir::Tensor pads = MakeInt64({2}, {4, 5});
  auto c = RunNodeOk({OpType::kPad, {}, {x, pads, MakeFloat({}, {9})}, 1, 11});
  EXPECT_THAT(ToFloats(c[0]), ElementsAre(9, 9, 9, 9, 1, 2, 3, 9, 9, 9, 9, 9));
  auto r = RunNodeOk({OpType::kPad, {{"mode", StringAttr("reflect")}}, {x, pads}, 1, 11});
  EXPECT_THAT(ToFloats(r[0]), ElementsAre(1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2));
  auto e = RunNodeOk({OpType::kPad, {{"mode", StringAttr("edge")}}, {x, pads}, 1, 11});
  EXPECT_THAT(ToFloats(e[0]), ElementsAre(1, 1, 1, 1, 1, 2, 3, 3, 3, 3, 3, 3));
  auto w = RunNodeOk({OpType::kPad, {{"mode", StringAttr("wrap")}}, {x, pads}, 1, 19});
  EXPECT_THAT(ToFloats(w[0]), ElementsAre(3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2));
}

TEST(Pad, AxesInputAndNegativePads) {
  // 2x3 = [[1,2,3],[4,5,6]]; pad axis -1 by (-1, 2) in edge mode: crop col 0, then edge-pad 2.
  auto out = RunNodeOk(
      {OpType::kPad,
       {{"mode", StringAttr("edge")}},
       {MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6}), MakeInt64({2}, {-1, 2}), {}, MakeInt64({1}, {-1})},
       1,
       18});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_THAT(out[0].dims(), ElementsAre(2, 4));
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(2, 3, 3, 3, 5, 6, 6, 6));
}

TEST(Pad, Errors) {
  ExpectNodeError({OpType::kPad, {}, {MakeFloat({3}, {1, 2, 3}), MakeInt64({1}, {1})}, 1, 11},
                  absl::StatusCode::kInvalidArgument, "pads");
  ExpectNodeError({OpType::kPad, {}, {MakeFloat({3}, {1, 2, 3}), MakeInt64({2}, {-2, -2})}, 1, 11},
                  absl::StatusCode::kInvalidArgument, "negative size");
  ExpectNodeError({OpType::kPad,
                   {{"mode", StringAttr("reflect")}},
                   {MakeFloat({0}, {}), MakeInt64({2}, {1, 1})},
                   1,
                   11},
                  absl::StatusCode::kInvalidArgument, "empty axis");
  ExpectNodeError({OpType::kPad,
                   {{"mode", StringAttr("mirror")}},
                   {MakeFloat({1}, {1}), MakeInt64({2}, {1, 1})},
                   1,
                   11},
                  absl::StatusCode::kInvalidArgument, "mode");
  ExpectNodeError(
      {OpType::kPad, {}, {MakeFloat({1}, {1}), MakeInt64({2}, {1, 1}), MakeInt64({}, {0})}, 1, 11},
      absl::StatusCode::kInvalidArgument, "constant_value");
}

// ---------------------------------------------------------------------------------------------
// The ONNX spec example: x = 0..47 as [1, 8, 2, 3], blocksize 2.
TEST(DepthToSpace, DcrAndCrd) {
  ir::Tensor x = MakeFloat({1, 8, 2, 3}, Iota(48, 0));
  auto dcr = RunNodeOk({OpType::kDepthToSpace, {{"blocksize", IntAttr(2)}}, {x}});
  ASSERT_EQ(dcr.size(), 1u);
  EXPECT_THAT(dcr[0].dims(), ElementsAre(1, 2, 4, 6));
  EXPECT_THAT(ToFloats(dcr[0]),
              ElementsAreArray({0,  12, 1,  13, 2,  14, 24, 36, 25, 37, 26, 38, 3,  15, 4,  16,
                                5,  17, 27, 39, 28, 40, 29, 41, 6,  18, 7,  19, 8,  20, 30, 42,
                                31, 43, 32, 44, 9,  21, 10, 22, 11, 23, 33, 45, 34, 46, 35, 47}));
  auto crd = RunNodeOk(
      {OpType::kDepthToSpace, {{"blocksize", IntAttr(2)}, {"mode", StringAttr("CRD")}}, {x}});
  EXPECT_THAT(ToFloats(crd[0]),
              ElementsAreArray({0,  6,  1,  7,  2,  8,  12, 18, 13, 19, 14, 20, 3,  9,  4,  10,
                                5,  11, 15, 21, 16, 22, 17, 23, 24, 30, 25, 31, 26, 32, 36, 42,
                                37, 43, 38, 44, 27, 33, 28, 34, 29, 35, 39, 45, 40, 46, 41, 47}));
  ExpectNodeError({OpType::kDepthToSpace, {{"blocksize", IntAttr(3)}}, {x}},
                  absl::StatusCode::kInvalidArgument, "divisible");
}

TEST(SpaceToDepth, InvertsDepthToSpaceDcr) {
  ir::Tensor x = MakeFloat({1, 8, 2, 3}, Iota(48, 0));
  auto d2s = RunNodeOk({OpType::kDepthToSpace, {{"blocksize", IntAttr(2)}}, {x}});
  ASSERT_EQ(d2s.size(), 1u);
  auto s2d = RunNodeOk({OpType::kSpaceToDepth, {{"blocksize", IntAttr(2)}}, {d2s[0]}});
  ASSERT_EQ(s2d.size(), 1u);
  EXPECT_THAT(s2d[0].dims(), ElementsAre(1, 8, 2, 3));
  EXPECT_EQ(ToFloats(s2d[0]), Iota(48, 0));
  // Direct check: [1,1,2,2] -> [1,4,1,1] lists the block in row-major order.
  auto small = RunNodeOk({OpType::kSpaceToDepth,
                          {{"blocksize", IntAttr(2)}},
                          {MakeFloat({1, 1, 2, 2}, {1, 2, 3, 4})}});
  EXPECT_THAT(small[0].dims(), ElementsAre(1, 4, 1, 1));
  EXPECT_THAT(ToFloats(small[0]), ElementsAre(1, 2, 3, 4));
  ExpectNodeError(
      {OpType::kSpaceToDepth, {{"blocksize", IntAttr(2)}}, {MakeFloat({1, 1, 3, 2}, Iota(6, 0))}},
      absl::StatusCode::kInvalidArgument, "divisible");
  auto bad = RunNode({OpType::kSpaceToDepth, {{"blocksize", IntAttr(0)}}, {x}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
TEST(Identity, BoolAndBf16) {
  auto b =
      RunNodeOk({OpType::kIdentity, {}, {MakeTensor<uint8_t>({3}, {1, 0, 1}, DataType::kBool)}});
  EXPECT_EQ(b[0].dtype(), DataType::kBool);
  EXPECT_THAT(ToFloats(b[0]), ElementsAre(1, 0, 1));
  auto h = RunNodeOk(
      {OpType::kIdentity, {}, {MakeTensor<uint16_t>({2}, {0x3f80, 0x7fc1}, DataType::kBF16)}});
  EXPECT_THAT(Bits16(h[0]), ElementsAre(0x3f80, 0x7fc1));
}

TEST(Dropout, InferenceIsIdentityWithTrueMask) {
  ir::Tensor x = MakeFloat({2, 2}, {1, -2, 3, -4});
  auto out = RunNodeOk({OpType::kDropout, {}, {x, MakeFloat({}, {0.5f})}, 2, 13});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(1, -2, 3, -4));
  EXPECT_EQ(out[1].dtype(), DataType::kBool);
  EXPECT_THAT(ToFloats(out[1]), ElementsAre(1, 1, 1, 1));
  // Opset 7: the mask has the data's type.
  auto old = RunNodeOk({OpType::kDropout, {{"ratio", FloatAttr(0.3f)}}, {x}, 2, 7});
  EXPECT_EQ(old[1].dtype(), DataType::kF32);
  EXPECT_THAT(ToFloats(old[1]), ElementsAre(1, 1, 1, 1));
}

TEST(Dropout, TrainingMode) {
  ir::Tensor x = MakeFloat({2}, {1, 2});
  ir::Tensor yes = MakeTensor<uint8_t>({}, {1}, DataType::kBool);
  auto zero = RunNodeOk({OpType::kDropout, {}, {x, MakeFloat({}, {0.0f}), yes}, 2, 13});
  ASSERT_EQ(zero.size(), 2u);
  EXPECT_THAT(ToFloats(zero[0]), ElementsAre(1, 2));
  EXPECT_THAT(ToFloats(zero[1]), ElementsAre(1, 1));
  auto r = RunNode({OpType::kDropout, {}, {x, MakeFloat({}, {0.5f}), yes}, 1, 13});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("training_mode"));
  auto d = RunNode({OpType::kDropout, {}, {x, {}, yes}, 1, 13});  // default ratio 0.5
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kiln::testing
