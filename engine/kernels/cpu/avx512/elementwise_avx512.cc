// The elementwise loops of elementwise.h, 16 elements at a time.
#include <immintrin.h>

#include <algorithm>

#include "engine/kernels/cpu/avx512/elementwise.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"

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

// One element of `x` (index i) broadcast to 16 lanes.
template <DataType T>
inline __m512 Splat(const void* x, int64_t i) {
  return _mm512_set1_ps(_mm512_cvtss_f32(Load16<T>(x, i, 1)));
}

// Rows [r0, r1) of a binary op over rows of `row` elements.
template <EwOp Op, DataType T>
void BinaryRows(EwOperand a, EwOperand b, void* dst, int64_t row, int64_t r0, int64_t r1) {
  __m512 a_splat = a.read == EwRead::kScalar ? Splat<T>(a.data, 0) : _mm512_setzero_ps();
  __m512 b_splat = b.read == EwRead::kScalar ? Splat<T>(b.data, 0) : _mm512_setzero_ps();
  // The 16 operand values at column j of row r: loaded, or the splat of a scalar or column.
  auto operand = [&](const EwOperand& x, __m512 splat, int64_t r, int64_t j, __mmask16 m) {
    if (x.read == EwRead::kFull) return Load16<T>(x.data, r * row + j, m);
    if (x.read == EwRead::kRow) return Load16<T>(x.data, j, m);
    return splat;
  };
  for (int64_t r = r0; r < r1; ++r) {
    if (a.read == EwRead::kCol) a_splat = Splat<T>(a.data, r);
    if (b.read == EwRead::kCol) b_splat = Splat<T>(b.data, r);
    for (int64_t j = 0; j < row; j += 16) {
      const __mmask16 m = LaneMask(row - j);
      Store16<T>(dst, r * row + j, m,
                 Apply<Op>(operand(a, a_splat, r, j, m), operand(b, b_splat, r, j, m)));
    }
  }
}

template <EwOp Op, DataType T>
void Loop(const void* const* ins, int nin, void* dst, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; i += 16) {
    const __mmask16 m = LaneMask(end - i);
    __m512 acc = Load16<T>(ins[0], i, m);
    if constexpr (Op == EwOp::kRelu) {
      // x < 0 ? 0 : x (ordered: NaN passes through, -0 stays -0), as the reference.
      acc = _mm512_mask_mov_ps(acc, _mm512_cmp_ps_mask(acc, _mm512_setzero_ps(), _CMP_LT_OQ),
                               _mm512_setzero_ps());
    } else {
      for (int k = 1; k < nin; ++k) acc = Apply<Op>(acc, Load16<T>(ins[k], i, m));
    }
    Store16<T>(dst, i, m, acc);
  }
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
#pragma omp parallel for schedule(static) if (pieces >= 4)
  for (int64_t c = 0; c < pieces; ++c) {
    const int64_t begin = c * kPiece, end = std::min(n, begin + kPiece);
    WithOpAndType(op, dtype,
                  [&]<EwOp Op, DataType T>() { Loop<Op, T>(ins, nin, dst, begin, end); });
  }
}

void EwBinary(EwOp op, DataType dtype, EwOperand a, EwOperand b, void* dst, int64_t n,
              int64_t row) {
  if (n <= 0 || row <= 0 || op == EwOp::kRelu) return;
  const int64_t rows = n / row;
  const int64_t per = std::max<int64_t>(1, kPiece / row);  // rows per piece
  const int64_t pieces = (rows + per - 1) / per;
#pragma omp parallel for schedule(static) if (pieces >= 4)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t r0 = p * per, r1 = std::min(rows, r0 + per);
    WithOpAndType(op, dtype,
                  [&]<EwOp Op, DataType T>() { BinaryRows<Op, T>(a, b, dst, row, r0, r1); });
  }
}

}  // namespace kiln::kernels::cpu::avx512
