// ONNX Runtime's contrib ops (domain com.microsoft), as ORT's transformer optimizer and
// quantization tool write them (SkipLayerNormalization, Attention, QLinearAdd, MatMulNBits, ...).
// Kiln has no kernels of its own for them: each contrib node is EXPANDED AT IMPORT into nodes of
// the default ONNX domain (SkipLayerNormalization -> Add + LayerNormalization, Attention ->
// MatMul/Add/Split + the ONNX Attention op, QLinearAdd -> DequantizeLinear + Add +
// QuantizeLinear, MatMulNBits -> a dequantized float weight + MatMul, ...), so that precision
// policies, pattern matching, fusion and the kernels apply to them unchanged.
//
// How the import uses this: ImportNodes turns each com.microsoft node into a placeholder node
// (op Identity, attribute kContribOpAttr naming the contrib op, inputs, outputs and attributes
// as written); ExpandContribOps then rewrites every placeholder of the graph (subgraphs
// included) in topological order.
//
// Provenance: every node an expansion makes is named "<contrib node>/<part>" and is its own
// source (`sources` = {its id}, as legacy_ops.cc does for the nodes it inserts): precision
// assignment is per source, so sharing one index among the parts would make every part take one
// part's precision (an `op:LayerNormalization = fp32` rule would not reach the LayerNormalization
// of a SkipLayerNormalization). The first part reuses the placeholder (it keeps the contrib
// node's import index as id), the others are appended after the ONNX nodes. The contrib node's
// output values keep their names, so the per-tensor accuracy report still names them. Weight
// transforms done at import (MatMulNBits, DynamicQuantizeLSTM) produce constants.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/import/op_schemas.h"
#include "engine/ir/graph.h"

namespace kiln::import {

/// The domain whose nodes are expanded here.
inline constexpr char kContribDomain[] = "com.microsoft";

/// The string attribute of an import placeholder naming its com.microsoft op.
inline constexpr char kContribOpAttr[] = "kiln_contrib_op";

/// True for the com.microsoft domain.
bool IsContribDomain(absl::string_view domain);

/// True for a node the import expands here: any node of com.microsoft, and the two contrib ops
/// ONNX Runtime registers in the default domain: SimplifiedLayerNormalization (ORT's optimizer
/// writes it so for T5 / Llama-style RMSNorm) and LayerNormalization at `default_opset` < 17
/// (ORT's fused LayerNorm of models older than the ONNX op).
bool IsContribNode(absl::string_view domain, absl::string_view op_type, int default_opset);

/// True when ExpandContribOps can expand `op_type` of the com.microsoft domain.
bool IsSupportedContribOp(absl::string_view op_type);

/// The arity an import placeholder accepts: any (each expander checks its op's own).
OpVersion ContribPlaceholderVersion();

/// Rewrites every com.microsoft placeholder of `graph` (and of its subgraphs) into default-domain
/// nodes. Call after the nodes are imported (inputs resolved) and before the import's shape
/// inference: types and shapes it infers along the way (input dtypes, weight shapes) are reset
/// afterwards, so declarations apply as for any model. InvalidArgument naming the node for a bad
/// attribute or input; Unimplemented naming the node for a form Kiln does not expand.
absl::Status ExpandContribOps(ir::Graph& graph);

}  // namespace kiln::import
