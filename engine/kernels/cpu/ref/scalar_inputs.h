// Reading the scalar operands and 0/1 flags of the signal and detection kernels (DFT's
// dft_length, STFT's frame_step, a window's size, NonMaxSuppression's thresholds, ...). Errors
// name the node and the operand.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::ref {

/// A scalar integer operand (int32 or int64, 0-D or of one element).
inline absl::StatusOr<int64_t> ReadScalarInt(const ir::Node& node, const ir::Tensor& t,
                                             const char* what) {
  if (t.rank() > 1 || t.num_elements() != 1) {
    return InvalidNode(node, what, " must be a scalar, got shape ", ir::DimsToString(t.dims()));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> v, ReadInts(node, t, what));
  return v[0];
}

/// A scalar floating operand (any float dtype, 0-D or of one element), as a double.
inline absl::StatusOr<double> ReadScalarFloat(const ir::Node& node, const ir::Tensor& t,
                                              const char* what) {
  if (!IsFloating(t.dtype())) {
    return InvalidNode(node, what, " must be a floating tensor, got ", DataTypeOnnxName(t.dtype()));
  }
  if (t.rank() > 1 || t.num_elements() != 1) {
    return InvalidNode(node, what, " must be a scalar, got shape ", ir::DimsToString(t.dims()));
  }
  return ir::ElementAsDouble(t, 0);
}

/// An int attribute that must be 0 or 1.
inline absl::StatusOr<bool> ReadFlagAttr(const ir::Node& node, const char* name, int64_t dflt) {
  const int64_t v = node.GetInt(name, dflt);
  if (v != 0 && v != 1) return InvalidNode(node, "attribute '", name, "' must be 0 or 1, got ", v);
  return v == 1;
}

}  // namespace kiln::kernels::cpu::ref
