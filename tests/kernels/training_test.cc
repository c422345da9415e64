// Tests of the ai.onnx.preview.training optimizer kernels (Adagrad, Adam, Momentum). Expected
// values are the update rules of the ONNX spec worked in double; FloatNear(1e-6) allows the one
// rounding of each output to float.
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace kiln::testing {
namespace {

using ir::OpType;
using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::Pointwise;

ir::Tensor R(float r) { return MakeFloat({}, {r}); }
ir::Tensor T(int64_t t) { return MakeInt64({}, {t}); }

TEST(AdagradTest, OneTensor) {
  const double r = 0.1, t = 2, decay = 0.5, eps = 1e-2, norm = 0.01;
  const std::vector<double> x = {1.0, -2.0}, g = {0.5, 0.25}, h = {0.0, 1.0};
  auto outs = RunNodeOk({OpType::kAdagrad,
                         {{"decay_factor", FloatAttr(0.5f)},
                          {"epsilon", FloatAttr(1e-2f)},
                          {"norm_coefficient", FloatAttr(0.01f)}},
                         {R(0.1f), T(2), MakeFloat({2}, {1, -2}), MakeFloat({2}, {0.5f, 0.25f}),
                          MakeFloat({2}, {0, 1})},
                         2,
                         1});
  std::vector<float> want_x, want_h;
  for (int i = 0; i < 2; ++i) {
    const double gr = norm * x[i] + g[i];
    const double hn = h[i] + gr * gr;
    want_x.push_back(static_cast<float>(x[i] - r / (1 + t * decay) * gr / (std::sqrt(hn) + eps)));
    want_h.push_back(static_cast<float>(hn));
  }
  EXPECT_THAT(ToFloats(outs[0]), Pointwise(FloatNear(1e-6), want_x));
  EXPECT_THAT(ToFloats(outs[1]), Pointwise(FloatNear(1e-6), want_h));
}

TEST(AdamTest, TwoTensorsAndBiasCorrection) {
  // Two tensors of one element: outputs X1, X2, V1, V2, H1, H2.
  const double r = 0.1, alpha = 0.9, beta = 0.999, eps = 1e-6;
  auto outs = RunNodeOk({OpType::kAdam,
                         {},
                         {R(0.1f), T(1), MakeFloat({1}, {1}), MakeFloat({1}, {2}),
                          MakeFloat({1}, {0.5f}), MakeFloat({1}, {-1}), MakeFloat({1}, {0}),
                          MakeFloat({1}, {0.1f}), MakeFloat({1}, {0}), MakeFloat({1}, {0.2f})},
                         6,
                         1});
  const double xs[2] = {1, 2}, gs[2] = {0.5, -1}, vs[2] = {0, 0.1f}, hs[2] = {0, 0.2f};
  for (int j = 0; j < 2; ++j) {
    const double v = alpha * vs[j] + (1 - alpha) * gs[j];
    const double h = beta * hs[j] + (1 - beta) * gs[j] * gs[j];
    const double rate = r * std::sqrt(1 - beta) / (1 - alpha);  // T = 1
    const double x = xs[j] - rate * v / (std::sqrt(h) + eps);
    // alpha, beta and eps are float attributes defaults: 1e-5 covers their float rounding.
    EXPECT_THAT(ToFloats(outs[j]), Pointwise(FloatNear(1e-5), std::vector<float>{float(x)})) << j;
    EXPECT_THAT(ToFloats(outs[2 + j]), Pointwise(FloatNear(1e-6), std::vector<float>{float(v)}));
    EXPECT_THAT(ToFloats(outs[4 + j]), Pointwise(FloatNear(1e-6), std::vector<float>{float(h)}));
  }
}

TEST(MomentumTest, StandardAndNesterovAndFirstStep) {
  auto run = [](const char* mode, int64_t t) {
    return RunNodeOk(
        {OpType::kMomentum,
         {{"alpha", FloatAttr(0.5f)},
          {"beta", FloatAttr(0.25f)},
          {"norm_coefficient", FloatAttr(0.0f)},
          {"mode", StringAttr(mode)}},
         {R(0.5f), T(t), MakeFloat({1}, {1}), MakeFloat({1}, {2}), MakeFloat({1}, {4})},
         2,
         1});
  };
  // Standard, T > 0: v = 0.5 * 4 + 0.25 * 2 = 2.5; x = 1 - 0.5 * 2.5 = -0.25 (exact in float).
  auto s = run("standard", 3);
  EXPECT_THAT(ToFloats(s[0]), ElementsAre(-0.25f));
  EXPECT_THAT(ToFloats(s[1]), ElementsAre(2.5f));
  // T = 0 takes all of G: v = 2 + 2 = 4; x = 1 - 2 = -1.
  auto first = run("standard", 0);
  EXPECT_THAT(ToFloats(first[1]), ElementsAre(4.0f));
  EXPECT_THAT(ToFloats(first[0]), ElementsAre(-1.0f));
  // Nesterov: x = 1 - 0.5 * (2 + 0.5 * 2.5) = -0.625.
  auto n = run("nesterov", 3);
  EXPECT_THAT(ToFloats(n[0]), ElementsAre(-0.625f));
}

TEST(OptimizerTest, BadAttributesAndInputs) {
  const NodeSpec base{
      OpType::kMomentum,
      {{"alpha", FloatAttr(0.5f)},
       {"beta", FloatAttr(0.25f)},
       {"norm_coefficient", FloatAttr(0.0f)},
       {"mode", StringAttr("sideways")}},
      {R(0.5f), T(1), MakeFloat({1}, {1}), MakeFloat({1}, {2}), MakeFloat({1}, {4})},
      2,
      1};
  ExpectNodeError(base, absl::StatusCode::kInvalidArgument, "mode must be 'standard'");
  NodeSpec no_alpha = base;
  no_alpha.attrs.erase(no_alpha.attrs.begin());
  ExpectNodeError(no_alpha, absl::StatusCode::kInvalidArgument, "'alpha'");
  NodeSpec arity = base;
  arity.attrs.back().second = StringAttr("standard");
  arity.inputs.pop_back();
  ExpectNodeError(arity, absl::StatusCode::kInvalidArgument, "groups of n tensors");
  NodeSpec shapes = arity;
  shapes.inputs.push_back(MakeFloat({2}, {4, 4}));
  ExpectNodeError(shapes, absl::StatusCode::kInvalidArgument, "input 4 is");
  NodeSpec empty = arity;
  empty.inputs = {R(0.5f), T(1), MakeFloat({0}, {}), MakeFloat({0}, {}), MakeFloat({0}, {})};
  auto outs = RunNodeOk(empty);
  EXPECT_THAT(outs[0].dims(), ElementsAre(0));
}

}  // namespace
}  // namespace kiln::testing
