// The reduction loops of reduce.h, 16 lanes at a time: a reduced innermost axis folds each row
// into four 16-lane accumulators (then lanes, in order); a kept innermost axis folds whole rows
// into up to 64 lane accumulators, each lane one output. Compiled with AVX-512 flags
// (engine/CMakeLists.txt).
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "engine/kernels/cpu/avx512/math.h"
#include "engine/kernels/cpu/avx512/reduce.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// Elements i .. i+15 (lanes m) as fp32. float16 by vcvtph2ps alone (not Load16's NaN fix-up: a
// reduction's NaN result stays NaN, only a signalling payload comes out quieted).
template <DataType T>
inline __m512 Load(const void* p, int64_t i, __mmask16 m) {
  if constexpr (T == DataType::kF16) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i));
  } else {
    return Load16<T>(p, i, m);
  }
}

template <RedFn F>
inline __m512 Init() {
  if constexpr (F == RedFn::kMax) return _mm512_set1_ps(-__builtin_inff());
  if constexpr (F == RedFn::kMin) return _mm512_set1_ps(__builtin_inff());
  if constexpr (F == RedFn::kProd) return _mm512_set1_ps(1.0f);
  return _mm512_setzero_ps();
}

// acc <- acc (op) f(v) on the lanes of m, as the reference's functors: x * x and the sum are two
// roundings (the file is built with -ffp-contract=off); Max / Min take v where it is larger /
// smaller or NaN, so a NaN anywhere wins.
template <RedFn F>
inline __m512 Step(__m512 acc, __m512 v, __mmask16 m) {
  if constexpr (F == RedFn::kSum) return _mm512_mask_add_ps(acc, m, acc, v);
  if constexpr (F == RedFn::kSumSquare) return _mm512_mask_add_ps(acc, m, acc, _mm512_mul_ps(v, v));
  if constexpr (F == RedFn::kAbsSum) return _mm512_mask_add_ps(acc, m, acc, _mm512_abs_ps(v));
  if constexpr (F == RedFn::kProd) return _mm512_mask_mul_ps(acc, m, acc, v);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __mmask16 better = F == RedFn::kMax ? _mm512_cmp_ps_mask(v, acc, _CMP_GT_OQ)
                                            : _mm512_cmp_ps_mask(v, acc, _CMP_LT_OQ);
  return _mm512_mask_mov_ps(acc, (better | nan) & m, v);
}

// Two partial states combined lane-wise.
template <RedFn F>
inline __m512 Merge(__m512 a, __m512 b) {
  if constexpr (F == RedFn::kProd) return _mm512_mul_ps(a, b);
  if constexpr (F == RedFn::kMax || F == RedFn::kMin) return Step<F>(a, b, 0xffff);
  return _mm512_add_ps(a, b);
}

template <RedFn F>
inline float MergeScalar(float a, float b) {
  if constexpr (F == RedFn::kProd) return a * b;
  if constexpr (F == RedFn::kMax) return (b > a || std::isnan(b)) ? b : a;
  if constexpr (F == RedFn::kMin) return (b < a || std::isnan(b)) ? b : a;
  return a + b;
}

template <RedFn F>
inline float Lanes(__m512 v) {
  alignas(64) float l[16];
  _mm512_store_ps(l, v);
  float r = l[0];
  for (int j = 1; j < 16; ++j) r = MergeScalar<F>(r, l[j]);
  return r;
}

// The fold of elements off .. off + n - 1 (contiguous).
template <RedFn F, DataType T>
float Row(const void* x, int64_t off, int64_t n) {
  __m512 a0 = Init<F>(), a1 = Init<F>(), a2 = Init<F>(), a3 = Init<F>();
  int64_t k = 0;
  for (; k + 64 <= n; k += 64) {
    a0 = Step<F>(a0, Load<T>(x, off + k, 0xffff), 0xffff);
    a1 = Step<F>(a1, Load<T>(x, off + k + 16, 0xffff), 0xffff);
    a2 = Step<F>(a2, Load<T>(x, off + k + 32, 0xffff), 0xffff);
    a3 = Step<F>(a3, Load<T>(x, off + k + 48, 0xffff), 0xffff);
  }
  for (; k < n; k += 16) {
    const __mmask16 m = LaneMask(n - k);
    a0 = Step<F>(a0, Load<T>(x, off + k, m), m);
  }
  return Lanes<F>(Merge<F>(Merge<F>(a0, a1), Merge<F>(a2, a3)));
}

// acc[0 .. len) = fold over k < n of elements base + k * inner + i0 + (0 .. len), len <= 16 NV.
template <RedFn F, DataType T, int NV>
void Block(const void* x, int64_t base, int64_t n, int64_t inner, int64_t len, float* acc) {
  __m512 a[NV];
  __mmask16 m[NV];
  for (int j = 0; j < NV; ++j) {
    a[j] = Init<F>();
    m[j] = LaneMask(len - 16 * j);
  }
  for (int64_t k = 0; k < n; ++k) {
    const int64_t p = base + k * inner;
    for (int j = 0; j < NV; ++j) a[j] = Step<F>(a[j], Load<T>(x, p + 16 * j, m[j]), m[j]);
  }
  for (int j = 0; j < NV; ++j) _mm512_mask_storeu_ps(acc + 16 * j, m[j], a[j]);
}

constexpr int64_t kBlock = 64;  // lanes of one vertical block (four zmm accumulators)
constexpr int64_t kParallelMin = int64_t{1} << 16;  // elements read before both cores help

template <RedFn F, DataType T>
void Reduce(const void* x, int64_t outer, int64_t n, int64_t inner, float* acc) {
  const bool parallel = outer * n * inner >= kParallelMin;
  if (inner == 1) {
    ParallelFor(outer, parallel && outer > 1, [&](int64_t o_begin, int64_t o_end) {
      for (int64_t o = o_begin; o < o_end; ++o) acc[o] = Row<F, T>(x, o * n, n);
    });
    return;
  }
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  ParallelFor(outer * blocks, parallel && outer * blocks > 1, [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t o = t / blocks, i0 = (t % blocks) * kBlock;
      const int64_t len = std::min(kBlock, inner - i0);
      const int64_t base = o * n * inner + i0;
      float* a = acc + o * inner + i0;
      switch ((len + 15) / 16) {
        case 1:
          Block<F, T, 1>(x, base, n, inner, len, a);
          break;
        case 2:
          Block<F, T, 2>(x, base, n, inner, len, a);
          break;
        case 3:
          Block<F, T, 3>(x, base, n, inner, len, a);
          break;
        default:
          Block<F, T, 4>(x, base, n, inner, len, a);
          break;
      }
    }
  });
}

template <RedFn F>
void WithType(DataType dtype, const void* x, int64_t outer, int64_t n, int64_t inner, float* acc) {
  switch (dtype) {
    case DataType::kF16:
      return Reduce<F, DataType::kF16>(x, outer, n, inner, acc);
    case DataType::kBF16:
      return Reduce<F, DataType::kBF16>(x, outer, n, inner, acc);
    default:
      return Reduce<F, DataType::kF32>(x, outer, n, inner, acc);
  }
}

constexpr int64_t kExpChunk = 1024;

// tmp[j] = exp(element i + j as fp32 - shift) for j < len (len <= kExpChunk): one `shift` for all,
// or shifts[j] each when `shifts` is given; exp by ExpF32.

template <DataType T>
void ShiftedExp(const void* x, int64_t i, int64_t len, __m512 shift, const float* shifts,
                float* tmp) {
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 m = LaneMask(len - j);
    const __m512 s = shifts ? _mm512_maskz_loadu_ps(m, shifts + j) : shift;
    _mm512_mask_storeu_ps(tmp + j, m, _mm512_sub_ps(Load<T>(x, i + j, m), s));
  }
  ExpF32(tmp, tmp, len);
}

template <DataType T>
void SumExp(const void* x, int64_t outer, int64_t n, int64_t inner, const float* mx, float* acc) {
  const bool parallel = outer * n * inner >= kParallelMin / 4;  // exp: compute bound
  if (inner == 1) {
    ParallelFor(outer, parallel && outer > 1, [&](int64_t o_begin, int64_t o_end) {
      for (int64_t o = o_begin; o < o_end; ++o) {
        alignas(64) float tmp[kExpChunk];
        __m512 sum = _mm512_setzero_ps();
        for (int64_t k = 0; k < n; k += kExpChunk) {
          const int64_t len = std::min(kExpChunk, n - k);
          ShiftedExp<T>(x, o * n + k, len, _mm512_set1_ps(mx[o]), nullptr, tmp);
          for (int64_t j = 0; j < len; j += 16) {
            const __mmask16 m = LaneMask(len - j);
            sum = _mm512_mask_add_ps(sum, m, sum, _mm512_maskz_loadu_ps(m, tmp + j));
          }
        }
        acc[o] = Lanes<RedFn::kSum>(sum);
      }
    });
    return;
  }
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  ParallelFor(outer * blocks, parallel && outer * blocks > 1, [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t o = t / blocks, i0 = (t % blocks) * kBlock;
      const int64_t len = std::min(kBlock, inner - i0);
      alignas(64) float tmp[kBlock];
      alignas(64) float sum[kBlock] = {};
      const float* shifts = mx + o * inner + i0;
      for (int64_t k = 0; k < n; ++k) {
        ShiftedExp<T>(x, (o * n + k) * inner + i0, len, _mm512_setzero_ps(), shifts, tmp);
        for (int64_t j = 0; j < len; ++j) sum[j] += tmp[j];
      }
      std::copy(sum, sum + len, acc + o * inner + i0);
    }
  });
}

}  // namespace

void ReduceAxis(RedFn fn, DataType dtype, const void* x, int64_t outer, int64_t n, int64_t inner,
                float* acc) {
  switch (fn) {
    case RedFn::kSum:
      return WithType<RedFn::kSum>(dtype, x, outer, n, inner, acc);
    case RedFn::kSumSquare:
      return WithType<RedFn::kSumSquare>(dtype, x, outer, n, inner, acc);
    case RedFn::kAbsSum:
      return WithType<RedFn::kAbsSum>(dtype, x, outer, n, inner, acc);
    case RedFn::kMax:
      return WithType<RedFn::kMax>(dtype, x, outer, n, inner, acc);
    case RedFn::kMin:
      return WithType<RedFn::kMin>(dtype, x, outer, n, inner, acc);
    case RedFn::kProd:
      return WithType<RedFn::kProd>(dtype, x, outer, n, inner, acc);
  }
}

void ReduceSumExpShifted(DataType dtype, const void* x, int64_t outer, int64_t n, int64_t inner,
                         const float* mx, float* acc) {
  switch (dtype) {
    case DataType::kF16:
      return SumExp<DataType::kF16>(x, outer, n, inner, mx, acc);
    case DataType::kBF16:
      return SumExp<DataType::kBF16>(x, outer, n, inner, mx, acc);
    default:
      return SumExp<DataType::kF32>(x, outer, n, inner, mx, acc);
  }
}

}  // namespace kiln::kernels::cpu::avx512
