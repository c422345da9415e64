// The loops of activation.h, 16 floats at a time: the piecewise-linear and exactly rounded ops
// here, the transcendental ones through math.h. Compiled with AVX-512 flags
// (engine/CMakeLists.txt).
#include <immintrin.h>

#include "engine/kernels/cpu/avx512/activation.h"
#include "engine/kernels/cpu/avx512/math.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"

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

// Calls map(f) with the 16-lane function f of a piecewise-linear or exactly rounded `fn` and
// returns true; false (nothing called) for the transcendental ones.
template <typename M>
bool WithPiecewise(ActFn fn, const ActParams& p, M&& map) {
  const __m512 alpha = _mm512_set1_ps(p.alpha), beta = _mm512_set1_ps(p.beta);
  switch (fn) {
    case ActFn::kLeakyRelu:
      map([alpha](__m512 v) {
        return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), alpha,
                                  v);
      });
      return true;
    case ActFn::kHardSigmoid:
      // alpha * x + beta as two roundings (the file is built with -ffp-contract=off).
      map([alpha, beta](__m512 v) {
        return Clamp01(_mm512_add_ps(_mm512_mul_ps(alpha, v), beta));
      });
      return true;
    case ActFn::kHardSwish:
      // x / 6 divided, as the reference (a product by 1/6 rounds differently).
      map([](__m512 v) {
        const __m512 t =
            _mm512_add_ps(_mm512_div_ps(v, _mm512_set1_ps(6.0f)), _mm512_set1_ps(0.5f));
        return _mm512_mul_ps(v, Clamp01(t));
      });
      return true;
    case ActFn::kClip: {
      const __m512 lo = _mm512_set1_ps(p.lo), hi = _mm512_set1_ps(p.hi);
      // r = v < lo ? lo : v; r > hi ? hi : r (ordered: NaN passes, a NaN bound clips nothing).
      map([lo, hi](__m512 v) {
        v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), lo);
        return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), hi);
      });
      return true;
    }
    case ActFn::kSqrt:
      map([](__m512 v) { return _mm512_sqrt_ps(v); });
      return true;
    case ActFn::kReciprocal:
      map([](__m512 v) { return _mm512_div_ps(_mm512_set1_ps(1.0f), v); });
      return true;
    case ActFn::kNeg:
      map([](__m512 v) { return _mm512_xor_ps(v, _mm512_set1_ps(-0.0f)); });
      return true;
    case ActFn::kAbs:
      map([](__m512 v) { return _mm512_abs_ps(v); });
      return true;
    case ActFn::kFloor:
      map([](__m512 v) {
        return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
      });
      return true;
    case ActFn::kCeil:
      map([](__m512 v) {
        return _mm512_roundscale_ps(v, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
      });
      return true;
    case ActFn::kRound:
      map([](__m512 v) {
        return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      });
      return true;
    default:
      return false;
  }
}

// y[i] = f(x[i]) on `T` storage (kF16, kBF16): widened exactly and rounded back in registers.
template <DataType T, typename F>
void MapStored(const uint16_t* x, uint16_t* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    Store16<T>(y, i, m, f(Load16<T>(x, i, m)));
  }
}

// Clip on `T` storage without rounding back: the result is x, lo or hi, so the output takes x's
// own 16 bits (a NaN's quieted as half.h's round trip quiets it) or the bounds rounded once to
// T, chosen by the fp32 comparisons of the reference (r = x < lo ? lo : x; r > hi ? hi : r).
template <DataType T>
void ClipStored(const uint16_t* x, uint16_t* y, int64_t n, float lo, float hi) {
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  alignas(32) uint16_t bounds[16];
  Store16<T>(bounds, 0, 0xffff, _mm512_mask_mov_ps(vlo, 0xfffe, vhi));  // lane 0 lo, others hi
  const __m256i lo16 = _mm256_set1_epi16(static_cast<int16_t>(bounds[0]));
  const __m256i hi16 = _mm256_set1_epi16(static_cast<int16_t>(bounds[1]));
  const __m256i quiet = _mm256_set1_epi16(T == DataType::kF16 ? 0x0200 : 0x0040);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    __m256i raw = _mm256_maskz_loadu_epi16(m, x + i);
    // NaN lanes only steer the masks (no NaN compares true), so vcvtph2ps's quieting is moot.
    const __m512 v = T == DataType::kF16 ? _mm512_cvtph_ps(raw) : Bf16ToFloat16(raw);
    const __mmask16 below = _mm512_cmp_ps_mask(v, vlo, _CMP_LT_OQ);
    const __mmask16 above = _mm512_cmp_ps_mask(_mm512_mask_mov_ps(v, below, vlo), vhi, _CMP_GT_OQ);
    raw = _mm256_mask_mov_epi16(raw, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                                _mm256_or_si256(raw, quiet));
    raw = _mm256_mask_mov_epi16(raw, below, lo16);
    raw = _mm256_mask_mov_epi16(raw, above, hi16);
    _mm256_mask_storeu_epi16(y + i, m, raw);
  }
}

// The parameterless transcendental fns as MathHalf's functions.
bool MathFnOf(ActFn fn, MathFn* out) {
  switch (fn) {
    case ActFn::kSigmoid:
      *out = MathFn::kSigmoid;
      return true;
    case ActFn::kTanh:
      *out = MathFn::kTanh;
      return true;
    case ActFn::kExp:
      *out = MathFn::kExp;
      return true;
    case ActFn::kLog:
      *out = MathFn::kLog;
      return true;
    case ActFn::kSoftplus:
      *out = MathFn::kSoftplus;
      return true;
    case ActFn::kMish:
      *out = MathFn::kMish;
      return true;
    case ActFn::kGelu:
      *out = MathFn::kGelu;
      return true;
    case ActFn::kGeluTanh:
      *out = MathFn::kGeluTanh;
      return true;
    default:
      return false;
  }
}

}  // namespace

void ActivationF32(ActFn fn, const ActParams& p, const float* x, float* y, int64_t n) {
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
    default:
      WithPiecewise(fn, p, [&](auto f) { Map(x, y, n, f); });
  }
}

void ActivationHalf(ActFn fn, const ActParams& p, DataType t, const uint16_t* x, uint16_t* y,
                    int64_t n) {
  MathFn math;
  if (MathFnOf(fn, &math)) return MathHalf(math, t, x, y, n);
  if (fn == ActFn::kClip) {
    return t == DataType::kF16 ? ClipStored<DataType::kF16>(x, y, n, p.lo, p.hi)
                               : ClipStored<DataType::kBF16>(x, y, n, p.lo, p.hi);
  }
  const bool done = WithPiecewise(fn, p, [&](auto f) {
    t == DataType::kF16 ? MapStored<DataType::kF16>(x, y, n, f)
                        : MapStored<DataType::kBF16>(x, y, n, f);
  });
  if (done) return;
  // The fns with attributes of math.h (Elu, Selu, Celu, Swish): through fp32 in L1-sized pieces.
  constexpr int64_t kPiece = 1024;
  alignas(64) float tmp[kPiece];
  for (int64_t i = 0; i < n; i += kPiece) {
    const int64_t len = n - i < kPiece ? n - i : kPiece;
    for (int64_t j = 0; j < len; j += 16) {
      const __mmask16 m = LaneMask(len - j);
      _mm512_mask_storeu_ps(tmp + j, m,
                            t == DataType::kF16 ? Load16<DataType::kF16>(x + i, j, m)
                                                : Load16<DataType::kBF16>(x + i, j, m));
    }
    ActivationF32(fn, p, tmp, tmp, len);
    for (int64_t j = 0; j < len; j += 16) {
      const __mmask16 m = LaneMask(len - j);
      const __m512 v = _mm512_maskz_loadu_ps(m, tmp + j);
      t == DataType::kF16 ? Store16<DataType::kF16>(y + i, j, m, v)
                          : Store16<DataType::kBF16>(y + i, j, m, v);
    }
  }
}

}  // namespace kiln::kernels::cpu::avx512
