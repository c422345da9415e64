// The 1x1 steps of the AVX-512 convolution chain (conv_chain.h, conv_chain_inl.h): the register
// tiles on fp32 weights (FMA) and on bf16 pairs (vdpbf16ps), and Pointwise, which runs them over
// pixels and panel groups. Compiled with AVX-512 flags; runs only after the registry has checked
// the CPU.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "engine/kernels/cpu/avx512/conv_chain_inl.h"

namespace kiln::kernels::cpu::avx512::conv_chain {

__m512 Act::operator()(__m512 v) const {
  switch (kind) {
    case ChainActivation::kRelu:
      return Apply<ChainActivation::kRelu>(*this, v);
    case ChainActivation::kLeakyRelu:
      return Apply<ChainActivation::kLeakyRelu>(*this, v);
    case ChainActivation::kClip:
      return Apply<ChainActivation::kClip>(*this, v);
    case ChainActivation::kHardSwish:
      return Apply<ChainActivation::kHardSwish>(*this, v);
    default:
      return v;
  }
}

namespace {

// One register tile of a 1x1 convolution: MP pixels x NP panels of 16 outputs.
// out[p][j] = act(bias[j] + sum_k a[p][k] * b[k][j] (+ z[p][j])), the sum from the bias on, k
// ascending; the last panel
// stores the channels of `last` only (z and out have the output's channel count as stride).
// Meanwhile it asks for the first `pf_lines` (at most k) 64-byte lines at `pf` into L2, one per
// k step: a share of the weights the next tiles read.
template <int MP, int NP>
void Tile(const void* a_in, int64_t a_ps, int64_t k, const void* b_in, int64_t b_ps,
          const float* bias, const void* z, Out out, int64_t out_ps, __mmask16 last, const Act& act,
          const char* pf, int64_t pf_lines) {
  const float* a = static_cast<const float*>(a_in);
  const float* b = static_cast<const float*>(b_in);
  __m512 acc[MP][NP];
#pragma GCC unroll 4
  for (int j = 0; j < NP; ++j) {
    const __m512 bj = _mm512_loadu_ps(bias + j * 16);
#pragma GCC unroll 16
    for (int i = 0; i < MP; ++i) acc[i][j] = bj;
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    if (kk < pf_lines) _mm_prefetch(pf + kk * 64, _MM_HINT_T1);
    __m512 bv[NP];
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) bv[j] = _mm512_loadu_ps(b + j * b_ps + kk * 16);
#pragma GCC unroll 16
    for (int i = 0; i < MP; ++i) {
      const __m512 av = _mm512_set1_ps(a[i * a_ps + kk]);
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  StoreActivated(acc, z, out, out_ps, last, act);
}

// The 32 bits of bf16 A's elements k and k + 1, broadcast straight from memory (vbroadcastss:
// a load, where a broadcast from a general register takes two shuffle-port operations, which
// on the AMX Xeon left the tile waiting on that port).
inline __m512bh PairOf(const uint16_t* a, int64_t k) {
  float v;
  __builtin_memcpy(&v, a + k, 4);
  return reinterpret_cast<__m512bh>(_mm512_set1_ps(v));
}

// Tile on bf16 A (a bf16 chain's X or D) and bf16 weights in pairs, [panel][ceil(k/2)][16][2]
// (b_ps uint16 per panel), with vdpbf16ps: each instruction adds to a lane's fp32 sum the two
// products of a pair, each exact in fp32 (8-bit significands), with one rounding per addition
// (the odd element's product first), as an FMA on the widened values would add them: the sum
// is the fp32 path's sum of the same exact products in another order (k + 1 before k). Its
// inputs below fp32's normal range count as zero and so do its sums (DAZ, FTZ): differences
// under 2^-126 per addition, far below bf16's own rounding of the result (2^-9 of it).
template <int MP, int NP>
void TileDot(const void* a_in, int64_t a_ps, int64_t k, const void* b_in, int64_t b_ps,
             const float* bias, const void* z, Out out, int64_t out_ps, __mmask16 last,
             const Act& act, const char* pf, int64_t pf_lines) {
  const uint16_t* a = static_cast<const uint16_t*>(a_in);
  const uint16_t* b = static_cast<const uint16_t*>(b_in);
  __m512 acc[MP][NP];
#pragma GCC unroll 4
  for (int j = 0; j < NP; ++j) {
    const __m512 bj = _mm512_loadu_ps(bias + j * 16);
#pragma GCC unroll 16
    for (int i = 0; i < MP; ++i) acc[i][j] = bj;
  }
  const int64_t pairs = k / 2;  // whole pairs; an odd k's last element after the loop
  for (int64_t kk = 0; kk < pairs; ++kk) {
    if (kk < pf_lines) _mm_prefetch(pf + kk * 64, _MM_HINT_T1);
    __m512bh bv[NP];
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) {
      bv[j] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + j * b_ps + kk * 32));
    }
#pragma GCC unroll 16
    for (int i = 0; i < MP; ++i) {
      const __m512bh av = PairOf(a + i * a_ps, 2 * kk);
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
    }
  }
  if (k % 2 != 0) {
    // Element k - 1 with a zero above it (its weights' pair is zero padded too): the element
    // after A's row is not read, so a NaN there cannot reach the sum as NaN * 0.
    __m512bh bv[NP];
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) {
      bv[j] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + j * b_ps + pairs * 32));
    }
#pragma GCC unroll 16
    for (int i = 0; i < MP; ++i) {
      const __m512bh av =
          reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[i * a_ps + k - 1])));
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
    }
  }
  StoreActivated(acc, z, out, out_ps, last, act);
}

using TileFn = void (*)(const void*, int64_t, int64_t, const void*, int64_t, const float*,
                        const void*, Out, int64_t, __mmask16, const Act&, const char*, int64_t);

// Pixels per tile for NP panels: NP x MP accumulators within 28 of the 32 registers (the rest
// hold the panels' weights and a broadcast; 7 x 4 leaves one accumulator on the stack). One
// panel takes 12 pixels, not 16: GCC gives each pixel's row of A a pointer register of its own,
// and with 16 it parked six of them in vector registers (six vmovq a k step); 12 ran a 112 x 112
// projection from 32 to 16 channels 8% faster (kiln_conv_bench no_expansion, 132 -> 121 us).
constexpr int kMaxRows[kMaxPanels + 1] = {0, 12, 14, 9, 7};

// Each tile streams its panels' weights (k x np vectors) once. Four panels of weights within
// kL1Weights stay in L1 from one tile to the next, and there 6-pixel tiles (24 accumulators, all
// in registers) ran faster than 7-pixel ones (one accumulator spilled), e.g. 196 pixels from 96
// to 576 channels 4-7% faster. Weights past L1 come from L2 for every tile, and there fewer,
// taller tiles win: 49 pixels (MobileNetV2's 7 x 7) as 7 x 7 instead of 8 x 6 + 1 read them
// 7 times instead of 9, 5-10% faster from 320 to 1280 channels and from 960 to 320.
constexpr int64_t kL1Weights = int64_t{32} << 10;

// How many tiles ahead Pointwise prefetches a streamed A (2 to 16 measured alike; 4 best).
constexpr int64_t kPrefetchTiles = 4;

template <int NP, bool DOT, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> TileColumn(std::index_sequence<I...>) {
  if constexpr (DOT) {
    return {&TileDot<static_cast<int>(I) + 1, NP>...};
  } else {
    return {&Tile<static_cast<int>(I) + 1, NP>...};
  }
}

// The tile of mp pixels (1 <= mp <= kMaxRows[np]) and np panels (fp32 FMA or bf16 pairs).
template <bool DOT>
TileFn TileFor(int mp, int np) {
  static const auto t1 = TileColumn<1, DOT>(std::make_index_sequence<kMaxRows[1]>());
  static const auto t2 = TileColumn<2, DOT>(std::make_index_sequence<kMaxRows[2]>());
  static const auto t3 = TileColumn<3, DOT>(std::make_index_sequence<kMaxRows[3]>());
  static const auto t4 = TileColumn<4, DOT>(std::make_index_sequence<kMaxRows[4]>());
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

}  // namespace

// A 1x1 convolution of `p` pixels: out[p][n] = act(a[p][k] * W + bias (+ z)), W packed in panels
// [n/16][k][16]. Panel groups outer, so a group's weights stay in L1 across the pixels. `then`:
// lines the last group prefetches into L2 (the next step's first weights).
// A (a_ps elements per pixel) is fp32, or bf16 with `dot` weights.
void Pointwise(const void* a, int64_t a_ps, int64_t p, const PwWeights& w, int64_t n,
               const float* bias, const void* z, Out out, int64_t out_ps, const Act& act,
               Lines then) {
  if (p <= 0) return;  // an empty share (fewer pixels than threads)
  const int64_t k = w.k;
  const int64_t a_bytes = w.ElemBytes();  // A's elements are the weights' type
  const int64_t lines = w.PanelLines();
  const auto tile_for = w.dot ? &TileFor<true> : &TileFor<false>;
  const int64_t panels = (n + 15) / 16;
  const int64_t groups = PanelGroups(panels);
  for (int64_t g = 0, j = 0; g < groups; ++g) {
    const int np = static_cast<int>((panels - j) / (groups - g));
    const __mmask16 last = j + np == panels ? TailMask(n) : static_cast<__mmask16>(0xFFFF);
    const PwWeights b = w.From(j);
    // The fewest tiles of at most `rows` pixels, as even as can be (49 as 7 x 7): `tall` tiles
    // of mp_tall pixels, then the rest of mp_tall - 1 (so the call's target changes once).
    const int64_t rows = np == 4 && lines * np * 64 <= kL1Weights ? 6 : kMaxRows[np];
    const int64_t tiles = (p + rows - 1) / rows, mp_tall = (p + tiles - 1) / tiles;
    const int64_t tall = p - tiles * (mp_tall - 1);
    // The next group's weights (one 64-byte line per k step and panel) into L2 while this group
    // runs, in equal shares over its tiles: in the network they come from L3, and a group's
    // first tiles otherwise wait for them (MobileNetV2's 7 x 7 blocks ran 10% faster so).
    const Lines next = g + 1 < groups ? Lines{static_cast<const char*>(b.From(np).w),
                                              (panels - j - np) / (groups - g - 1) * lines}
                                      : then;
    const char* pf = next.p;
    // A contiguous A of few channels read once (the expansion of a large X, the previous
    // kernel's output, from L3): its pixels prefetched a few tiles ahead. YuNet's 320 x 320
    // expansion from 16 channels waited on its loads: its chain ran ~15% faster so.
    const bool prefetch_a = a_ps == k && g == 0 && groups == 1 && k <= 64;
    const int64_t pf_total = next.n, pf_share = (pf_total + tiles - 1) / tiles;
    for (int64_t t = 0, i = 0; t < tiles; ++t) {
      const int mp = static_cast<int>(t < tall ? mp_tall : mp_tall - 1);
      const int64_t pf_first = std::min(t * pf_share, pf_total);
      const int64_t e = i * out_ps + j * 16;
      if (prefetch_a) {
        // The pixels kPrefetchTiles tiles ahead into L1 (one line per 16 floats).
        const int64_t d0 = i + kPrefetchTiles * mp, d1 = std::min(p, d0 + mp);
        if (d0 < d1) {
          const char* q = static_cast<const char*>(a) + d0 * a_ps * a_bytes;
          const char* qe = static_cast<const char*>(a) + d1 * a_ps * a_bytes;
          for (; q < qe; q += 64) _mm_prefetch(q, _MM_HINT_T0);
        }
      }
      tile_for(mp, np)(static_cast<const char*>(a) + i * a_ps * a_bytes, a_ps, k, b.w,
                       w.PanelElems(), bias + j * 16, ZAt(z, out.st, e), out.At(e), out_ps, last,
                       act, pf + pf_first * 64, std::min({pf_share, pf_total - pf_first, lines}));
      i += mp;
    }
    j += np;
  }
}

}  // namespace kiln::kernels::cpu::avx512::conv_chain
