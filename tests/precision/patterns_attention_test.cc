// Pattern recognition of Softmax and attention, and exact instance counts on the PyTorch exports
// under tests/models.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/precision/patterns.h"
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

// -------------------------------------------------------------------------------- Softmax
TEST(Softmax, Op) {
  ModelBuilder b(13);
  std::string x = b.Input("x");
  b.Output(b.Op("Softmax", {x}, [](onnx::NodeProto* n) { SetInt(n, "axis", 1); }));
  auto g = b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, PatternKind::kSoftmax);
  EXPECT_TRUE(found[0].is_op);
  EXPECT_EQ(found[0].axis, 1);
}

TEST(Softmax, LogSoftmaxIsNotSoftmax) {
  ModelBuilder b(13);
  std::string x = b.Input("x");
  b.Output(b.Op("LogSoftmax", {x}));
  auto g = b.Import();
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Find(*g).empty());
}

TEST(Softmax, Decomposed) {
  for (int64_t opset : {12, 17, 18}) {
    for (bool max : {true, false}) {
      SCOPED_TRACE(absl::StrCat("opset ", opset, " max ", max));
      ModelBuilder b(opset);
      std::string x = b.Input("x");
      std::string s = max ? b.Op("Sub", {x, b.Reduce("ReduceMax", x)}) : x;
      std::string e = b.Op("Exp", {s});
      b.Output(b.Op("Div", {e, b.Reduce("ReduceSum", e)}));
      auto g = b.Import();
      ASSERT_NE(g, nullptr);
      auto found = Find(*g);
      ASSERT_EQ(found.size(), 1u);
      EXPECT_EQ(found[0].kind, PatternKind::kSoftmax);
      EXPECT_FALSE(found[0].is_op);
      EXPECT_EQ(found[0].axis, -1);
      EXPECT_EQ(found[0].input->name, "x");
      EXPECT_EQ(found[0].nodes.size(), g->nodes().size());
    }
  }
}

TEST(Softmax, ExpUsedElsewhereOrAxesDifferIsNotAnInstance) {
  {
    ModelBuilder b(17);
    std::string x = b.Input("x");
    std::string e = b.Op("Exp", {x});
    b.Output(b.Op("Div", {e, b.Reduce("ReduceSum", e)}));
    b.Output(b.Op("Relu", {e}));
    auto g = b.Import();
    ASSERT_NE(g, nullptr);
    EXPECT_TRUE(Find(*g).empty());
  }
  {
    ModelBuilder b(17);
    std::string x = b.Input("x");
    std::string e = b.Op("Exp", {b.Op("Sub", {x, b.Reduce("ReduceMax", x, {1})})});
    b.Output(b.Op("Div", {e, b.Reduce("ReduceSum", e, {-1})}));
    auto g = b.Import();
    ASSERT_NE(g, nullptr);
    EXPECT_TRUE(Find(*g).empty());
  }
}

// ------------------------------------------------------------------------------ Attention
enum class Scale { kNone, kDiv, kMul, kMulConstFirst };
enum class Mask { kNone, kAdd, kWhere };

// q: [2,4,8,16], kt: [2,4,16,8], v: [2,4,8,16].
std::unique_ptr<ir::Graph> BuildAttention(
    Scale scale, Mask mask, bool decomposed_softmax,
    const std::function<void(ModelBuilder&, const std::string&)>& hook = nullptr) {
  ModelBuilder b(17);
  std::string q = b.Input("q", {2, 4, 8, 16}), kt = b.Input("kt", {2, 4, 16, 8});
  std::string v = b.Input("v", {2, 4, 8, 16});
  std::string s = b.Op("MatMul", {q, kt});
  std::string scores = s;
  switch (scale) {
    case Scale::kNone:
      break;
    case Scale::kDiv:
      s = b.Op("Div", {s, b.Scalar(4)});
      break;
    case Scale::kMul:
      s = b.Op("Mul", {s, b.Scalar(0.25f)});
      break;
    case Scale::kMulConstFirst:
      s = b.Op("Mul", {b.Scalar(0.25f), s});
      break;
  }
  if (mask == Mask::kAdd) {
    s = b.Op("Add", {s, b.Input("mask", {2, 1, 1, 8})});
  } else if (mask == Mask::kWhere) {
    s = b.Op("Where", {b.Input("cond", {8, 8}, onnx::TensorProto::BOOL), b.Scalar(-INFINITY), s});
  }
  std::string p;
  if (decomposed_softmax) {
    std::string e = b.Op("Exp", {b.Op("Sub", {s, b.Reduce("ReduceMax", s)})});
    p = b.Op("Div", {e, b.Reduce("ReduceSum", e)});
  } else {
    p = b.Op("Softmax", {s}, [](onnx::NodeProto* n) { SetInt(n, "axis", -1); });
  }
  std::string out = b.Op("MatMul", {p, v});
  if (hook) hook(b, scores);
  b.Output(out, {2, 4, 8, 16});
  return b.Import();
}

TEST(Attention, Forms) {
  for (Scale scale : {Scale::kNone, Scale::kDiv, Scale::kMul, Scale::kMulConstFirst}) {
    for (Mask mask : {Mask::kNone, Mask::kAdd, Mask::kWhere}) {
      for (bool decomposed : {false, true}) {
        SCOPED_TRACE(absl::StrCat("scale ", static_cast<int>(scale), " mask ",
                                  static_cast<int>(mask), " decomposed ", decomposed));
        auto g = BuildAttention(scale, mask, decomposed);
        ASSERT_NE(g, nullptr);
        auto found = Find(*g);
        ASSERT_EQ(found.size(), 2u);
        EXPECT_EQ(found[0].kind, PatternKind::kSoftmax);
        EXPECT_EQ(found[0].is_op, !decomposed);
        const PatternInstance& a = found[1];
        EXPECT_EQ(a.kind, PatternKind::kAttention);
        EXPECT_FALSE(a.is_op);
        EXPECT_EQ(a.nodes.size(), g->nodes().size());  // the whole graph
        EXPECT_EQ(a.input->name, "q");
        EXPECT_EQ(a.key->name, "kt");
        EXPECT_EQ(a.value->name, "v");
        EXPECT_FLOAT_EQ(a.attention_scale, scale == Scale::kNone ? 1.0f : 0.25f);
        switch (mask) {
          case Mask::kNone:
            EXPECT_EQ(a.mask, nullptr);
            break;
          case Mask::kAdd:
            ASSERT_NE(a.mask, nullptr);
            EXPECT_EQ(a.mask->name, "mask");
            EXPECT_FALSE(a.mask_is_condition);
            break;
          case Mask::kWhere:
            ASSERT_NE(a.mask, nullptr);
            EXPECT_EQ(a.mask->name, "cond");
            EXPECT_TRUE(a.mask_is_condition);
            EXPECT_TRUE(std::isinf(a.mask_fill) && a.mask_fill < 0);
            break;
        }
      }
    }
  }
}

TEST(Attention, ScoresUsedElsewhereIsOnlyASoftmax) {
  auto g =
      BuildAttention(Scale::kDiv, Mask::kAdd, false, [](ModelBuilder& b, const std::string& s) {
        b.Output(b.Op("Relu", {s}), {2, 4, 8, 8});
      });
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  EXPECT_EQ(Count(found, PatternKind::kSoftmax), 1);
  EXPECT_EQ(Count(found, PatternKind::kAttention), 0);
}

TEST(Attention, Op) {
  ModelBuilder b(23);
  std::string q = b.Input("q", {2, 4, 8, 16}), k = b.Input("k", {2, 4, 8, 16});
  std::string v = b.Input("v", {2, 4, 8, 16});
  b.Output(b.Op("Attention", {q, k, v}), {2, 4, 8, 16});
  auto g = b.Import();
  ASSERT_NE(g, nullptr);
  auto found = Find(*g);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, PatternKind::kAttention);
  EXPECT_TRUE(found[0].is_op);
  EXPECT_EQ(found[0].key->name, "k");
  EXPECT_EQ(found[0].value->name, "v");
  EXPECT_EQ(found[0].mask, nullptr);
  EXPECT_FLOAT_EQ(found[0].attention_scale, 0.25f);  // 1/sqrt(head size 16)
}

// ------------------------------------------------------------------- PyTorch exports
struct ModelCounts {
  std::string name;
  int layernorm, layernorm_op, rmsnorm, gelu, gelu_tanh, softmax, attention, attention_where;
};

class PyTorchModelPatternsTest : public ::testing::TestWithParam<ModelCounts> {};

TEST_P(PyTorchModelPatternsTest, ExactCounts) {
  const ModelCounts& c = GetParam();
  std::string path = absl::StrCat(KILN_SOURCE_DIR, "/tests/models/", c.name, "/model.onnx");
  auto g = import::ImportModelFile(path, import::ImportOptions{});
  ASSERT_TRUE(g.ok()) << g.status();
  auto found = Find(**g);
  int ln_op = 0, tanh = 0, where = 0;
  for (const auto& i : found) {
    ln_op += i.kind == PatternKind::kLayerNorm && i.is_op;
    tanh += i.kind == PatternKind::kGelu && i.tanh_approximation;
    where += i.kind == PatternKind::kAttention && i.mask_is_condition;
    if (i.kind == PatternKind::kLayerNorm && !i.is_op) {
      // The exports' decomposed LayerNorm: eps 1e-5, last axis, gamma and beta, and its five
      // ops plus Pow, eps (and opset 18: two axes) Constant nodes.
      EXPECT_FLOAT_EQ(i.epsilon, 1e-5f);
      EXPECT_EQ(i.axis, -1);
      EXPECT_NE(i.scale, nullptr);
      EXPECT_NE(i.bias, nullptr);
      EXPECT_EQ(i.nodes.size(), (*g)->opset() >= 18 ? 13u : 11u);
    }
    if (i.kind == PatternKind::kAttention) {
      EXPECT_NEAR(i.attention_scale, 1 / std::sqrt(8.0), 1e-6);  // head size 8
    }
  }
  EXPECT_EQ(Count(found, PatternKind::kLayerNorm), c.layernorm);
  EXPECT_EQ(ln_op, c.layernorm_op);
  EXPECT_EQ(Count(found, PatternKind::kRmsNorm), c.rmsnorm);
  EXPECT_EQ(Count(found, PatternKind::kGelu), c.gelu);
  EXPECT_EQ(tanh, c.gelu_tanh);
  EXPECT_EQ(Count(found, PatternKind::kSoftmax), c.softmax);
  EXPECT_EQ(Count(found, PatternKind::kAttention), c.attention);
  EXPECT_EQ(where, c.attention_where);
}

// Each transformer has 2 layers x 2 LayerNorms + a final one, one GELU and one attention per
// layer. gpt2_causal masks its scores with Where(triu(ones) , -inf, scores).
INSTANTIATE_TEST_SUITE_P(
    Models, PyTorchModelPatternsTest,
    ::testing::Values(ModelCounts{"bert_layernorm_op", 5, 5, 0, 2, 0, 2, 2, 0},
                      ModelCounts{"bert_layernorm_decomposed", 5, 0, 0, 2, 0, 2, 2, 0},
                      ModelCounts{"bert_layernorm_decomposed_opset18", 5, 0, 0, 2, 0, 2, 2, 0},
                      ModelCounts{"gpt2_causal", 5, 5, 0, 2, 2, 2, 2, 2},
                      ModelCounts{"vit_tiny", 5, 5, 0, 2, 0, 2, 2, 0},
                      ModelCounts{"vit_tiny_opset18_ir10", 5, 5, 0, 2, 0, 2, 2, 0},
                      ModelCounts{"mobilenet_tiny", 0, 0, 0, 0, 0, 0, 0, 0},
                      ModelCounts{"squeezenet_tiny", 0, 0, 0, 0, 0, 0, 0, 0}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace kiln::precision
