// Vectorised fp32 <-> fp16 (F16C) and fp32 <-> bf16 (AVX512_BF16) conversions, bit-identical to
// the portable ones in engine/common/half.h (round to nearest even, same NaN and subnormal
// results). Defined in convert_avx512.cc; call only when the CPU has kAvx512 features (and
// kCpuAvx512Bf16 for FloatToBf16).
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {

/// dst[i] = FloatToHalfBits(src[i]) for i < n.
void FloatToHalf(const float* src, uint16_t* dst, int64_t n);
/// dst[i] = HalfBitsToFloat(src[i]) for i < n.
void HalfToFloat(const uint16_t* src, float* dst, int64_t n);
/// dst[i] = FloatToBFloat16Bits(src[i]) for i < n (needs kCpuAvx512Bf16).
void FloatToBf16(const float* src, uint16_t* dst, int64_t n);
/// dst[i] = BFloat16BitsToFloat(src[i]) for i < n.
void Bf16ToFloat(const uint16_t* src, float* dst, int64_t n);

/// dst[i] = src[i] converted from `from` to `to` (each kF32, kF16 or kBF16; fp16 <-> bf16 through
/// fp32, exact from fp16 then one rounding, as the reference Cast; or kI32 to kF32, rounded to
/// nearest even; or kBool to kF32, any non-zero byte 1) for i < n, in chunks on the
/// OpenMP threads when there are enough to keep both streaming. Needs kCpuAvx512Bf16 when `to`
/// is kBF16.
void ConvertArray(DataType from, DataType to, const void* src, void* dst, int64_t n);

}  // namespace kiln::kernels::cpu::avx512
