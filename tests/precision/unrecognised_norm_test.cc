// Issue 28: a `pattern:layernorm` rule that misses a normalisation must say so. The model here
// normalises as the Annotated Transformer does, (x - mean) / (std + eps) with the unbiased std
// (sum of squares / (n - 1)): not a LayerNorm the matcher recognises (nor should it: a fused
// LayerNormalization would compute something else), yet its sum of squares overflows in fp16
// like any LayerNorm's. The build warns and names the reduction and its precision.
#include <string>
#include <vector>

#include "engine/builder/builder.h"
#include "engine/precision/assign.h"
#include "engine/precision/policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/precision/pattern_testing.h"

namespace kiln::precision {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::ModelBuilder;

// x [2, 4, 8]: (x - mean) / (sqrt(sum((x - mean)^2) / 7) + eps) * a + b; the sum node is
// named "std/ReduceSum".
std::string AnnotatedTransformerNorm(bool recognised_form = false) {
  ModelBuilder b(13);
  std::string x = b.Input("x");
  std::string d = b.Op("Sub", {x, b.Op("ReduceMean", {x}, [](onnx::NodeProto* n) {
                                 ::kiln::testing::AddIntsAttribute(n, "axes", {-1});
                               })});
  std::string sq = b.Op("Mul", {d, d});
  onnx::NodeProto* sum = ::kiln::testing::AddOnnxNode(b.graph(), "ReduceSum", {sq, b.Ints({-1})},
                                                      {"sum"}, "std/ReduceSum");
  (void)sum;
  std::string y;
  if (recognised_form) {  // the same statistics as PyTorch's LayerNorm writes them
    std::string var = b.Op("Div", {"sum", b.Scalar(8)});
    y = b.Op("Div", {d, b.Op("Sqrt", {b.Op("Add", {var, b.Scalar(1e-6f)})})});
  } else {
    std::string std_dev = b.Op("Sqrt", {b.Op("Div", {"sum", b.Scalar(7)})});
    y = b.Op("Div", {d, b.Op("Add", {std_dev, b.Scalar(1e-6f)})});
  }
  y = b.Op("Add", {b.Op("Mul", {y, b.Weight()}), b.Weight()});
  b.Output(y);
  return b.Bytes();
}

absl::StatusOr<Assignment> Assign(const ir::Graph& g, Policy policy, Constraints c) {
  return AssignPrecision(g, policy, FindPatterns(g), c, Typing::kAuto, nullptr);
}

std::unique_ptr<ir::Graph> Import(const std::string& bytes) {
  auto g = import::ImportModel(bytes, import::ImportOptions{});
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::move(*g) : nullptr;
}

TEST(UnrecognisedNorm, PresetRuleThatMissesItWarnsNamingTheReduction) {
  auto g = Import(AnnotatedTransformerNorm());
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(testing::Count(FindPatterns(*g), PatternKind::kLayerNorm), 0);
  for (const char* preset : {"fp32-layernorm", "bf16-layernorm"}) {
    auto policy = Preset(preset);
    ASSERT_TRUE(policy.ok());
    auto a = Assign(*g, *policy, Constraints::kObey);  // a preset's rule need not match
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_EQ(a->warnings.size(), 1u) << preset;
    EXPECT_THAT(a->warnings[0],
                AllOf(HasSubstr("pattern:layernorm = fp32"), HasSubstr("matches no node"),
                      HasSubstr("[node 'std/ReduceSum' (ReduceSum)"),
                      HasSubstr(std::string("assigned ") + (preset[0] == 'f' ? "fp16" : "bf16")),
                      HasSubstr("feeding [node 'Sqrt_")));
  }
}

TEST(UnrecognisedNorm, NoWarningWhenTheReductionIsFp32OrRecognised) {
  // fp16-safe pins ReduceSum to fp32 by op: nothing is left in reduced precision.
  auto g = Import(AnnotatedTransformerNorm());
  ASSERT_NE(g, nullptr);
  auto safe = Preset("fp16-safe");
  ASSERT_TRUE(safe.ok());
  auto a = Assign(*g, *safe, Constraints::kObey);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->warnings.empty()) << a->warnings[0];
  // The LayerNorm form the matcher knows: covered by the rule, no warning.
  auto known = Import(AnnotatedTransformerNorm(/*recognised_form=*/true));
  ASSERT_NE(known, nullptr);
  EXPECT_EQ(testing::Count(FindPatterns(*known), PatternKind::kLayerNorm), 1);
  auto ln = Preset("fp32-layernorm");
  ASSERT_TRUE(ln.ok());
  auto b = Assign(*known, *ln, Constraints::kObey);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->warnings.empty()) << b->warnings[0];
}

TEST(UnrecognisedNorm, UserRuleThatMatchesNothingNamesTheReductionInItsError) {
  auto g = Import(AnnotatedTransformerNorm());
  ASSERT_NE(g, nullptr);
  Policy p;
  p.name = "custom";
  p.base = Precision::kFp16;
  ASSERT_TRUE(AddRuleFlags(p, {"pattern:layernorm=fp32"}).ok());
  auto obey = Assign(*g, p, Constraints::kObey);
  ASSERT_FALSE(obey.ok());
  EXPECT_THAT(std::string(obey.status().message()),
              AllOf(HasSubstr("matches no node"), HasSubstr("did not recognise"),
                    HasSubstr("[node 'std/ReduceSum' (ReduceSum)")));
  auto prefer = Assign(*g, p, Constraints::kPrefer);
  ASSERT_TRUE(prefer.ok()) << prefer.status();
  ASSERT_EQ(prefer->warnings.size(), 1u);  // the one message, not a second warning
  EXPECT_THAT(prefer->warnings[0], HasSubstr("[node 'std/ReduceSum' (ReduceSum)"));
}

TEST(UnrecognisedNorm, TheWarningIsABuildWarning) {
  builder::BuildOptions o;
  o.policy = "fp32-layernorm";
  auto r = builder::BuildEngine(AnnotatedTransformerNorm(), o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  bool found = false;
  for (const std::string& w : r->summary.warnings) {
    found |= w.find("[node 'std/ReduceSum' (ReduceSum)") != std::string::npos;
  }
  EXPECT_TRUE(found);
  EXPECT_THAT(builder::SummaryText(r->summary), HasSubstr("warning: 'pattern:layernorm = fp32"));
}

}  // namespace
}  // namespace kiln::precision
