// Array conversions of convert.h. Compiled with AVX-512 flags (engine/CMakeLists.txt).
#include <immintrin.h>

#include "engine/kernels/cpu/avx512/convert.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

static inline __mmask16 TailMask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}

}  // namespace

void FloatToHalf(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = TailMask(n - i);
    _mm256_mask_storeu_epi16(dst + i, m, FloatToHalf16(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

void HalfToFloat(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, HalfToFloat16(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

void FloatToBf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = TailMask(n - i);
    _mm256_mask_storeu_epi16(dst + i, m, FloatToBf16x16(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

void Bf16ToFloat(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, Bf16ToFloat16(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

}  // namespace kiln::kernels::cpu::avx512
