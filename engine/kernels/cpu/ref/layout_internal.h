// Shape rules of the reference layout kernels that the fast data-movement kernels
// (avx512/memory_ops.cc, avx512/memory_join_ops.cc) reuse, so both read the attributes the same
// way. Errors name the node and the field.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/kernels/kernel.h"

namespace kiln::kernels::cpu::ref {

/// Transpose's permutation for an input of rank `rank`: the perm attribute, or the axes
/// reversed without one; an error unless it is a permutation of the rank's axes (layout.cc).
absl::StatusOr<std::vector<int64_t>> TransposePerm(const ir::Node& node, int rank);

/// Sizes of the Split outputs along the axis of length `dim`: the split input (attribute before
/// opset 13), num_outputs (opset 18), or equal parts (layout_concat.cc).
absl::StatusOr<std::vector<int64_t>> SplitSizes(const ir::Node& node, KernelContext& ctx,
                                                int64_t dim);

}  // namespace kiln::kernels::cpu::ref
