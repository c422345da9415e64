// The NHWC pooling loops of pool.h.
#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "engine/kernels/cpu/avx512/pool.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// f(acc, cell) folded over the cells of output (b, oy, ox)'s window that lie inside the input,
// in row-major order, for the 16 channels from c (lanes m).
template <DataType T, typename F>
inline __m512 FoldWindow(const void* x, const PoolWindow2d& w, int64_t b, int64_t oy, int64_t ox,
                         int64_t c, __mmask16 m, __m512 acc, F f) {
  for (int64_t ky = 0; ky < w.kh; ++ky) {
    const int64_t iy = oy * w.sh - w.ph + ky * w.dh;
    if (iy < 0 || iy >= w.ih) continue;
    for (int64_t kx = 0; kx < w.kw; ++kx) {
      const int64_t ix = ox * w.sw - w.pw + kx * w.dw;
      if (ix < 0 || ix >= w.iw) continue;
      acc = f(acc, Load16<T>(x, ((b * w.ih + iy) * w.iw + ix) * w.c + c, m));
    }
  }
  return acc;
}

// The window rows of output row (b, oy) that lie inside the input, in ky order: the element
// offset of each one's first pixel. `count` < 0 when the window is too tall to list (kMax).
struct WindowRows {
  static constexpr int kMax = 16;
  int64_t off[kMax];
  int count = 0;
  WindowRows(const PoolWindow2d& w, int64_t b, int64_t oy) {
    if (w.kh > kMax) {
      count = -1;
      return;
    }
    for (int64_t ky = 0; ky < w.kh; ++ky) {
      const int64_t iy = oy * w.sh - w.ph + ky * w.dh;
      if (iy >= 0 && iy < w.ih) off[count++] = (b * w.ih + iy) * w.iw * w.c;
    }
  }
};

// FoldWindow over the output row's window rows `rows`, for a window whose columns from ix0 all
// lie inside the input: the same cells in the same order, without a bounds test per cell.
template <DataType T, typename F>
inline __m512 FoldInside(const void* x, const PoolWindow2d& w, const WindowRows& rows, int64_t ix0,
                         int64_t c, __mmask16 m, __m512 acc, F f) {
  const int64_t step = w.dw * w.c;
  for (int r = 0; r < rows.count; ++r) {
    const int64_t base = rows.off[r] + ix0 * w.c + c;
    for (int64_t kx = 0; kx < w.kw; ++kx) acc = f(acc, Load16<T>(x, base + kx * step, m));
  }
  return acc;
}

// Every output pixel of output row (b, oy): pixel(ox, fold) stores its window's folds, where
// fold(c, m, init, f) folds f over the window's cells (row-major, inside only) for the 16
// channels from c (lanes m).
template <DataType T, typename Pixel>
inline void PoolRow(const void* x, const PoolWindow2d& w, int64_t b, int64_t oy, Pixel pixel,
                    int64_t ox_begin = 0, int64_t ox_end = -1) {
  const WindowRows rows(w, b, oy);
  if (ox_end < 0) ox_end = w.ow;
  for (int64_t ox = ox_begin; ox < ox_end; ++ox) {
    const int64_t ix0 = ox * w.sw - w.pw;
    const bool inside = rows.count >= 0 && ix0 >= 0 && ix0 + (w.kw - 1) * w.dw < w.iw;
    pixel(ox, [&](int64_t c, __mmask16 m, __m512 init, auto f) {
      return inside ? FoldInside<T>(x, w, rows, ix0, c, m, init, f)
                    : FoldWindow<T>(x, w, b, oy, ox, c, m, init, f);
    });
  }
}

// max(v, best) keeps `best` on a tie (the earliest cell, as the reference's first-maximum rule)
// and when v is NaN (skipped, as the reference).
inline __m512 MaxStep(__m512 best, __m512 v) { return _mm512_max_ps(v, best); }

// MaxPool's output pixels [ox0, ox1) of an output row whose KH window rows `rows` all lie inside
// the input, as are the KW columns (dilation 1) of each of these pixels' windows: FoldInside's
// cells in its order with the window's size known, no bounds and no per-pixel call (a 2 x 2
// window over 16 channels is four loads and four maxima a pixel).
template <DataType T, int KH, int KW>
void MaxRowInside(const void* x, void* y, const PoolWindow2d& w, const WindowRows& rows,
                  int64_t out_row, int64_t ox0, int64_t ox1) {
  // Each window row's bytes 3 KB ahead asked into L1: a pool reads an activation the previous
  // kernel has just written out of L2 (YuNet's first, 6.5 MB at 320 x 320 x 16), and the
  // hardware prefetcher alone left its loads waiting (median of five alternating runs of the
  // 320 x 320 x 16 one: 0.20 ms without, 0.17 with).
  constexpr int64_t ahead = 3072;
  const int64_t es = static_cast<int64_t>(DataTypeSize(T));
  const int64_t span = w.sw * w.c * es;  // bytes a window row moves on by per pixel
  const char* xb = static_cast<const char*>(x);
  for (int64_t ox = ox0; ox < ox1; ++ox) {
    const int64_t ix0 = ox * w.sw - w.pw;
    for (int r = 0; r < KH; ++r) {
      const char* p = xb + (rows.off[r] + ix0 * w.c) * es + ahead;
      for (int64_t l = 0; l < span; l += 64) _mm_prefetch(p + l, _MM_HINT_T0);
    }
    // 16 channels at a time with plain loads and stores, the last < 16 masked: on an X just
    // written by the previous kernel, masked ones took 0.19-0.21 ms on YuNet's 320 x 320 x 16
    // pool against 0.15-0.16 (one core, alone; the same maxima).
    int64_t c = 0;
    for (; c + 16 <= w.c; c += 16) {
      __m512 best = _mm512_set1_ps(std::numeric_limits<float>::lowest());
      for (int r = 0; r < KH; ++r) {
        const int64_t base = rows.off[r] + ix0 * w.c + c;
        for (int kx = 0; kx < KW; ++kx) best = MaxStep(best, LoadFull16<T>(x, base + kx * w.c));
      }
      StoreFull16<T>(y, out_row + ox * w.c + c, best);
    }
    if (c < w.c) {
      const __mmask16 m = LaneMask(w.c - c);
      __m512 best = _mm512_set1_ps(std::numeric_limits<float>::lowest());
      for (int r = 0; r < KH; ++r) {
        const int64_t base = rows.off[r] + ix0 * w.c + c;
        for (int kx = 0; kx < KW; ++kx) best = MaxStep(best, Load16<T>(x, base + kx * w.c, m));
      }
      Store16<T>(y, out_row + ox * w.c + c, m, best);
    }
  }
}

// The output pixels [*ox0, *ox1) of a row whose windows' columns all lie inside the input.
void InsideColumns(const PoolWindow2d& w, int64_t* ox0, int64_t* ox1) {
  // ox * sw - pw >= 0 and ox * sw - pw + (kw - 1) * dw < iw.
  *ox0 = std::min(w.ow, (w.pw + w.sw - 1) / w.sw);
  const int64_t last = w.iw - 1 - (w.kw - 1) * w.dw + w.pw;  // largest ox * sw allowed
  *ox1 = last < 0 ? *ox0 : std::clamp(last / w.sw + 1, *ox0, w.ow);
}

template <DataType T>
void MaxPool(const void* x, void* y, const PoolWindow2d& w) {
  const int64_t rows = w.n * w.oh;
  // The windows of 2 x 2 and 3 x 3 (dilation 1) inside the input take MaxRowInside.
  using RowFn = void (*)(const void*, void*, const PoolWindow2d&, const WindowRows&, int64_t,
                         int64_t, int64_t);
  RowFn inside = nullptr;
  if (w.dh == 1 && w.dw == 1 && w.kh == 2 && w.kw == 2) inside = MaxRowInside<T, 2, 2>;
  if (w.dh == 1 && w.dw == 1 && w.kh == 3 && w.kw == 3) inside = MaxRowInside<T, 3, 3>;
  int64_t ox0 = 0, ox1 = 0;
  InsideColumns(w, &ox0, &ox1);
  ParallelFor(rows, rows * w.ow * w.c >= (1 << 14), [&](int64_t r_begin, int64_t r_end) {
    for (int64_t r = r_begin; r < r_end; ++r) {
      const int64_t b = r / w.oh, oy = r % w.oh;
      auto pixel = [&](int64_t ox, auto fold) {
        const int64_t out = ((b * w.oh + oy) * w.ow + ox) * w.c;
        for (int64_t c = 0; c < w.c; c += 16) {
          const __mmask16 m = LaneMask(w.c - c);
          // Cells in row-major order.
          const __m512 best =
              fold(c, m, _mm512_set1_ps(std::numeric_limits<float>::lowest()), MaxStep);
          Store16<T>(y, out + c, m, best);
        }
      };
      if (inside != nullptr && ox0 < ox1) {
        const WindowRows window_rows(w, b, oy);
        if (window_rows.count == w.kh) {
          inside(x, y, w, window_rows, (b * w.oh + oy) * w.ow * w.c, ox0, ox1);
          PoolRow<T>(x, w, b, oy, pixel, 0, ox0);
          PoolRow<T>(x, w, b, oy, pixel, ox1, w.ow);
          continue;
        }
      }
      PoolRow<T>(x, w, b, oy, pixel);
    }
  });
}

// Cells of one window along one axis: those inside the input [0, in) and those inside the
// padded input [-pad, in + pad_end), for the output coordinate `o`.
struct AxisCells {
  int64_t inside = 0, padded = 0;
};
AxisCells Cells(int64_t o, int64_t stride, int64_t pad, int64_t pad_end, int64_t k,
                int64_t dilation, int64_t in) {
  AxisCells a;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t i = o * stride - pad + j * dilation;
    a.inside += i >= 0 && i < in;
    a.padded += i >= -pad && i < in + pad_end;
  }
  return a;
}

template <DataType T>
void AveragePool(const void* x, void* y, const PoolWindow2d& w, bool count_include_pad) {
  const int64_t rows = w.n * w.oh;
  ParallelFor(rows, rows * w.ow * w.c >= (1 << 14), [&](int64_t r_begin, int64_t r_end) {
    for (int64_t r = r_begin; r < r_end; ++r) {
      const int64_t b = r / w.oh, oy = r % w.oh;
      const AxisCells cy = Cells(oy, w.sh, w.ph, w.ph_end, w.kh, w.dh, w.ih);
      PoolRow<T>(x, w, b, oy, [&](int64_t ox, auto fold) {
        const AxisCells cx = Cells(ox, w.sw, w.pw, w.pw_end, w.kw, w.dw, w.iw);
        const int64_t count = count_include_pad ? cy.padded * cx.padded : cy.inside * cx.inside;
        const __m512 divisor = _mm512_set1_ps(static_cast<float>(count));
        const int64_t out = ((b * w.oh + oy) * w.ow + ox) * w.c;
        for (int64_t c = 0; c < w.c; c += 16) {
          const __mmask16 m = LaneMask(w.c - c);
          // The cells inside the input in row-major order, summed from 0 as the reference.
          const __m512 sum = fold(c, m, _mm512_setzero_ps(),
                                  [](__m512 acc, __m512 v) { return _mm512_add_ps(acc, v); });
          // A window with nothing to count has nothing to average: 0 (one entirely in the padding
          // that counts the padding divides a sum of nothing, 0, as the reference).
          Store16<T>(y, out + c, m, count > 0 ? _mm512_div_ps(sum, divisor) : _mm512_setzero_ps());
        }
      });
    }
  });
}

template <DataType T>
void GlobalAverage(const void* x, void* y, int64_t n, int64_t hw, int64_t c) {
  const __m512 count = _mm512_set1_ps(static_cast<float>(hw));
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < c; ch += 16) {
      const __mmask16 m = LaneMask(c - ch);
      __m512 sum = _mm512_setzero_ps();
      if (m == 0xffff) {  // plain loads (see MaxRowInside): the same sums
        for (int64_t p = 0; p < hw; ++p)
          sum = _mm512_add_ps(sum, LoadFull16<T>(x, (b * hw + p) * c + ch));
      } else {
        for (int64_t p = 0; p < hw; ++p)
          sum = _mm512_add_ps(sum, Load16<T>(x, (b * hw + p) * c + ch, m));
      }
      Store16<T>(y, b * c + ch, m, hw > 0 ? _mm512_div_ps(sum, count) : _mm512_setzero_ps());
    }
  }
}

}  // namespace

void MaxPoolNhwc(DataType dtype, const void* x, void* y, const PoolWindow2d& w) {
  switch (dtype) {
    case DataType::kF16:
      return MaxPool<DataType::kF16>(x, y, w);
    case DataType::kBF16:
      return MaxPool<DataType::kBF16>(x, y, w);
    default:
      return MaxPool<DataType::kF32>(x, y, w);
  }
}

void AveragePoolNhwc(DataType dtype, const void* x, void* y, const PoolWindow2d& w,
                     bool count_include_pad) {
  switch (dtype) {
    case DataType::kF16:
      return AveragePool<DataType::kF16>(x, y, w, count_include_pad);
    case DataType::kBF16:
      return AveragePool<DataType::kBF16>(x, y, w, count_include_pad);
    default:
      return AveragePool<DataType::kF32>(x, y, w, count_include_pad);
  }
}

void GlobalAveragePoolNhwc(DataType dtype, const void* x, void* y, int64_t n, int64_t hw,
                           int64_t c) {
  switch (dtype) {
    case DataType::kF16:
      return GlobalAverage<DataType::kF16>(x, y, n, hw, c);
    case DataType::kBF16:
      return GlobalAverage<DataType::kBF16>(x, y, n, hw, c);
    default:
      return GlobalAverage<DataType::kF32>(x, y, n, hw, c);
  }
}

}  // namespace kiln::kernels::cpu::avx512
