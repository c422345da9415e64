// Elementary functions of math.h. Compiled with AVX-512 flags (engine/CMakeLists.txt).
#include <immintrin.h>

#include <cmath>

#include "engine/kernels/cpu/avx512/math.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"

// glibc's libmvec, AVX-512 variant of erff (x86-64 vector function ABI: 16 floats in zmm0).
extern "C" __m512 _ZGVeN16v_erff(__m512 x);

namespace kiln::kernels::cpu::avx512 {

namespace {

// y[i] = f(x[i]) 16 at a time, the tail masked (lanes past n load zeros and store nothing).
template <__m512 (*F)(__m512)>
void Map16(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, F(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, F(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

// x = n ln2 + r with n = round(x / ln2) (*n) and r returned: ln2 split in a high part,
// 0.693145751953125 (15 bits: n times it is exact in fp32 for the clamped ranges of Exp16 and
// Expm1_16), and a low part, 1.4286068e-6.
inline __m512 ReduceLn2(__m512 x, __m512* n) {
  *n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(0.693145751953125f), x);
  return _mm512_fnmadd_ps(*n, _mm512_set1_ps(1.42860682030941723e-6f), r);
}

// exp(x) of 16 floats: x = n ln2 + r with n = round(x / ln2), |r| <= ln2 / 2 (ln2 split in a
// high part exact in fp32 times any n of the clamped range, and a low part), exp(r) by its
// Taylor polynomial of degree 7 (truncation below 5.3e-9 relative, well under half an ulp), and
// 2^n applied by vscalefps, which rounds once into the subnormal range and gives 0 below it and
// +Inf above FLT_MAX. x is first clamped to [-104, 89] (exp is 0 below, Inf above), NaN kept.
// libmvec's expf sends every lane whose result underflows through glibc's scalar expf: a
// softmax row under an attention mask (x - max near -1e4 or below) ran several times slower.
__m512 Exp16(__m512 x) {
  // Lanes whose result is 0 skip vscalefps: an underflowing result costs a microcode assist
  // (~150 cycles), and a masked softmax row is mostly such lanes.
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_NLT_UQ);
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  __m512 n;
  const __m512 r = ReduceLn2(x, &n);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(live, p, n);
}

// y[i] = f(x[i]) 16 at a time for a functor `f` (an activation's attributes captured).
template <typename F>
void MapWith(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

// SigmoidF32 of 16 floats: e = exp(-|x|), then (x >= 0 ? 1 : e) / (1 + e).
__m512 Sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = Exp16(_mm512_or_ps(x, _mm512_set1_ps(-0.0f)));
  const __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_div_ps(_mm512_mask_mov_ps(e, pos, one), _mm512_add_ps(one, e));
}

// log(m) for m in [0.75, 1.5) plus `d` (small beside the result): f = m - 1 (exact), f +
// (f^2 q(f) + d), q fitted (weighted least squares at Chebyshev nodes over [-0.25, 0.5), relative
// to log1p(f), coefficients rounded to fp32) to (log1p(f) - f) / f^2; then + e ln2 in two parts
// (e times the high part exact: it has 15 significant bits, |e| <= 149 has 8).
__m512 LogOfReduced(__m512 m, __m512 e, __m512 d) {
  const __m512 f = _mm512_sub_ps(m, _mm512_set1_ps(1.0f));
  __m512 q = _mm512_set1_ps(0.03678262233734131f);
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(-0.09067042917013168f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(0.11744706332683563f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(-0.12757770717144012f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(0.14274105429649353f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(-0.16651873290538788f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(0.1999952644109726f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(-0.25000303983688354f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(0.33333343267440796f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(-0.4999999701976776f));
  const __m512 p = _mm512_add_ps(f, _mm512_fmadd_ps(_mm512_mul_ps(f, f), q, d));
  const __m512 lo = _mm512_fmadd_ps(e, _mm512_set1_ps(1.42860682030941723e-6f), p);
  return _mm512_fmadd_ps(e, _mm512_set1_ps(0.693145751953125f), lo);
}

// x = 2^e m, m in [0.75, 1.5): vgetmantps gives the significand in [1, 2) halved when it is
// 1.5 or more, the exponent then one more than vgetexpps's (both exact for subnormal x).
void Reduce(__m512 x, __m512& m, __m512& e) {
  const __m512 one = _mm512_set1_ps(1.0f);
  m = _mm512_getmant_ps(x, _MM_MANT_NORM_p75_1p5, _MM_MANT_SIGN_zero);
  e = _mm512_getexp_ps(x);
  e = _mm512_mask_add_ps(e, _mm512_cmp_ps_mask(m, one, _CMP_LT_OQ), e, one);
}

// LogF32 of 16 floats.
__m512 Log16(__m512 x) {
  __m512 m, e;
  Reduce(x, m, e);
  __m512 y = LogOfReduced(m, e, _mm512_setzero_ps());
  const __m512 inf = _mm512_set1_ps(__builtin_inff());
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, inf, _CMP_EQ_OQ), inf);
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ),
                         _mm512_set1_ps(-__builtin_inff()));
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ),
                         _mm512_set1_ps(__builtin_nanf("")));
  return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

// log1p(u) for u in [0, 1] (NaN stays NaN): w = 1 + u rounded, log(w) as Log16's reduction, plus
// w's rounding error c = u - (w - 1) (exact: w - 1 is, as 1 >= u) as log(w + c) - log(w) ~ c / w,
// that is c 2^-e / m (the next term, c^2 / 2w^2, is below 2^-48 of the result).
__m512 Log1p16(__m512 u) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 w = _mm512_add_ps(one, u);
  const __m512 c = _mm512_sub_ps(u, _mm512_sub_ps(w, one));
  __m512 m, e;
  Reduce(w, m, e);
  const __m512 d = _mm512_div_ps(_mm512_scalef_ps(c, _mm512_sub_ps(_mm512_setzero_ps(), e)), m);
  return LogOfReduced(m, e, d);
}

// SoftplusF32 of 16 floats: max(x, 0) + log1p(exp(-|x|)) (x > 0: x + L; else L alone).
__m512 Softplus16(__m512 x) {
  const __m512 l = Log1p16(Exp16(_mm512_or_ps(x, _mm512_set1_ps(-0.0f))));
  const __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
  return _mm512_mask_add_ps(l, pos, x, l);
}

// expm1(x) of 16 floats (EluF32): x clamped to [-30, 89] (expm1 is -1 in fp32 below -17.4 and
// overflows above 88.73), k = round(x / ln2), r = x - k ln2 (two parts, as Exp16), q = expm1(r)
// = r + r^2 (1/2 + r/6 + ... + r^6/8!) (|r| <= 0.347: truncation r^9/9! under 2^-31 of q),
// then 2^k q + (2^k - 1) in one fma for k <= 24 (2^k - 1 exact), 2^k (1 + q) by vscalefps above
// (overflowing to +Inf). |x| < 2^-30 returns x (expm1 rounds to it; keeps -0).
__m512 Expm1_16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __mmask16 tiny = _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(0x1p-30f), _CMP_LT_OQ);
  const __m512 xc = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-30.0f), x));
  __m512 k;
  const __m512 r = ReduceLn2(xc, &k);
  __m512 p = _mm512_set1_ps(1.0f / 40320.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 5040.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  const __m512 q = _mm512_fmadd_ps(_mm512_mul_ps(r, r), p, r);
  const __m512 t = _mm512_scalef_ps(one, k);
  const __m512 small = _mm512_fmadd_ps(t, q, _mm512_sub_ps(t, one));
  const __m512 big = _mm512_scalef_ps(_mm512_add_ps(q, one), k);
  const __mmask16 is_big = _mm512_cmp_ps_mask(k, _mm512_set1_ps(24.0f), _CMP_GT_OQ);
  return _mm512_mask_mov_ps(_mm512_mask_mov_ps(small, is_big, big), tiny, x);
}

// TanhF32 of 16 floats. The polynomial's coefficients were fitted (weighted least squares at
// Chebyshev nodes, rounded to fp32) to (tanh(x) - x) / x^3 over x^2 in [0, 0.390625].
__m512 Tanh16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 sign = _mm512_and_ps(x, _mm512_set1_ps(-0.0f));
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 e = Exp16(_mm512_add_ps(ax, ax));
  const __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
  const __m512 x2 = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(0.002142803743481636f);
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-0.008177093230187893f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(0.021700501441955566f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-0.05394670367240906f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(0.1333320587873459f));
  p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-0.3333333134651184f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(x, x2), p, x);
  const __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
  // x's sign on both (the small side's is x's but for -0, whose x^3 p term adds +0).
  return _mm512_or_ps(_mm512_mask_blend_ps(is_small, big, small), sign);
}

// GeluF32 of 16 floats.
__m512 Gelu16(__m512 x) {
  const __m512 e = _ZGVeN16v_erff(_mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752440f)));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x),
                       _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// MishF32 of 16 floats: tanh(log(1 + e)) = p / (p + 2) with p = e (e + 2) = e^2 + 2e (one fma):
// one exp, one division. From x = 20 on, tanh(Softplus(x)) is 1 in fp32 (it is from 9.1) and p
// would overflow past 44: y = x (+Inf included).
__m512 Mish16(__m512 v) {
  const __m512 e = Exp16(v);
  const __m512 p = _mm512_fmadd_ps(e, e, _mm512_add_ps(e, e));
  const __m512 t = _mm512_div_ps(p, _mm512_add_ps(p, _mm512_set1_ps(2.0f)));
  const __mmask16 big = _mm512_cmp_ps_mask(v, _mm512_set1_ps(20.0f), _CMP_GE_OQ);
  return _mm512_mask_mov_ps(_mm512_mul_ps(v, t), big, v);
}

// GeluTanhF32 of 16 floats.
__m512 GeluTanh16(__m512 v) {
  const __m512 cube =
      _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), v), v), v);
  const __m512 z = _mm512_mul_ps(_mm512_set1_ps(0.79788456080286535588f), _mm512_add_ps(v, cube));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), v),
                       _mm512_add_ps(_mm512_set1_ps(1.0f), Tanh16(z)));
}

// y[i] = F(x[i]) on `T` storage (kF16, kBF16): widened exactly and rounded back in registers.
template <__m512 (*F)(__m512), DataType T>
void MapStored(const uint16_t* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    Store16<T>(y, i, m, F(Load16<T>(x, i, m)));
  }
}

template <__m512 (*F)(__m512)>
void MapHalfOrBf16(DataType t, const uint16_t* x, uint16_t* y, int64_t n) {
  if (t == DataType::kF16) return MapStored<F, DataType::kF16>(x, y, n);
  MapStored<F, DataType::kBF16>(x, y, n);
}

// SoftmaxRowF32 on `T` storage: the max pass widens x in registers and leaves the fp32 values
// in `buf` (one conversion each way per element: they cost more than the L1 traffic), the exps
// replace them there for the division, rounded once on the store.
template <DataType T>
void SoftmaxRowStored(const uint16_t* x, uint16_t* y, int64_t n, float* buf) {
  __m512 mx16 = _mm512_set1_ps(-__builtin_inff());
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    const __m512 v = Load16<T>(x, i, m);
    _mm512_mask_storeu_ps(buf + i, m, v);
    mx16 = _mm512_mask_mov_ps(mx16, _mm512_mask_cmp_ps_mask(m, v, mx16, _CMP_GT_OQ), v);
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, mx16);
  float top = lanes[0];
  for (float l : lanes) top = l > top ? l : top;  // order-free: no NaN among the lanes
  const __m512 mx = _mm512_set1_ps(top);
  __m512 sum16 = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, buf + i), mx));
    _mm512_mask_storeu_ps(buf + i, m, e);
    sum16 = _mm512_mask_add_ps(sum16, m, sum16, e);
  }
  _mm512_store_ps(lanes, sum16);
  float sum = 0.0f;
  for (float l : lanes) sum += l;
  const __m512 s = _mm512_set1_ps(sum);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    Store16<T>(y, i, m, _mm512_div_ps(_mm512_maskz_loadu_ps(m, buf + i), s));
  }
}

}  // namespace

void MathHalf(MathFn fn, DataType t, const uint16_t* x, uint16_t* y, int64_t n) {
  switch (fn) {
    case MathFn::kErf:
      return MapHalfOrBf16<_ZGVeN16v_erff>(t, x, y, n);
    case MathFn::kExp:
      return MapHalfOrBf16<Exp16>(t, x, y, n);
    case MathFn::kSigmoid:
      return MapHalfOrBf16<Sigmoid16>(t, x, y, n);
    case MathFn::kTanh:
      return MapHalfOrBf16<Tanh16>(t, x, y, n);
    case MathFn::kGelu:
      return MapHalfOrBf16<Gelu16>(t, x, y, n);
    case MathFn::kGeluTanh:
      return MapHalfOrBf16<GeluTanh16>(t, x, y, n);
    case MathFn::kLog:
      return MapHalfOrBf16<Log16>(t, x, y, n);
    case MathFn::kSoftplus:
      return MapHalfOrBf16<Softplus16>(t, x, y, n);
    case MathFn::kMish:
      return MapHalfOrBf16<Mish16>(t, x, y, n);
  }
}

void SoftmaxRowHalf(DataType t, const uint16_t* x, uint16_t* y, int64_t n, float* buf) {
  if (t == DataType::kF16) return SoftmaxRowStored<DataType::kF16>(x, y, n, buf);
  SoftmaxRowStored<DataType::kBF16>(x, y, n, buf);
}

void ErfF32(const float* x, float* y, int64_t n) { Map16<_ZGVeN16v_erff>(x, y, n); }

void ExpF32(const float* x, float* y, int64_t n) { Map16<Exp16>(x, y, n); }

void SigmoidF32(const float* x, float* y, int64_t n) { Map16<Sigmoid16>(x, y, n); }

void TanhF32(const float* x, float* y, int64_t n) { Map16<Tanh16>(x, y, n); }

void GeluF32(const float* x, float* y, int64_t n) { Map16<Gelu16>(x, y, n); }

void LogF32(const float* x, float* y, int64_t n) { Map16<Log16>(x, y, n); }

void SoftplusF32(const float* x, float* y, int64_t n) { Map16<Softplus16>(x, y, n); }

void MishF32(const float* x, float* y, int64_t n) { Map16<Mish16>(x, y, n); }

void SwishF32(const float* x, float* y, int64_t n, float alpha) {
  const __m512 neg_alpha = _mm512_set1_ps(-alpha);
  MapWith(x, y, n, [neg_alpha](__m512 v) {
    const __m512 e = Exp16(_mm512_mul_ps(neg_alpha, v));
    return _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  });
}

void EluF32(const float* x, float* y, int64_t n, float alpha) {
  const __m512 a = _mm512_set1_ps(alpha);
  MapWith(x, y, n, [a](__m512 v) {
    const __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_mul_ps(v, neg, a, Expm1_16(v));
  });
}

void CeluF32(const float* x, float* y, int64_t n, float alpha) {
  const __m512 a = _mm512_set1_ps(alpha);
  MapWith(x, y, n, [a](__m512 v) {
    const __m512 zero = _mm512_setzero_ps();
    const __m512 neg = _mm512_mul_ps(a, Expm1_16(_mm512_div_ps(v, a)));
    // (x > 0 ? x : 0) + (neg < 0 ? neg : 0), ordered comparisons: NaN gives 0 + 0.
    const __m512 pos_part = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), v);
    const __m512 neg_part = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(neg, zero, _CMP_LT_OQ), neg);
    return _mm512_add_ps(pos_part, neg_part);
  });
}

void SeluF32(const float* x, float* y, int64_t n, float alpha, float gamma) {
  const __m512 a = _mm512_set1_ps(alpha), g = _mm512_set1_ps(gamma);
  MapWith(x, y, n, [a, g](__m512 v) {
    const __m512 neg = _mm512_mul_ps(g, _mm512_sub_ps(_mm512_mul_ps(a, Exp16(v)), a));
    const __mmask16 pos = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ);
    return _mm512_mask_mul_ps(neg, pos, g, v);
  });
}

void GeluTanhF32(const float* x, float* y, int64_t n) { Map16<GeluTanh16>(x, y, n); }

namespace {

// The max of a row of n >= 1 floats in 16 lanes: lanes start at -Inf; a NaN element never wins
// the comparison (as `v > mx ? v : mx`).
float RowMaxF32(const float* x, int64_t n) {
  const int64_t full = n / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - full)) - 1u);
  __m512 mx16 = _mm512_set1_ps(-__builtin_inff());
  for (int64_t i = 0; i < full; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    mx16 = _mm512_mask_mov_ps(mx16, _mm512_cmp_ps_mask(v, mx16, _CMP_GT_OQ), v);
  }
  if (tail != 0) {
    const __m512 v = _mm512_maskz_loadu_ps(tail, x + full);
    mx16 = _mm512_mask_mov_ps(mx16, _mm512_mask_cmp_ps_mask(tail, v, mx16, _CMP_GT_OQ), v);
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, mx16);
  float top = lanes[0];
  for (float l : lanes) top = l > top ? l : top;  // order-free: no NaN among the lanes
  return top;
}

}  // namespace

void SoftmaxRowF32(const float* x, float* y, int64_t n) {
  const int64_t full = n / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - full)) - 1u);
  alignas(64) float lanes[16];
  const __m512 mx = _mm512_set1_ps(RowMaxF32(x, n));
  // exp(x - max), cannot overflow (cancels in the ratio); summed into lane i % 16 in order.
  __m512 sum16 = _mm512_setzero_ps();
  for (int64_t i = 0; i < full; i += 16) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mx));
    _mm512_storeu_ps(y + i, e);
    sum16 = _mm512_add_ps(sum16, e);
  }
  if (tail != 0) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + full), mx));
    _mm512_mask_storeu_ps(y + full, tail, e);
    sum16 = _mm512_mask_add_ps(sum16, tail, sum16, e);
  }
  _mm512_store_ps(lanes, sum16);
  float sum = 0.0f;
  for (float l : lanes) sum += l;
  const __m512 s = _mm512_set1_ps(sum);
  for (int64_t i = 0; i < full; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_div_ps(_mm512_loadu_ps(y + i), s));
  }
  if (tail != 0) {
    _mm512_mask_storeu_ps(y + full, tail, _mm512_div_ps(_mm512_maskz_loadu_ps(tail, y + full), s));
  }
}

void SoftmaxColumnsF32(const float* x, float* y, int64_t n, int64_t stride, int64_t cols,
                       bool log) {
  for (int64_t c = 0; c < cols; c += 16) {
    const __mmask16 m = LaneMask(cols - c);
    const bool full = m == 0xFFFF;  // unmasked (a masked store of every lane costs more on Zen 5)
    const float* xc = x + c;
    float* yc = y + c;
    auto load = [&](const float* p) {
      return full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
    };
    auto store = [&](float* p, __m512 v) {
      if (full) {
        _mm512_storeu_ps(p, v);
      } else {
        _mm512_mask_storeu_ps(p, m, v);
      }
    };
    __m512 mx = load(xc);
    for (int64_t k = 1; k < n; ++k) {
      const __m512 v = load(xc + k * stride);
      mx = _mm512_mask_mov_ps(mx, _mm512_cmp_ps_mask(v, mx, _CMP_GT_OQ), v);
    }
    __m512 sum = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; ++k) {
      const __m512 e = Exp16(_mm512_sub_ps(load(xc + k * stride), mx));
      if (!log) store(yc + k * stride, e);
      sum = _mm512_add_ps(sum, e);
    }
    if (log) {
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, sum);
      for (float& l : lanes) l = std::log(l);
      const __m512 log_sum = _mm512_load_ps(lanes);
      for (int64_t k = 0; k < n; ++k) {
        store(yc + k * stride, _mm512_sub_ps(_mm512_sub_ps(load(xc + k * stride), mx), log_sum));
      }
    } else {
      for (int64_t k = 0; k < n; ++k)
        store(yc + k * stride, _mm512_div_ps(load(yc + k * stride), sum));
    }
  }
}

void LogSoftmaxRowF32(const float* x, float* y, int64_t n) {
  const int64_t full = n / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - full)) - 1u);
  // Max in lanes as SoftmaxRowF32's; where it is a zero, the reference's first zero (-0 or +0:
  // x - max keeps its sign into an output when the log of the sum is 0).
  alignas(64) float lanes[16];
  float top = RowMaxF32(x, n);
  if (top == 0.0f || n == 1) {
    top = x[0];
    for (int64_t k = 1; k < n; ++k) top = x[k] > top ? x[k] : top;
  }
  const __m512 mx = _mm512_set1_ps(top);
  __m512 sum16 = _mm512_setzero_ps();
  for (int64_t i = 0; i < full; i += 16) {
    sum16 = _mm512_add_ps(sum16, Exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mx)));
  }
  if (tail != 0) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + full), mx));
    sum16 = _mm512_mask_add_ps(sum16, tail, sum16, e);
  }
  _mm512_store_ps(lanes, sum16);
  float sum = 0.0f;
  for (float l : lanes) sum += l;
  const __m512 log_sum = _mm512_set1_ps(std::log(sum));
  for (int64_t i = 0; i < full; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), mx), log_sum));
  }
  if (tail != 0) {
    _mm512_mask_storeu_ps(
        y + full, tail,
        _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + full), mx), log_sum));
  }
}

}  // namespace kiln::kernels::cpu::avx512
