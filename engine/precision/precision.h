// Floating precisions of DESIGN.md §5 and their order.
#pragma once

#include <optional>

#include "absl/strings/string_view.h"
#include "engine/common/dtype.h"

namespace kiln::precision {

/// A floating precision a node can be assigned.
enum class Precision { kFp32, kFp16, kBf16 };

/// "fp32", "fp16", "bf16".
const char* PrecisionName(Precision p);

/// Parses "fp32" | "fp16" | "bf16" (also "float32"/"float16"/"bfloat16").
std::optional<Precision> ParsePrecision(absl::string_view s);

/// The storage dtype of a precision.
DataType PrecisionDataType(Precision p);

/// The precision of a floating dtype (f64 counts as fp32: Kiln never lowers it further than
/// asked); nullopt for non-floating dtypes.
std::optional<Precision> PrecisionOfDataType(DataType t);

/// True when every value of precision `b` is exactly representable in `a` (a is at least as
/// precise as b): fp32 >= fp16, fp32 >= bf16, and each >= itself. fp16 and bf16 are not ordered.
bool AtLeast(Precision a, Precision b);

/// The lowest precision that is AtLeast both (fp32 when fp16 and bf16 meet).
Precision Join(Precision a, Precision b);

}  // namespace kiln::precision
