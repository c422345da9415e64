// The pieces the AVX-512 convolution chain's files share (conv_chain.h is the interface): the
// stores, activations and register-tile epilogue, the 1x1 and depthwise steps' geometry, and the
// functions one file calls in another. Include only from `*_avx512.cc` files: the functions and
// templates here have internal linkage (each of those files keeps its own copy, compiled with
// AVX-512 flags) and the structs' inline members are only ever compiled in those files, so no
// AVX-512 code can be picked by the linker for code compiled without it.
//
// conv_chain_pointwise_avx512.cc: the 1x1 register tiles (fp32 FMA, bf16 vdpbf16ps) and Pointwise.
// conv_chain_depthwise_avx512.cc: the depthwise tiles, DepthwisePixels and WidenPixels.
// conv_chain_avx512.cc: the bands of rows and whole-image modes, the entry points.
// conv_chain_phased_avx512.cc: the phased mode of many threads on few rows.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "engine/kernels/cpu/avx512/conv_chain.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"

namespace kiln::kernels::cpu::avx512::conv_chain {
namespace {

inline int64_t Pad16(int64_t c) { return (c + 15) / 16 * 16; }

inline __mmask16 TailMask(int64_t c) {
  const int r = static_cast<int>(c % 16);
  return r == 0 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << r) - 1);
}

}  // namespace

// How a step stores its values: fp32; fp32 holding bf16 values (an interior tensor of a bf16
// chain: what the member convolution would have stored, widened again); fp16 (bf16), Y of a
// 16-bit chain. Rounded as half.h rounds (round to nearest even; NaN as the reference keeps it).
enum class Store { kF32, kHalf, kF32Bf16, kBf16 };

namespace {
// Bytes of one stored element.
constexpr int64_t StoreBytes(Store st) { return st == Store::kHalf || st == Store::kBf16 ? 2 : 4; }

}  // namespace

// Where a step stores: a base address and how it stores there; At(e) is the element e further.
struct Out {
  void* p;
  Store st;
  Out At(int64_t e) const { return {static_cast<char*>(p) + e * StoreBytes(st), st}; }
};

namespace {
// Element e of a residual Z of Y's type (fp16 when Y is).
inline const void* ZAt(const void* z, Store st, int64_t e) {
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
    case Store::kHalf:
      if (m == 0xFFFF) {
        _mm256_storeu_si256(static_cast<__m256i*>(out.p), FloatToHalf16(v));
      } else {
        _mm256_mask_storeu_epi16(out.p, m, FloatToHalf16(v));
      }
      break;
    case Store::kF32Bf16:
      if (m == 0xFFFF) {
        _mm512_storeu_ps(out.p, Bf16ToFloat16(FloatToBf16x16(v)));
      } else {
        _mm512_mask_storeu_ps(out.p, m, Bf16ToFloat16(FloatToBf16x16(v)));
      }
      break;
    case Store::kBf16:
      if (m == 0xFFFF) {
        _mm256_storeu_si256(static_cast<__m256i*>(out.p), FloatToBf16x16(v));
      } else {
        _mm256_mask_storeu_epi16(out.p, m, FloatToBf16x16(v));
      }
      break;
  }
}

// 16 values of Z (lanes m, the others 0) as fp32, Z being of Y's type.
inline __attribute__((always_inline)) __m512 LoadZ(const void* z, Store st, __mmask16 m) {
  if (st == Store::kHalf) return HalfToFloat16(_mm256_maskz_loadu_epi16(m, z));
  if (st == Store::kBf16) return Bf16ToFloat16(_mm256_maskz_loadu_epi16(m, z));
  return _mm512_maskz_loadu_ps(m, z);
}

}  // namespace

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

namespace {
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
}  // namespace

// 64-byte lines to prefetch.
struct Lines {
  const char* p = nullptr;
  int64_t n = 0;
};

namespace {
// Panels of 16 outputs a 1x1 tile takes at most (conv_chain_pointwise_avx512.cc's kMaxRows).
constexpr int kMaxPanels = 4;

// The panel groups of a 1x1 convolution with n outputs: as even as kMaxPanels allows (9 panels
// as 3 + 3 + 3), group g + 1 of `groups` taking (panels - j) / (groups - g) after j panels.
inline int64_t PanelGroups(int64_t panels) { return (panels + kMaxPanels - 1) / kMaxPanels; }

}  // namespace

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

namespace {
// The weights of the first panel group: one line per k step (pair) and panel.
inline Lines FirstGroup(const PwWeights& w, int64_t n) {
  const int64_t panels = (n + 15) / 16;
  return {static_cast<const char*>(w.w), panels / PanelGroups(panels) * w.PanelLines()};
}

// Whether the depthwise step reads its rows from the scratch: the expansion's rows, or, in an
// fp16 chain without one, X's rows widened to fp32 (an fp32 chain without one reads X in place).
inline bool Ringed(const ConvChainArgs& a) { return a.w0 != nullptr || a.half; }

// The 1x1 steps' weights: bf16 pairs where given (a bf16 chain), else fp32 panels.
inline PwWeights ExpandW(const ConvChainArgs& a) {
  return a.w0_dot ? PwWeights{a.w0_dot, true, a.c0} : PwWeights{a.w0, false, a.c0};
}
inline PwWeights ProjectW(const ConvChainArgs& a) {
  return a.w2_dot ? PwWeights{a.w2_dot, true, a.c1} : PwWeights{a.w2, false, a.c1};
}

// How a step of the chain stores: the interior tensors E and D, and Y. An fp16 chain keeps its
// interior in fp32 (the fusion contract's fp32 interior: rounding E and D to fp16 cost YuNet's
// fp16 chains ~6% and made them slower than fp32 ones); a bf16 chain rounds it to bf16, as its
// members would store it (its projection may read D as bf16 pairs: DStore).
inline Store InteriorStore(const ConvChainArgs& a) {
  return a.half && a.bf16 ? Store::kF32Bf16 : Store::kF32;
}
inline Store OutputStore(const ConvChainArgs& a) {
  return !a.half ? Store::kF32 : a.bf16 ? Store::kBf16 : Store::kHalf;
}
// D before a projection: bf16 itself when the projection reads bf16 (the same values).
inline Store DStore(const ConvChainArgs& a) { return a.w2_dot ? Store::kBf16 : InteriorStore(a); }

// X of image b: fp32 (nullptr in an fp16 chain) and fp16 (nullptr in an fp32 chain).
inline const float* ImageF32(const ConvChainArgs& a, int64_t b) {
  return a.half ? nullptr : static_cast<const float*>(a.x) + b * a.h * a.w * a.c0;
}
inline const uint16_t* ImageF16(const ConvChainArgs& a, int64_t b) {
  return a.half ? static_cast<const uint16_t*>(a.x) + b * a.h * a.w * a.c0 : nullptr;
}

}  // namespace

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

// Defined in conv_chain_pointwise_avx512.cc.
// A 1x1 convolution of `p` pixels: out[p][n] = act(a[p][k] * W + bias (+ z)), W packed in panels
// [n/16][k][16]; `then`: lines the last panel group prefetches into L2.
void Pointwise(const void* a, int64_t a_ps, int64_t p, const PwWeights& w, int64_t n,
               const float* bias, const void* z, Out out, int64_t out_ps, const Act& act,
               Lines then = {});

// Defined in conv_chain_depthwise_avx512.cc.
// The depthwise outputs of image pixels [q0, q1) into `out`, channels [cv0, min(cv1, c)).
void DepthwisePixels(const DwSource& s, const DwGeom& g, int64_t q0, int64_t q1, Out out,
                     int64_t out_ps, const Act& act, int64_t cv0 = 0, int64_t cv1 = -1);
// Pixels of fp16 (bf16) X (c channels each) widened to fp32 at `out`, out_ps floats per pixel.
void WidenPixels(const uint16_t* x, bool bf16, int64_t pixels, int64_t c, float* out,
                 int64_t out_ps);

// Defined in conv_chain_avx512.cc.
// The first step on `pixels` pixels of X from pixel p0: the expansion into `e`, or X widened.
void FirstStep(const ConvChainArgs& a, const float* xb, const uint16_t* xh, int64_t p0,
               int64_t pixels, float* e, float* xbuf, const Act& act0, Lines then);

// Defined in conv_chain_phased_avx512.cc.
// Whether the images go one by one in three phases (many threads, few rows); the floats of its
// scratch; the run.
bool PhasedImages(const ConvChainArgs& a);
int64_t PhasedScratchFloats(const ConvChainArgs& a);
void RunPhased(const ConvChainArgs& a, const Act& act0, const Act& act1, const Act& act2,
               const DwGeom& dw);

}  // namespace kiln::kernels::cpu::avx512::conv_chain
