// The fp32 convolution chain of an inverted-residual block (MobileNetV2), computed row by row so
// that its wide interior tensors never leave the cache (conv_chain_avx512.cc; the kernel class is
// conv_chain_ops.cc):
//
//   E = act0(X * W0 + B0)            1x1 expansion, C0 -> C1 channels (optional: E = X)
//   D = act1(depthwise(E, W1) + B1)  kh x kw depthwise window, strides, zero padding
//   Y = act2(D * W2 + B2 [+ Z])      1x1 projection, C1 -> C2 channels, optional residual Z
//
// X, Z and Y are NHWC. Each output element is, as in the three convolutions one after another,
// one fp32 sum of its products plus the bias (then + Z), then the activation; every interior
// value is fp32 (what the separate fp32 convolutions would store). The sums are taken in
// ascending input-channel (or window) order.
//
// Each thread takes a contiguous run of output rows, in bands of rows whose interior fits in L2
// (kBandBytes): for a band it computes the rows of E its windows need that it has not yet
// computed (each E row once per thread) into a ring, the depthwise rows into a band of D, and
// the projection of that band into Y.
#pragma once

#include <cstdint>

namespace kiln::kernels::cpu::avx512 {

/// An activation of the chain: none, Relu, LeakyRelu (alpha) or Clip (lo, hi), with the
/// reference formulas of cpu/ref/elementwise_activation.h (NaN passes through).
struct ChainActivation {
  enum Kind { kNone, kRelu, kLeakyRelu, kClip };
  Kind kind = kNone;
  float alpha = 0.0f, lo = 0.0f, hi = 0.0f;
};

// The packing helpers are defined in conv_chain_ops.cc (no ISA code).

/// Channels rounded up to whole 16-float vectors: the stride of the packed weights and biases.
int64_t ChainPadded(int64_t c);

/// Floats of packed 1x1 weights for `k` inputs and `n` outputs: ceil(n / 16) panels [k][16].
int64_t ChainPackedElems(int64_t k, int64_t n);

/// Packs 1x1 W [n, k] (ONNX [M, C, 1, 1]) into panels of 16 outputs, [n/16][k][16], zero padded.
void ChainPack1x1(const float* w, int64_t k, int64_t n, float* out);

/// Packs depthwise W [c, 1, kh, kw] as [kh * kw][ChainPadded(c)], zero padded.
void ChainPackDepthwise(const float* w, int64_t c, int64_t taps, float* out);

struct ConvChainArgs {
  int64_t n = 0, h = 0, w = 0, c0 = 0;  // X [n, h, w, c0]
  const float* x = nullptr;
  // Expansion: packed W0 (ChainPack1x1 of [c1, c0]) and B0 [ChainPadded(c1)]; w0 nullptr when
  // the chain starts at the depthwise convolution (then c1 == c0).
  const float* w0 = nullptr;
  const float* b0 = nullptr;
  ChainActivation act0;
  int64_t c1 = 0;
  // Depthwise: ChainPackDepthwise of W1, B1 [ChainPadded(c1)].
  const float* w1 = nullptr;
  const float* b1 = nullptr;
  ChainActivation act1;
  int64_t kh = 0, kw = 0, sh = 1, sw = 1, pad_top = 0, pad_left = 0, oh = 0, ow = 0;
  // Projection: packed W2 (ChainPack1x1 of [c2, c1]), B2 [ChainPadded(c2)].
  const float* w2 = nullptr;
  const float* b2 = nullptr;
  ChainActivation act2;
  int64_t c2 = 0;
  const float* z = nullptr;  // optional residual [n, oh, ow, c2]
  float* y = nullptr;        // [n, oh, ow, c2]
  // Per-thread scratch of ConvChainScratchFloats floats each, 64-byte aligned, for `threads`.
  float* scratch = nullptr;
  int threads = 1;
};

/// Floats of one thread's scratch (a multiple of 16): the ring of E rows and a band of D rows.
int64_t ConvChainScratchFloats(const ConvChainArgs& a);

/// Runs the chain on `a.threads` OpenMP threads. Needs the kAvx512 CPU features.
void ConvChainAvx512(const ConvChainArgs& a);

}  // namespace kiln::kernels::cpu::avx512
