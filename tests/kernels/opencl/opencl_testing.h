// What the OpenCL kernel tests (tests/kernels/opencl/*_test.cc) share: random inputs of a storage
// type (fp32, fp16, bf16), the storage types' units in the last place, running a node on the
// reference kernel and on OpenCL, and comparing the two within a bound.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/kernels/opencl/kernel_base.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {

/// `n` values drawn uniformly from [lo, hi) by std::mt19937(seed), in order.
inline std::vector<float> UniformValues(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

/// A tensor of storage type `dt` (kF16, kBF16; any other: kF32) holding `v` rounded to it.
inline ir::Tensor MakeStored(DataType dt, std::vector<int64_t> dims, const std::vector<float>& v) {
  switch (dt) {
    case DataType::kF16:
      return MakeHalf(std::move(dims), v);
    case DataType::kBF16:
      return MakeBf16(std::move(dims), v);
    default:
      return MakeFloat(std::move(dims), v);
  }
}

/// A tensor of storage type `dt` with values uniform in [-1, 1) (UniformValues, `seed`).
inline ir::Tensor RandomStored(DataType dt, std::vector<int64_t> dims, uint32_t seed) {
  const std::vector<float> v = UniformValues(ir::NumElementsOf(dims), -1.0f, 1.0f, seed);
  return MakeStored(dt, std::move(dims), v);
}

/// One unit in the last place of storage type `dt` (kF32, kF16, kBF16) at magnitude m: that of
/// the smallest normal below it (fp16's subnormal range included).
inline double StorageUlp(float m, DataType dt) {
  const int mant = dt == DataType::kF32 ? 23 : dt == DataType::kF16 ? 10 : 7;
  const int min_e = dt == DataType::kF16 ? -13 : -125;
  int e = 0;
  std::frexp(std::fabs(m), &e);
  return std::ldexp(1.0, std::max(e, min_e) - 1 - mant);
}

/// As StorageUlp, with fp32's exponent range for every type: below fp16's smallest normal
/// (2^-14) this is smaller than fp16's ulp, a tighter bound (the Conv and MatMul tests').
inline double Fp32RangeUlp(float m, DataType dt) {
  const int mant = dt == DataType::kF32 ? 23 : dt == DataType::kF16 ? 10 : 7;
  int e = 0;
  std::frexp(std::fabs(m), &e);
  return std::ldexp(1.0, std::max(e, -125) - 1 - mant);
}

/// A node of `op` with `attrs` and `inputs`, the other fields default.
inline NodeSpec Spec(ir::OpType op, std::vector<std::pair<std::string, ir::Attribute>> attrs,
                     std::vector<ir::Tensor> inputs) {
  NodeSpec s;
  s.op = op;
  s.attrs = std::move(attrs);
  s.inputs = std::move(inputs);
  return s;
}

/// The outputs of a node on the reference kernel (`want`) and on OpenCL (`got`).
struct Runs {
  std::vector<ir::Tensor> want, got;
};

/// Runs `spec` on the reference kernel and on OpenCL (twice: the second run reuses the
/// program).
inline Runs RunBoth(NodeSpec spec) {
  spec.cpu_features = 0;
  Runs r;
  r.want = RunNodeOk(spec);
  spec.cpu_features.reset();
  spec.opencl = true;
  spec.runs = 2;
  r.got = RunNodeOk(spec);
  return r;
}

/// `got` within tol(i) (an absolute bound on the fp32 result) of `want`, plus one StorageUlp
/// for 16-bit types; NaN and infinities exactly alike. Reports the first 5 elements out of
/// bounds.
inline void ExpectClose(const ir::Tensor& want, const ir::Tensor& got,
                        const std::function<double(int64_t)>& tol) {
  ASSERT_TRUE(want.defined());
  ASSERT_TRUE(got.defined());
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.dims(), want.dims());
  const DataType dt = want.dtype();
  const std::vector<float> w = ToFloats(want), g = ToFloats(got);
  int bad = 0;
  for (size_t i = 0; i < w.size() && bad < 5; ++i) {
    if (std::isnan(w[i]) || std::isnan(g[i]) || std::isinf(w[i]) || std::isinf(g[i])) {
      if (!(std::isnan(w[i]) && std::isnan(g[i])) && w[i] != g[i]) {
        ++bad;
        ADD_FAILURE() << "element " << i << ": want " << w[i] << ", got " << g[i];
      }
      continue;
    }
    const double t = tol(static_cast<int64_t>(i));
    const double bound = t + (dt == DataType::kF32 ? 0 : StorageUlp(w[i], dt));
    if (!std::isfinite(t) || std::fabs(static_cast<double>(w[i]) - g[i]) > bound) {
      ++bad;
      ADD_FAILURE() << "element " << i << ": want " << w[i] << ", got " << g[i] << " (bound "
                    << bound << ")";
    }
  }
}

/// Runs `spec` on the reference kernel and on OpenCL (twice) and expects output 0 alike in
/// dims and dtype, each element within fp32_bound(want) plus, for a 16-bit output, one
/// Fp32RangeUlp of its type. Reports the first 5 elements out of bounds.
inline void ExpectWithinOfReference(const NodeSpec& spec,
                                    const std::function<double(float)>& fp32_bound) {
  NodeSpec ref = spec;
  ref.cpu_features = 0;
  NodeSpec cl = spec;
  cl.opencl = true;
  cl.runs = 2;
  const ir::Tensor want = RunNodeOk0(ref);
  const ir::Tensor got = RunNodeOk0(cl);
  ASSERT_TRUE(want.defined() && got.defined());
  ASSERT_EQ(got.dims(), want.dims());
  ASSERT_EQ(got.dtype(), want.dtype());
  const std::vector<float> w = ToFloats(want), g = ToFloats(got);
  int bad = 0;
  for (size_t i = 0; i < w.size() && bad < 5; ++i) {
    const double bound =
        fp32_bound(w[i]) + (got.dtype() == DataType::kF32 ? 0 : Fp32RangeUlp(w[i], got.dtype()));
    if (std::fabs(static_cast<double>(w[i]) - g[i]) > bound) {
      ++bad;
      ADD_FAILURE() << "element " << i << ": want " << w[i] << ", got " << g[i] << " (bound "
                    << bound << ")";
    }
  }
}

/// Runs `spec` on OpenCL with every GEMM tile (2, 4 and 8 outputs per item per dim, k unsplit:
/// kernel_base.h's ForceGemmTileForTesting) and expects output 0 the same bits each time.
inline void ExpectSameBitsForEveryTile(NodeSpec spec) {
  spec.opencl = true;
  std::vector<ir::Tensor> outs;
  for (int per_item : {2, 4, 8}) {
    kernels::opencl::ForceGemmTileForTesting(per_item, 1);
    outs.push_back(RunNodeOk0(spec));
    kernels::opencl::ForceGemmTileForTesting(0);
    ASSERT_TRUE(outs.back().defined());
    EXPECT_EQ(std::memcmp(outs.back().raw_data(), outs[0].raw_data(), outs[0].byte_size()), 0)
        << per_item << " outputs per item differ from 2";
  }
}

/// The node fails alike on both backends: same code, naming the node, with `fragment`.
inline void ExpectSameError(NodeSpec spec, absl::StatusCode code, const std::string& fragment) {
  spec.cpu_features = 0;
  ExpectNodeError(spec, code, fragment);
  spec.cpu_features.reset();
  spec.opencl = true;
  ExpectNodeError(spec, code, fragment);
}

/// The reference runs the node; OpenCL's `supports` refuses it (placement keeps it on the CPU).
inline void ExpectRefused(NodeSpec spec) {
  spec.cpu_features = 0;
  const absl::StatusOr<std::vector<ir::Tensor>> ref = RunNode(spec);
  EXPECT_TRUE(ref.ok()) << ref.status();
  spec.cpu_features.reset();
  spec.opencl = true;
  ExpectNodeError(spec, absl::StatusCode::kUnimplemented, "on OpenCL");
}

}  // namespace kiln::testing
