// Copy primitives of the fast data-movement kernels (memory_copy.cc; the kernel classes are
// memory_ops.cc and memory_join_ops.cc). Plain C++ on raw bytes of 1-, 2-, 4- or 8-byte elements:
// every dtype moves as its bits, so the results are the reference kernels' exactly. Large copies
// split their rows over the OpenMP threads (each output byte written once, by one thread).
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::kernels::cpu::avx512 {

/// out[i] = in[sum_a idx_a(i) * strides[a]] for every i of the row-major `dims` (out contiguous,
/// `strides` in elements, any sign, 0 for a broadcast axis). Axes of size 1 are dropped and
/// neighbours that stay neighbours in `in` merged first; then rows whose innermost stride is 1
/// are memcpy'd, a stride of 0 fills, and a transpose (the input's unit-stride axis not the
/// output's innermost) is copied in 32 x 32 tiles. `esz` is 1, 2, 4 or 8.
void StridedCopy(const void* in, void* out, int64_t esz, const std::vector<int64_t>& dims,
                 const std::vector<int64_t>& strides);

/// Fills `n` elements of `esz` bytes at `out` with the element at `value`.
void FillElements(void* out, int64_t n, int64_t esz, const void* value);

/// dst = src for `bytes` bytes: fixed-size moves for the small chunks of channels-last joins
/// (a memcpy call costs more than the move there), memcpy otherwise.
inline void CopyChunk(char* dst, const char* src, int64_t bytes);

/// For each of `rows` rows: dst[r * dst_rs .. + bytes) = src[r * src_rs .. + bytes); split over
/// the threads from 256 KB on.
void CopyRows(const char* src, int64_t src_rs, char* dst, int64_t dst_rs, int64_t rows,
              int64_t bytes);

}  // namespace kiln::kernels::cpu::avx512

// ---- inline definitions ---------------------------------------------------------------------

#include <cstring>

namespace kiln::kernels::cpu::avx512 {

inline void CopyChunk(char* dst, const char* src, int64_t bytes) {
  switch (bytes) {
    case 4:
      std::memcpy(dst, src, 4);
      return;
    case 8:
      std::memcpy(dst, src, 8);
      return;
    case 16:
      std::memcpy(dst, src, 16);
      return;
    default:
      break;
  }
  if (bytes < 64 && bytes % 8 == 0) {
    for (int64_t i = 0; i < bytes; i += 8) std::memcpy(dst + i, src + i, 8);
    return;
  }
  std::memcpy(dst, src, bytes);
}

}  // namespace kiln::kernels::cpu::avx512
