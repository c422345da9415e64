// What the QDQ pass tests (qdq_integer_test.cc, matmul_integer_to_float_test.cc) share: a quantized
// weight's integers, scales and zero points, an engine built with a policy and fusion options, an
// fp32 input tensor and the same-bits check.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/builder/builder.h"
#include "engine/plan/engine_blob.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/testing/run_model.h"

namespace kiln::testing {

// n int8 weight values spread over the whole range, scales of 0.003-0.011, zero points -3..3.
inline std::vector<int> WeightQ(int64_t n) {
  std::vector<int> q(n);
  for (int64_t i = 0; i < n; ++i) q[i] = static_cast<int>((i * 37 + 11) % 255) - 127;
  return q;
}
inline std::vector<float> WeightScales(int64_t n) {
  std::vector<float> s(n);
  for (int64_t i = 0; i < n; ++i) s[i] = 0.003f + 0.0007f * static_cast<float>(i % 13);
  return s;
}
inline std::vector<int> WeightZeros(int64_t n) {
  std::vector<int> z(n);
  for (int64_t i = 0; i < n; ++i) z[i] = static_cast<int>(i % 7) - 3;
  return z;
}

// `model` built under `policy` with fusion on or off and `no_fuse` (nullptr on error).
inline std::shared_ptr<const plan::Engine> Build(const onnx::ModelProto& model,
                                                 const std::string& policy = "fp32",
                                                 bool fusion = true,
                                                 std::vector<std::string> no_fuse = {}) {
  builder::BuildOptions o;
  o.policy = policy;
  o.fusion.enabled = fusion;
  o.fusion.no_fuse = std::move(no_fuse);
  return BuildEngineOk(model, o);
}

// An fp32 tensor of `dims` holding `v`.
inline ir::Tensor Tensor(const std::vector<int64_t>& dims, const std::vector<float>& v) {
  auto t = ir::Tensor::Allocate(DataType::kF32, dims);
  std::copy(v.begin(), v.end(), t->data<float>());
  return *std::move(t);
}

// `a` and `b` the same dims, dtype and bytes.
inline void ExpectSameBits(const ir::Tensor& a, const ir::Tensor& b) {
  ASSERT_EQ(a.dims(), b.dims());
  ASSERT_EQ(a.dtype(), b.dtype());
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()), 0);
}

}  // namespace kiln::testing
