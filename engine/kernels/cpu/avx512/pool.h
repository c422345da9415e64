// Channels-last (NHWC) MaxPool, AveragePool and GlobalAveragePool on float, float16 and bfloat16
// (pool_avx512.cc), for the pools the layout pass keeps in NHWC (passes/layout.h): 16 channels
// at a time, with the reference's numbers to the bit (kernels/cpu/ref/nn_pool.cc). Call only
// when the CPU has the kAvx512 features and kCpuAvx512Bf16.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {

/// One 2-D pooling window: input and output sizes, kernel, strides, dilations, leading pads
/// (ph, pw) and trailing ones (ph_end, pw_end).
struct PoolWindow2d {
  int64_t n = 0, c = 0, ih = 0, iw = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0, ph_end = 0, pw_end = 0;
};

/// y[n, oh, ow, c] = the largest non-NaN x[n, ih, iw, c] over the window cells inside the input
/// (the lowest float when there is none), as the reference MaxPool.
void MaxPoolNhwc(DataType dtype, const void* x, void* y, const PoolWindow2d& w);

/// y[n, oh, ow, c] = (sum of the window cells inside the input, in row-major order, in fp32) /
/// count, rounded once, count the cells inside the input, or with `count_include_pad` those
/// inside the padded input; 0 for a window with nothing to count: the reference AveragePool.
void AveragePoolNhwc(DataType dtype, const void* x, void* y, const PoolWindow2d& w,
                     bool count_include_pad);

/// y[n, c] = (sum over p of x[n, p, c], in p order, in fp32) / hw, rounded once: the reference
/// GlobalAveragePool's arithmetic with the spatial positions `hw` in row-major order.
void GlobalAveragePoolNhwc(DataType dtype, const void* x, void* y, int64_t n, int64_t hw,
                           int64_t c);

}  // namespace kiln::kernels::cpu::avx512
