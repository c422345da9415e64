// AVX-512 quantization kernels: QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear loops
// and the AVX512-VNNI integer GEMM under MatMulInteger and ConvInteger. Defined in
// quant_avx512.cc; call only when the CPU has the kAvx512 features, plus kCpuAvx512Bf16 for
// bfloat16 outputs and kCpuAvx512Vnni for the integer GEMM. The kernel classes are in
// quant_ops.cc and quant_integer_ops.cc.
//
// Every function gives the reference kernels' numbers to the bit (cpu/ref/indexing_quant.cc,
// cpu/ref/data_ops_numeric.cc, cpu/ref/quant_integer.cc): the same IEEE operations in the same
// order per element, and exact integer sums modulo 2^32 for the GEMM.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {

/// y[i] = saturate(round_half_even(x[i] / s) + z) for i < n, where (s, z) = (scale[0], zp[0])
/// or, with `per_element`, (scale[i], zp[i]). x is kF32, kF16 or kBF16 (widened exactly), the
/// division is fp32, NaN quantizes to z, y is kU8, kI8, kU16 or kI16. As QuantizeImpl in
/// cpu/ref/indexing_quant.cc.
void QuantizeLinearRun(DataType xt, const void* x, int64_t n, const float* scale, const int32_t* zp,
                       bool per_element, DataType yt, void* y);

/// y[i] = round_to_Y(float(x[i] - z) * s) (or, for kI32 x, the product in double, rounded to
/// fp32 and then to Y, as the reference's Store<Y>(double)); (s, z) as QuantizeLinearRun. x is
/// kU8, kI8, kU16, kI16 or kI32, y kF32, kF16 or kBF16 (needs kCpuAvx512Bf16).
void DequantizeLinearRun(DataType xt, const void* x, int64_t n, const float* scale,
                         const int32_t* zp, bool per_element, DataType yt, void* y);

/// lo = min(0, min x), hi = max(0, max x) with the reference's comparisons (NaN never taken).
void MinMaxWithZero(const float* x, int64_t n, float* lo, float* hi);

/// y[i] = clamp(round_half_even(x[i] / scale) + zp, 0, 255) in fp32, NaN -> 0 (the reference
/// DynamicQuantizeLinear's SaturateU8).
void DynamicQuantizeU8(const float* x, int64_t n, float scale, float zp, uint8_t* y);

// ---- integer GEMM (AVX512-VNNI, vpdpbusd: unsigned bytes times signed bytes) ----------------
//
// Y[i][j] = sum_k (A[i][k] - za[i]) * (B[k][j] - zb[j]) modulo 2^32, computed as
//   D[i][j] - zb[j] * RA[i] - za[i] * (CB[j] - K * zb[j]),   D = sum_k A B,
// with A stored as uint8 (an int8 operand plus 128, its zero point plus 128) and B as int8 (a
// uint8 operand minus 128, its zero point minus 128), RA the row sums of stored A and CB the
// column sums of stored B. Every identity is exact modulo 2^32, which is what the reference's
// int32 wrap-around gives.

/// K rounded up to a multiple of 4 (the bytes one vpdpbusd lane sums).
inline int64_t Int8KPadded(int64_t k) { return (k + 3) / 4 * 4; }
/// Bytes of B [K, N] packed for GemmInt8: panels of 16 columns, each K/4 groups of 64 bytes
/// (16 columns x 4 consecutive k).
inline int64_t Int8PackedBBytes(int64_t k, int64_t n) {
  return Int8KPadded(k) * ((n + 15) / 16 * 16);
}

/// Packs B [K, N] (row stride `rs` elements; int8 when `b_signed`, else uint8 stored minus 128)
/// into `packed` (Int8PackedBBytes) and writes its column sums of stored values to `col_sums`
/// [N].
void PackBInt8(const void* b, bool b_signed, int64_t k, int64_t n, int64_t rs, uint8_t* packed,
               int32_t* col_sums);

/// Copies A [M, K] (row stride `rs`; uint8, or int8 stored plus 128 when `a_signed`) into `out`
/// [M, Int8KPadded(K)] (zero padding) and writes its row sums of stored values to `row_sums`.
void PackAInt8(const void* a, bool a_signed, int64_t m, int64_t k, int64_t rs, uint8_t* out,
               int32_t* row_sums);

/// One integer convolution's B operand (im2col) packed for GemmInt8: B[k][p] with k = (c, ki,
/// kj) over `channels` x kh x kw and p the oh x ow outputs, read from x [channels, h, w] (int8,
/// or uint8 stored minus 128 unless `x_signed`); taps in the padding read `pad_value` (X's
/// stored zero point, so they add nothing). Built 4 rows of 256 columns at a time straight into
/// `packed` (Int8PackedBBytes(K, P)), no full im2col matrix. Writes the column sums of stored
/// values to `col_sums` [P].
struct Int8ConvGeometry {
  int64_t channels, h, w, kh, kw, oh, ow;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
};
void Im2ColPackInt8(const void* x, bool x_signed, const Int8ConvGeometry& g, int8_t pad_value,
                    uint8_t* packed, int32_t* col_sums);

/// The operands of GemmInt8.
struct GemmInt8Args {
  int64_t m = 0, n = 0, k = 0;
  const uint8_t* a = nullptr;         // [M, Int8KPadded(K)], PackAInt8
  const uint8_t* b = nullptr;         // PackBInt8 / Im2ColPackInt8
  const int32_t* row_sums = nullptr;  // [M]
  const int32_t* col_sums = nullptr;  // [N]
  const int32_t* za = nullptr;        // [M] stored zero points of A's rows
  const int32_t* zb = nullptr;        // [N] stored zero points of B's columns
  int32_t* y = nullptr;
  int64_t y_rs = 0;
  // Optional output stage (ConvIntegerToFloat): with row_scale [M], y holds fp32 values
  // float(Y[i][j] [+ row_bias[i]]) * row_scale[i] (int32 add wrapping, conversion rounding to
  // nearest even, fp32 product) in place of the int32 sums; row_bias [M] may be null.
  const int32_t* row_bias = nullptr;
  const float* row_scale = nullptr;
  // The same per column (MatMulIntegerToFloat), when row_scale is null: with col_scale [N], y
  // holds float(Y[i][j] [+ col_bias[j]]) * col_scale[j]; col_bias [N] may be null.
  const int32_t* col_bias = nullptr;
  const float* col_scale = nullptr;
};

/// Y = (A - za)(B - zb) as described above, on the OpenMP threads when large enough (needs
/// kCpuAvx512Vnni).
void GemmInt8(const GemmInt8Args& g);

}  // namespace kiln::kernels::cpu::avx512
