// Vectorised elementary functions on float arrays (erf by glibc's libmvec, exp our own).
// Defined in math_avx512.cc; call only when the CPU has kAvx512 features.
#pragma once

#include <cstdint>

namespace kiln::kernels::cpu::avx512 {

/// y[i] = erf(x[i]) for i < n, 16 at a time by glibc's libmvec: within 2 ulp of the exact value
/// where |erf| < 0.99999, within 2^-22 absolute nearer +-1 (it saturates up to 4 ulp early) and
/// for subnormal x (as the test measures); NaN stays NaN, +-Inf gives +-1. `y` may be `x`.
void ErfF32(const float* x, float* y, int64_t n);

/// y[i] = exp(x[i]) for i < n (own polynomial, math_avx512.cc): within 1 ulp of the exact value,
/// subnormal results included; 0 below -104, +Inf past FLT_MAX, NaN stays NaN. `y` may be `x`.
void ExpF32(const float* x, float* y, int64_t n);

/// y[i] = GELU(x[i]) for i < n as the reference's GeluOp computes it in fp32: e = x * (1/sqrt 2)
/// rounded, e = erf(e) by ErfF32, then y = (0.5 * x) * (1 + e), each step rounded to fp32.
/// `y` may be `x`.
void GeluF32(const float* x, float* y, int64_t n);

/// y[i] = exp(x[i] - max) / sum for i < n (n >= 1): the max over the row (NaN ignored; a NaN
/// makes the whole row NaN through the sum), ExpF32 of each difference, their sum kept in 16
/// lanes (element i added to lane i % 16 in order of i, then lanes 0..15 added in order), then
/// one division per element. The same numbers as that loop written out scalar. `y` may be `x`.
void SoftmaxRowF32(const float* x, float* y, int64_t n);

}  // namespace kiln::kernels::cpu::avx512
