// Fusion under the precision guarantee (DESIGN.md §1, §5).
//
// Rewrites, each into one kernel:
//   - decomposed LayerNorm  -> LayerNormalization (stash fp32)
//   - decomposed RMSNorm    -> RMSNormalization (stash fp32)
//   - decomposed GELU       -> Gelu (approximate none | tanh)
//   - decomposed Softmax    -> Softmax
//   - Conv + BatchNormalization (inference) -> Conv with the normalisation folded into its
//     weights and bias (computed in float64, stored in the Conv's precision)
//   - Conv + Relu | LeakyRelu | Clip | HardSwish | Sigmoid -> FusedConv, and Conv + SiLU
//     (Mul(y, Sigmoid(y)) of the Conv's output y) -> FusedConv "Swish" (the sigmoid in fp32)
//   - Conv + Add|Sum(residual of the Conv's shape) [+ one of those activations] -> FusedConv
//     with the residual as its input 3 (the sum in fp32, as the activation)
//   - MatMul + Add(bias) [+ Relu | Sigmoid | Tanh | Gelu] -> FusedMatMul
//   - residual Add + LayerNormalization -> AddLayerNorm (also outputs the sum when it is read)
// A fused kernel computes its interior in fp32 and reads/writes its boundary values at its
// precision T. For pattern fusions T is the join of the members' assigned precisions, so nothing
// is computed lower than assigned. For Conv + BatchNorm T is the Conv's precision (its weights
// carry the folded normalisation); when the BatchNorm is assigned higher, the fusion would lower
// it and is refused, and the refusal is logged with the node names and the rule. Conv and MatMul
// fusions compute at the Conv's / MatMul's precision and are refused when an absorbed node is
// assigned higher; residual Add + LayerNorm computes at the join of both.
//
// Preconditions: `assignment` and `patterns` were computed on this graph, before any other
// rewrite. Node ids change (removed nodes are compacted); `ir::Node::sources` keeps provenance.
#pragma once

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/precision/assign.h"
#include "engine/precision/patterns.h"
#include "spdlog/logger.h"

namespace kiln::passes {

/// `--fusion on|off` and `--no-fuse SELECTOR` (op:TYPE, scope:PREFIX, pattern:NAME where NAME is
/// a recognised pattern or conv+batchnorm, conv+scale, batchnorm+scale, conv+activation,
/// conv+residual, matmul+bias, add+layernorm, conv-chain (passes/conv_chain.h), qdq-matmul,
/// qdq-conv, conv-integer-to-float, matmul-integer-to-float (passes/qdq_integer.h)).
struct FusionOptions {
  bool enabled = true;
  std::vector<std::string> no_fuse;
};

/// What fusion did.
struct FusionResult {
  /// Precision of each fused node (its boundary dtype).
  absl::flat_hash_map<const ir::Node*, precision::Precision> precision;
  /// Effective precision of each fused source node (by source id).
  absl::flat_hash_map<int, precision::Precision> effective;
  std::vector<std::string> applied;   // "layernorm: 9 nodes ('/ln/ReduceMean' ...) -> ..."
  std::vector<std::string> refusals;  // why a fusion did not happen, naming nodes and rule
};

/// Whether a `--no-fuse` selector of `options` excludes a fusion of `members` into `op` that the
/// selector `pattern:<pattern>` names.
bool FusionExcluded(const FusionOptions& options, const std::vector<const ir::Node*>& members,
                    ir::OpType op, const char* pattern);

/// Checks `--no-fuse` selectors (InvalidArgument naming a bad one).
absl::Status ValidateNoFuse(const std::vector<std::string>& selectors);

/// Applies every allowed fusion to `graph`.
absl::StatusOr<FusionResult> Fuse(ir::Graph& graph, const precision::Assignment& assignment,
                                  const std::vector<precision::PatternInstance>& patterns,
                                  const FusionOptions& options, spdlog::logger* logger);

}  // namespace kiln::passes
