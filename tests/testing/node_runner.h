// Runs one op on given tensors through the kernel registry, for kernel tests.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/ir/tensor.h"

namespace kiln::testing {

/// A single-node invocation: op, attributes, inputs (an undefined Tensor is an omitted optional
/// input), number of outputs, and the op version (since_version) the kernel should follow.
struct NodeSpec {
  ir::OpType op;
  std::vector<std::pair<std::string, ir::Attribute>> attrs;
  std::vector<ir::Tensor> inputs;
  int num_outputs = 1;
  int since_version = 23;
  /// Output dtypes when the kernel is keyed by output type (e.g. Cast target); else unused.
  std::vector<DataType> output_dtypes;
};

/// Builds a one-node graph, finds the kernel in the default registry and runs it.
absl::StatusOr<std::vector<ir::Tensor>> RunNode(const NodeSpec& spec);

/// Tensor from values: `MakeTensor<float>({2, 2}, {1, 2, 3, 4})` (also Float16, BFloat16,
/// int64_t, bool as uint8_t via DataType::kBool overload below).
template <typename T>
ir::Tensor MakeTensor(std::vector<int64_t> dims, const std::vector<T>& values, DataType dtype);

ir::Tensor MakeFloat(std::vector<int64_t> dims, const std::vector<float>& values);
ir::Tensor MakeInt64(std::vector<int64_t> dims, const std::vector<int64_t>& values);

/// Attribute helpers.
ir::Attribute IntAttr(int64_t v);
ir::Attribute FloatAttr(float v);
ir::Attribute StringAttr(std::string v);
ir::Attribute IntsAttr(std::vector<int64_t> v);
ir::Attribute FloatsAttr(std::vector<float> v);

/// Element values as floats (any numeric dtype), for comparisons.
std::vector<float> ToFloats(const ir::Tensor& t);

}  // namespace kiln::testing
