// Helpers of the end-to-end tests that build a small model made in C++ and run it: a model
// shell, float / scalar tensors, and build + blob round trip + run in one call.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/builder/builder.h"
#include "engine/common/status.h"
#include "engine/plan/engine_blob.h"
#include "engine/runtime/session.h"
#include "onnx/onnx_pb.h"
#include "tests/testing/onnx_models.h"

namespace kiln::testing {

/// An empty model (IR 8) importing the default domain at `opset`.
inline onnx::ModelProto NewModel(int64_t opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* imp = m.add_opset_import();
  imp->set_domain("");
  imp->set_version(opset);
  m.mutable_graph()->set_name("test");
  return m;
}

inline ir::Tensor Floats(std::vector<int64_t> dims, std::vector<float> v) {
  ir::Tensor t = *ir::Tensor::Allocate(DataType::kF32, std::move(dims));
  std::memcpy(t.raw_data(), v.data(), v.size() * sizeof(float));
  return t;
}

template <typename T>
ir::Tensor Scalar(DataType dt, T v) {
  ir::Tensor t = *ir::Tensor::Allocate(dt, {});
  *static_cast<T*>(t.raw_data()) = v;
  return t;
}

inline std::vector<float> Values(const ir::Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.num_elements());
}

/// Builds `m` with `opts`, writes the blob and loads it again, and runs it on `inputs`.
inline absl::StatusOr<std::vector<ir::Tensor>> BuildAndRun(const onnx::ModelProto& m,
                                                           const std::vector<ir::Tensor>& inputs,
                                                           builder::BuildOptions opts = {}) {
  ASSIGN_OR_RETURN(builder::BuildResult built,
                   builder::BuildEngine(SerializeModel(m), opts, nullptr));
  ASSIGN_OR_RETURN(std::unique_ptr<plan::Engine> engine,
                   plan::LoadEngineFromBytes(std::make_shared<std::string>(built.blob)));
  ASSIGN_OR_RETURN(auto session,
                   runtime::Session::Create(std::shared_ptr<plan::Engine>(std::move(engine))));
  return session->Run(inputs);
}

}  // namespace kiln::testing
