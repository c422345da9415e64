// Precision assignment (DESIGN.md §5): which precision every ONNX node is assigned, by which
// rule, and whether the model is authored mixed precision (strongly typed).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/precision/patterns.h"
#include "engine/precision/policy.h"
#include "spdlog/logger.h"

namespace kiln::precision {

/// `--constraints`: obey fails the build when an assignment cannot be honoured (or a user rule
/// matches nothing); prefer falls back upward and says so.
enum class Constraints { kObey, kPrefer };

/// `--typing`: auto = strong when the model already carries fp16/bf16 tensors, else weak.
enum class Typing { kAuto, kStrong, kWeak };

const char* ConstraintsName(Constraints c);
const char* TypingName(Typing t);
std::optional<Constraints> ParseConstraints(absl::string_view s);
std::optional<Typing> ParseTyping(absl::string_view s);

/// The decision for one node.
struct NodeAssignment {
  /// False for integer, bool and shape computation (never reduced) and for nodes without a
  /// floating value; `assigned` is then meaningless (kept fp32).
  bool floating = false;
  Precision assigned = Precision::kFp32;
  /// Set under strong typing: the node's authored precision.
  std::optional<Precision> authored;
  /// The rule that decided: "base fp16 (preset fp32-layernorm)", "pattern:layernorm = fp32
  /// (preset fp32-layernorm)", "authored type (strong typing)", "not floating: ...".
  std::string rule;
  /// Every rule that matched the node, in policy order ("TEXT (ORIGIN)").
  std::vector<std::string> matched;
};

/// The assignment of a whole graph, indexed by node id.
struct Assignment {
  std::vector<NodeAssignment> nodes;
  bool strong_typing = false;
  std::vector<std::string> warnings;
};

/// Assigns every node. Errors (obey): a user rule that matches no node (naming the rule and its
/// line/column), and under strong typing a policy that would change an authored type (naming
/// the node and the rule). Under prefer those are warnings (also logged to `logger`).
absl::StatusOr<Assignment> AssignPrecision(const ir::Graph& graph, const Policy& policy,
                                           const std::vector<PatternInstance>& patterns,
                                           Constraints constraints, Typing typing,
                                           spdlog::logger* logger);

/// True when any value of the graph (input, initializer, node output) is fp16 or bf16.
bool IsAuthoredMixedPrecision(const ir::Graph& graph);

}  // namespace kiln::precision
