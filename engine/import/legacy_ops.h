// Models of default-domain opsets below 7. Kiln's shape inference and kernels implement each op in
// the version it has at opset 7 and later; an older version (Add-6 with `broadcast` / `axis`,
// Reshape-1 with a `shape` attribute, BatchNormalization-6 with `is_test`, ops with
// `consumed_inputs`, ...) is rewritten at import into its opset-7 form, so the kernels stay
// unchanged:
//
//   - attributes that only hint (consumed_inputs) or that the newer form expresses otherwise
//     (is_test, output_sequence, Gemm's broadcast) are dropped;
//   - attributes that became inputs (Reshape-1 `shape`, Tile-1 `tiles`/`axis`) become constant
//     inputs, and inputs that became attributes (Split-1 `split`) become attributes;
//   - legacy broadcasting (B's dims aligned at `axis` of A; PRelu-6's per-channel 1-D slope)
//     becomes numpy broadcasting by giving B trailing 1 dims: a reshaped constant when B is a
//     weight, else a Reshape node inserted before the node.
//
// Provenance stays honest: every ONNX node keeps its name and import index (its id); an inserted
// Reshape is named after the node it serves ("<node>/legacy_broadcast") and takes an id after the
// ONNX nodes. Each rewritten node's since_version is the version it now has (Add-7, Reshape-5).
// An old form with no faithful newer form fails naming the node, the op version and the opset.
#pragma once

#include "absl/status/status.h"
#include "engine/ir/graph.h"

namespace kiln::import {

/// The opset whose op versions the rewritten nodes have: the oldest one the kernels implement.
constexpr int kLegacyTargetOpset = 7;

/// Rewrites every node of `graph` (subgraphs included) whose op version at the model's
/// default-domain `opset` (< kLegacyTargetOpset) differs from its version at
/// kLegacyTargetOpset into that newer form. Call after the nodes are imported (inputs resolved)
/// and before shape inference; dtypes and shapes it infers along the way (the ranks legacy
/// broadcasting needs) are reset afterwards, so declarations apply as for any model. Adds one
/// import warning listing the rewritten nodes. Unimplemented, naming the node, when an old form
/// cannot be adapted (a rank shape inference cannot give, a non-constant Split-1 `split`, ...).
absl::Status AdaptLegacyOps(ir::Graph& graph, int opset);

}  // namespace kiln::import
