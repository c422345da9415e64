// The AVX-512 convolution chain (conv_chain.h). Compiled with AVX-512 flags; runs only after the
// registry has checked the CPU.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "engine/kernels/cpu/avx512/conv_chain.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

int64_t Pad16(int64_t c) { return (c + 15) / 16 * 16; }

__mmask16 TailMask(int64_t c) {
  const int r = static_cast<int>(c % 16);
  return r == 0 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << r) - 1);
}

// An activation with its constants in vectors.
struct Act {
  ChainActivation::Kind kind;
  __m512 alpha, lo, hi;
  explicit Act(const ChainActivation& a)
      : kind(a.kind),
        alpha(_mm512_set1_ps(a.alpha)),
        lo(_mm512_set1_ps(a.lo)),
        hi(_mm512_set1_ps(a.hi)) {}
  // The reference formulas: Relu x < 0 ? 0 : x; LeakyRelu x < 0 ? alpha * x : x; Clip
  // r = v < lo ? lo : v, then r > hi ? hi : r. Ordered comparisons: NaN passes through.
  __m512 operator()(__m512 v) const {
    switch (kind) {
      case ChainActivation::kNone:
        return v;
      case ChainActivation::kRelu:
        return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ),
                                  _mm512_setzero_ps());
      case ChainActivation::kLeakyRelu:
        return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), alpha,
                                  v);
      case ChainActivation::kClip:
        v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), lo);
        return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), hi);
    }
    return v;
  }
};

// One register tile of a 1x1 convolution: MP pixels x NP panels of 16 outputs.
// out[p][j] = act(sum_k a[p][k] * b[k][j] + bias[j] (+ z[p][j])), k ascending; the last panel
// stores the channels of `last` only (z and out have the output's channel count as stride).
template <int MP, int NP>
void Tile(const float* a, int64_t a_ps, int64_t k, const float* b, int64_t b_ps, const float* bias,
          const float* z, float* out, int64_t out_ps, __mmask16 last, const Act& act) {
  __m512 acc[MP][NP];
  for (int i = 0; i < MP; ++i) {
    for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    __m512 bv[NP];
    for (int j = 0; j < NP; ++j) bv[j] = _mm512_loadu_ps(b + j * b_ps + kk * 16);
    for (int i = 0; i < MP; ++i) {
      const __m512 av = _mm512_set1_ps(a[i * a_ps + kk]);
      for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  for (int j = 0; j < NP; ++j) {
    const __m512 bj = _mm512_loadu_ps(bias + j * 16);
    const __mmask16 m = j == NP - 1 ? last : static_cast<__mmask16>(0xFFFF);
    for (int i = 0; i < MP; ++i) {
      __m512 v = _mm512_add_ps(acc[i][j], bj);
      if (z != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, z + i * out_ps + j * 16));
      _mm512_mask_storeu_ps(out + i * out_ps + j * 16, m, act(v));
    }
  }
}

using TileFn = void (*)(const float*, int64_t, int64_t, const float*, int64_t, const float*,
                        const float*, float*, int64_t, __mmask16, const Act&);

// Pixels per tile for NP panels: NP x MP accumulators within 24 of the 32 registers (the rest
// hold the panels' weights and a broadcast).
constexpr int kMaxPanels = 4;
constexpr int kMaxRows[kMaxPanels + 1] = {0, 16, 12, 8, 6};

template <int NP, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> TileColumn(std::index_sequence<I...>) {
  return {&Tile<static_cast<int>(I) + 1, NP>...};
}

// The tile of mp pixels (1 <= mp <= kMaxRows[np]) and np panels.
TileFn TileFor(int mp, int np) {
  static const auto t1 = TileColumn<1>(std::make_index_sequence<kMaxRows[1]>());
  static const auto t2 = TileColumn<2>(std::make_index_sequence<kMaxRows[2]>());
  static const auto t3 = TileColumn<3>(std::make_index_sequence<kMaxRows[3]>());
  static const auto t4 = TileColumn<4>(std::make_index_sequence<kMaxRows[4]>());
  switch (np) {
    case 1:
      return t1[mp - 1];
    case 2:
      return t2[mp - 1];
    case 3:
      return t3[mp - 1];
    default:
      return t4[mp - 1];
  }
}

// A 1x1 convolution of `p` pixels: out[p][n] = act(a[p][k] * W + bias (+ z)), W packed in panels
// [n/16][k][16]. Panel groups (as even as kMaxPanels allows: 9 panels as 3 + 3 + 3) outer, so a
// group's weights stay in L1 across the pixels.
void Pointwise(const float* a, int64_t a_ps, int64_t p, int64_t k, const float* w, int64_t n,
               const float* bias, const float* z, float* out, int64_t out_ps, const Act& act) {
  const int64_t panels = (n + 15) / 16;
  const int64_t groups = (panels + kMaxPanels - 1) / kMaxPanels;
  for (int64_t g = 0, j = 0; g < groups; ++g) {
    const int np = static_cast<int>((panels - j) / (groups - g));
    const __mmask16 last = j + np == panels ? TailMask(n) : static_cast<__mmask16>(0xFFFF);
    const float* b = w + j * 16 * k;
    const int rows = kMaxRows[np];
    for (int64_t i = 0; i < p; i += rows) {
      const int mp = static_cast<int>(std::min<int64_t>(rows, p - i));
      TileFor(mp, np)(a + i * a_ps, a_ps, k, b, k * 16, bias + j * 16,
                      z ? z + i * out_ps + j * 16 : nullptr, out + i * out_ps + j * 16, out_ps,
                      last, act);
    }
    j += np;
  }
}

// Depthwise geometry of one output row: the input rows of the window (nullptr in the padding).
struct DwRow {
  const float* const* rows;
  int64_t in_ps, w, c, kh, kw, sw, pl;
  const float* wt;  // [kh * kw][Pad16(c)]
  const float* bias;
};

// MP adjacent output pixels from ox whose windows lie inside the row, V channel vectors from
// cv: every tap read unchecked, each pixel's V vectors from one contiguous run.
template <int MP, int V>
void DwBlock(const DwRow& d, int64_t ox, int64_t cv, int64_t cp, __mmask16 last, float* out,
             int64_t out_ps, const Act& act) {
  __m512 acc[MP][V];
  for (int i = 0; i < MP; ++i) {
    for (int v = 0; v < V; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  const int64_t step = d.sw * d.in_ps;
  const float* wt = d.wt + cv;
  for (int64_t r = 0; r < d.kh; ++r, wt += d.kw * cp) {
    const float* row = d.rows[r];
    if (row == nullptr) continue;
    const float* in = row + (ox * d.sw - d.pl) * d.in_ps + cv;
    for (int64_t t = 0; t < d.kw; ++t, in += d.in_ps) {
      __m512 wv[V];
      for (int v = 0; v < V; ++v) wv[v] = _mm512_loadu_ps(wt + t * cp + 16 * v);
      for (int i = 0; i < MP; ++i) {
        for (int v = 0; v < V; ++v) {
          const __m512 x = v == V - 1 ? _mm512_maskz_loadu_ps(last, in + i * step + 16 * v)
                                      : _mm512_loadu_ps(in + i * step + 16 * v);
          acc[i][v] = _mm512_fmadd_ps(x, wv[v], acc[i][v]);
        }
      }
    }
  }
  for (int v = 0; v < V; ++v) {
    const __m512 bv = _mm512_loadu_ps(d.bias + cv + 16 * v);
    for (int i = 0; i < MP; ++i) {
      _mm512_storeu_ps(out + (ox + i) * out_ps + cv + 16 * v, act(_mm512_add_ps(acc[i][v], bv)));
    }
  }
}

// MP adjacent interior output pixels from ox, two channel vectors at a time.
template <int MP>
void DwInterior(const DwRow& d, int64_t ox, float* out, int64_t out_ps, const Act& act) {
  const int64_t cp = Pad16(d.c);
  const __mmask16 full = 0xFFFF;
  int64_t cv = 0;
  for (; cv + 32 <= cp; cv += 32) {
    DwBlock<MP, 2>(d, ox, cv, cp, cv + 32 > d.c ? TailMask(d.c) : full, out, out_ps, act);
  }
  if (cv < cp) DwBlock<MP, 1>(d, ox, cv, cp, TailMask(d.c), out, out_ps, act);
}

// One output pixel whose window crosses the row's ends: taps outside read as zero (skipped).
// Up to kDwBorderVectors channel vectors at once, so the sums of one pixel do not wait on each
// other's latency.
constexpr int kDwBorderVectors = 8;

void DwBorder(const DwRow& d, int64_t ox, float* out, int64_t out_ps, const Act& act) {
  const int64_t cp = Pad16(d.c);
  const __mmask16 tail = TailMask(d.c);
  for (int64_t c0 = 0; c0 < cp; c0 += 16 * kDwBorderVectors) {
    const int nv = static_cast<int>(std::min<int64_t>(kDwBorderVectors, (cp - c0) / 16));
    __m512 acc[kDwBorderVectors];
    for (int j = 0; j < kDwBorderVectors; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t r = 0; r < d.kh; ++r) {
      const float* row = d.rows[r];
      if (row == nullptr) continue;
      for (int64_t t = 0; t < d.kw; ++t) {
        const int64_t ix = ox * d.sw - d.pl + t;
        if (ix < 0 || ix >= d.w) continue;
        const float* in = row + ix * d.in_ps + c0;
        const float* wt = d.wt + (r * d.kw + t) * cp + c0;
        for (int j = 0; j < nv; ++j) {
          const __mmask16 m = c0 + 16 * j + 16 > d.c ? tail : static_cast<__mmask16>(0xFFFF);
          acc[j] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, in + 16 * j),
                                   _mm512_loadu_ps(wt + 16 * j), acc[j]);
        }
      }
    }
    for (int j = 0; j < nv; ++j) {
      const __m512 bv = _mm512_loadu_ps(d.bias + c0 + 16 * j);
      _mm512_storeu_ps(out + ox * out_ps + c0 + 16 * j, act(_mm512_add_ps(acc[j], bv)));
    }
  }
}

constexpr int kDwPixels = 4;  // 4 x 2 accumulators cover the FMA latency on both ports

using DwFn = void (*)(const DwRow&, int64_t, float*, int64_t, const Act&);

template <size_t... I>
constexpr std::array<DwFn, sizeof...(I)> DwTiles(std::index_sequence<I...>) {
  return {&DwInterior<static_cast<int>(I) + 1>...};
}

void DepthwiseRow(const DwRow& d, int64_t ow, float* out, int64_t out_ps, const Act& act) {
  static const auto tiles = DwTiles(std::make_index_sequence<kDwPixels>());
  // Interior: ox * sw - pl >= 0 and ox * sw - pl + kw <= w.
  int64_t x0 = 0, x1 = ow;
  while (x0 < ow && x0 * d.sw - d.pl < 0) ++x0;
  while (x1 > x0 && (x1 - 1) * d.sw - d.pl + d.kw > d.w) --x1;
  for (int64_t ox = 0; ox < x0; ++ox) DwBorder(d, ox, out, out_ps, act);
  for (int64_t ox = x0; ox < x1; ox += kDwPixels) {
    tiles[std::min<int64_t>(kDwPixels, x1 - ox) - 1](d, ox, out, out_ps, act);
  }
  for (int64_t ox = std::max(x1, x0); ox < ow; ++ox) DwBorder(d, ox, out, out_ps, act);
}

// Output rows per band and E rows in the ring: a band's E rows ((band - 1) * sh + kh, the ring)
// and its D rows within kBandBytes, so both stay in L2 between the three steps; at least one
// output row.
constexpr int64_t kBandBytes = int64_t{384} << 10;

struct Band {
  int64_t rows, ring;
};

Band BandOf(const ConvChainArgs& a) {
  const int64_t cp = Pad16(a.c1);
  const bool expand = a.w0 != nullptr;
  Band b{1, a.kh};
  for (int64_t rows = 2; rows <= a.oh; ++rows) {
    const int64_t ring = (rows - 1) * a.sh + a.kh;
    const int64_t bytes = ((expand ? ring * a.w : 0) + rows * a.ow) * cp * 4;
    if (bytes > kBandBytes) break;
    b = {rows, ring};
  }
  return b;
}

}  // namespace

int64_t ConvChainScratchFloats(const ConvChainArgs& a) {
  const int64_t cp = Pad16(a.c1);
  const Band band = BandOf(a);
  const int64_t ring = a.w0 != nullptr ? band.ring * a.w * cp : 0;
  return ring + band.rows * a.ow * cp;  // both multiples of 16
}

void ConvChainAvx512(const ConvChainArgs& a) {
  const int64_t total = a.n * a.oh;
  const int64_t cp = Pad16(a.c1);
  const bool expand = a.w0 != nullptr;
  const Band band = BandOf(a);
  const int64_t per_thread = ConvChainScratchFloats(a);
  const Act act0(a.act0), act1(a.act1), act2(a.act2);
#pragma omp parallel num_threads(a.threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t q0 = total * t / nt, q1 = total * (t + 1) / nt;
    float* ring = a.scratch + t * per_thread;
    float* dband = ring + (expand ? band.ring * a.w * cp : 0);
    const float* rows[16];  // kh <= 16 (the kernel class checks)
    int64_t image = -1, next = 0;
    for (int64_t q = q0; q < q1;) {
      // A band of output rows [oy0, oy1) of one image.
      const int64_t b = q / a.oh, oy0 = q % a.oh;
      const int64_t oy1 = std::min({oy0 + band.rows, a.oh, oy0 + (q1 - q)});
      if (b != image) {
        image = b;
        next = 0;
      }
      const float* xb = a.x + b * a.h * a.w * a.c0;
      if (expand) {
        // The E rows of the band's windows not yet computed, row iy into ring slot iy % ring:
        // one 1x1 convolution per run of slots without a wrap.
        const int64_t lo = std::max<int64_t>(oy0 * a.sh - a.pad_top, 0);
        const int64_t hi = std::min((oy1 - 1) * a.sh - a.pad_top + a.kh, a.h);
        for (int64_t iy = std::max(next, lo); iy < hi;) {
          const int64_t slot = iy % band.ring;
          const int64_t count = std::min(hi - iy, band.ring - slot);
          Pointwise(xb + iy * a.w * a.c0, a.c0, count * a.w, a.c0, a.w0, a.c1, a.b0, nullptr,
                    ring + slot * a.w * cp, cp, act0);
          iy += count;
        }
        next = std::max(next, hi);
      }
      for (int64_t oy = oy0; oy < oy1; ++oy) {
        for (int64_t r = 0; r < a.kh; ++r) {
          const int64_t iy = oy * a.sh - a.pad_top + r;
          rows[r] = iy < 0 || iy >= a.h ? nullptr
                    : expand            ? ring + (iy % band.ring) * a.w * cp
                                        : xb + iy * a.w * a.c0;
        }
        const DwRow d{rows, expand ? cp : a.c0, a.w,  a.c1, a.kh, a.kw,
                      a.sw, a.pad_left,         a.w1, a.b1};
        DepthwiseRow(d, a.ow, dband + (oy - oy0) * a.ow * cp, cp, act1);
      }
      // The band's projection: its Y rows are consecutive.
      const int64_t yo = (b * a.oh + oy0) * a.ow * a.c2;
      Pointwise(dband, cp, (oy1 - oy0) * a.ow, a.c1, a.w2, a.c2, a.b2, a.z ? a.z + yo : nullptr,
                a.y + yo, a.c2, act2);
      q += oy1 - oy0;
    }
  }
}

}  // namespace kiln::kernels::cpu::avx512
