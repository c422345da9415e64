// The OpenCL Conv and FusedConv against the reference kernels: 1-D and 2-D windows, groups
// (depthwise too), strides, padding, dilation, the fused activations and residual, at fp32, fp16
// and bf16 storage.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ir::OpType;

const DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};

ir::Tensor Make(DataType dt, std::vector<int64_t> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(ir::NumElementsOf(dims));
  for (float& x : v) x = u(rng);
  if (dt == DataType::kF16) return MakeHalf(std::move(dims), v);
  if (dt == DataType::kBF16) return MakeBf16(std::move(dims), v);
  return MakeFloat(std::move(dims), v);
}

double Ulp(float m, DataType dt) {
  const int mant = dt == DataType::kF32 ? 23 : dt == DataType::kF16 ? 10 : 7;
  int e = 0;
  std::frexp(std::fabs(m), &e);
  return std::ldexp(1.0, std::max(e, -125) - 1 - mant);
}

// `terms` products (and the bias) summed in fp32 in two orders: each within terms * 2^-24 *
// sum|x w| of the exact sum, and |x|, |w| <= 1, so within 2 * terms^2 * 2^-24 of each other.
// The activations add their own error: 8 fp32 ulps of the result covers the sigmoid's
// (exp 3 ulps, a division, an addition) and HardSwish's few roundings. A 16-bit Y rounds the
// two fp32 values once more: one unit of its last place.
void Check(const NodeSpec& spec, int64_t terms) {
  NodeSpec ref = spec;
  ref.cpu_features = 0;
  NodeSpec cl = spec;
  cl.opencl = true;
  cl.runs = 2;
  const ir::Tensor want = RunNodeOk0(ref);
  const ir::Tensor got = RunNodeOk0(cl);
  ASSERT_TRUE(want.defined() && got.defined());
  ASSERT_EQ(got.dims(), want.dims());
  ASSERT_EQ(got.dtype(), want.dtype());
  const std::vector<float> w = ToFloats(want), g = ToFloats(got);
  int bad = 0;
  for (size_t i = 0; i < w.size() && bad < 5; ++i) {
    const double bound = 2.0 * terms * terms * std::ldexp(1.0, -24) +
                         8 * Ulp(w[i], DataType::kF32) +
                         (got.dtype() == DataType::kF32 ? 0 : Ulp(w[i], got.dtype()));
    if (std::fabs(static_cast<double>(w[i]) - g[i]) > bound) {
      ++bad;
      ADD_FAILURE() << "element " << i << ": want " << w[i] << ", got " << g[i];
    }
  }
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
      {{1, 2, 1, 9}, {3, 2, 1, 3}, 1, {}},  // height 1
      {{0, 3, 5, 5}, {2, 3, 3, 3}, 1, {}},  // no image
  };
  uint32_t seed = 1;
  for (DataType dt : kTypes) {
    for (const Geometry& c : cases) {
      for (bool bias : {false, true}) {
        SCOPED_TRACE(absl::StrCat(DataTypeOnnxName(dt), " X ", ir::DimsToString(c.x), " W ",
                                  ir::DimsToString(c.w), bias ? " with B" : ""));
        std::vector<ir::Tensor> in = {Make(dt, c.x, seed++), Make(dt, c.w, seed++)};
        if (bias) in.push_back(Make(dt, {c.w[0]}, seed++));
        auto attrs = c.attrs;
        attrs.push_back({"group", IntAttr(c.group)});
        int64_t terms = 1;
        for (size_t d = 1; d < c.w.size(); ++d) terms *= c.w[d];
        Check({OpType::kConv, attrs, in}, terms + 1);
      }
    }
  }
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
        std::vector<ir::Tensor> in = {Make(dt, {2, 5, 8, 8}, seed++),
                                      Make(dt, {7, 5, 3, 3}, seed++), Make(dt, {7}, seed++)};
        if (residual) in.push_back(Make(dt, {2, 7, 8, 8}, seed++));
        auto attrs = act;
        attrs.push_back({"pads", IntsAttr({1, 1, 1, 1})});
        NodeSpec s{OpType::kFusedConv, attrs, in};
        s.output_dtypes = {dt};
        Check(s, 5 * 9 + 2);
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
