// Shape rules of the reference layout kernels that the fast data-movement kernels
// (avx512/memory_ops.cc, avx512/memory_join_ops.cc, opencl/memory_ops.cc) reuse, so all read the
// attributes and inputs the same way. Errors name the node and the field.
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

/// Slice's window on each axis of `x`: the first input index, the step and the output length
/// (an axis not sliced keeps 0, 1 and its size).
struct SliceWindow {
  std::vector<int64_t> start, step, dims;
};

/// Slice's starts, ends, axes and steps (attributes before opset 10, inputs 1 to 4 from it on),
/// checked and resolved against `x` (layout.cc).
absl::StatusOr<SliceWindow> ReadSlice(const ir::Node& node, KernelContext& ctx,
                                      const ir::Tensor& x);

/// Tile's output dims for input `x`: each dim times its entry of the repeats input (1), checked
/// (one non-negative entry per axis, no overflow) (layout.cc).
absl::StatusOr<std::vector<int64_t>> TileDims(const ir::Node& node, KernelContext& ctx,
                                              const ir::Tensor& x);

/// Expand's output dims for input `x`: x's dims broadcast with the shape input (1), which has no
/// negative dim (layout.cc).
absl::StatusOr<std::vector<int64_t>> ExpandDims(const ir::Node& node, KernelContext& ctx,
                                                const ir::Tensor& x);

/// Reshape's output dims for input `x`: the shape input (1) with its 0 (copy, unless allowzero)
/// and -1 (inferred) entries resolved, and the element count checked (layout_shape.cc).
absl::StatusOr<std::vector<int64_t>> ReshapeDims(const ir::Node& node, KernelContext& ctx,
                                                 const ir::Tensor& x);

/// Squeeze's output dims for input `x`: the axes (attribute before opset 13, optional input 1
/// from it on; none or empty: every axis of size 1) dropped (layout_shape.cc).
absl::StatusOr<std::vector<int64_t>> SqueezeDims(const ir::Node& node, KernelContext& ctx,
                                                 const ir::Tensor& x);

/// Unsqueeze's output dims for input `x`: size-1 axes inserted at the axes (attribute before
/// opset 13, input 1 from it on; required) (layout_shape.cc).
absl::StatusOr<std::vector<int64_t>> UnsqueezeDims(const ir::Node& node, KernelContext& ctx,
                                                   const ir::Tensor& x);

/// Concat's inputs (every one required), its axis and the output dims, after the checks: at
/// least one input, no scalars, the same dtype and dims outside the axis (layout_concat.cc).
struct ConcatArgs {
  std::vector<const ir::Tensor*> xs;
  int axis = 0;
  std::vector<int64_t> out_dims;
};
absl::StatusOr<ConcatArgs> ReadConcat(const ir::Node& node, KernelContext& ctx);

}  // namespace kiln::kernels::cpu::ref
