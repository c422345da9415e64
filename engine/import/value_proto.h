// ONNX values that are not plain tensors, as the ONNX backend-test files and `kiln run` store
// them: a sequence of tensors is a serialized onnx.SequenceProto, an optional an
// onnx.OptionalProto (no value: elem_type UNDEFINED). Which one a file holds is not in its bytes:
// the graph's value kind says how to read it.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/ir/graph.h"
#include "engine/ir/tensor.h"

namespace kiln::import {

/// Parses a serialized value of `kind`: a TensorProto (kTensor), a SequenceProto of tensors
/// (kSequence), an OptionalProto of a tensor or a sequence (the optional kinds). `elem_dtype`
/// types an empty sequence or optional that does not say (kUndefined: leave it so). Errors name
/// `context`.
absl::StatusOr<ir::Tensor> ParseValueProto(absl::string_view bytes, ir::ValueKind kind,
                                           DataType elem_dtype, const std::string& context);

/// Serializes `t` as a value of `kind` named `name`: a TensorProto, a SequenceProto or an
/// OptionalProto. ResourceExhausted past protobuf's 2 GiB limit.
absl::StatusOr<std::string> SerializeValueProto(const ir::Tensor& t, ir::ValueKind kind,
                                                const std::string& name);

}  // namespace kiln::import
