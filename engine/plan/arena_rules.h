// The rules of the activation arena that the memory planner (runtime/memory_planner.cc) follows
// and the engine blob reader (engine_blob.cc) checks a loaded plan against: they must agree, so
// they live here once.
#pragma once

#include <cstdint>

#include "engine/ir/graph.h"

namespace kiln::plan {

/// Every arena slot's offset and size are multiples of this (a cache line, and the widest
/// vector load); a zero-element tensor still gets one such block.
constexpr uint64_t kArenaAlign = 64;

/// The largest arena a build plans and a reader accepts. Tensor::Allocate refuses any tensor
/// over 2^40 bytes (ir/tensor.cc) and shape inference refuses such static tensors; an arena
/// holds many tensors at once, but one of a terabyte (2^40 bytes) is no plausible CPU inference
/// engine: a build that needs more has a wrong shape, and the limit keeps a hostile plan from
/// asking the runtime for it.
constexpr uint64_t kMaxArenaBytes = uint64_t{1} << 40;

/// The slot size of `elements` elements of `element_size` bytes: rounded up to kArenaAlign,
/// kArenaAlign for none. The caller keeps elements * element_size below 2^63.
constexpr uint64_t ArenaSlotBytes(uint64_t elements, uint64_t element_size) {
  const uint64_t bytes = (elements * element_size + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  return bytes == 0 ? kArenaAlign : bytes;
}

/// The input whose slot output 0 may take when that input dies at the node, or -1: input 0 of
/// an op whose output holds its bytes unchanged (layout_shape.cc), and the residual Z (input 3)
/// of a FusedConv, which every FusedConv kernel reads before it writes the Y elements over it
/// (kernel.h): oneDNN's sum post-op then adds Z where it lies instead of a copy of it in Y. Two
/// slots live at once may share bytes only through such a handover.
inline int InPlaceInput(ir::OpType op) {
  switch (op) {
    case ir::OpType::kReshape:
    case ir::OpType::kFlatten:
    case ir::OpType::kSqueeze:
    case ir::OpType::kUnsqueeze:
    case ir::OpType::kIdentity:
      return 0;
    case ir::OpType::kFusedConv:
      return 3;
    default:
      return -1;
  }
}

}  // namespace kiln::plan
