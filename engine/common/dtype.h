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
};

/// Lower-case short name ("f32", "bf16", ...), as shown in logs, inspect and reports.
const char* DataTypeName(DataType t);

/// The ONNX spelling ("float", "float16", "int64", ...).
const char* DataTypeOnnxName(DataType t);

/// Bytes per element; 0 for kUndefined and kString (not a fixed-size type).
size_t DataTypeSize(DataType t);

/// True for kF32, kF16, kBF16, kF64.
bool IsFloating(DataType t);

/// True for kF32, kF16, kBF16: the storage types of the fast (AVX-512) float kernels, which
/// compute in fp32.
bool IsF32OrHalf(DataType t);

/// True for the signed and unsigned integer types (not bool).
bool IsInteger(DataType t);

/// Converts an ONNX data_type number; returns kUndefined for values Kiln does not know.
DataType DataTypeFromOnnx(int32_t onnx_type);

/// The ONNX spelling of any TensorProto.DataType number, including the types Kiln has no
/// DataType for ("float8e4m3fn", "int4", "float4e2m1", "int2", "complex64", ...), so that an
/// "unsupported dtype" error names the type; "number N" for a value ONNX does not define.
std::string OnnxDataTypeName(int32_t onnx_type);

}  // namespace kiln
