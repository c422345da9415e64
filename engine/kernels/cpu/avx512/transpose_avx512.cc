// Few-row transposes (transpose.h). Compiled with AVX-512 flags; runs only after the registry
// has checked the CPU.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/kernels/cpu/avx512/transpose.h"

namespace kiln::kernels::cpu::avx512 {

// Sixteen columns at a time: one vector of each row, and the rows * 16 outputs as `rows` vectors,
// vector v taking output o = 16 v + j (column o / rows of row o % rows) from row vector r by a
// masked permute for each r (no gathers: they are slow on some CPUs).
void TransposeFewRows32(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols) {
  const float* src = static_cast<const float*>(in);
  float* dst = static_cast<float*>(out);
  alignas(64) int32_t index[kMaxFewRows][16];
  __mmask16 mask[kMaxFewRows][kMaxFewRows] = {};
  for (int64_t v = 0; v < rows; ++v) {
    for (int64_t j = 0; j < 16; ++j) {
      const int64_t o = 16 * v + j;
      index[v][j] = static_cast<int32_t>(o / rows);  // its column within the group
      mask[v][o % rows] |= static_cast<__mmask16>(1u << j);
    }
  }
  const int64_t groups = cols / 16;
  const int64_t bytes = batch * rows * cols * 4;
#pragma omp parallel for collapse(2) schedule(static) if (bytes >= (int64_t{1} << 18))
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* s = src + b * rows * cols + g * 16;
      float* d = dst + b * rows * cols + g * 16 * rows;
      __m512 x[kMaxFewRows];
      for (int64_t r = 0; r < rows; ++r) x[r] = _mm512_loadu_ps(s + r * cols);
      for (int64_t v = 0; v < rows; ++v) {
        const __m512i idx = _mm512_load_si512(index[v]);
        __m512 acc = _mm512_setzero_ps();
        for (int64_t r = 0; r < rows; ++r) {
          if (mask[v][r] != 0) acc = _mm512_mask_permutexvar_ps(acc, mask[v][r], idx, x[r]);
        }
        _mm512_storeu_ps(d + 16 * v, acc);
      }
    }
  }
  // The last cols % 16 columns of each image.
  for (int64_t b = 0; b < batch; ++b) {
    const float* s = src + b * rows * cols;
    float* d = dst + b * rows * cols;
    for (int64_t c = groups * 16; c < cols; ++c) {
      for (int64_t r = 0; r < rows; ++r) std::memcpy(d + c * rows + r, s + r * cols + c, 4);
    }
  }
}

// As TransposeFewRows32 with 2-byte elements: thirty-two columns at a time, one 512-bit vector of
// each row, vector v taking output o = 32 v + j (column o / rows of row o % rows).
void TransposeFewRows16(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols) {
  const uint16_t* src = static_cast<const uint16_t*>(in);
  uint16_t* dst = static_cast<uint16_t*>(out);
  alignas(64) int16_t index[kMaxFewRows][32];
  __mmask32 mask[kMaxFewRows][kMaxFewRows] = {};
  for (int64_t v = 0; v < rows; ++v) {
    for (int64_t j = 0; j < 32; ++j) {
      const int64_t o = 32 * v + j;
      index[v][j] = static_cast<int16_t>(o / rows);
      mask[v][o % rows] |= static_cast<__mmask32>(1u << j);
    }
  }
  const int64_t groups = cols / 32;
  const int64_t bytes = batch * rows * cols * 2;
#pragma omp parallel for collapse(2) schedule(static) if (bytes >= (int64_t{1} << 18))
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t g = 0; g < groups; ++g) {
      const uint16_t* s = src + b * rows * cols + g * 32;
      uint16_t* d = dst + b * rows * cols + g * 32 * rows;
      __m512i x[kMaxFewRows];
      for (int64_t r = 0; r < rows; ++r) x[r] = _mm512_loadu_si512(s + r * cols);
      for (int64_t v = 0; v < rows; ++v) {
        const __m512i idx = _mm512_load_si512(index[v]);
        __m512i acc = _mm512_setzero_si512();
        for (int64_t r = 0; r < rows; ++r) {
          if (mask[v][r] != 0) acc = _mm512_mask_permutexvar_epi16(acc, mask[v][r], idx, x[r]);
        }
        _mm512_storeu_si512(d + 32 * v, acc);
      }
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    const uint16_t* s = src + b * rows * cols;
    uint16_t* d = dst + b * rows * cols;
    for (int64_t c = groups * 32; c < cols; ++c) {
      for (int64_t r = 0; r < rows; ++r) d[c * rows + r] = s[r * cols + c];
    }
  }
}

}  // namespace kiln::kernels::cpu::avx512
