// Scalar conversions of the low-bit element types (float8 x5, float4e2m1, int4, uint4, int2,
// uint2) and ONNX's packed layout of the 4-bit and 2-bit ones. The one place these rules live:
// Cast, CastLike, QuantizeLinear, DequantizeLinear, ir::ElementAsDouble and the TensorProto
// boundary all call these functions.
//
// Storage inside Kiln (dtype.h): one element per byte. int4/int2 are sign-extended int8 bytes,
// uint4/uint2 uint8 bytes, float4e2m1 its 4-bit code in the low bits, float8 its byte. Decoders
// read only the element's own bits (a stray high bit cannot change a value).
//
// Encoding rules (ONNX Cast, opset 19-25):
// - float8 e4m3fn/e4m3fnuz/e5m2/e5m2fnuz and float4e2m1 round to nearest even. With `saturate`
//   a value whose rounding exceeds the largest finite value (and +-inf) gives +-max; without it,
//   e5m2 gives +-inf and the others NaN. NaN gives NaN (fnuz: 0x80, the only NaN; fn: 0x7f with
//   the sign). The fnuz types have no -0: -0 and negatives that round to zero give +0.
//   float4e2m1 has neither NaN nor inf: it always saturates, and NaN gives 0x8 (-0), the code
//   the ONNX reference (ml_dtypes) writes for a positive NaN (the value is a zero either way).
// - float8e8m0 (a power of two 2^(code-127), 0xff NaN) keeps the exponent of the value rounded
//   to float32 (the sign is ignored), rounding by Cast's `round_mode` as the ONNX reference does;
//   NaN and inf give 0xff; with `saturate` the exponent never rounds from 0xfe up to 0xff.
// - int4/uint4/int2/uint2: Cast wraps (two's complement truncation to the low bits, as for the
//   other integer casts); QuantizeLinear saturates to the type's range.
#pragma once

#include <cstdint>
#include <utility>

#include "engine/common/dtype.h"

namespace kiln {

/// Rounding of a conversion to float8e8m0 (Cast's `round_mode` attribute, opset 24; "up" is the
/// default).
enum class E8M0Rounding { kUp, kDown, kNearest };

/// The value of one element byte of low-bit type `t` (exact: every low-bit value is a double).
/// int4/int2 read their low bits sign-extended, uint4/uint2 and float4e2m1 their low bits.
/// Returns 0 for a type that is not low-bit.
double LowBitToDouble(DataType t, uint8_t byte);

/// Encodes `v` as float8 e4m3fn/e4m3fnuz/e5m2/e5m2fnuz or float4e2m1 (`t`), rounding to nearest
/// even, with the saturate rules above. Every float, float16 and bfloat16 value is exact in
/// double, so converting through this function rounds once.
uint8_t EncodeMiniFloat(DataType t, double v, bool saturate);

/// Encodes `v` as float8e8m0 (after rounding it to float32, as the ONNX reference does).
uint8_t EncodeE8M0(float v, bool saturate, E8M0Rounding rounding);

/// Inclusive range of int4 [-8, 7], uint4 [0, 15], int2 [-2, 1], uint2 [0, 3]; {0, 0} otherwise.
std::pair<int64_t, int64_t> LowBitIntRange(DataType t);

/// `v` wrapped into int4/uint4/int2/uint2 (its low 4 or 2 bits, two's complement), as stored.
uint8_t WrapLowBitInt(DataType t, int64_t v);

/// `v` clamped to the range of int4/uint4/int2/uint2, as stored.
uint8_t SaturateLowBitInt(DataType t, int64_t v);

/// Bits per element of ONNX's packed layout: 4 (int4, uint4, float4e2m1), 2 (int2, uint2), or 0
/// for every type stored one element per byte or wider (the float8 types included).
int PackedBits(DataType t);

/// Bytes of `n` elements of `t` in ONNX's layout: ceil(n * bits / 8) for the packed types,
/// n * DataTypeSize(t) otherwise. `n` must be non-negative and n * DataTypeSize(t) must not
/// overflow.
int64_t OnnxPayloadBytes(DataType t, int64_t n);

/// The byte Kiln stores for the element whose ONNX bits are the low PackedBits(t) bits of
/// `code`: sign-extended for int4/int2, zero-extended for uint4/uint2/float4e2m1; `code` itself
/// for every type that is not packed.
uint8_t LowBitStorageByte(DataType t, uint8_t code);

/// Packs `n` elements (one per byte, as Kiln stores them) of a packed type into
/// OnnxPayloadBytes(t, n) bytes: element i goes to byte i / k at bit (i % k) * bits (k = 8 /
/// bits), the first element in the low bits; unused high bits of the last byte are 0.
void PackLowBit(DataType t, const uint8_t* elements, int64_t n, uint8_t* packed);

/// The inverse of PackLowBit: int4/int2 elements come out sign-extended, uint4/uint2/float4e2m1
/// as their codes.
void UnpackLowBit(DataType t, const uint8_t* packed, int64_t n, uint8_t* elements);

}  // namespace kiln
