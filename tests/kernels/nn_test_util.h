// Helpers shared by the nn kernel tests.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/common/half.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing::nn {

using Attrs = std::vector<std::pair<std::string, ir::Attribute>>;

inline absl::StatusOr<std::vector<ir::Tensor>> RunOp(ir::OpType op, std::vector<ir::Tensor> inputs,
                                                     Attrs attrs = {}, int num_outputs = 1,
                                                     int since_version = 23) {
  NodeSpec spec;
  spec.op = op;
  spec.inputs = std::move(inputs);
  spec.attrs = std::move(attrs);
  spec.num_outputs = num_outputs;
  spec.since_version = since_version;
  return RunNode(spec);
}

/// Runs and returns output 0 as floats; fails the test on error.
inline std::vector<float> RunFloats(ir::OpType op, std::vector<ir::Tensor> inputs, Attrs attrs = {},
                                    std::vector<int64_t>* dims = nullptr) {
  auto r = RunOp(op, std::move(inputs), std::move(attrs));
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  if (dims) *dims = (*r)[0].dims();
  return ToFloats((*r)[0]);
}

/// Element-wise comparison with absolute tolerance `tol`.
inline void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                       float tol = 0.0f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol) << "at index " << i;
  }
}

/// Deterministic uniform values in [-1, 1].
inline std::vector<float> RandomFloats(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

/// An InvalidArgument error naming the test node.
inline void ExpectInvalid(const absl::Status& s) {
  ExpectStatusError(s, absl::StatusCode::kInvalidArgument);
}

}  // namespace kiln::testing::nn
