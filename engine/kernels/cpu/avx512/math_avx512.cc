// Elementary functions of math.h. Compiled with AVX-512 flags (engine/CMakeLists.txt).
#include <immintrin.h>

#include "engine/kernels/cpu/avx512/math.h"

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
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n ln2 with ln2 = 0.693145751953125 (15 bits: n times it is exact) + 1.4286068e-6.
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r);
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

// SigmoidF32 of 16 floats.
__m512 Sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = Exp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(one, _mm512_add_ps(one, e));
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

}  // namespace

void ErfF32(const float* x, float* y, int64_t n) { Map16<_ZGVeN16v_erff>(x, y, n); }

void ExpF32(const float* x, float* y, int64_t n) { Map16<Exp16>(x, y, n); }

void SigmoidF32(const float* x, float* y, int64_t n) { Map16<Sigmoid16>(x, y, n); }

void TanhF32(const float* x, float* y, int64_t n) { Map16<Tanh16>(x, y, n); }

void GeluF32(const float* x, float* y, int64_t n) { Map16<Gelu16>(x, y, n); }

void SoftmaxRowF32(const float* x, float* y, int64_t n) {
  const int64_t full = n / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - full)) - 1u);
  // Max: lanes start at -Inf; a NaN element never wins the comparison (as `v > mx ? v : mx`).
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
  const __m512 mx = _mm512_set1_ps(top);
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

}  // namespace kiln::kernels::cpu::avx512
