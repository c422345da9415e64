// The explicit list of reference kernel families. Each family file defines one RegisterXxx.
#pragma once

#include "engine/kernels/registry.h"

namespace kiln::kernels::cpu::ref {

void RegisterElementwise(Registry& r);    // elementwise.cc: unary, binary, logical, activations
void RegisterCast(Registry& r);           // cast.cc: Cast, CastLike
void RegisterReduce(Registry& r);         // reduce.cc: Reduce*, ArgMax/Min, Softmax family, ...
void RegisterNormalization(Registry& r);  // normalization.cc: Batch/Instance/Layer/Group/RMS
void RegisterNn(Registry& r);             // nn.cc: Conv, ConvTranspose, pools, Gemm, MatMul, ...
void RegisterLayout(Registry& r);         // layout.cc: Reshape, Transpose, Concat, Slice, Pad, ...
void RegisterIndexing(Registry& r);       // indexing.cc: Gather*, Scatter*, generators, quant
void RegisterLrn(Registry& r);            // normalization_lrn.cc: LRN
void RegisterLoss(Registry& r);     // loss.cc: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
void RegisterBitwise(Registry& r);  // elementwise_bitwise.cc: Bitwise*, BitShift
void RegisterSpatial(Registry& r);  // spatial.cc: LpPool, GlobalLpPool, GridSample, Col2Im,
                                    // AffineGrid, MaxUnpool
void RegisterFused(Registry& r);    // fused.cc: FusedMatMul, FusedConv, AddLayerNorm
void RegisterDataOps(Registry& r);  // data_ops.cc: Compress, ReverseSequence, CenterCropPad,
                                    // MeanVarianceNormalization, DynamicQuantizeLinear
// recurrent.cc: LSTM, GRU, RNN
void RegisterRecurrent(Registry& r);
void RegisterControlFlow(Registry& r);  // control_flow.cc: If, Loop, Scan
// quant_integer.cc: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv
void RegisterQuantInteger(Registry& r);
// scan_activation_recent.cc: Swish (opset 24), CumProd (opset 26)
void RegisterRecentOps(Registry& r);
// bitcast_tensor_scatter.cc: BitCast (opset 26), TensorScatter (opset 24)
void RegisterBitCastTensorScatter(Registry& r);

/// Registers every reference kernel.
inline void RegisterAll(Registry& r) {
  RegisterElementwise(r);
  RegisterCast(r);
  RegisterReduce(r);
  RegisterNormalization(r);
  RegisterNn(r);
  RegisterLayout(r);
  RegisterIndexing(r);
  RegisterLrn(r);
  RegisterLoss(r);
  RegisterBitwise(r);
  RegisterSpatial(r);
  RegisterDataOps(r);
  RegisterRecurrent(r);
  RegisterControlFlow(r);
  RegisterRecentOps(r);
  RegisterBitCastTensorScatter(r);
  RegisterQuantInteger(r);
  RegisterFused(r);
}

}  // namespace kiln::kernels::cpu::ref
