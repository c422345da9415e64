// Pattern recognition of the norms and GELU: every op form and decomposed variant, and the
// negative cases (interior values used outside, wrong exponents and constants).
#include "engine/precision/patterns.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/precision/pattern_testing.h"

namespace kiln::precision {
namespace {

using testing::Count;
using testing::Find;
using testing::First;
using testing::ModelBuilder;
using testing::SetInt;
using testing::SetString;

TEST(PatternNames, RoundTrip) {
  for (PatternKind k : {PatternKind::kLayerNorm, PatternKind::kRmsNorm, PatternKind::kGelu,
                        PatternKind::kSoftmax, PatternKind::kAttention}) {
    EXPECT_EQ(PatternFromName(PatternName(k)), k);
  }
  EXPECT_EQ(PatternFromName("LayerNorm"), std::nullopt);
}

// ------------------------------------------------------------------------------- LayerNorm
TEST(LayerNorm, Op) {
  ModelBuilder b(17);
  std::string x = b.Input("x");
  std::string y = b.Op("LayerNormalization", {x, b.Weight(), b.Weight()}, [](onnx::NodeProto* n) {
    auto* a = n->add_attribute();
    a->set_name("epsilon");
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(1e-6f);
  });
  b.Output(y);
  auto g = b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(found[0].is_op);
  EXPECT_EQ(found[0].kind, PatternKind::kLayerNorm);
  EXPECT_FLOAT_EQ(found[0].epsilon, 1e-6f);
  EXPECT_EQ(found[0].axis, -1);
  EXPECT_EQ(found[0].input->name, "x");
  EXPECT_NE(found[0].scale, nullptr);
  EXPECT_NE(found[0].bias, nullptr);
}

enum class Recip { kDiv, kReciprocalMul, kDivOneMul };

struct NormVariant {
  int64_t opset;
  bool mul_square;  // Mul(d, d) instead of Pow(d, 2)
  Recip recip;
  bool gamma;
  bool beta;
  bool const_nodes;  // constants as Constant nodes (else initializers)
  int32_t exp_type;  // dtype of Pow's exponent
};

std::string Describe(const NormVariant& v) {
  return absl::StrCat("opset", v.opset, v.mul_square ? "_mulsq" : "_pow",
                      v.recip == Recip::kDiv             ? "_div"
                      : v.recip == Recip::kReciprocalMul ? "_recip"
                                                         : "_divone",
                      v.gamma ? "_gamma" : "", v.beta ? "_beta" : "",
                      v.const_nodes ? "_constnodes" : "_inits", "_exptype", v.exp_type);
}

struct NormGraph {
  std::unique_ptr<ir::Graph> graph;
  int num_nodes = 0;  // nodes expected in the instance
};

// Builds d / sqrt(mean(d^2) + eps) [* gamma] [+ beta]; d = x - mean(x) when `centred`.
// `hook` may add outside uses of interior values (negative tests).
NormGraph BuildNorm(const NormVariant& v, bool centred, float exponent = 2,
                    const std::function<void(ModelBuilder&, const std::string&)>& hook = nullptr) {
  ModelBuilder b(v.opset);
  std::string x = b.Input("x");
  int n = 0;
  int consts = 0;                   // Constant nodes owned by the instance
  bool axes_nodes = v.opset >= 18;  // ReduceMean axes become Constant nodes
  std::string d = x;
  if (centred) {
    std::string mean = b.Reduce("ReduceMean", x);
    d = b.Op("Sub", {x, mean});
    n += 2;
    consts += axes_nodes;
  }
  std::string sq;
  if (v.mul_square) {
    sq = b.Op("Mul", {d, d});
  } else {
    sq = b.Op("Pow", {d, b.Scalar(exponent, v.const_nodes, v.exp_type)});
    consts += v.const_nodes;
  }
  std::string var = b.Reduce("ReduceMean", sq);
  consts += axes_nodes;
  std::string std_dev = b.Op("Sqrt", {b.Op("Add", {var, b.Scalar(1e-5f, v.const_nodes)})});
  consts += v.const_nodes;
  n += 4;
  std::string y;
  switch (v.recip) {
    case Recip::kDiv:
      y = b.Op("Div", {d, std_dev});
      n += 1;
      break;
    case Recip::kReciprocalMul:
      y = b.Op("Mul", {d, b.Op("Reciprocal", {std_dev})});
      n += 2;
      break;
    case Recip::kDivOneMul:
      y = b.Op("Mul", {b.Op("Div", {b.Scalar(1, v.const_nodes), std_dev}), d});
      n += 2;
      consts += v.const_nodes;
      break;
  }
  if (v.gamma) {
    y = b.Op("Mul", {b.Weight(), y});
    n += 1;
  }
  if (v.beta && centred) {
    y = b.Op("Add", {y, b.Weight()});
    n += 1;
  }
  if (hook) hook(b, d);
  b.Output(y);
  return {b.Import(), n + consts};
}

std::vector<NormVariant> NormVariants() {
  std::vector<NormVariant> out;
  for (int64_t opset : {17, 18}) {
    for (bool mul_square : {false, true}) {
      for (Recip r : {Recip::kDiv, Recip::kReciprocalMul, Recip::kDivOneMul}) {
        for (bool affine : {false, true}) {
          for (bool const_nodes : {false, true}) {
            out.push_back(
                {opset, mul_square, r, affine, affine, const_nodes, onnx::TensorProto::FLOAT});
          }
        }
      }
    }
  }
  // Pow's exponent in other float dtypes, and gamma without beta.
  out.push_back({17, false, Recip::kDiv, true, false, true, onnx::TensorProto::DOUBLE});
  out.push_back({18, false, Recip::kDiv, false, true, false, onnx::TensorProto::FLOAT16});
  return out;
}

class DecomposedNormTest : public ::testing::TestWithParam<NormVariant> {};

TEST_P(DecomposedNormTest, LayerNorm) {
  const NormVariant& v = GetParam();
  NormGraph ng = BuildNorm(v, /*centred=*/true);
  ASSERT_NE(ng.graph, nullptr);
  auto found = Find(*ng.graph);
  ASSERT_EQ(found.size(), 1u);
  const PatternInstance& ln = found[0];
  EXPECT_EQ(ln.kind, PatternKind::kLayerNorm);
  EXPECT_FALSE(ln.is_op);
  EXPECT_EQ(ln.nodes.size(), static_cast<size_t>(ng.num_nodes));
  EXPECT_EQ(ln.nodes.size(), ng.graph->nodes().size());  // the whole graph is the instance
  EXPECT_EQ(ln.input->name, "x");
  EXPECT_TRUE(ln.output->is_graph_output);
  EXPECT_FLOAT_EQ(ln.epsilon, 1e-5f);
  EXPECT_EQ(ln.axis, -1);
  EXPECT_EQ(ln.scale != nullptr, v.gamma);
  EXPECT_EQ(ln.bias != nullptr, v.beta);
}

TEST_P(DecomposedNormTest, RmsNorm) {
  const NormVariant& v = GetParam();
  NormGraph ng = BuildNorm(v, /*centred=*/false);
  ASSERT_NE(ng.graph, nullptr);
  auto found = Find(*ng.graph);
  ASSERT_EQ(found.size(), 1u);
  const PatternInstance& rms = found[0];
  EXPECT_EQ(rms.kind, PatternKind::kRmsNorm);
  EXPECT_EQ(rms.nodes.size(), static_cast<size_t>(ng.num_nodes));
  EXPECT_EQ(rms.nodes.size(), ng.graph->nodes().size());
  EXPECT_EQ(rms.input->name, "x");
  EXPECT_FLOAT_EQ(rms.epsilon, 1e-5f);
  EXPECT_EQ(rms.axis, -1);
  EXPECT_EQ(rms.scale != nullptr, v.gamma);
  EXPECT_EQ(rms.bias, nullptr);
}

INSTANTIATE_TEST_SUITE_P(Variants, DecomposedNormTest, ::testing::ValuesIn(NormVariants()),
                         [](const auto& info) { return Describe(info.param); });

const NormVariant kPlain = {17, false, Recip::kDiv, true, true, true, onnx::TensorProto::FLOAT};

TEST(LayerNorm, InteriorValueUsedElsewhereIsNotAnInstance) {
  // d = x - mean also feeds a node outside: neither a LayerNorm nor an RMSNorm of d.
  NormGraph ng = BuildNorm(
      kPlain, true, 2, [](ModelBuilder& b, const std::string& d) { b.Output(b.Op("Relu", {d})); });
  ASSERT_NE(ng.graph, nullptr);
  EXPECT_TRUE(Find(*ng.graph).empty());
}

TEST(LayerNorm, InteriorValueAsGraphOutputIsNotAnInstance) {
  NormGraph ng =
      BuildNorm(kPlain, true, 2, [](ModelBuilder& b, const std::string& d) { b.Output(d); });
  ASSERT_NE(ng.graph, nullptr);
  EXPECT_TRUE(Find(*ng.graph).empty());
}

TEST(LayerNorm, PowExponentThreeIsNotAnInstance) {
  for (bool centred : {true, false}) {
    NormGraph ng = BuildNorm(kPlain, centred, 3);
    ASSERT_NE(ng.graph, nullptr);
    EXPECT_TRUE(Find(*ng.graph).empty()) << centred;
  }
}

TEST(LayerNorm, MeanOfAnotherValueIsNotALayerNorm) {
  // d = x - mean(y): an RMSNorm of d, not a LayerNorm of x.
  ModelBuilder b(17);
  std::string x = b.Input("x"), y = b.Input("y");
  std::string d = b.Op("Sub", {x, b.Reduce("ReduceMean", y)});
  std::string var = b.Reduce("ReduceMean", b.Op("Pow", {d, b.Scalar(2)}));
  std::string out = b.Op("Div", {d, b.Op("Sqrt", {b.Op("Add", {var, b.Scalar(1e-5f)})})});
  b.Output(out);
  auto g = b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  EXPECT_EQ(Count(found, PatternKind::kLayerNorm), 0);
  ASSERT_EQ(Count(found, PatternKind::kRmsNorm), 1);
  EXPECT_EQ(First(found, PatternKind::kRmsNorm)->input->name, d);
}

TEST(LayerNorm, DivisorFromAnotherValueIsNotAnInstance) {
  // Div(x, std) where the square is of d = x - mean: the numerator must be d itself.
  ModelBuilder b(17);
  std::string x = b.Input("x");
  std::string d = b.Op("Sub", {x, b.Reduce("ReduceMean", x)});
  std::string var = b.Reduce("ReduceMean", b.Op("Pow", {d, b.Scalar(2)}));
  std::string out = b.Op("Div", {x, b.Op("Sqrt", {b.Op("Add", {var, b.Scalar(1e-5f)})})});
  b.Output(out);
  auto g = b.Import();
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Find(*g).empty());
}

TEST(LayerNorm, TwoAxes) {
  ModelBuilder b(18);
  std::string x = b.Input("x");
  std::string d = b.Op("Sub", {x, b.Reduce("ReduceMean", x, {-2, -1})});
  std::string var = b.Reduce("ReduceMean", b.Op("Mul", {d, d}), {1, 2});  // same axes, positive
  std::string out = b.Op("Div", {d, b.Op("Sqrt", {b.Op("Add", {b.Scalar(1e-6f), var})})});
  b.Output(out);
  auto g = b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, PatternKind::kLayerNorm);
  EXPECT_EQ(found[0].axis, -2);
  EXPECT_FLOAT_EQ(found[0].epsilon, 1e-6f);
}

// A normalisation over an axis that is not the last one (Flax's LayerNorm over C of [N, C, L])
// has the same sum of squares to keep out of fp16: an instance for policies, which no
// LayerNormalization kernel computes, so fusion leaves it alone.
TEST(LayerNorm, NonTrailingAxisIsForPoliciesOnly) {
  ModelBuilder b(17);
  std::string x = b.Input("x");
  std::string d = b.Op("Sub", {x, b.Reduce("ReduceMean", x, {1})});
  std::string var = b.Reduce("ReduceMean", b.Op("Mul", {d, d}), {1});
  b.Output(b.Op("Div", {d, b.Op("Sqrt", {b.Op("Add", {var, b.Scalar(1e-5f)})})}));
  auto g = b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, PatternKind::kLayerNorm);
  EXPECT_FALSE(found[0].fusable);
}

// -------------------------------------------------------------------------------- RMSNorm
TEST(RmsNorm, Op) {
  ModelBuilder b(23);
  std::string x = b.Input("x");
  std::string y = b.Op("RMSNormalization", {x, b.Weight()});
  b.Output(y);
  auto g = b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, PatternKind::kRmsNorm);
  EXPECT_TRUE(found[0].is_op);
  EXPECT_NE(found[0].scale, nullptr);
  EXPECT_EQ(found[0].axis, -1);
}

// ----------------------------------------------------------------------------------- GELU
TEST(Gelu, Op) {
  for (std::string approx : {"none", "tanh"}) {
    ModelBuilder b(20);
    std::string x = b.Input("x");
    b.Output(b.Op("Gelu", {x}, [&](onnx::NodeProto* n) { SetString(n, "approximate", approx); }));
    auto g = b.Import();
    ASSERT_NE(g, nullptr);
    auto found = Find(*g);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].kind, PatternKind::kGelu);
    EXPECT_TRUE(found[0].is_op);
    EXPECT_EQ(found[0].tanh_approximation, approx == "tanh");
  }
}

enum class Tail { kXThenHalf, kHalfXFirst, kHalfOnP };

// x * 0.5 * (1 + f), in the order `tail` says; `swap` swaps every Mul's operands.
std::string GeluTail(ModelBuilder& b, const std::string& x, const std::string& p, Tail tail,
                     bool swap, float half = 0.5f) {
  auto mul = [&](const std::string& a, const std::string& c) {
    return swap ? b.Op("Mul", {c, a}) : b.Op("Mul", {a, c});
  };
  switch (tail) {
    case Tail::kXThenHalf:
      return mul(mul(x, p), b.Scalar(half));
    case Tail::kHalfXFirst:
      return mul(mul(x, b.Scalar(half)), p);
    case Tail::kHalfOnP:
      return mul(x, mul(p, b.Scalar(half)));
  }
  return "";
}

struct GeluErfCase {
  bool div;  // Div by sqrt(2), else Mul by 1/sqrt(2)
  Tail tail;
  bool swap;
};

std::string BuildErfGelu(ModelBuilder& b, const std::string& x, const GeluErfCase& c,
                         float divisor = 1.4142135f, float half = 0.5f) {
  std::string u = c.div ? b.Op("Div", {x, b.Scalar(divisor)})
                        : (c.swap ? b.Op("Mul", {b.Scalar(1 / divisor), x})
                                  : b.Op("Mul", {x, b.Scalar(1 / divisor)}));
  std::string e = b.Op("Erf", {u});
  std::string p = c.swap ? b.Op("Add", {b.Scalar(1), e}) : b.Op("Add", {e, b.Scalar(1)});
  return GeluTail(b, x, p, c.tail, c.swap, half);
}

TEST(Gelu, ErfForms) {
  for (bool div : {true, false}) {
    for (Tail tail : {Tail::kXThenHalf, Tail::kHalfXFirst, Tail::kHalfOnP}) {
      for (bool swap : {false, true}) {
        SCOPED_TRACE(absl::StrCat("div ", div, " tail ", static_cast<int>(tail), " swap ", swap));
        ModelBuilder b(17);
        std::string x = b.Input("x");
        b.Output(BuildErfGelu(b, x, {div, tail, swap}));
        auto g = b.Import();
        ASSERT_NE(g, nullptr);
        auto found = Find(*g);
        ASSERT_EQ(found.size(), 1u);
        EXPECT_EQ(found[0].kind, PatternKind::kGelu);
        EXPECT_FALSE(found[0].tanh_approximation);
        EXPECT_EQ(found[0].input->name, "x");
        // 5 ops + 3 Constant nodes: the whole graph.
        EXPECT_EQ(found[0].nodes.size(), g->nodes().size());
        EXPECT_EQ(found[0].nodes.size(), 8u);
      }
    }
  }
}

TEST(Gelu, WrongConstantsAreNotInstances) {
  for (auto [divisor, half] :
       {std::pair{2.0f, 0.5f}, std::pair{1.4142135f, 0.6f}, std::pair{1.415f, 0.5f}}) {
    ModelBuilder b(17);
    std::string x = b.Input("x");
    b.Output(BuildErfGelu(b, x, {true, Tail::kXThenHalf, false}, divisor, half));
    auto g = b.Import();
    ASSERT_NE(g, nullptr);
    EXPECT_TRUE(Find(*g).empty()) << divisor << " " << half;
  }
}

TEST(Gelu, ErfOfAnotherValueIsNotAnInstance) {
  ModelBuilder b(17);
  std::string x = b.Input("x"), y = b.Input("y");
  std::string p = b.Op("Add", {b.Op("Erf", {b.Op("Div", {y, b.Scalar(1.4142135f)})}), b.Scalar(1)});
  b.Output(GeluTail(b, x, p, Tail::kXThenHalf, false));
  auto g = b.Import();
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Find(*g).empty());
}

std::string BuildTanhGelu(ModelBuilder& b, const std::string& x, bool pow, Tail tail, bool swap,
                          float coef = 0.044715f) {
  std::string cube =
      pow ? b.Op("Pow", {x, b.Scalar(3)})
          : (swap ? b.Op("Mul", {x, b.Op("Mul", {x, x})}) : b.Op("Mul", {b.Op("Mul", {x, x}), x}));
  std::string t3 = swap ? b.Op("Mul", {b.Scalar(coef), cube}) : b.Op("Mul", {cube, b.Scalar(coef)});
  std::string inner = swap ? b.Op("Add", {t3, x}) : b.Op("Add", {x, t3});
  std::string t = b.Op("Tanh", {b.Op("Mul", {inner, b.Scalar(0.7978846f)})});
  std::string p = b.Op("Add", {t, b.Scalar(1)});
  return GeluTail(b, x, p, tail, swap);
}

TEST(Gelu, TanhForms) {
  for (bool pow : {true, false}) {
    for (Tail tail : {Tail::kXThenHalf, Tail::kHalfXFirst, Tail::kHalfOnP}) {
      for (bool swap : {false, true}) {
        SCOPED_TRACE(absl::StrCat("pow ", pow, " tail ", static_cast<int>(tail), " swap ", swap));
        ModelBuilder b(17);
        std::string x = b.Input("x");
        b.Output(BuildTanhGelu(b, x, pow, tail, swap));
        auto g = b.Import();
        ASSERT_NE(g, nullptr);
        auto found = Find(*g);
        ASSERT_EQ(found.size(), 1u);
        EXPECT_EQ(found[0].kind, PatternKind::kGelu);
        EXPECT_TRUE(found[0].tanh_approximation);
        EXPECT_EQ(found[0].input->name, "x");
        EXPECT_EQ(found[0].nodes.size(), g->nodes().size());
      }
    }
  }
}

TEST(Gelu, TanhWrongCoefficientIsNotAnInstance) {
  ModelBuilder b(17);
  std::string x = b.Input("x");
  b.Output(BuildTanhGelu(b, x, true, Tail::kHalfXFirst, false, 0.05f));
  auto g = b.Import();
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Find(*g).empty());
}

TEST(Gelu, SharedConstantIsAnInputNotAMember) {
  // One Constant 0.5 read by two GELUs: neither instance owns it.
  ModelBuilder b(17);
  std::string x = b.Input("x"), y = b.Input("y");
  std::string half = b.Scalar(0.5f);
  auto gelu = [&](const std::string& v) {
    std::string p =
        b.Op("Add", {b.Op("Erf", {b.Op("Div", {v, b.Scalar(1.4142135f)})}), b.Scalar(1)});
    return b.Op("Mul", {b.Op("Mul", {v, p}), half});
  };
  b.Output(gelu(x));
  b.Output(gelu(y));
  auto g = b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  ASSERT_EQ(found.size(), 2u);
  for (const auto& i : found) EXPECT_EQ(i.nodes.size(), 7u);  // 5 ops + sqrt(2) and 1
}

}  // namespace
}  // namespace kiln::precision
