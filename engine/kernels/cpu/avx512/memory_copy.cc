// The copy primitives of memory.h: strided gathers into a contiguous output (Slice, Expand,
// Tile, Transpose), fills and row copies (Pad, Concat, Split). Plain C++, no ISA flags: the work
// is moving bytes, and memcpy already uses the widest moves the CPU has.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "engine/kernels/cpu/avx512/memory.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// From this many bytes of output a copy is split over the threads (memory bound: a second core
// pays from about a hundred KB on, as the reference's gathers).
constexpr int64_t kParallelBytes = int64_t{1} << 17;
constexpr int64_t kTile = 32;

// Chunks to split `work` units of `bytes` output bytes into: one below kParallelBytes.
int64_t Chunks(int64_t work, int64_t bytes) {
  if (bytes < kParallelBytes || work < 2) return 1;
  return std::min<int64_t>(work, 4 * static_cast<int64_t>(omp_get_max_threads()));
}

// The rows of `dims` (all axes but the last), r in [r0, r1): out row r (dims.back() elements)
// from the input at the offset of r's coordinates.
template <typename U>
void CopyRowsOf(const U* in, U* out, const std::vector<int64_t>& dims,
                const std::vector<int64_t>& strides, int64_t r0, int64_t r1) {
  const int rank = static_cast<int>(dims.size());
  const int64_t inner = dims[rank - 1], s = strides[rank - 1];
  std::vector<int64_t> idx(rank, 0);
  int64_t off = 0, rem = r0;
  for (int a = rank - 2; a >= 0; --a) {
    idx[a] = rem % dims[a];
    rem /= dims[a];
    off += idx[a] * strides[a];
  }
  for (int64_t r = r0; r < r1; ++r) {
    U* dst = out + r * inner;
    const U* src = in + off;
    if (s == 1) {
      CopyChunk(reinterpret_cast<char*>(dst), reinterpret_cast<const char*>(src),
                inner * static_cast<int64_t>(sizeof(U)));
    } else if (s == 0) {
      std::fill(dst, dst + inner, *src);
    } else {
      for (int64_t j = 0; j < inner; ++j) dst[j] = src[j * s];
    }
    for (int a = rank - 2; a >= 0; --a) {
      off += strides[a];
      if (++idx[a] < dims[a]) break;
      off -= dims[a] * strides[a];
      idx[a] = 0;
    }
  }
}

// The transpose case: axis `j` of the input has stride 1 and is not the output's innermost.
// Tasks are (outer coordinates, tile of axis j); each copies its 32-row band of the 2-D
// transpose between axis j and the last axis in 32 x 32 tiles (out rows contiguous, in rows
// 32 cache lines read over and over while in cache).
template <typename U>
void CopyTiles(const U* in, U* out, const std::vector<int64_t>& dims,
               const std::vector<int64_t>& strides, int j) {
  const int rank = static_cast<int>(dims.size());
  std::vector<int64_t> ostr(rank, 1);
  for (int a = rank - 2; a >= 0; --a) ostr[a] = ostr[a + 1] * dims[a + 1];
  std::vector<int> outer;  // every axis but j and the last
  for (int a = 0; a + 1 < rank; ++a) {
    if (a != j) outer.push_back(a);
  }
  int64_t outer_count = 1;
  for (int a : outer) outer_count *= dims[a];
  const int64_t na = dims[j], nb = dims[rank - 1], sb = strides[rank - 1], oa = ostr[j];
  const int64_t ta = (na + kTile - 1) / kTile;
  const int64_t tasks = outer_count * ta;
  int64_t total = sizeof(U);
  for (int64_t d : dims) total *= d;
  const int64_t chunks = Chunks(tasks, total);
  ParallelFor(chunks, chunks > 1, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      for (int64_t t = tasks * c / chunks; t < tasks * (c + 1) / chunks; ++t) {
        int64_t rem = t / ta, in_off = 0, out_off = 0;
        for (int k = static_cast<int>(outer.size()) - 1; k >= 0; --k) {
          const int a = outer[k];
          const int64_t i = rem % dims[a];
          rem /= dims[a];
          in_off += i * strides[a];
          out_off += i * ostr[a];
        }
        const int64_t a0 = t % ta * kTile, a1 = std::min(na, a0 + kTile);
        for (int64_t b0 = 0; b0 < nb; b0 += kTile) {
          const int64_t b1 = std::min(nb, b0 + kTile);
          for (int64_t a = a0; a < a1; ++a) {
            U* dst = out + out_off + a * oa;
            const U* src = in + in_off + a;
            for (int64_t b = b0; b < b1; ++b) dst[b] = src[b * sb];
          }
        }
      }
    }
  });
}

template <typename U>
void StridedCopyTyped(const U* in, U* out, const std::vector<int64_t>& dims,
                      const std::vector<int64_t>& strides) {
  const int rank = static_cast<int>(dims.size());
  if (rank == 0) {
    out[0] = in[0];
    return;
  }
  // The transpose case: worth tiling when both sides of the 2-D transpose are long enough.
  if (rank >= 2 && strides[rank - 1] != 1) {
    for (int j = 0; j + 1 < rank; ++j) {
      if (strides[j] == 1 && dims[j] >= 4 && dims[rank - 1] >= 4) {
        CopyTiles(in, out, dims, strides, j);
        return;
      }
    }
  }
  int64_t rows = 1;
  for (int a = 0; a + 1 < rank; ++a) rows *= dims[a];
  const int64_t bytes = rows * dims[rank - 1] * static_cast<int64_t>(sizeof(U));
  const int64_t chunks = Chunks(rows, bytes);
  ParallelFor(chunks, chunks > 1, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      CopyRowsOf(in, out, dims, strides, rows * c / chunks, rows * (c + 1) / chunks);
    }
  });
}

template <typename F>
void BySize(int64_t esz, F&& f) {
  switch (esz) {
    case 1:
      f(uint8_t{});
      break;
    case 2:
      f(uint16_t{});
      break;
    case 4:
      f(uint32_t{});
      break;
    default:
      f(uint64_t{});
      break;
  }
}

}  // namespace

void StridedCopy(const void* in, void* out, int64_t esz, const std::vector<int64_t>& dims,
                 const std::vector<int64_t>& strides) {
  // Collapse: drop axes of size 1, merge an axis into its outer neighbour when the outer one's
  // stride is the inner one's extent (the two read one run of the input in order).
  std::vector<int64_t> d, s;
  for (size_t a = 0; a < dims.size(); ++a) {
    if (dims[a] == 0) return;
    if (dims[a] == 1) continue;
    if (!d.empty() && s.back() == dims[a] * strides[a]) {
      d.back() *= dims[a];
      s.back() = strides[a];
    } else {
      d.push_back(dims[a]);
      s.push_back(strides[a]);
    }
  }
  BySize(esz, [&](auto tag) {
    using U = decltype(tag);
    StridedCopyTyped(static_cast<const U*>(in), static_cast<U*>(out), d, s);
  });
}

void FillElements(void* out, int64_t n, int64_t esz, const void* value) {
  if (n <= 0) return;
  BySize(esz, [&](auto tag) {
    using U = decltype(tag);
    U v;
    std::memcpy(&v, value, sizeof(U));
    U* p = static_cast<U*>(out);
    std::fill(p, p + n, v);
  });
}

void CopyRows(const char* src, int64_t src_rs, char* dst, int64_t dst_rs, int64_t rows,
              int64_t bytes) {
  if (bytes <= 0 || rows <= 0) return;
  const int64_t chunks = Chunks(rows, rows * bytes);
  ParallelFor(chunks, chunks > 1, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      for (int64_t r = rows * c / chunks; r < rows * (c + 1) / chunks; ++r) {
        CopyChunk(dst + r * dst_rs, src + r * src_rs, bytes);
      }
    }
  });
}

}  // namespace kiln::kernels::cpu::avx512
