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
// signal_dft.cc: DFT, STFT
void RegisterSignalDft(Registry& r);
// signal_windows.cc: HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix
void RegisterSignalWindows(Registry& r);
// detection_nms.cc: NonMaxSuppression
void RegisterDetectionNms(Registry& r);
// detection_roialign.cc: RoiAlign
void RegisterDetectionRoiAlign(Registry& r);
// nn_deform_conv.cc: DeformConv
void RegisterDeformConv(Registry& r);
// nn_rotary.cc: RotaryEmbedding (opset 23)
void RegisterRotaryEmbedding(Registry& r);
// nn_linear_attention.cc: LinearAttention (opset 27)
void RegisterLinearAttention(Registry& r);
// nn_causal_conv.cc: CausalConvWithState (opset 27)
void RegisterCausalConvWithState(Registry& r);

// sequence.cc: Sequence*, SplitToSequence, ConcatFromSequence, SequenceMap, Optional*
void RegisterSequences(Registry& r);

// ml.cc: ai.onnx.ml ArrayFeatureExtractor, Binarizer, LabelEncoder
void RegisterMl(Registry& r);
void RegisterMlTreeEnsemble(Registry& r);  // ml_tree_ensemble.cc: ai.onnx.ml TreeEnsemble
// training.cc: ai.onnx.preview.training Adagrad, Adam, Momentum
void RegisterTraining(Registry& r);
void RegisterFlexAttention(Registry& r);  // flex_attention.cc: ai.onnx.preview FlexAttention
void RegisterLinalgUnique(Registry& r);   // linalg_unique.cc: Det, Unique, Scatter (opset 9-10)
void RegisterTfIdf(Registry& r);          // tfidf.cc: TfIdfVectorizer

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
  RegisterSequences(r);
  RegisterRecentOps(r);
  RegisterBitCastTensorScatter(r);
  RegisterSignalDft(r);
  RegisterSignalWindows(r);
  RegisterDetectionNms(r);
  RegisterDetectionRoiAlign(r);
  RegisterDeformConv(r);
  RegisterRotaryEmbedding(r);
  RegisterLinearAttention(r);
  RegisterCausalConvWithState(r);
  RegisterQuantInteger(r);
  RegisterFused(r);
  RegisterMl(r);
  RegisterMlTreeEnsemble(r);
  RegisterTraining(r);
  RegisterFlexAttention(r);
  RegisterLinalgUnique(r);
  RegisterTfIdf(r);
}

}  // namespace kiln::kernels::cpu::ref
