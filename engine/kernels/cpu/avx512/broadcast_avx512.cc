// The broadcasting arithmetic loops of broadcast.h (BcArith, PowScalar), 16 elements at a time.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "engine/kernels/cpu/avx512/broadcast.h"
#include "engine/kernels/cpu/avx512/broadcast_walk_inl.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"
#include "engine/kernels/cpu/parallel.h"

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

// 16 lanes of operand p at element i (lanes m), or its splat sv; kFull: all lanes, unmasked.
template <DataType T, bool kSplat, bool kFull>
inline __m512 Operand(const void* p, int64_t i, __mmask16 m, __m512 sv) {
  if constexpr (kSplat) return sv;
  if constexpr (kFull) return LoadFull16<T>(p, i);
  return Load16<T>(p, i, m);
}

// Two operands; kSa / kSb: the operand is one element splat over the run (inner stride 0).
// Full vectors with plain loads and stores, the tail masked (StoreFull16 says why).
template <BcOp Op, DataType T, bool kSa, bool kSb>
void Seg2(const void* a, const void* b, void* dst, int64_t o, int64_t len, const int64_t* off) {
  const __m512 va = kSa ? Splat<T>(a, off[0]) : _mm512_setzero_ps();
  const __m512 vb = kSb ? Splat<T>(b, off[1]) : _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    const __m512 x = Operand<T, kSa, true>(a, off[0] + i, 0xffff, va);
    const __m512 y = Operand<T, kSb, true>(b, off[1] + i, 0xffff, vb);
    StoreFull16<T>(dst, o + i, Apply<Op>(x, y));
  }
  if (i < len) {
    const __mmask16 m = LaneMask(len - i);
    const __m512 x = Operand<T, kSa, false>(a, off[0] + i, m, va);
    const __m512 y = Operand<T, kSb, false>(b, off[1] + i, m, vb);
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
  auto step = [&]<bool kFull>(int64_t i, __mmask16 m) {
    auto in = [&](int k) {
      if (p.strides[k][r - 1] == 0) return splat[k];
      return kFull ? LoadFull16<T>(ins[k], off[k] + i) : Load16<T>(ins[k], off[k] + i, m);
    };
    __m512 acc = in(0);
    for (int k = 1; k < nin; ++k) acc = Apply<Op>(acc, in(k));
    if constexpr (kFull) {
      StoreFull16<T>(dst, o + i, acc);
    } else {
      Store16<T>(dst, o + i, m, acc);
    }
  };
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) step.template operator()<true>(i, 0xffff);
  if (i < len) step.template operator()<false>(i, LaneMask(len - i));
}

// ---- short inner runs repeated over rows -----------------------------------------------------

// Rows of at most kShortRun elements: an operand that repeats along the rows (an NHWC
// per-channel gate or bias: [.., H*W, C] op [.., 1, C]) against one read contiguously.
constexpr int64_t kShortRun = 256;
// Its period repeated over at least kTileMin lanes (a multiple of the period), plus 16.
constexpr int64_t kTileMin = 64;
constexpr int64_t kTileCap = kShortRun + 16;

// True when, over the last two dims of `p` (rows of inner <= kShortRun elements), operand
// `dense` is read contiguously across rows and operand `rep` is one row repeated.
bool IsRepeatedRows(const BcPlan& p, int dense, int rep) {
  const int r = p.rank;
  if (r < 2) return false;
  const int64_t inner = p.dims[r - 1];
  return inner <= kShortRun && p.strides[dense][r - 1] == 1 && p.strides[dense][r - 2] == inner &&
         p.strides[rep][r - 1] == 1 && p.strides[rep][r - 2] == 0;
}

// The stretch [o, o + len) of the output over the two last dims as one contiguous run (the plan
// of RepeatedRows): kRepFirst says which operand repeats (the first or the second). Instead of
// stopping at every short row, the loop streams 16 lanes at a time, the repeated operand read
// from a tile of it widened to fp32 and repeated; the output's position in the row is o % inner
// (each block of rows starts at a multiple of inner).
template <BcOp Op, DataType T, bool kRepFirst>
void SegRepeated(const void* dense, const void* rep, int64_t inner, void* dst, int64_t o,
                 int64_t len, int64_t off_dense, int64_t off_rep) {
  alignas(64) float tile[kTileCap];
  const int64_t lt = inner * ((kTileMin + inner - 1) / inner);  // <= kShortRun
  for (int64_t c = 0; c < inner; c += 16) {
    const __mmask16 m = LaneMask(inner - c);
    _mm512_mask_storeu_ps(tile + c, m, Load16<T>(rep, off_rep + c, m));
  }
  for (int64_t t = inner; t < lt + 16; ++t) tile[t] = tile[t - inner];
  int64_t j = o % inner;  // tile[j .. j + 15] are the repeated operand's next 16 lanes
  auto apply = [&](__m512 x, __m512 y) { return kRepFirst ? Apply<Op>(y, x) : Apply<Op>(x, y); };
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    const __m512 y = _mm512_loadu_ps(tile + j);
    StoreFull16<T>(dst, o + i, apply(LoadFull16<T>(dense, off_dense + i), y));
    j += 16;
    if (j >= lt) j -= lt;
  }
  if (i < len) {
    const __mmask16 m = LaneMask(len - i);
    const __m512 y = _mm512_loadu_ps(tile + j);
    Store16<T>(dst, o + i, m, apply(Load16<T>(dense, off_dense + i, m), y));
  }
}

// Two operands, one repeated along short rows (IsRepeatedRows): the last two dims merged into
// one run that the walker hands out whole.
template <BcOp Op, DataType T, bool kRepFirst>
void ArithRepeated(const BcPlan& p, const void* const* ins, void* dst) {
  const int r = p.rank;
  const int dense = kRepFirst ? 1 : 0, rep = kRepFirst ? 0 : 1;
  const int64_t inner = p.dims[r - 1];
  BcPlan q = p;
  q.rank = r - 1;
  q.dims[r - 2] = p.dims[r - 2] * inner;
  q.strides[dense][r - 2] = 1;
  q.strides[rep][r - 2] = 0;  // the walker's offset: the start of the repeated row
  BcWalk(q, [&](int64_t o, int64_t len, const int64_t* off) {
    SegRepeated<Op, T, kRepFirst>(ins[dense], ins[rep], inner, dst, o, len, off[dense], off[rep]);
  });
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
  if (IsRepeatedRows(p, 0, 1)) return ArithRepeated<Op, T, false>(p, ins, dst);
  if (IsRepeatedRows(p, 1, 0)) return ArithRepeated<Op, T, true>(p, ins, dst);
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
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) StoreFull16<T>(dst, i, PowVec<K>(LoadFull16<T>(x, i), e));
  if (i < end) {
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
  ParallelFor(pieces, pieces >= 4, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t begin = c * piece, end = std::min(n, begin + piece);
      if (kind == PowKind::kSquare) {
        PowTyped<PowKind::kSquare>(dtype, e, x, dst, begin, end);
      } else {
        PowTyped<PowKind::kGeneral>(dtype, e, x, dst, begin, end);
      }
    }
  });
}

}  // namespace kiln::kernels::cpu::avx512
