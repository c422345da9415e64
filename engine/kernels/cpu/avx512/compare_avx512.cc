// The broadcasting comparison and Where loops of broadcast.h (BcCompare, BcWhere), 16 elements
// at a time.
#include <immintrin.h>

#include <cstring>

#include "engine/kernels/cpu/avx512/broadcast.h"
#include "engine/kernels/cpu/avx512/broadcast_walk_inl.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// ---- comparisons -----------------------------------------------------------------------------

// The ordered fp32 predicate (false on NaN) and the integer one of each comparison.
template <BcCmp Op>
constexpr int FloatPred() {
  switch (Op) {
    case BcCmp::kEqual:
      return _CMP_EQ_OQ;
    case BcCmp::kLess:
      return _CMP_LT_OQ;
    case BcCmp::kLessOrEqual:
      return _CMP_LE_OQ;
    case BcCmp::kGreater:
      return _CMP_GT_OQ;
    case BcCmp::kGreaterOrEqual:
      return _CMP_GE_OQ;
  }
  return _CMP_EQ_OQ;
}
template <BcCmp Op>
constexpr int IntPred() {
  switch (Op) {
    case BcCmp::kEqual:
      return _MM_CMPINT_EQ;
    case BcCmp::kLess:
      return _MM_CMPINT_LT;
    case BcCmp::kLessOrEqual:
      return _MM_CMPINT_LE;
    case BcCmp::kGreater:
      return _MM_CMPINT_NLE;
    case BcCmp::kGreaterOrEqual:
      return _MM_CMPINT_NLT;
  }
  return _MM_CMPINT_EQ;
}

// The comparison mask of 16 elements: lanes m of a and b at element offsets ia / ib (an operand
// with stride 0 is element ia / ib itself, splat).
// kFull: all 16 lanes (m all ones), read with plain loads.
template <BcCmp Op, DataType T, bool kFull>
inline __mmask16 Compare16(const void* a, int64_t ia, bool sa, const void* b, int64_t ib, bool sb,
                           __mmask16 m) {
  if constexpr (T == DataType::kI32) {
    const int32_t* pa = static_cast<const int32_t*>(a);
    const int32_t* pb = static_cast<const int32_t*>(b);
    const __m512i x = sa      ? _mm512_set1_epi32(pa[ia])
                      : kFull ? _mm512_loadu_si512(pa + ia)
                              : _mm512_maskz_loadu_epi32(m, pa + ia);
    const __m512i y = sb      ? _mm512_set1_epi32(pb[ib])
                      : kFull ? _mm512_loadu_si512(pb + ib)
                              : _mm512_maskz_loadu_epi32(m, pb + ib);
    return _mm512_mask_cmp_epi32_mask(m, x, y, IntPred<Op>());
  } else if constexpr (T == DataType::kI64) {
    const int64_t* pa = static_cast<const int64_t*>(a);
    const int64_t* pb = static_cast<const int64_t*>(b);
    __mmask16 out = 0;
    for (int h = 0; h < 2; ++h) {
      const __mmask8 mh = static_cast<__mmask8>(m >> (8 * h));
      if (!mh) break;
      const __m512i x =
          sa ? _mm512_set1_epi64(pa[ia]) : _mm512_maskz_loadu_epi64(mh, pa + ia + 8 * h);
      const __m512i y =
          sb ? _mm512_set1_epi64(pb[ib]) : _mm512_maskz_loadu_epi64(mh, pb + ib + 8 * h);
      out |= static_cast<__mmask16>(_mm512_mask_cmp_epi64_mask(mh, x, y, IntPred<Op>())) << (8 * h);
    }
    return out;
  } else {
    const __m512 x = sa ? Load16<T>(a, ia, 1) : kFull ? LoadFull16<T>(a, ia) : Load16<T>(a, ia, m);
    const __m512 y = sb ? Load16<T>(b, ib, 1) : kFull ? LoadFull16<T>(b, ib) : Load16<T>(b, ib, m);
    const __m512 xs = sa ? _mm512_set1_ps(_mm512_cvtss_f32(x)) : x;
    const __m512 ys = sb ? _mm512_set1_ps(_mm512_cvtss_f32(y)) : y;
    return _mm512_mask_cmp_ps_mask(m, xs, ys, FloatPred<Op>());
  }
}

template <BcCmp Op, DataType T>
void CompareTyped(const BcPlan& p, const void* a, const void* b, uint8_t* dst) {
  const int r = p.rank;
  const bool sa = p.strides[0][r - 1] == 0, sb = p.strides[1][r - 1] == 0;
  const __m128i one = _mm_set1_epi8(1);
  // Full vectors stored with plain stores, the tail masked (StoreFull16 in vec_convert_inl.h
  // says why).
  BcWalk(p, [&](int64_t o, int64_t len, const int64_t* off) {
    int64_t i = 0;
    for (; i + 16 <= len; i += 16) {
      const __mmask16 c = Compare16<Op, T, true>(a, sa ? off[0] : off[0] + i, sa, b,
                                                 sb ? off[1] : off[1] + i, sb, 0xffff);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + o + i), _mm_maskz_mov_epi8(c, one));
    }
    if (i < len) {
      const __mmask16 m = LaneMask(len - i);
      const __mmask16 c = Compare16<Op, T, false>(a, sa ? off[0] : off[0] + i, sa, b,
                                                  sb ? off[1] : off[1] + i, sb, m);
      _mm_mask_storeu_epi8(dst + o + i, m, _mm_maskz_mov_epi8(c, one));
    }
  });
}

template <BcCmp Op>
void CompareOp(DataType dtype, const BcPlan& p, const void* a, const void* b, uint8_t* dst) {
  switch (dtype) {
    case DataType::kF16:
      return CompareTyped<Op, DataType::kF16>(p, a, b, dst);
    case DataType::kBF16:
      return CompareTyped<Op, DataType::kBF16>(p, a, b, dst);
    case DataType::kI32:
      return CompareTyped<Op, DataType::kI32>(p, a, b, dst);
    case DataType::kI64:
      return CompareTyped<Op, DataType::kI64>(p, a, b, dst);
    default:
      return CompareTyped<Op, DataType::kF32>(p, a, b, dst);
  }
}

// ---- Where -----------------------------------------------------------------------------------

// 16 elements of S bytes: a masked load, a splat of one element, a blend and a store (plain when
// all 16 lanes are stored: StoreFull16 in vec_convert_inl.h says why).
template <int S>
struct Lanes;
template <>
struct Lanes<1> {
  using V = __m128i;
  static V Load(const void* p, int64_t i, __mmask16 m) {
    return _mm_maskz_loadu_epi8(m, static_cast<const uint8_t*>(p) + i);
  }
  static V Splat(const void* p, int64_t i) {
    return _mm_set1_epi8(static_cast<char>(static_cast<const uint8_t*>(p)[i]));
  }
  static V Blend(__mmask16 c, V y, V x) { return _mm_mask_blend_epi8(c, y, x); }
  static void Store(void* p, int64_t i, __mmask16 m, V v) {
    if (m == 0xffff) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint8_t*>(p) + i), v);
    } else {
      _mm_mask_storeu_epi8(static_cast<uint8_t*>(p) + i, m, v);
    }
  }
};
template <>
struct Lanes<2> {
  using V = __m256i;
  static V Load(const void* p, int64_t i, __mmask16 m) {
    return _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i);
  }
  static V Splat(const void* p, int64_t i) {
    return _mm256_set1_epi16(static_cast<short>(static_cast<const uint16_t*>(p)[i]));
  }
  static V Blend(__mmask16 c, V y, V x) { return _mm256_mask_blend_epi16(c, y, x); }
  static void Store(void* p, int64_t i, __mmask16 m, V v) {
    if (m == 0xffff) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(p) + i), v);
    } else {
      _mm256_mask_storeu_epi16(static_cast<uint16_t*>(p) + i, m, v);
    }
  }
};
template <>
struct Lanes<4> {
  using V = __m512i;
  static V Load(const void* p, int64_t i, __mmask16 m) {
    return _mm512_maskz_loadu_epi32(m, static_cast<const uint32_t*>(p) + i);
  }
  static V Splat(const void* p, int64_t i) {
    return _mm512_set1_epi32(static_cast<int>(static_cast<const uint32_t*>(p)[i]));
  }
  static V Blend(__mmask16 c, V y, V x) { return _mm512_mask_blend_epi32(c, y, x); }
  static void Store(void* p, int64_t i, __mmask16 m, V v) {
    if (m == 0xffff) {
      _mm512_storeu_si512(static_cast<uint32_t*>(p) + i, v);
    } else {
      _mm512_mask_storeu_epi32(static_cast<uint32_t*>(p) + i, m, v);
    }
  }
};
template <>
struct Lanes<8> {
  struct V {
    __m512i lo, hi;
  };
  static V Load(const void* p, int64_t i, __mmask16 m) {
    const uint64_t* q = static_cast<const uint64_t*>(p) + i;
    return {_mm512_maskz_loadu_epi64(static_cast<__mmask8>(m), q),
            _mm512_maskz_loadu_epi64(static_cast<__mmask8>(m >> 8), q + 8)};
  }
  static V Splat(const void* p, int64_t i) {
    const __m512i v = _mm512_set1_epi64(static_cast<long long>(static_cast<const uint64_t*>(p)[i]));
    return {v, v};
  }
  static V Blend(__mmask16 c, V y, V x) {
    return {_mm512_mask_blend_epi64(static_cast<__mmask8>(c), y.lo, x.lo),
            _mm512_mask_blend_epi64(static_cast<__mmask8>(c >> 8), y.hi, x.hi)};
  }
  static void Store(void* p, int64_t i, __mmask16 m, V v) {
    uint64_t* q = static_cast<uint64_t*>(p) + i;
    if (m == 0xffff) {
      _mm512_storeu_si512(q, v.lo);
      _mm512_storeu_si512(q + 8, v.hi);
      return;
    }
    _mm512_mask_storeu_epi64(q, static_cast<__mmask8>(m), v.lo);
    _mm512_mask_storeu_epi64(q + 8, static_cast<__mmask8>(m >> 8), v.hi);
  }
};

template <int S>
void WhereSized(const BcPlan& p, const uint8_t* cond, const void* x, const void* y, void* dst) {
  using L = Lanes<S>;
  const int r = p.rank;
  const bool sc = p.strides[0][r - 1] == 0, sx = p.strides[1][r - 1] == 0,
             sy = p.strides[2][r - 1] == 0;
  BcWalk(p, [&](int64_t o, int64_t len, const int64_t* off) {
    const __m128i vc = _mm_set1_epi8(static_cast<char>(cond[off[0]]));
    const typename L::V vx = sx ? L::Splat(x, off[1]) : typename L::V{};
    const typename L::V vy = sy ? L::Splat(y, off[2]) : typename L::V{};
    for (int64_t i = 0; i < len; i += 16) {
      const __mmask16 m = LaneMask(len - i);
      const __m128i c = sc ? vc : _mm_maskz_loadu_epi8(m, cond + off[0] + i);
      const __mmask16 t = _mm_test_epi8_mask(c, c);  // any non-zero byte is true
      const typename L::V a = sx ? vx : L::Load(x, off[1] + i, m);
      const typename L::V b = sy ? vy : L::Load(y, off[2] + i, m);
      L::Store(dst, o + i, m, L::Blend(t, b, a));
    }
  });
}

}  // namespace

void BcCompare(BcCmp op, DataType dtype, const BcPlan& plan, const void* a, const void* b,
               uint8_t* dst) {
  if (plan.num_inputs != 2) return;
  switch (op) {
    case BcCmp::kEqual:
      return CompareOp<BcCmp::kEqual>(dtype, plan, a, b, dst);
    case BcCmp::kLess:
      return CompareOp<BcCmp::kLess>(dtype, plan, a, b, dst);
    case BcCmp::kLessOrEqual:
      return CompareOp<BcCmp::kLessOrEqual>(dtype, plan, a, b, dst);
    case BcCmp::kGreater:
      return CompareOp<BcCmp::kGreater>(dtype, plan, a, b, dst);
    case BcCmp::kGreaterOrEqual:
      return CompareOp<BcCmp::kGreaterOrEqual>(dtype, plan, a, b, dst);
  }
}

void BcWhere(int elem_size, const BcPlan& plan, const uint8_t* cond, const void* x, const void* y,
             void* dst) {
  if (plan.num_inputs != 3) return;
  switch (elem_size) {
    case 1:
      return WhereSized<1>(plan, cond, x, y, dst);
    case 2:
      return WhereSized<2>(plan, cond, x, y, dst);
    case 4:
      return WhereSized<4>(plan, cond, x, y, dst);
    case 8:
      return WhereSized<8>(plan, cond, x, y, dst);
    default:
      return;
  }
}

}  // namespace kiln::kernels::cpu::avx512
