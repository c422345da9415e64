// The channels-first pools of pool_nchw.h. Windowed pools: each output row (a plane and the
// output coordinates of every axis but the last) visits the valid input rows of its window in
// the reference's odometer order and, for each, the taps of the last axis, 16 output positions
// at a time: every lane adds (or compares) exactly the cells the reference visits, in its order.
// Global pools: 16 planes at a time, one element of each per step, in plane order; a
// GlobalMaxPool of long planes one plane at a time (GlobalMaxLong).
#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "engine/kernels/cpu/avx512/pool_nchw.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// 16 elements of a `T` row at int32 offsets idx (lanes of m), as fp32.
template <DataType T>
inline __m512 Gather16(const void* row, __m512i idx, __mmask16 m) {
  if constexpr (T == DataType::kF32) {
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, row, 4);
  } else {
    // No 16-bit gather: the lanes' elements are read one by one (a 32-bit gather could read
    // two bytes past the end of X).
    alignas(64) int32_t off[16];
    alignas(64) uint16_t v[16] = {};
    _mm512_store_si512(off, idx);
    const uint16_t* p = static_cast<const uint16_t*>(row);
    for (int l = 0; l < 16; ++l) {
      if (m & (1u << l)) v[l] = p[off[l]];
    }
    const __m256i raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(v));
    return T == DataType::kF16 ? HalfToFloat16(raw) : Bf16ToFloat16(raw);
  }
}

template <DataType T>
void Windowed(const PoolNchwArgs& a) {
  const int nd = static_cast<int>(a.in.size());
  const int last = nd - 1;
  // Per axis and output coordinate: the input coordinates inside X and the padded count.
  std::vector<std::vector<std::vector<int64_t>>> valid(nd);
  std::vector<std::vector<int64_t>> padded(nd);
  for (int d = 0; d < nd; ++d) {
    valid[d].resize(a.out[d]);
    padded[d].assign(a.out[d], 0);
    for (int64_t o = 0; o < a.out[d]; ++o) {
      const int64_t start = o * a.strides[d] - a.pad_begin[d];
      for (int64_t k = 0; k < a.kernel[d]; ++k) {
        const int64_t i = start + k * a.dilations[d];
        if (i >= 0 && i < a.in[d]) valid[d][o].push_back(i);
        if (i >= -a.pad_begin[d] && i < a.in[d] + a.pad_end[d]) ++padded[d][o];
      }
    }
  }
  const int64_t in_last = a.in[last], out_last = a.out[last];
  const int64_t sw = a.strides[last], dw = a.dilations[last], pw = a.pad_begin[last];
  const int64_t kw = a.kernel[last];
  int64_t in_sp = 1, out_sp = 1, outer_rows = 1;
  for (int d = 0; d < nd; ++d) {
    in_sp *= a.in[d];
    out_sp *= a.out[d];
    if (d < last) outer_rows *= a.out[d];
  }
  const int64_t rows = a.planes * outer_rows;
  std::vector<int64_t> row_stride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) row_stride[d] = row_stride[d + 1] * a.in[d + 1];
  const __m512 lowest = _mm512_set1_ps(std::numeric_limits<float>::lowest());
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  ParallelFor(rows, rows * out_last >= 4096, [&](int64_t r_begin, int64_t r_end) {
    std::vector<int64_t> offs;
    std::vector<int64_t> o(std::max(nd - 1, 0)), kpos(std::max(nd - 1, 0));
    std::vector<float> divisor(out_last);
    for (int64_t r = r_begin; r < r_end; ++r) {
      const int64_t plane = r / outer_rows;
      int64_t rest = r % outer_rows;
      for (int d = last - 1; d >= 0; --d) {
        o[d] = rest % a.out[d];
        rest /= a.out[d];
      }
      // The window's valid input rows in odometer order, and the counts of the outer axes.
      offs.clear();
      int64_t outer_valid = 1, outer_padded = 1;
      bool empty = false;
      for (int d = 0; d < last; ++d) {
        outer_valid *= static_cast<int64_t>(valid[d][o[d]].size());
        outer_padded *= padded[d][o[d]];
        empty |= valid[d][o[d]].empty();
      }
      std::fill(kpos.begin(), kpos.end(), 0);
      while (!empty) {
        int64_t off = 0;
        for (int d = 0; d < last; ++d) off += valid[d][o[d]][kpos[d]] * row_stride[d];
        offs.push_back(off);
        int d = last - 1;
        for (; d >= 0; --d) {
          if (++kpos[d] < static_cast<int64_t>(valid[d][o[d]].size())) break;
          kpos[d] = 0;
        }
        if (d < 0) break;
      }
      if (a.average) {
        for (int64_t x = 0; x < out_last; ++x) {
          const int64_t count = a.count_include_pad
                                    ? outer_padded * padded[last][x]
                                    : outer_valid * static_cast<int64_t>(valid[last][x].size());
          divisor[x] = static_cast<float>(count);
        }
      }
      const char* xplane = static_cast<const char*>(a.x) +
                           plane * in_sp * static_cast<int64_t>(DataTypeSize(a.dtype));
      const int64_t y0 = (plane * outer_rows + r % outer_rows) * out_last;
      for (int64_t x0 = 0; x0 < out_last; x0 += 16) {
        const __mmask16 m = LaneMask(out_last - x0);
        const __m512i start = _mm512_sub_epi32(
            _mm512_mullo_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(x0))),
                               _mm512_set1_epi32(static_cast<int>(sw))),
            _mm512_set1_epi32(static_cast<int>(pw)));
        __m512 acc = a.average ? _mm512_setzero_ps() : lowest;
        for (int64_t off : offs) {
          const void* row = xplane + off * static_cast<int64_t>(DataTypeSize(a.dtype));
          for (int64_t k = 0; k < kw; ++k) {
            const __m512i ix = _mm512_add_epi32(start, _mm512_set1_epi32(static_cast<int>(k * dw)));
            const __mmask16 in =
                m & _mm512_cmpge_epi32_mask(ix, _mm512_setzero_si512()) &
                _mm512_cmplt_epi32_mask(ix, _mm512_set1_epi32(static_cast<int>(in_last)));
            if (in == 0) continue;
            __m512 v;
            if (sw == 1) {
              v = Load16<T>(row, x0 - pw + k * dw, in);
            } else {
              v = Gather16<T>(row, ix, in);
            }
            if (a.average) {
              acc = _mm512_mask_add_ps(acc, in, acc, v);
            } else {
              acc = _mm512_mask_mov_ps(acc, in & _mm512_cmp_ps_mask(v, acc, _CMP_GT_OQ), v);
            }
          }
        }
        if (a.average) {
          const __m512 div = _mm512_maskz_loadu_ps(m, divisor.data() + x0);
          const __mmask16 nz = _mm512_cmp_ps_mask(div, _mm512_setzero_ps(), _CMP_NEQ_OQ);
          acc = _mm512_maskz_div_ps(nz, acc, div);
        }
        Store16<T>(a.y, y0 + x0, m, acc);
      }
    }
  });
}

template <DataType T>
void Global(const void* x, void* y, int64_t planes, int64_t size, bool average) {
  const int64_t blocks = (planes + 15) / 16;
  const __m512i lane =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(size)));
  const __m512 count = _mm512_set1_ps(static_cast<float>(size));
  ParallelFor(blocks, planes * size >= (1 << 16), [&](int64_t b_begin, int64_t b_end) {
    for (int64_t b = b_begin; b < b_end; ++b) {
      const __mmask16 m = LaneMask(planes - b * 16);
      const char* base = static_cast<const char*>(x) +
                         b * 16 * size * static_cast<int64_t>(T == DataType::kF32 ? 4 : 2);
      __m512 acc = average ? _mm512_setzero_ps() : Gather16<T>(base, lane, m);
      for (int64_t i = average ? 0 : 1; i < size; ++i) {
        const __m512i idx = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(i)));
        const __m512 v = Gather16<T>(base, idx, m);
        if (average) {
          acc = _mm512_add_ps(acc, v);
        } else {
          acc = _mm512_mask_mov_ps(acc, _mm512_cmp_ps_mask(acc, v, _CMP_LT_OQ), v);  // std::max
        }
      }
      if (average) acc = size > 0 ? _mm512_div_ps(acc, count) : _mm512_setzero_ps();
      Store16<T>(y, b * 16, m, acc);
    }
  });
}

// GlobalMaxPool of planes of at least 16 elements, one plane at a time, 16 elements per step:
// each lane keeps the running std::max (from the first element) of its share of the plane. The
// largest value is the reference's unless it is zero: equal values have equal bits but for +0
// and -0, and the reference keeps the first zero it meets; that case scans the plane for it. A
// NaN first element stays (std::max never replaces it); a later NaN never enters (an ordered
// comparison).
template <DataType T>
void GlobalMaxLong(const void* x, void* y, int64_t planes, int64_t size) {
  ParallelFor(planes, planes * size >= (1 << 16), [&](int64_t p_begin, int64_t p_end) {
    for (int64_t p = p_begin; p < p_end; ++p) {
      const int64_t base = p * size;
      const __m512 first = _mm512_broadcastss_ps(_mm512_castps512_ps128(Load16<T>(x, base, 1)));
      __m512 acc = first;
      for (int64_t i = 1; i < size; i += 16) {
        const __mmask16 m = LaneMask(size - i);
        const __m512 v = Load16<T>(x, base + i, m);
        acc = _mm512_mask_mov_ps(acc, m & _mm512_cmp_ps_mask(acc, v, _CMP_LT_OQ), v);
      }
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, acc);
      float best = lanes[0];
      for (int l = 1; l < 16; ++l) best = best < lanes[l] ? lanes[l] : best;
      if (best == 0.0f) {  // the first zero of the plane, with its sign
        for (int64_t i = 0; i < size; i += 16) {
          const __mmask16 m = LaneMask(size - i);
          const __mmask16 zero = _mm512_mask_cmp_ps_mask(m, Load16<T>(x, base + i, m),
                                                         _mm512_setzero_ps(), _CMP_EQ_OQ);
          if (zero != 0) {
            best = _mm512_cvtss_f32(_mm512_maskz_compress_ps(zero, Load16<T>(x, base + i, m)));
            break;
          }
        }
      }
      Store16<T>(y, p, 1, _mm512_set1_ps(best));
    }
  });
}

}  // namespace

void PoolNchw(const PoolNchwArgs& a) {
  if (a.planes == 0 || a.in.empty()) return;
  switch (a.dtype) {
    case DataType::kF16:
      return Windowed<DataType::kF16>(a);
    case DataType::kBF16:
      return Windowed<DataType::kBF16>(a);
    default:
      return Windowed<DataType::kF32>(a);
  }
}

void GlobalPoolNchw(DataType dtype, const void* x, void* y, int64_t planes, int64_t size,
                    bool average) {
  if (planes == 0) return;
  if (!average && size >= 32) {
    switch (dtype) {
      case DataType::kF16:
        return GlobalMaxLong<DataType::kF16>(x, y, planes, size);
      case DataType::kBF16:
        return GlobalMaxLong<DataType::kBF16>(x, y, planes, size);
      default:
        return GlobalMaxLong<DataType::kF32>(x, y, planes, size);
    }
  }
  switch (dtype) {
    case DataType::kF16:
      return Global<DataType::kF16>(x, y, planes, size, average);
    case DataType::kBF16:
      return Global<DataType::kBF16>(x, y, planes, size, average);
    default:
      return Global<DataType::kF32>(x, y, planes, size, average);
  }
}

}  // namespace kiln::kernels::cpu::avx512
