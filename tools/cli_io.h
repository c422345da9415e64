// File helpers of the kiln CLI: ONNX backend-test tensor folders and atomic writes.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/common/files.h"  // WriteFileAtomic, for the commands
#include "engine/ir/graph.h"
#include "engine/ir/tensor.h"

namespace kiln::tools {

/// Reads `DIR/<prefix>_0.pb`, `DIR/<prefix>_1.pb`, ... (serialized onnx.TensorProto) until the
/// next index is missing. With `types` (the graph inputs or outputs the files hold), file i is
/// read as `types[i]` is typed: a SequenceProto for a sequence, an OptionalProto for an optional
/// (import/value_proto.h).
absl::StatusOr<std::vector<ir::Tensor>> ReadTensorDir(
    const std::string& dir, const std::string& prefix,
    const std::vector<ir::Value*>* types = nullptr);

/// Sample sets for `--inputs DIR`: DIR itself when it holds input_0.pb (one set), else every
/// DIR/test_data_set_<N> (N decimal, ascending numeric order) that holds input_0.pb (ONNX
/// backend-test layout). Each set is ReadTensorDir(folder, "input"). NotFound naming DIR when it
/// is not a folder or holds no set.
/// `types`: as for ReadTensorDir (the graph inputs, so that sequences and optionals are read as
/// such).
absl::StatusOr<std::vector<std::vector<ir::Tensor>>> ReadSampleSets(
    const std::string& dir, const std::vector<ir::Value*>* types = nullptr);

/// Writes `tensors[i]` to `DIR/<prefix>_i.pb` with `names[i]` as the TensorProto name; creates DIR.
/// A sequence is written as an onnx.SequenceProto, an empty optional as an onnx.OptionalProto.
/// Writes nothing when a tensor is too large for a TensorProto (ResourceExhausted naming the
/// file, the tensor and protobuf's 2 GiB limit).
absl::Status WriteTensorDir(const std::string& dir, const std::string& prefix,
                            const std::vector<ir::Tensor>& tensors,
                            const std::vector<std::string>& names);

}  // namespace kiln::tools
