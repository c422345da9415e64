// The same-shape elementwise loops of elementwise.h, 16 elements at a time.
#include <immintrin.h>

#include <algorithm>

#include "engine/kernels/cpu/avx512/elementwise.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

template <DataType T>
inline __m512 Load16(const void* p, int64_t i, __mmask16 m) {
  if constexpr (T == DataType::kF32) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
  } else {
    const __m256i raw = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i);
    return T == DataType::kF16 ? HalfToFloat16(raw) : Bf16ToFloat16(raw);
  }
}

template <DataType T>
inline void Store16(void* p, int64_t i, __mmask16 m, __m512 v) {
  if constexpr (T == DataType::kF32) {
    _mm512_mask_storeu_ps(static_cast<float*>(p) + i, m, v);
  } else {
    const __m256i raw = T == DataType::kF16 ? FloatToHalf16(v) : FloatToBf16x16(v);
    _mm256_mask_storeu_epi16(static_cast<uint16_t*>(p) + i, m, raw);
  }
}

template <EwOp Op>
inline __m512 Apply(__m512 acc, __m512 x) {
  if constexpr (Op == EwOp::kAdd) return _mm512_add_ps(acc, x);
  if constexpr (Op == EwOp::kSub) return _mm512_sub_ps(acc, x);
  if constexpr (Op == EwOp::kMul) return _mm512_mul_ps(acc, x);
  return acc;
}

template <EwOp Op, DataType T>
void Loop(const void* const* ins, int nin, void* dst, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; i += 16) {
    const __mmask16 m =
        end - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (end - i)) - 1u);
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

template <EwOp Op>
void Dispatch(DataType dtype, const void* const* ins, int nin, void* dst, int64_t begin,
              int64_t end) {
  switch (dtype) {
    case DataType::kF16:
      return Loop<Op, DataType::kF16>(ins, nin, dst, begin, end);
    case DataType::kBF16:
      return Loop<Op, DataType::kBF16>(ins, nin, dst, begin, end);
    default:
      return Loop<Op, DataType::kF32>(ins, nin, dst, begin, end);
  }
}

}  // namespace

void EwSameShape(EwOp op, DataType dtype, const void* const* ins, int nin, void* dst, int64_t n) {
  // Memory bound: chunks of 16K elements (a multiple of 16), on every thread from 4 chunks on.
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks >= 4)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    switch (op) {
      case EwOp::kAdd:
        Dispatch<EwOp::kAdd>(dtype, ins, nin, dst, begin, end);
        break;
      case EwOp::kSub:
        Dispatch<EwOp::kSub>(dtype, ins, nin, dst, begin, end);
        break;
      case EwOp::kMul:
        Dispatch<EwOp::kMul>(dtype, ins, nin, dst, begin, end);
        break;
      case EwOp::kRelu:
        Dispatch<EwOp::kRelu>(dtype, ins, nin, dst, begin, end);
        break;
    }
  }
}

}  // namespace kiln::kernels::cpu::avx512
