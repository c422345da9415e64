// The OpenCL backend's kernel families, registered with the one registry (registry.cc) when
// Kiln is built with KILN_WITH_OPENCL.
#pragma once

#include "engine/kernels/registry.h"

namespace kiln::kernels::opencl {

/// Elementwise unary, activation and broadcasting binary ops (elementwise.cc).
void RegisterElementwise(Registry& r);

/// MatMul and Gemm (matmul.cc).
void RegisterMatMul(Registry& r);

/// Conv and FusedConv (conv.cc).
void RegisterConv(Registry& r);

/// Memory ops: Transpose, Reshape and its kin, Concat, Slice, Gather, Expand, ... (memory_ops.cc).
void RegisterMemory(Registry& r);

/// Normalisations, Softmax, reductions and pooling (norm_ops.cc).
void RegisterNorm(Registry& r);

/// The fused AddLayerNorm and RMSNormalization (norm_fused.cc).
void RegisterNormFused(Registry& r);

/// Attention, opset 23: Q, K, V, mask, causal, scale, softcap, GQA; output Y (attention.cc).
void RegisterAttention(Registry& r);

/// LSTM, GRU and RNN: every direction, sequence_lens, initial states, peepholes, activations,
/// clip, layout; outputs Y, Y_h, Y_c (recurrent.cc).
void RegisterRecurrent(Registry& r);

/// Every OpenCL family.
void RegisterOpenCl(Registry& r);

}  // namespace kiln::kernels::opencl
