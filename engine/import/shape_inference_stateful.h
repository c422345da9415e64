// Type and shape inference for the stateful sequence ops whose outputs differ from input 0:
// LinearAttention (opset 27) and CausalConvWithState (opset 27), and for RotaryEmbedding
// (opset 23), called from shape_inference.cc. Shapes (ONNX operator docs):
//
//   LinearAttention: query (B, T, Hq*dk), value (B, T, Hkv*dv), past_state (B, Hkv, dk, dv)
//     -> output (B, T, Hq*dv), present_state (B, Hkv, dk, dv) of past_state's dtype (query's
//     when past_state is omitted).
//   CausalConvWithState: input (B, C, L), weight (C, 1, k)
//     -> output (B, C, L), present_state (B, C, k - 1).
//   RotaryEmbedding: output of X's shape.
#pragma once

#include "absl/status/statusor.h"
#include "engine/common/dtype.h"
#include "engine/ir/graph.h"

namespace kiln::import {

/// True for the ops this file infers.
bool IsStatefulOp(ir::OpType op);

/// The dtype of output `k` of a LinearAttention, CausalConvWithState or RotaryEmbedding node,
/// after checking that its floating inputs share one dtype (LinearAttention's past_state may
/// differ: its own type S). InvalidArgument naming the node otherwise.
absl::StatusOr<DataType> StatefulOutputType(const ir::Node& n, int k);

/// The shape of output `k` of such a node: rank known, dims known where they follow from the
/// inputs and attributes (unknown otherwise).
ir::Shape StatefulOutputShape(const ir::Node& n, int k);

}  // namespace kiln::import
