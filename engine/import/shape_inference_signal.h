// Type and shape inference for the signal and detection ops, called from shape_inference.cc.
// Shapes (ONNX operator docs):
//
//   DFT: input [..., n, ..., 1 or 2] -> [..., m, ..., 2] along `axis` (opset 17: attribute,
//     default 1; opset 20: input 2, default -2), m = dft_length (input 1, default n; IRFFT
//     default 2 (n - 1)), floor(m / 2) + 1 for the forward one-sided form; the real IRFFT output
//     ends in 1.
//   STFT: signal [B, L, 1 or 2] -> [B, (L - frame_length) / frame_step + 1, bins, 2], bins =
//     frame_length / 2 + 1 when onesided (the default), else frame_length.
//   HannWindow, HammingWindow, BlackmanWindow: [size], dtype output_datatype (default float).
//   MelWeightMatrix: [dft_length / 2 + 1, num_mel_bins], dtype output_datatype.
//   NonMaxSuppression: int64 [selected, 3], selected known only at run time.
//   RoiAlign: [num_rois, C, output_height, output_width].
//   DeformConv: [N, oC, offset's spatial dims].
#pragma once

#include "absl/status/statusor.h"
#include "engine/common/dtype.h"
#include "engine/ir/graph.h"

namespace kiln::import {

/// True for the ops above (DFT, STFT, the windows, MelWeightMatrix, NonMaxSuppression, RoiAlign,
/// DeformConv).
bool IsSignalOp(ir::OpType op);

/// The dtype of output `k` of such a node: output_datatype for the windows and MelWeightMatrix
/// (Unimplemented naming a type Kiln lacks), int64 for NonMaxSuppression, input 0's otherwise.
absl::StatusOr<DataType> SignalOutputType(const ir::Node& n, int k);

/// The shape of output `k` of such a node: rank known where the op fixes it, dims known where
/// they follow from static input dims, constant inputs and attributes (unknown otherwise).
ir::Shape SignalOutputShape(const ir::Node& n, int k);

}  // namespace kiln::import
