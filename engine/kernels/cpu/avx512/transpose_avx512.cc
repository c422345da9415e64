// Batched 2-D transposes (transpose.h). Compiled with AVX-512 flags; runs only after the registry
// has checked the CPU.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "engine/kernels/cpu/avx512/transpose.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512 {

namespace {

// The few-row transpose of elements of type T (4 or 2 bytes): kLanes = 64 / sizeof(T) columns at
// a time, one 512-bit vector of each row, and the rows * kLanes outputs as `rows` vectors, vector
// v taking output o = kLanes v + j (column o / rows of row o % rows) from row vector r by a
// masked permute for each r (no gathers: they are slow on some CPUs).
template <typename T>
void FewRows(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols) {
  constexpr int kLanes = 64 / sizeof(T);
  using Index = std::conditional_t<sizeof(T) == 4, int32_t, int16_t>;
  using Mask = std::conditional_t<sizeof(T) == 4, __mmask16, __mmask32>;
  const T* src = static_cast<const T*>(in);
  T* dst = static_cast<T*>(out);
  alignas(64) Index index[kMaxFewRows][kLanes];
  Mask mask[kMaxFewRows][kMaxFewRows] = {};
  for (int64_t v = 0; v < rows; ++v) {
    for (int64_t j = 0; j < kLanes; ++j) {
      const int64_t o = kLanes * v + j;
      index[v][j] = static_cast<Index>(o / rows);  // its column within the group
      mask[v][o % rows] |= static_cast<Mask>(uint64_t{1} << j);
    }
  }
  const int64_t groups = cols / kLanes;
  const int64_t bytes = batch * rows * cols * static_cast<int64_t>(sizeof(T));
  ParallelFor(batch * groups, bytes >= (int64_t{1} << 18), [&](int64_t begin, int64_t end) {
    for (int64_t bg = begin; bg < end; ++bg) {
      const int64_t b = bg / groups, g = bg % groups;
      const T* s = src + b * rows * cols + g * kLanes;
      T* d = dst + b * rows * cols + g * kLanes * rows;
      __m512i x[kMaxFewRows];
      for (int64_t r = 0; r < rows; ++r) x[r] = _mm512_loadu_si512(s + r * cols);
      for (int64_t v = 0; v < rows; ++v) {
        const __m512i idx = _mm512_load_si512(index[v]);
        __m512i acc = _mm512_setzero_si512();
        for (int64_t r = 0; r < rows; ++r) {
          if (mask[v][r] == 0) continue;
          if constexpr (sizeof(T) == 4) {
            acc = _mm512_mask_permutexvar_epi32(acc, mask[v][r], idx, x[r]);
          } else {
            acc = _mm512_mask_permutexvar_epi16(acc, mask[v][r], idx, x[r]);
          }
        }
        _mm512_storeu_si512(d + kLanes * v, acc);
      }
    }
  });
  // The last cols % kLanes columns of each image.
  for (int64_t b = 0; b < batch; ++b) {
    const T* s = src + b * rows * cols;
    T* d = dst + b * rows * cols;
    for (int64_t c = groups * kLanes; c < cols; ++c) {
      for (int64_t r = 0; r < rows; ++r) d[c * rows + r] = s[r * cols + c];
    }
  }
}

}  // namespace

void TransposeFewRows32(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols) {
  FewRows<uint32_t>(in, out, batch, rows, cols);
}

void TransposeFewRows16(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols) {
  FewRows<uint16_t>(in, out, batch, rows, cols);
}

// The 16 x 16 block r[0..15] (row i in r[i]) transposed in place: pairs of rows interleaved by
// 32-bit then 64-bit elements, then 128-bit lanes gathered twice.
static inline void Transpose16x16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + j + 4], 0x88);
      t[8 * i + j + 4] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + j + 4], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
  }
}

namespace {

// The tiled transpose of elements of type T (4 or 2 bytes): 16 x 16 tiles, 2-byte elements
// widened to 32-bit lanes for the transpose and narrowed back (bits moved, never converted).
template <typename T>
void Tiles(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols) {
  const T* src = static_cast<const T*>(in);
  T* dst = static_cast<T*>(out);
  const int64_t row_tiles = (rows + 15) / 16, col_tiles = (cols + 15) / 16;
  const int64_t bytes = batch * rows * cols * static_cast<int64_t>(sizeof(T));
  const int64_t tiles = row_tiles * col_tiles;
  ParallelFor(batch * tiles, bytes >= (int64_t{1} << 18), [&](int64_t begin, int64_t end) {
    for (int64_t bt = begin; bt < end; ++bt) {
      const int64_t b = bt / tiles, t = bt % tiles;
      // Column tiles inner: consecutive tiles read the next line of the same 16 rows.
      const int64_t r0 = t / col_tiles * 16, c0 = t % col_tiles * 16;
      const int64_t rr = std::min<int64_t>(16, rows - r0), cc = std::min<int64_t>(16, cols - c0);
      const __mmask16 cmask = static_cast<__mmask16>((1u << cc) - 1u);
      const __mmask16 rmask = static_cast<__mmask16>((1u << rr) - 1u);
      const T* s = src + (b * rows + r0) * cols + c0;
      T* d = dst + (b * cols + c0) * rows + r0;
      __m512 x[16];
      for (int64_t i = 0; i < 16; ++i) {
        if (i >= rr) {
          x[i] = _mm512_setzero_ps();
        } else if constexpr (sizeof(T) == 4) {
          x[i] =
              cc == 16 ? _mm512_loadu_ps(s + i * cols) : _mm512_maskz_loadu_ps(cmask, s + i * cols);
        } else {
          x[i] = _mm512_castsi512_ps(
              _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(cmask, s + i * cols)));
        }
      }
      Transpose16x16(x);
      // Whole tile columns with plain stores (a masked store to a line not yet in cache costs
      // about twice as much on Zen 5).
      for (int64_t j = 0; j < cc; ++j) {
        if (sizeof(T) == 4 && rr == 16) {
          _mm512_storeu_ps(d + j * rows, x[j]);
        } else if (rr == 16) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + j * rows),
                              _mm512_cvtepi32_epi16(_mm512_castps_si512(x[j])));
        } else if constexpr (sizeof(T) == 4) {
          _mm512_mask_storeu_ps(d + j * rows, rmask, x[j]);
        } else {
          _mm256_mask_storeu_epi16(d + j * rows, rmask,
                                   _mm512_cvtepi32_epi16(_mm512_castps_si512(x[j])));
        }
      }
    }
  });
}

}  // namespace

void TransposeTiles32(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols) {
  Tiles<float>(in, out, batch, rows, cols);
}

void TransposeTiles16(const void* in, void* out, int64_t batch, int64_t rows, int64_t cols) {
  Tiles<uint16_t>(in, out, batch, rows, cols);
}

}  // namespace kiln::kernels::cpu::avx512
