// The fp32, fp16 or bf16 convolution chain of an inverted-residual block (MobileNetV2), computed
// row by row so that its wide interior tensors never leave the cache (conv_chain_avx512.cc with
// the pointwise, depthwise and phased steps in conv_chain_{pointwise,depthwise,phased}_avx512.cc
// sharing conv_chain_inl.h; the kernel class is conv_chain_ops.cc):
//
//   E = act0(X * W0 + B0)            1x1 expansion, C0 -> C1 channels (optional: E = X)
//   D = act1(depthwise(E, W1) + B1)  kh x kw depthwise window, strides, zero padding
//   Y = act2(D * W2 + B2 [+ Z])      1x1 projection, C1 -> C2 channels, optional residual Z
//                                    (optional: Y = D, C2 = C1)
//
// X, Z and Y are NHWC, fp32 or (`half`) fp16 or bf16. Each output element is, as in the three
// convolutions one after another, one fp32 sum of the bias and its products (then + Z), then the
// activation; the interior values E and D are fp32 in fp32 and fp16 chains (an fp16 chain rounds
// only Y to fp16: a fused kernel's fp32 interior, DESIGN.md §5), and in a bf16 chain what the
// separate convolutions would store, that sum rounded to bf16 (kept widened to fp32, exactly,
// or as bf16 for the vdpbf16ps projection). The sums start
// at the bias and are taken in ascending input-channel (or window) order, whatever the split over
// the threads (a bf16 chain's 1x1 steps on vdpbf16ps, w0_dot / w2_dot: in pairs, k + 1 before k,
// each product exact in fp32). Weights and biases are fp32 (a 16-bit graph's widened, exactly).
//
// Each thread takes a contiguous run of output rows, in bands of rows whose interior fits in L2
// (kBandBytes): for a band it computes the rows of E its windows need that it has not yet
// computed (each E row once per thread) into a ring, the depthwise rows into a band of D, and
// the projection of that band into Y (without a projection, the depthwise rows go to Y). Small
// images on two threads go image by image instead: E split over the threads, then each
// thread's share of the output pixels through the other two steps. On more threads, where the
// rows per thread are few, image by image in three phases: E as tasks of pixels x output panels,
// D as tasks of pixels x channel blocks, Y as tasks of pixels x output panels (PhasedImages).
#pragma once

#include <cstdint>

namespace kiln::kernels::cpu::avx512 {

/// An activation of the chain: none, Relu, LeakyRelu (alpha), Clip (lo, hi) or HardSwish, with the
/// reference formulas of cpu/ref/elementwise_activation.h (NaN passes through).
struct ChainActivation {
  enum Kind { kNone, kRelu, kLeakyRelu, kClip, kHardSwish };
  Kind kind = kNone;
  float alpha = 0.0f, lo = 0.0f, hi = 0.0f;
};

struct ConvChainArgs {
  int64_t n = 0, h = 0, w = 0, c0 = 0;  // X [n, h, w, c0]
  bool half = false;                    // X, Z and Y 16-bit (uint16_t bits), else fp32
  bool bf16 = false;                    // with `half`: bf16, else fp16
  const void* x = nullptr;
  // Expansion: W0 [c1, c0] packed in panels of 16 outputs ([ceil(c1 / 16)][c0][16], zero padded)
  // and B0 zero padded to whole vectors of 16; w0 nullptr when the chain starts at the depthwise
  // convolution (then c1 == c0).
  const float* w0 = nullptr;
  const float* b0 = nullptr;
  ChainActivation act0;
  int64_t c1 = 0;
  // Depthwise: W1 [c1, 1, kh, kw] packed as [kh * kw][c1 padded to 16], B1 padded.
  const float* w1 = nullptr;
  const float* b1 = nullptr;
  ChainActivation act1;
  int64_t kh = 0, kw = 0, sh = 1, sw = 1, pad_top = 0, pad_left = 0, oh = 0, ow = 0;
  // Projection: W2 [c2, c1] packed as W0, B2 padded; w2 nullptr when the chain ends at the
  // depthwise convolution (then c2 == c1, and no z).
  const float* w2 = nullptr;
  const float* b2 = nullptr;
  ChainActivation act2;
  int64_t c2 = 0;
  // bf16 chains (optional): W0 and W2 also as bf16 pairs, [ceil(c_out / 16)][ceil(c_in / 2)][16][2]
  // (zero padded), for the 1x1 steps on vdpbf16ps (needs kCpuAvx512Bf16): X and D are then read
  // as bf16 directly.
  const uint16_t* w0_dot = nullptr;
  const uint16_t* w2_dot = nullptr;
  const void* z = nullptr;  // optional residual [n, oh, ow, c2]
  void* y = nullptr;        // [n, oh, ow, c2], or with `pool` [n, oh / 2, ow / 2, c2]
  // Y is the 2 x 2, stride-2 MaxPool (no padding, floor: an odd last row or column dropped) of
  // the chain's output, which then never leaves the cache: each band's rows are stored in Y's
  // type into the scratch and pooled from there, the maxima as the MaxPool kernel takes them
  // (cells in row-major order, NaN skipped). Runs in bands of an even number of rows.
  bool pool = false;
  // Scratch of ConvChainScratchFloats floats, 64-byte aligned.
  float* scratch = nullptr;
  int threads = 1;
};

/// The threads to run on, at most `a.threads` (the threads available): no more than the output
/// rows (pairs of rows with `pool`), or, where the images go in phases (many threads, few rows),
/// than the output pixels.
int64_t ConvChainThreads(const ConvChainArgs& a);

/// Floats of the scratch for `a.threads` threads: per thread the ring of E rows and a band of D
/// rows, or, for small images on several threads, one image's E and D; in a 16-bit chain also
/// X's rows widened to fp32 (into the ring when there is no expansion).
int64_t ConvChainScratchFloats(const ConvChainArgs& a);

/// Runs the chain on `a.threads` OpenMP threads. Needs the kAvx512 CPU features.
void ConvChainAvx512(const ConvChainArgs& a);

}  // namespace kiln::kernels::cpu::avx512
