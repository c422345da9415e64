// Channels-first (NCHW, any spatial rank) MaxPool, AveragePool, GlobalAveragePool and
// GlobalMaxPool on float, float16 and bfloat16 (pool_nchw_avx512.cc), for pool_nchw_ops.cc: the
// reference's numbers to the bit (kernels/cpu/ref/nn_pool.cc). Call only when the CPU has the
// kAvx512 features and kCpuAvx512Bf16.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {

/// A windowed pool of X [planes, in...] into Y [planes, out...]: the window per spatial axis
/// (kernel, strides, dilations, leading and trailing pads, as ref::nn::ResolveWindow gives).
struct PoolNchwArgs {
  DataType dtype = DataType::kF32;
  const void* x = nullptr;
  void* y = nullptr;
  int64_t planes = 0;
  std::vector<int64_t> in, out, kernel, strides, dilations, pad_begin, pad_end;
  bool average = false;
  bool count_include_pad = false;
};

/// MaxPool: the largest non-NaN cell of each window inside X (the lowest float when there is
/// none). AveragePool: the fp32 sum of the window's cells inside X, in row-major order, divided
/// by their count (or, with count_include_pad, the count of cells inside X and its explicit
/// pads), 0 for an empty count; rounded once. 16 outputs along the last axis at a time.
void PoolNchw(const PoolNchwArgs& a);

/// Global pools of X [planes, size]: the fp32 sum of each plane in order divided by size
/// (`average`), or the running std::max from the first element; rounded once. 16 planes at a
/// time.
void GlobalPoolNchw(DataType dtype, const void* x, void* y, int64_t planes, int64_t size,
                    bool average);

}  // namespace kiln::kernels::cpu::avx512
