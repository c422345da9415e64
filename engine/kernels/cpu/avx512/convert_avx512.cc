// Array conversions of convert.h. Compiled with AVX-512 flags (engine/CMakeLists.txt).
#include <immintrin.h>

#include <cstring>

#include "engine/kernels/cpu/avx512/convert.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

static inline __mmask16 TailMask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}

}  // namespace

// The full vectors of each loop use plain loads and stores, only the tail masked
// (StoreFull16 in vec_convert_inl.h says why).

void FloatToHalf(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        FloatToHalf16(_mm512_loadu_ps(src + i)));
  }
  for (; i < n; i += 16) {
    __mmask16 m = TailMask(n - i);
    _mm256_mask_storeu_epi16(dst + i, m, FloatToHalf16(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

void HalfToFloat(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i,
                     HalfToFloat16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  for (; i < n; i += 16) {
    __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, HalfToFloat16(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

void FloatToBf16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        FloatToBf16x16(_mm512_loadu_ps(src + i)));
  }
  for (; i < n; i += 16) {
    __mmask16 m = TailMask(n - i);
    _mm256_mask_storeu_epi16(dst + i, m, FloatToBf16x16(_mm512_maskz_loadu_ps(m, src + i)));
  }
}

void Bf16ToFloat(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(dst + i,
                     Bf16ToFloat16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  }
  for (; i < n; i += 16) {
    __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, Bf16ToFloat16(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

namespace {

// ConvertArray on one chunk.
void ConvertChunk(DataType from, DataType to, const void* src, void* dst, int64_t n) {
  const auto* s16 = static_cast<const uint16_t*>(src);
  auto* d16 = static_cast<uint16_t*>(dst);
  if (from == to) {
    std::memcpy(dst, src, n * DataTypeSize(from));
    return;
  }
  if (from == DataType::kBool) {  // to kF32: any non-zero byte is true, 1.0f, as the reference
    const auto* b = static_cast<const uint8_t*>(src);
    auto* f = static_cast<float*>(dst);
    const __m512 one = _mm512_set1_ps(1.0f);
    int64_t i = 0;
    // 64 bytes tested at once, four plain stores. (Non-temporal stores into magika's 2.1 MB
    // one-hot took 0.1 ms off this loop and added as much to the MatMul reading it.)
    for (; i + 64 <= n; i += 64) {
      const __m512i x = _mm512_loadu_si512(b + i);
      const __mmask64 t = _mm512_test_epi8_mask(x, x);
      for (int k = 0; k < 4; ++k) {
        _mm512_storeu_ps(f + i + 16 * k,
                         _mm512_maskz_mov_ps(static_cast<__mmask16>(t >> (16 * k)), one));
      }
    }
    for (; i < n; i += 16) {
      __mmask16 m = TailMask(n - i);
      const __mmask16 t = _mm_mask_test_epi8_mask(m, _mm_maskz_loadu_epi8(m, b + i),
                                                  _mm_set1_epi8(static_cast<char>(0xff)));
      _mm512_mask_storeu_ps(f + i, m, _mm512_maskz_mov_ps(t, one));
    }
    return;
  }
  if (from == DataType::kI32) {  // to kF32: vcvtdq2ps rounds to nearest even, as a C++ cast
    const auto* x = static_cast<const int32_t*>(src);
    auto* f = static_cast<float*>(dst);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(f + i, _mm512_cvtepi32_ps(_mm512_loadu_si512(x + i)));
    for (; i < n; i += 16) {
      __mmask16 m = TailMask(n - i);
      _mm512_mask_storeu_ps(f + i, m, _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(m, x + i)));
    }
    return;
  }
  if (from == DataType::kF32) {
    const auto* f = static_cast<const float*>(src);
    to == DataType::kF16 ? FloatToHalf(f, d16, n) : FloatToBf16(f, d16, n);
    return;
  }
  if (to == DataType::kF32) {
    auto* f = static_cast<float*>(dst);
    from == DataType::kF16 ? HalfToFloat(s16, f, n) : Bf16ToFloat(s16, f, n);
    return;
  }
  constexpr int64_t kTmp = 1024;
  alignas(64) float tmp[kTmp];
  for (int64_t i = 0; i < n; i += kTmp) {
    const int64_t len = n - i < kTmp ? n - i : kTmp;
    if (from == DataType::kF16) {
      HalfToFloat(s16 + i, tmp, len);
      FloatToBf16(tmp, d16 + i, len);
    } else {
      Bf16ToFloat(s16 + i, tmp, len);
      FloatToHalf(tmp, d16 + i, len);
    }
  }
}

}  // namespace

void ConvertArray(DataType from, DataType to, const void* src, void* dst, int64_t n) {
  // Chunks of 16 K values, on the threads from 4 chunks on: the fp16 convolutions convert
  // tensors a kernel just wrote (in cache), and fp16 MobileNetV2 ran 5.4-5.8 ms on two threads so
  // against 6.7-6.8 with 64 K chunks from 8 on.
  constexpr int64_t kChunk = 1 << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int64_t in_size = DataTypeSize(from), out_size = DataTypeSize(to);
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  ParallelFor(chunks, chunks >= 4, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t i = c * kChunk, len = n - i < kChunk ? n - i : kChunk;
      ConvertChunk(from, to, s + i * in_size, d + i * out_size, len);
    }
  });
}

}  // namespace kiln::kernels::cpu::avx512
