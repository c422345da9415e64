// Vectorised elementary functions on float arrays (erf by glibc's libmvec; exp, sigmoid and tanh
// our own).
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

/// y[i] = 1 / (1 + exp(-x[i])) for i < n: exp(-x) as ExpF32, then one addition and one
/// division: within 3 ulp of the exact value where that is at least 2^-126, within 2^-126 below
/// (0 for x < -88.7). NaN stays NaN. `y` may be `x`.
void SigmoidF32(const float* x, float* y, int64_t n);

/// y[i] = tanh(x[i]) for i < n: for |x| < 0.625, x + x^3 p(x^2) with p a degree-5 polynomial
/// fitted to (tanh(x) - x) / x^3 (under 1 ulp); above, sign(x) (1 - 2 / (exp(2|x|) + 1)) with
/// exp as ExpF32 (under 3 ulp). +-Inf gives +-1, -0 stays -0, NaN stays NaN. `y` may be `x`.
void TanhF32(const float* x, float* y, int64_t n);

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
