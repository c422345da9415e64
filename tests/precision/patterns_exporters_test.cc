// Pattern recognition of the forms each exporter writes (issue 28): jax2tf/tf2onnx (ReduceSum
// times 1/n, keepdims restored by Reshape/Expand, Max(var, 0), Sqrt + Reciprocal, gamma folded
// into 1/std), TF/Keras through tf2onnx (GlobalAveragePool, batch_normalization's
// x * inv + (beta - mean * inv)), Keras 3, Paddle (unnamed [1]-shaped Constant nodes, axes as an
// attribute, scale reshaped at run time), PyTorch's var (x - mean computed twice, keepdims=0 and a
// Reshape), Pow(v, +-0.5), the GELU variants and jax2tf's Softmax. Each test lists the nodes the
// instance must hold, exactly. The forms were taken from real exports (torch 2.x both exporters,
// jax 0.4.30 + jax2tf, TF 2.15 + tf2onnx 1.16).
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/precision/patterns.h"
#include "gtest/gtest.h"
#include "tests/precision/pattern_testing.h"

namespace kiln::precision {
namespace {

using ::kiln::testing::AddFloatInitializer;
using ::kiln::testing::AddIntsAttribute;
using ::kiln::testing::AddOnnxNode;
using testing::Count;
using testing::Find;
using testing::ModelBuilder;
using testing::SetInt;

// A ModelBuilder that records the nodes a test expects in the instance: every node made through
// M() (ops and the Constant nodes only the instance reads) is a member; nodes made on the builder
// directly are not.
class Form {
 public:
  explicit Form(int64_t opset) : b(opset), opset_(opset) {}

  ModelBuilder b;
  std::set<std::string> members;

  std::string M(const std::string& out) {
    members.insert(out + "_node");
    return out;
  }
  std::string Op(const std::string& op, const std::vector<std::string>& in) {
    return M(b.Op(op, in));
  }
  std::string Const(float v) { return M(b.Scalar(v)); }
  // A reduction over `axes`, keepdims as given: axes as an attribute before opset 18 (ReduceSum:
  // 13), as a Constant node input after (a member too).
  std::string Reduce(const std::string& op, const std::string& x, std::vector<int64_t> axes,
                     bool keepdims, bool member = true) {
    int64_t opset = opset_;
    bool as_input = opset >= (op == "ReduceSum" ? 13 : 18);
    std::string out;
    if (as_input) {
      std::string a = b.Ints(axes);
      if (member) M(a);
      out = b.Op(op, {x, a}, [&](onnx::NodeProto* n) { SetInt(n, "keepdims", keepdims); });
    } else {
      out = b.Op(op, {x}, [&](onnx::NodeProto* n) {
        AddIntsAttribute(n, "axes", axes);
        SetInt(n, "keepdims", keepdims);
      });
    }
    return member ? M(out) : out;
  }
  // A float initializer of `dims` (not a node: never a member).
  std::string Init(const std::string& name, const std::vector<int64_t>& dims, float v) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    AddFloatInitializer(b.graph(), name, dims, std::vector<float>(n, v));
    return name;
  }
  std::string IntsInit(const std::string& name, const std::vector<int64_t>& v) {
    ::kiln::testing::AddInt64Initializer(b.graph(), name, v);
    return name;
  }

  int64_t opset_;
};

// The one instance of `kind` in the graph, holding exactly `members` (node names).
const PatternInstance* ExpectOne(const ir::Graph& g, const std::vector<PatternInstance>& found,
                                 PatternKind kind, const std::set<std::string>& members) {
  const PatternInstance* inst = nullptr;
  for (const auto& i : found) {
    if (i.kind != kind) continue;
    EXPECT_EQ(inst, nullptr) << "two " << PatternName(kind) << " instances";
    inst = &i;
  }
  if (inst == nullptr) {
    ADD_FAILURE() << "no " << PatternName(kind) << " instance";
    return nullptr;
  }
  std::set<std::string> got;
  for (int id : inst->nodes) got.insert(g.nodes()[id]->name);
  EXPECT_EQ(got, members) << "got: " << absl::StrJoin(got, " ")
                          << "\nwant: " << absl::StrJoin(members, " ");
  EXPECT_FALSE(inst->is_op);
  return inst;
}

// ------------------------------------------------------------------------ jax2tf LayerNorm
// Flax's LayerNorm as jax2tf + tf2onnx write it with static shapes: means as ReduceSum without
// keepdims, Reshape and Expand back to [2, 4, 1], times 1/8; Rsqrt as Sqrt + Reciprocal; gamma
// ([1, 1, 8], broadcast by jax) folded into 1/std; y = (x - mean) * that + beta.
TEST(Jax2tf, LayerNormStatic) {
  Form f(13);
  std::string x = f.b.Input("x");
  std::string shape = f.IntsInit("shape", {2, 4, 1});
  std::string recip = f.Init("recip", {}, 0.125f);
  auto mean_of = [&](const std::string& v) {
    std::string s = f.Reduce("ReduceSum", v, {2}, false);
    return f.Op("Mul", {f.Op("Expand", {f.Op("Reshape", {s, shape}), shape}), recip});
  };
  std::string d = f.Op("Sub", {x, mean_of(x)});
  std::string var = mean_of(f.Op("Mul", {d, d}));
  std::string inv = f.Op("Reciprocal", {f.Op("Sqrt", {f.Op("Add", {var, f.Const(1e-6f)})})});
  std::string gamma = f.Init("gamma", {1, 1, 8}, 1.5f), beta = f.Init("beta", {1, 1, 8}, 0.5f);
  std::string y = f.Op("Add", {f.Op("Mul", {d, f.Op("Mul", {inv, gamma})}), beta});
  f.b.Output(y);
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  const PatternInstance* ln = ExpectOne(*g, found, PatternKind::kLayerNorm, f.members);
  ASSERT_NE(ln, nullptr);
  EXPECT_EQ(found.size(), 1u);
  EXPECT_EQ(ln->input->name, "x");
  EXPECT_EQ(ln->output->name, y);
  EXPECT_FLOAT_EQ(ln->epsilon, 1e-6f);
  EXPECT_EQ(ln->axis, -1);
  ASSERT_NE(ln->scale, nullptr);
  EXPECT_EQ(ln->scale->name, "gamma");
  ASSERT_NE(ln->bias, nullptr);
  EXPECT_EQ(ln->bias->name, "beta");
  EXPECT_TRUE(ln->fusable);  // the Reshape/Expand targets are constants: shapes prove them
}

// Two in a row, a Relu between: the second's input is the first's output, whose shape import
// infers only through Expand (a constant target): without it, only the first would be found.
TEST(Jax2tf, ChainedLayerNormsAreEachFound) {
  Form f(13);
  std::string x = f.b.Input("x");
  std::string shape = f.IntsInit("shape", {2, 4, 1});
  std::string recip = f.Init("recip", {}, 0.125f);
  auto mean_of = [&](const std::string& v) {
    std::string s = f.b.Op("ReduceSum", {v, f.IntsInit(v + "_axes", {2})},
                           [](onnx::NodeProto* n) { SetInt(n, "keepdims", 0); });
    return f.b.Op("Mul", {f.b.Op("Expand", {f.b.Op("Reshape", {s, shape}), shape}), recip});
  };
  auto ln = [&](const std::string& in) {
    std::string d = f.b.Op("Sub", {in, mean_of(in)});
    std::string var = mean_of(f.b.Op("Mul", {d, d}));
    std::string inv = f.b.Op("Reciprocal", {f.b.Op("Sqrt", {f.b.Op("Add", {var, recip})})});
    return f.b.Op("Mul", {d, inv});
  };
  f.b.Output(ln(f.b.Op("Relu", {ln(x)})));
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  ASSERT_EQ(Count(found, PatternKind::kLayerNorm), 2);
  for (const auto& i : found) EXPECT_TRUE(i.fusable);
}

// The same with a symbolic batch: the Reshape/Expand target is computed from Shape(x) at run
// time, so nothing proves it restores the reduced axis: recognised (for policies), not fusable.
// The shape computation stays outside the instance.
TEST(Jax2tf, LayerNormSymbolicBatchIsForPoliciesOnly) {
  Form f(13);
  std::string x = f.b.Input("x");
  f.b.graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_param("batch");
  std::string shp = f.b.Op("Shape", {x});
  std::string lead = f.b.Op("Slice", {shp, f.IntsInit("s0", {0}), f.IntsInit("s1", {1})});
  std::string shape = f.b.Op("Concat", {lead, f.IntsInit("four", {4}), f.IntsInit("one", {1})},
                             [](onnx::NodeProto* n) { SetInt(n, "axis", 0); });
  std::string recip = f.Init("recip", {}, 0.125f);
  auto mean_of = [&](const std::string& v) {
    std::string s = f.Reduce("ReduceSum", v, {2}, false);
    return f.Op("Mul", {f.Op("Expand", {f.Op("Reshape", {s, shape}), shape}), recip});
  };
  std::string d = f.Op("Sub", {x, mean_of(x)});
  std::string var = mean_of(f.Op("Mul", {d, d}));
  std::string inv = f.Op("Reciprocal", {f.Op("Sqrt", {f.Op("Add", {var, f.Const(1e-6f)})})});
  std::string y = f.Op("Mul", {d, inv});
  f.b.Output(y);
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  const PatternInstance* ln = ExpectOne(*g, found, PatternKind::kLayerNorm, f.members);
  ASSERT_NE(ln, nullptr);
  EXPECT_FALSE(ln->fusable);
  EXPECT_EQ(ln->axis, -1);
  EXPECT_EQ(ln->scale, nullptr);
}

// magika's Flax LayerNorm through jax2tf (a symbolic batch): x's rank unknown before run time
// (a Reshape to a target computed at run time), the statistics over axis 1 of [N, C, L] (not
// the trailing axis) without kept dims, the fast variance clamped by Max(0, .) before one
// Reshape + Expand restores the axis, gamma [1, C, 1] folded into 1/std. Recognised for policies
// (the sum of squares must not run in fp16), never fused: no LayerNormalization computes it.
TEST(Jax2tf, MiddleAxisLayerNormOfUnknownRankIsForPoliciesOnly) {
  Form f(13);
  std::string xs = f.b.Input("xs", {2, 32});
  std::string target = f.b.Input("target", {-1}, onnx::TensorProto::INT64);  // length unknown
  std::string restore = f.b.Input("restore", {3}, onnx::TensorProto::INT64);
  std::string x = f.b.Op("Reshape", {xs, target});
  std::string recip = f.Init("recip", {}, 0.25f);  // 1/C, C = 4
  std::string mean = f.Op("Mul", {f.Reduce("ReduceSum", x, {1}, false), recip});
  std::string msq = f.Op("Mul", {f.Reduce("ReduceSum", f.Op("Mul", {x, x}), {1}, false), recip});
  std::string var = f.Op("Max", {f.Const(0.0f), f.Op("Sub", {msq, f.Op("Mul", {mean, mean})})});
  var = f.Op("Expand", {f.Op("Reshape", {var, restore}), restore});
  std::string inv = f.Op("Reciprocal", {f.Op("Sqrt", {f.Op("Add", {var, f.Const(1e-6f)})})});
  inv = f.Op("Mul", {inv, f.Init("gamma", {1, 4, 1}, 1.0f)});
  std::string centred =
      f.Op("Sub", {x, f.Op("Expand", {f.Op("Reshape", {mean, restore}), restore})});
  std::string y = f.Op("Add", {f.Op("Mul", {centred, inv}), f.Init("beta", {1, 4, 1}, 0.0f)});
  f.b.Output(y);
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  const PatternInstance* ln = ExpectOne(*g, found, PatternKind::kLayerNorm, f.members);
  ASSERT_NE(ln, nullptr);
  EXPECT_FALSE(ln->fusable);
}

// Flax's fast variance, E[x^2] - E[x]^2 clamped by Max(0, .), here with kept dims, the means as
// ReduceSum * 1/8 and ReduceSum / 8, and 1/std as Pow(var + eps, -0.5); gamma after.
TEST(Jax2tf, FastVarianceLayerNorm) {
  Form f(13);
  std::string x = f.b.Input("x");
  std::string mean = f.Op("Mul", {f.Reduce("ReduceSum", x, {-1}, true), f.Const(0.125f)});
  std::string msq =
      f.Op("Div", {f.Reduce("ReduceSum", f.Op("Mul", {x, x}), {-1}, true), f.Const(8.0f)});
  std::string var = f.Op("Max", {f.Const(0.0f), f.Op("Sub", {msq, f.Op("Mul", {mean, mean})})});
  std::string inv = f.Op("Pow", {f.Op("Add", {var, f.Const(1e-5f)}), f.Const(-0.5f)});
  std::string y = f.Op("Mul", {f.Op("Sub", {x, mean}), inv});
  y = f.Op("Add", {f.Op("Mul", {y, f.b.Weight()}), f.b.Weight()});
  f.b.Output(y);
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  const PatternInstance* ln = ExpectOne(*g, found, PatternKind::kLayerNorm, f.members);
  ASSERT_NE(ln, nullptr);
  EXPECT_TRUE(ln->fusable);
  EXPECT_FLOAT_EQ(ln->epsilon, 1e-5f);
  EXPECT_NE(ln->scale, nullptr);
  EXPECT_NE(ln->bias, nullptr);
}

TEST(Jax2tf, RmsNorm) {
  Form f(17);
  std::string x = f.b.Input("x");
  std::string shape = f.IntsInit("shape", {2, 4, 1});
  std::string ms =
      f.Op("Mul", {f.Op("Reshape", {f.Reduce("ReduceSum", f.Op("Mul", {x, x}), {2}, false), shape}),
                   f.Const(0.125f)});
  std::string inv = f.Op("Reciprocal", {f.Op("Sqrt", {f.Op("Add", {ms, f.Const(1e-6f)})})});
  std::string y = f.Op("Mul", {f.Op("Mul", {x, inv}), f.Init("gamma", {1, 1, 8}, 1)});
  f.b.Output(y);
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  const PatternInstance* rms = ExpectOne(*g, found, PatternKind::kRmsNorm, f.members);
  ASSERT_NE(rms, nullptr);
  EXPECT_EQ(Count(found, PatternKind::kLayerNorm), 0);
  EXPECT_TRUE(rms->fusable);
  ASSERT_NE(rms->scale, nullptr);
  EXPECT_EQ(rms->scale->name, "gamma");
}

TEST(Jax2tf, SumTimesTheWrongCountIsNotAMean) {
  // sum * 1/7 over 8 elements is not a mean: no instance (a fused LayerNorm would differ).
  for (float c : {1.0f / 7, 1.0f / 9, 1.0f}) {
    Form f(13);
    std::string x = f.b.Input("x");
    std::string mean = f.Op("Mul", {f.Reduce("ReduceSum", x, {-1}, true), f.Const(c)});
    std::string d = f.Op("Sub", {x, mean});
    std::string var =
        f.Op("Mul", {f.Reduce("ReduceSum", f.Op("Mul", {d, d}), {-1}, true), f.Const(0.125f)});
    f.b.Output(f.Op("Div", {d, f.Op("Sqrt", {f.Op("Add", {var, f.Const(1e-5f)})})}));
    auto g = f.b.Import();
    ASSERT_NE(g, nullptr);
    auto found = Find(*g);
    // With the wrong centring mean, d is still x minus something: an RMSNorm of d is the
    // truthful reading; no LayerNorm.
    EXPECT_EQ(Count(found, PatternKind::kLayerNorm), 0) << c;
  }
}

TEST(Jax2tf, SumOfSquaresWithoutTheCountIsNotANorm) {
  // x / sqrt(sum(x^2) + eps) is an L2 normalisation, not an RMSNorm.
  Form f(13);
  std::string x = f.b.Input("x");
  std::string ss = f.Reduce("ReduceSum", f.Op("Mul", {x, x}), {-1}, true);
  f.b.Output(f.Op("Div", {x, f.Op("Sqrt", {f.Op("Add", {ss, f.Const(1e-5f)})})}));
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Find(*g).empty());
}

TEST(Jax2tf, ReductionWithoutKeptDimsIsNotAMean) {
  // keepdims=0 and nothing restoring the axis: the "mean" does not broadcast against x.
  Form f(13);
  std::string x = f.b.Input("x", {8, 8});
  std::string mean = f.Op("Mul", {f.Reduce("ReduceSum", x, {-1}, false), f.Const(0.125f)});
  std::string d = f.Op("Sub", {x, mean});
  std::string var =
      f.Op("Mul", {f.Reduce("ReduceSum", f.Op("Mul", {d, d}), {-1}, false), f.Const(0.125f)});
  f.b.Output(f.Op("Div", {d, f.Op("Sqrt", {f.Op("Add", {var, f.Const(1e-5f)})})}), {8, 8});
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Find(*g).empty());
}

TEST(Jax2tf, ClampAtAnythingButZeroIsNotAVariance) {
  Form f(13);
  std::string x = f.b.Input("x");
  std::string mean = f.Reduce("ReduceMean", x, {-1}, true);
  std::string msq = f.Reduce("ReduceMean", f.Op("Mul", {x, x}), {-1}, true);
  std::string var = f.Op("Max", {f.Const(1.0f), f.Op("Sub", {msq, f.Op("Mul", {mean, mean})})});
  std::string inv = f.Op("Pow", {f.Op("Add", {var, f.Const(1e-5f)}), f.Const(-0.5f)});
  f.b.Output(f.Op("Mul", {f.Op("Sub", {x, mean}), inv}));
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Find(*g).empty());
}

// ---------------------------------------------------------------- TF / Keras via tf2onnx
// Keras 2's LayerNormalization below epsilon 1.001e-5 (no fused batch norm): tf.nn.moments as
// GlobalAveragePool (tf2onnx's reduce_mean over the last axis of a rank-3 tensor), then
// tf.nn.batch_normalization: x * inv + (beta - mean * inv), inv = Reciprocal(Sqrt(.)) * gamma.
TEST(Keras, LayerNormalizationAsBatchNormalization) {
  Form f(13);
  std::string x = f.b.Input("x");
  std::string mean = f.Op("GlobalAveragePool", {x});
  std::string d = f.Op("Sub", {x, mean});
  std::string var = f.Op("GlobalAveragePool", {f.Op("Mul", {d, d})});
  std::string inv = f.Op("Reciprocal", {f.Op("Sqrt", {f.Op("Add", {var, f.Const(1e-6f)})})});
  std::string g = f.Op("Mul", {inv, f.Init("gamma", {8}, 2)});
  std::string mg = f.Op("Mul", {mean, g});
  std::string xg = f.Op("Mul", {x, g});
  std::string y = f.Op("Add", {xg, f.Op("Sub", {f.Init("beta", {8}, 1), mg})});
  f.b.Output(y);
  auto gr = f.b.Import();
  ASSERT_NE(gr, nullptr);
  auto found = Find(*gr);
  const PatternInstance* ln = ExpectOne(*gr, found, PatternKind::kLayerNorm, f.members);
  ASSERT_NE(ln, nullptr);
  EXPECT_EQ(ln->axis, -1);
  ASSERT_NE(ln->scale, nullptr);
  EXPECT_EQ(ln->scale->name, "gamma");
  ASSERT_NE(ln->bias, nullptr);
  EXPECT_EQ(ln->bias->name, "beta");
  EXPECT_TRUE(ln->fusable);
}

// center=False: x * inv + Neg(mean) * inv; and GlobalAveragePool over a rank-4 tensor reduces
// the last two axes: a LayerNorm over axes -2..-1.
TEST(Keras, NoCenterAndRank4) {
  for (bool rank4 : {false, true}) {
    SCOPED_TRACE(rank4);
    Form f(13);
    std::vector<int64_t> dims =
        rank4 ? std::vector<int64_t>{2, 3, 4, 8} : std::vector<int64_t>{2, 4, 8};
    std::string x = f.b.Input("x", dims);
    std::string mean = f.Op("GlobalAveragePool", {x});
    std::string d = f.Op("Sub", {x, mean});
    std::string var = f.Op("GlobalAveragePool", {f.Op("Mul", {d, d})});
    std::string inv = f.Op("Reciprocal", {f.Op("Sqrt", {f.Op("Add", {var, f.Const(1e-6f)})})});
    std::string y = f.Op("Add", {f.Op("Mul", {x, inv}), f.Op("Mul", {f.Op("Neg", {mean}), inv})});
    f.b.Output(y, dims);
    auto g = f.b.Import();
    ASSERT_NE(g, nullptr);
    auto found = Find(*g);
    const PatternInstance* ln = ExpectOne(*g, found, PatternKind::kLayerNorm, f.members);
    ASSERT_NE(ln, nullptr);
    EXPECT_EQ(ln->axis, rank4 ? -2 : -1);
    EXPECT_EQ(ln->scale, nullptr);
    EXPECT_EQ(ln->bias, nullptr);
  }
}

// Keras 3: moments as mean(x^2) - mean(x)^2; inv = rsqrt(var + eps) * gamma;
// res = (-mean) * inv + beta; y = x * inv + res.
TEST(Keras, Keras3LayerNormalization) {
  Form f(17);
  std::string x = f.b.Input("x");
  std::string mean = f.Reduce("ReduceMean", x, {-1}, true);
  std::string var = f.Op(
      "Sub", {f.Reduce("ReduceMean", f.Op("Mul", {x, x}), {-1}, true), f.Op("Mul", {mean, mean})});
  std::string inv = f.Op("Reciprocal", {f.Op("Sqrt", {f.Op("Add", {var, f.Const(1e-3f)})})});
  inv = f.Op("Mul", {inv, f.b.Weight()});
  std::string res = f.Op("Add", {f.Op("Mul", {f.Op("Neg", {mean}), inv}), f.b.Weight()});
  std::string y = f.Op("Add", {f.Op("Mul", {x, inv}), res});
  f.b.Output(y);
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  const PatternInstance* ln = ExpectOne(*g, found, PatternKind::kLayerNorm, f.members);
  ASSERT_NE(ln, nullptr);
  EXPECT_FLOAT_EQ(ln->epsilon, 1e-3f);
  EXPECT_NE(ln->scale, nullptr);
  EXPECT_NE(ln->bias, nullptr);
}

// x * inv - mean * inv, then + beta.
TEST(Keras, DifferenceThenBeta) {
  Form f(13);
  std::string x = f.b.Input("x");
  std::string mean = f.Reduce("ReduceMean", x, {-1}, true);
  std::string d = f.Op("Sub", {x, mean});
  std::string var = f.Reduce("ReduceMean", f.Op("Mul", {d, d}), {-1}, true);
  std::string inv = f.Op("Reciprocal", {f.Op("Sqrt", {f.Op("Add", {var, f.Const(1e-6f)})})});
  std::string y = f.Op("Sub", {f.Op("Mul", {x, inv}), f.Op("Mul", {mean, inv})});
  y = f.Op("Add", {y, f.b.Weight()});
  f.b.Output(y);
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  const PatternInstance* ln = ExpectOne(*g, found, PatternKind::kLayerNorm, f.members);
  ASSERT_NE(ln, nullptr);
  EXPECT_EQ(ln->scale, nullptr);
  EXPECT_NE(ln->bias, nullptr);
}

TEST(Keras, WrongSignIsNotALayerNorm) {
  // x * inv + mean * inv is not (x - mean) * inv.
  Form f(13);
  std::string x = f.b.Input("x");
  std::string mean = f.Reduce("ReduceMean", x, {-1}, true);
  std::string d = f.Op("Sub", {x, mean});
  std::string var = f.Reduce("ReduceMean", f.Op("Mul", {d, d}), {-1}, true);
  std::string inv = f.Op("Reciprocal", {f.Op("Sqrt", {f.Op("Add", {var, f.Const(1e-6f)})})});
  f.b.Output(f.Op("Add", {f.Op("Mul", {x, inv}), f.Op("Mul", {mean, inv})}));
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(Count(Find(*g), PatternKind::kLayerNorm), 0);
}

// Keras's LayerNormalization at its default epsilon (>= 1.001e-5) runs TF's fused batch norm in
// training mode: x reshaped to [1, rows, D, 1], per-row mean and variance (the count from the
// shape at run time), BatchNormalization with scale 1 and bias 0, reshaped back, * gamma + beta.
// The ones/zeros and the shape computations are inputs, not members.
std::string KerasFusedLayerNorm(Form& f, const std::string& x, float scale = 1) {
  std::string big = f.Op("Reshape", {x, f.IntsInit("rows", {1, -1, 8, 1})});
  std::string m = f.Reduce("ReduceMean", big, {0, 2, 3}, true);
  std::string ss = f.Reduce("ReduceSumSquare", f.Op("Sub", {big, m}), {0, 2, 3}, false);
  std::string mq = f.Op("Squeeze", {m, f.IntsInit("sq", {0, 2, 3})});
  std::string idx = f.IntsInit("idx", {0, 2, 3});
  std::string cnt =
      f.M(f.b.Op("Cast",
                 {f.M(f.b.Op("ReduceProd", {f.Op("Gather", {f.Op("Shape", {big}), idx})},
                             [](onnx::NodeProto* n) {
                               AddIntsAttribute(n, "axes", {0});
                               SetInt(n, "keepdims", 0);
                             }))},
                 [](onnx::NodeProto* n) { SetInt(n, "to", 1); }));
  std::string v = f.Op("Div", {ss, cnt});
  std::string n8 = f.IntsInit("n8", {8});
  std::string ones = f.b.Op("Expand", {f.Init("one", {}, scale), n8});
  std::string zeros = f.b.Op("Expand", {f.Init("zero", {}, 0), n8});
  std::string bn =
      f.M(f.b.Op("BatchNormalization", {big, ones, zeros, mq, v}, [](onnx::NodeProto* n) {
        auto* a = n->add_attribute();
        a->set_name("epsilon");
        a->set_type(onnx::AttributeProto::FLOAT);
        a->set_f(1e-3f);
      }));
  std::string back = f.Op("Reshape", {bn, f.b.Op("Cast", {f.b.Op("Shape", {x})},
                                                 [](onnx::NodeProto* n) { SetInt(n, "to", 7); })});
  return f.Op("Add", {f.Op("Mul", {back, f.Init("gamma", {8}, 2)}), f.Init("beta", {8}, 1)});
}

TEST(Keras, DefaultLayerNormalizationAsFusedBatchNorm) {
  Form f(13);
  std::string x = f.b.Input("x");
  f.b.Output(KerasFusedLayerNorm(f, x));
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  const PatternInstance* ln = ExpectOne(*g, found, PatternKind::kLayerNorm, f.members);
  ASSERT_NE(ln, nullptr);
  EXPECT_EQ(ln->input->name, "x");
  EXPECT_EQ(ln->axis, -1);
  EXPECT_FLOAT_EQ(ln->epsilon, 1e-3f);
  ASSERT_NE(ln->scale, nullptr);
  EXPECT_EQ(ln->scale->name, "gamma");
  ASSERT_NE(ln->bias, nullptr);
  EXPECT_EQ(ln->bias->name, "beta");
  EXPECT_TRUE(ln->fusable);
}

TEST(Keras, BatchNormalizationWithAScaleIsNotALayerNorm) {
  // A scale inside the batch norm would be per row, not per feature: not a LayerNorm's gamma.
  Form f(13);
  std::string x = f.b.Input("x");
  f.b.Output(KerasFusedLayerNorm(f, x, /*scale=*/2));
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Find(*g).empty());
}

// ------------------------------------------------------------------------------- Paddle
// paddle2onnx's layer_norm for opset 9 .. 16: eps and the exponent 2 as unnamed Constant nodes
// of shape [1]; ReduceMean with `axes` as an attribute (begin_norm_axis = 2, positive); scale and
// bias reshaped at run time to Slice(Shape(x)), outside the instance.
TEST(Paddle, LayerNorm) {
  for (int64_t opset : {9, 11}) {
    SCOPED_TRACE(opset);
    Form f(opset);
    std::string x = f.b.Input("x");
    onnx::GraphProto* gp = f.b.graph();
    auto unnamed_const = [&](float v) {
      std::string out = absl::StrCat("const_", gp->node_size());
      onnx::NodeProto* n = AddOnnxNode(gp, "Constant", {}, {out}, "");
      auto* a = n->add_attribute();
      a->set_name("value");
      a->set_type(onnx::AttributeProto::TENSOR);
      a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
      a->mutable_t()->add_dims(1);
      a->mutable_t()->add_float_data(v);
      f.members.insert(absl::StrCat("Constant_", gp->node_size() - 1));  // Kiln's name for it
      return out;
    };
    std::string eps = unnamed_const(1e-5f), two = unnamed_const(2.0f);
    std::string mean = f.Reduce("ReduceMean", x, {2}, true);
    std::string d = f.Op("Sub", {x, mean});
    std::string var = f.Reduce("ReduceMean", f.Op("Pow", {d, two}), {2}, true);
    std::string std_dev = f.Op("Sqrt", {f.Op("Add", {var, eps})});
    std::string shp = f.b.Op("Shape", {x});
    std::string wshape;
    if (opset < 10) {
      wshape = f.b.Op("Slice", {shp}, [](onnx::NodeProto* n) {
        AddIntsAttribute(n, "axes", {0});
        AddIntsAttribute(n, "starts", {2});
        AddIntsAttribute(n, "ends", {3});
      });
    } else {
      wshape = f.b.Op("Slice",
                      {shp, f.IntsInit("st", {2}), f.IntsInit("en", {3}), f.IntsInit("ax", {0})});
    }
    std::string scale = f.b.Op("Reshape", {f.Init("scale", {8}, 1), wshape});
    std::string bias = f.b.Op("Reshape", {f.Init("bias", {8}, 0), wshape});
    std::string y = f.Op("Add", {f.Op("Mul", {f.Op("Div", {d, std_dev}), scale}), bias});
    f.b.Output(y);
    auto g = f.b.Import();
    ASSERT_NE(g, nullptr);
    auto found = Find(*g);
    const PatternInstance* ln = ExpectOne(*g, found, PatternKind::kLayerNorm, f.members);
    ASSERT_NE(ln, nullptr);
    EXPECT_FLOAT_EQ(ln->epsilon, 1e-5f);
    EXPECT_EQ(ln->axis, -1);
    ASSERT_NE(ln->scale, nullptr);
    EXPECT_EQ(ln->scale->name, scale);
    ASSERT_NE(ln->bias, nullptr);
    EXPECT_EQ(ln->bias->name, bias);
  }
}

// ------------------------------------------------------------------------------ PyTorch
// torch.var(x, -1, unbiased=False) then (x - x.mean()) / sqrt(var + eps): x - mean is computed
// twice (two ReduceMean, two Sub); the dynamo exporter's var keeps no dims and Reshapes back.
TEST(PyTorch, VarianceOpForms) {
  for (bool dynamo : {false, true}) {
    SCOPED_TRACE(dynamo);
    Form f(18);
    std::string x = f.b.Input("x");
    std::string d1 = f.Op("Sub", {x, f.Reduce("ReduceMean", x, {-1}, true)});
    std::string var = f.Reduce("ReduceMean", f.Op("Mul", {d1, d1}), {-1}, !dynamo);
    if (dynamo) var = f.Op("Reshape", {var, f.IntsInit("shape", {2, 4, 1})});
    std::string d2 = f.Op("Sub", {x, f.Reduce("ReduceMean", x, {-1}, true)});
    std::string y = f.Op("Div", {d2, f.Op("Sqrt", {f.Op("Add", {var, f.Const(1e-5f)})})});
    f.b.Output(y);
    auto g = f.b.Import();
    ASSERT_NE(g, nullptr);
    auto found = Find(*g);
    const PatternInstance* ln = ExpectOne(*g, found, PatternKind::kLayerNorm, f.members);
    ASSERT_NE(ln, nullptr);
    EXPECT_TRUE(ln->fusable);
  }
}

// Pow(var + eps, 0.5) as the standard deviation; ReduceSumSquare(d) / n as the variance.
TEST(Forms, PowHalfAndSumSquare) {
  Form f(13);
  std::string x = f.b.Input("x");
  std::string d = f.Op("Sub", {x, f.Reduce("ReduceMean", x, {-1}, true)});
  std::string var = f.Op("Div", {f.Op("ReduceSumSquare", {d}), f.Const(8)});
  std::string y =
      f.Op("Div", {d, f.Op("Pow", {f.Op("Add", {var, f.Const(1e-5f)}), f.Const(0.5f)})});
  f.b.Output(y);
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  // ReduceSumSquare without attributes reduces every axis: not a LayerNorm over the last one.
  EXPECT_TRUE(Find(*g).empty());
  Form h(13);
  x = h.b.Input("x");
  d = h.Op("Sub", {x, h.Reduce("ReduceMean", x, {-1}, true)});
  var = h.Op("Div", {h.Reduce("ReduceSumSquare", d, {-1}, true), h.Const(8)});
  y = h.Op("Div", {d, h.Op("Pow", {h.Op("Add", {var, h.Const(1e-5f)}), h.Const(0.5f)})});
  h.b.Output(y);
  auto g2 = h.b.Import();
  ASSERT_NE(g2, nullptr);
  auto found = Find(*g2);
  const PatternInstance* ln = ExpectOne(*g2, found, PatternKind::kLayerNorm, h.members);
  ASSERT_NE(ln, nullptr);
  EXPECT_TRUE(ln->fusable);
}

// RMSNorm with 1/std as Pow(mean(x^2) + eps, -0.5), gamma folded first.
TEST(Forms, RmsNormPowMinusHalf) {
  Form f(13);
  std::string x = f.b.Input("x");
  std::string ms = f.Reduce("ReduceMean", f.Op("Pow", {x, f.Const(2)}), {-1}, true);
  std::string inv = f.Op("Pow", {f.Op("Add", {ms, f.Const(1e-6f)}), f.Const(-0.5f)});
  std::string y = f.Op("Mul", {x, f.Op("Mul", {inv, f.b.Weight()})});
  f.b.Output(y);
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  const PatternInstance* rms = ExpectOne(*g, found, PatternKind::kRmsNorm, f.members);
  ASSERT_NE(rms, nullptr);
  EXPECT_NE(rms->scale, nullptr);
}

TEST(Forms, GraphInputNumeratorIsNotMistakenForGamma) {
  // RMSNorm of a graph input x: x * inv where x (a graph input, like a parameter) must be read
  // as the numerator, not as gamma.
  Form f(13);
  std::string x = f.b.Input("x");
  std::string ms = f.Reduce("ReduceMean", f.Op("Mul", {x, x}), {-1}, true);
  std::string inv = f.Op("Reciprocal", {f.Op("Sqrt", {f.Op("Add", {ms, f.Const(1e-6f)})})});
  f.b.Output(f.Op("Mul", {inv, x}));
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  const PatternInstance* rms = ExpectOne(*g, found, PatternKind::kRmsNorm, f.members);
  ASSERT_NE(rms, nullptr);
  EXPECT_EQ(rms->scale, nullptr);
}

// ---------------------------------------------------------------------------------- GELU
TEST(GeluForms, Erfc) {
  // jax: 0.5 * x * erfc(-x * sqrt(0.5)) written as 1 - erf(-x * c).
  Form f(13);
  std::string x = f.b.Input("x");
  std::string u = f.Op("Mul", {f.Op("Neg", {x}), f.Const(0.70710678f)});
  std::string p = f.Op("Sub", {f.Const(1), f.Op("Erf", {u})});
  std::string y = f.Op("Mul", {f.Op("Mul", {f.Const(0.5f), x}), p});
  f.b.Output(y);
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  const PatternInstance* gelu = ExpectOne(*g, found, PatternKind::kGelu, f.members);
  ASSERT_NE(gelu, nullptr);
  EXPECT_EQ(gelu->input->name, "x");
  EXPECT_FALSE(gelu->tanh_approximation);
}

TEST(GeluForms, HalfPlusHalfErfAndDivisionByTwo) {
  for (bool distributed : {false, true}) {
    SCOPED_TRACE(distributed);
    Form f(13);
    std::string x = f.b.Input("x");
    std::string e = f.Op("Erf", {f.Op("Div", {x, f.Const(1.41421356f)})});
    std::string y;
    if (distributed) {  // x * (0.5 + 0.5 * erf)
      y = f.Op("Mul", {x, f.Op("Add", {f.Const(0.5f), f.Op("Mul", {e, f.Const(0.5f)})})});
    } else {  // (x * (erf + 1)) / 2
      y = f.Op("Div", {f.Op("Mul", {x, f.Op("Add", {e, f.Const(1)})}), f.Const(2)});
    }
    f.b.Output(y);
    auto g = f.b.Import();
    ASSERT_NE(g, nullptr);
    auto found = Find(*g);
    ASSERT_NE(ExpectOne(*g, found, PatternKind::kGelu, f.members), nullptr);
  }
}

TEST(GeluForms, WrongSignOfTheErfArgumentIsNotAGelu) {
  // 0.5 * x * (1 + erf(-x / sqrt(2))) is x * (1 - Phi(x)), not GELU.
  Form f(13);
  std::string x = f.b.Input("x");
  std::string u = f.Op("Mul", {f.Op("Neg", {x}), f.Const(0.70710678f)});
  std::string p = f.Op("Add", {f.Const(1), f.Op("Erf", {u})});
  f.b.Output(f.Op("Mul", {f.Op("Mul", {f.Const(0.5f), x}), p}));
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Find(*g).empty());
}

TEST(GeluForms, GeluOfANegatedValueKeepsItsInput) {
  // GELU(-y): the Neg is GELU's input (the tail reads it too), not part of an erfc form.
  Form f(13);
  std::string y = f.b.Input("y");
  std::string x = f.b.Op("Neg", {y});
  std::string p = f.Op("Add", {f.Op("Erf", {f.Op("Div", {x, f.Const(1.41421356f)})}), f.Const(1)});
  f.b.Output(f.Op("Mul", {f.Op("Mul", {x, p}), f.Const(0.5f)}));
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  const PatternInstance* gelu = ExpectOne(*g, found, PatternKind::kGelu, f.members);
  ASSERT_NE(gelu, nullptr);
  EXPECT_EQ(gelu->input->name, x);
}

// jax2tf's tanh GELU: x^3 * 0.044715 as ((0.044715 * x) * x) * x; and the constants
// distributed: tanh(0.7978846 * x + 0.0356774 * Pow(x, 3)).
TEST(GeluForms, TanhPolynomials) {
  for (bool distributed : {false, true}) {
    SCOPED_TRACE(distributed);
    Form f(13);
    std::string x = f.b.Input("x");
    std::string z;
    if (distributed) {
      z = f.Op("Add", {f.Op("Mul", {f.Const(0.7978846f), x}),
                       f.Op("Mul", {f.Op("Pow", {x, f.Const(3)}), f.Const(0.035677408f)})});
    } else {
      std::string c3 = f.Op("Mul", {x, f.Op("Mul", {x, f.Op("Mul", {f.Const(0.044715f), x})})});
      z = f.Op("Mul", {f.Const(0.7978846f), f.Op("Add", {x, c3})});
    }
    std::string p = f.Op("Add", {f.Const(1), f.Op("Tanh", {z})});
    std::string y = f.Op("Mul", {x, f.Op("Mul", {f.Const(0.5f), p})});
    f.b.Output(y);
    auto g = f.b.Import();
    ASSERT_NE(g, nullptr);
    auto found = Find(*g);
    const PatternInstance* gelu = ExpectOne(*g, found, PatternKind::kGelu, f.members);
    ASSERT_NE(gelu, nullptr);
    EXPECT_TRUE(gelu->tanh_approximation);
  }
}

TEST(GeluForms, HalfPrecisionConstants) {
  // A float16 model's 1/sqrt(2) is 0.70703125, 1.1e-4 off: recognised at fp16 precision.
  Form f(13);
  std::string x = f.b.Input("x", {2, 4, 8}, onnx::TensorProto::FLOAT16);
  auto half = [&](float v) { return f.M(f.b.Scalar(v, true, onnx::TensorProto::FLOAT16)); };
  std::string p = f.Op("Add", {f.Op("Erf", {f.Op("Mul", {x, half(0.70710678f)})}), half(1)});
  std::string y = f.Op("Mul", {f.Op("Mul", {x, p}), half(0.5f)});
  ::kiln::testing::AddTensorValueInfo(f.b.graph()->mutable_output(), y, {2, 4, 8},
                                      onnx::TensorProto::FLOAT16);
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  ASSERT_NE(ExpectOne(*g, found, PatternKind::kGelu, f.members), nullptr);
}

// ------------------------------------------------------------------------------ Softmax
// jax2tf: max as GlobalMaxPool, Squeeze, Max(-inf, .), Reshape, Expand; sum without keepdims,
// Reshape, Expand. Static shapes prove the restores (fusable); a target computed at run time
// does not.
TEST(SoftmaxForms, Jax2tf) {
  for (bool symbolic : {false, true}) {
    SCOPED_TRACE(symbolic);
    Form f(13);
    std::string x = f.b.Input("x");
    std::string shape;
    if (symbolic) {
      f.b.graph()
          ->mutable_input(0)
          ->mutable_type()
          ->mutable_tensor_type()
          ->mutable_shape()
          ->mutable_dim(0)
          ->set_dim_param("batch");
      std::string lead =
          f.b.Op("Slice", {f.b.Op("Shape", {x}), f.IntsInit("s0", {0}), f.IntsInit("s1", {1})});
      shape = f.b.Op("Concat", {lead, f.IntsInit("four", {4}), f.IntsInit("one", {1})},
                     [](onnx::NodeProto* n) { SetInt(n, "axis", 0); });
    } else {
      shape = f.IntsInit("shape", {2, 4, 1});
    }
    std::string ax = f.IntsInit("ax", {2});
    std::string mx = f.Op(
        "Max", {f.Init("minf", {}, -INFINITY), f.Op("Squeeze", {f.Op("GlobalMaxPool", {x}), ax})});
    mx = f.Op("Expand", {f.Op("Reshape", {mx, shape}), shape});
    std::string e = f.Op("Exp", {f.Op("Sub", {x, mx})});
    std::string s = f.Reduce("ReduceSum", e, {2}, false);
    s = f.Op("Expand", {f.Op("Reshape", {s, shape}), shape});
    std::string y = f.Op("Div", {e, s});
    f.b.Output(y);
    auto g = f.b.Import();
    ASSERT_NE(g, nullptr);
    auto found = Find(*g);
    const PatternInstance* sm = ExpectOne(*g, found, PatternKind::kSoftmax, f.members);
    ASSERT_NE(sm, nullptr);
    EXPECT_EQ(sm->axis, -1);
    EXPECT_EQ(sm->input->name, "x");
    EXPECT_EQ(sm->fusable, !symbolic);
  }
}

TEST(SoftmaxForms, TimesReciprocalOfTheSum) {
  Form f(13);
  std::string x = f.b.Input("x");
  std::string e = f.Op("Exp", {f.Op("Sub", {x, f.Reduce("ReduceMax", x, {-1}, true)})});
  std::string y = f.Op("Mul", {e, f.Op("Reciprocal", {f.Reduce("ReduceSum", e, {-1}, true)})});
  f.b.Output(y);
  auto g = f.b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  const PatternInstance* sm = ExpectOne(*g, found, PatternKind::kSoftmax, f.members);
  ASSERT_NE(sm, nullptr);
  EXPECT_EQ(sm->axis, -1);
}

}  // namespace
}  // namespace kiln::precision
