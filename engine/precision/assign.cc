#include "engine/precision/assign.h"

#include <algorithm>
#include <cmath>

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

// The int32 sums of an integer GEMM or convolution (MatMulInteger, ConvInteger), with their
// bias added (Add, Sub) or cast to float: they exceed fp16 (an int8 3x3x64 convolution sums past
// 1e5; fp16 stops at 65504), so dynamic quantization's Cast of them, the bias added to them and
// its Mul by the scales (which brings them back to the activation's range) are the integer
// arithmetic's, never reduced.
bool IsIntegerSums(const ir::Value* v, int depth = 0) {
  if (v == nullptr || v->producer == nullptr || depth > 8) return false;
  const ir::Node& p = *v->producer;
  if (p.op == ir::OpType::kMatMulInteger || p.op == ir::OpType::kConvInteger) return true;
  if (p.op != ir::OpType::kCast && p.op != ir::OpType::kAdd && p.op != ir::OpType::kSub) {
    return false;
  }
  return std::any_of(p.inputs.begin(), p.inputs.end(),
                     [depth](const ir::Value* in) { return IsIntegerSums(in, depth + 1); });
}

// A node computes in floating point when one of its outputs is floating, or (comparisons,
// IsNaN, ArgMax, ...) it reads a floating input; Shape and Size only read dims.
bool ComputesFloating(const ir::Node& n) {
  if ((n.op == ir::OpType::kCast || n.op == ir::OpType::kMul || n.op == ir::OpType::kAdd ||
       n.op == ir::OpType::kSub) &&
      std::any_of(n.inputs.begin(), n.inputs.end(),
                  [](const ir::Value* v) { return IsIntegerSums(v); })) {
    return false;
  }
  if (n.op == ir::OpType::kShape || n.op == ir::OpType::kSize) return false;
  // QLinearConv / QLinearMatMul read fp32 scales but compute in integers (int32 accumulators,
  // integer outputs): like MatMulInteger / ConvInteger they are never reduced. Nor is
  // DynamicQuantizeLinear: it reads x at fp32 (a fixed slot) and writes integers and an fp32
  // scale.
  if (n.op == ir::OpType::kQLinearConv || n.op == ir::OpType::kQLinearMatMul ||
      n.op == ir::OpType::kDynamicQuantizeLinear) {
    return false;
  }
  // NonMaxSuppression computes indices: its IoU and score thresholds compared in fp16 would move
  // the boundary (1/7 becomes 0.14282), so it always selects at the authored precision.
  if (n.op == ir::OpType::kNonMaxSuppression) return false;
  // BitCast reinterprets bits: its input and output are the bits they are, at their authored
  // dtypes (precision_lowering.cc fixes both slots), so no precision applies to it.
  if (n.op == ir::OpType::kBitCast) return false;
  // If / Loop / Scan / SequenceMap pass values to their subgraphs, whose nodes carry their own
  // precision; sequences and optionals are passed on at their authored types.
  if (ir::HasSubgraphs(n.op) || n.TouchesContainers()) return false;
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

// A scalar constant operand (initializer or Constant node output), for the checks below.
std::optional<double> ScalarOf(const ir::Value* v) {
  const ir::Tensor* t = nullptr;
  if (v == nullptr) return std::nullopt;
  if (v->constant) {
    t = &*v->constant;
  } else if (v->producer && v->producer->op == ir::OpType::kConstant) {
    const ir::Attribute* a = v->producer->attr("value");
    if (a && a->type == ir::Attribute::Type::kTensor) t = &a->t;
  }
  if (t == nullptr || !t->defined() || t->num_elements() != 1 || t->raw_data() == nullptr ||
      t->dtype() == DataType::kString) {
    return std::nullopt;
  }
  return ir::ElementAsDouble(*t, 0);
}

// A normalisation-like reduction outside every recognised LayerNorm/RMSNorm instance: a
// ReduceMean/ReduceSum/GlobalAveragePool of a square (Pow(d, 2) or d * d, d = x - mean or any
// value) or a ReduceSumSquare, whose result reaches (through at most 6 elementwise or shape-only
// nodes) a Sqrt, a Reciprocal, the divisor of a Div, or Pow(., +-0.5). `why` says which.
struct SuspectReduction {
  const ir::Node* node;
  std::string why;
};

std::vector<SuspectReduction> UnrecognisedNormReductions(
    const ir::Graph& g, const std::vector<PatternInstance>& patterns) {
  std::vector<bool> in_norm(g.nodes().size(), false);
  for (const PatternInstance& p : patterns) {
    if (p.kind != PatternKind::kLayerNorm && p.kind != PatternKind::kRmsNorm) continue;
    for (int id : p.nodes) in_norm[id] = true;
  }
  auto is_square = [](const ir::Value* v) {
    const ir::Node* p = v ? v->producer : nullptr;
    if (p == nullptr || p->num_inputs() != 2) return false;
    if (p->op == ir::OpType::kMul) return p->inputs[0] == p->inputs[1];
    auto e = ScalarOf(p->inputs[1]);
    return p->op == ir::OpType::kPow && e && *e == 2;
  };
  std::vector<SuspectReduction> out;
  for (const auto& n : g.nodes()) {
    if (in_norm[n->id] || n->outputs.empty()) continue;
    bool squares = n->op == ir::OpType::kReduceSumSquare;
    if (!squares && n->op != ir::OpType::kReduceMean && n->op != ir::OpType::kReduceSum &&
        n->op != ir::OpType::kGlobalAveragePool) {
      continue;
    }
    if (!squares && !is_square(n->input(0))) continue;
    // Breadth-first over a bounded number of readers (a reduction's result feeds few nodes).
    std::vector<std::pair<const ir::Value*, int>> todo = {{n->outputs[0], 0}};
    std::string why;
    for (size_t i = 0; i < todo.size() && i < 64 && why.empty(); ++i) {
      auto [v, depth] = todo[i];
      if (v == nullptr) continue;
      for (const ir::Node* c : v->consumers) {
        std::optional<double> e;
        if (c->op == ir::OpType::kPow) e = ScalarOf(c->input(1));
        if (c->op == ir::OpType::kSqrt || c->op == ir::OpType::kReciprocal ||
            (c->op == ir::OpType::kDiv && c->input(1) == v) ||
            (c->op == ir::OpType::kPow && c->input(0) == v && e && std::abs(*e) == 0.5)) {
          why = absl::StrCat(squares ? "a sum of squares" : "a reduction of a square", " feeding ",
                             c->Label());
          break;
        }
        switch (c->op) {
          case ir::OpType::kMul:
          case ir::OpType::kDiv:
          case ir::OpType::kAdd:
          case ir::OpType::kSub:
          case ir::OpType::kMax:
          case ir::OpType::kRelu:
          case ir::OpType::kReshape:
          case ir::OpType::kExpand:
          case ir::OpType::kUnsqueeze:
          case ir::OpType::kSqueeze:
          case ir::OpType::kCast:
          case ir::OpType::kIdentity:
            if (depth < 6 && !c->outputs.empty()) todo.push_back({c->outputs[0], depth + 1});
            break;
          default:
            break;
        }
      }
    }
    if (!why.empty()) out.push_back({n.get(), std::move(why)});
  }
  return out;
}

// "[node 'a' (ReduceSum) #3] (a reduction of a square feeding ...)", at most 8, then a count.
std::string ListSuspects(const std::vector<SuspectReduction>& s) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < s.size() && i < 8; ++i) {
    parts.push_back(absl::StrCat(s[i].node->Label(), " (", s[i].why, ")"));
  }
  if (s.size() > 8) parts.push_back(absl::StrCat("and ", s.size() - 8, " more"));
  return absl::StrJoin(parts, "; ");
}

bool IsNormPatternRule(const Rule& r) {
  return r.kind == SelectorKind::kPattern && (r.pattern == "layernorm" || r.pattern == "rmsnorm");
}

// Whether `rule` selects a node of a subgraph of `g` (at any depth): a rule that only subgraph
// nodes match has matched (the subgraphs' builds apply it).
bool MatchesInSubgraphs(const ir::Graph& g, const Rule& rule) {
  for (const auto& n : g.nodes()) {
    for (const auto& [key, a] : n->attrs) {
      if (a.type != ir::Attribute::Type::kGraph || a.g == nullptr) continue;
      const ir::Graph& sub = *a.g;
      if (rule.kind == SelectorKind::kPattern) {
        auto kind = PatternFromName(rule.pattern);
        for (const PatternInstance& p : FindPatterns(sub)) {
          if (kind && p.kind == *kind) return true;
        }
      } else {
        for (const auto& m : sub.nodes()) {
          if (rule.kind == SelectorKind::kOp ? rule.pattern == ir::OpName(m->op)
                                             : RuleMatchesName(rule, m->name)) {
            return true;
          }
        }
      }
      if (MatchesInSubgraphs(sub, rule)) return true;
    }
  }
  return false;
}

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
  // The import's warnings (a declared shape inference overrides, ...) travel with the graph;
  // the assignment's warnings are the build's (BuildSummary::warnings, the engine metadata), so
  // they join them here. (The builder is their natural home; see issue 28's note.)
  for (const std::string& w : g.import_warnings()) {
    out.warnings.push_back(w);
    if (logger) logger->warn("{}", w);
  }
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

  // A decomposed normalisation the matcher does not know leaves a `pattern:layernorm` rule
  // without its nodes, and those nodes in reduced precision: name them (issue 28).
  std::vector<SuspectReduction> suspects;
  if (std::any_of(policy.rules.begin(), policy.rules.end(), IsNormPatternRule)) {
    suspects = UnrecognisedNormReductions(g, patterns);
  }
  std::vector<bool> reported(policy.rules.size(), false);
  for (size_t r = 0; r < policy.rules.size(); ++r) {
    const Rule& rule = policy.rules[r];
    if (matches[r].empty() && rule.must_match && !MatchesInSubgraphs(g, rule)) {
      std::string msg = absl::StrCat("rule '", rule.text, "' at ", rule.origin, " matches no node");
      if (IsNormPatternRule(rule) && !suspects.empty()) {
        absl::StrAppend(&msg, "; the pattern matcher did not recognise these normalisation-like ",
                        "reductions: ", ListSuspects(suspects));
        reported[r] = true;
      }
      RETURN_IF_ERROR(warn_or_fail(msg));
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

  // Preset rules need not match, so nothing above names what a preset's norm pattern rule
  // missed: a warning does, for each suspect left in reduced precision, with that precision.
  if (!suspects.empty() && std::find(reported.begin(), reported.end(), true) == reported.end()) {
    std::vector<std::string> named;
    int reduced = 0;
    for (const SuspectReduction& sr : suspects) {
      const ir::Node& n = *sr.node;
      Precision p = out.strong_typing ? AuthoredPrecision(n).value_or(Precision::kFp32)
                                      : out.nodes[n.id].assigned;
      if (!ComputesFloating(n) || p == Precision::kFp32) continue;
      if (++reduced <= 8) {
        named.push_back(absl::StrCat(n.Label(), " assigned ", PrecisionName(p), " (", sr.why, ")"));
      }
    }
    if (reduced > 8) named.push_back(absl::StrCat("and ", reduced - 8, " more"));
    std::vector<std::string> rules;
    for (size_t r = 0; r < policy.rules.size(); ++r) {
      if (!IsNormPatternRule(policy.rules[r])) continue;
      rules.push_back(absl::StrCat("'", Describe(policy.rules[r]), "' ",
                                   matches[r].empty()
                                       ? std::string("matches no node")
                                       : absl::StrCat("matches ", matches[r].size(), " node(s)")));
    }
    if (reduced > 0) {
      std::string msg = absl::StrCat(
          absl::StrJoin(rules, ", "), ", but ", reduced,
          " normalisation-like reduction(s) are in no recognised LayerNorm/RMSNorm instance "
          "and stay in reduced precision, where a sum of squares overflows easily: ",
          absl::StrJoin(named, "; "),
          ". If they belong to a normalisation, pin them with a rule (name:NODE = fp32)");
      out.warnings.push_back(msg);
      if (logger) logger->warn("{}", msg);
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
