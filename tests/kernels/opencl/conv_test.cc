// The OpenCL Conv and FusedConv against the reference kernels: 1-D and 2-D windows, groups
// (depthwise too), strides, padding, dilation, the fused activations and residual, at fp32, fp16
// and bf16 storage.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/kernels/opencl/kernel_base.h"
#include "gtest/gtest.h"
#include "tests/kernels/opencl/opencl_testing.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ir::OpType;

const DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};

// `terms` products (and the bias) summed in fp32 in two orders: each within terms * 2^-24 *
// sum|x w| of the exact sum, and |x|, |w| <= 1, so within 2 * terms^2 * 2^-24 of each other.
// The activations add their own error: 8 fp32 ulps of the result covers the sigmoid's
// (exp 3 ulps, a division, an addition) and HardSwish's few roundings. A 16-bit Y rounds the
// two fp32 values once more: one unit of its last place.
void Check(const NodeSpec& spec, int64_t terms) {
  ExpectWithinOfReference(spec, [terms](float w) {
    return 2.0 * terms * terms * std::ldexp(1.0, -24) + 8 * Fp32RangeUlp(w, DataType::kF32);
  });
}

struct Geometry {
  std::vector<int64_t> x, w;
  int64_t group;
  std::vector<std::pair<std::string, ir::Attribute>> attrs;
};

TEST(OpenClConvTest, WindowsGroupsAndPaddingAsTheReference) {
  const std::vector<Geometry> cases = {
      {{2, 6, 9, 11},
       {8, 3, 3, 3},
       2,
       {{"strides", IntsAttr({2, 1})}, {"pads", IntsAttr({1, 0, 1, 2})}}},
      {{1, 4, 10, 10}, {4, 1, 3, 3}, 4, {{"pads", IntsAttr({1, 1, 1, 1})}}},  // depthwise
      {{1, 16, 7, 7}, {24, 16, 1, 1}, 1, {}},                                 // 1x1
      {{1, 3, 12, 12},
       {5, 3, 3, 3},
       1,
       {{"dilations", IntsAttr({2, 2})}, {"auto_pad", StringAttr("SAME_UPPER")}}},
      {{2, 4, 17}, {6, 4, 5}, 1, {{"strides", IntsAttr({2})}, {"pads", IntsAttr({2, 2})}}},
      // Eight or more output channels per group: the tiled GEMM over the implicit im2col.
      {{2, 6, 9, 11},
       {16, 3, 3, 3},
       2,
       {{"strides", IntsAttr({2, 1})}, {"pads", IntsAttr({1, 0, 1, 2})}}},
      {{2, 4, 17}, {12, 4, 5}, 1, {{"strides", IntsAttr({2})}, {"pads", IntsAttr({2, 2})}}},
      {{1, 8, 20, 20},
       {70, 8, 3, 3},
       1,
       {{"pads", IntsAttr({1, 1, 1, 1})}, {"dilations", IntsAttr({1, 2})}}},
      {{1, 2, 1, 9}, {3, 2, 1, 3}, 1, {}},  // height 1
      {{0, 3, 5, 5}, {2, 3, 3, 3}, 1, {}},  // no image
  };
  uint32_t seed = 1;
  for (DataType dt : kTypes) {
    for (const Geometry& c : cases) {
      for (bool bias : {false, true}) {
        SCOPED_TRACE(absl::StrCat(DataTypeOnnxName(dt), " X ", ir::DimsToString(c.x), " W ",
                                  ir::DimsToString(c.w), bias ? " with B" : ""));
        std::vector<ir::Tensor> in = {RandomStored(dt, c.x, seed++), RandomStored(dt, c.w, seed++)};
        if (bias) in.push_back(RandomStored(dt, {c.w[0]}, seed++));
        auto attrs = c.attrs;
        attrs.push_back({"group", IntAttr(c.group)});
        int64_t terms = 1;
        for (size_t d = 1; d < c.w.size(); ++d) terms *= c.w[d];
        Check({OpType::kConv, attrs, in}, terms + 1);
      }
    }
  }
}

// The tiled GEMM's every tile size sums each output in the same order: the same bits.
TEST(OpenClConvTest, EveryTileSizeGivesTheSameBits) {
  NodeSpec s{
      OpType::kConv,
      {{"pads", IntsAttr({1, 1, 1, 1})}, {"strides", IntsAttr({1, 2})}},
      {RandomStored(DataType::kF32, {2, 9, 13, 21}, 7),
       RandomStored(DataType::kF32, {70, 9, 3, 3}, 8), RandomStored(DataType::kF32, {70}, 9)}};
  ExpectSameBitsForEveryTile(s);
  Check(
      {OpType::kConv, {{"pads", IntsAttr({1, 1, 1, 1})}, {"strides", IntsAttr({1, 2})}}, s.inputs},
      9 * 9 + 1);
}

TEST(OpenClConvTest, FusedActivationsAndResidual) {
  const std::vector<std::vector<std::pair<std::string, ir::Attribute>>> acts = {
      {{"activation", StringAttr("Relu")}},
      {{"activation", StringAttr("LeakyRelu")}, {"activation_alpha", FloatAttr(0.2f)}},
      {{"activation", StringAttr("Clip")},
       {"activation_min", FloatAttr(-0.5f)},
       {"activation_max", FloatAttr(0.75f)}},
      {{"activation", StringAttr("HardSwish")}},
      {{"activation", StringAttr("Sigmoid")}},
      {{"activation", StringAttr("Swish")}},
      {},
  };
  uint32_t seed = 500;
  for (DataType dt : kTypes) {
    for (const auto& act : acts) {
      for (bool residual : {false, true}) {
        SCOPED_TRACE(absl::StrCat(DataTypeOnnxName(dt), " ", act.empty() ? "none" : act[0].second.s,
                                  residual ? " + Z" : ""));
        // 7 output channels run directly, 9 as a tiled GEMM: both epilogues.
        const int64_t m = seed % 2 == 0 ? 7 : 9;
        std::vector<ir::Tensor> in = {RandomStored(dt, {2, 5, 8, 8}, seed++),
                                      RandomStored(dt, {m, 5, 3, 3}, seed++),
                                      RandomStored(dt, {m}, seed++)};
        if (residual) in.push_back(RandomStored(dt, {2, m, 8, 8}, seed++));
        auto attrs = act;
        attrs.push_back({"pads", IntsAttr({1, 1, 1, 1})});
        NodeSpec s{OpType::kFusedConv, attrs, in};
        s.output_dtypes = {dt};
        Check(s, 5 * 9 + 2);
      }
    }
  }
}

// A split k range (few tiles on a device of many compute units): the parts' sums added in
// order, then the bias, Z and the activation. Another fp32 order of the same terms: within
// Check's bound, and the same bits from run to run.
TEST(OpenClConvTest, SplitKSumsWithinTheBoundAndRepeats) {
  uint32_t seed = 800;
  for (DataType dt : kTypes) {
    for (int parts : {2, 3}) {
      for (int64_t group : {1, 2}) {
        SCOPED_TRACE(absl::StrCat(DataTypeOnnxName(dt), " k in ", parts, " parts, group ", group));
        kernels::opencl::ForceGemmTileForTesting(4, parts);
        const int64_t cg = 12 / group;
        NodeSpec s{
            OpType::kFusedConv,
            {{"activation", StringAttr("Relu")},
             {"pads", IntsAttr({1, 1, 1, 1})},
             {"group", IntAttr(group)}},
            {RandomStored(dt, {2, 12, 9, 9}, seed++), RandomStored(dt, {16, cg, 3, 3}, seed++),
             RandomStored(dt, {16}, seed++), RandomStored(dt, {2, 16, 9, 9}, seed++)}};
        s.output_dtypes = {dt};
        Check(s, cg * 9 + 2);
        s.opencl = true;
        const ir::Tensor a = RunNodeOk0(s), b = RunNodeOk0(s);
        ASSERT_TRUE(a.defined() && b.defined());
        EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()), 0);
        kernels::opencl::ForceGemmTileForTesting(0);
      }
    }
  }
}

TEST(OpenClConvTest, BadShapesNameTheNode) {
  NodeSpec channels{OpType::kConv,
                    {},
                    {MakeFloat({1, 3, 4, 4}, Iota(48, 0)), MakeFloat({2, 2, 3, 3}, Iota(36, 0))}};
  channels.opencl = true;
  absl::StatusOr<std::vector<ir::Tensor>> r = RunNode(channels);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("test_node"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace kiln::testing
