// The non-overlapping 2x ConvTranspose of deconv_s2.h. Each output row pair of taps (b = 0, 1)
// is two fp32 accumulators over 16 input columns; they are interleaved into 32 consecutive
// outputs. W is widened to fp32 once per call (C * M * kh * 2 values).
#include <immintrin.h>

#include <vector>

#include "engine/kernels/cpu/avx512/deconv_s2.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

template <DataType T>
void Run(const DeconvS2Args& a, const float* w) {
  const int64_t in_plane = a.h * a.wd, oh = a.h * a.kh, ow = a.wd * 2;
  // Output rows in (n, i, m, tap) order: the rows of one input row i follow each other, so its
  // C input rows stay in L1 while every output channel and tap reads them.
  const int64_t rows = a.n * a.h * a.m * a.kh;
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
#pragma omp parallel for schedule(static) if (rows * ow * a.c >= (int64_t{1} << 16))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t tap = r % a.kh, m = r / a.kh % a.m, i = r / (a.kh * a.m) % a.h;
    const int64_t n = r / (a.kh * a.m * a.h);
    const float b = a.bias != nullptr ? a.bias[m] : 0.0f;
    const int64_t x_row = n * a.c * in_plane + i * a.wd;
    const int64_t y_row = ((n * a.m + m) * oh + i * a.kh + tap) * ow;
    for (int64_t j = 0; j < a.wd; j += 16) {
      const __mmask16 mask = LaneMask(a.wd - j);
      __m512 acc0 = _mm512_set1_ps(b), acc1 = acc0;
      for (int64_t c = 0; c < a.c; ++c) {
        const __m512 v = Load16<T>(a.x, x_row + c * in_plane + j, mask);
        const float* wc = w + ((c * a.m + m) * a.kh + tap) * 2;
        acc0 = _mm512_fmadd_ps(_mm512_set1_ps(wc[0]), v, acc0);
        acc1 = _mm512_fmadd_ps(_mm512_set1_ps(wc[1]), v, acc1);
      }
      // Output columns 2j + b: (acc0[0], acc1[0], acc0[1], acc1[1], ...).
      const __m512 first = _mm512_permutex2var_ps(acc0, lo, acc1);
      const __m512 second = _mm512_permutex2var_ps(acc0, hi, acc1);
      const int64_t left = 2 * (a.wd - j);
      Store16<T>(a.y, y_row + 2 * j, LaneMask(left), first);
      Store16<T>(a.y, y_row + 2 * j + 16, LaneMask(left - 16), second);
    }
  }
}

}  // namespace

void DeconvS2(const DeconvS2Args& a) {
  const int64_t wn = a.c * a.m * a.kh * 2;
  std::vector<float> w(wn);
  for (int64_t k = 0; k < wn; k += 16) {
    const __mmask16 m = LaneMask(wn - k);
    const __m512 v = a.dtype == DataType::kF32   ? Load16<DataType::kF32>(a.w, k, m)
                     : a.dtype == DataType::kF16 ? Load16<DataType::kF16>(a.w, k, m)
                                                 : Load16<DataType::kBF16>(a.w, k, m);
    _mm512_mask_storeu_ps(w.data() + k, m, v);
  }
  switch (a.dtype) {
    case DataType::kF16:
      return Run<DataType::kF16>(a, w.data());
    case DataType::kBF16:
      return Run<DataType::kBF16>(a, w.data());
    default:
      return Run<DataType::kF32>(a, w.data());
  }
}

}  // namespace kiln::kernels::cpu::avx512
