#include "engine/precision/assign.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"

namespace kiln::precision {
namespace {

bool IsFloat(const ir::Value* v) { return v && IsFloating(v->dtype); }

// Values derived only from Shape/Size outputs and constants: shape computation, which some
// exporters do in float (e.g. scale factors). It is never reduced.
std::vector<bool> ShapeDerivedValues(const ir::Graph& g, const std::vector<ir::Node*>& order) {
  std::vector<bool> derived(g.values().size(), false);
  for (const ir::Node* n : order) {
    bool from_shape = n->op == ir::OpType::kShape || n->op == ir::OpType::kSize;
    if (!from_shape) {
      bool any = false, all = true;
      for (const ir::Value* in : n->inputs) {
        if (!in || in->constant) continue;
        any = true;
        all = all && derived[in->id];
      }
      from_shape = any && all;
    }
    if (!from_shape) continue;
    for (const ir::Value* out : n->outputs) {
      if (out) derived[out->id] = true;
    }
  }
  return derived;
}

// A node computes in floating point when one of its outputs is floating, or (comparisons,
// IsNaN, ArgMax, ...) it reads a floating input; Shape and Size only read dims.
bool ComputesFloating(const ir::Node& n) {
  if (n.op == ir::OpType::kShape || n.op == ir::OpType::kSize) return false;
  for (const ir::Value* v : n.outputs) {
    if (IsFloat(v)) return true;
  }
  for (const ir::Value* v : n.inputs) {
    if (IsFloat(v)) return true;
  }
  return false;
}

// The authored precision of a node: that of its first floating output, else first floating
// input (f64 counts as fp32).
std::optional<Precision> AuthoredPrecision(const ir::Node& n) {
  for (const ir::Value* v : n.outputs) {
    if (IsFloat(v)) return PrecisionOfDataType(v->dtype);
  }
  for (const ir::Value* v : n.inputs) {
    if (IsFloat(v)) return PrecisionOfDataType(v->dtype);
  }
  return std::nullopt;
}

std::string Describe(const Rule& r) { return absl::StrCat(r.text, " (", r.origin, ")"); }

// The node ids each rule selects.
absl::StatusOr<std::vector<std::vector<int>>> MatchRules(
    const ir::Graph& g, const Policy& policy, const std::vector<PatternInstance>& patterns) {
  std::vector<std::vector<int>> matches(policy.rules.size());
  for (size_t r = 0; r < policy.rules.size(); ++r) {
    const Rule& rule = policy.rules[r];
    if (rule.kind == SelectorKind::kPattern) {
      auto kind = PatternFromName(rule.pattern);
      std::vector<bool> seen(g.nodes().size(), false);
      for (const PatternInstance& p : patterns) {
        if (!kind || p.kind != *kind) continue;
        for (int id : p.nodes) {
          if (!seen[id]) matches[r].push_back(id);
          seen[id] = true;
        }
      }
      std::sort(matches[r].begin(), matches[r].end());
      continue;
    }
    for (const auto& n : g.nodes()) {
      bool hit = rule.kind == SelectorKind::kOp ? rule.pattern == ir::OpName(n->op)
                                                : RuleMatchesName(rule, n->name);
      if (hit) matches[r].push_back(n->id);
    }
  }
  return matches;
}

}  // namespace

const char* ConstraintsName(Constraints c) { return c == Constraints::kObey ? "obey" : "prefer"; }

const char* TypingName(Typing t) {
  switch (t) {
    case Typing::kAuto:
      return "auto";
    case Typing::kStrong:
      return "strong";
    case Typing::kWeak:
      return "weak";
  }
  return "?";
}

std::optional<Constraints> ParseConstraints(absl::string_view s) {
  if (s == "obey") return Constraints::kObey;
  if (s == "prefer") return Constraints::kPrefer;
  return std::nullopt;
}

std::optional<Typing> ParseTyping(absl::string_view s) {
  if (s == "auto") return Typing::kAuto;
  if (s == "strong") return Typing::kStrong;
  if (s == "weak") return Typing::kWeak;
  return std::nullopt;
}

bool IsAuthoredMixedPrecision(const ir::Graph& graph) {
  for (const auto& v : graph.values()) {
    if (v->dtype == DataType::kF16 || v->dtype == DataType::kBF16) return true;
  }
  return false;
}

absl::StatusOr<Assignment> AssignPrecision(const ir::Graph& g, const Policy& policy,
                                           const std::vector<PatternInstance>& patterns,
                                           Constraints constraints, Typing typing,
                                           spdlog::logger* logger) {
  Assignment out;
  out.strong_typing =
      typing == Typing::kStrong || (typing == Typing::kAuto && IsAuthoredMixedPrecision(g));
  out.nodes.resize(g.nodes().size());
  ASSIGN_OR_RETURN(auto order, g.TopologicalOrder());
  std::vector<bool> shape_derived = ShapeDerivedValues(g, order);
  ASSIGN_OR_RETURN(auto matches, MatchRules(g, policy, patterns));

  auto warn_or_fail = [&](const std::string& msg) -> absl::Status {
    if (constraints == Constraints::kObey) return absl::InvalidArgumentError(msg);
    out.warnings.push_back(msg);
    if (logger) logger->warn("{}", msg);
    return absl::OkStatus();
  };

  for (size_t r = 0; r < policy.rules.size(); ++r) {
    const Rule& rule = policy.rules[r];
    if (matches[r].empty() && rule.must_match) {
      RETURN_IF_ERROR(warn_or_fail(
          absl::StrCat("rule '", rule.text, "' at ", rule.origin, " matches no node")));
    }
  }

  std::string base_rule = absl::StrCat("base ", PrecisionName(policy.base), " (policy ",
                                       policy.name.empty() ? "custom" : policy.name, ")");
  for (const auto& n : g.nodes()) {
    NodeAssignment& a = out.nodes[n->id];
    a.assigned = policy.base;
    a.rule = base_rule;
  }
  for (size_t r = 0; r < policy.rules.size(); ++r) {  // later rules win
    for (int id : matches[r]) {
      NodeAssignment& a = out.nodes[id];
      a.assigned = policy.rules[r].precision;
      a.rule = Describe(policy.rules[r]);
      a.matched.push_back(a.rule);
    }
  }

  std::vector<std::string> conflicts;
  for (const auto& n : g.nodes()) {
    NodeAssignment& a = out.nodes[n->id];
    bool shape_only = true;
    for (const ir::Value* v : n->outputs) shape_only = shape_only && v && shape_derived[v->id];
    a.floating = ComputesFloating(*n) && !shape_only;
    if (!a.floating) {
      a.rule = "not floating: integer, bool and shape computation is never reduced";
      a.assigned = Precision::kFp32;
      continue;
    }
    if (!out.strong_typing) continue;
    a.authored = AuthoredPrecision(*n);
    Precision wanted = a.assigned;
    std::string by = a.rule;
    a.assigned = a.authored.value_or(Precision::kFp32);
    a.rule = "authored type (strong typing)";
    // The implicit default policy never conflicts with authored types; an explicit one does
    // whenever it would change them (its base included).
    bool by_rule = !a.matched.empty();
    if (wanted != a.assigned && (by_rule || !policy.implicit)) {
      conflicts.push_back(absl::StrCat(n->Label(), " is authored ", PrecisionName(a.assigned),
                                       " but ", by, " assigns ", PrecisionName(wanted)));
    }
  }
  if (!conflicts.empty()) {
    size_t shown = std::min<size_t>(conflicts.size(), 8);
    std::string msg = absl::StrCat(
        "the model is authored in mixed precision (strong typing) and the policy would change ",
        conflicts.size(), " authored node type(s): ",
        absl::StrJoin(conflicts.begin(), conflicts.begin() + shown, "; "),
        conflicts.size() > shown ? "; ..." : "",
        constraints == Constraints::kObey
            ? " (use --constraints prefer to keep the authored types, or --typing weak to let "
              "the policy re-type the model)"
            : "; the authored types are kept");
    RETURN_IF_ERROR(warn_or_fail(msg));
  }
  return out;
}

}  // namespace kiln::precision
