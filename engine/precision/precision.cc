#include "engine/precision/precision.h"

namespace kiln::precision {

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kFp16:
      return "fp16";
    case Precision::kBf16:
      return "bf16";
  }
  return "?";
}

std::optional<Precision> ParsePrecision(absl::string_view s) {
  if (s == "fp32" || s == "float32") return Precision::kFp32;
  if (s == "fp16" || s == "float16") return Precision::kFp16;
  if (s == "bf16" || s == "bfloat16") return Precision::kBf16;
  return std::nullopt;
}

DataType PrecisionDataType(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return DataType::kF32;
    case Precision::kFp16:
      return DataType::kF16;
    case Precision::kBf16:
      return DataType::kBF16;
  }
  return DataType::kF32;
}

std::optional<Precision> PrecisionOfDataType(DataType t) {
  switch (t) {
    case DataType::kF32:
    case DataType::kF64:
      return Precision::kFp32;
    case DataType::kF16:
      return Precision::kFp16;
    case DataType::kBF16:
      return Precision::kBf16;
    default:
      return std::nullopt;
  }
}

bool AtLeast(Precision a, Precision b) { return a == b || a == Precision::kFp32; }

Precision Join(Precision a, Precision b) { return a == b ? a : Precision::kFp32; }

}  // namespace kiln::precision
