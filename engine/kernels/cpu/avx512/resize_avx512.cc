// The separable linear / cubic Resize rows of resize.h, 16 elements at a time. One output row
// (fixed outer index and output H position) is computed at a time: its H pass into an fp32 row
// of the thread's, then its W pass from that row into Y, so the H pass's values never leave L1.
// Each value is computed with the reference's operations in the reference's order, so the split
// into rows changes no bit.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "engine/kernels/cpu/avx512/resize.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// Lanes of m whose extrapolate flag (16 bytes at `flags`) is set.
inline __mmask16 ExtrapolateMask(const uint8_t* flags, __mmask16 m) {
  const __m128i f = _mm_maskz_loadu_epi8(m, flags);
  return _mm_mask_test_epi8_mask(m, f, f);
}

// The H pass of output row oy: tmp[j] for j < n (= w.in * inner) from X's plane at `base`.
template <DataType T>
void HPass(const ResizeSeparableArgs& a, int64_t base, int64_t oy, int64_t n, float* tmp) {
  const ResizeAxisTable& h = a.h;
  if (h.taps == 0) {
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = LaneMask(n - j);
      _mm512_mask_storeu_ps(tmp + j, m, Load16<T>(a.x, base + oy * n + j, m));
    }
    return;
  }
  if (h.extrapolate != nullptr && h.extrapolate[oy] != 0) {
    std::fill(tmp, tmp + n, a.extrapolation);
    return;
  }
  int64_t rows[8];
  float weights[8];
  const int taps = std::min(h.taps, 8);
  for (int k = 0; k < taps; ++k) {
    rows[k] = base + static_cast<int64_t>(h.index[k * h.out + oy]) * n;
    weights[k] = h.weight[k * h.out + oy];
  }
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = LaneMask(n - j);
    __m512 acc = _mm512_setzero_ps();
    for (int k = 0; k < taps; ++k) {
      acc = _mm512_add_ps(
          acc, _mm512_mul_ps(_mm512_set1_ps(weights[k]), Load16<T>(a.x, rows[k] + j, m)));
    }
    _mm512_mask_storeu_ps(tmp + j, m, acc);
  }
}

// The W pass: Y's row at `out` (w.out * inner elements) from the fp32 row tmp.
template <DataType T>
void WPass(const ResizeSeparableArgs& a, const float* tmp, int64_t out) {
  const ResizeAxisTable& w = a.w;
  const int64_t inner = a.inner;
  const __m512 ev = _mm512_set1_ps(a.extrapolation);
  if (w.taps == 0) {
    const int64_t n = w.out * inner;
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = LaneMask(n - j);
      Store16<T>(a.y, out + j, m, _mm512_maskz_loadu_ps(m, tmp + j));
    }
    return;
  }
  if (inner == 1) {
    // 16 output positions at a time, their taps gathered from tmp.
    for (int64_t o = 0; o < w.out; o += 16) {
      const __mmask16 m = LaneMask(w.out - o);
      __m512 acc = _mm512_setzero_ps();
      for (int k = 0; k < w.taps; ++k) {
        const __m512i idx = _mm512_maskz_loadu_epi32(m, w.index + k * w.out + o);
        const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, tmp, 4);
        acc = _mm512_add_ps(acc,
                            _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w.weight + k * w.out + o), v));
      }
      if (w.extrapolate != nullptr)
        acc = _mm512_mask_mov_ps(acc, ExtrapolateMask(w.extrapolate + o, m), ev);
      Store16<T>(a.y, out + o, m, acc);
    }
    return;
  }
  // A block of `inner` contiguous values per position (channels-last): 16 of them at a time.
  for (int64_t o = 0; o < w.out; ++o) {
    const int64_t dst = out + o * inner;
    if (w.extrapolate != nullptr && w.extrapolate[o] != 0) {
      for (int64_t c = 0; c < inner; c += 16) Store16<T>(a.y, dst + c, LaneMask(inner - c), ev);
      continue;
    }
    for (int64_t c = 0; c < inner; c += 16) {
      const __mmask16 m = LaneMask(inner - c);
      __m512 acc = _mm512_setzero_ps();
      for (int k = 0; k < w.taps; ++k) {
        const float* src = tmp + static_cast<int64_t>(w.index[k * w.out + o]) * inner + c;
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_set1_ps(w.weight[k * w.out + o]),
                                               _mm512_maskz_loadu_ps(m, src)));
      }
      Store16<T>(a.y, dst + c, m, acc);
    }
  }
}

template <DataType T>
void Run(const ResizeSeparableArgs& a) {
  const int64_t rows = a.outer * a.h.out;
  const int64_t in_row = a.w.in * a.inner;
  const int64_t out_row = a.w.out * a.inner;
  const int64_t plane = a.h.in * in_row;
  const bool parallel = rows > 1 && rows * out_row >= (int64_t{1} << 15);
  ParallelFor(rows, parallel, [&](int64_t r_begin, int64_t r_end) {
    std::vector<float> tmp(static_cast<size_t>(in_row));
    for (int64_t r = r_begin; r < r_end; ++r) {
      const int64_t o = r / a.h.out, oy = r % a.h.out;
      HPass<T>(a, o * plane, oy, in_row, tmp.data());
      WPass<T>(a, tmp.data(), r * out_row);
    }
  });
}

}  // namespace

void ResizeSeparable(const ResizeSeparableArgs& a) {
  switch (a.dtype) {
    case DataType::kF16:
      return Run<DataType::kF16>(a);
    case DataType::kBF16:
      return Run<DataType::kBF16>(a);
    default:
      return Run<DataType::kF32>(a);
  }
}

}  // namespace kiln::kernels::cpu::avx512
