// Kiln's own type and shape inference, per (op, since_version). Every value gets a dtype (needed
// by kernel selection and, later, precision assignment); shapes are inferred where they follow
// from input shapes and constant inputs, and left unknown (rank or dims) otherwise — kernels
// compute exact shapes at run time either way.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "engine/ir/graph.h"

namespace kiln::import {

/// Infers output dtypes and shapes of every node in `order` (a topological order). Fails naming
/// the node when input dtypes are inconsistent or an output dtype cannot be determined.
absl::Status InferTypesAndShapes(ir::Graph& graph, const std::vector<ir::Node*>& order);

}  // namespace kiln::import
