// The AVX-512 convolution chain (conv_chain.h). Compiled with AVX-512 flags; runs only after the
// registry has checked the CPU.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "engine/kernels/cpu/avx512/conv_chain.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

int64_t Pad16(int64_t c) { return (c + 15) / 16 * 16; }

__mmask16 TailMask(int64_t c) {
  const int r = static_cast<int>(c % 16);
  return r == 0 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << r) - 1);
}

// How a step stores its values: fp32; fp32 holding fp16 (bf16) values (an interior tensor of an
// fp16 (bf16) chain: what the member convolution would have stored, widened again); fp16 (bf16),
// Y of a 16-bit chain. Rounded as half.h rounds (round to nearest even; NaN as the reference
// keeps it).
enum class Store { kF32, kF32Half, kHalf, kF32Bf16, kBf16 };

// Bytes of one stored element.
constexpr int64_t StoreBytes(Store st) { return st == Store::kHalf || st == Store::kBf16 ? 2 : 4; }

// Where a step stores: a base address and how it stores there; At(e) is the element e further.
struct Out {
  void* p;
  Store st;
  Out At(int64_t e) const { return {static_cast<char*>(p) + e * StoreBytes(st), st}; }
};

// Element e of a residual Z of Y's type (fp16 when Y is).
const void* ZAt(const void* z, Store st, int64_t e) {
  return z == nullptr ? nullptr : static_cast<const char*>(z) + e * StoreBytes(st);
}

// The lanes m of v (16 values) at `out`. A full mask stores unmasked: on this Zen 5 a masked
// 512-bit store of all lanes cost YuNet's 320 x 320 x 16 chain (Conv_2) ~10% of its time.
inline __attribute__((always_inline)) void StoreVector(Out out, __mmask16 m, __m512 v) {
  switch (out.st) {
    case Store::kF32:
      if (m == 0xFFFF) {
        _mm512_storeu_ps(out.p, v);
      } else {
        _mm512_mask_storeu_ps(out.p, m, v);
      }
      break;
    case Store::kF32Half:
      // vcvtps2ph makes every NaN quiet (sign | 0x7e00 | payload), which vcvtph2ps widens as
      // half.h does: HalfToFloat16's repair of signalling NaN lanes is not needed here.
      if (m == 0xFFFF) {
        _mm512_storeu_ps(out.p, _mm512_cvtph_ps(FloatToHalf16(v)));
      } else {
        _mm512_mask_storeu_ps(out.p, m, _mm512_cvtph_ps(FloatToHalf16(v)));
      }
      break;
    case Store::kHalf:
      _mm256_mask_storeu_epi16(out.p, m, FloatToHalf16(v));
      break;
    case Store::kF32Bf16:
      if (m == 0xFFFF) {
        _mm512_storeu_ps(out.p, Bf16ToFloat16(FloatToBf16x16(v)));
      } else {
        _mm512_mask_storeu_ps(out.p, m, Bf16ToFloat16(FloatToBf16x16(v)));
      }
      break;
    case Store::kBf16:
      _mm256_mask_storeu_epi16(out.p, m, FloatToBf16x16(v));
      break;
  }
}

// 16 values of Z (lanes m, the others 0) as fp32, Z being of Y's type.
inline __attribute__((always_inline)) __m512 LoadZ(const void* z, Store st, __mmask16 m) {
  if (st == Store::kHalf) return HalfToFloat16(_mm256_maskz_loadu_epi16(m, z));
  if (st == Store::kBf16) return Bf16ToFloat16(_mm256_maskz_loadu_epi16(m, z));
  return _mm512_maskz_loadu_ps(m, z);
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
  __m512 operator()(__m512 v) const;
};

// The reference's MinProp(MaxProp(v, 0), 1): v > 0 or NaN keeps v, else 0 (so -0 gives +0);
// then v < 1 or NaN keeps v, else 1 (as activation_avx512.cc's).
inline __m512 Clamp01(__m512 v) {
  const __m512 one = _mm512_set1_ps(1.0f);
  v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NLE_UQ), v);
  return _mm512_mask_mov_ps(one, _mm512_cmp_ps_mask(v, one, _CMP_NGE_UQ), v);
}

// Act's formula for a kind known at compile time: the reference's Relu x < 0 ? 0 : x, LeakyRelu
// x < 0 ? alpha * x : x, Clip r = v < lo ? lo : v, then r > hi ? hi : r (NaN passes through).
// vmaxps(a, b) is a > b ? a : b and vminps(a, b) a < b ? a : b, so max(lo, v) is v < lo ? lo : v
// to the bit (NaN v gives v, -0 against 0 gives v) and min(hi, r) is r > hi ? hi : r.
// HardSwish: x * clamp(x / 6 + 0.5, 0, 1) as the reference's HardSwishOp, x / 6 divided (a
// product by 1/6 rounds differently) and each step rounded (the file has -ffp-contract=off).
template <ChainActivation::Kind K>
inline __m512 Apply(const Act& a, __m512 v) {
  if constexpr (K == ChainActivation::kRelu) {
    return _mm512_max_ps(_mm512_setzero_ps(), v);
  } else if constexpr (K == ChainActivation::kLeakyRelu) {
    return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), a.alpha,
                              v);
  } else if constexpr (K == ChainActivation::kClip) {
    return _mm512_min_ps(a.hi, _mm512_max_ps(a.lo, v));
  } else if constexpr (K == ChainActivation::kHardSwish) {
    const __m512 t = _mm512_add_ps(_mm512_div_ps(v, _mm512_set1_ps(6.0f)), _mm512_set1_ps(0.5f));
    return _mm512_mul_ps(v, Clamp01(t));
  } else {
    return v;
  }
}

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

// A tile's sums (which start at the bias) plus z, when given, activated and stored; fully
// unrolled so the sums stay in registers.
template <int MP, int NP, ChainActivation::Kind K>
inline __attribute__((always_inline)) void TileStore(const __m512 (&acc)[MP][NP], const void* z,
                                                     Out out, int64_t out_ps, __mmask16 last,
                                                     const Act& act_in) {
  // The constants in locals: the stores below may alias any memory (__m512 may alias), so
  // constants read through `act_in` would be read again after every store.
  const Act act = act_in;
#pragma GCC unroll 4
  for (int j = 0; j < NP; ++j) {
    const __mmask16 m = j == NP - 1 ? last : static_cast<__mmask16>(0xFFFF);
#pragma GCC unroll 16
    for (int i = 0; i < MP; ++i) {
      __m512 v = acc[i][j];
      const int64_t e = i * out_ps + j * 16;
      if (z != nullptr) v = _mm512_add_ps(v, LoadZ(ZAt(z, out.st, e), out.st, m));
      StoreVector(out.At(e), m, Apply<K>(act, v));
    }
  }
}

// TileStore with the activation's kind chosen once for the tile.
template <int MP, int NP>
inline __attribute__((always_inline)) void StoreActivated(const __m512 (&acc)[MP][NP],
                                                          const void* z, Out out, int64_t out_ps,
                                                          __mmask16 last, const Act& act) {
  switch (act.kind) {
    case ChainActivation::kNone:
      TileStore<MP, NP, ChainActivation::kNone>(acc, z, out, out_ps, last, act);
      break;
    case ChainActivation::kRelu:
      TileStore<MP, NP, ChainActivation::kRelu>(acc, z, out, out_ps, last, act);
      break;
    case ChainActivation::kLeakyRelu:
      TileStore<MP, NP, ChainActivation::kLeakyRelu>(acc, z, out, out_ps, last, act);
      break;
    case ChainActivation::kClip:
      TileStore<MP, NP, ChainActivation::kClip>(acc, z, out, out_ps, last, act);
      break;
    case ChainActivation::kHardSwish:
      TileStore<MP, NP, ChainActivation::kHardSwish>(acc, z, out, out_ps, last, act);
      break;
  }
}

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
constexpr int kMaxPanels = 4;
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

// 64-byte lines to prefetch.
struct Lines {
  const char* p = nullptr;
  int64_t n = 0;
};

// The panel groups of a 1x1 convolution with n outputs: as even as kMaxPanels allows (9 panels
// as 3 + 3 + 3), group g + 1 of `groups` taking (panels - j) / (groups - g) after j panels.
int64_t PanelGroups(int64_t panels) { return (panels + kMaxPanels - 1) / kMaxPanels; }

// A 1x1 step's packed weights for k inputs: fp32 panels [n/16][k][16], or (`dot`, bf16 chains)
// bf16 pairs [n/16][ceil(k/2)][16][2] for TileDot, whose A is then bf16 too.
struct PwWeights {
  const void* w = nullptr;
  bool dot = false;
  int64_t k = 0;
  // Elements of one panel; 64-byte lines of a panel (one per k step, or per pair).
  int64_t PanelElems() const { return dot ? (k + 1) / 2 * 32 : k * 16; }
  int64_t PanelLines() const { return dot ? (k + 1) / 2 : k; }
  int64_t ElemBytes() const { return dot ? 2 : 4; }
  // The weights from panel j on.
  PwWeights From(int64_t j) const {
    return {static_cast<const char*>(w) + j * PanelElems() * ElemBytes(), dot, k};
  }
};

// The weights of the first panel group: one line per k step (pair) and panel.
Lines FirstGroup(const PwWeights& w, int64_t n) {
  const int64_t panels = (n + 15) / 16;
  return {static_cast<const char*>(w.w), panels / PanelGroups(panels) * w.PanelLines()};
}

// A 1x1 convolution of `p` pixels: out[p][n] = act(a[p][k] * W + bias (+ z)), W packed in panels
// [n/16][k][16]. Panel groups outer, so a group's weights stay in L1 across the pixels. `then`:
// lines the last group prefetches into L2 (the next step's first weights).
// A (a_ps elements per pixel) is fp32, or bf16 with `dot` weights.
void Pointwise(const void* a, int64_t a_ps, int64_t p, const PwWeights& w, int64_t n,
               const float* bias, const void* z, Out out, int64_t out_ps, const Act& act,
               Lines then = {}) {
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

// The depthwise step's geometry and weights.
struct DwGeom {
  int64_t w, c, kh, kw, sh, sw, pad_top, pad_left, ow;
  const float* wt;  // [kh * kw][Pad16(c)]
  const float* bias;
};

// Where the depthwise step reads its input rows: the ring of E rows (`ring` slots, row iy in slot
// iy % ring) or, without an expansion, X's rows (ring 0). `ps`: floats per pixel.
struct DwSource {
  const float* base;
  int64_t ps, w, h, ring;
  const float* Row(int64_t iy) const {
    if (iy < 0 || iy >= h) return nullptr;  // zero padding: the row's taps are skipped
    return base + (ring > 0 ? iy % ring : iy) * w * ps;
  }
};

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

// The depthwise outputs of image pixels [q0, q1) (row-major, oy * ow + ox) into `out` (pixel q
// at (q - q0) * out_ps; out_ps floats per pixel; channels past c are not stored). Channel blocks
// of two vectors outermost, so a block's input rows stay in L1 from one output row to the next.
// `cv0`, `cv1`: the channels [cv0, min(cv1, c)) only (multiples of 32; cv1 < 0: to the end).
void DepthwisePixels(const DwSource& s, const DwGeom& g, int64_t q0, int64_t q1, Out out,
                     int64_t out_ps, const Act& act, int64_t cv0 = 0, int64_t cv1 = -1) {
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
      const __m256i raw = _mm256_maskz_loadu_epi16(m, x + p * c + ch);
      _mm512_mask_storeu_ps(out + p * out_ps + ch, m,
                            bf16 ? Bf16ToFloat16(raw) : HalfToFloat16(raw));
    }
  }
}

// Whether the depthwise step reads its rows from the scratch: the expansion's rows, or, in an
// fp16 chain without one, X's rows widened to fp32 (an fp32 chain without one reads X in place).
bool Ringed(const ConvChainArgs& a) { return a.w0 != nullptr || a.half; }

// The 1x1 steps' weights: bf16 pairs where given (a bf16 chain), else fp32 panels.
PwWeights ExpandW(const ConvChainArgs& a) {
  return a.w0_dot ? PwWeights{a.w0_dot, true, a.c0} : PwWeights{a.w0, false, a.c0};
}
PwWeights ProjectW(const ConvChainArgs& a) {
  return a.w2_dot ? PwWeights{a.w2_dot, true, a.c1} : PwWeights{a.w2, false, a.c1};
}

// How a step of the chain stores: the interior tensors E and D, and Y.
Store InteriorStore(const ConvChainArgs& a) {
  return !a.half ? Store::kF32 : a.bf16 ? Store::kF32Bf16 : Store::kF32Half;
}
Store OutputStore(const ConvChainArgs& a) {
  return !a.half ? Store::kF32 : a.bf16 ? Store::kBf16 : Store::kHalf;
}
// D before a projection: bf16 itself when the projection reads bf16 (the same values).
Store DStore(const ConvChainArgs& a) { return a.w2_dot ? Store::kBf16 : InteriorStore(a); }

// Output rows per band and E rows in the ring: what a band keeps in L2 between the steps (its E
// rows, (band - 1) * sh + kh, in the ring, or those rows of X without an expansion, which the
// depthwise step reads once per channel block; and its D rows when a projection follows) within
// kBandBytes; at least one output row.
constexpr int64_t kBandBytes = int64_t{384} << 10;

// Images of fewer than kWholeRows output rows per thread whose E and D together fit in
// kWholeBytes run image by image on all the threads (WholeImages): each E pixel computed once and
// the output pixels split evenly, where bands of rows per thread would recompute the E rows at
// their edges (a quarter of E at 7 x 7 on two threads) and split 7 rows 4 + 3. Measured in
// MobileNetV2 on two threads: its 7 x 7 blocks 8-12% faster so; its 14 x 14 blocks (7 rows per
// thread) 3-5% slower, the E rows the other thread computed coming from its core's cache.
constexpr int64_t kWholeBytes = int64_t{1} << 20;
constexpr int64_t kWholeRows = 6;

struct Band {
  int64_t rows, ring;
};

// Floats of an fp16 chain's X rows widened for the expansion of `ring` rows at once (0 for an
// fp32 chain or without an expansion), in whole vectors.
int64_t XRowsFloats(const ConvChainArgs& a, int64_t ring) {
  return a.half && a.w0 != nullptr && a.w0_dot == nullptr ? Pad16(ring * a.w * a.c0) : 0;
}

Band BandOf(const ConvChainArgs& a) {
  const int64_t cp = Pad16(a.c1);
  const bool project = a.w2 != nullptr;
  Band b{1, a.kh};
  for (int64_t rows = 2; rows <= a.oh; ++rows) {
    const int64_t ring = (rows - 1) * a.sh + a.kh;
    const int64_t bytes = (ring * a.w * (Ringed(a) ? cp : a.c0) + XRowsFloats(a, ring) +
                           (project ? rows * a.ow * cp : 0)) *
                          4;
    if (bytes > kBandBytes) break;
    b = {rows, ring};
  }
  return b;
}

// Floats of one image's E (or widened X; 0 when not Ringed), of the D pixels one of `threads`
// threads projects (0 without a projection), and of the X pixels one thread widens for the
// expansion (fp16 only), in whole-image mode.
struct Whole {
  int64_t e, d, x;
};

Whole WholeOf(const ConvChainArgs& a) {
  const int64_t cp = Pad16(a.c1);
  const int64_t pixels = a.oh * a.ow, in_share = (a.h * a.w + a.threads - 1) / a.threads;
  return {Ringed(a) ? a.h * a.w * cp : 0,
          a.w2 != nullptr ? (pixels + a.threads - 1) / a.threads * cp : 0,
          a.half && a.w0 != nullptr && a.w0_dot == nullptr ? Pad16(in_share * a.c0) : 0};
}

bool WholeImages(const ConvChainArgs& a) {
  if (a.threads < 2 || a.oh >= kWholeRows * a.threads) return false;
  const int64_t cp = Pad16(a.c1);
  const int64_t e = Ringed(a) ? a.h * a.w * cp : 0;
  const int64_t d = a.w2 != nullptr ? a.oh * a.ow * cp : 0;
  return (e + d) * 4 <= kWholeBytes;
}

// X of image b: fp32 (nullptr in an fp16 chain) and fp16 (nullptr in an fp32 chain).
const float* ImageF32(const ConvChainArgs& a, int64_t b) {
  return a.half ? nullptr : static_cast<const float*>(a.x) + b * a.h * a.w * a.c0;
}
const uint16_t* ImageF16(const ConvChainArgs& a, int64_t b) {
  return a.half ? static_cast<const uint16_t*>(a.x) + b * a.h * a.w * a.c0 : nullptr;
}

// The first step on `pixels` pixels of X from pixel p0 (of image xb or xh): the expansion into
// `e` (cp floats per pixel; X widened into `xbuf` first in an fp16 chain), or, in an fp16 chain
// without an expansion, X widened into `e`.
void FirstStep(const ConvChainArgs& a, const float* xb, const uint16_t* xh, int64_t p0,
               int64_t pixels, float* e, float* xbuf, const Act& act0, Lines then) {
  const int64_t cp = Pad16(a.c1);
  if (a.w0 == nullptr) {
    WidenPixels(xh + p0 * a.c0, a.bf16, pixels, a.c0, e, cp);
    return;
  }
  const void* rows = xb != nullptr ? static_cast<const void*>(xb + p0 * a.c0) : xbuf;
  if (a.w0_dot != nullptr) {
    rows = xh + p0 * a.c0;  // bf16 X as it is
  } else if (xb == nullptr) {
    WidenPixels(xh + p0 * a.c0, a.bf16, pixels, a.c0, xbuf, a.c0);
  }
  Pointwise(rows, a.c0, pixels, ExpandW(a), a.c1, a.b0, nullptr, Out{e, InteriorStore(a)}, cp, act0,
            then);
}

// Bands of output rows, each thread a contiguous run of them (its own ring and D band).
void RunBands(const ConvChainArgs& a, const Act& act0, const Act& act1, const Act& act2,
              const DwGeom& dw) {
  const int64_t total = a.n * a.oh;
  const int64_t cp = Pad16(a.c1);
  const bool ringed = Ringed(a);
  const Band band = BandOf(a);
  const int64_t per_thread = ConvChainScratchFloats(a) / a.threads;
  const Lines project_first = a.w2 ? FirstGroup(ProjectW(a), a.c2) : Lines{};
  const Lines expand_first = a.w0 ? FirstGroup(ExpandW(a), a.c1) : Lines{};  // the next band's
  const Out y{a.y, OutputStore(a)};
#pragma omp parallel num_threads(a.threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t q0 = total * t / nt, q1 = total * (t + 1) / nt;
    float* ring = a.scratch + t * per_thread;
    float* dband = ring + (ringed ? band.ring * a.w * cp : 0);
    float* xbuf = dband + (a.w2 != nullptr ? band.rows * a.ow * cp : 0);
    int64_t image = -1, next = 0;
    for (int64_t q = q0; q < q1;) {
      // A band of output rows [oy0, oy1) of one image.
      const int64_t b = q / a.oh, oy0 = q % a.oh;
      const int64_t oy1 = std::min({oy0 + band.rows, a.oh, oy0 + (q1 - q)});
      if (b != image) {
        image = b;
        next = 0;
      }
      const float* xb = ImageF32(a, b);
      if (ringed) {
        // The ring rows of the band's windows not yet computed, row iy into ring slot
        // iy % ring: one first step per run of slots without a wrap.
        const int64_t lo = std::max<int64_t>(oy0 * a.sh - a.pad_top, 0);
        const int64_t hi = std::min((oy1 - 1) * a.sh - a.pad_top + a.kh, a.h);
        for (int64_t iy = std::max(next, lo); iy < hi;) {
          const int64_t slot = iy % band.ring;
          const int64_t count = std::min(hi - iy, band.ring - slot);
          FirstStep(a, xb, ImageF16(a, b), iy * a.w, count * a.w, ring + slot * a.w * cp, xbuf,
                    act0, project_first);
          iy += count;
        }
        next = std::max(next, hi);
      }
      const DwSource src{ringed ? ring : xb, ringed ? cp : a.c0, a.w, a.h, ringed ? band.ring : 0};
      // The band's Y rows are consecutive; without a projection the D rows are Y's.
      const int64_t yo = (b * a.oh + oy0) * a.ow * a.c2;
      const int64_t p0 = oy0 * a.ow, p1 = oy1 * a.ow;
      if (a.w2 == nullptr) {
        DepthwisePixels(src, dw, p0, p1, y.At(yo), a.c2, act1);
      } else {
        DepthwisePixels(src, dw, p0, p1, Out{dband, DStore(a)}, cp, act1);
        Pointwise(dband, cp, p1 - p0, ProjectW(a), a.c2, a.b2, ZAt(a.z, y.st, yo), y.At(yo), a.c2,
                  act2, expand_first);
      }
      q += oy1 - oy0;
    }
  }
}

// Image by image on all the threads: E of the image's pixels split evenly, then, after a barrier,
// each thread's even share of the output pixels through the depthwise step and the projection.
void RunWholeImages(const ConvChainArgs& a, const Act& act0, const Act& act1, const Act& act2,
                    const DwGeom& dw) {
  const int64_t cp = Pad16(a.c1);
  const bool ringed = Ringed(a);
  const Whole whole = WholeOf(a);
  const int64_t in_pixels = a.h * a.w, out_pixels = a.oh * a.ow;
  const Lines project_first = a.w2 ? FirstGroup(ProjectW(a), a.c2) : Lines{};
  const Lines expand_first = a.w0 ? FirstGroup(ExpandW(a), a.c1) : Lines{};  // the next image's
  const Out y{a.y, OutputStore(a)};
  float* e = a.scratch;
  const int64_t parts = a.threads;  // the scratch holds `parts` D shares and X shares
#pragma omp parallel num_threads(a.threads)
  {
    // Part k of `parts` of n items; a thread takes the parts t, t + nt, ... (one part each when
    // OpenMP gives all the threads asked for).
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    auto part = [parts](int64_t n, int64_t k) {
      return std::pair<int64_t, int64_t>(n * k / parts, n * (k + 1) / parts);
    };
    float* xbuf = a.scratch + whole.e + parts * whole.d + t * whole.x;
    for (int64_t b = 0; b < a.n; ++b) {
      const float* xb = ImageF32(a, b);
      if (ringed) {
        for (int64_t k = t; k < parts; k += nt) {
          const auto [p0, p1] = part(in_pixels, k);
          FirstStep(a, xb, ImageF16(a, b), p0, p1 - p0, e + p0 * cp, xbuf, act0, project_first);
        }
#pragma omp barrier
      }
      const DwSource src{ringed ? e : xb, ringed ? cp : a.c0, a.w, a.h, 0};
      for (int64_t k = t; k < parts; k += nt) {
        const auto [q0, q1] = part(out_pixels, k);
        const int64_t yo = (b * out_pixels + q0) * a.c2;
        if (a.w2 == nullptr) {
          DepthwisePixels(src, dw, q0, q1, y.At(yo), a.c2, act1);
        } else {
          float* d = a.scratch + whole.e + k * whole.d;
          DepthwisePixels(src, dw, q0, q1, Out{d, DStore(a)}, cp, act1);
          Pointwise(d, cp, q1 - q0, ProjectW(a), a.c2, a.b2, ZAt(a.z, y.st, yo), y.At(yo), a.c2,
                    act2, expand_first);
        }
      }
      // The next image's E overwrites this one's, which the other threads may still be reading.
      if (ringed && b + 1 < a.n) {
#pragma omp barrier
      }
    }
  }
}

// Many threads on few rows: bands of rows per thread would recompute most of E at their edges
// (3.5 rows of 56 per thread on 16 threads: each thread's 3 x 3 windows need 5.5 E rows) and
// small images split into fewer row bands (or pixel shares) than threads, each streaming all of
// a 1x1 step's weights for a few pixels. From kPhasedMinThreads threads on, when the output rows
// per thread are fewer than kPhasedRows, the images go one by one in three phases, each split
// into tasks over all the threads, with a barrier between: E of the image's pixels (tasks of
// pixels x panels of 16 expanded channels), D (pixels x blocks of 32 channels), Y (pixels x
// panels of 16 outputs). Each element is still one sum in the same order (the tasks only choose
// which thread computes it), so the numbers are those of any other split. One and two threads
// keep the modes above.
constexpr int kPhasedMinThreads = 3;
constexpr int64_t kPhasedRows = 8;

// kPhasedRows, or KILN_CHAIN_PHASED_ROWS when set (a measuring knob, as KILN_NO_AMX: 0 turns the
// phases off), read once.
int64_t PhasedRows() {
  static const int64_t rows = [] {
    const char* v = std::getenv("KILN_CHAIN_PHASED_ROWS");
    return v != nullptr && *v != '\0' ? std::max<int64_t>(std::atoll(v), 0) : kPhasedRows;
  }();
  return rows;
}
// E and D of one image at most (beyond, bands of rows: they keep the rows in flight in L2).
constexpr int64_t kPhasedBytes = int64_t{32} << 20;

// E and D floats of one image in phased mode.
int64_t PhasedE(const ConvChainArgs& a) { return Ringed(a) ? a.h * a.w * Pad16(a.c1) : 0; }
int64_t PhasedD(const ConvChainArgs& a) { return a.w2 != nullptr ? a.oh * a.ow * Pad16(a.c1) : 0; }

bool PhasedImages(const ConvChainArgs& a) {
  return a.threads >= kPhasedMinThreads && a.n * a.oh < PhasedRows() * a.threads &&
         (PhasedE(a) + PhasedD(a)) * 4 <= kPhasedBytes;
}

// `pixels` x `units` (panels or channel blocks) of one step as pp x qp tasks: task k takes the
// pixel part k / qp and the unit part k % qp, each part as even as can be.
struct Split {
  int64_t pixels = 0, units = 0, pp = 1, qp = 1;
  int64_t Tasks() const { return pp * qp; }
  std::pair<int64_t, int64_t> PixelsOf(int64_t k) const {
    const int64_t i = k / qp;
    return {pixels * i / pp, pixels * (i + 1) / pp};
  }
  std::pair<int64_t, int64_t> UnitsOf(int64_t k) const {
    const int64_t j = k % qp;
    return {units * j / qp, units * (j + 1) / qp};
  }
};

// The split that finishes first on `threads` threads, by a model of a task's time: its units
// times its pixels, at least 4 (fewer pixels leave the tile waiting on the weights' loads rather
// than on its FMAs), plus 8 for the task's start (its weights from L2, its first loads); tasks
// run in rounds of `threads`. Equal times: the fewer tasks.
Split SplitOf(int64_t pixels, int64_t units, int64_t threads) {
  Split best{pixels, units, 1, 1};
  int64_t best_cost = -1;
  for (int64_t pp = 1; pp <= std::min(threads, pixels); ++pp) {
    for (int64_t qp = 1; qp <= std::min(threads, units); ++qp) {
      const int64_t rounds = (pp * qp + threads - 1) / threads;
      const int64_t task = (units + qp - 1) / qp * std::max<int64_t>((pixels + pp - 1) / pp, 4) + 8;
      const int64_t cost = rounds * task;
      if (best_cost < 0 || cost < best_cost || (cost == best_cost && pp * qp < best.Tasks())) {
        best = {pixels, units, pp, qp};
        best_cost = cost;
      }
    }
  }
  return best;
}

// The three phases' splits.
struct Phases {
  Split e, d, y;
};

Phases PhasesOf(const ConvChainArgs& a) {
  const int64_t t = a.threads;
  Phases ph;
  ph.e = SplitOf(a.h * a.w, a.w0 != nullptr ? (a.c1 + 15) / 16 : 1, t);
  ph.d = SplitOf(a.oh * a.ow, (a.c1 + 31) / 32, t);
  ph.y = SplitOf(a.oh * a.ow, a.w2 != nullptr ? (a.c2 + 15) / 16 : 1, t);
  return ph;
}

// Floats of the X pixels one thread widens for one expansion task (16-bit chains only).
int64_t PhasedX(const ConvChainArgs& a, const Phases& ph) {
  return a.half && a.w0 != nullptr && a.w0_dot == nullptr
             ? Pad16((a.h * a.w + ph.e.pp - 1) / ph.e.pp * a.c0)
             : 0;
}

// Panels [j0, j1) of a 1x1 convolution's n outputs: the channels from j0 * 16, how many.
int64_t SliceChannels(int64_t n, int64_t j0, int64_t j1) { return std::min(j1 * 16, n) - j0 * 16; }

void RunPhased(const ConvChainArgs& a, const Act& act0, const Act& act1, const Act& act2,
               const DwGeom& dw) {
  const int64_t cp = Pad16(a.c1);
  const bool ringed = Ringed(a);
  const Phases ph = PhasesOf(a);
  const int64_t xper = PhasedX(a, ph);
  float* e = a.scratch;
  float* d = e + PhasedE(a);
  const Out y{a.y, OutputStore(a)};
  const Store interior = InteriorStore(a);
  const Out dout{d, DStore(a)};
  const PwWeights we = ExpandW(a), wp = ProjectW(a);
  const int64_t out_pixels = a.oh * a.ow;
#pragma omp parallel num_threads(a.threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    float* xbuf = d + PhasedD(a) + t * xper;
    for (int64_t b = 0; b < a.n; ++b) {
      const float* xb = ImageF32(a, b);
      const uint16_t* xh = ImageF16(a, b);
      if (ringed) {
        for (int64_t k = t; k < ph.e.Tasks(); k += nt) {
          const auto [p0, p1] = ph.e.PixelsOf(k);
          if (p0 == p1) continue;
          if (a.w0 == nullptr) {
            WidenPixels(xh + p0 * a.c0, a.bf16, p1 - p0, a.c0, e + p0 * cp, cp);
            continue;
          }
          const auto [j0, j1] = ph.e.UnitsOf(k);
          const void* rows = xb != nullptr ? static_cast<const void*>(xb + p0 * a.c0) : xbuf;
          if (we.dot) {
            rows = xh + p0 * a.c0;  // bf16 X as it is
          } else if (xb == nullptr) {
            WidenPixels(xh + p0 * a.c0, a.bf16, p1 - p0, a.c0, xbuf, a.c0);
          }
          Pointwise(rows, a.c0, p1 - p0, we.From(j0), SliceChannels(a.c1, j0, j1), a.b0 + j0 * 16,
                    nullptr, Out{e + p0 * cp + j0 * 16, interior}, cp, act0);
        }
#pragma omp barrier
      }
      const DwSource src{ringed ? e : xb, ringed ? cp : a.c0, a.w, a.h, 0};
      const int64_t yb = b * out_pixels * a.c2;
      for (int64_t k = t; k < ph.d.Tasks(); k += nt) {
        const auto [q0, q1] = ph.d.PixelsOf(k);
        const auto [c0, c1] = ph.d.UnitsOf(k);
        if (q0 == q1 || c0 == c1) continue;
        if (a.w2 == nullptr) {
          DepthwisePixels(src, dw, q0, q1, y.At(yb + q0 * a.c2), a.c2, act1, c0 * 32, c1 * 32);
        } else {
          DepthwisePixels(src, dw, q0, q1, dout.At(q0 * cp), cp, act1, c0 * 32, c1 * 32);
        }
      }
      if (a.w2 != nullptr) {
#pragma omp barrier
        for (int64_t k = t; k < ph.y.Tasks(); k += nt) {
          const auto [q0, q1] = ph.y.PixelsOf(k);
          const auto [j0, j1] = ph.y.UnitsOf(k);
          if (q0 == q1) continue;
          const int64_t yo = yb + q0 * a.c2 + j0 * 16;
          Pointwise(dout.At(q0 * cp).p, cp, q1 - q0, wp.From(j0), SliceChannels(a.c2, j0, j1),
                    a.b2 + j0 * 16, ZAt(a.z, y.st, yo), y.At(yo), a.c2, act2);
        }
      }
      // The next image's first writes against this image's reads still in flight: its E against
      // this depthwise phase (over already, at the barrier before the projection, when there is
      // one), or, without an E phase, its D against this projection. Its D after an E phase
      // comes after the barrier that ends that phase; Y conflicts with nothing.
      if (b + 1 < a.n && ringed != (a.w2 != nullptr)) {
#pragma omp barrier
      }
    }
  }
}

}  // namespace

int64_t ConvChainThreads(const ConvChainArgs& a) {
  if (PhasedImages(a)) return std::min<int64_t>(a.threads, a.n * a.oh * a.ow);
  return std::min<int64_t>(a.threads, a.n * a.oh);
}

int64_t ConvChainScratchFloats(const ConvChainArgs& a) {
  if (PhasedImages(a)) {
    return PhasedE(a) + PhasedD(a) + a.threads * PhasedX(a, PhasesOf(a));  // multiples of 16
  }
  if (WholeImages(a)) {
    const Whole whole = WholeOf(a);
    return whole.e + a.threads * (whole.d + whole.x);  // multiples of 16
  }
  const int64_t cp = Pad16(a.c1);
  const Band band = BandOf(a);
  const int64_t ring = Ringed(a) ? band.ring * a.w * cp : 0;
  const int64_t d = a.w2 != nullptr ? band.rows * a.ow * cp : 0;
  return (ring + d + XRowsFloats(a, band.ring)) * a.threads;  // multiples of 16 per thread
}

void ConvChainAvx512(const ConvChainArgs& a) {
  const Act act0(a.act0), act1(a.act1), act2(a.act2);
  const DwGeom dw{a.w, a.c1, a.kh, a.kw, a.sh, a.sw, a.pad_top, a.pad_left, a.ow, a.w1, a.b1};
  if (PhasedImages(a)) {
    RunPhased(a, act0, act1, act2, dw);
  } else if (WholeImages(a)) {
    RunWholeImages(a, act0, act1, act2, dw);
  } else {
    RunBands(a, act0, act1, act2, dw);
  }
}

}  // namespace kiln::kernels::cpu::avx512
