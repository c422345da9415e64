// Type and shape inference of If, Loop and Scan: their subgraphs are inferred with the types and
// shapes the node feeds them (formal inputs and captured outer values), then the node's outputs
// follow from the subgraphs' outputs. Loop-carried and Scan state values are inferred to a fixed
// point: a dim that changes from one iteration to the next is unknown.
#pragma once

#include "absl/status/status.h"
#include "engine/ir/graph.h"

namespace kiln::import {

/// True for If, Loop and Scan.
bool IsControlFlow(ir::OpType op);

/// Infers the subgraphs of `n` (If, Loop or Scan) and its output dtypes and shapes; checks the
/// subgraphs' arity against the node's and the attributes Scan reads. Errors name the node and
/// the subgraph. A node whose subgraphs were compiled already (the attribute holds only the
/// engine) keeps its outputs as they are.
absl::Status InferControlFlow(ir::Node& n);

}  // namespace kiln::import
