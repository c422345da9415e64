// The broadcasting arithmetic loops of broadcast.h (BcArith, PowScalar), 16 elements at a time.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "engine/kernels/cpu/avx512/broadcast.h"
#include "engine/kernels/cpu/avx512/broadcast_walk_inl.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// acc op x, as the reference's functors compute it in fp32.
template <BcOp Op>
inline __m512 Apply(__m512 acc, __m512 x) {
  if constexpr (Op == BcOp::kAdd) return _mm512_add_ps(acc, x);
  if constexpr (Op == BcOp::kSub) return _mm512_sub_ps(acc, x);
  if constexpr (Op == BcOp::kMul) return _mm512_mul_ps(acc, x);
  if constexpr (Op == BcOp::kDiv) return _mm512_div_ps(acc, x);
  if constexpr (Op == BcOp::kMax || Op == BcOp::kMin) {
    // (acc > x || acc != acc) ? acc : x (Min: <): NaN propagates, ties keep x (+0 vs -0 too).
    constexpr int kPred = Op == BcOp::kMax ? _CMP_GT_OQ : _CMP_LT_OQ;
    const __mmask16 keep =
        _mm512_cmp_ps_mask(acc, x, kPred) | _mm512_cmp_ps_mask(acc, acc, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(keep, x, acc);
  }
  if constexpr (Op == BcOp::kPRelu) {
    // acc < 0 ? x * acc : acc (acc the input, x the slope; NaN and -0 pass through).
    const __mmask16 neg = _mm512_cmp_ps_mask(acc, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_mul_ps(acc, neg, x, acc);
  }
  return acc;
}

// Element i of a `T` array broadcast to 16 lanes.
template <DataType T>
inline __m512 Splat(const void* x, int64_t i) {
  return _mm512_set1_ps(_mm512_cvtss_f32(Load16<T>(x, i, 1)));
}

// Two operands; kSa / kSb: the operand is one element splat over the run (inner stride 0).
template <BcOp Op, DataType T, bool kSa, bool kSb>
void Seg2(const void* a, const void* b, void* dst, int64_t o, int64_t len, const int64_t* off) {
  const __m512 va = kSa ? Splat<T>(a, off[0]) : _mm512_setzero_ps();
  const __m512 vb = kSb ? Splat<T>(b, off[1]) : _mm512_setzero_ps();
  for (int64_t i = 0; i < len; i += 16) {
    const __mmask16 m = LaneMask(len - i);
    const __m512 x = kSa ? va : Load16<T>(a, off[0] + i, m);
    const __m512 y = kSb ? vb : Load16<T>(b, off[1] + i, m);
    Store16<T>(dst, o + i, m, Apply<Op>(x, y));
  }
}

// Any number of operands (Sum, Max, Min of three or four), folded left to right.
template <BcOp Op, DataType T>
void SegN(const BcPlan& p, const void* const* ins, void* dst, int64_t o, int64_t len,
          const int64_t* off) {
  const int nin = p.num_inputs;
  const int r = p.rank;
  __m512 splat[kBcMaxInputs];
  for (int k = 0; k < nin; ++k) {
    splat[k] = p.strides[k][r - 1] == 0 ? Splat<T>(ins[k], off[k]) : _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < len; i += 16) {
    const __mmask16 m = LaneMask(len - i);
    __m512 acc = p.strides[0][r - 1] == 0 ? splat[0] : Load16<T>(ins[0], off[0] + i, m);
    for (int k = 1; k < nin; ++k) {
      acc = Apply<Op>(acc, p.strides[k][r - 1] == 0 ? splat[k] : Load16<T>(ins[k], off[k] + i, m));
    }
    Store16<T>(dst, o + i, m, acc);
  }
}

template <BcOp Op, DataType T>
void Arith(const BcPlan& p, const void* const* ins, void* dst) {
  const int r = p.rank;
  if (p.num_inputs != 2) {
    BcWalk(p, [&](int64_t o, int64_t len, const int64_t* off) {
      SegN<Op, T>(p, ins, dst, o, len, off);
    });
    return;
  }
  const void* a = ins[0];
  const void* b = ins[1];
  const bool sa = p.strides[0][r - 1] == 0, sb = p.strides[1][r - 1] == 0;
  BcWalk(p, [&](int64_t o, int64_t len, const int64_t* off) {
    if (!sa && !sb) {
      Seg2<Op, T, false, false>(a, b, dst, o, len, off);
    } else if (!sa) {
      Seg2<Op, T, false, true>(a, b, dst, o, len, off);
    } else if (!sb) {
      Seg2<Op, T, true, false>(a, b, dst, o, len, off);
    } else {
      Seg2<Op, T, true, true>(a, b, dst, o, len, off);
    }
  });
}

template <BcOp Op>
void ArithTyped(DataType dtype, const BcPlan& p, const void* const* ins, void* dst) {
  switch (dtype) {
    case DataType::kF16:
      return Arith<Op, DataType::kF16>(p, ins, dst);
    case DataType::kBF16:
      return Arith<Op, DataType::kBF16>(p, ins, dst);
    default:
      return Arith<Op, DataType::kF32>(p, ins, dst);
  }
}

// ---- Pow by a scalar -------------------------------------------------------------------------

// x * x (kSquare), or powf(x, e) on each lane: the reference's computation, so its bits.
template <PowKind K>
inline __m512 PowVec(__m512 x, float e) {
  if constexpr (K == PowKind::kSquare) return _mm512_mul_ps(x, x);
  alignas(64) float v[16];
  _mm512_store_ps(v, x);
  for (float& f : v) f = std::pow(f, e);
  return _mm512_load_ps(v);
}

template <PowKind K, DataType T>
void PowRange(float e, const void* x, void* dst, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; i += 16) {
    const __mmask16 m = LaneMask(end - i);
    Store16<T>(dst, i, m, PowVec<K>(Load16<T>(x, i, m), e));
  }
}

template <PowKind K>
void PowTyped(DataType dtype, float e, const void* x, void* dst, int64_t begin, int64_t end) {
  switch (dtype) {
    case DataType::kF16:
      return PowRange<K, DataType::kF16>(e, x, dst, begin, end);
    case DataType::kBF16:
      return PowRange<K, DataType::kBF16>(e, x, dst, begin, end);
    default:
      return PowRange<K, DataType::kF32>(e, x, dst, begin, end);
  }
}

// Integer Add, Sub, Mul wrapping around in two's complement (the reference's WrapAdd ...): in
// the unsigned type, which the compiler vectorises; inputs folded left to right.
template <typename T, BcOp Op>
void IntArith(const BcPlan& plan, const void* const* ins, void* dst) {
  using U = std::make_unsigned_t<T>;
  const int nin = plan.num_inputs;
  const int inner = plan.rank - 1;
  U* y = static_cast<U*>(dst);
  BcWalk(plan, [&](int64_t o, int64_t len, const int64_t* at) {
    const U* a = static_cast<const U*>(ins[0]) + at[0];
    const int64_t sa = plan.strides[0][inner];
    for (int64_t i = 0; i < len; ++i) y[o + i] = a[i * sa];
    for (int k = 1; k < nin; ++k) {
      const U* b = static_cast<const U*>(ins[k]) + at[k];
      const int64_t sb = plan.strides[k][inner];
      for (int64_t i = 0; i < len; ++i) {
        if constexpr (Op == BcOp::kAdd) y[o + i] += b[i * sb];
        if constexpr (Op == BcOp::kSub) y[o + i] -= b[i * sb];
        if constexpr (Op == BcOp::kMul) y[o + i] *= b[i * sb];
      }
    }
  });
}

template <typename T>
void IntArithTyped(BcOp op, const BcPlan& plan, const void* const* ins, void* dst) {
  if (op == BcOp::kSub) return IntArith<T, BcOp::kSub>(plan, ins, dst);
  if (op == BcOp::kMul) return IntArith<T, BcOp::kMul>(plan, ins, dst);
  return IntArith<T, BcOp::kAdd>(plan, ins, dst);
}

}  // namespace

void BcIntArith(BcOp op, DataType dtype, const BcPlan& plan, const void* const* ins, void* dst) {
  if (plan.num_inputs < 2) return;
  if (dtype == DataType::kI64) return IntArithTyped<int64_t>(op, plan, ins, dst);
  IntArithTyped<int32_t>(op, plan, ins, dst);
}

void BcArith(BcOp op, DataType dtype, const BcPlan& plan, const void* const* ins, void* dst) {
  if (plan.num_inputs < 2) return;
  switch (op) {
    case BcOp::kAdd:
      return ArithTyped<BcOp::kAdd>(dtype, plan, ins, dst);
    case BcOp::kSub:
      return ArithTyped<BcOp::kSub>(dtype, plan, ins, dst);
    case BcOp::kMul:
      return ArithTyped<BcOp::kMul>(dtype, plan, ins, dst);
    case BcOp::kDiv:
      return ArithTyped<BcOp::kDiv>(dtype, plan, ins, dst);
    case BcOp::kMax:
      return ArithTyped<BcOp::kMax>(dtype, plan, ins, dst);
    case BcOp::kMin:
      return ArithTyped<BcOp::kMin>(dtype, plan, ins, dst);
    case BcOp::kPRelu:
      return ArithTyped<BcOp::kPRelu>(dtype, plan, ins, dst);
  }
}

void PowScalar(PowKind kind, float e, DataType dtype, const void* x, void* dst, int64_t n) {
  if (n <= 0) return;
  // powf per element: about 20x the work of an add, so smaller pieces.
  const int64_t piece = kind == PowKind::kSquare ? kBcPiece : kBcPiece / 8;
  const int64_t pieces = (n + piece - 1) / piece;
#pragma omp parallel for schedule(static) if (pieces >= 4)
  for (int64_t c = 0; c < pieces; ++c) {
    const int64_t begin = c * piece, end = std::min(n, begin + piece);
    if (kind == PowKind::kSquare) {
      PowTyped<PowKind::kSquare>(dtype, e, x, dst, begin, end);
    } else {
      PowTyped<PowKind::kGeneral>(dtype, e, x, dst, begin, end);
    }
  }
}

}  // namespace kiln::kernels::cpu::avx512
