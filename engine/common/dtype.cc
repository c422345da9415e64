#include "engine/common/dtype.h"

namespace kiln {

const char* DataTypeName(DataType t) {
  switch (t) {
    case DataType::kF32:
      return "f32";
    case DataType::kU8:
      return "u8";
    case DataType::kI8:
      return "i8";
    case DataType::kU16:
      return "u16";
    case DataType::kI16:
      return "i16";
    case DataType::kI32:
      return "i32";
    case DataType::kI64:
      return "i64";
    case DataType::kString:
      return "string";
    case DataType::kBool:
      return "bool";
    case DataType::kF16:
      return "f16";
    case DataType::kF64:
      return "f64";
    case DataType::kU32:
      return "u32";
    case DataType::kU64:
      return "u64";
    case DataType::kBF16:
      return "bf16";
    case DataType::kF8E4M3FN:
      return "f8e4m3fn";
    case DataType::kF8E4M3FNUZ:
      return "f8e4m3fnuz";
    case DataType::kF8E5M2:
      return "f8e5m2";
    case DataType::kF8E5M2FNUZ:
      return "f8e5m2fnuz";
    case DataType::kU4:
      return "u4";
    case DataType::kI4:
      return "i4";
    case DataType::kF4E2M1:
      return "f4e2m1";
    case DataType::kF8E8M0:
      return "f8e8m0";
    case DataType::kU2:
      return "u2";
    case DataType::kI2:
      return "i2";
    case DataType::kUndefined:
      break;
  }
  return "undefined";
}

const char* DataTypeOnnxName(DataType t) {
  switch (t) {
    case DataType::kF32:
      return "float";
    case DataType::kU8:
      return "uint8";
    case DataType::kI8:
      return "int8";
    case DataType::kU16:
      return "uint16";
    case DataType::kI16:
      return "int16";
    case DataType::kI32:
      return "int32";
    case DataType::kI64:
      return "int64";
    case DataType::kString:
      return "string";
    case DataType::kBool:
      return "bool";
    case DataType::kF16:
      return "float16";
    case DataType::kF64:
      return "double";
    case DataType::kU32:
      return "uint32";
    case DataType::kU64:
      return "uint64";
    case DataType::kBF16:
      return "bfloat16";
    case DataType::kF8E4M3FN:
      return "float8e4m3fn";
    case DataType::kF8E4M3FNUZ:
      return "float8e4m3fnuz";
    case DataType::kF8E5M2:
      return "float8e5m2";
    case DataType::kF8E5M2FNUZ:
      return "float8e5m2fnuz";
    case DataType::kU4:
      return "uint4";
    case DataType::kI4:
      return "int4";
    case DataType::kF4E2M1:
      return "float4e2m1";
    case DataType::kF8E8M0:
      return "float8e8m0";
    case DataType::kU2:
      return "uint2";
    case DataType::kI2:
      return "int2";
    case DataType::kUndefined:
      break;
  }
  return "undefined";
}

size_t DataTypeSize(DataType t) {
  switch (t) {
    case DataType::kU8:
    case DataType::kI8:
    case DataType::kBool:
      return 1;
    case DataType::kF8E4M3FN:
    case DataType::kF8E4M3FNUZ:
    case DataType::kF8E5M2:
    case DataType::kF8E5M2FNUZ:
    case DataType::kU4:
    case DataType::kI4:
    case DataType::kF4E2M1:
    case DataType::kF8E8M0:
    case DataType::kU2:
    case DataType::kI2:
      return 1;  // one element per byte inside Kiln (dtype.h)
    case DataType::kU16:
    case DataType::kI16:
    case DataType::kF16:
    case DataType::kBF16:
      return 2;
    case DataType::kF32:
    case DataType::kI32:
    case DataType::kU32:
      return 4;
    case DataType::kI64:
    case DataType::kU64:
    case DataType::kF64:
      return 8;
    case DataType::kString:
    case DataType::kUndefined:
      break;
  }
  return 0;
}

int DataTypeBits(DataType t) {
  switch (t) {
    case DataType::kU4:
    case DataType::kI4:
    case DataType::kF4E2M1:
      return 4;
    case DataType::kU2:
    case DataType::kI2:
      return 2;
    default:
      return static_cast<int>(8 * DataTypeSize(t));
  }
}

bool IsLowBit(DataType t) { return IsLowBitFloat(t) || IsLowBitInteger(t); }

bool IsLowBitFloat(DataType t) {
  switch (t) {
    case DataType::kF8E4M3FN:
    case DataType::kF8E4M3FNUZ:
    case DataType::kF8E5M2:
    case DataType::kF8E5M2FNUZ:
    case DataType::kF4E2M1:
    case DataType::kF8E8M0:
      return true;
    default:
      return false;
  }
}

bool IsLowBitInteger(DataType t) {
  return t == DataType::kU4 || t == DataType::kI4 || t == DataType::kU2 || t == DataType::kI2;
}

bool IsFloating(DataType t) {
  return t == DataType::kF32 || t == DataType::kF16 || t == DataType::kBF16 || t == DataType::kF64;
}

bool IsF32OrHalf(DataType t) {
  return t == DataType::kF32 || t == DataType::kF16 || t == DataType::kBF16;
}

bool IsInteger(DataType t) {
  switch (t) {
    case DataType::kU8:
    case DataType::kI8:
    case DataType::kU16:
    case DataType::kI16:
    case DataType::kI32:
    case DataType::kI64:
    case DataType::kU32:
    case DataType::kU64:
      return true;
    default:
      return false;
  }
}

DataType DataTypeFromOnnx(int32_t onnx_type) {
  switch (onnx_type) {
    case 1:
    case 2:
    case 3:
    case 4:
    case 5:
    case 6:
    case 7:
    case 8:
    case 9:
    case 10:
    case 11:
    case 12:
    case 13:
    case 16:
    case 17:
    case 18:
    case 19:
    case 20:
    case 21:
    case 22:
    case 23:
    case 24:
    case 25:
    case 26:
      return static_cast<DataType>(onnx_type);
    default:
      return DataType::kUndefined;
  }
}

std::string OnnxDataTypeName(int32_t onnx_type) {
  const DataType dt = DataTypeFromOnnx(onnx_type);
  if (dt != DataType::kUndefined) return DataTypeOnnxName(dt);
  // TensorProto.DataType values of onnx 1.23 that Kiln has no DataType for.
  switch (onnx_type) {
    case 0:
      return "undefined";
    case 14:
      return "complex64";
    case 15:
      return "complex128";
    case 27:
      return "float6e2m3";
    case 28:
      return "float6e3m2";
    default:
      return "number " + std::to_string(onnx_type);
  }
}

}  // namespace kiln
