// ONNX ModelProto -> IR. Parses with explicit limits, checks versions, resolves every node
// against Kiln's own op schemas, validates names, dims, payloads and the DAG, and infers dtypes
// and (where it can) shapes. Every error names the node ("[node 'x' (Op) #i]") or the field.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/ir/graph.h"

namespace kiln::import {

/// Limits and context for one import.
struct ImportOptions {
  /// Largest serialized model accepted (protobuf's own hard limit is 2 GiB).
  int64_t max_model_bytes = int64_t{2} * 1024 * 1024 * 1024 - 1;
  /// Deepest message nesting accepted by the parser.
  int max_recursion_depth = 64;
  /// Folder of the model file, for external data; empty refuses external data.
  std::string model_dir;
  /// Run Debian's onnx 1.12 checker as an extra check where it is an authority (IR <= 8 and
  /// opset <= 17). Kiln's own checks run always.
  bool use_onnx_checker = true;
};

/// Supported IR versions. IR 11..13 are accepted because they are what ONNX writes for opset
/// 23..25+ models. Their additions Kiln cannot honour are refused where they appear: the dtypes
/// float4e2m1 (IR 11), float8e8m0 (IR 12), int2 / uint2 (IR 13) by the dtype checks on values,
/// initializers and attributes; multi-device configuration (ModelProto.configuration, IR 11, and
/// NodeProto.device_configurations) by the version check, which names the field or the node.
constexpr int64_t kMinIrVersion = 3;
constexpr int64_t kMaxIrVersion = 13;

/// Imports a serialized ModelProto. `release`, when given, must hold `bytes`: it is freed once
/// parsed, so a big model's bytes, parsed message and graph are never all alive at once.
absl::StatusOr<std::unique_ptr<ir::Graph>> ImportModel(absl::string_view bytes,
                                                       const ImportOptions& options,
                                                       std::string* release = nullptr);

/// Reads and imports a model file; external data is resolved against the file's folder.
absl::StatusOr<std::unique_ptr<ir::Graph>> ImportModelFile(const std::string& path,
                                                           ImportOptions options);

/// Reads a whole file (errors name the path).
absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes);

}  // namespace kiln::import
