// Which convolution nodes the chain kernel (conv_chain.h, conv_chain_ops.cc) takes a step of:
// the tests passes/conv_chain.cc builds chains from and the depthwise kernel's `supports`, one
// definition for both (conv_chain_ops.cc). Ordinary code: no AVX-512 here.
#pragma once

#include "engine/ir/graph.h"

namespace kiln::kernels::cpu::avx512 {

/// A Conv or FusedConv running channels-last (kChannelsLastAttr), fp32, fp16 or bf16 in and out
/// (one type), W (and B) constants of that type with W of rank 4, activation none, Relu,
/// LeakyRelu, Clip or HardSwish, no dilation, explicit pads, 2-D strides and pads.
bool ChainMemberConv(const ir::Node& n);

/// A chain member that is a 1x1 convolution with one group, unit strides and no padding.
bool ChainPointwiseConv(const ir::Node& n);

/// A chain member that is depthwise (W [C, 1, kh, kw] with group C > 1, kh <= 16) without a
/// residual.
bool ChainDepthwiseConv(const ir::Node& n);

}  // namespace kiln::kernels::cpu::avx512
