// Reductions over one run of axes on float, float16 and bfloat16 storage (reduce_avx512.cc), for
// the fast ReduceSum, ReduceMean, ReduceMax, ... kernels (reduce_ops.cc). The input is seen as
// [outer, n, inner] (the reduced axes merged into n, the kept ones before and after into outer and
// inner); every output accumulates in fp32 (the reference's accumulation type for all three
// dtypes) in 16 lanes, so sums and products are the reference's up to summation order; Max and
// Min are exact. Call only when the CPU has the kAvx512 features.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {

/// What is folded over the reduced axis: x, x * x, |x|, max (NaN wins), min (NaN wins), product.
enum class RedFn { kSum, kSumSquare, kAbsSum, kMax, kMin, kProd };

/// acc[o * inner + i] = fold of `fn` over k < n of x[(o * n + k) * inner + i] (x of `dtype`:
/// kF32, kF16 or kBF16, widened exactly; n >= 1), in fp32. Runs on the OpenMP threads when the
/// input is large.
void ReduceAxis(RedFn fn, DataType dtype, const void* x, int64_t outer, int64_t n, int64_t inner,
                float* acc);

/// acc[o * inner + i] = sum over k < n of exp(x[(o * n + k) * inner + i] - mx[o * inner + i]) in
/// fp32 (exp by ExpF32 of math.h): the second pass of ReduceLogSumExp, `mx` the first pass's
/// maxima (finite where the caller uses the sum).
void ReduceSumExpShifted(DataType dtype, const void* x, int64_t outer, int64_t n, int64_t inner,
                         const float* mx, float* acc);

}  // namespace kiln::kernels::cpu::avx512
