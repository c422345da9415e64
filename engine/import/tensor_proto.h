// ONNX TensorProto <-> ir::Tensor, with the validation the importer relies on: dtype known,
// dims non-negative and without overflow, payload size equal to dims x dtype size, and external
// data confined to the model's own folder.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/ir/tensor.h"

namespace onnx {
class TensorProto;
}

namespace kiln::import {

/// Where external tensor data may come from.
struct ExternalDataPolicy {
  /// The model's folder; empty means external data is refused.
  std::string model_dir;
};

/// Converts a TensorProto. `context` names the tensor in errors (e.g. "initializer 'w'").
absl::StatusOr<ir::Tensor> TensorFromProto(const onnx::TensorProto& proto,
                                           const ExternalDataPolicy& external,
                                           const std::string& context);

/// Fills `proto` (dims, data_type, raw_data, name).
void TensorToProto(const ir::Tensor& t, const std::string& name, onnx::TensorProto* proto);

/// Parses a serialized TensorProto (the ONNX backend-test `input_N.pb` files).
absl::StatusOr<ir::Tensor> ParseTensorProto(absl::string_view bytes, const std::string& context);

/// Parses a serialized TensorProto and returns its name too.
absl::StatusOr<std::pair<std::string, ir::Tensor>> ParseNamedTensorProto(
    absl::string_view bytes, const std::string& context);

/// Serialises a tensor as a TensorProto.
std::string SerializeTensorProto(const ir::Tensor& t, const std::string& name);

}  // namespace kiln::import
