// The build's last check of the kernel graph it is about to write (issue: a build that succeeds
// gives an engine that runs): every node's required inputs present and resolvable, every kernel
// creatable and its checks passed on the inferred shapes.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "engine/ir/graph.h"
#include "engine/kernels/registry.h"

namespace kiln::builder {

/// Checks the kernel graph `live` (execution order) of `graph` with the kernel `defs` (indexed by
/// node id) before the memory plan is made and the engine written. Fails naming the first node
/// that could not run.
absl::Status VerifyKernelGraph(const ir::Graph& graph, const std::vector<ir::Node*>& live,
                               const std::vector<const kernels::KernelDef*>& defs);

}  // namespace kiln::builder
