// The thin-convolution route of the oneDNN convolution kernel (conv_dnnl.cc): an fp32
// channels-last 2-D convolution with one group that runs along one spatial axis only (the other 1
// wide in X, the kernel and Y, unpadded: magika's [N, C, 512, 1] by a 5 x 1 kernel) is one
// AVX-512 GEMM per image on X's own bytes. Also the prepacked-W record of the kernel's two GEMM
// routes (this one and the per-tap GEMM of small images, conv_dnnl.cc's RunGemm).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "engine/ir/tensor.h"
#include "engine/kernels/cpu/ref/nn_internal.h"

namespace kiln::kernels::cpu::dnnl {

/// Whether spatial axis `axis` of a 2-D convolution is trivial: X, the kernel and Y all 1 wide
/// on it and no padding, so the convolution runs along the other axis alone (stride and
/// dilation on a 1-wide kernel over a 1-wide input change nothing).
bool AxisTrivial(const ref::nn::ConvSetup& s, int axis);

/// The kPrepackedWeightsAttr words (register.h) of W packed for a GEMM route: 0 for the per-tap
/// GEMM (one B per kernel tap) or 1 for the thin GEMM (one [taps * C, M] B), then C, M and the
/// taps. A oneDNN layout's record starts with oneDNN's version instead.
std::array<int64_t, 4> GemmWords(int64_t c, int64_t m, int64_t taps, bool line);

/// Whether the build's prepacked W (`prepacked`, recorded as `words`) is W packed for a GEMM
/// route with record `want`: `floats` floats, 64-byte aligned. Asked on every run: no
/// allocation.
bool PrepackedGemmFits(const ir::Tensor* prepacked, const std::vector<int64_t>& words,
                       const std::array<int64_t, 4>& want, int64_t floats);

/// The thin GEMM of one convolution node: its W packed once per weight buffer, and scratch.
class ThinConvGemm {
 public:
  /// The spatial axis along which an fp32 channels-last 2-D convolution with one group runs
  /// alone (the other AxisTrivial) with a kernel of 2 or more taps and no dilation on it, and
  /// enough channels to fill the GEMM's 64-wide strips; -1 otherwise (or without AVX-512).
  static int Axis(const ref::nn::ConvSetup& s, int64_t group, bool channels_last);

  /// The floats of W packed for the GEMM at these C, M and taps.
  static int64_t PackedFloats(int64_t c, int64_t m, int64_t taps);

  /// W packed for the GEMM along `axis`: the build's prepacked bytes (`prepacked`, recorded as
  /// `words`) when they are that layout, else W packed here once per weight buffer.
  const float* PackedW(const ref::nn::ConvSetup& s, int axis, const ir::Tensor* prepacked,
                       const std::vector<int64_t>& words);

  /// Y (fp32, NHWC bytes) = the convolution along `axis` plus B, by W `packed` (PackedW): one
  /// GEMM per image, Y [OL, M] = A W^T with A [OL, KL * C] the overlapping rows of X. Every
  /// output is one fp32 sum over its window, taps outer and channels inner, then the bias in the
  /// epilogue. Z and the activation are the caller's.
  void Run(const ref::nn::ConvSetup& s, int axis, const float* packed, float* y);

 private:
  float* AlignedW();

  std::vector<float> w_;  // packed W (AlignedW inside)
  const void* w_src_ = nullptr;
  std::array<int64_t, 3> shape_ = {};  // C, M and taps of w_
  std::vector<int64_t> offsets_;       // A's per-image offsets
  std::vector<float> padded_;          // X with zero rows around it when the axis is padded
};

}  // namespace kiln::kernels::cpu::dnnl
