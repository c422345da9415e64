// The depthwise step of the AVX-512 convolution chain (conv_chain.h, conv_chain_inl.h): the
// register tiles of 3 x 3 and 5 x 5 windows, the pixel of any window, DepthwisePixels over an
// image's pixels and channel blocks, and WidenPixels (16-bit X to fp32). Compiled with AVX-512
// flags; runs only after the registry has checked the CPU.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "engine/kernels/cpu/avx512/conv_chain_inl.h"

namespace kiln::kernels::cpu::avx512::conv_chain {
namespace {

// MP adjacent output pixels from ox of one output row (stored from `out` on, out_ps floats
// apart), V channel vectors from cv (the last one masked by `last`), a KW x KW window at stride
// SW. Each input column under the tile is loaded once and feeds every pixel whose window covers
// it; a row's KW x V weights stay in registers. The window's rows unrolled (a known count): the
// tile ran ~10% faster so than looping over a runtime height.
// CHECK: skip the columns outside [0, w) (pixels whose window crosses the row's ends); without
// it every column is inside. Each sum runs from the bias over the window in (row, column) order.
template <int MP, int V, int SW, int KW, bool CHECK>
void DwTile(const float* const* rows, const DwGeom& g, int64_t ps, int64_t ox, int64_t cv,
            __mmask16 last, Out out, int64_t out_ps, const Act& act) {
  constexpr int kCols = (MP - 1) * SW + KW;
  const int64_t cp = Pad16(g.c);
  const int64_t ix0 = ox * SW - g.pad_left;
  __m512 acc[MP][V];
#pragma GCC unroll 2
  for (int v = 0; v < V; ++v) {
    const __m512 bv = _mm512_loadu_ps(g.bias + cv + 16 * v);
#pragma GCC unroll 8
    for (int i = 0; i < MP; ++i) acc[i][v] = bv;
  }
#pragma GCC unroll 5
  for (int r = 0; r < KW; ++r) {
    const float* row = rows[r];
    if (row == nullptr) continue;
    const float* wr = g.wt + r * KW * cp + cv;
    __m512 wv[KW][V];
#pragma GCC unroll 8
    for (int t = 0; t < KW; ++t) {
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) wv[t][v] = _mm512_loadu_ps(wr + t * cp + 16 * v);
    }
#pragma GCC unroll 32
    for (int j = 0; j < kCols; ++j) {
      if (CHECK && (ix0 + j < 0 || ix0 + j >= g.w)) continue;
      const float* in = row + (ix0 + j) * ps + cv;
      __m512 xv[V];
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) {
        xv[v] = v == V - 1 && last != 0xFFFF ? _mm512_maskz_loadu_ps(last, in + 16 * v)
                                             : _mm512_loadu_ps(in + 16 * v);
      }
#pragma GCC unroll 8
      for (int i = 0; i < MP; ++i) {
        const int t = j - i * SW;
        if (t < 0 || t >= KW) continue;
#pragma GCC unroll 2
        for (int v = 0; v < V; ++v) acc[i][v] = _mm512_fmadd_ps(xv[v], wv[t][v], acc[i][v]);
      }
    }
  }
  StoreActivated(acc, nullptr, out.At(cv), out_ps, last, act);
}

using DwTileFn = void (*)(const float* const*, const DwGeom&, int64_t, int64_t, int64_t, __mmask16,
                          Out, int64_t, const Act&);

// Pixels per interior tile: 8 x 2 accumulators, 2 x KW weights and 2 columns in registers.
constexpr int kDwPixels = 8;

// The tiles of one (V, SW, KW) of 1 .. kDwPixels pixels: inside the row, and crossing its ends.
struct DwTiles {
  std::array<DwTileFn, kDwPixels> interior, border;
};

template <int V, int SW, int KW, size_t... I>
constexpr DwTiles MakeDwTiles(std::index_sequence<I...>) {
  return {{&DwTile<static_cast<int>(I) + 1, V, SW, KW, false>...},
          {&DwTile<static_cast<int>(I) + 1, V, SW, KW, true>...}};
}

template <int V, int SW, int KW>
constexpr DwTiles DwTilesOf() {
  return MakeDwTiles<V, SW, KW>(std::make_index_sequence<kDwPixels>());
}

// The tiles for kh x kw windows at stride sw (3 x 3 or 5 x 5, stride 1 or 2), V channel vectors;
// nullptr for other windows (DwPixel computes those).
const DwTiles* FastDwTiles(int64_t kh, int64_t kw, int64_t sw, int v) {
  static const DwTiles tiles[2][2][2] = {
      {{DwTilesOf<1, 1, 3>(), DwTilesOf<2, 1, 3>()}, {DwTilesOf<1, 2, 3>(), DwTilesOf<2, 2, 3>()}},
      {{DwTilesOf<1, 1, 5>(), DwTilesOf<2, 1, 5>()}, {DwTilesOf<1, 2, 5>(), DwTilesOf<2, 2, 5>()}},
  };
  if (kh != kw || (kw != 3 && kw != 5) || (sw != 1 && sw != 2)) return nullptr;
  return &tiles[kw == 5][sw - 1][v - 1];
}

// One output pixel of any window and stride (stored at `out`), nv (1 or 2) channel vectors from
// cv.
void DwPixel(const float* const* rows, const DwGeom& g, int64_t ps, int64_t ox, int64_t cv, int nv,
             __mmask16 last, Out out, const Act& act) {
  const int64_t cp = Pad16(g.c);
  __m512 acc[2] = {_mm512_loadu_ps(g.bias + cv), _mm512_setzero_ps()};
  if (nv == 2) acc[1] = _mm512_loadu_ps(g.bias + cv + 16);
  for (int64_t r = 0; r < g.kh; ++r) {
    if (rows[r] == nullptr) continue;
    for (int64_t t = 0; t < g.kw; ++t) {
      const int64_t ix = ox * g.sw - g.pad_left + t;
      if (ix < 0 || ix >= g.w) continue;
      const float* in = rows[r] + ix * ps + cv;
      const float* wt = g.wt + (r * g.kw + t) * cp + cv;
      for (int v = 0; v < nv; ++v) {
        const __mmask16 m = v == nv - 1 ? last : static_cast<__mmask16>(0xFFFF);
        acc[v] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, in + 16 * v),
                                 _mm512_loadu_ps(wt + 16 * v), acc[v]);
      }
    }
  }
  for (int v = 0; v < nv; ++v) {
    const __mmask16 m = v == nv - 1 ? last : static_cast<__mmask16>(0xFFFF);
    StoreVector(out.At(cv + 16 * v), m, act(acc[v]));
  }
}

// An input image of more bytes than this is streamed from memory rather than found in the caches.
constexpr int64_t kStreamBytes = int64_t{4} << 20;

}  // namespace

// The depthwise outputs of image pixels [q0, q1) (row-major, oy * ow + ox) into `out` (pixel q
// at (q - q0) * out_ps; out_ps floats per pixel; channels past c are not stored). Channel blocks
// of two vectors outermost, so a block's input rows stay in L1 from one output row to the next.
// `cv0`, `cv1`: the channels [cv0, min(cv1, c)) only (multiples of 32; cv1 < 0: to the end).
void DepthwisePixels(const DwSource& s, const DwGeom& g, int64_t q0, int64_t q1, Out out,
                     int64_t out_ps, const Act& act, int64_t cv0, int64_t cv1) {
  const int64_t cp = Pad16(g.c);
  const int64_t cv_end = cv1 < 0 ? cp : std::min(cv1, cp);
  const float* rows[16];  // kh <= 16 (the kernel class checks)
  // Reading a large X in place (no expansion before it; an image of more than kStreamBytes):
  // the tiles ask for their columns of the row the next output row reads first, as they go. X
  // is the previous kernel's output, long out of L2, and its loads waited on memory: YuNet's
  // 160 x 160 x 64 depthwise convolution (6.5 MB) 0.30-0.46 -> 0.29-0.31 ms on one thread
  // (alternating runs; a T1 hint did no better). A 1.6 MB X (MobileNetV2's 112 x 112 x 32)
  // still came from the caches, and there the prefetches cost 5%.
  const bool stream = s.ring == 0 && s.h * s.w * s.ps * 4 > kStreamBytes;
  for (int64_t cv = cv0; cv < cv_end; cv += 32) {
    const int nv = cp - cv >= 32 ? 2 : 1;
    const __mmask16 last = cv + 16 * nv >= cp ? TailMask(g.c) : static_cast<__mmask16>(0xFFFF);
    const DwTiles* fast = FastDwTiles(g.kh, g.kw, g.sw, nv);
    for (int64_t oy = q0 / g.ow; oy * g.ow < q1; ++oy) {
      for (int64_t r = 0; r < g.kh; ++r) rows[r] = s.Row(oy * g.sh - g.pad_top + r);
      const int64_t xb = std::max<int64_t>(q0 - oy * g.ow, 0);
      const int64_t xe = std::min<int64_t>(q1 - oy * g.ow, g.ow);
      const Out o = out.At((oy * g.ow - q0) * out_ps);  // pixel (oy, 0); written from xb on
      if (fast == nullptr) {
        for (int64_t ox = xb; ox < xe; ++ox) {
          DwPixel(rows, g, s.ps, ox, cv, nv, last, o.At(ox * out_ps), act);
        }
        continue;
      }
      const float* next_row = stream ? s.Row((oy + 1) * g.sh - g.pad_top + g.kh - 1) : nullptr;
      for (int64_t ox = xb; ox < xe; ox += kDwPixels) {
        const int64_t mp = std::min<int64_t>(kDwPixels, xe - ox);
        // The tile's input columns, [ox * sw - pad_left, (ox + mp - 1) * sw - pad_left + kw).
        const int64_t c0 = ox * g.sw - g.pad_left, c1 = (ox + mp - 1) * g.sw - g.pad_left + g.kw;
        if (next_row != nullptr) {
          // Each column once: the tile's first mp * sw (the next tile reads the rest).
          for (int64_t ix = std::max<int64_t>(c0, 0); ix < std::min(c0 + mp * g.sw, g.w); ++ix) {
            const char* p = reinterpret_cast<const char*>(next_row + ix * s.ps + cv);
            for (int v = 0; v < nv; ++v) _mm_prefetch(p + 64 * v, _MM_HINT_T0);
          }
        }
        const auto& tiles = c0 < 0 || c1 > g.w ? fast->border : fast->interior;
        tiles[mp - 1](rows, g, s.ps, ox, cv, last, o.At(ox * out_ps), out_ps, act);
      }
    }
  }
}

// Pixels of fp16 (bf16) X (c channels each) widened to fp32 at `out`, out_ps floats per pixel
// (exact).
void WidenPixels(const uint16_t* x, bool bf16, int64_t pixels, int64_t c, float* out,
                 int64_t out_ps) {
  for (int64_t p = 0; p < pixels; ++p) {
    for (int64_t ch = 0; ch < c; ch += 16) {
      const __mmask16 m = LaneMask(c - ch);
      // Full vectors unmasked (a masked store of all lanes costs more on Zen 5).
      if (m == 0xFFFF) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + p * c + ch));
        _mm512_storeu_ps(out + p * out_ps + ch, bf16 ? Bf16ToFloat16(raw) : HalfToFloat16(raw));
        continue;
      }
      const __m256i raw = _mm256_maskz_loadu_epi16(m, x + p * c + ch);
      _mm512_mask_storeu_ps(out + p * out_ps + ch, m,
                            bf16 ? Bf16ToFloat16(raw) : HalfToFloat16(raw));
    }
  }
}

}  // namespace kiln::kernels::cpu::avx512::conv_chain
