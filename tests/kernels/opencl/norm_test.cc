// The OpenCL normalisation, Softmax, reduction and pooling kernels against the reference kernels,
// at fp32, fp16 and bf16 storage, on the machine's OpenCL device (PoCL in CI): same shapes, same
// errors, NaN and infinities alike, and values within bounds derived below from fp32 rounding.
//
// Notation: u = 2^-24, the fp32 unit roundoff; k ulps of a value are at most 2k u of it. A sum of
// n terms in any order is within (n - 1) u sum|x| of the exact sum (Higham, "Accuracy and
// Stability of Numerical Algorithms", 4.2), so the device's (runs of items folded by a tree) and
// the reference's (sequential) are within 2 n u sum|x| of each other. The device's exp and log are
// within 3 ulps, division and sqrt within 2.5 and 3 where not correctly rounded (OpenCL C 1.2,
// table 7.1); glibc's within 1. The bounds are for the fp32 results; 16-bit storage adds one of
// its own ulps (two fp32 values within the bound may round to neighbours).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/kernels/opencl/opencl_testing.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ir::OpType;
using Dims = std::vector<int64_t>;
using Attrs = std::vector<std::pair<std::string, ir::Attribute>>;

constexpr double kU = 0x1p-24;
const DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

void ExpectExact(const ir::Tensor& want, const ir::Tensor& got) {
  ExpectClose(want, got, [](int64_t) { return 0.0; });
}

// ---- Softmax, LogSoftmax ----

// Bounds (fp32), from the same x - max on both sides (the maximum is exact): the exps differ by
// 8u relative, so the two sums of n positive terms by 2(n - 1)u + 8u. Softmax: exp, the sums
// and the divisions (6u where not correctly rounded) give (2n + 24)u |y|. LogSoftmax
// (x - max) - log(sum): the sums' difference, the logs' 8u |log sum|, and 2u |y| for the last
// subtraction.
std::vector<double> SoftmaxBounds(const Dims& dims, int axis, bool coerce, bool log,
                                  const std::vector<float>& x, const std::vector<float>& y) {
  int64_t outer = 1, n = 1, inner = 1;
  for (int d = 0; d < static_cast<int>(dims.size()); ++d) {
    (d < axis ? outer : d == axis || coerce ? n : inner) *= dims[d];
  }
  std::vector<double> tol(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * n + k) * inner + i; };
      double m = -INFINITY, s = 0;
      for (int64_t k = 0; k < n; ++k) m = std::max<double>(m, x[at(k)]);
      for (int64_t k = 0; k < n; ++k) s += std::exp(x[at(k)] - m);
      for (int64_t k = 0; k < n; ++k) {
        const double yv = std::fabs(y[at(k)]);
        tol[at(k)] = log ? (2.0 * n + 8) * kU + 8 * kU * std::fabs(std::log(s)) + 2 * kU * yv
                         : (2.0 * n + 24) * kU * yv;
      }
    }
  }
  return tol;
}

void CheckSoftmax(OpType op, DataType dt, const Dims& dims, int64_t axis, int version,
                  const std::vector<float>& values) {
  SCOPED_TRACE(absl::StrCat(ir::OpName(op), "/", DataTypeOnnxName(dt), " ", ir::DimsToString(dims),
                            " axis ", axis, " opset ", version));
  const ir::Tensor x = MakeStored(dt, dims, values);
  NodeSpec spec = Spec(op, {{"axis", IntAttr(axis)}}, {x});
  spec.since_version = version;
  const Runs r = RunBoth(spec);
  ASSERT_TRUE(r.want[0].defined());
  const int rank = static_cast<int>(dims.size());
  const std::vector<double> tol =
      SoftmaxBounds(dims, static_cast<int>(axis < 0 ? axis + rank : axis), version < 13,
                    op == OpType::kLogSoftmax, ToFloats(x), ToFloats(r.want[0]));
  ExpectClose(r.want[0], r.got[0], [&](int64_t i) { return tol[i]; });
}

TEST(OpenClNormTest, SoftmaxMatchesTheReference) {
  // Rows longer than a work-group, odd sizes, the axis first, in the middle, last, negative; and
  // opset 11, where the input is coerced to 2-D at the axis.
  const std::vector<std::pair<Dims, std::vector<int64_t>>> cases = {
      {{4, 3000}, {-1, 0}}, {{3, 5, 7}, {0, 1, 2, -2}}, {{2, 3, 4, 5}, {-3}}, {{1}, {0}}};
  uint32_t seed = 1;
  for (OpType op : {OpType::kSoftmax, OpType::kLogSoftmax}) {
    for (DataType dt : kTypes) {
      for (const auto& [dims, axes] : cases) {
        for (int64_t axis : axes) {
          CheckSoftmax(op, dt, dims, axis, 13,
                       UniformValues(ir::NumElementsOf(dims), -10, 10, seed++));
        }
      }
      CheckSoftmax(op, dt, {2, 3, 4}, 1, 11, UniformValues(24, -10, 10, seed++));
      CheckSoftmax(op, dt, {2, 3, 500}, -2, 11, UniformValues(3000, -10, 10, seed++));
    }
  }
}

TEST(OpenClNormTest, SoftmaxSpecialValuesAndEmptyTensors) {
  // Row 0: one -inf (weight 0); row 1: a NaN (all NaN); row 2: +inf (all NaN); row 3: all -inf.
  std::vector<float> v = UniformValues(4 * 300, -5, 5, 7);
  v[10] = -kInf;
  v[300 + 299] = kNaN;
  v[600 + 5] = kInf;
  std::fill(v.begin() + 900, v.end(), -kInf);
  for (OpType op : {OpType::kSoftmax, OpType::kLogSoftmax}) {
    for (DataType dt : kTypes) {
      CheckSoftmax(op, dt, {4, 300}, -1, 13, v);
      for (const Dims& dims : {Dims{0, 5}, Dims{3, 0}}) {
        NodeSpec spec = Spec(op, {}, {MakeStored(dt, dims, {})});
        spec.opencl = true;
        EXPECT_EQ(RunNodeOk0(spec).dims(), dims);
      }
    }
  }
}

// ---- LayerNormalization ----

// Bounds for one row of n (fp32 statistics). Each backend's mean is within
// e = n u mean|x| + u |mean| of the exact one. As sum(x - mean) = 0, a mean error d enters the
// variance only as d^2: each variance is within (n + 3)u (var + e^2) + e^2, and 1/sqrt(var + eps)
// then differs by rho = dvar / (2 (var + eps)) relative, plus 16u for the additions, square roots
// and divisions (3 ulps + 2.5 ulps on the device where not correctly rounded). Y = d inv s + b:
// |s| inv (|d d| + |d| rho) with d d = 2e + 2u |d|, and 2u per rounding of d inv, of the product
// by s and of the sum with b, on each side.
struct LayerNormTols {
  std::vector<double> y, mean, inv;
};
LayerNormTols LayerNormBounds(const std::vector<float>& x, int64_t rows, int64_t n,
                              const std::vector<float>& scale, const std::vector<float>& bias,
                              double eps) {
  LayerNormTols t;
  t.y.resize(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * n;
    double abs = 0, mu = 0, var = 0;
    for (int64_t k = 0; k < n; ++k) {
      abs += std::fabs(xr[k]);
      mu += xr[k];
    }
    abs /= n;
    mu /= n;
    for (int64_t k = 0; k < n; ++k) var += (xr[k] - mu) * (xr[k] - mu) / n;
    const double e = n * kU * abs + kU * std::fabs(mu);
    const double dvar = 2 * ((n + 3) * kU * (var + e * e) + e * e);
    const double inv = 1 / std::sqrt(var + eps);
    const double rho = dvar / (2 * (var + eps)) + 16 * kU;
    t.mean.push_back(2 * e);
    t.inv.push_back(rho * inv);
    for (int64_t k = 0; k < n; ++k) {
      const double d = xr[k] - mu, s = scale[k % scale.size()];
      const double b = bias.empty() ? 0 : bias[k % bias.size()];
      const double dd = 2 * e + 2 * kU * std::fabs(d);
      t.y[r * n + k] = std::fabs(s) * inv * (dd + std::fabs(d) * rho) +
                       6 * kU * (std::fabs(d * inv * s) + std::fabs(b)) +
                       2 * kU * std::fabs(d * inv * s + b);
    }
  }
  return t;
}

void CheckLayerNorm(DataType dt, const Dims& dims, int64_t axis, const Dims& sdims,
                    const Dims* bdims, float eps, uint32_t seed, int outputs = 3) {
  SCOPED_TRACE(absl::StrCat(DataTypeOnnxName(dt), " ", ir::DimsToString(dims), " axis ", axis,
                            " scale ", ir::DimsToString(sdims)));
  const ir::Tensor x = MakeStored(dt, dims, UniformValues(ir::NumElementsOf(dims), -2, 6, seed));
  const ir::Tensor s =
      MakeStored(dt, sdims, UniformValues(ir::NumElementsOf(sdims), 0.5f, 1.5f, seed + 1));
  ir::Tensor b;
  if (bdims) b = MakeStored(dt, *bdims, UniformValues(ir::NumElementsOf(*bdims), -1, 1, seed + 2));
  NodeSpec spec = Spec(OpType::kLayerNormalization,
                       {{"axis", IntAttr(axis)}, {"epsilon", FloatAttr(eps)}}, {x, s});
  if (bdims) spec.inputs.push_back(b);
  spec.num_outputs = outputs;
  const Runs r = RunBoth(spec);
  ASSERT_EQ(r.got.size(), static_cast<size_t>(outputs));
  const int rank = static_cast<int>(dims.size());
  const int a = static_cast<int>(axis < 0 ? axis + rank : axis);
  const int64_t rows = ir::NumElementsOf({dims.data(), static_cast<size_t>(a)});
  const int64_t n = ir::NumElementsOf(dims) / std::max<int64_t>(rows, 1);
  const LayerNormTols t = LayerNormBounds(ToFloats(x), rows, n, ToFloats(s),
                                          bdims ? ToFloats(b) : std::vector<float>(), eps);
  ExpectClose(r.want[0], r.got[0], [&](int64_t i) { return t.y[i]; });
  if (outputs > 1) ExpectClose(r.want[1], r.got[1], [&](int64_t i) { return t.mean[i]; });
  if (outputs > 2) ExpectClose(r.want[2], r.got[2], [&](int64_t i) { return t.inv[i]; });
}

TEST(OpenClNormTest, LayerNormMatchesTheReference) {
  uint32_t seed = 200;
  for (DataType dt : kTypes) {
    const Dims b3000{3000}, b35{3, 5}, b1{1};
    CheckLayerNorm(dt, {4, 3000}, -1, {3000}, &b3000, 1e-5f, seed += 3);
    CheckLayerNorm(dt, {2, 3, 5}, 1, {3, 5}, nullptr, 1e-3f, seed += 3);
    CheckLayerNorm(dt, {2, 3, 5}, -2, {1, 3, 5}, &b35, 1e-5f, seed += 3);
    // Parameters repeating along the row; the whole tensor one row (axis 0).
    CheckLayerNorm(dt, {6, 7, 9}, 1, {9}, &b1, 1e-5f, seed += 3);
    CheckLayerNorm(dt, {6, 7}, 0, {7}, nullptr, 0.1f, seed += 3, 1);
    CheckLayerNorm(dt, {3, 2, 700}, -1, {700}, nullptr, 1e-5f, seed += 3, 2);
  }
}

TEST(OpenClNormTest, LayerNormEmptyRowsAndNaN) {
  for (DataType dt : kTypes) {
    // No rows; empty rows: Y empty, the statistics of nothing NaN.
    for (const Dims& dims : {Dims{0, 8}, Dims{3, 0}}) {
      NodeSpec spec = Spec(
          OpType::kLayerNormalization, {},
          {MakeStored(dt, dims, {}), MakeStored(dt, {dims[1]}, UniformValues(dims[1], 1, 2, 1))});
      spec.num_outputs = 3;
      const Runs r = RunBoth(spec);
      for (int i = 0; i < 3; ++i) ExpectExact(r.want[i], r.got[i]);
    }
    // A NaN makes its row NaN, statistics included; the other row stays finite.
    std::vector<float> v = UniformValues(2 * 50, -1, 1, 3);
    v[7] = kNaN;
    NodeSpec spec =
        Spec(OpType::kLayerNormalization, {},
             {MakeStored(dt, {2, 50}, v), MakeStored(dt, {50}, UniformValues(50, 1, 2, 4))});
    spec.num_outputs = 3;
    const Runs r = RunBoth(spec);
    ASSERT_TRUE(r.got[1].defined());
    const std::vector<float> mean = ToFloats(r.got[1]);
    EXPECT_TRUE(std::isnan(mean[0]));
    EXPECT_TRUE(std::isfinite(mean[1]));
    const LayerNormTols t =
        LayerNormBounds(ToFloats(spec.inputs[0]), 2, 50, ToFloats(spec.inputs[1]), {}, 1e-5);
    ExpectClose(r.want[0], r.got[0], [&](int64_t i) { return t.y[i]; });
  }
}

// ---- BatchNormalization ----

// The device computes (x - mean) / sqrt(var + eps) * scale + B in the reference's order: only
// its sqrt and division may differ (3 and 2.5 ulps where not correctly rounded: 11u of q * scale),
// plus 2u for each side's rounding of the product and 2u |y| for the sum.
void CheckBatchNorm(DataType dt, DataType pdt, const Dims& dims, float eps, uint32_t seed,
                    int version = 15) {
  SCOPED_TRACE(absl::StrCat(DataTypeOnnxName(dt), " params ", DataTypeOnnxName(pdt), " ",
                            ir::DimsToString(dims), " opset ", version));
  const int64_t c = dims[1], n = ir::NumElementsOf(dims);
  const int64_t spatial = c == 0 ? 0 : n / std::max<int64_t>(dims[0] * c, 1);
  const ir::Tensor x = MakeStored(dt, dims, UniformValues(n, -4, 4, seed));
  const ir::Tensor scale = MakeStored(pdt, {c}, UniformValues(c, 0.5f, 2, seed + 1));
  const ir::Tensor bias = MakeStored(pdt, {c}, UniformValues(c, -1, 1, seed + 2));
  const ir::Tensor mean = MakeStored(pdt, {c}, UniformValues(c, -1, 1, seed + 3));
  const ir::Tensor var = MakeStored(pdt, {c}, UniformValues(c, 0.1f, 3, seed + 4));
  NodeSpec spec =
      Spec(OpType::kBatchNormalization, {{"epsilon", FloatAttr(eps)}}, {x, scale, bias, mean, var});
  spec.since_version = version;
  if (version < 7) spec.attrs.push_back({"is_test", IntAttr(1)});
  const Runs r = RunBoth(spec);
  const std::vector<float> xv = ToFloats(x), sv = ToFloats(scale), bv = ToFloats(bias),
                           mv = ToFloats(mean), vv = ToFloats(var);
  ExpectClose(r.want[0], r.got[0], [&](int64_t i) {
    const int64_t ch = i / spatial % c;
    const double qs = (xv[i] - mv[ch]) / std::sqrt(vv[ch] + eps) * sv[ch];
    return 13 * kU * std::fabs(qs) + 2 * kU * std::fabs(qs + bv[ch]);
  });
}

TEST(OpenClNormTest, BatchNormMatchesTheReference) {
  uint32_t seed = 300;
  for (DataType dt : kTypes) {
    CheckBatchNorm(dt, dt, {2, 3, 5, 7}, 1e-5f, seed += 5);
    CheckBatchNorm(dt, dt, {4, 6}, 1e-3f, seed += 5);
    CheckBatchNorm(dt, dt, {1, 5, 3000}, 1e-5f, seed += 5);
    CheckBatchNorm(dt, DataType::kF32, {2, 4, 3, 3}, 1e-5f, seed += 5);  // fp32 statistics
    CheckBatchNorm(dt, dt, {0, 3, 4}, 1e-5f, seed += 5);
  }
  // Opset 9's inference mode (no extra outputs) and opset 6's is_test.
  CheckBatchNorm(DataType::kF32, DataType::kF32, {2, 3, 4}, 1e-5f, seed += 5, 9);
  CheckBatchNorm(DataType::kF16, DataType::kF16, {2, 3, 4}, 1e-5f, seed += 5, 6);
}

// ---- Reductions ----

// Per output of a reduction over `reduced` dims: the element count, sum |x| and sum x^2.
struct OutStats {
  std::vector<double> n, abs, sq;
};
OutStats ReduceStats(const Dims& dims, const std::vector<bool>& reduced,
                     const std::vector<float>& x) {
  const int rank = static_cast<int>(dims.size());
  std::vector<int64_t> ostride(rank, 0);
  int64_t nout = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (reduced[d]) continue;
    ostride[d] = nout;
    nout *= dims[d];
  }
  OutStats s{std::vector<double>(nout), std::vector<double>(nout), std::vector<double>(nout)};
  std::vector<int64_t> idx(rank, 0);
  for (size_t e = 0; e < x.size(); ++e) {
    int64_t o = 0;
    for (int d = 0; d < rank; ++d) o += idx[d] * ostride[d];
    s.n[o] += 1;
    s.abs[o] += std::fabs(x[e]);
    s.sq[o] += static_cast<double>(x[e]) * x[e];
    for (int d = rank - 1; d >= 0 && ++idx[d] == dims[d]; --d) idx[d] = 0;
  }
  return s;
}

// Bounds per op: the sums differ by 2 n u sum|x| (squares: the same rounded terms on both sides,
// so 2 n u sum x^2); the mean divides that by n and rounds (2u |y|); L2 = sqrt(s) moves by
// ds / (2 y) = n u y, plus 8u y for the square roots (3 ulps on the device where not correctly
// rounded); a product of n factors is within (n - 1)u relative, 2 n u |y| apart; Max and Min are
// exact.
double ReduceBound(OpType op, const OutStats& s, int64_t o, float y) {
  const double n = s.n[o], ay = std::fabs(y);
  switch (op) {
    case OpType::kReduceSum:
      return 2 * n * kU * s.abs[o];
    case OpType::kReduceMean:
    case OpType::kGlobalAveragePool:
      return 2 * kU * s.abs[o] + 2 * kU * ay;
    case OpType::kReduceSumSquare:
      return 2 * n * kU * s.sq[o];
    case OpType::kReduceL2:
      return (n + 8) * kU * ay;
    case OpType::kReduceProd:
      return 2 * n * kU * ay;
    default:
      return 0;
  }
}

struct ReduceCase {
  Dims dims;
  std::vector<int64_t> axes;
  bool keepdims = true;
  bool noop = false;  // noop_with_empty_axes
};

const OpType kReductions[] = {OpType::kReduceSum,      OpType::kReduceMean, OpType::kReduceMax,
                              OpType::kReduceMin,      OpType::kReduceProd, OpType::kReduceL2,
                              OpType::kReduceSumSquare};

// The reduction with its axes as a constant input (opset 18), or as an attribute at `version`.
NodeSpec ReduceSpec(OpType op, const ReduceCase& c, const ir::Tensor& x, int version = 18) {
  NodeSpec spec = Spec(op, {{"keepdims", IntAttr(c.keepdims ? 1 : 0)}}, {x});
  spec.since_version = version;
  const int since = op == OpType::kReduceSum ? 13 : 18;
  if (version >= since) {
    if (c.noop) spec.attrs.push_back({"noop_with_empty_axes", IntAttr(1)});
    spec.inputs.push_back(MakeInt64({static_cast<int64_t>(c.axes.size())}, c.axes));
    spec.constant_inputs = {1};
  } else if (!c.axes.empty()) {
    spec.attrs.push_back({"axes", IntsAttr(c.axes)});
  }
  return spec;
}

void CheckReduce(OpType op, DataType dt, const ReduceCase& c, const std::vector<float>& v,
                 int version = 18) {
  SCOPED_TRACE(absl::StrCat(ir::OpName(op), "/", DataTypeOnnxName(dt), " ",
                            ir::DimsToString(c.dims), " axes ", ir::DimsToString(c.axes),
                            " keepdims ", c.keepdims, " noop ", c.noop, " opset ", version));
  const ir::Tensor x = MakeStored(dt, c.dims, v);
  const Runs r = RunBoth(ReduceSpec(op, c, x, version));
  ASSERT_TRUE(r.want[0].defined());
  const int rank = static_cast<int>(c.dims.size());
  std::vector<bool> reduced(rank, c.axes.empty() && !c.noop);
  for (int64_t a : c.axes) {
    if (a < rank) reduced[a < 0 ? a + rank : a] = true;  // axis 0 of a scalar reduces nothing
  }
  const OutStats s = ReduceStats(c.dims, reduced, ToFloats(x));
  const std::vector<float> w = ToFloats(r.want[0]);
  ExpectClose(r.want[0], r.got[0], [&](int64_t o) { return ReduceBound(op, s, o, w[o]); });
}

TEST(OpenClNormTest, ReductionsMatchTheReference) {
  // Long rows (a work-group per output), short ones (an item per output), axes first, middle,
  // last, negative, several, all; keepdims off; noop_with_empty_axes.
  const std::vector<ReduceCase> cases = {
      {{4, 3000}, {1}},
      {{4, 3000}, {0}, false},
      {{3, 4, 5, 6}, {0, 2}, false},
      {{3, 4, 5, 6}, {-1}},
      {{3, 4, 5, 6}, {1, 3}},
      {{3, 4, 5, 6}, {}},
      {{3, 4, 5, 6}, {}, false, true},
      {{7, 1, 300}, {0, 2}},
      {{2, 3, 2, 3, 2, 3, 2, 3}, {0, 2, 4, 6}},
  };
  uint32_t seed = 400;
  for (OpType op : kReductions) {
    // Products of up to 3000 factors near 1 stay far from overflow and underflow.
    const float lo = op == OpType::kReduceProd ? 0.9f : -3,
                hi = op == OpType::kReduceProd ? 1.1f : 3;
    for (DataType dt : kTypes) {
      for (const ReduceCase& c : cases) {
        CheckReduce(op, dt, c, UniformValues(ir::NumElementsOf(c.dims), lo, hi, seed++));
      }
      // Axes as an attribute (before opset 18; ReduceSum before 13).
      const ReduceCase c{{5, 6, 7}, {0, -1}, true};
      CheckReduce(op, dt, c, UniformValues(210, lo, hi, seed++),
                  op == OpType::kReduceSum ? 11 : 13);
      const ReduceCase all{{5, 6, 70}, {}, false};
      CheckReduce(op, dt, all, UniformValues(2100, lo, hi, seed++),
                  op == OpType::kReduceSum ? 11 : 13);
    }
  }
}

TEST(OpenClNormTest, ReductionSpecialValuesAndEmptyTensors) {
  for (OpType op : kReductions) {
    for (DataType dt : kTypes) {
      // NaN in output 0's elements, +-inf in output 1's, a NaN first in output 2's, on both paths
      // (short rows of 10 and long ones of 100).
      for (int64_t n : {10, 100}) {
        std::vector<float> v = UniformValues(4 * n, 0.5f, 1.5f, 9);
        v[n / 2] = kNaN;
        v[n + 1] = kInf;
        v[n + 3] = -kInf;
        v[2 * n] = kNaN;
        CheckReduce(op, dt, {{4, n}, {1}}, v);
      }
      // No input elements: each output is the empty reduction; no outputs; a scalar.
      CheckReduce(op, dt, {{0, 5}, {0}}, {});
      CheckReduce(op, dt, {{0, 5}, {1}}, {});
      CheckReduce(op, dt, {{}, {}}, {2.5f});
      CheckReduce(op, dt, {{}, {0}}, {-1.5f});
    }
  }
}

// ---- Pools ----

TEST(OpenClNormTest, GlobalPoolsMatchTheReference) {
  uint32_t seed = 500;
  for (OpType op : {OpType::kGlobalAveragePool, OpType::kGlobalMaxPool}) {
    for (DataType dt : kTypes) {
      for (const Dims& dims : {Dims{2, 3, 50, 60}, Dims{2, 3, 4, 5}, Dims{2, 3}, Dims{1, 2, 7},
                               Dims{0, 3, 4, 4}, Dims{2, 3, 0, 4}}) {
        SCOPED_TRACE(
            absl::StrCat(ir::OpName(op), "/", DataTypeOnnxName(dt), " ", ir::DimsToString(dims)));
        const ir::Tensor x =
            MakeStored(dt, dims, UniformValues(ir::NumElementsOf(dims), -3, 3, seed++));
        const Runs r = RunBoth(Spec(op, {}, {x}));
        const int64_t planes = dims[0] * dims[1];
        std::vector<bool> reduced(dims.size(), true);
        reduced[0] = reduced[1] = false;
        const OutStats s = ReduceStats(dims, reduced, ToFloats(x));
        ASSERT_TRUE(r.want[0].defined());
        const std::vector<float> w = ToFloats(r.want[0]);
        ASSERT_EQ(static_cast<int64_t>(w.size()), planes);
        ExpectClose(r.want[0], r.got[0], [&](int64_t o) { return ReduceBound(op, s, o, w[o]); });
      }
      // GlobalMaxPool as the reference: a NaN first in its plane is the result, later ones are
      // skipped; the average takes every NaN.
      for (int64_t side : {3, 10}) {
        std::vector<float> v = UniformValues(4 * side * side, -3, 3, seed++);
        v[0] = kNaN;
        v[side * side + 5] = kNaN;
        v[2 * side * side + 1] = kInf;
        v[3 * side * side + 2] = -kInf;
        const Runs r = RunBoth(Spec(op, {}, {MakeStored(dt, {2, 2, side, side}, v)}));
        ExpectExact(r.want[0], r.got[0]);
        if (op == OpType::kGlobalMaxPool) {
          const std::vector<float> g = ToFloats(r.got[0]);
          ASSERT_EQ(g.size(), 4u);
          EXPECT_TRUE(std::isnan(g[0]));
          EXPECT_FALSE(std::isnan(g[1]));
        }
      }
    }
  }
}

struct PoolCase {
  Dims dims;
  Attrs attrs;
};

TEST(OpenClNormTest, PoolsMatchTheReference) {
  const Dims d2{2, 3, 17, 19};
  const std::vector<PoolCase> cases = {
      {d2, {{"kernel_shape", IntsAttr({3, 3})}}},
      {d2,
       {{"kernel_shape", IntsAttr({3, 3})},
        {"strides", IntsAttr({2, 2})},
        {"pads", IntsAttr({1, 1, 1, 1})}}},
      {d2,
       {{"kernel_shape", IntsAttr({2, 3})},
        {"strides", IntsAttr({2, 1})},
        {"pads", IntsAttr({0, 1, 1, 0})},
        {"ceil_mode", IntAttr(1)}}},
      {d2,
       {{"kernel_shape", IntsAttr({3, 3})},
        {"strides", IntsAttr({2, 2})},
        {"pads", IntsAttr({1, 1, 1, 1})},
        {"count_include_pad", IntAttr(1)}}},
      {d2,
       {{"kernel_shape", IntsAttr({3, 3})},
        {"strides", IntsAttr({2, 2})},
        {"pads", IntsAttr({1, 1, 1, 1})},
        {"count_include_pad", IntAttr(1)},
        {"ceil_mode", IntAttr(1)}}},
      {d2,
       {{"kernel_shape", IntsAttr({3, 2})},
        {"dilations", IntsAttr({2, 3})},
        {"pads", IntsAttr({2, 1, 2, 1})}}},
      {d2,
       {{"kernel_shape", IntsAttr({4, 4})},
        {"strides", IntsAttr({3, 3})},
        {"auto_pad", StringAttr("SAME_UPPER")}}},
      {d2,
       {{"kernel_shape", IntsAttr({4, 3})},
        {"strides", IntsAttr({2, 2})},
        {"auto_pad", StringAttr("SAME_LOWER")},
        {"count_include_pad", IntAttr(1)}}},
      {d2,
       {{"kernel_shape", IntsAttr({5, 5})},
        {"strides", IntsAttr({2, 3})},
        {"auto_pad", StringAttr("VALID")}}},
      // Windows wholly inside the pads: the average 0, the maximum the lowest float.
      {{1, 2, 3, 3},
       {{"kernel_shape", IntsAttr({2, 2})},
        {"pads", IntsAttr({2, 2, 2, 2})},
        {"strides", IntsAttr({2, 2})}}},
      {{2, 3, 20},
       {{"kernel_shape", IntsAttr({4})}, {"strides", IntsAttr({3})}, {"pads", IntsAttr({1, 2})}}},
      {{0, 3, 5, 5}, {{"kernel_shape", IntsAttr({2, 2})}}},
  };
  uint32_t seed = 600;
  for (OpType op : {OpType::kMaxPool, OpType::kAveragePool}) {
    for (DataType dt : kTypes) {
      for (size_t i = 0; i < cases.size(); ++i) {
        SCOPED_TRACE(absl::StrCat(ir::OpName(op), "/", DataTypeOnnxName(dt), " case ", i));
        std::vector<float> v = UniformValues(ir::NumElementsOf(cases[i].dims), -5, 5, seed++);
        if (v.size() > 300) {  // NaN (skipped by the maximum), infinities
          v[40] = kNaN;
          v[100] = -kInf;
          v[250] = kInf;
        }
        const Runs r = RunBoth(Spec(op, cases[i].attrs, {MakeStored(dt, cases[i].dims, v)}));
        // Both sum the window in the same order: the average differs only by the division
        // (2.5 ulps where not correctly rounded); the maximum is exact.
        const std::vector<float> w =
            r.want[0].defined() ? ToFloats(r.want[0]) : std::vector<float>();
        ExpectClose(r.want[0], r.got[0], [&](int64_t o) {
          return op == OpType::kMaxPool ? 0 : 6 * kU * std::fabs(w[o]);
        });
      }
    }
  }
}

// ---- Errors and refusals ----

TEST(OpenClNormTest, ErrorsMatchTheReference) {
  using absl::StatusCode;
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  const ir::Tensor x23 = MakeFloat({2, 3}, Iota(6, 0));
  ExpectSameError(Spec(OpType::kSoftmax, {{"axis", IntAttr(2)}}, {x23}), kInvalid, "out of range");
  ExpectSameError(Spec(OpType::kLogSoftmax, {{"axis", IntAttr(-3)}}, {x23}), kInvalid,
                  "out of range");

  // LayerNormalization: parameters that do not broadcast, the axis, the rank, the stash type.
  const ir::Tensor s3 = MakeFloat({3}, {1, 2, 3});
  ExpectSameError(Spec(OpType::kLayerNormalization, {}, {x23, MakeFloat({2}, {1, 2})}), kInvalid,
                  "does not broadcast");
  ExpectSameError(Spec(OpType::kLayerNormalization, {{"axis", IntAttr(2)}}, {x23, x23}), kInvalid,
                  "out of range");
  ExpectSameError(Spec(OpType::kLayerNormalization, {}, {MakeFloat({}, {1}), MakeFloat({}, {1})}),
                  kInvalid, "rank >= 1");
  ExpectSameError(Spec(OpType::kLayerNormalization, {{"stash_type", IntAttr(7)}}, {x23, s3}),
                  kInvalid, "not a float type");
  // fp16 statistics, and a scale that varies across rows, run on the CPU only.
  ExpectRefused(Spec(OpType::kLayerNormalization, {{"stash_type", IntAttr(10)}}, {x23, s3}));
  ExpectRefused(Spec(OpType::kLayerNormalization, {{"axis", IntAttr(1)}},
                     {MakeFloat({2, 3, 4}, Iota(24, 0)), MakeFloat({3, 1}, {1, 2, 3})}));

  // BatchNormalization: parameter sizes, the rank, training.
  const ir::Tensor x234 = MakeFloat({2, 3, 4}, Iota(24, 0));
  const ir::Tensor p3 = MakeFloat({3}, {1, 2, 3});
  ExpectSameError(Spec(OpType::kBatchNormalization, {}, {x234, p3, p3, MakeFloat({2}, {1, 2}), p3}),
                  kInvalid, "mean must have 3 elements");
  ExpectSameError(
      Spec(OpType::kBatchNormalization, {}, {MakeFloat({3}, {1, 2, 3}), p3, p3, p3, p3}), kInvalid,
      "rank >= 2");
  NodeSpec outputs = Spec(OpType::kBatchNormalization, {}, {x234, p3, p3, p3, p3});
  outputs.num_outputs = 3;
  ExpectSameError(outputs, kInvalid, "training_mode is 0");
  outputs.attrs = {{"training_mode", IntAttr(1)}};
  ExpectRefused(outputs);

  // Reductions: repeated and out-of-range axes, axes as an attribute from opset 18, axes of the
  // wrong type; axes that are not constants are refused.
  ExpectSameError(ReduceSpec(OpType::kReduceMean, {{2, 3}, {1, -1}}, x23), kInvalid, "repeated");
  ExpectSameError(ReduceSpec(OpType::kReduceMax, {{2, 3}, {2}}, x23), kInvalid, "out of range");
  ExpectSameError(Spec(OpType::kReduceL2, {{"axes", IntsAttr({0})}}, {x23}), kInvalid,
                  "not as an attribute");
  NodeSpec float_axes = Spec(OpType::kReduceSum, {}, {x23, MakeFloat({1}, {0})});
  float_axes.constant_inputs = {1};
  ExpectSameError(float_axes, kInvalid, "int64 or int32");
  ExpectRefused(Spec(OpType::kReduceSum, {}, {x23, MakeInt64({1}, {0})}));

  // Pools: the rank, the window, the attributes; MaxPool's Indices and 3-D pools are refused.
  ExpectSameError(Spec(OpType::kGlobalAveragePool, {}, {MakeFloat({3}, {1, 2, 3})}), kInvalid,
                  "rank >= 2");
  ExpectSameError(Spec(OpType::kGlobalMaxPool, {}, {MakeFloat({3}, {1, 2, 3})}), kInvalid,
                  "rank >= 2");
  const ir::Tensor img = MakeFloat({1, 1, 4, 4}, Iota(16, 0));
  ExpectSameError(Spec(OpType::kMaxPool, {}, {img}), kInvalid, "kernel_shape is required");
  ExpectSameError(Spec(OpType::kAveragePool, {{"kernel_shape", IntsAttr({5, 5})}}, {img}), kInvalid,
                  "does not fit");
  ExpectSameError(Spec(OpType::kAveragePool, {{"kernel_shape", IntsAttr({2})}}, {img}), kInvalid,
                  "kernel_shape has 1 values");
  ExpectSameError(Spec(OpType::kMaxPool,
                       {{"kernel_shape", IntsAttr({2, 2})}, {"pads", IntsAttr({1, 1, 1})}}, {img}),
                  kInvalid, "even length");
  ExpectSameError(Spec(OpType::kMaxPool,
                       {{"kernel_shape", IntsAttr({2, 2})}, {"storage_order", IntAttr(2)}}, {img}),
                  kInvalid, "storage_order");
  NodeSpec indices = Spec(OpType::kMaxPool, {{"kernel_shape", IntsAttr({2, 2})}}, {img});
  indices.num_outputs = 2;
  ExpectRefused(indices);
  ExpectRefused(Spec(OpType::kMaxPool, {{"kernel_shape", IntsAttr({2, 2, 2})}},
                     {MakeFloat({1, 1, 3, 3, 3}, Iota(27, 0))}));
}

}  // namespace
}  // namespace kiln::testing
