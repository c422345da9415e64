// 16-lane conversions shared by the AVX-512 files. Include only from `*_avx512.cc` files: every
// function is `static` so that each of those files keeps its own copy (internal linkage) and none
// can be picked by the linker for code compiled without AVX-512.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// 16 fp16 -> fp32. vcvtph2ps quiets signalling NaNs; half.h keeps the payload as it is
// (sign | 0x7f800000 | mant << 13), so NaN lanes are rebuilt with integer ops. The NaN test
// reads the 16-bit words themselves (AVX512BW/VL), so the common path is one conversion and
// one compare.
static inline __m512 HalfToFloat16(__m256i h) {
  __m512 f = _mm512_cvtph_ps(h);
  __mmask16 nan = _mm256_cmpgt_epu16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)),
                                          _mm256_set1_epi16(0x7c00));
  if (nan) {
    __m512i w = _mm512_cvtepu16_epi32(h);
    __m512i bits = _mm512_or_si512(
        _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x8000)), 16),
        _mm512_or_si512(_mm512_set1_epi32(0x7f800000),
                        _mm512_slli_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0x3ff)), 13)));
    f = _mm512_mask_mov_ps(f, nan, _mm512_castsi512_ps(bits));
  }
  return f;
}

// 16 fp32 -> fp16 with round to nearest even (vcvtps2ph; MXCSR is not consulted for rounding
// with an explicit mode, and Kiln never sets DAZ). NaN: sign | 0x7e00 | mant >> 13, as half.h.
static inline __m256i FloatToHalf16(__m512 f) {
  return _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// 16 bf16 -> fp32 (exact: a shift).
static inline __m512 Bf16ToFloat16(__m256i b) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}

// 16 fp32 -> bf16, round to nearest even. vcvtneps2bf16 rounds like half.h and quiets NaN the
// same way (x >> 16 | 0x40), but treats subnormal inputs as zero; those lanes are rounded with
// the integer formula of half.h instead (x + 0x7fff + lsb) >> 16.
static inline __m256i FloatToBf16x16(__m512 f) {
  __m256i r = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(f));
  __m512i x = _mm512_castps_si512(f);
  __m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
  __mmask16 sub = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(abs, _mm512_set1_epi32(1)),
                                          _mm512_set1_epi32(0x007fffff));
  if (sub) {
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
    r = _mm256_mask_mov_epi16(r, sub, _mm512_cvtepi32_epi16(rounded));
  }
  return r;
}

// The mask of the first min(left, 16) lanes (none when left <= 0).
static inline __mmask16 LaneMask(int64_t left) {
  if (left <= 0) return 0;
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}

// Elements i .. i+15 (lanes of mask m; the others 0) of a `T` array as fp32: exact widening.
template <DataType T>
static inline __m512 Load16(const void* p, int64_t i, __mmask16 m) {
  if constexpr (T == DataType::kF32) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
  } else {
    const __m256i raw = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i);
    return T == DataType::kF16 ? HalfToFloat16(raw) : Bf16ToFloat16(raw);
  }
}

// Lanes m of v into elements i .. i+15 of a `T` array, rounded to T as half.h rounds.
template <DataType T>
static inline void Store16(void* p, int64_t i, __mmask16 m, __m512 v) {
  if constexpr (T == DataType::kF32) {
    _mm512_mask_storeu_ps(static_cast<float*>(p) + i, m, v);
  } else {
    const __m256i raw = T == DataType::kF16 ? FloatToHalf16(v) : FloatToBf16x16(v);
    _mm256_mask_storeu_epi16(static_cast<uint16_t*>(p) + i, m, raw);
  }
}

// Elements i .. i+15 of a `T` array as fp32, all 16 lanes: the main loops' load (Load16 with
// every lane, unmasked).
template <DataType T>
static inline __m512 LoadFull16(const void* p, int64_t i) {
  if constexpr (T == DataType::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    const __m256i raw =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i));
    return T == DataType::kF16 ? HalfToFloat16(raw) : Bf16ToFloat16(raw);
  }
}

// v into elements i .. i+15 of a `T` array, rounded as Store16, all 16 lanes: the main loops'
// store. Unmasked on purpose: on Zen 5 a masked store to a line not yet in cache costs about
// twice a plain one (a same-shape Add of 3.7 MB tensors, destination cold: 0.31 ms masked,
// 0.16 ms plain), and the outputs of run-time-sized tensors are often cold.
template <DataType T>
static inline void StoreFull16(void* p, int64_t i, __m512 v) {
  if constexpr (T == DataType::kF32) {
    _mm512_storeu_ps(static_cast<float*>(p) + i, v);
  } else {
    const __m256i raw = T == DataType::kF16 ? FloatToHalf16(v) : FloatToBf16x16(v);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(p) + i), raw);
  }
}

}  // namespace
}  // namespace kiln::kernels::cpu::avx512
