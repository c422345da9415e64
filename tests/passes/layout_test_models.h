// Helpers shared by the channels-last layout pass's tests (layout_test.cc,
// layout_shapes_test.cc): the test image's size, a Conv with generated weights, and the input.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/builder/builder.h"
#include "engine/ir/tensor.h"
#include "engine/plan/engine_blob.h"
#include "tests/testing/onnx_models.h"

namespace kiln::testing::layout {

constexpr int64_t kC = 8, kH = 10, kW = 10;

// A build and the engine loaded from its blob.
struct Built {
  builder::BuildResult result;
  std::shared_ptr<const plan::Engine> engine;
};

inline onnx::NodeProto* Conv(onnx::GraphProto* g, const std::string& name, const std::string& x,
                             int64_t cin, int64_t cout, int64_t k, const std::string& y) {
  AddFloatInitializer(g, name + ".w", {cout, cin, k, k},
                      Wave(cout * cin * k * k, 1.0f / std::sqrt(float(cin * k * k)), 0.3f));
  AddFloatInitializer(g, name + ".b", {cout}, Wave(cout, 0.1f, 1.0f));
  auto* n = AddOnnxNode(g, "Conv", {x, name + ".w", name + ".b"}, {y}, name);
  AddIntsAttribute(n, "pads", {k / 2, k / 2, k / 2, k / 2});
  return n;
}

inline std::vector<ir::Tensor> Input() {
  auto t = ir::Tensor::Allocate(DataType::kF32, {1, kC, kH, kW});
  std::vector<float> v = Wave(kC * kH * kW, 1.0f, 0.0f);
  std::copy(v.begin(), v.end(), t->data<float>());
  return {*std::move(t)};
}

}  // namespace kiln::testing::layout
