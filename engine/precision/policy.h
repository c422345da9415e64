// The policy language (DESIGN.md §6, contract): a base precision plus ordered rules
// `SELECTOR = PRECISION`; later rules override earlier ones for the nodes they match.
//
//   # comment
//   base = fp16                      (or: preset = fp32-layernorm, which sets base and rules)
//   op:LayerNormalization = fp32
//   name:/encoder/layer.*/attention/* = fp32
//   re:^/encoder/layer\.(10|11)/.* = fp16
//   scope:/encoder/layer.3/ = bf16
//   pattern:layernorm = fp32
//
// Presets: fp32, fp16, bf16, fp32-layernorm, bf16-layernorm, fp16-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/precision/precision.h"

namespace re2 {
class RE2;
}  // namespace re2

namespace kiln::precision {

/// Bounds on what a policy may ask of the matcher, so that one rule (a `--rule` flag, a policy
/// file, a server request) can neither exhaust the stack nor run for long. Every node name is
/// tested against every rule, so the rule count and a rule's length bound the matching work;
/// the nesting bound keeps a `re:` rule's parse shallow (RE2 itself matches in linear time and
/// bounded memory).
inline constexpr size_t kMaxRuleBytes = 4096;  ///< one rule, as written
inline constexpr int kMaxRegexNesting = 100;   ///< nested groups / brackets in a `re:` rule
inline constexpr size_t kMaxRules = 10000;     ///< rules in one policy (file + flags)

enum class SelectorKind { kOp, kName, kRegex, kScope, kPattern };

/// "op", "name", "re", "scope", "pattern".
const char* SelectorKindName(SelectorKind k);

/// One rule, with where it was written so errors and `kiln explain` can point at it.
struct Rule {
  SelectorKind kind = SelectorKind::kOp;
  std::string pattern;  // the text after "kind:" (op type, glob, regex, prefix, pattern)
  Precision precision = Precision::kFp32;
  std::string text;    // the rule as written, trimmed ("op:Softmax = fp32")
  std::string origin;  // "policy.txt:3:1", "--rule 2", "preset fp32-layernorm"
  /// Rules a user wrote must match a node (an error under `obey`); a preset's rules need not
  /// (fp32-layernorm on a CNN without LayerNorm is fine).
  bool must_match = true;
  /// The compiled expression of a `re:` rule (RE2 syntax, full match), shared by copies.
  std::shared_ptr<const re2::RE2> regex;
};

/// A parsed policy.
struct Policy {
  std::string name;  // preset name or file path; "custom" for rules only
  /// True for the default policy (no --policy given): fp32 for fp32 models, and for a model
  /// authored in mixed precision its authored types, without a conflict.
  bool implicit = false;
  Precision base = Precision::kFp32;
  std::vector<Rule> rules;

  /// A canonical text form (base and rules in order), stable for caching and the engine blob.
  std::string Canonical() const;
};

/// The names of the shipped presets.
std::vector<std::string> PresetNames();

/// A shipped preset; InvalidArgument listing the presets for an unknown name.
absl::StatusOr<Policy> Preset(absl::string_view name);

/// Parses policy file contents. `origin` names the file in errors and rule origins. Errors are
/// InvalidArgument "ORIGIN:LINE:COL: message".
absl::StatusOr<Policy> ParsePolicyText(absl::string_view text, const std::string& origin);

/// Parses one `SELECTOR = PRECISION` rule (a `--rule` flag). `origin` as above; `line` and
/// `column` locate the rule's first character in its source.
absl::StatusOr<Rule> ParseRule(absl::string_view text, const std::string& origin, int line = 1,
                               int column = 1);

/// `--policy` argument: a preset name, or a path to a policy file.
absl::StatusOr<Policy> LoadPolicy(const std::string& preset_or_path);

/// Appends `--rule` flags (in order, after the policy's own rules).
absl::Status AddRuleFlags(Policy& policy, const std::vector<std::string>& rules);

/// Glob match of a whole node name: `*` any run (including '/'), `?` one character, `[...]` a
/// character class (`[!...]` or `[^...]` negated, ranges `a-z`).
bool GlobMatch(absl::string_view glob, absl::string_view text);

/// Whether `rule` selects a node of this name (op and pattern rules select by other means and
/// answer false here).
bool RuleMatchesName(const Rule& rule, absl::string_view name);

}  // namespace kiln::precision
