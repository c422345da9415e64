// ConvTranspose whose windows do not overlap along W: kernel width == stride width == 2, kernel
// height == stride height, no dilation, no padding, one group (the 2x upsampling layers of
// feature-pyramid and U-Net decoders) (deconv_s2_avx512.cc), for cpu/dnnl/deconv_dnnl.cc. Call
// only when the CPU has the kAvx512 features (and kCpuAvx512Bf16 for bfloat16).
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {

struct DeconvS2Args {
  DataType dtype = DataType::kF32;  // X, W and Y
  const void* x = nullptr;          // [n, c, h, w]
  const void* w = nullptr;          // [c, m, kh, 2]
  const float* bias = nullptr;      // [m] or null
  void* y = nullptr;                // [n, m, h * kh, w * 2]
  int64_t n = 0, c = 0, h = 0, wd = 0, m = 0, kh = 0;
};

/// Y[n, m, i * kh + a, 2 * j + b] = bias[m] + sum over c of W[c, m, a, b] * X[n, c, i, j]: an fp32
/// sum (fused multiply-adds, channels in order, starting from the bias), rounded once to Y's
/// type. 16 input columns at a time, output rows on the OpenMP threads.
void DeconvS2(const DeconvS2Args& a);

}  // namespace kiln::kernels::cpu::avx512
