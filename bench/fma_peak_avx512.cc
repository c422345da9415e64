#include <immintrin.h>

#include "bench/fma_peak.h"

namespace kiln::bench {
namespace {

// Independent accumulators per thread: an FMA has a latency of 4 cycles and up to 2 issue per
// cycle, so at least 8 chains keep both units busy; 24 leave margin and still fit in the 32 zmm
// registers next to the two operands.
constexpr int kChains = 24;
constexpr int kLanes = 16;

float OneThread(int64_t iterations) {
  // acc = acc * a + b converges to b / (1 - a) = 1: no overflow, no subnormals, at any length.
  const __m512 a = _mm512_set1_ps(0.999f);
  const __m512 b = _mm512_set1_ps(0.001f);
  __m512 acc[kChains];
#pragma GCC unroll 24
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 24
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  __m512 sum = acc[0];
#pragma GCC unroll 24
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  return _mm512_reduce_add_ps(sum);
}

}  // namespace

int64_t FmaPeakFlopsPerThread(int64_t iterations) {
  return iterations * kChains * kLanes * 2;  // one multiply and one add per lane
}

float FmaPeakLoop(int threads, int64_t iterations) {
  float total = 0.0f;
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static, 1)
  for (int t = 0; t < threads; ++t) total += OneThread(iterations);
  return total;
}

}  // namespace kiln::bench
