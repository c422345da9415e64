#include "engine/precision/policy.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/import/onnx_importer.h"
#include "engine/precision/patterns.h"
#include "re2/re2.h"

namespace kiln::precision {
namespace {

struct PresetDef {
  const char* name;
  Precision base;
  std::vector<const char*> rules;
};

// The shipped presets (DESIGN.md §6). `pattern:` selectors cover both the ONNX op and the
// decomposed forms of each pattern.
const std::vector<PresetDef>& Presets() {
  static const auto* presets = new std::vector<PresetDef>{
      {"fp32", Precision::kFp32, {}},
      {"fp16", Precision::kFp16, {}},
      {"bf16", Precision::kBf16, {}},
      {"fp32-layernorm", Precision::kFp16, {"pattern:layernorm = fp32"}},
      {"bf16-layernorm", Precision::kBf16, {"pattern:layernorm = fp32"}},
      {"fp16-safe",
       Precision::kFp16,
       {"pattern:layernorm = fp32", "pattern:rmsnorm = fp32", "pattern:softmax = fp32",
        "op:ReduceMean = fp32", "op:ReduceSum = fp32", "op:ReduceSumSquare = fp32",
        "op:ReduceL1 = fp32", "op:ReduceL2 = fp32", "op:ReduceLogSum = fp32",
        "op:ReduceLogSumExp = fp32", "op:ReduceProd = fp32", "op:Pow = fp32", "op:Exp = fp32",
        "op:Log = fp32", "op:Softmax = fp32", "op:LogSoftmax = fp32"}},
  };
  return *presets;
}

absl::Status ErrorAt(const std::string& origin, int line, int column, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ":", line, ":", column, ": ", msg));
}

// Column (1-based) of `part` inside `whole` when `part` is a view into it.
int ColumnOf(absl::string_view whole, absl::string_view part, int first_column) {
  return first_column + static_cast<int>(part.data() - whole.data());
}

bool MatchClass(absl::string_view glob, size_t& gi, char c) {
  // glob[gi] == '['; on return gi points past ']'. A malformed class matches '[' literally.
  size_t i = gi + 1;
  bool negate = i < glob.size() && (glob[i] == '!' || glob[i] == '^');
  if (negate) ++i;
  bool matched = false;
  bool first = true;
  for (; i < glob.size() && (glob[i] != ']' || first); ++i, first = false) {
    if (i + 2 < glob.size() && glob[i + 1] == '-' && glob[i + 2] != ']') {
      if (c >= glob[i] && c <= glob[i + 2]) matched = true;
      i += 2;
    } else if (glob[i] == c) {
      matched = true;
    }
  }
  if (i >= glob.size()) {  // no closing ']': a literal '['
    ++gi;
    return c == '[';
  }
  gi = i + 1;
  return matched != negate;
}

// Compiles a `re:` rule with RE2 (linear-time matching, bounded memory). The nesting of groups
// and brackets is bounded first, so a rule such as 20,000 nested '(' is refused by a loop
// rather than handed to a parser.
absl::StatusOr<std::shared_ptr<const re2::RE2>> CompileRegex(absl::string_view pat,
                                                             const std::string& origin, int line,
                                                             int column) {
  int depth = 0, deepest = 0;
  bool in_class = false;
  for (size_t i = 0; i < pat.size(); ++i) {
    char c = pat[i];
    if (c == '\\') {
      ++i;  // an escaped character opens nothing
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      continue;
    }
    if (c == '[') {
      in_class = true;
      if (i + 1 < pat.size() && pat[i + 1] == ']') ++i;  // "[]...]" starts with a literal ']'
      deepest = std::max(deepest, depth + 1);
    } else if (c == '(') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ')' && depth > 0) {
      --depth;
    }
    if (deepest > kMaxRegexNesting) {
      return ErrorAt(origin, line, column + static_cast<int>(i),
                     absl::StrCat("regular expression '", Excerpt(pat, 40), "' nests deeper than ",
                                  kMaxRegexNesting, " groups"));
    }
  }
  RE2::Options options;
  options.set_log_errors(false);
  options.set_max_mem(int64_t{8} << 20);  // RE2's default: compiled programs past it fail
  auto re = std::make_shared<const RE2>(re2::StringPiece(pat.data(), pat.size()), options);
  if (!re->ok()) {
    return ErrorAt(origin, line, column,
                   absl::StrCat("invalid regular expression '", Excerpt(pat),
                                "': ", Excerpt(re->error()), " (RE2 syntax)"));
  }
  return re;
}

}  // namespace

bool RuleMatchesName(const Rule& rule, absl::string_view name) {
  switch (rule.kind) {
    case SelectorKind::kName:
      return GlobMatch(rule.pattern, name);
    case SelectorKind::kRegex:
      return rule.regex && RE2::FullMatch(re2::StringPiece(name.data(), name.size()), *rule.regex);
    case SelectorKind::kScope:
      return absl::StartsWith(name, rule.pattern);
    case SelectorKind::kOp:
    case SelectorKind::kPattern:
      return false;
  }
  return false;
}

const char* SelectorKindName(SelectorKind k) {
  switch (k) {
    case SelectorKind::kOp:
      return "op";
    case SelectorKind::kName:
      return "name";
    case SelectorKind::kRegex:
      return "re";
    case SelectorKind::kScope:
      return "scope";
    case SelectorKind::kPattern:
      return "pattern";
  }
  return "?";
}

bool GlobMatch(absl::string_view glob, absl::string_view text) {
  // Iterative matcher with one backtrack point for the last '*': O(|glob| * |text|) worst case.
  size_t gi = 0, ti = 0;
  size_t star_g = absl::string_view::npos, star_t = 0;
  while (ti < text.size()) {
    if (gi < glob.size() && glob[gi] == '*') {
      star_g = gi++;
      star_t = ti;
      continue;
    }
    if (gi < glob.size()) {
      size_t next = gi;
      bool ok;
      if (glob[gi] == '[') {
        ok = MatchClass(glob, next, text[ti]);
      } else {
        ok = glob[gi] == '?' || glob[gi] == text[ti];
        next = gi + 1;
      }
      if (ok) {
        gi = next;
        ++ti;
        continue;
      }
    }
    if (star_g == absl::string_view::npos) return false;
    gi = star_g + 1;
    ti = ++star_t;
  }
  while (gi < glob.size() && glob[gi] == '*') ++gi;
  return gi == glob.size();
}

std::string Policy::Canonical() const {
  std::vector<std::string> lines = {absl::StrCat("base = ", PrecisionName(base))};
  for (const Rule& r : rules) {
    lines.push_back(
        absl::StrCat(SelectorKindName(r.kind), ":", r.pattern, " = ", PrecisionName(r.precision)));
  }
  return absl::StrJoin(lines, "\n");
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const auto& p : Presets()) names.push_back(p.name);
  return names;
}

absl::StatusOr<Rule> ParseRule(absl::string_view text, const std::string& origin, int line,
                               int column) {
  absl::string_view whole = text;
  absl::string_view t = absl::StripAsciiWhitespace(text);
  if (t.size() > kMaxRuleBytes) {
    return ErrorAt(
        origin, line, ColumnOf(whole, t, column),
        absl::StrCat("rule '", Excerpt(t, 40), "' is longer than ", kMaxRuleBytes, " bytes"));
  }
  size_t eq = t.rfind('=');
  if (eq == absl::string_view::npos) {
    return ErrorAt(origin, line, ColumnOf(whole, t, column),
                   absl::StrCat("expected 'SELECTOR = PRECISION', got '", Excerpt(t), "'"));
  }
  absl::string_view sel = absl::StripAsciiWhitespace(t.substr(0, eq));
  absl::string_view prec = absl::StripAsciiWhitespace(t.substr(eq + 1));
  if (!sel.empty() && sel.back() == '=') {
    return ErrorAt(
        origin, line, ColumnOf(whole, sel, column) + static_cast<int>(sel.size()) - 1,
        absl::StrCat("expected one '=' in 'SELECTOR = PRECISION', got '", Excerpt(t), "'"));
  }
  int sel_col = ColumnOf(whole, sel.empty() ? t : sel, column);
  int prec_col = ColumnOf(whole, prec.empty() ? t.substr(eq) : prec, column);
  auto p = ParsePrecision(prec);
  if (!p) {
    return ErrorAt(
        origin, line, prec_col,
        absl::StrCat("unknown precision '", Excerpt(prec), "' (expected fp32, fp16 or bf16)"));
  }
  size_t colon = sel.find(':');
  if (colon == absl::string_view::npos) {
    return ErrorAt(origin, line, sel_col,
                   absl::StrCat("selector '", Excerpt(sel),
                                "' needs a kind: op:, name:, re:, scope: or pattern:"));
  }
  absl::string_view kind = sel.substr(0, colon);
  absl::string_view pat = sel.substr(colon + 1);
  Rule r;
  if (kind == "op")
    r.kind = SelectorKind::kOp;
  else if (kind == "name")
    r.kind = SelectorKind::kName;
  else if (kind == "re")
    r.kind = SelectorKind::kRegex;
  else if (kind == "scope")
    r.kind = SelectorKind::kScope;
  else if (kind == "pattern")
    r.kind = SelectorKind::kPattern;
  else {
    return ErrorAt(origin, line, sel_col,
                   absl::StrCat("unknown selector kind '", Excerpt(kind),
                                "' (expected op, name, re, scope or pattern)"));
  }
  int pat_col = sel_col + static_cast<int>(colon) + 1;
  if (pat.empty()) {
    return ErrorAt(origin, line, pat_col, absl::StrCat("selector '", sel, "' is empty"));
  }
  if (r.kind == SelectorKind::kOp) {
    for (char ch : pat) {
      if (!absl::ascii_isalnum(ch) && ch != '_') {
        return ErrorAt(origin, line, pat_col,
                       absl::StrCat("op type '", Excerpt(pat), "' is not an ONNX op name"));
      }
    }
  }
  if (r.kind == SelectorKind::kPattern && !PatternFromName(pat)) {
    return ErrorAt(origin, line, pat_col,
                   absl::StrCat("unknown pattern '", Excerpt(pat),
                                "' (expected layernorm, rmsnorm, gelu, softmax or attention)"));
  }
  if (r.kind == SelectorKind::kRegex) {
    ASSIGN_OR_RETURN(r.regex, CompileRegex(pat, origin, line, pat_col));
  }
  r.pattern = std::string(pat);
  r.precision = *p;
  r.text = std::string(t);
  r.origin = absl::StrCat(origin, ":", line, ":", ColumnOf(whole, t, column));
  return r;
}

absl::StatusOr<Policy> Preset(absl::string_view name) {
  for (const auto& def : Presets()) {
    if (name != def.name) continue;
    Policy p;
    p.name = def.name;
    p.base = def.base;
    for (const char* text : def.rules) {
      ASSIGN_OR_RETURN(Rule r, ParseRule(text, absl::StrCat("preset ", def.name)));
      r.origin = absl::StrCat("preset ", def.name);
      r.must_match = false;
      p.rules.push_back(std::move(r));
    }
    return p;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown preset '", Excerpt(name), "'; presets are: ", absl::StrJoin(PresetNames(), ", ")));
}

absl::StatusOr<Policy> ParsePolicyText(absl::string_view text, const std::string& origin) {
  Policy policy;
  policy.name = origin;
  bool seen_base = false, seen_preset = false;
  int line_no = 0;
  size_t pos = 0;
  // Editors on Windows write a UTF-8 byte-order mark and CRLF line ends: the mark is skipped
  // (columns count from after it) and '\r' is whitespace at a line's end.
  if (absl::StartsWith(text, "\xEF\xBB\xBF")) text.remove_prefix(3);
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == absl::string_view::npos) end = text.size();
    absl::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    // A '#' at the start of a line or after whitespace starts a comment (so regexes may use '#'
    // when it follows another character).
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '#' && (i == 0 || absl::ascii_isspace(line[i - 1]))) {
        line = line.substr(0, i);
        break;
      }
    }
    absl::string_view t = absl::StripAsciiWhitespace(line);
    if (t.empty()) {
      if (end == text.size()) break;
      continue;
    }
    int col = ColumnOf(line, t, 1);
    size_t eq = t.find('=');
    absl::string_view key =
        eq == absl::string_view::npos ? t : absl::StripAsciiWhitespace(t.substr(0, eq));
    if (key == "base" || key == "preset") {
      absl::string_view value = absl::StripAsciiWhitespace(t.substr(eq + 1));
      int vcol = ColumnOf(line, value.empty() ? t.substr(eq) : value, 1);
      if (key == "base") {
        if (seen_base) return ErrorAt(origin, line_no, col, "'base' is given twice");
        auto p = ParsePrecision(value);
        if (!p) {
          return ErrorAt(origin, line_no, vcol,
                         absl::StrCat("unknown precision '", Excerpt(value),
                                      "' (expected fp32, fp16 or bf16)"));
        }
        policy.base = *p;
        seen_base = true;
      } else {
        if (seen_preset) return ErrorAt(origin, line_no, col, "'preset' is given twice");
        if (!policy.rules.empty() || seen_base) {
          return ErrorAt(origin, line_no, col,
                         "'preset' must come before 'base' and before any rule");
        }
        auto preset = Preset(value);
        if (!preset.ok()) {
          return ErrorAt(origin, line_no, vcol, std::string(preset.status().message()));
        }
        policy.base = preset->base;
        policy.rules = std::move(preset->rules);
        seen_preset = true;
      }
      if (end == text.size()) break;
      continue;
    }
    if (policy.rules.size() >= kMaxRules) {
      return ErrorAt(origin, line_no, col,
                     absl::StrCat("a policy holds at most ", kMaxRules, " rules"));
    }
    ASSIGN_OR_RETURN(Rule r, ParseRule(line, origin, line_no, 1));
    policy.rules.push_back(std::move(r));
    if (end == text.size()) break;
  }
  return policy;
}

absl::StatusOr<Policy> LoadPolicy(const std::string& preset_or_path) {
  for (const std::string& name : PresetNames()) {
    if (name == preset_or_path) return Preset(name);
  }
  auto text = import::ReadFile(preset_or_path, int64_t{1} << 20);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--policy '", preset_or_path, "' is neither a preset (", absl::StrJoin(PresetNames(), ", "),
        ") nor a readable policy file: ", text.status().message()));
  }
  return ParsePolicyText(*text, preset_or_path);
}

absl::Status AddRuleFlags(Policy& policy, const std::vector<std::string>& rules) {
  if (policy.rules.size() + rules.size() > kMaxRules) {
    return absl::InvalidArgumentError(absl::StrCat("a policy holds at most ", kMaxRules, " rules (",
                                                   policy.rules.size(), " and ", rules.size(),
                                                   " --rule flags given)"));
  }
  for (size_t i = 0; i < rules.size(); ++i) {
    ASSIGN_OR_RETURN(Rule r, ParseRule(rules[i], absl::StrCat("--rule ", i + 1)));
    r.origin = absl::StrCat("--rule ", i + 1);
    policy.rules.push_back(std::move(r));
  }
  if (!rules.empty() && policy.name.empty()) policy.name = "custom";
  return absl::OkStatus();
}

}  // namespace kiln::precision
