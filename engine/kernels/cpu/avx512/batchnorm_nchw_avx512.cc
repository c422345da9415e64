// The channels-first BatchNormalization of batchnorm_nchw.h: each (n, c) plane with its
// channel's four values broadcast, 16 elements at a time.
#include <immintrin.h>

#include <algorithm>

#include "engine/kernels/cpu/avx512/batchnorm_nchw.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

template <DataType T>
void Planes(const void* x, void* y, int64_t n, int64_t channels, int64_t spatial, const float* mean,
            const float* stddev, const float* scale, const float* bias) {
  const int64_t planes = n * channels;
  // Chunks of at most 4096 elements of one plane: small planes are one chunk each, a large
  // plane (few channels) is shared between the threads.
  const int64_t per_plane = (spatial + 4095) / 4096;
  const int64_t chunks = planes * per_plane;
  const int64_t chunk = (spatial + per_plane - 1) / per_plane;
  ParallelFor(chunks, planes * spatial >= (1 << 15), [&](int64_t k_begin, int64_t k_end) {
    for (int64_t k = k_begin; k < k_end; ++k) {
      const int64_t p = k / per_plane, c = p % channels;
      const int64_t begin = (k % per_plane) * chunk;
      const int64_t end = std::min(spatial, begin + chunk);
      const __m512 m = _mm512_set1_ps(mean[c]), s = _mm512_set1_ps(stddev[c]);
      const __m512 g = _mm512_set1_ps(scale[c]), b = _mm512_set1_ps(bias[c]);
      for (int64_t j = begin; j < end; j += 16) {
        const __mmask16 mask = LaneMask(end - j);
        const int64_t i = p * spatial + j;
        __m512 v = _mm512_sub_ps(Load16<T>(x, i, mask), m);
        v = _mm512_mul_ps(_mm512_div_ps(v, s), g);
        Store16<T>(y, i, mask, _mm512_add_ps(v, b));
      }
    }
  });
}

}  // namespace

void BatchNormNchw(DataType dtype, const void* x, void* y, int64_t n, int64_t channels,
                   int64_t spatial, const float* mean, const float* stddev, const float* scale,
                   const float* bias) {
  if (n * channels * spatial == 0) return;
  switch (dtype) {
    case DataType::kF16:
      return Planes<DataType::kF16>(x, y, n, channels, spatial, mean, stddev, scale, bias);
    case DataType::kBF16:
      return Planes<DataType::kBF16>(x, y, n, channels, spatial, mean, stddev, scale, bias);
    default:
      return Planes<DataType::kF32>(x, y, n, channels, spatial, mean, stddev, scale, bias);
  }
}

}  // namespace kiln::kernels::cpu::avx512
