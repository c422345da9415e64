// DynamicQuantizeLinear's scalar pieces, shared by the reference kernel (data_ops_numeric.cc)
// and the AVX-512 one (avx512/quant_ops.cc) so that both give the same bits: the scale and
// zero point from the data range, the uint8 saturation, and writing the scale / zero-point
// outputs.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::ref {

/// Scale and zero point of DynamicQuantizeLinear (the zero point as an integral float).
struct DynamicQuantParams {
  float scale = 1.0f;
  float zero_point = 0.0f;
};

/// The parameters for data whose range, extended to include 0, is [lo, hi] (lo <= 0 <= hi):
///   scale = (hi - lo) / 255, or 1 when hi == lo;
///   zero_point = round_half_even(clamp(0 - lo / scale, 0, 255)).
DynamicQuantParams DynamicQuantizeParams(float lo, float hi);

/// Saturates v (already rounded half to even) to [0, 255]; NaN maps to 0 (a float -> uint8 cast
/// of NaN would be undefined behaviour).
uint8_t SaturateU8(float v);

/// Writes output 1 (the fp32 scale) and output 2 (the uint8 zero point) where requested.
absl::Status WriteDynamicQuantizeParams(KernelContext& ctx, const DynamicQuantParams& p);

}  // namespace kiln::kernels::cpu::ref
