// LayerNorm rows on float, float16 and bfloat16 storage (norm_avx512.cc), for the fast
// LayerNormalization and AddLayerNorm kernels (norm_ops.cc), and channels-last
// BatchNormalization and LRN. Call only when the CPU has the
// kAvx512 features and kCpuAvx512Bf16.
//
// Arithmetic (fp32 throughout; the reference's steps, normalization_internal.h, with its sums in
// another order): for each row of n values v (widened exactly from the storage type; with two
// inputs v = x + x2 in fp32, unrounded), sum = the sum of v kept in 16 lanes (element j added to
// lane j % 16 in order of j, then lanes 0..15 added in order), mean = sum / n, d = v - mean,
// sq = the sum of d * d in the same lane order (each product rounded, no fused multiply-add),
// var = sq / n, inv_std = 1 / sqrt(var + eps), y = (d * inv_std) * scale (+ bias), rounded once
// to the storage type. LayerNormalization and AddLayerNorm both run these rows, so an unfused
// Add + LayerNormalization in fp32 and the fused kernel give the same bits.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {

struct LayerNormArgs {
  DataType dtype = DataType::kF32;  // x, x2, y and sum: kF32, kF16 or kBF16
  const void* x = nullptr;          // rows x n values
  const void* x2 = nullptr;         // optional second addend, as x
  int64_t rows = 0, n = 0;          // n >= 1
  float eps = 1e-5f;
  const float* scale = nullptr;  // n values
  const float* bias = nullptr;   // optional, n values
  void* y = nullptr;             // rows x n values
  void* sum = nullptr;           // optional: x + x2 rounded to dtype (x2 given)
  float* mean = nullptr;         // optional, one per row
  float* inv_std = nullptr;      // optional, one per row
};

/// The rows of `a`, on the OpenMP threads when there is enough work. `y` may be `x` or `x2`.
void LayerNormRows(const LayerNormArgs& a);

/// BatchNormalization in inference mode on a channels-last X of `pixels` x `channels` values
/// (kF32, kF16 or kBF16): y = (x - mean[c]) / stddev[c] * scale[c] + bias[c], each step an fp32
/// operation rounded as written (no fused multiply-add), rounded once to the storage type: the
/// reference kernel's arithmetic, with stddev[c] = sqrt(var[c] + epsilon) given.
void BatchNormNhwc(DataType dtype, const void* x, void* y, int64_t pixels, int64_t channels,
                   const float* mean, const float* stddev, const float* scale, const float* bias);

/// LRN across channels on a channels-last X of `pixels` x `channels` values (kF32, kF16 or
/// kBF16): sq = the sum of x[c']^2 over c' in [c - (size - 1) / 2, c + size / 2] within
/// [0, channels), in that order from 0, each square and sum an fp32 operation, then
/// y = x / powf(bias + alpha / size * sq, beta), rounded once: the reference LRN's arithmetic.
void LrnNhwc(DataType dtype, const void* x, void* y, int64_t pixels, int64_t channels, int64_t size,
             float alpha, float beta, float bias);

}  // namespace kiln::kernels::cpu::avx512
