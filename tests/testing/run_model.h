// Helpers of the end-to-end and pass tests that build a small model made in C++ and run it: a
// model shell, float / scalar tensors, build + blob round trip + run in one call, and the same
// steps one by one (BuildEngineOk, CountKernels, RunEngineOk).
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
#include "gtest/gtest.h"
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

/// Builds `m` with `opts` and loads the blob again: the engine, or nullptr and a test failure.
inline std::shared_ptr<const plan::Engine> BuildEngineOk(const onnx::ModelProto& m,
                                                         const builder::BuildOptions& opts = {}) {
  auto r = builder::BuildEngine(SerializeModel(m), opts, nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return nullptr;
  auto e = plan::LoadEngineFromBytes(std::make_shared<const std::string>(r->blob));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::shared_ptr<const plan::Engine>(*std::move(e)) : nullptr;
}

/// The kernels of `e` running `op`.
inline int CountKernels(const plan::Engine& e, ir::OpType op) {
  int n = 0;
  for (const ir::Node* node : e.order) n += node->op == op;
  return n;
}

/// `e` run on `inputs` in a new session: its outputs, or none and a test failure.
inline std::vector<ir::Tensor> RunEngineOk(const std::shared_ptr<const plan::Engine>& e,
                                           const std::vector<ir::Tensor>& inputs) {
  auto s = runtime::Session::Create(e);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return {};
  auto out = (*s)->Run(inputs);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : std::vector<ir::Tensor>{};
}

}  // namespace kiln::testing
