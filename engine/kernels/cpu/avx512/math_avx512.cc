// Elementary functions of math.h. Compiled with AVX-512 flags (engine/CMakeLists.txt).
#include <immintrin.h>

#include "engine/kernels/cpu/avx512/math.h"

// glibc's libmvec, AVX-512 variant of erff (x86-64 vector function ABI: 16 floats in zmm0).
extern "C" __m512 _ZGVeN16v_erff(__m512 x);
extern "C" __m512 _ZGVeN16v_expf(__m512 x);

namespace kiln::kernels::cpu::avx512 {

void ErfF32(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _ZGVeN16v_erff(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, _ZGVeN16v_erff(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void ExpF32(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _ZGVeN16v_expf(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, _ZGVeN16v_expf(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace kiln::kernels::cpu::avx512
