// Type and shape inference for the recurrent ops LSTM, GRU and RNN (opsets 7, 14 and 22), called
// from shape_inference.cc. Shapes (ONNX operator docs):
//
//   layout 0: X [seq, batch, input]   Y [seq, dirs, batch, hidden]   Y_h, Y_c [dirs, batch, hidden]
//   layout 1: X [batch, seq, input]   Y [batch, seq, dirs, hidden]   Y_h, Y_c [batch, dirs, hidden]
//
// with W [dirs, G*hidden, input], R [dirs, G*hidden, hidden], B [dirs, 2*G*hidden],
// initial_h / initial_c as Y_h, P [dirs, 3*hidden] (LSTM); G = 4 (LSTM), 3 (GRU), 1 (RNN);
// dirs = 2 for direction "bidirectional", else 1. hidden comes from the hidden_size attribute,
// else from R's (or W's) static dims.
// Kiln's LSTMQuantizedR (engine/ir/ops.def) is an LSTM whose R is int8/uint8, with R_scale
// (floating) and R_zero_point (R's dtype), both [dirs, 4*hidden], at slots 8 and 9.
#pragma once

#include "absl/status/statusor.h"
#include "engine/common/dtype.h"
#include "engine/ir/graph.h"

namespace kiln::import {

/// The dtype of output `k` (Y, Y_h or Y_c: X's) of an LSTM, GRU or RNN node, after checking the
/// node: its attributes (direction, activations and their count, hidden_size, layout, clip), the
/// static dims of W, R, B, initial_h, initial_c and P against them and against X, and its input
/// dtypes (one floating T for every input but sequence_lens, which is int32). InvalidArgument
/// naming the node otherwise.
absl::StatusOr<DataType> RecurrentOutputType(const ir::Node& n, int k);

/// The shape of output `k` of an LSTM, GRU or RNN node: rank known, dims known where they follow
/// from X, the attributes and the weights (unknown otherwise).
ir::Shape RecurrentOutputShape(const ir::Node& n, int k);

}  // namespace kiln::import
