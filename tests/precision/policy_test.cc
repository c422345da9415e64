// The policy language of DESIGN.md §6: presets, rules, files, errors with line and column, globs.
#include "engine/precision/policy.h"

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::precision {
namespace {

using ::testing::HasSubstr;

TEST(PolicyTest, PresetsHaveTheDocumentedMeaning) {
  auto p = Preset("fp32-layernorm");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->base, Precision::kFp16);
  ASSERT_EQ(p->rules.size(), 1u);
  EXPECT_EQ(p->rules[0].kind, SelectorKind::kPattern);
  EXPECT_EQ(p->rules[0].pattern, "layernorm");
  EXPECT_EQ(p->rules[0].precision, Precision::kFp32);
  EXPECT_FALSE(p->rules[0].must_match);  // a CNN without LayerNorm is fine
  EXPECT_EQ(Preset("bf16-layernorm")->base, Precision::kBf16);
  EXPECT_EQ(Preset("fp16")->base, Precision::kFp16);
  EXPECT_EQ(Preset("bf16")->base, Precision::kBf16);
  EXPECT_TRUE(Preset("fp32")->rules.empty());
  auto safe = Preset("fp16-safe");
  ASSERT_TRUE(safe.ok());
  std::string canon = safe->Canonical();
  for (const char* want :
       {"pattern:layernorm = fp32", "pattern:rmsnorm = fp32", "pattern:softmax = fp32",
        "op:Pow = fp32", "op:Exp = fp32", "op:Log = fp32", "op:ReduceSum = fp32"}) {
    EXPECT_THAT(canon, HasSubstr(want));
  }
  auto bad = Preset("fp8");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("fp32-layernorm"));
}

TEST(PolicyTest, ParsesEverySelectorKind) {
  auto p = ParsePolicyText(R"(# a policy
base = fp16
op:LayerNormalization = fp32
name:/encoder/layer.*/attention/* = fp32   # trailing comment
re:^/encoder/layer\.(10|11)/.* = bf16
scope:/encoder/layer.3/ = bf16
pattern:gelu = fp32
)",
                           "p.txt");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->base, Precision::kFp16);
  ASSERT_EQ(p->rules.size(), 5u);
  EXPECT_EQ(p->rules[0].kind, SelectorKind::kOp);
  EXPECT_EQ(p->rules[1].kind, SelectorKind::kName);
  EXPECT_EQ(p->rules[1].pattern, "/encoder/layer.*/attention/*");
  EXPECT_EQ(p->rules[2].kind, SelectorKind::kRegex);
  EXPECT_EQ(p->rules[2].pattern, R"(^/encoder/layer\.(10|11)/.*)");
  EXPECT_EQ(p->rules[2].precision, Precision::kBf16);
  EXPECT_EQ(p->rules[3].kind, SelectorKind::kScope);
  EXPECT_EQ(p->rules[4].kind, SelectorKind::kPattern);
  EXPECT_EQ(p->rules[1].origin, "p.txt:4:1");
  EXPECT_TRUE(p->rules[1].must_match);
}

TEST(PolicyTest, PresetInAFileThenMoreRules) {
  auto p = ParsePolicyText("preset = fp32-layernorm\nop:Softmax = fp32\n", "f");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->base, Precision::kFp16);
  ASSERT_EQ(p->rules.size(), 2u);
  EXPECT_EQ(p->rules[0].pattern, "layernorm");
  EXPECT_EQ(p->rules[1].pattern, "Softmax");
}

// Each error names file, line and column of the offending token.
TEST(PolicyTest, ErrorsCarryLineAndColumn) {
  struct Case {
    const char* text;
    const char* where;
    const char* what;
  } cases[] = {
      {"base = fp16\nop:Softmax = fp64\n", "f:2:14", "unknown precision 'fp64'"},
      {"\n  layer:foo = fp32\n", "f:2:3", "unknown selector kind 'layer'"},
      {"op:Softmax fp32\n", "f:1:1", "expected 'SELECTOR = PRECISION'"},
      {"pattern:layernrom = fp32\n", "f:1:9", "unknown pattern 'layernrom'"},
      {"re:([a-z = fp32\n", "f:1:4", "invalid regular expression"},
      {"base = fp16\nbase = fp32\n", "f:2:1", "'base' is given twice"},
      {"op:Relu = fp16\npreset = fp16\n", "f:2:1", "'preset' must come before"},
      {"Softmax = fp32\n", "f:1:1", "needs a kind"},
      {"op: = fp32\n", "f:1:4", "is empty"},
  };
  for (const Case& c : cases) {
    auto p = ParsePolicyText(c.text, "f");
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.where)) << c.text;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.what)) << c.text;
  }
}

TEST(PolicyTest, RuleFlagsAppendInOrder) {
  Policy p = *Preset("fp16");
  ASSERT_TRUE(AddRuleFlags(p, {"op:MatMul = bf16", "name:/a/* = fp32"}).ok());
  ASSERT_EQ(p.rules.size(), 2u);
  EXPECT_EQ(p.rules[0].origin, "--rule 1");
  EXPECT_EQ(p.rules[1].precision, Precision::kFp32);
  auto bad = AddRuleFlags(p, {"op:MatMul == fp16"});
  EXPECT_FALSE(bad.ok());
}

TEST(PolicyTest, LoadPolicyTakesPresetsOrFiles) {
  EXPECT_EQ(LoadPolicy("bf16")->base, Precision::kBf16);
  std::string path = ::testing::TempDir() + "/kiln_policy_test.txt";
  {
    std::ofstream f(path);
    f << "base = bf16\nop:Softmax = fp32\n";
  }
  auto p = LoadPolicy(path);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->base, Precision::kBf16);
  EXPECT_EQ(p->rules[0].origin, path + ":2:1");
  std::remove(path.c_str());
  auto missing = LoadPolicy("/nonexistent/policy.txt");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("neither a preset"));
}

TEST(GlobTest, MatchesWhatAGlobShould) {
  EXPECT_TRUE(GlobMatch("LayerNormalization_*", "LayerNormalization_0"));
  EXPECT_TRUE(GlobMatch("LayerNormalization_*", "LayerNormalization_"));
  EXPECT_FALSE(GlobMatch("LayerNormalization_*", "/encoder/LayerNormalization_0"));
  EXPECT_TRUE(GlobMatch("*LayerNormalization*", "/encoder/layer.0/LayerNormalization"));
  EXPECT_TRUE(GlobMatch("/encoder/layer.*/attention/*", "/encoder/layer.11/attention/MatMul"));
  EXPECT_FALSE(GlobMatch("/encoder/layer.*/attention/*", "/encoder/layer.11/ffn/MatMul"));
  EXPECT_TRUE(GlobMatch("n?de", "node"));
  EXPECT_FALSE(GlobMatch("n?de", "nde"));
  EXPECT_TRUE(GlobMatch("layer.[0-3]/*", "layer.2/x"));
  EXPECT_FALSE(GlobMatch("layer.[0-3]/*", "layer.7/x"));
  EXPECT_TRUE(GlobMatch("layer.[!0-3]/*", "layer.7/x"));
  EXPECT_TRUE(GlobMatch("a*b*c", "aXXbYYbZc"));
  EXPECT_FALSE(GlobMatch("a*b*c", "aXXbYYbZ"));
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_FALSE(GlobMatch("", "x"));
}

}  // namespace
}  // namespace kiln::precision
