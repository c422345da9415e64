// Vectorised elementary functions on float arrays (erf by glibc's libmvec; exp, log, expm1,
// sigmoid, tanh and the activations built on them our own).
// Defined in math_avx512.cc; call only when the CPU has kAvx512 features.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {

/// y[i] = erf(x[i]) for i < n, 16 at a time by glibc's libmvec: within 2 ulp of the exact value
/// where |erf| < 0.99999, within 2^-22 absolute nearer +-1 (it saturates up to 4 ulp early) and
/// for subnormal x (as the test measures); NaN stays NaN, +-Inf gives +-1. `y` may be `x`.
void ErfF32(const float* x, float* y, int64_t n);

/// y[i] = exp(x[i]) for i < n (own polynomial, math_avx512.cc): within 1 ulp of the exact value,
/// subnormal results included; 0 below -104, +Inf past FLT_MAX, NaN stays NaN. `y` may be `x`.
void ExpF32(const float* x, float* y, int64_t n);

/// y[i] = sigmoid(x[i]) for i < n as the reference's SigmoidOp writes it: e = exp(-|x|) by
/// ExpF32, then 1 / (1 + e) for x >= 0 and e / (1 + e) below, one addition and one division:
/// within 3 ulp of the exact value, subnormal results included (the distance counting subnormal
/// steps); 0 below x = -103.9. NaN stays NaN. `y` may be `x`.
void SigmoidF32(const float* x, float* y, int64_t n);

/// y[i] = tanh(x[i]) for i < n: for |x| < 0.625, x + x^3 p(x^2) with p a degree-5 polynomial
/// fitted to (tanh(x) - x) / x^3 (under 1 ulp); above, sign(x) (1 - 2 / (exp(2|x|) + 1)) with
/// exp as ExpF32 (under 3 ulp). +-Inf gives +-1, -0 stays -0, NaN stays NaN. `y` may be `x`.
void TanhF32(const float* x, float* y, int64_t n);

/// y[i] = GELU(x[i]) for i < n as the reference's GeluOp computes it in fp32: e = x * (1/sqrt 2)
/// rounded, e = erf(e) by ErfF32, then y = (0.5 * x) * (1 + e), each step rounded to fp32.
/// `y` may be `x`.
void GeluF32(const float* x, float* y, int64_t n);

/// y[i] = log(x[i]) for i < n: x = 2^e m with m in [0.75, 1.5) (vgetmantps, vgetexpps: exact,
/// subnormal x included), log(m) = f + f^2 q(f) for f = m - 1 (exact) with q a degree-9
/// polynomial fitted to (log1p(f) - f) / f^2 (truncation under 0.13 ulp), plus e ln2 in two
/// parts: within 1 ulp of the exact value (as the test measures over a sweep of all exponents).
/// log(+-0) = -Inf, log(x < 0) = NaN, log(+Inf) = +Inf, NaN stays NaN. `y` may be `x`.
void LogF32(const float* x, float* y, int64_t n);

/// y[i] = Softplus(x[i]) as the reference writes it: x + log1p(exp(-x)) for x > 0, else
/// log1p(exp(x)), i.e. max(x, 0) + log1p(u) with u = exp(-|x|) by ExpF32, and log1p(u) as LogF32's
/// reduction of w = 1 + u plus the rounding error of w (u - (w - 1), exact) divided by w: within
/// 2 ulp of the exact value, subnormal results included. +Inf stays +Inf, -Inf gives 0, NaN
/// stays NaN. `y` may be `x`.
void SoftplusF32(const float* x, float* y, int64_t n);

/// y[i] = x * tanh(Softplus(x)) (Mish) through tanh(log(1 + e)) = p / (p + 2), e = exp(x) by
/// ExpF32, p = e^2 + 2e (one fma), then one division and one product (y = x from x = 20 on,
/// where tanh(Softplus(x)) is 1 in fp32): within 5 ulp of the exact value where that is a
/// normal number; where it is subnormal (x < -87) exp(x) has only the subnormal's absolute
/// precision (2^-149), which the product scales by |x|. -Inf gives NaN (-Inf * 0, as the
/// reference), NaN stays NaN. `y` may be `x`.
void MishF32(const float* x, float* y, int64_t n);

/// y[i] = x / (1 + exp(-alpha * x)) (Swish-24, the reference's formula, each step rounded to
/// fp32) with exp as ExpF32: within 3 ulp of that formula evaluated exactly (exp overflowing
/// fp32 past 88.72, x / Inf = 0, as the reference's), but where -alpha * x is within an ulp of
/// that threshold: there either may overflow. `y` may be `x`.
void SwishF32(const float* x, float* y, int64_t n, float alpha);

/// y[i] = x < 0 ? alpha * expm1(x) : x (Elu; NaN stays NaN, -0 stays -0). expm1(x) = 2^k (1 + q)
/// - 1 for k = round(x / ln2), q = expm1(r) by its degree-8 Taylor polynomial (truncation under
/// 0.01 ulp), 2^k q + (2^k - 1) in one fused multiply-add (2^k - 1 exact while k <= 24): within
/// 1 ulp of the exact expm1, then one rounding for alpha *: within 2 ulp. `y` may be `x`.
void EluF32(const float* x, float* y, int64_t n, float alpha);

/// y[i] = max(0, x) + min(0, alpha * expm1(x / alpha)) (Celu; alpha != 0), x / alpha rounded
/// first, expm1 as EluF32's: within 3 ulp of that formula evaluated exactly from the rounded
/// quotient. NaN gives 0, as the reference's comparisons do. `y` may be `x`.
void CeluF32(const float* x, float* y, int64_t n, float alpha);

/// y[i] = x > 0 ? gamma * x : gamma * (alpha * exp(x) - alpha) (Selu, the reference's steps,
/// each rounded to fp32) with exp as ExpF32. alpha * exp(x) - alpha cancels near x = 0, so the
/// bound is absolute there: within 2 ulp plus |gamma * alpha| * 2^-23 of the formula evaluated
/// exactly. `y` may be `x`.
void SeluF32(const float* x, float* y, int64_t n, float alpha, float gamma);

/// y[i] = (0.5 * x) * (1 + tanh(k * (x + ((0.044715 * x) * x) * x))), k = sqrt(2 / pi) (Gelu
/// with approximate = "tanh", the reference's steps each rounded to fp32) with tanh as TanhF32.
/// For x < 0, 1 + tanh loses precision as x falls (it cancels below about -3), so the bound is
/// absolute there: within 4 ulp, plus |x| * 2^-23 for x < 0, of the formula evaluated exactly.
/// `y` may be `x`.
void GeluTanhF32(const float* x, float* y, int64_t n);

/// y[i] = exp(x[i] - max) / sum for i < n (n >= 1): the max over the row (NaN ignored; a NaN
/// makes the whole row NaN through the sum), ExpF32 of each difference, their sum kept in 16
/// lanes (element i added to lane i % 16 in order of i, then lanes 0..15 added in order), then
/// one division per element. The same numbers as that loop written out scalar. `y` may be `x`.
void SoftmaxRowF32(const float* x, float* y, int64_t n);

/// y[i] = (x[i] - max) - log(sum) for i < n (n >= 1), sum that of ExpF32(x[i] - max): the max as
/// the reference finds it (the first value, then any greater one; a NaN makes every output NaN
/// through the sum), the sum in 16 lanes as SoftmaxRowF32's, the log by logf. `y` may be `x`.
void LogSoftmaxRowF32(const float* x, float* y, int64_t n);

/// Softmax (or, with `log`, LogSoftmax) along an axis of n elements `stride` floats apart, for
/// `cols` neighbouring columns (element k of column c at k * stride + c): 16 columns at a time in
/// registers, the max as the reference finds it (the first value, then any greater one), the sum
/// of ExpF32(x - max) in order of k, then exp / sum (or (x - max) - logf(sum)). `y` may be `x`.
void SoftmaxColumnsF32(const float* x, float* y, int64_t n, int64_t stride, int64_t cols, bool log);

/// The parameterless functions above, for MathHalf.
enum class MathFn { kErf, kExp, kSigmoid, kTanh, kGelu, kGeluTanh, kLog, kSoftplus, kMish };

/// y[i] = fn(x[i]) for i < n on float16 (t = kF16) or bfloat16 (kBF16) storage: each element
/// widened exactly, the fp32 function above, one rounding back (round to nearest even, half.h's
/// NaN and subnormal results), in registers: the numbers of the fp32 function on an fp32 copy,
/// without the copy. Needs kCpuAvx512Bf16 for kBF16. `y` may be `x`.
void MathHalf(MathFn fn, DataType t, const uint16_t* x, uint16_t* y, int64_t n);

/// SoftmaxRowF32 on float16 / bfloat16 storage (t as MathHalf): the same fp32 arithmetic and
/// numbers, one rounding of each quotient; `buf` holds n floats (the exps). `y` may be `x`.
void SoftmaxRowHalf(DataType t, const uint16_t* x, uint16_t* y, int64_t n, float* buf);

}  // namespace kiln::kernels::cpu::avx512
