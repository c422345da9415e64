// AVX-512 loops of the quantization kernels (quant.h): QuantizeLinear, DequantizeLinear and
// DynamicQuantizeLinear elementwise, and the AVX512-VNNI integer GEMM (vpdpbusd) with its
// packing and im2col for MatMulInteger and ConvInteger. Compiled with AVX-512 flags (plus
// -mavx512vnni, engine/CMakeLists.txt); plain functions on raw pointers only.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/kernels/cpu/avx512/quant.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// Elements per OpenMP piece of the elementwise loops, and the count below which one thread
// runs them (a parallel region costs a few microseconds).
constexpr int64_t kPiece = 16384;
constexpr int64_t kParallelMin = 4 * kPiece;

// Runs body(begin, end) over [0, n) in kPiece pieces, on the threads when n is large. Below
// that no parallel region is opened at all: even a serialised one costs about a microsecond, and
// a per-axis DequantizeLinear calls this once per row of a few hundred elements.
template <typename F>
void Pieces(int64_t n, F&& body) {
  const int64_t pieces = (n + kPiece - 1) / kPiece;
  if (n < kParallelMin) {
    for (int64_t p = 0; p < pieces; ++p) body(p * kPiece, std::min(n, (p + 1) * kPiece));
    return;
  }
  ParallelFor(pieces, [&](int64_t p_begin, int64_t p_end) {
    for (int64_t p = p_begin; p < p_end; ++p) body(p * kPiece, std::min(n, (p + 1) * kPiece));
  });
}

// The loop of QuantizeLinear and DequantizeLinear: body(i, m, s, z, full) for every 16 elements
// from i (lanes m), with s and z their scales and zero points: per element (kPerElement, one
// scale a lane) or one scale for all. `full` (std::true_type) for the blocks of 16 lanes, which
// load and store unmasked: a masked narrowing store (vpmovdb to memory) of every lane cost Smart
// Turn's QuantizeLinear kernels several times their plain stores on Zen 5; std::false_type for
// the last, partial block.
template <bool kPerElement, typename F>
void ScaledLoop(int64_t n, const float* scale, const int32_t* zp, F&& body) {
  Pieces(n, [&](int64_t begin, int64_t end) {
    __m512 s = _mm512_set1_ps(scale[0]);
    __m512i z = _mm512_set1_epi32(zp[0]);
    int64_t i = begin;
    for (; i + 16 <= end; i += 16) {
      if constexpr (kPerElement) {
        s = _mm512_loadu_ps(scale + i);
        z = _mm512_loadu_epi32(zp + i);
      }
      body(i, static_cast<__mmask16>(0xFFFF), s, z, std::true_type{});
    }
    if (i < end) {
      const __mmask16 m = LaneMask(end - i);
      if constexpr (kPerElement) {
        s = _mm512_maskz_loadu_ps(m, scale + i);
        z = _mm512_maskz_loadu_epi32(m, zp + i);
      }
      body(i, m, s, z, std::false_type{});
    }
  });
}

// Load16 / Store16 (vec_convert_inl.h), unmasked where kFull.
template <DataType T, bool kFull>
inline __m512 LoadBlock(const void* p, int64_t i, __mmask16 m) {
  if constexpr (kFull) {
    return LoadFull16<T>(p, i);
  } else {
    return Load16<T>(p, i, m);
  }
}
template <DataType T, bool kFull>
inline void StoreBlock(void* p, int64_t i, __mmask16 m, __m512 v) {
  if constexpr (kFull) {
    StoreFull16<T>(p, i, v);
  } else {
    Store16<T>(p, i, m, v);
  }
}

// Calls f(std::integral_constant<DataType, T>) for the T of Ts equal to t, the last one when no
// other is (the callers have checked t).
template <DataType T, DataType... Rest, typename F>
void WithType(DataType t, F&& f) {
  if constexpr (sizeof...(Rest) == 0) {
    f(std::integral_constant<DataType, T>{});
  } else if (t == T) {
    f(std::integral_constant<DataType, T>{});
  } else {
    WithType<Rest...>(t, std::forward<F>(f));
  }
}

// Calls f(std::integral_constant<bool, b>).
template <typename F>
void WithBool(bool b, F&& f) {
  if (b) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// ---- QuantizeLinear -------------------------------------------------------------------------

template <DataType Y>
constexpr int32_t QLow() {
  return Y == DataType::kU8 ? 0 : Y == DataType::kI8 ? -128 : Y == DataType::kU16 ? 0 : -32768;
}
template <DataType Y>
constexpr int32_t QHigh() {
  return Y == DataType::kU8 ? 255 : Y == DataType::kI8 ? 127 : Y == DataType::kU16 ? 65535 : 32767;
}

// round_half_even(x / s), NaN -> 0, clamped to [lo - z, hi - z] (exact small integers in fp32),
// then + z: the reference's clamp(nearbyint(q) + z, lo, hi) on every input, infinities included.
template <DataType X, DataType Y, bool kPerElement>
void QuantizeLoop(const void* x, int64_t n, const float* scale, const int32_t* zp, void* y) {
  ScaledLoop<kPerElement>(
      n, scale, zp, [x, y](int64_t i, __mmask16 m, __m512 s, __m512i z, auto full) {
        constexpr bool kFull = decltype(full)::value;
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_set1_epi32(QLow<Y>()), z));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_set1_epi32(QHigh<Y>()), z));
        const __m512 q = _mm512_div_ps(LoadBlock<X, kFull>(x, i, m), s);
        __m512 r = _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(r, r, _CMP_ORD_Q), r);
        r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
        const __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(r), z);
        if constexpr (Y == DataType::kU8 || Y == DataType::kI8) {
          if constexpr (kFull) {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint8_t*>(y) + i),
                             _mm512_cvtepi32_epi8(v));
          } else {
            _mm512_mask_cvtepi32_storeu_epi8(static_cast<uint8_t*>(y) + i, m, v);
          }
        } else if constexpr (kFull) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(y) + i),
                              _mm512_cvtepi32_epi16(v));
        } else {
          _mm512_mask_cvtepi32_storeu_epi16(static_cast<uint16_t*>(y) + i, m, v);
        }
      });
}

// ---- DequantizeLinear -----------------------------------------------------------------------

// 16 quantized elements (lanes m; all of them, unmasked, where kFull) widened to int32.
template <DataType X, bool kFull = false>
__m512i LoadQ16(const void* p, int64_t i, __mmask16 m) {
  if constexpr (X == DataType::kU8 || X == DataType::kI8) {
    const auto* b = static_cast<const uint8_t*>(p) + i;
    const __m128i raw =
        kFull ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)) : _mm_maskz_loadu_epi8(m, b);
    return X == DataType::kU8 ? _mm512_cvtepu8_epi32(raw) : _mm512_cvtepi8_epi32(raw);
  } else if constexpr (X == DataType::kU16 || X == DataType::kI16) {
    const auto* h = static_cast<const uint16_t*>(p) + i;
    const __m256i raw = kFull ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h))
                              : _mm256_maskz_loadu_epi16(m, h);
    return X == DataType::kU16 ? _mm512_cvtepu16_epi32(raw) : _mm512_cvtepi16_epi32(raw);
  } else {
    const auto* w = static_cast<const int32_t*>(p) + i;
    return kFull ? _mm512_loadu_epi32(w) : _mm512_maskz_loadu_epi32(m, w);
  }
}

// 8- and 16-bit x: float(x - z) (exact, |x - z| < 2^17) times s in fp32, rounded once to Y.
// int32 x: the difference and the product in double (the reference's C), rounded to fp32 and
// then to Y, as Store<Y>(double) does.
template <DataType X, DataType Y, bool kPerElement>
void DequantizeLoop(const void* x, int64_t n, const float* scale, const int32_t* zp, void* y) {
  ScaledLoop<kPerElement>(
      n, scale, zp, [x, y](int64_t i, __mmask16 m, __m512 s, __m512i z, auto full) {
        constexpr bool kFull = decltype(full)::value;
        const __m512i xi = LoadQ16<X, kFull>(x, i, m);
        __m512 v;
        if constexpr (X == DataType::kI32) {
          const __m512d lo =
              _mm512_mul_pd(_mm512_sub_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(xi)),
                                          _mm512_cvtepi32_pd(_mm512_castsi512_si256(z))),
                            _mm512_cvtps_pd(_mm512_castps512_ps256(s)));
          const __m512d hi =
              _mm512_mul_pd(_mm512_sub_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(xi, 1)),
                                          _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(z, 1))),
                            _mm512_cvtps_pd(_mm512_extractf32x8_ps(s, 1)));
          v = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi),
                                 1);
        } else {
          v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(xi, z)), s);
        }
        StoreBlock<Y, kFull>(y, i, m, v);
      });
}

// int32 x (the integer sums of a qdq-integer rewrite) in fp32: where |x|, |z| <= 2^23 in every
// lane (abs of INT32_MIN reads as 2^31 unsigned), x - z is an fp32 integer and the fp32 product
// is the double product (at most 49 significant bits, exact) rounded to fp32: DequantizeLoop's
// bits. Each piece is computed so without a branch on the data, its lanes out of that range
// noted, and the piece recomputed by DequantizeLoop when there was one.
template <DataType Y, bool kPerElement>
void DequantizeI32(const int32_t* x, int64_t n, const float* scale, const int32_t* zp, void* y) {
  Pieces(n, [=](int64_t begin, int64_t end) {
    const __m512i lim = _mm512_set1_epi32(1 << 23);
    __m512 s = _mm512_set1_ps(scale[0]);
    __m512i z = _mm512_set1_epi32(zp[0]);
    __mmask16 wide = 0;
    auto block = [&](int64_t i, __mmask16 m, auto full) {
      constexpr bool kFull = decltype(full)::value;
      if constexpr (kPerElement) {
        s = LoadBlock<DataType::kF32, kFull>(scale, i, m);
        z = LoadQ16<DataType::kI32, kFull>(zp, i, m);
      }
      const __m512i xi = LoadQ16<DataType::kI32, kFull>(x, i, m);
      wide |= _mm512_mask_cmpgt_epu32_mask(m, _mm512_abs_epi32(xi), lim) |
              _mm512_mask_cmpgt_epu32_mask(m, _mm512_abs_epi32(z), lim);
      StoreBlock<Y, kFull>(y, i, m, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(xi, z)), s));
    };
    int64_t i = begin;
    for (; i + 16 <= end; i += 16) block(i, static_cast<__mmask16>(0xFFFF), std::true_type{});
    if (i < end) block(i, LaneMask(end - i), std::false_type{});
    if (wide != 0) {
      const int64_t ys = static_cast<int64_t>(DataTypeSize(Y));
      DequantizeLoop<DataType::kI32, Y, kPerElement>(
          x + begin, end - begin, kPerElement ? scale + begin : scale,
          kPerElement ? zp + begin : zp, static_cast<uint8_t*>(y) + begin * ys);
    }
  });
}

// ---- integer GEMM ---------------------------------------------------------------------------

// Interleaves 4 rows of 16 bytes (k = 4kb .. 4kb+3 of 16 columns) into the 64 bytes vpdpbusd
// reads: column c's 4 bytes at 4c. Stored and returned: a sum taken from the register, not by
// reloading the stored bytes (four 16-byte stores do not forward to one 64-byte load).
inline __m512i Interleave4x16(const uint8_t* r0, const uint8_t* r1, const uint8_t* r2,
                              const uint8_t* r3, uint8_t* dst) {
  const __m128i a0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0));
  const __m128i a1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1));
  const __m128i a2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r2));
  const __m128i a3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r3));
  const __m128i t0 = _mm_unpacklo_epi8(a0, a1), t1 = _mm_unpackhi_epi8(a0, a1);
  const __m128i t2 = _mm_unpacklo_epi8(a2, a3), t3 = _mm_unpackhi_epi8(a2, a3);
  __m512i v = _mm512_castsi128_si512(_mm_unpacklo_epi16(t0, t2));
  v = _mm512_inserti32x4(v, _mm_unpackhi_epi16(t0, t2), 1);
  v = _mm512_inserti32x4(v, _mm_unpacklo_epi16(t1, t3), 2);
  v = _mm512_inserti32x4(v, _mm_unpackhi_epi16(t1, t3), 3);
  _mm512_storeu_si512(dst, v);
  return v;
}

// Packs `rows` [Kp, Np] (stored bytes, zero padded) into panels and writes the column sums of
// the first n columns: sum over k of the signed bytes, by vpdpbusd against ones.
void PackRows(const uint8_t* rows, int64_t kp, int64_t np, int64_t n, uint8_t* packed,
              int32_t* col_sums) {
  const int64_t kb_count = kp / 4, panels = np / 16;
  ParallelFor(panels, kp * np >= (int64_t{1} << 18), [&](int64_t p_begin, int64_t p_end) {
    for (int64_t p = p_begin; p < p_end; ++p) {
      uint8_t* dst = packed + p * kb_count * 64;
      __m512i sum = _mm512_setzero_si512();
      const __m512i ones = _mm512_set1_epi8(1);
      for (int64_t kb = 0; kb < kb_count; ++kb) {
        const uint8_t* r0 = rows + 4 * kb * np + p * 16;
        sum = _mm512_dpbusd_epi32(
            sum, ones, Interleave4x16(r0, r0 + np, r0 + 2 * np, r0 + 3 * np, dst + kb * 64));
      }
      _mm512_mask_storeu_epi32(col_sums + p * 16, LaneMask(n - p * 16), sum);
    }
  });
}

// acc += the 4-byte dot products of unsigned `u` and signed `s` (vpdpbusd) in place. Inline asm:
// GCC's intrinsic is not tied to its accumulator, and with 24 live accumulators its register
// allocator then copied each one and stored it to the stack on every step.
inline void DotAcc(__m512i& acc, __m512i u, __m512i s) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
}

// The zero-point terms of one output vector (row r of the tile, panel c) and its store.
struct TileEpilogue {
  const GemmInt8Args& g;
  int64_t i0, p0;
  __m512i zb[4], cbz[4];
  // MatMulIntegerToFloat's per-column stage (GemmInt8Args::col_scale): B (zero without one)
  // and scale of the panel's 16 columns.
  __m512i cb[4];
  __m512 cs[4];
  __mmask16 mask[4];

  TileEpilogue(const GemmInt8Args& args, int64_t i, int64_t p, int nr) : g(args), i0(i), p0(p) {
    const __m512i kv = _mm512_set1_epi32(static_cast<int32_t>(g.k));
    for (int c = 0; c < nr; ++c) {
      const int64_t j0 = (p0 + c) * 16;
      mask[c] = LaneMask(g.n - j0);
      zb[c] = _mm512_maskz_loadu_epi32(mask[c], g.zb + j0);
      // CB - K * zb (modulo 2^32: mullo keeps the low 32 bits).
      cbz[c] = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(mask[c], g.col_sums + j0),
                                _mm512_mullo_epi32(kv, zb[c]));
      if (g.row_scale == nullptr && g.col_scale != nullptr) {
        cb[c] = g.col_bias == nullptr ? _mm512_setzero_si512()
                                      : _mm512_maskz_loadu_epi32(mask[c], g.col_bias + j0);
        cs[c] = _mm512_maskz_loadu_ps(mask[c], g.col_scale + j0);
      }
    }
  }
  // A full panel (16 columns) is stored unmasked: on Zen 5 a masked store of every lane to a
  // cold line costs about twice a plain one (vec_convert_inl.h's StoreFull16).
  void Store(int r, int c, __m512i acc) const {
    const __m512i terms =
        _mm512_add_epi32(_mm512_mullo_epi32(zb[c], _mm512_set1_epi32(g.row_sums[i0 + r])),
                         _mm512_mullo_epi32(_mm512_set1_epi32(g.za[i0 + r]), cbz[c]));
    __m512i y = _mm512_sub_epi32(acc, terms);
    int32_t* dst = g.y + (i0 + r) * g.y_rs + (p0 + c) * 16;
    __m512 f;
    if (g.row_scale != nullptr) {
      // ConvIntegerToFloat's output stage: the int32 Add (wrapping), the Cast (vcvtdq2ps rounds
      // to nearest even, as static_cast<float> does) and the fp32 Mul, as the separate nodes.
      if (g.row_bias != nullptr) y = _mm512_add_epi32(y, _mm512_set1_epi32(g.row_bias[i0 + r]));
      f = _mm512_mul_ps(_mm512_cvtepi32_ps(y), _mm512_set1_ps(g.row_scale[i0 + r]));
    } else if (g.col_scale != nullptr) {
      // MatMulIntegerToFloat's: the same per column (adding a zero B changes nothing).
      f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(y, cb[c])), cs[c]);
    } else {
      if (mask[c] == 0xFFFF) {
        _mm512_storeu_si512(dst, y);
      } else {
        _mm512_mask_storeu_epi32(dst, mask[c], y);
      }
      return;
    }
    float* fd = reinterpret_cast<float*>(dst);
    if (mask[c] == 0xFFFF) {
      _mm512_storeu_ps(fd, f);
    } else {
      _mm512_mask_storeu_ps(fd, mask[c], f);
    }
  }
};

// C[MR x 16 NR] = A[i0 .. i0+MR) B[panels p0 .. p0+NR), then the zero-point terms, stored. The
// accumulators are named variables (an array of vectors is kept in memory by GCC, which then
// stores every accumulator on each step); rows and panels past MR / NR are compiled out.
template <int MR, int NR>
void GemmTile(const GemmInt8Args& g, int64_t i0, int64_t p0) {
  const int64_t kp = Int8KPadded(g.k), kb_count = kp / 4;
  const uint8_t* a = g.a + i0 * kp;
  const uint8_t* b = g.b + p0 * kb_count * 64;
  const __m512i zero = _mm512_setzero_si512();
#define KILN_ACC_ROW(r) __m512i c##r##0 = zero, c##r##1 = zero, c##r##2 = zero, c##r##3 = zero
  KILN_ACC_ROW(0);
  KILN_ACC_ROW(1);
  KILN_ACC_ROW(2);
  KILN_ACC_ROW(3);
  KILN_ACC_ROW(4);
  KILN_ACC_ROW(5);
#undef KILN_ACC_ROW
  for (int64_t kb = 0; kb < kb_count; ++kb) {
    const uint8_t* bk = b + kb * 64;
    const __m512i b0 = _mm512_loadu_si512(bk);
    const __m512i b1 = NR > 1 ? _mm512_loadu_si512(bk + kb_count * 64) : zero;
    const __m512i b2 = NR > 2 ? _mm512_loadu_si512(bk + 2 * kb_count * 64) : zero;
    const __m512i b3 = NR > 3 ? _mm512_loadu_si512(bk + 3 * kb_count * 64) : zero;
#define KILN_DP_ROW(r)                             \
  if constexpr (MR > r) {                          \
    int32_t word;                                  \
    std::memcpy(&word, a + r * kp + kb * 4, 4);    \
    const __m512i av = _mm512_set1_epi32(word);    \
    DotAcc(c##r##0, av, b0);                       \
    if constexpr (NR > 1) DotAcc(c##r##1, av, b1); \
    if constexpr (NR > 2) DotAcc(c##r##2, av, b2); \
    if constexpr (NR > 3) DotAcc(c##r##3, av, b3); \
  }                                                \
  static_assert(true)
    KILN_DP_ROW(0);
    KILN_DP_ROW(1);
    KILN_DP_ROW(2);
    KILN_DP_ROW(3);
    KILN_DP_ROW(4);
    KILN_DP_ROW(5);
#undef KILN_DP_ROW
  }
  const TileEpilogue e(g, i0, p0, NR);
#define KILN_STORE_ROW(r)                         \
  if constexpr (MR > r) {                         \
    e.Store(r, 0, c##r##0);                       \
    if constexpr (NR > 1) e.Store(r, 1, c##r##1); \
    if constexpr (NR > 2) e.Store(r, 2, c##r##2); \
    if constexpr (NR > 3) e.Store(r, 3, c##r##3); \
  }                                               \
  static_assert(true)
  KILN_STORE_ROW(0);
  KILN_STORE_ROW(1);
  KILN_STORE_ROW(2);
  KILN_STORE_ROW(3);
  KILN_STORE_ROW(4);
  KILN_STORE_ROW(5);
#undef KILN_STORE_ROW
}

constexpr int kMr = 6, kNr = 4;
using TileFn = void (*)(const GemmInt8Args&, int64_t, int64_t);

template <int MR>
TileFn TileFor(int nr) {
  switch (nr) {
    case 1:
      return &GemmTile<MR, 1>;
    case 2:
      return &GemmTile<MR, 2>;
    case 3:
      return &GemmTile<MR, 3>;
    default:
      return &GemmTile<MR, 4>;
  }
}

TileFn TileFor(int mr, int nr) {
  switch (mr) {
    case 1:
      return TileFor<1>(nr);
    case 2:
      return TileFor<2>(nr);
    case 3:
      return TileFor<3>(nr);
    case 4:
      return TileFor<4>(nr);
    case 5:
      return TileFor<5>(nr);
    default:
      return TileFor<6>(nr);
  }
}

// Columns [c0, c1) of im2col row `row` (k = (c, ki, kj)) of a convolution's B operand, as stored
// bytes (X xor `flip`), into dst[0, c1 - c0): taps in the padding read `pad`, columns past
// OH * OW and rows past K read 0.
// d[0, n) = the byte in every lane of `v` (n of a few bytes mostly: no memset call).
inline void FillBytes(uint8_t* d, int64_t n, __m512i v) {
  for (int64_t i = 0; i < n; i += 64) {
    const __mmask64 m = n - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (n - i)) - 1;
    _mm512_mask_storeu_epi8(d + i, m, v);
  }
}

void Im2ColRowRange(const uint8_t* src, const Int8ConvGeometry& g, int64_t row, int64_t c0,
                    int64_t c1, uint8_t flip, uint8_t pad, uint8_t* dst) {
  const int64_t taps = g.kh * g.kw, p = g.oh * g.ow;
  if (row >= g.channels * taps) {
    std::memset(dst, 0, c1 - c0);
    return;
  }
  const int64_t c = row / taps, ki = row % taps / g.kw, kj = row % g.kw;
  const uint8_t* plane = src + c * g.h * g.w;
  const __m512i fv = _mm512_set1_epi8(static_cast<char>(flip));
  if (taps == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0 &&
      g.oh == g.h && g.ow == g.w) {
    // 1x1, stride 1, no padding: output column p reads X's pixel p, one contiguous run.
    const int64_t end = std::min(c1, p);
    for (int64_t o = c0; o < end; o += 64) {
      const __mmask64 m = end - o >= 64 ? ~__mmask64{0} : (__mmask64{1} << (end - o)) - 1;
      _mm512_mask_storeu_epi8(dst + (o - c0), m,
                              _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, plane + o), fv));
    }
    if (end < c1) std::memset(dst + std::max<int64_t>(end - c0, 0), 0, c1 - std::max(end, c0));
    return;
  }
  // Output columns whose input column lies inside the image: iw = ow*sw - pw + kj*dw in [0, w).
  const int64_t off = kj * g.dil_w - g.pad_w;
  int64_t lo = 0, hi = g.ow;
  while (lo < g.ow && lo * g.stride_w + off < 0) ++lo;
  while (hi > lo && (hi - 1) * g.stride_w + off >= g.w) --hi;
  const __m512i pv = _mm512_set1_epi8(static_cast<char>(pad));
  int64_t col = std::min(c0, p);
  if (c0 >= p) {
    std::memset(dst, 0, c1 - c0);
    return;
  }
  while (col < c1 && col < p) {
    const int64_t oh = col / g.ow, ow0 = col % g.ow;
    const int64_t ow1 = std::min(g.ow, ow0 + (std::min(c1, p) - col));
    uint8_t* d = dst + (col - c0);  // d[i] is output column ow0 + i
    const int64_t ih = oh * g.stride_h - g.pad_h + ki * g.dil_h;
    const int64_t a = std::max(ow0, lo), b = std::min(ow1, hi);
    if (ih < 0 || ih >= g.h || a >= b) {
      FillBytes(d, ow1 - ow0, pv);
    } else {
      const uint8_t* s = plane + ih * g.w;
      FillBytes(d, a - ow0, pv);
      if (g.stride_w == 1) {
        for (int64_t o = a; o < b; o += 64) {
          const __mmask64 m = b - o >= 64 ? ~__mmask64{0} : (__mmask64{1} << (b - o)) - 1;
          const __m512i v = _mm512_maskz_loadu_epi8(m, s + o + off);
          _mm512_mask_storeu_epi8(d + (o - ow0), m, _mm512_xor_si512(v, fv));
        }
      } else if (g.stride_w == 2) {
        // Even bytes of 64: vpmovwb keeps each 16-bit word's low byte. The mask stops at the
        // last byte read, (o + n - 1) * 2 + off, inside the row.
        for (int64_t o = a; o < b; o += 32) {
          const int64_t n = std::min<int64_t>(32, b - o);
          const __mmask64 m = (__mmask64{1} << (2 * n - 1)) - 1;
          const __m512i v = _mm512_maskz_loadu_epi8(m, s + 2 * o + off);
          const __m256i e = _mm256_xor_si256(_mm512_cvtepi16_epi8(v), _mm512_castsi512_si256(fv));
          _mm256_mask_storeu_epi8(d + (o - ow0), static_cast<__mmask32>((uint64_t{1} << n) - 1), e);
        }
      } else {
        for (int64_t o = a; o < b; ++o) d[o - ow0] = s[o * g.stride_w + off] ^ flip;
      }
      FillBytes(d + (b - ow0), ow1 - b, pv);
    }
    col += ow1 - ow0;
  }
  if (col < c1) std::memset(dst + (col - c0), 0, c1 - col);
}

}  // namespace

void QuantizeLinearRun(DataType xt, const void* x, int64_t n, const float* scale, const int32_t* zp,
                       bool per_element, DataType yt, void* y) {
  using enum DataType;
  WithType<kF32, kF16, kBF16>(xt, [&](auto X) {
    WithType<kU8, kI8, kU16, kI16>(yt, [&](auto Y) {
      WithBool(per_element,
               [&](auto kPerElement) { QuantizeLoop<X, Y, kPerElement>(x, n, scale, zp, y); });
    });
  });
}

void DequantizeLinearRun(DataType xt, const void* x, int64_t n, const float* scale,
                         const int32_t* zp, bool per_element, DataType yt, void* y) {
  using enum DataType;
  if (xt == kI32) {
    WithType<kF32, kF16, kBF16>(yt, [&](auto Y) {
      WithBool(per_element, [&](auto kPerElement) {
        DequantizeI32<Y, kPerElement>(static_cast<const int32_t*>(x), n, scale, zp, y);
      });
    });
    return;
  }
  WithType<kU8, kI8, kU16, kI16, kI32>(xt, [&](auto X) {
    WithType<kF32, kF16, kBF16>(yt, [&](auto Y) {
      WithBool(per_element,
               [&](auto kPerElement) { DequantizeLoop<X, Y, kPerElement>(x, n, scale, zp, y); });
    });
  });
}

void MinMaxWithZero(const float* x, int64_t n, float* lo, float* hi) {
  // min(x, lo) is x < lo ? x : lo and max(x, hi) is x > hi ? x : hi, the reference's std::min /
  // std::max with the running value first; lanes start at +0 as the reference does, so a -0
  // never replaces it, and the lane order cannot change the result.
  __m512 vlo = _mm512_setzero_ps(), vhi = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    vlo = _mm512_min_ps(v, vlo);
    vhi = _mm512_max_ps(v, vhi);
  }
  alignas(64) float l[16], h[16];
  _mm512_store_ps(l, vlo);
  _mm512_store_ps(h, vhi);
  float a = 0.0f, b = 0.0f;
  for (int i = 0; i < 16; ++i) {
    a = l[i] < a ? l[i] : a;
    b = h[i] > b ? h[i] : b;
  }
  *lo = a;
  *hi = b;
}

void DynamicQuantizeU8(const float* x, int64_t n, float scale, float zp, uint8_t* y) {
  Pieces(n, [&](int64_t begin, int64_t end) {
    const __m512 s = _mm512_set1_ps(scale), z = _mm512_set1_ps(zp);
    for (int64_t i = begin; i < end; i += 16) {
      const __mmask16 m = LaneMask(end - i);
      const __m512 q = _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i), s);
      __m512 v =
          _mm512_add_ps(_mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), z);
      // max(v, 0) is v > 0 ? v : 0 (NaN and -0 give 0), then min(v, 255): SaturateU8.
      v = _mm512_min_ps(_mm512_max_ps(v, _mm512_setzero_ps()), _mm512_set1_ps(255.0f));
      // Full blocks stored unmasked (ScaledLoop says why).
      if (m == 0xFFFF) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                         _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)));
      } else {
        _mm512_mask_cvtepi32_storeu_epi8(y + i, m, _mm512_cvttps_epi32(v));
      }
    }
  });
}

void PackBInt8(const void* b, bool b_signed, int64_t k, int64_t n, int64_t rs, uint8_t* packed,
               int32_t* col_sums) {
  const int64_t kp = Int8KPadded(k), np = (n + 15) / 16 * 16;
  std::vector<uint8_t> rows(static_cast<size_t>(kp * np), 0);
  const uint8_t flip = b_signed ? 0 : 0x80;  // uint8 b - 128 as int8 bits
  const uint8_t* src = static_cast<const uint8_t*>(b);
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < n; ++j) rows[i * np + j] = src[i * rs + j] ^ flip;
  }
  PackRows(rows.data(), kp, np, n, packed, col_sums);
}

void PackAInt8(const void* a, bool a_signed, int64_t m, int64_t k, int64_t rs, uint8_t* out,
               int32_t* row_sums) {
  const int64_t kp = Int8KPadded(k);
  const uint8_t flip = a_signed ? 0x80 : 0;  // int8 a + 128 as uint8 bits
  const uint8_t* src = static_cast<const uint8_t*>(a);
  for (int64_t i = 0; i < m; ++i) {
    int32_t sum = 0;
    uint8_t* dst = out + i * kp;
    for (int64_t j = 0; j < k; ++j) {
      dst[j] = src[i * rs + j] ^ flip;
      sum += dst[j];
    }
    for (int64_t j = k; j < kp; ++j) dst[j] = 0;
    row_sums[i] = sum;
  }
}

void Im2ColPackInt8(const void* x, bool x_signed, const Int8ConvGeometry& g, int8_t pad_value,
                    uint8_t* packed, int32_t* col_sums) {
  const int64_t k = g.channels * g.kh * g.kw, kb_count = Int8KPadded(k) / 4;
  const int64_t p = g.oh * g.ow, panels = (p + 15) / 16;
  const uint8_t flip = x_signed ? 0 : 0x80;
  const uint8_t pad = static_cast<uint8_t>(pad_value);
  const auto* src = static_cast<const uint8_t*>(x);
  // Chunks of kChunk panels: 4 im2col rows of a chunk's columns (4 KiB, in L1) are built, then
  // interleaved into its panels, for each group of 4 k; the column sums stay in L1 meanwhile.
  // On the threads, at least two chunks per thread (a 41-panel operand in 3 chunks of 16 would
  // leave one of 2 threads a third of the work).
  constexpr int64_t kChunk = 16;
  const int threads = omp_get_max_threads();
  const bool parallel = kb_count * panels * 64 >= (int64_t{1} << 18) && threads > 1;
  const int64_t per =
      parallel ? std::clamp<int64_t>((panels + 2 * threads - 1) / (2 * threads), 1, kChunk)
               : kChunk;
  const int64_t chunks = (panels + per - 1) / per;
  ParallelFor(chunks, parallel && chunks > 1, [&](int64_t ch_begin, int64_t ch_end) {
    for (int64_t ch = ch_begin; ch < ch_end; ++ch) {
      const int64_t p0 = ch * per, p1 = std::min(panels, p0 + per);
      const int64_t c0 = p0 * 16, c1 = p1 * 16;
      alignas(64) uint8_t rows[4][kChunk * 16];
      __m512i sums[kChunk];
      for (int64_t q = 0; q < p1 - p0; ++q) sums[q] = _mm512_setzero_si512();
      const __m512i ones = _mm512_set1_epi8(1);
      for (int64_t kb = 0; kb < kb_count; ++kb) {
        for (int r = 0; r < 4; ++r) Im2ColRowRange(src, g, 4 * kb + r, c0, c1, flip, pad, rows[r]);
        for (int64_t q = 0; q < p1 - p0; ++q) {
          uint8_t* dst = packed + (p0 + q) * kb_count * 64 + kb * 64;
          sums[q] = _mm512_dpbusd_epi32(sums[q], ones,
                                        Interleave4x16(rows[0] + q * 16, rows[1] + q * 16,
                                                       rows[2] + q * 16, rows[3] + q * 16, dst));
        }
      }
      for (int64_t q = 0; q < p1 - p0; ++q) {
        _mm512_mask_storeu_epi32(col_sums + (p0 + q) * 16, LaneMask(p - (p0 + q) * 16), sums[q]);
      }
    }
  });
}

void GemmInt8(const GemmInt8Args& g) {
  if (g.m <= 0 || g.n <= 0) return;
  const int64_t panels = (g.n + 15) / 16;
  const int64_t groups = (panels + kNr - 1) / kNr, mtiles = (g.m + kMr - 1) / kMr;
  const int64_t tiles = groups * mtiles;
  const bool parallel = g.m * g.n * std::max<int64_t>(g.k, 1) >= (int64_t{1} << 21) && tiles > 1;
  // Consecutive tiles share a B panel group (kept in L2 while the row tiles pass over it).
  ParallelFor(tiles, parallel, [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t gi = t / mtiles, i0 = t % mtiles * kMr, p0 = gi * kNr;
      const int mr = static_cast<int>(std::min<int64_t>(kMr, g.m - i0));
      const int nr = static_cast<int>(std::min<int64_t>(kNr, panels - p0));
      TileFor(mr, nr)(g, i0, p0);
    }
  });
}

}  // namespace kiln::kernels::cpu::avx512
