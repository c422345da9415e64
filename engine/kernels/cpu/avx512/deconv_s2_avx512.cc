// The non-overlapping 2x ConvTranspose of deconv_s2.h. Each output pixel pair (taps b = 0, 1) of
// 16 input columns is two fp32 accumulators; a block of MB output channels by JB vectors of 16
// input columns (12 or 8 accumulators) shares each load of X and each broadcast weight, so that
// the multiply-adds of one input channel are independent of each other and outnumber the loads
// (one output channel by 16 columns, two accumulators, waited on the multiply-add latency:
// PP-OCRv4 det's 24 -> 24 upsampling of 80 x 120 took 0.73-0.79 ms in the engine's profile on one
// core; blocks of 3 channels by 32 columns 0.26 ms alone, DeconvS2's table below). The accumulators
// are interleaved into consecutive outputs. W is packed to fp32 once per call, in the order the
// blocks read it.
#include <immintrin.h>

#include <vector>

#include "engine/kernels/cpu/avx512/deconv_s2.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// W packed for blocks of MB output channels: wp[((mb * kh + tap) * C + c) * 2 MB + 2 mi + b] =
// W[c, mb * MB + mi, tap, b], zero past M.
std::vector<float> PackW(const DeconvS2Args& a, int mb_size) {
  const int64_t blocks = (a.m + mb_size - 1) / mb_size;
  std::vector<float> wp(blocks * a.kh * a.c * mb_size * 2, 0.0f);
  for (int64_t c = 0; c < a.c; ++c) {
    for (int64_t m = 0; m < a.m; ++m) {
      for (int64_t tap = 0; tap < a.kh; ++tap) {
        for (int b = 0; b < 2; ++b) {
          const int64_t from = ((c * a.m + m) * a.kh + tap) * 2 + b;
          float v;
          if (a.dtype == DataType::kF32) {
            v = static_cast<const float*>(a.w)[from];
          } else {
            v = _mm512_cvtss_f32(a.dtype == DataType::kF16 ? Load16<DataType::kF16>(a.w, from, 1)
                                                           : Load16<DataType::kBF16>(a.w, from, 1));
          }
          const int64_t mb = m / mb_size, mi = m % mb_size;
          wp[((mb * a.kh + tap) * a.c + c) * mb_size * 2 + mi * 2 + b] = v;
        }
      }
    }
  }
  return wp;
}

template <DataType T, int MB, int JB>
void Run(const DeconvS2Args& a, const float* wp) {
  const int64_t in_plane = a.h * a.wd, oh = a.h * a.kh, ow = a.wd * 2;
  const int64_t blocks = (a.m + MB - 1) / MB;
  // Output rows in (n, i, channel block, tap) order: the rows of one input row i follow each
  // other, so its C input rows stay in L1 while every output channel and tap reads them.
  const int64_t rows = a.n * a.h * blocks * a.kh;
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  ParallelFor(
      rows, rows * ow * a.c * MB >= (int64_t{1} << 16), [&](int64_t r_begin, int64_t r_end) {
        for (int64_t r = r_begin; r < r_end; ++r) {
          const int64_t tap = r % a.kh, mb = r / a.kh % blocks, i = r / (a.kh * blocks) % a.h;
          const int64_t n = r / (a.kh * blocks * a.h);
          const int64_t m0 = mb * MB;
          const int64_t x_row = n * a.c * in_plane + i * a.wd;
          const float* wb = wp + (mb * a.kh + tap) * a.c * MB * 2;
          __m512 bias[MB];
          for (int mi = 0; mi < MB; ++mi) {
            bias[mi] = _mm512_set1_ps(a.bias != nullptr && m0 + mi < a.m ? a.bias[m0 + mi] : 0.0f);
          }
          for (int64_t j = 0; j < a.wd; j += 16 * JB) {
            __mmask16 mask[JB];
            for (int jb = 0; jb < JB; ++jb) mask[jb] = LaneMask(a.wd - j - 16 * jb);
            __m512 acc[MB][JB][2];
            for (int mi = 0; mi < MB; ++mi) {
              for (int jb = 0; jb < JB; ++jb) acc[mi][jb][0] = acc[mi][jb][1] = bias[mi];
            }
            for (int64_t c = 0; c < a.c; ++c) {
              __m512 v[JB];
              for (int jb = 0; jb < JB; ++jb) {
                v[jb] = Load16<T>(a.x, x_row + c * in_plane + j + 16 * jb, mask[jb]);
              }
              const float* wc = wb + c * MB * 2;
              for (int mi = 0; mi < MB; ++mi) {
                const __m512 w0 = _mm512_set1_ps(wc[mi * 2]), w1 = _mm512_set1_ps(wc[mi * 2 + 1]);
                for (int jb = 0; jb < JB; ++jb) {
                  acc[mi][jb][0] = _mm512_fmadd_ps(w0, v[jb], acc[mi][jb][0]);
                  acc[mi][jb][1] = _mm512_fmadd_ps(w1, v[jb], acc[mi][jb][1]);
                }
              }
            }
            for (int mi = 0; mi < MB && m0 + mi < a.m; ++mi) {
              const int64_t y_row = ((n * a.m + m0 + mi) * oh + i * a.kh + tap) * ow;
              for (int jb = 0; jb < JB; ++jb) {
                const int64_t col = j + 16 * jb;
                if (col >= a.wd) break;
                // Output columns 2 col + b: (acc0[0], acc1[0], acc0[1], acc1[1], ...).
                const __m512 first = _mm512_permutex2var_ps(acc[mi][jb][0], lo, acc[mi][jb][1]);
                const __m512 second = _mm512_permutex2var_ps(acc[mi][jb][0], hi, acc[mi][jb][1]);
                const int64_t left = 2 * (a.wd - col);
                Store16<T>(a.y, y_row + 2 * col, LaneMask(left), first);
                Store16<T>(a.y, y_row + 2 * col + 16, LaneMask(left - 16), second);
              }
            }
          }
        }
      });
}

template <int MB, int JB>
void RunBlocked(const DeconvS2Args& a) {
  const std::vector<float> wp = PackW(a, MB);
  switch (a.dtype) {
    case DataType::kF16:
      return Run<DataType::kF16, MB, JB>(a, wp.data());
    case DataType::kBF16:
      return Run<DataType::kBF16, MB, JB>(a, wp.data());
    default:
      return Run<DataType::kF32, MB, JB>(a, wp.data());
  }
}

}  // namespace

void DeconvS2(const DeconvS2Args& a) {
  // Blocks measured on PP-OCRv4 det's 24 -> 24 upsampling of 80 x 120 (one core): 3 x 2 0.26 ms,
  // 2 x 3 0.28, 2 x 2 0.29, 1 x 4 0.38, 4 x 1 0.56; 16 accumulators (4 x 2, 2 x 4) 0.65-0.8, the
  // compiler no longer keeping them in registers. Its 24 -> 1 one of 160 x 240: 1 x 4 0.063 ms.
  if (a.m == 1) return RunBlocked<1, 4>(a);
  if (a.m % 3 == 0) return RunBlocked<3, 2>(a);
  return RunBlocked<2, 2>(a);
}

}  // namespace kiln::kernels::cpu::avx512
