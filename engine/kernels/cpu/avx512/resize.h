// Separable linear and cubic Resize of one axis or two adjacent axes (resize_avx512.cc), for
// resize_ops.cc: the reference's arithmetic (kernels/cpu/ref/layout_resize.cc) to the bit, 16
// elements at a time. Call only when the CPU has the kAvx512 features and kCpuAvx512Bf16.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {

/// The sampling of one axis. taps == 0: the axis is not resized (out == in, values copied).
/// Otherwise output position o reads input index index[k * out + o] (already clamped into
/// [0, in)) with weight weight[k * out + o] for tap k < taps, or, when extrapolate is set and
/// extrapolate[o] != 0, is the extrapolation value (tf_crop_and_resize).
struct ResizeAxisTable {
  int64_t in = 1, out = 1;
  int taps = 0;
  const int32_t* index = nullptr;
  const float* weight = nullptr;
  const uint8_t* extrapolate = nullptr;
};

/// X viewed as [outer, h.in, w.in, inner] and Y as [outer, h.out, w.out, inner].
struct ResizeSeparableArgs {
  DataType dtype = DataType::kF32;  // X and Y: float, float16 or bfloat16
  const void* x = nullptr;
  void* y = nullptr;
  int64_t outer = 1, inner = 1;
  ResizeAxisTable h, w;
  float extrapolation = 0.0f;
};

/// Y = X resized along H, then along W, as the reference's axis-by-axis passes: X widened to
/// fp32, each pass's output value 0 + w_0 * v_0 + w_1 * v_1 + ... in tap order (separate
/// products and sums, in fp32), one rounding to Y's type at the end. Output rows on the OpenMP
/// threads when there are enough elements.
void ResizeSeparable(const ResizeSeparableArgs& a);

}  // namespace kiln::kernels::cpu::avx512
