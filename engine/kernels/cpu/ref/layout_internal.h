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

/// Pad's modes, and the mode attribute read (an error naming the node for another one).
enum class PadMode { kConstant, kReflect, kEdge, kWrap };
absl::StatusOr<PadMode> ParsePadMode(const ir::Node& node);

/// The input coordinate of padded position `i` (relative to the kept window of length n > 0) in
/// an edge, reflect or wrap Pad; -1 (a fill) for kConstant (layout.cc).
int64_t PadCoord(PadMode mode, int64_t i, int64_t n);

}  // namespace kiln::kernels::cpu::ref
