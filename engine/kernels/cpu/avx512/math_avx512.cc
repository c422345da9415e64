// Elementary functions of math.h. Compiled with AVX-512 flags (engine/CMakeLists.txt).
#include <immintrin.h>

#include "engine/kernels/cpu/avx512/math.h"

// glibc's libmvec, AVX-512 variants of erff and expf (x86-64 vector function ABI: 16 floats in
// zmm0).
extern "C" __m512 _ZGVeN16v_erff(__m512 x);
extern "C" __m512 _ZGVeN16v_expf(__m512 x);

namespace kiln::kernels::cpu::avx512 {

namespace {

// y[i] = f(x[i]) 16 at a time, the tail masked (lanes past n load zeros and store nothing).
template <__m512 (*F)(__m512)>
void Map16(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, F(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, F(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace

void ErfF32(const float* x, float* y, int64_t n) { Map16<_ZGVeN16v_erff>(x, y, n); }

void ExpF32(const float* x, float* y, int64_t n) { Map16<_ZGVeN16v_expf>(x, y, n); }

void SoftmaxRowF32(const float* x, float* y, int64_t n) {
  const int64_t full = n / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - full)) - 1u);
  // Max: lanes start at -Inf; a NaN element never wins the comparison (as `v > mx ? v : mx`).
  __m512 mx16 = _mm512_set1_ps(-__builtin_inff());
  for (int64_t i = 0; i < full; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    mx16 = _mm512_mask_mov_ps(mx16, _mm512_cmp_ps_mask(v, mx16, _CMP_GT_OQ), v);
  }
  if (tail != 0) {
    const __m512 v = _mm512_maskz_loadu_ps(tail, x + full);
    mx16 = _mm512_mask_mov_ps(mx16, _mm512_mask_cmp_ps_mask(tail, v, mx16, _CMP_GT_OQ), v);
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, mx16);
  float top = lanes[0];
  for (float l : lanes) top = l > top ? l : top;  // order-free: no NaN among the lanes
  const __m512 mx = _mm512_set1_ps(top);
  // exp(x - max), cannot overflow (cancels in the ratio); summed into lane i % 16 in order.
  __m512 sum16 = _mm512_setzero_ps();
  for (int64_t i = 0; i < full; i += 16) {
    const __m512 e = _ZGVeN16v_expf(_mm512_sub_ps(_mm512_loadu_ps(x + i), mx));
    _mm512_storeu_ps(y + i, e);
    sum16 = _mm512_add_ps(sum16, e);
  }
  if (tail != 0) {
    const __m512 e = _ZGVeN16v_expf(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + full), mx));
    _mm512_mask_storeu_ps(y + full, tail, e);
    sum16 = _mm512_mask_add_ps(sum16, tail, sum16, e);
  }
  _mm512_store_ps(lanes, sum16);
  float sum = 0.0f;
  for (float l : lanes) sum += l;
  const __m512 s = _mm512_set1_ps(sum);
  for (int64_t i = 0; i < full; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_div_ps(_mm512_loadu_ps(y + i), s));
  }
  if (tail != 0) {
    _mm512_mask_storeu_ps(y + full, tail, _mm512_div_ps(_mm512_maskz_loadu_ps(tail, y + full), s));
  }
}

}  // namespace kiln::kernels::cpu::avx512
