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

// Hostile rules (issue 27): one `re:` rule must neither exhaust the stack nor run for long.
// 20,000 nested groups (about 40 KB) overflowed the stack of the std::regex compiler, in the
// server process; now the nesting is counted by a loop and refused.
TEST(PolicyTest, DeeplyNestedRegexIsRefusedWithoutRecursion) {
  std::string deep = "re:" + std::string(20000, '(') + "a" + std::string(20000, ')') + " = fp16";
  auto r = ParseRule(deep, "--rule 1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  // The message quotes an excerpt, not the 40 KB rule.
  EXPECT_LT(r.status().message().size(), 300u);
  // Within the length bound, 2,000 nested groups are refused by the nesting bound.
  std::string nested = "re:" + std::string(2000, '(') + "a" + std::string(2000, ')') + " = fp16";
  ASSERT_LE(nested.size(), kMaxRuleBytes);
  r = ParseRule(nested, "--rule 1");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(
      std::string(r.status().message()),
      HasSubstr("--rule 1:1:104: regular expression '((((((((((((((((((((((((((((((((((((((((... "
                "(4001 bytes)' nests deeper than 100 groups"));
  // Brackets count as nesting too; escaped ones and ones inside a class do not.
  std::string classes = "re:";
  for (int i = 0; i < 200; ++i) classes += "[(]\\(";
  EXPECT_TRUE(ParseRule(classes + " = fp16", "--rule 1").ok());
  std::string at_limit = "re:" + std::string(100, '(') + "a" + std::string(100, ')') + " = fp16";
  EXPECT_TRUE(ParseRule(at_limit, "--rule 1").ok());
  std::string past = "re:" + std::string(101, '(') + "a" + std::string(101, ')') + " = fp16";
  EXPECT_FALSE(ParseRule(past, "--rule 1").ok());
}

TEST(PolicyTest, RulesAreBoundedInLengthAndCount) {
  std::string long_glob = "name:" + std::string(kMaxRuleBytes, '*') + " = fp16";
  auto r = ParseRule(long_glob, "--rule 1");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("longer than 4096 bytes"));
  EXPECT_LT(r.status().message().size(), 300u);
  std::string many;
  for (size_t i = 0; i <= kMaxRules; ++i) many += "op:Relu = fp16\n";
  auto p = ParsePolicyText(many, "f");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("f:10001:1: a policy holds at most"));
  Policy flags = *Preset("fp16");
  EXPECT_FALSE(AddRuleFlags(flags, std::vector<std::string>(kMaxRules + 1, "op:Relu=fp16")).ok());
}

// RE2 matches in time linear in the name: `(a+)+$` against forty a's and a '!' backtracked
// for ever under std::regex (2^40 paths), and `(a|b)*` over 200,000 characters overflowed its
// recursive matcher's stack. Both answer at once now (a hang or a crash fails the test).
TEST(PolicyTest, RegexMatchingIsLinearTime) {
  auto catastrophic = ParseRule("re:(a+)+$ = fp16", "--rule 1");
  ASSERT_TRUE(catastrophic.ok()) << catastrophic.status();
  EXPECT_FALSE(RuleMatchesName(*catastrophic, std::string(40, 'a') + "!"));
  EXPECT_TRUE(RuleMatchesName(*catastrophic, std::string(40, 'a')));
  auto star = ParseRule("re:(a|b)* = fp16", "--rule 1");
  ASSERT_TRUE(star.ok()) << star.status();
  std::string huge(200000, 'a');
  EXPECT_TRUE(RuleMatchesName(*star, huge));
  huge[100000] = 'c';
  EXPECT_FALSE(RuleMatchesName(*star, huge));
}

TEST(PolicyTest, RegexRulesMatchWholeNames) {
  auto r = ParseRule(R"(re:^/encoder/layer\.(10|11)/.* = fp16)", "--rule 1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(RuleMatchesName(*r, "/encoder/layer.10/attention/MatMul"));
  EXPECT_FALSE(RuleMatchesName(*r, "/encoder/layer.12/attention/MatMul"));
  EXPECT_FALSE(RuleMatchesName(*r, "x/encoder/layer.10/a"));  // a full match, not a search
  auto partial = ParseRule("re:layer = fp16", "--rule 1");
  ASSERT_TRUE(partial.ok());
  EXPECT_FALSE(RuleMatchesName(*partial, "/encoder/layer.1"));
  EXPECT_TRUE(RuleMatchesName(*partial, "layer"));
  // RE2 syntax: backreferences are not supported, and say so.
  auto backref = ParseRule(R"(re:(a)\1 = fp16)", "--rule 1");
  ASSERT_FALSE(backref.ok());
  EXPECT_THAT(std::string(backref.status().message()), HasSubstr("RE2 syntax"));
  // Copies share the compiled expression.
  Rule copy = *r;
  EXPECT_TRUE(RuleMatchesName(copy, "/encoder/layer.11/x"));
}

// A policy file saved by a Windows editor: a UTF-8 byte-order mark and CRLF line ends.
TEST(PolicyTest, AcceptsByteOrderMarkAndCrlf) {
  auto p = ParsePolicyText(
      "\xEF\xBB\xBFop:Softmax = fp32\r\nbase = fp16\r\n# c\r\nname:a* = bf16\r\n", "win.txt");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->base, Precision::kFp16);
  ASSERT_EQ(p->rules.size(), 2u);
  EXPECT_EQ(p->rules[0].pattern, "Softmax");
  EXPECT_EQ(p->rules[0].origin, "win.txt:1:1");
  EXPECT_EQ(p->rules[1].pattern, "a*");
  EXPECT_EQ(p->rules[1].precision, Precision::kBf16);
  auto bom_then_base = ParsePolicyText(
      "\xEF\xBB\xBF"
      "base = bf16\r\n",
      "win.txt");
  ASSERT_TRUE(bom_then_base.ok()) << bom_then_base.status();
  EXPECT_EQ(bom_then_base->base, Precision::kBf16);
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
