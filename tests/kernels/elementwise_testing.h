// Small helpers shared by the elementwise and cast kernel tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/common/half.h"
#include "engine/ir/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing::ew {

using Attrs = std::vector<std::pair<std::string, ir::Attribute>>;

/// Runs a one-output node.
inline absl::StatusOr<ir::Tensor> RunOp(ir::OpType op, std::vector<ir::Tensor> inputs,
                                        Attrs attrs = {}, int since_version = 23) {
  NodeSpec spec;
  spec.op = op;
  spec.inputs = std::move(inputs);
  spec.attrs = std::move(attrs);
  spec.since_version = since_version;
  auto out = RunNode(spec);
  if (!out.ok()) return out.status();
  return std::move((*out)[0]);
}

inline ir::Tensor F32(std::vector<int64_t> dims, const std::vector<float>& v) {
  return MakeFloat(std::move(dims), v);
}
inline ir::Tensor F64(std::vector<int64_t> dims, const std::vector<double>& v) {
  return MakeTensor<double>(std::move(dims), v, DataType::kF64);
}
inline ir::Tensor I64(std::vector<int64_t> dims, const std::vector<int64_t>& v) {
  return MakeInt64(std::move(dims), v);
}
inline ir::Tensor I32(std::vector<int64_t> dims, const std::vector<int32_t>& v) {
  return MakeTensor<int32_t>(std::move(dims), v, DataType::kI32);
}
inline ir::Tensor I8(std::vector<int64_t> dims, const std::vector<int8_t>& v) {
  return MakeTensor<int8_t>(std::move(dims), v, DataType::kI8);
}
inline ir::Tensor U8(std::vector<int64_t> dims, const std::vector<uint8_t>& v) {
  return MakeTensor<uint8_t>(std::move(dims), v, DataType::kU8);
}
inline ir::Tensor Bool(std::vector<int64_t> dims, const std::vector<uint8_t>& v) {
  return MakeTensor<uint8_t>(std::move(dims), v, DataType::kBool);
}
/// fp16 / bf16 tensors from floats (each value rounded to nearest even).
inline ir::Tensor F16(std::vector<int64_t> dims, const std::vector<float>& v) {
  return MakeHalf(std::move(dims), v);
}
inline ir::Tensor BF16(std::vector<int64_t> dims, const std::vector<float>& v) {
  return MakeBf16(std::move(dims), v);
}

/// Elementwise |got - want| <= tol * max(1, |want|); NaN matches NaN.
inline void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i << " got " << got[i];
      continue;
    }
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0f, std::fabs(want[i]))) << "element " << i;
  }
}

}  // namespace kiln::testing::ew
