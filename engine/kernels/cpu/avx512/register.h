// The explicit list of AVX-512 kernel families. Registry::Find picks these over the reference
// kernels only when the running CPU has the features of their Isa (and KernelDef::cpu_features).
//
// Layout (XNNPACK's split): `*_avx512.cc` files are compiled with AVX-512 flags (set per file in
// engine/CMakeLists.txt) and hold only plain functions on raw pointers, no templates or inline
// functions shared with other files, so no AVX-512 code can leak into code that runs before the
// CPU check. The kernel classes, shape checks and registration are ordinary files.
#pragma once

#include "engine/kernels/registry.h"

namespace kiln::kernels::cpu::avx512 {

void RegisterCast(Registry& r);         // cast.cc: Cast between float, float16 and bfloat16
void RegisterGemmOps(Registry& r);      // gemm_ops.cc: Gemm, MatMul on float, float16, bfloat16
void RegisterUnary(Registry& r);        // unary_ops.cc: Erf, Softmax, LogSoftmax (float types)
void RegisterElementwise(Registry& r);  // elementwise_ops.cc: broadcasting Add, Sub, Mul, Pow, ...
void RegisterCompare(Registry& r);      // compare_ops.cc: broadcasting Equal, Less, ..., Where
void RegisterPoolOps(Registry& r);      // pool_ops.cc: channels-last MaxPool, GlobalAveragePool
void RegisterNormOps(Registry& r);      // norm_ops.cc: LayerNormalization, AddLayerNorm
void RegisterConvChain(Registry& r);    // conv_chain_ops.cc: channels-last FusedConvChain
void RegisterTranspose(Registry& r);    // transpose_ops.cc: few-row Transpose of 4-byte types
void RegisterRecurrent(Registry& r);    // recurrent_ops.cc: LSTM, GRU, RNN
void RegisterActivation(Registry& r);   // activation_ops.cc: Sigmoid, Tanh, Exp, Log, Clip, ...
void RegisterMemoryOps(Registry& r);    // memory_ops.cc: Slice, Concat, Split, Gather, Pad, ...
void RegisterResize(Registry& r);       // resize_ops.cc: Resize, Upsample (nearest, linear, cubic)
void RegisterPoolNchw(Registry& r);     // pool_nchw_ops.cc: NCHW MaxPool, AveragePool, global pools
void RegisterQuantOps(Registry& r);     // quant_ops.cc: QuantizeLinear, DequantizeLinear, ...
void RegisterQuantInteger(Registry& r);  // quant_integer_ops.cc: MatMulInteger, ConvInteger (VNNI)
void RegisterAttention(Registry& r);     // attention_ops.cc: Attention (opset 23)
void RegisterReduceOps(Registry& r);     // reduce_ops.cc: ReduceSum, ReduceMean, ReduceMax, ...
void RegisterTopK(Registry& r);          // topk_ops.cc: TopK on float, float16, bfloat16

/// Registers every AVX-512 kernel.
inline void RegisterAvx512(Registry& r) {
  RegisterCast(r);
  RegisterGemmOps(r);
  RegisterUnary(r);
  RegisterElementwise(r);
  RegisterCompare(r);
  RegisterPoolOps(r);
  RegisterNormOps(r);
  RegisterConvChain(r);
  RegisterTranspose(r);
  RegisterRecurrent(r);
  RegisterActivation(r);
  RegisterMemoryOps(r);  // after RegisterTranspose: that kernel keeps its dtypes
  RegisterResize(r);
  RegisterPoolNchw(r);
  RegisterQuantOps(r);
  RegisterQuantInteger(r);
  RegisterAttention(r);
  RegisterReduceOps(r);
  RegisterTopK(r);
}

}  // namespace kiln::kernels::cpu::avx512
