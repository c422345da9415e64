// Runs one op on given tensors through the kernel registry, for kernel tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
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
  /// CPU features the kernel is chosen for (Registry::Find); unset: the running CPU's. 0 selects
  /// the reference kernel.
  std::optional<uint64_t> cpu_features;
  /// Inputs given as constants (initializers) of the node's graph, by index; the rest are plain
  /// values. The tensor is both the constant and what the kernel reads.
  std::vector<int> constant_inputs;
  /// Runs of the kernel (the outputs are the last run's): kernels that cache work at the first
  /// run are checked on the later ones.
  int runs = 1;
  /// Runs the node's OpenCL kernel on the machine's default OpenCL device (kernels/device.h):
  /// inputs uploaded, outputs downloaded.
  bool opencl = false;
};

/// Builds a one-node graph, finds the kernel in the default registry and runs it.
absl::StatusOr<std::vector<ir::Tensor>> RunNode(const NodeSpec& spec);

/// Runs the node; on error records a test failure and returns `spec.num_outputs` undefined
/// tensors.
std::vector<ir::Tensor> RunNodeOk(const NodeSpec& spec);

/// Output 0 of RunNodeOk (an undefined tensor, and a test failure, on error).
ir::Tensor RunNodeOk0(const NodeSpec& spec);

/// Expects `status` to be an error of `code` whose message names the node ("test_node") and
/// contains `fragment`.
void ExpectStatusError(const absl::Status& status, absl::StatusCode code,
                       const std::string& fragment = "");

/// Expects running the node to fail as ExpectStatusError describes.
void ExpectNodeError(const NodeSpec& spec, absl::StatusCode code, const std::string& fragment);

/// Tensor from values of its storage type: `MakeTensor<float>({2, 2}, {1, 2, 3, 4}, kF32)`.
/// Instantiated for every integer type, float and double (uint8_t also for kBool, uint16_t for
/// raw fp16/bf16 bits).
template <typename T>
ir::Tensor MakeTensor(std::vector<int64_t> dims, const std::vector<T>& values, DataType dtype);

ir::Tensor MakeFloat(std::vector<int64_t> dims, const std::vector<float>& values);
ir::Tensor MakeInt64(std::vector<int64_t> dims, const std::vector<int64_t>& values);
/// fp16 / bf16 tensors from floats (each value rounded to nearest even).
ir::Tensor MakeHalf(std::vector<int64_t> dims, const std::vector<float>& values);
ir::Tensor MakeBf16(std::vector<int64_t> dims, const std::vector<float>& values);

/// `n` consecutive floats from `start`.
std::vector<float> Iota(int n, float start);

/// Attribute helpers.
ir::Attribute IntAttr(int64_t v);
ir::Attribute FloatAttr(float v);
ir::Attribute StringAttr(std::string v);
ir::Attribute IntsAttr(std::vector<int64_t> v);
ir::Attribute FloatsAttr(std::vector<float> v);
ir::Attribute TensorAttr(ir::Tensor v);

/// Element values as floats (any numeric dtype), for comparisons.
std::vector<float> ToFloats(const ir::Tensor& t);

/// Raw element values of a tensor of storage type T.
template <typename T>
std::vector<T> Values(const ir::Tensor& t) {
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.num_elements());
}

/// Raw bits of a 16-bit tensor (fp16, bf16, int16, uint16); empty for any other element size.
std::vector<uint16_t> Bits16(const ir::Tensor& t);

}  // namespace kiln::testing
