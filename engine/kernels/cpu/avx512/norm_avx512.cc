// The LayerNorm rows of norm.h, 16 elements at a time. Each pass reads the row again (in L1)
// instead of keeping a copy: the values are recomputed bit for bit.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "engine/kernels/cpu/avx512/norm.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// Lanes 0..15 of v added in order.
inline float LaneSum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float s = 0.0f;
  for (float l : lanes) s += l;
  return s;
}

template <DataType T>
void Rows(const LayerNormArgs& a, int64_t r0, int64_t r1) {
  const int64_t n = a.n;
  const float count = static_cast<float>(n);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t base = r * n;
    // Element j .. j+15 of the row's v (lanes of m; the others 0).
    auto value = [&](int64_t j, __mmask16 m) {
      const __m512 v = Load16<T>(a.x, base + j, m);
      return a.x2 == nullptr ? v : _mm512_add_ps(v, Load16<T>(a.x2, base + j, m));
    };
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = LaneMask(n - j);
      const __m512 v = value(j, m);
      if (a.sum != nullptr) Store16<T>(a.sum, base + j, m, v);
      acc = _mm512_mask_add_ps(acc, m, acc, v);
    }
    const float mean = LaneSum(acc) / count;
    const __m512 mean16 = _mm512_set1_ps(mean);
    acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = LaneMask(n - j);
      const __m512 d = _mm512_sub_ps(value(j, m), mean16);
      acc = _mm512_mask_add_ps(acc, m, acc, _mm512_mul_ps(d, d));
    }
    const float var = LaneSum(acc) / count;
    const float inv_std = 1.0f / std::sqrt(var + a.eps);
    const __m512 inv16 = _mm512_set1_ps(inv_std);
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 m = LaneMask(n - j);
      const __m512 d = _mm512_sub_ps(value(j, m), mean16);
      __m512 y = _mm512_mul_ps(_mm512_mul_ps(d, inv16), _mm512_maskz_loadu_ps(m, a.scale + j));
      if (a.bias != nullptr) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, a.bias + j));
      Store16<T>(a.y, base + j, m, y);
    }
    if (a.mean != nullptr) a.mean[r] = mean;
    if (a.inv_std != nullptr) a.inv_std[r] = inv_std;
  }
}

template <DataType T>
void RowsThreaded(const LayerNormArgs& a) {
  // Rows are independent: split over the threads once there is enough work (as the reference).
  ParallelFor(a.rows, a.rows > 1 && a.rows * a.n >= (int64_t{1} << 15),
              [&](int64_t begin, int64_t end) { Rows<T>(a, begin, end); });
}

}  // namespace

void LayerNormRows(const LayerNormArgs& a) {
  if (a.rows <= 0 || a.n <= 0) return;
  switch (a.dtype) {
    case DataType::kF16:
      return RowsThreaded<DataType::kF16>(a);
    case DataType::kBF16:
      return RowsThreaded<DataType::kBF16>(a);
    default:
      return RowsThreaded<DataType::kF32>(a);
  }
}

namespace {

template <DataType T>
void BatchNormPixels(const void* x, void* y, int64_t pixels, int64_t channels, const float* mean,
                     const float* stddev, const float* scale, const float* bias) {
  ParallelFor(pixels, pixels * channels >= (1 << 15), [&](int64_t p_begin, int64_t p_end) {
    for (int64_t p = p_begin; p < p_end; ++p) {
      for (int64_t c = 0; c < channels; c += 16) {
        const __mmask16 m = LaneMask(channels - c);
        const int64_t i = p * channels + c;
        __m512 v = _mm512_sub_ps(Load16<T>(x, i, m), _mm512_maskz_loadu_ps(m, mean + c));
        v = _mm512_div_ps(v, _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, stddev + c));
        v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, scale + c));
        Store16<T>(y, i, m, _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + c)));
      }
    }
  });
}

template <DataType T>
void LrnPixels(const void* x, void* y, int64_t pixels, int64_t channels, int64_t size, float alpha,
               float beta, float bias) {
  const int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  const float scale = alpha / static_cast<float>(size);
  ParallelFor(pixels, pixels * channels >= (1 << 14), [&](int64_t p_begin, int64_t p_end) {
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int64_t row = p * channels;
      for (int64_t c = 0; c < channels; c += 16) {
        const __mmask16 m = LaneMask(channels - c);
        // Lane j (channel c + j) adds x[c + j + k]^2 for k = -lo .. hi; a channel outside
        // [0, channels) adds +0 (a masked lane), which leaves the non-negative sum as it is.
        __m512 sq = _mm512_setzero_ps();
        for (int64_t k = -lo; k <= hi; ++k) {
          const int64_t first = std::max<int64_t>(0, -(c + k));           // lanes below channel 0
          const int64_t end = std::min<int64_t>(16, channels - (c + k));  // lanes past the last
          if (end <= first) continue;
          const __mmask16 in = static_cast<__mmask16>(m & LaneMask(end) & ~LaneMask(first));
          const __m512 v = Load16<T>(x, row + c + k, in);
          sq = _mm512_add_ps(sq, _mm512_mul_ps(v, v));
        }
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, sq);
        for (int j = 0; j < 16; ++j) lanes[j] = std::pow(bias + scale * lanes[j], beta);
        const __m512 denom = _mm512_mask_load_ps(_mm512_set1_ps(1.0f), m, lanes);
        Store16<T>(y, row + c, m, _mm512_div_ps(Load16<T>(x, row + c, m), denom));
      }
    }
  });
}

}  // namespace

void LrnNhwc(DataType dtype, const void* x, void* y, int64_t pixels, int64_t channels, int64_t size,
             float alpha, float beta, float bias) {
  switch (dtype) {
    case DataType::kF16:
      return LrnPixels<DataType::kF16>(x, y, pixels, channels, size, alpha, beta, bias);
    case DataType::kBF16:
      return LrnPixels<DataType::kBF16>(x, y, pixels, channels, size, alpha, beta, bias);
    default:
      return LrnPixels<DataType::kF32>(x, y, pixels, channels, size, alpha, beta, bias);
  }
}

void BatchNormNhwc(DataType dtype, const void* x, void* y, int64_t pixels, int64_t channels,
                   const float* mean, const float* stddev, const float* scale, const float* bias) {
  switch (dtype) {
    case DataType::kF16:
      return BatchNormPixels<DataType::kF16>(x, y, pixels, channels, mean, stddev, scale, bias);
    case DataType::kBF16:
      return BatchNormPixels<DataType::kBF16>(x, y, pixels, channels, mean, stddev, scale, bias);
    default:
      return BatchNormPixels<DataType::kF32>(x, y, pixels, channels, mean, stddev, scale, bias);
  }
}

}  // namespace kiln::kernels::cpu::avx512
