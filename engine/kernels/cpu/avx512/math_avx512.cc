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

}  // namespace kiln::kernels::cpu::avx512
