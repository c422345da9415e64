// The OpenCL elementwise kernels against the reference kernels, at fp32, fp16 and bf16
// storage, on the machine's OpenCL device (PoCL in CI): same shapes, same NaN handling, and
// values within the bounds the OpenCL C specification gives its built-in functions.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/half.h"
#include "gtest/gtest.h"
#include "tests/kernels/opencl/opencl_testing.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ir::OpType;

// Inputs: a spread of values in [lo, hi], then the special values every op must handle
// (signed zeros, infinities, NaN, a subnormal, large magnitudes).
std::vector<float> Values(int n, float lo, float hi, uint32_t seed) {
  std::vector<float> v = UniformValues(n, lo, hi, seed);
  const float special[] = {0.0f,   -0.0f,    INFINITY, -INFINITY, NAN,  1e-40f,
                           -3e38f, 65504.0f, -1.0f,    1.0f,      0.5f, -0.5f};
  for (size_t i = 0; i < std::size(special) && i < v.size(); ++i) v[v.size() - 1 - i] = special[i];
  return v;
}

struct Case {
  OpType op;
  std::vector<std::pair<std::string, ir::Attribute>> attrs;
  float lo, hi;
  // Bound in ulps of the larger of |result| and `floor`, for fp32 storage: the OpenCL C 1.2
  // full-profile bounds of the built-ins each formula uses (spec table 7.1: exp, expm1, log 3;
  // log1p 2; tanh 5; sin, cos 4; erf 16; pow 16; division and sqrt correctly rounded where the
  // device offers it, else 2.5 and 3), summed over the operations. 0: exact (+, -, *,
  // comparisons). 16-bit storage rounds the fp32 value once: within 1 ulp of its own when not
  // exact (a tie between the two fp32 results may round apart).
  double ulps;
  float floor = 0;
};

std::string Name(const Case& c, DataType dt) {
  return absl::StrCat(ir::OpName(c.op), "/", DataTypeOnnxName(dt));
}

void Check(const Case& c, DataType dt, const std::vector<ir::Tensor>& inputs) {
  SCOPED_TRACE(Name(c, dt));
  NodeSpec ref{c.op, c.attrs, inputs};
  ref.cpu_features = 0;
  NodeSpec cl = ref;
  cl.cpu_features.reset();
  cl.opencl = true;
  cl.runs = 2;  // the second run reuses the built kernel
  const ir::Tensor want = RunNodeOk0(ref);
  const ir::Tensor got = RunNodeOk0(cl);
  ASSERT_TRUE(got.defined());
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.dims(), want.dims());
  const std::vector<float> w = ToFloats(want), g = ToFloats(got);
  const double bound = c.ulps == 0 ? 0 : dt == DataType::kF32 ? c.ulps : 1;
  int bad = 0;
  for (size_t i = 0; i < w.size() && bad < 5; ++i) {
    if (std::isnan(w[i]) || std::isnan(g[i])) {
      if (std::isnan(w[i]) != std::isnan(g[i])) {
        ++bad;
        ADD_FAILURE() << "element " << i << ": want " << w[i] << ", got " << g[i];
      }
      continue;
    }
    if (std::isinf(w[i]) || std::isinf(g[i])) {
      if (w[i] != g[i]) {
        ++bad;
        ADD_FAILURE() << "element " << i << ": want " << w[i] << ", got " << g[i];
      }
      continue;
    }
    const double ulps = std::fabs(static_cast<double>(w[i]) - g[i]) /
                        StorageUlp(std::max(std::fabs(w[i]), c.floor), dt);
    if (ulps > bound) {
      ++bad;
      ADD_FAILURE() << "element " << i << ": want " << w[i] << ", got " << g[i] << " (" << ulps
                    << " ulps apart, bound " << bound << ")";
    }
  }
}

const DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};

TEST(OpenClElementwiseTest, UnaryOpsMatchTheReference) {
  const std::vector<Case> cases = {
      {OpType::kRelu, {}, -10, 10, 0},
      {OpType::kLeakyRelu, {{"alpha", FloatAttr(0.3f)}}, -10, 10, 0},
      {OpType::kAbs, {}, -10, 10, 0},
      {OpType::kNeg, {}, -10, 10, 0},
      {OpType::kIdentity, {}, -10, 10, 0},
      {OpType::kFloor, {}, -10, 10, 0},
      {OpType::kCeil, {}, -10, 10, 0},
      {OpType::kThresholdedRelu, {{"alpha", FloatAttr(0.5f)}}, -3, 3, 0},
      {OpType::kHardSigmoid, {}, -8, 8, 3, 1},
      {OpType::kHardSwish, {}, -8, 8, 4, 1},
      {OpType::kSigmoid, {}, -20, 20, 6, 1e-3f},
      {OpType::kTanh, {}, -6, 6, 5},
      {OpType::kExp, {}, -20, 20, 3},
      {OpType::kLog, {}, 0.001f, 100, 3, 1},
      {OpType::kSqrt, {}, 0, 100, 3},
      {OpType::kReciprocal, {}, 0.1f, 10, 3},
      {OpType::kErf, {}, -4, 4, 16, 1},
      {OpType::kSin, {}, -6, 6, 4, 1},
      {OpType::kCos, {}, -6, 6, 4, 1},
      {OpType::kElu, {{"alpha", FloatAttr(0.7f)}}, -6, 6, 4},
      // alpha * exp(x) - alpha cancels near 0: bounded in ulps of alpha * gamma (~1.76).
      {OpType::kSelu, {}, -6, 6, 6, 2},
      {OpType::kCelu, {{"alpha", FloatAttr(1.5f)}}, -6, 6, 6},
      {OpType::kSoftplus, {}, -20, 20, 6, 1e-3f},
      {OpType::kSoftsign, {}, -20, 20, 3},
      {OpType::kMish, {}, -10, 10, 12, 1},
      {OpType::kGelu, {}, -6, 6, 20, 1},
      {OpType::kGelu, {{"approximate", StringAttr("tanh")}}, -6, 6, 12, 1},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    for (DataType dt : kTypes) {
      Check(c, dt, {MakeStored(dt, {3, 5, 67}, Values(3 * 5 * 67, c.lo, c.hi, seed++))});
    }
  }
}

TEST(OpenClElementwiseTest, BinaryOpsBroadcastAsTheReference) {
  const std::vector<Case> cases = {
      {OpType::kAdd, {}, -10, 10, 0},     {OpType::kSub, {}, -10, 10, 0},
      {OpType::kMul, {}, -10, 10, 0},     {OpType::kDiv, {}, -10, 10, 3},
      {OpType::kPow, {}, 0.1f, 3, 16, 1},
  };
  // Equal shapes, a scalar, a per-channel vector, broadcasting on both sides, rank 6.
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{4, 7, 9}, {4, 7, 9}}, {{4, 7, 9}, {}}, {{2, 3, 5, 5}, {3, 1, 1}},
      {{5, 1, 6}, {1, 4, 1}}, {{1}, {3, 2}},   {{2, 1, 2, 3, 1, 4}, {3, 2, 4}},
  };
  uint32_t seed = 100;
  for (const Case& c : cases) {
    for (DataType dt : kTypes) {
      for (const auto& [da, db] : shapes) {
        SCOPED_TRACE(absl::StrCat(ir::DimsToString(da), " with ", ir::DimsToString(db)));
        const int64_t na = ir::NumElementsOf(da), nb = ir::NumElementsOf(db);
        Check(c, dt,
              {MakeStored(dt, da, Values(static_cast<int>(na), c.lo, c.hi, seed++)),
               MakeStored(dt, db, Values(static_cast<int>(nb), c.lo, c.hi, seed++))});
      }
    }
  }
}

TEST(OpenClElementwiseTest, PReluTakesItsSlopePerChannel) {
  for (DataType dt : kTypes) {
    Case c{OpType::kPRelu, {}, -5, 5, 0};
    Check(c, dt,
          {MakeStored(dt, {2, 3, 4, 4}, Values(96, -5, 5, 7)),
           MakeStored(dt, {3, 1, 1}, {0.1f, -2.0f, 0.5f})});
  }
}

// Casts between float storage types round once, to nearest even, as the CPU's: bit for bit
// (a NaN stays a NaN, its payload aside).
TEST(OpenClElementwiseTest, CastsBetweenFloatTypesAsTheReference) {
  uint32_t seed = 300;
  for (DataType from : kTypes) {
    for (DataType to : kTypes) {
      SCOPED_TRACE(absl::StrCat(DataTypeOnnxName(from), " -> ", DataTypeOnnxName(to)));
      // Values around the 16-bit types' ranges and ties: fp16's max and overflow, subnormals.
      std::vector<float> v = Values(400, -70000, 70000, seed++);
      const std::vector<float> small = Values(200, -1e-4f, 1e-4f, seed++);
      v.insert(v.end(), small.begin(), small.end());
      const ir::Tensor x = MakeStored(from, {600}, v);
      NodeSpec ref{OpType::kCast, {{"to", IntAttr(static_cast<int64_t>(to))}}, {x}};
      ref.cpu_features = 0;
      NodeSpec cl = ref;
      cl.cpu_features.reset();
      cl.opencl = true;
      const ir::Tensor want = RunNodeOk0(ref), got = RunNodeOk0(cl);
      ASSERT_TRUE(want.defined() && got.defined());
      ASSERT_EQ(got.dtype(), to);
      const std::vector<float> w = ToFloats(want), g = ToFloats(got);
      for (size_t i = 0; i < w.size(); ++i) {
        if (std::isnan(w[i])) {
          EXPECT_TRUE(std::isnan(g[i])) << i;
        } else {
          EXPECT_EQ(std::memcmp(&w[i], &g[i], sizeof(float)), 0)
              << i << ": " << w[i] << " " << g[i];
        }
      }
    }
  }
}

TEST(OpenClElementwiseTest, EmptyTensorsAndBadAttributes) {
  NodeSpec empty{OpType::kRelu, {}, {MakeFloat({0, 3}, {})}};
  empty.opencl = true;
  const ir::Tensor y = RunNodeOk0(empty);
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{0, 3}));
  NodeSpec celu{OpType::kCelu, {{"alpha", FloatAttr(0.0f)}}, {MakeFloat({2}, {1, 2})}};
  celu.opencl = true;
  ExpectNodeError(celu, absl::StatusCode::kInvalidArgument, "alpha must be non-zero");
  NodeSpec shapes{OpType::kAdd, {}, {MakeFloat({2, 3}, Iota(6, 0)), MakeFloat({4}, Iota(4, 0))}};
  shapes.opencl = true;
  ExpectNodeError(shapes, absl::StatusCode::kInvalidArgument, "do not broadcast");
}

}  // namespace
}  // namespace kiln::testing
