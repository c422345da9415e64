// The loops of activation.h, 16 floats at a time: the piecewise-linear and exactly rounded ops
// here, the transcendental ones through math.h. Compiled with AVX-512 flags
// (engine/CMakeLists.txt).
#include <immintrin.h>

#include "engine/kernels/cpu/avx512/activation.h"
#include "engine/kernels/cpu/avx512/math.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// y[i] = f(x[i]) 16 at a time, the tail masked.
template <typename F>
void Map(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

// The reference's MinProp(MaxProp(v, 0), 1): v > 0 or NaN keeps v, else 0 (so -0 gives +0);
// then v < 1 or NaN keeps v, else 1.
inline __m512 Clamp01(__m512 v) {
  const __m512 one = _mm512_set1_ps(1.0f);
  v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NLE_UQ), v);
  return _mm512_mask_mov_ps(one, _mm512_cmp_ps_mask(v, one, _CMP_NGE_UQ), v);
}

template <int kMode>
void RoundTo(const float* x, float* y, int64_t n) {
  Map(x, y, n, [](__m512 v) { return _mm512_roundscale_ps(v, kMode | _MM_FROUND_NO_EXC); });
}

}  // namespace

void ActivationF32(ActFn fn, const ActParams& p, const float* x, float* y, int64_t n) {
  const __m512 alpha = _mm512_set1_ps(p.alpha), beta = _mm512_set1_ps(p.beta);
  switch (fn) {
    case ActFn::kSigmoid:
      return SigmoidF32(x, y, n);
    case ActFn::kTanh:
      return TanhF32(x, y, n);
    case ActFn::kExp:
      return ExpF32(x, y, n);
    case ActFn::kLog:
      return LogF32(x, y, n);
    case ActFn::kSoftplus:
      return SoftplusF32(x, y, n);
    case ActFn::kElu:
      return EluF32(x, y, n, p.alpha);
    case ActFn::kSelu:
      return SeluF32(x, y, n, p.alpha, p.gamma);
    case ActFn::kCelu:
      return CeluF32(x, y, n, p.alpha);
    case ActFn::kSwish:
      return SwishF32(x, y, n, p.alpha);
    case ActFn::kMish:
      return MishF32(x, y, n);
    case ActFn::kGelu:
      return GeluF32(x, y, n);
    case ActFn::kGeluTanh:
      return GeluTanhF32(x, y, n);
    case ActFn::kLeakyRelu:
      return Map(x, y, n, [alpha](__m512 v) {
        return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), alpha,
                                  v);
      });
    case ActFn::kHardSigmoid:
      // alpha * x + beta as two roundings (the file is built with -ffp-contract=off).
      return Map(x, y, n, [alpha, beta](__m512 v) {
        return Clamp01(_mm512_add_ps(_mm512_mul_ps(alpha, v), beta));
      });
    case ActFn::kHardSwish:
      // x / 6 divided, as the reference (a product by 1/6 rounds differently).
      return Map(x, y, n, [](__m512 v) {
        const __m512 t =
            _mm512_add_ps(_mm512_div_ps(v, _mm512_set1_ps(6.0f)), _mm512_set1_ps(0.5f));
        return _mm512_mul_ps(v, Clamp01(t));
      });
    case ActFn::kClip: {
      const __m512 lo = _mm512_set1_ps(p.lo), hi = _mm512_set1_ps(p.hi);
      // r = v < lo ? lo : v; r > hi ? hi : r (ordered: NaN passes, a NaN bound clips nothing).
      return Map(x, y, n, [lo, hi](__m512 v) {
        v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), lo);
        return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), hi);
      });
    }
    case ActFn::kSqrt:
      return Map(x, y, n, [](__m512 v) { return _mm512_sqrt_ps(v); });
    case ActFn::kReciprocal:
      return Map(x, y, n, [](__m512 v) { return _mm512_div_ps(_mm512_set1_ps(1.0f), v); });
    case ActFn::kNeg:
      return Map(x, y, n, [](__m512 v) { return _mm512_xor_ps(v, _mm512_set1_ps(-0.0f)); });
    case ActFn::kAbs:
      return Map(x, y, n, [](__m512 v) { return _mm512_abs_ps(v); });
    case ActFn::kFloor:
      return RoundTo<_MM_FROUND_TO_NEG_INF>(x, y, n);
    case ActFn::kCeil:
      return RoundTo<_MM_FROUND_TO_POS_INF>(x, y, n);
    case ActFn::kRound:
      return RoundTo<_MM_FROUND_TO_NEAREST_INT>(x, y, n);
  }
}

}  // namespace kiln::kernels::cpu::avx512
