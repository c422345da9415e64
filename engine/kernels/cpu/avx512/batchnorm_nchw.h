// BatchNormalization in inference mode on a channels-first X (batchnorm_nchw_avx512.cc), for
// norm_ops.cc. Call only when the CPU has the kAvx512 features and kCpuAvx512Bf16.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {

/// y = (x - mean[c]) / stddev[c] * scale[c] + bias[c] for X [n, channels, spatial] (any rank
/// >= 2 flattened after C) of float, float16 or bfloat16, in fp32 with the reference's four
/// separate operations, rounded once: the reference BatchNormalization to the bit.
void BatchNormNchw(DataType dtype, const void* x, void* y, int64_t n, int64_t channels,
                   int64_t spatial, const float* mean, const float* stddev, const float* scale,
                   const float* bias);

}  // namespace kiln::kernels::cpu::avx512
