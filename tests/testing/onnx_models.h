// Small ONNX models built in C++ for import, engine blob and CLI tests, plus a temp folder that
// cleans itself up. Tests mutate these models to make them hostile.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"

namespace kiln::testing {

/// Adds a node to `graph`; returns it so tests can add attributes or a domain.
onnx::NodeProto* AddOnnxNode(onnx::GraphProto* graph, const std::string& op_type,
                             const std::vector<std::string>& inputs,
                             const std::vector<std::string>& outputs, const std::string& name);

/// Adds a tensor-typed ValueInfo (float unless `elem_type` says otherwise) to `list`.
onnx::ValueInfoProto* AddTensorValueInfo(
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name,
    const std::vector<int64_t>& dims, int32_t elem_type = onnx::TensorProto::FLOAT);

/// A float initializer with values in float_data.
onnx::TensorProto* AddFloatInitializer(onnx::GraphProto* graph, const std::string& name,
                                       const std::vector<int64_t>& dims,
                                       const std::vector<float>& values);

/// A 1-D int64 initializer (shapes, axes, k) with values in int64_data.
onnx::TensorProto* AddInt64Initializer(onnx::GraphProto* graph, const std::string& name,
                                       const std::vector<int64_t>& values);

/// An int8 (or, `is_unsigned`, uint8) initializer of `dims` holding `values` (raw_data).
onnx::TensorProto* AddInt8Initializer(onnx::GraphProto* graph, const std::string& name,
                                      const std::vector<int64_t>& dims,
                                      const std::vector<int>& values, bool is_unsigned);

/// `n` values scale * sin(0.61 i + phase): deterministic weights and inputs without a pattern
/// a wrong index would keep.
std::vector<float> Wave(int64_t n, float scale, float phase);

/// Adds to `node` a GRAPH attribute `attr` (If's branches, Loop's and Scan's body) and returns
/// its graph, named `attr`, for the test to fill.
onnx::GraphProto* AddSubgraph(onnx::NodeProto* node, const std::string& attr);

/// Adds an INTS / INT attribute to `node`.
void AddIntsAttribute(onnx::NodeProto* node, const std::string& name,
                      const std::vector<int64_t>& values);
void AddIntAttribute(onnx::NodeProto* node, const std::string& name, int64_t value);

/// The weights of AddReluMulModel: w = {1, -2, 3, -4, 5, -6}, shape [2, 3].
extern const std::vector<float> kAddReluMulWeights;

/// y = Relu(x + w) * w with x: float[2,3] input, w: float[2,3] initializer; nodes "add",
/// "relu", "mul" with outputs "a", "r", "y". IR 10 / opset 21 skip Debian's onnx 1.12 checker,
/// so Kiln's own checks are what the tests see.
onnx::ModelProto AddReluMulModel(int64_t ir_version = 10, int64_t opset = 21);

/// The serialized model.
std::string SerializeModel(const onnx::ModelProto& model);

/// A fresh folder under /tmp, removed with everything in it when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  /// path() + "/" + name.
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  /// Writes `bytes` to File(name) and returns that path.
  std::string Write(const std::string& name, const std::string& bytes) const;

 private:
  std::string path_;
};

/// Runs `f`, which may open the FIFO at `fifo` for reading. If `f` has not returned after 30
/// seconds, records a test failure ("blocked on a FIFO") and opens the FIFO for writing so the
/// blocked reader sees end-of-file and `f` can return: a hang becomes a failure, not a stuck test.
absl::Status RunWithFifoGuard(const std::string& fifo, const std::function<absl::Status()>& f);

}  // namespace kiln::testing
