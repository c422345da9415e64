// ONNX TensorProto <-> ir::Tensor, with the validation the importer relies on: dtype known,
// dims non-negative and without overflow, payload size equal to dims x dtype size, and external
// data confined to the model's own folder. The one place ONNX's packed layout of int4, uint4,
// float4e2m1, int2 and uint2 is read and written (Kiln holds one element per byte).
#pragma once

#include <cstdint>
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

/// The one message of every refused external_data location (absolute, with a '..' component, a
/// backslash or a NUL byte, or through a symbolic link): the same whether or not the path exists,
/// so an error never tells which paths exist outside the model's folder.
absl::Status RefusedExternalLocation(const std::string& context, const std::string& location);

/// Resolves an external_data `location` against the model's folder: the path to open, with every
/// component checked to be inside the folder. The location is refused by its text alone (so
/// nothing outside the folder is ever looked at) when it is absolute or holds '..', a backslash
/// or a NUL byte; then each component, below the folder only, must exist and not be a symbolic
/// link. '.' components are skipped. `context` names the tensor in errors.
absl::StatusOr<std::string> ResolveExternalLocation(const std::string& location,
                                                    const ExternalDataPolicy& policy,
                                                    const std::string& context);

/// The 'location' of an external-data tensor: InvalidArgument naming `context` when the model
/// has no folder (external data refused), when the tensor has no 'location' entry or more than
/// one, or when it is empty.
absl::StatusOr<std::string> ExternalLocationOf(const onnx::TensorProto& proto,
                                               const ExternalDataPolicy& policy,
                                               const std::string& context);

/// Converts a TensorProto. `context` names the tensor in errors (e.g. "initializer 'w'").
absl::StatusOr<ir::Tensor> TensorFromProto(const onnx::TensorProto& proto,
                                           const ExternalDataPolicy& external,
                                           const std::string& context);

/// Fills `proto` (dims, data_type, raw_data, name).
void TensorToProto(const ir::Tensor& t, const std::string& name, onnx::TensorProto* proto);

/// The raw_data payload of `t` in ONNX's layout: a view of the tensor's own bytes, except for
/// the packed types (int4, uint4, float4e2m1: two elements per byte; int2, uint2: four), which
/// are packed into `storage` and viewed there. The one way a writer gets a tensor's payload.
absl::string_view TensorProtoPayload(const ir::Tensor& t, std::string* storage);

/// Parses a serialized TensorProto (the ONNX backend-test `input_N.pb` files).
absl::StatusOr<ir::Tensor> ParseTensorProto(absl::string_view bytes, const std::string& context);

/// Parses a serialized TensorProto and returns its name too.
absl::StatusOr<std::pair<std::string, ir::Tensor>> ParseNamedTensorProto(
    absl::string_view bytes, const std::string& context);

/// Protobuf cannot serialize a message of 2 GiB or more (INT_MAX bytes is its limit).
inline constexpr int64_t kMaxTensorProtoBytes = INT32_MAX;

/// Bytes of `t` serialized as a TensorProto named `name` (raw_data), computed without copying
/// the payload.
int64_t SerializedTensorProtoSize(const ir::Tensor& t, const std::string& name);

/// The serialized TensorProto of `t` named `name` up to its payload: `head + payload bytes` is
/// the whole message (the payload as TensorProtoPayload gives it), so a writer can send the
/// payload straight from the tensor. ResourceExhausted naming `name` when the message would
/// pass protobuf's 2 GiB limit.
absl::StatusOr<std::string> TensorProtoHead(const ir::Tensor& t, const std::string& name);

/// Serialises a tensor as a TensorProto (raw_data): TensorProtoHead then the payload.
/// ResourceExhausted naming `name` when the message would pass protobuf's 2 GiB limit (checked
/// before anything is copied) or when the memory for the copy cannot be had.
absl::StatusOr<std::string> SerializeTensorProto(const ir::Tensor& t, const std::string& name);

}  // namespace kiln::import
