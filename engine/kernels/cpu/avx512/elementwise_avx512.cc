// The elementwise loops of elementwise.h, 16 elements at a time.
#include <immintrin.h>

#include <algorithm>

#include "engine/kernels/cpu/avx512/elementwise.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

template <EwOp Op>
inline __m512 Apply(__m512 acc, __m512 x) {
  if constexpr (Op == EwOp::kAdd) return _mm512_add_ps(acc, x);
  if constexpr (Op == EwOp::kSub) return _mm512_sub_ps(acc, x);
  if constexpr (Op == EwOp::kMul) return _mm512_mul_ps(acc, x);
  if constexpr (Op == EwOp::kDiv) return _mm512_div_ps(acc, x);
  return acc;
}

// Elements i .. i+15 (lanes m; kFull: all 16, plain loads and stores).
template <EwOp Op, DataType T, bool kFull>
inline void Step(const void* const* ins, int nin, void* dst, int64_t i, __mmask16 m) {
  __m512 acc = kFull ? LoadFull16<T>(ins[0], i) : Load16<T>(ins[0], i, m);
  if constexpr (Op == EwOp::kRelu) {
    // x < 0 ? 0 : x (ordered: NaN passes through, -0 stays -0), as the reference.
    acc = _mm512_mask_mov_ps(acc, _mm512_cmp_ps_mask(acc, _mm512_setzero_ps(), _CMP_LT_OQ),
                             _mm512_setzero_ps());
  } else {
    for (int k = 1; k < nin; ++k) {
      acc = Apply<Op>(acc, kFull ? LoadFull16<T>(ins[k], i) : Load16<T>(ins[k], i, m));
    }
  }
  if constexpr (kFull) {
    StoreFull16<T>(dst, i, acc);
  } else {
    Store16<T>(dst, i, m, acc);
  }
}

template <EwOp Op, DataType T>
void Loop(const void* const* ins, int nin, void* dst, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) Step<Op, T, true>(ins, nin, dst, i, 0xffff);
  if (i < end) Step<Op, T, false>(ins, nin, dst, i, LaneMask(end - i));
}

// f.template operator()<Op, T>() for the run-time `op` and `dtype` (kF16, kBF16, else kF32).
template <typename F>
void WithOpAndType(EwOp op, DataType dtype, F&& f) {
  auto with_type = [&]<EwOp Op>() {
    switch (dtype) {
      case DataType::kF16:
        return f.template operator()<Op, DataType::kF16>();
      case DataType::kBF16:
        return f.template operator()<Op, DataType::kBF16>();
      default:
        return f.template operator()<Op, DataType::kF32>();
    }
  };
  switch (op) {
    case EwOp::kAdd:
      return with_type.template operator()<EwOp::kAdd>();
    case EwOp::kSub:
      return with_type.template operator()<EwOp::kSub>();
    case EwOp::kMul:
      return with_type.template operator()<EwOp::kMul>();
    case EwOp::kDiv:
      return with_type.template operator()<EwOp::kDiv>();
    case EwOp::kRelu:
      return with_type.template operator()<EwOp::kRelu>();
  }
}

// Memory bound: pieces of about 16K elements, on every thread from 4 pieces on.
constexpr int64_t kPiece = int64_t{1} << 14;

}  // namespace

void EwSameShape(EwOp op, DataType dtype, const void* const* ins, int nin, void* dst, int64_t n) {
  const int64_t pieces = (n + kPiece - 1) / kPiece;  // kPiece is a multiple of 16
  ParallelFor(pieces, pieces >= 4, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t begin = c * kPiece, end = std::min(n, begin + kPiece);
      WithOpAndType(op, dtype,
                    [&]<EwOp Op, DataType T>() { Loop<Op, T>(ins, nin, dst, begin, end); });
    }
  });
}

}  // namespace kiln::kernels::cpu::avx512
