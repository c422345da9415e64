// The build's last check of the kernel graph it is about to write (issue 28: a build that
// succeeds gives an engine that runs). For each node of the kernel list, in execution order:
//  - every input its op requires is present: the ONNX schema's required inputs (op_schemas.h
//    min_inputs; all inputs of a variadic op) and, for Kiln's own ops, those their kernels read
//    unconditionally (AddLayerNorm's scale, FusedConv's W, ...);
//  - every input is computable when the node runs: a graph input, a constant, or an output of an
//    earlier node of the list (not of a node a pass removed or folded without a constant);
//  - its kernel was chosen, for this op and the node's current key dtype (and its `supports`
//    still holds), and creating it from the node as it is now succeeds;
//  - where its shapes are static, the kernel's own checks pass on them: the kernel runs up to its
//    first output request (never computing anything) on the constants and on zeros standing for
//    floating values, and the output it asks for has the dtype and dims the graph records;
//  - each value is computed once, and no computed value is also a constant or a graph input;
// and every graph output is computed, a constant or a graph input. The cost is a kernel creation
// per node and, for statically shaped nodes, the checks of its Run: ~2% of building BERT
// (tests/models, dynamic shapes) and 10-15% of building a small static CNN, whose build is
// itself under a millisecond.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "engine/ir/graph.h"
#include "engine/kernels/registry.h"

namespace kiln::builder {

/// Checks the kernel graph `live` (execution order) of `graph` with the kernel `defs` (indexed by
/// node id) before the memory plan is made and the engine written. Fails naming the first node
/// that could not run: Internal ("kernel graph check: [node ...] ...") for what a pass of the
/// build did; the kernel's own code (InvalidArgument) for a model's node that fails its kernel's
/// checks on its static shapes, and InvalidArgument for a required input the model leaves out.
absl::Status VerifyKernelGraph(const ir::Graph& graph, const std::vector<ir::Node*>& live,
                               const std::vector<const kernels::KernelDef*>& defs);

}  // namespace kiln::builder
