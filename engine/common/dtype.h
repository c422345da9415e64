// Element types. Values equal ONNX TensorProto.DataType so conversion at the import boundary is a
// checked cast; nothing else in the engine depends on ONNX.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

/// Element type of a tensor (numbering of ONNX TensorProto.DataType).
enum class DataType : int32_t {
  kUndefined = 0,
  kF32 = 1,
  kU8 = 2,
  kI8 = 3,
  kU16 = 4,
  kI16 = 5,
  kI32 = 6,
  kI64 = 7,
  kString = 8,
  kBool = 9,
  kF16 = 10,
  kF64 = 11,
  kU32 = 12,
  kU64 = 13,
  kBF16 = 16,
  // Low-bit types. Inside Kiln every element takes one byte: int4/int2 sign-extended in an int8
  // byte, uint4/uint2 in a uint8 byte, float4e2m1 as its 4-bit code in the low bits, the float8
  // types as their byte. ONNX's packed layout (two 4-bit or four 2-bit elements per byte) exists
  // only at the TensorProto boundary (import/tensor_proto.cc); lowbit.h converts values.
  kF8E4M3FN = 17,
  kF8E4M3FNUZ = 18,
  kF8E5M2 = 19,
  kF8E5M2FNUZ = 20,
  kU4 = 21,
  kI4 = 22,
  kF4E2M1 = 23,
  kF8E8M0 = 24,
  kU2 = 25,
  kI2 = 26,
};

/// Lower-case short name ("f32", "bf16", ...), as shown in logs, inspect and reports.
const char* DataTypeName(DataType t);

/// The ONNX spelling ("float", "float16", "int64", ...).
const char* DataTypeOnnxName(DataType t);

/// Bytes per element inside Kiln; 0 for kUndefined and kString (not a fixed-size type). The
/// low-bit types take 1 (one element per byte; see DataTypeBits for their ONNX width).
size_t DataTypeSize(DataType t);

/// Bits per element in ONNX's own layout: 4 for int4/uint4/float4e2m1, 2 for int2/uint2,
/// 8 * DataTypeSize otherwise (bool 8). BitCast compares these widths.
int DataTypeBits(DataType t);

/// True for kF32, kF16, kBF16, kF64. False for the float8/float4 types: precision policies and
/// float kernels never take them (only Cast, CastLike, QuantizeLinear, DequantizeLinear and data
/// movement do).
bool IsFloating(DataType t);

/// True for the ten low-bit types (float8 x5, float4e2m1, int4, uint4, int2, uint2).
bool IsLowBit(DataType t);

/// True for the low-bit floating types: the four float8 of ONNX opset 19, float8e8m0 and
/// float4e2m1.
bool IsLowBitFloat(DataType t);

/// True for int4, uint4, int2, uint2.
bool IsLowBitInteger(DataType t);

/// True for kF32, kF16, kBF16: the storage types of the fast (AVX-512) float kernels, which
/// compute in fp32.
bool IsF32OrHalf(DataType t);

/// True for the signed and unsigned integer types of 8 bits or more (not bool, not int4/int2:
/// integer kernels never take those; see IsLowBitInteger).
bool IsInteger(DataType t);

/// Converts an ONNX data_type number; returns kUndefined for values Kiln does not know.
DataType DataTypeFromOnnx(int32_t onnx_type);

/// The ONNX spelling of any TensorProto.DataType number, including the types Kiln has no
/// DataType for ("complex64", "complex128", "float6e2m3", "float6e3m2"), so that an
/// "unsupported dtype" error names the type; "number N" for a value ONNX does not define.
std::string OnnxDataTypeName(int32_t onnx_type);

}  // namespace kiln
