// Helpers of the accuracy analysis shared by its files (analysis.cc, analysis_fused.cc); not part
// of analysis.h's interface.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/common/dtype.h"
#include "engine/ir/tensor.h"

namespace kiln::report::analysis_internal {

/// `t` converted to floating `dtype` through f32 (a copy; `t` itself when the dtypes agree).
absl::StatusOr<ir::Tensor> Converted(const ir::Tensor& t, DataType dtype);

/// Whether engine value `value_name` holds its ONNX tensor channels-last (NHWC).
bool ChannelsLastValue(const std::string& value_name);

/// Whether every tensor of `a` is bit for bit the tensor of `b` at its position (same dtype and
/// dims, same bytes; both absent counts as equal).
bool SameBits(const std::vector<const ir::Tensor*>& a, const std::vector<const ir::Tensor*>& b);

}  // namespace kiln::report::analysis_internal
