// Precision lowering: applies an assignment to the graph (DESIGN.md §5).
//
// Pattern: every floating node assigned P != fp32 gets its T-typed values (the floating inputs
// and outputs that share the node's authored fp32 type) retyped to P; weights it reads are stored
// in P; where a value's dtype differs from what its consumer computes at, one conversion (Cast)
// per (value, dtype) is inserted; graph outputs keep their authored dtype and name through a final
// conversion. Slots whose type the op fixes (Resize scales/roi, LayerNormalization's Mean and
// InvStdDev, quantization scales) keep fp32. Integer, bool and shape computation is untouched.
// Quantization without conversions: QuantizeLinear reads x at the float dtype its producer wrote
// (widening is exact; it divides in fp32); a DequantizeLinear whose only reader is a conversion
// of its fp32 output to the fp16 / bf16 its sources were assigned writes that dtype itself
// (output_dtype, opset 23: the fp32 product rounded once, the converted bits) and the conversion
// goes; so does the Cast + Mul of a qdq-integer rewrite (qdq_integer.h) whose int32 sums are
// exact in fp32, made one such DequantizeLinear of the sums. The sources' effective precision is
// then the assigned one (their output is rounded to it once).
//
// Preconditions: `assignment` was computed for this graph; weak typing (strong typing changes
// nothing and the pass returns at once). Every dtype change is recorded.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/ir/graph.h"
#include "engine/kernels/registry.h"
#include "engine/passes/fusion.h"
#include "engine/precision/assign.h"
#include "spdlog/logger.h"

namespace kiln::passes {

/// One dtype change against the authored model.
struct DtypeChange {
  std::string value;
  DataType from = DataType::kUndefined;
  DataType to = DataType::kUndefined;
  std::string reason;
};

/// What lowering did.
struct LoweringResult {
  std::vector<DtypeChange> changes;
  /// Effective precision per source node id (>= assigned: fp32 where a node fell back, or inside
  /// a fused kernel).
  std::vector<precision::Precision> effective;
  /// Why a node runs higher than assigned (empty when it does not), per source node id.
  std::vector<std::string> fallback_reason;
  int inserted_conversions = 0;
  int converted_weights = 0;
  /// Nodes run higher than assigned because a weight they read does not fit the assigned format
  /// (an fp16 weight beyond 65504 would be stored as Inf): one line each, also logged.
  std::vector<std::string> warnings;
};

/// Applies `assignment` to `graph` (after `fusion`: fused nodes take their fused precision).
/// Under obey, a node whose op has no kernel at its assigned precision fails the build naming
/// the node; under prefer it runs at fp32 and the reason is recorded. A node reading a constant
/// that its precision cannot hold (finite values beyond fp16's 65504) runs at fp32 with a warning
/// when the policy's base assigned it, and fails under obey when a rule of the user pinned it.
absl::StatusOr<LoweringResult> LowerPrecision(
    ir::Graph& graph, const precision::Assignment& assignment, const FusionResult& fusion,
    precision::Constraints constraints, const kernels::Registry& registry, spdlog::logger* logger);

}  // namespace kiln::passes
