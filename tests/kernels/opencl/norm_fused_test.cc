// The OpenCL AddLayerNorm and RMSNormalization kernels (engine/kernels/opencl/norm_fused.cc)
// against the reference kernels, at fp32, fp16 and bf16 storage and mixed dtypes, on the
// machine's OpenCL device (PoCL in CI): same shapes, same errors, NaN alike, the sum output
// bit-for-bit, and normalised values within bounds derived below from fp32 rounding.
//
// Notation: u = 2^-24, the fp32 unit roundoff; k ulps of a value are at most 2k u of it. A sum of
// n terms in any order is within (n - 1) u sum|x| of the exact sum (Higham, "Accuracy and
// Stability of Numerical Algorithms", 4.2), so the device's (runs of items folded by a tree) and
// the reference's (sequential) are within 2 n u sum|x| of each other. The device's division and
// sqrt are within 2.5 and 3 ulps where not correctly rounded (OpenCL C 1.2, table 7.1); the
// CPU's are correctly rounded. The bounds are for the fp32 results; 16-bit storage adds one of
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

constexpr double kU = 0x1p-24;
const DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// Bit-for-bit (NaN alike): the same fp32 value rounded once to the same storage type.
void ExpectExact(const ir::Tensor& want, const ir::Tensor& got) {
  ASSERT_TRUE(want.defined());
  ASSERT_TRUE(got.defined());
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.dims(), want.dims());
  const std::vector<float> w = ToFloats(want), g = ToFloats(got);
  int bad = 0;
  for (size_t i = 0; i < w.size() && bad < 5; ++i) {
    if ((std::isnan(w[i]) && std::isnan(g[i])) || w[i] == g[i]) continue;
    ++bad;
    ADD_FAILURE() << "element " << i << ": want " << w[i] << ", got " << g[i];
  }
}

// Element i of `dims` read from `t` (right-aligned numpy broadcast).
float Broadcast(const std::vector<float>& t, const Dims& tdims, const Dims& dims, int64_t i) {
  int64_t off = 0, stride = 1;
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    const int64_t idx = i % dims[d];
    i /= dims[d];
    const int td = d - static_cast<int>(dims.size() - tdims.size());
    if (td < 0) continue;
    if (tdims[td] != 1) off += idx * stride;
    stride *= tdims[td];
  }
  return t[off];
}

// ---- AddLayerNorm ----

// Bounds for LayerNorm rows of n over x = A + B (the same fp32 sums on both sides; as
// tests/kernels/opencl/norm_test.cc). Each backend's mean is within e = n u mean|x| + u |mean| of
// the exact one. As sum(x - mean) = 0, a mean error d enters the variance only as d^2: each
// variance is within (n + 3)u (var + e^2) + e^2, and 1/sqrt(var + eps) then differs by
// rho = dvar / (2 (var + eps)) relative, plus 16u for the additions, square roots and divisions
// (3 ulps + 2.5 ulps on the device where not correctly rounded). Y = d inv s + b: |s| inv
// (|dd| + |d| rho) with dd = 2e + 2u |d|, and 2u per rounding of d inv, of the product by s and
// of the sum with b, on each side.
std::vector<double> LayerNormBounds(const std::vector<float>& x, int64_t rows, int64_t n,
                                    const std::vector<float>& scale, const std::vector<float>& bias,
                                    double eps) {
  std::vector<double> tol(x.size());
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
    for (int64_t k = 0; k < n; ++k) {
      const double d = xr[k] - mu, s = scale[k % scale.size()];
      const double b = bias.empty() ? 0 : bias[k % bias.size()];
      const double dd = 2 * e + 2 * kU * std::fabs(d);
      tol[r * n + k] = std::fabs(s) * inv * (dd + std::fabs(d) * rho) +
                       6 * kU * (std::fabs(d * inv * s) + std::fabs(b)) +
                       2 * kU * std::fabs(d * inv * s + b);
    }
  }
  return tol;
}

// Dtypes of one AddLayerNorm case: A, B, scale, bias, Y, the sum output.
struct AlnTypes {
  DataType a, b, s, q, y, z;
};
AlnTypes Same(DataType dt) { return {dt, dt, dt, dt, dt, dt}; }

// An AddLayerNorm of A (dims) + B (bdims) normalised from `axis`; `bias_dims` null: no bias;
// `sum`: the sum output requested. The outputs' dtypes are the graph's (output_dtypes).
void CheckAddLayerNorm(const AlnTypes& t, const Dims& dims, const Dims& bdims, int64_t axis,
                       const Dims& sdims, const Dims* qdims, float eps, bool sum, uint32_t seed,
                       std::vector<float> av = {}, std::vector<float> bv = {}) {
  SCOPED_TRACE(absl::StrCat("A ", DataTypeOnnxName(t.a), ir::DimsToString(dims), " B ",
                            DataTypeOnnxName(t.b), ir::DimsToString(bdims), " axis ", axis,
                            " scale ", DataTypeOnnxName(t.s), ir::DimsToString(sdims), " Y ",
                            DataTypeOnnxName(t.y), " sum ", sum ? DataTypeOnnxName(t.z) : "no"));
  if (av.empty()) av = UniformValues(ir::NumElementsOf(dims), -2, 6, seed);
  if (bv.empty()) bv = UniformValues(ir::NumElementsOf(bdims), -1, 2, seed + 1);
  const ir::Tensor a = MakeStored(t.a, dims, av);
  const ir::Tensor b = MakeStored(t.b, bdims, bv);
  const ir::Tensor s =
      MakeStored(t.s, sdims, UniformValues(ir::NumElementsOf(sdims), 0.5f, 1.5f, seed + 2));
  ir::Tensor q;
  if (qdims) q = MakeStored(t.q, *qdims, UniformValues(ir::NumElementsOf(*qdims), -1, 1, seed + 3));
  NodeSpec spec = Spec(OpType::kAddLayerNorm,
                       {{"axis", IntAttr(axis)}, {"epsilon", FloatAttr(eps)}}, {a, b, s});
  if (qdims) spec.inputs.push_back(q);
  spec.num_outputs = sum ? 2 : 1;
  spec.output_dtypes = {t.y, t.z};
  const Runs r = RunBoth(spec);
  ASSERT_EQ(r.got.size(), static_cast<size_t>(spec.num_outputs));
  // The output shape is A's (B broadcasts to it in every case here); the fp32 sum as both
  // backends compute it: each operand converted exactly to fp32, one rounded addition.
  const std::vector<float> af = ToFloats(a), bf = ToFloats(b);
  std::vector<float> x(af.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = af[i] + Broadcast(bf, bdims, dims, static_cast<int64_t>(i));
  }
  const int rank = static_cast<int>(dims.size());
  const int ax = static_cast<int>(axis < 0 ? axis + rank : axis);
  const int64_t rows = ir::NumElementsOf({dims.data(), static_cast<size_t>(ax)});
  const int64_t n = ir::NumElementsOf(dims) / std::max<int64_t>(rows, 1);
  const std::vector<double> tol =
      LayerNormBounds(x, rows, n, ToFloats(s), qdims ? ToFloats(q) : std::vector<float>(), eps);
  ASSERT_TRUE(r.got[0].defined());
  EXPECT_EQ(r.got[0].dtype(), t.y);
  ExpectClose(r.want[0], r.got[0], [&](int64_t i) { return tol[i]; });
  if (sum) {
    EXPECT_EQ(r.got[1].dtype(), t.z);
    ExpectExact(r.want[1], r.got[1]);
  }
}

TEST(OpenClNormFusedTest, AddLayerNormMatchesTheReference) {
  uint32_t seed = 100;
  const Dims b3000{3000}, b35{3, 5}, b1{1}, b9{9};
  for (DataType dt : kTypes) {
    const AlnTypes t = Same(dt);
    // Rows longer than a work-group, with bias and the sum; then without either.
    CheckAddLayerNorm(t, {4, 3000}, {4, 3000}, -1, {3000}, &b3000, 1e-5f, true, seed += 4);
    CheckAddLayerNorm(t, {4, 3000}, {4, 3000}, -1, {3000}, nullptr, 1e-5f, false, seed += 4);
    // An earlier axis (two dims per row), parameters over the whole row and with leading 1s.
    CheckAddLayerNorm(t, {2, 3, 5}, {2, 3, 5}, 1, {3, 5}, nullptr, 1e-3f, true, seed += 4);
    CheckAddLayerNorm(t, {2, 3, 5}, {2, 3, 5}, -2, {1, 3, 5}, &b35, 1e-5f, false, seed += 4);
    // Parameters repeating along the row; the whole tensor one row (axis 0); a large epsilon.
    CheckAddLayerNorm(t, {6, 7, 9}, {6, 7, 9}, 1, {9}, &b1, 1e-5f, true, seed += 4);
    CheckAddLayerNorm(t, {6, 7}, {6, 7}, 0, {7}, nullptr, 0.1f, true, seed += 4);
    // B broadcast: a vector along rows, a row per batch, a column, leading dims of its own.
    CheckAddLayerNorm(t, {3, 4, 9}, {9}, -1, {9}, &b9, 1e-5f, true, seed += 4);
    CheckAddLayerNorm(t, {3, 4, 9}, {3, 1, 9}, -1, {9}, nullptr, 1e-5f, true, seed += 4);
    CheckAddLayerNorm(t, {3, 4, 600}, {4, 1}, 1, {600}, &b1, 1e-5f, true, seed += 4);
    CheckAddLayerNorm(t, {2, 3, 4, 5}, {3, 1, 5}, -1, {5}, nullptr, 1e-5f, true, seed += 4);
  }
}

TEST(OpenClNormFusedTest, AddLayerNormMixedDtypes) {
  // Each operand read from its own type; each output rounded once to the type the graph gives
  // it, which may differ from A's and between the two outputs.
  const Dims b700{700};
  using D = DataType;
  uint32_t seed = 500;
  for (const AlnTypes& t : {AlnTypes{D::kF16, D::kF32, D::kBF16, D::kF32, D::kF32, D::kF16},
                            AlnTypes{D::kBF16, D::kF16, D::kF32, D::kF16, D::kF16, D::kF32},
                            AlnTypes{D::kF32, D::kF32, D::kF16, D::kBF16, D::kBF16, D::kBF16},
                            AlnTypes{D::kF32, D::kBF16, D::kF32, D::kF32, D::kF16, D::kBF16}}) {
    CheckAddLayerNorm(t, {3, 700}, {3, 700}, -1, {700}, &b700, 1e-5f, true, seed += 4);
    CheckAddLayerNorm(t, {2, 5, 7}, {7}, 1, {7}, nullptr, 1e-4f, true, seed += 4);
  }
}

TEST(OpenClNormFusedTest, AddLayerNormEmptyTensorsAndNaN) {
  for (DataType dt : kTypes) {
    SCOPED_TRACE(DataTypeOnnxName(dt));
    // No rows; empty rows: both outputs empty, of the sum's shape.
    for (const Dims& dims : {Dims{0, 8}, Dims{3, 0}}) {
      NodeSpec spec = Spec(OpType::kAddLayerNorm, {},
                           {MakeStored(dt, dims, {}), MakeStored(dt, dims, {}),
                            MakeStored(dt, {dims[1]}, UniformValues(dims[1], 1, 2, 1))});
      spec.num_outputs = 2;
      const Runs r = RunBoth(spec);
      for (int i = 0; i < 2; ++i) {
        ASSERT_TRUE(r.got[i].defined());
        EXPECT_EQ(r.got[i].dims(), dims);
        ExpectExact(r.want[i], r.got[i]);
      }
    }
    // Row 0: a NaN in A; row 1: +inf in A; row 2: +inf in A and -inf in B at the same place.
    // Each makes its row NaN (inf - mean is NaN or the variance infinite); the sum output keeps
    // the NaN and the infinity where they are; row 3 stays finite.
    std::vector<float> av = UniformValues(4 * 300, -1, 1, 3), bv = UniformValues(4 * 300, -1, 1, 4);
    av[7] = kNaN;
    av[300 + 299] = kInf;
    av[600 + 5] = kInf;
    bv[600 + 5] = -kInf;
    CheckAddLayerNorm(Same(dt), {4, 300}, {4, 300}, -1, {300}, nullptr, 1e-5f, true, 11, av, bv);
    NodeSpec spec = Spec(OpType::kAddLayerNorm, {},
                         {MakeStored(dt, {4, 300}, av), MakeStored(dt, {4, 300}, bv),
                          MakeStored(dt, {300}, UniformValues(300, 1, 2, 7))});
    spec.opencl = true;
    spec.num_outputs = 2;
    const std::vector<ir::Tensor> got = RunNodeOk(spec);
    ASSERT_TRUE(got[0].defined() && got[1].defined());
    const std::vector<float> y = ToFloats(got[0]), z = ToFloats(got[1]);
    for (int64_t i = 0; i < 1200; ++i) {
      EXPECT_EQ(std::isnan(y[i]), i < 900) << "element " << i;
      EXPECT_EQ(std::isnan(z[i]), i == 7 || i == 605) << "element " << i;
    }
    EXPECT_EQ(z[599], kInf);
  }
}

// ---- RMSNormalization ----

// Bounds for a row of n: both sides square the same values with the same roundings, so their
// sums of squares are within 2 n u sum x^2 of each other: the mean square within 2 n u + 2 * 3.5u
// relative (each side's division, 2.5 ulps on the device where not correctly rounded), plus
// 2 * u for adding eps (which only shrinks the relative error); the square root halves that and
// adds 3.5 ulps a side: rms within rho = n u + 16u relative. Y = x / rms * s then differs by
// rho + 2 * (2.5 + 0.5) ulps relative: (n + 28)u |y|.
std::vector<double> RmsBounds(const std::vector<float>& y, int64_t n) {
  std::vector<double> tol(y.size());
  for (size_t i = 0; i < y.size(); ++i) tol[i] = (n + 28) * kU * std::fabs(y[i]);
  return tol;
}

void CheckRms(DataType dt, DataType pdt, const Dims& dims, int64_t axis, const Dims& sdims,
              float eps, uint32_t seed, std::vector<float> xv = {}) {
  SCOPED_TRACE(absl::StrCat(DataTypeOnnxName(dt), " ", ir::DimsToString(dims), " axis ", axis,
                            " scale ", DataTypeOnnxName(pdt), ir::DimsToString(sdims), " eps ",
                            eps));
  if (xv.empty()) xv = UniformValues(ir::NumElementsOf(dims), -3, 3, seed);
  const ir::Tensor x = MakeStored(dt, dims, xv);
  const ir::Tensor s =
      MakeStored(pdt, sdims, UniformValues(ir::NumElementsOf(sdims), 0.5f, 1.5f, seed + 1));
  NodeSpec spec = Spec(OpType::kRMSNormalization,
                       {{"axis", IntAttr(axis)}, {"epsilon", FloatAttr(eps)}}, {x, s});
  const Runs r = RunBoth(spec);
  ASSERT_TRUE(r.want[0].defined());
  const int rank = static_cast<int>(dims.size());
  const int ax = static_cast<int>(axis < 0 ? axis + rank : axis);
  const int64_t n = ir::NumElementsOf({dims.data() + ax, dims.size() - ax});
  const std::vector<double> tol = RmsBounds(ToFloats(r.want[0]), n);
  ExpectClose(r.want[0], r.got[0], [&](int64_t i) { return tol[i]; });
}

TEST(OpenClNormFusedTest, RmsNormMatchesTheReference) {
  uint32_t seed = 700;
  for (DataType dt : kTypes) {
    CheckRms(dt, dt, {4, 3000}, -1, {3000}, 1e-5f, seed += 2);
    CheckRms(dt, dt, {2, 3, 5}, 1, {3, 5}, 1e-3f, seed += 2);
    CheckRms(dt, dt, {2, 3, 5}, -2, {1, 3, 5}, 1e-5f, seed += 2);
    CheckRms(dt, dt, {6, 7, 9}, 1, {9}, 1e-5f, seed += 2);  // repeats along the row
    CheckRms(dt, dt, {6, 7}, 0, {1}, 0.5f, seed += 2);      // one row; epsilon dominates
    // The scale of another type than X (computed in fp32 from its own type).
    CheckRms(dt, dt == DataType::kF32 ? DataType::kBF16 : DataType::kF32, {3, 2, 700}, -1, {700},
             1e-5f, seed += 2);
  }
}

TEST(OpenClNormFusedTest, RmsNormEmptyTensorsAndNaN) {
  for (DataType dt : kTypes) {
    SCOPED_TRACE(DataTypeOnnxName(dt));
    for (const Dims& dims : {Dims{0, 8}, Dims{3, 0}}) {
      NodeSpec spec = Spec(
          OpType::kRMSNormalization, {},
          {MakeStored(dt, dims, {}), MakeStored(dt, {dims[1]}, UniformValues(dims[1], 1, 2, 1))});
      const Runs r = RunBoth(spec);
      ASSERT_TRUE(r.got[0].defined());
      EXPECT_EQ(r.got[0].dims(), dims);
    }
    // Row 0: a NaN makes the row NaN. Row 1: an infinity makes rms infinite: the infinity
    // becomes NaN (inf / inf), the rest 0. Row 2: all zeros stay 0 (eps keeps rms > 0).
    std::vector<float> v = UniformValues(4 * 300, -1, 1, 3);
    v[7] = kNaN;
    v[300 + 100] = kInf;
    std::fill(v.begin() + 600, v.begin() + 900, 0.0f);
    CheckRms(dt, dt, {4, 300}, -1, {300}, 1e-5f, 9, v);
    NodeSpec spec =
        Spec(OpType::kRMSNormalization, {},
             {MakeStored(dt, {4, 300}, v), MakeStored(dt, {300}, UniformValues(300, 1, 2, 4))});
    spec.opencl = true;
    const ir::Tensor got = RunNodeOk0(spec);
    ASSERT_TRUE(got.defined());
    const std::vector<float> y = ToFloats(got);
    for (int64_t i = 0; i < 1200; ++i) {
      const int64_t row = i / 300;
      EXPECT_EQ(std::isnan(y[i]), row == 0 || i == 400) << "element " << i;
      if ((row == 1 && i != 400) || row == 2) {
        EXPECT_EQ(y[i], 0.0f) << "element " << i;
      }
    }
  }
}

// ---- Errors and refusals ----

TEST(OpenClNormFusedTest, ErrorsMatchTheReference) {
  using absl::StatusCode;
  const StatusCode kInvalid = StatusCode::kInvalidArgument;
  const ir::Tensor x23 = MakeFloat({2, 3}, Iota(6, 0));
  const ir::Tensor s3 = MakeFloat({3}, {1, 2, 3});
  const ir::Tensor scalar = MakeFloat({}, {1});

  // AddLayerNorm: A and B that do not broadcast, the axis, the rank, parameters that do not
  // broadcast, operands and outputs of non-float types.
  const OpType aln = OpType::kAddLayerNorm;
  ExpectSameError(Spec(aln, {}, {x23, MakeFloat({2}, {1, 2}), s3}), kInvalid,
                  "cannot be broadcast");
  ExpectSameError(Spec(aln, {{"axis", IntAttr(2)}}, {x23, x23, s3}), kInvalid, "out of range");
  ExpectSameError(Spec(aln, {{"axis", IntAttr(-3)}}, {x23, s3, s3}), kInvalid, "out of range");
  ExpectSameError(Spec(aln, {}, {scalar, scalar, scalar}), kInvalid, "rank >= 1");
  ExpectSameError(Spec(aln, {}, {x23, x23, MakeFloat({2}, {1, 2})}), kInvalid,
                  "scale of shape [2] does not broadcast");
  ExpectSameError(Spec(aln, {}, {x23, x23, s3, MakeFloat({4}, {1, 2, 3, 4})}), kInvalid,
                  "bias of shape [4] does not broadcast");
  ExpectSameError(Spec(aln, {}, {x23, MakeInt64({3}, {1, 2, 3}), s3}), kInvalid,
                  "B must be a float tensor");
  ExpectSameError(Spec(aln, {}, {x23, x23}), kInvalid, "input 2 is required");
  NodeSpec int_out = Spec(aln, {}, {x23, x23, s3});
  int_out.num_outputs = 2;
  int_out.output_dtypes = {DataType::kF32, DataType::kI32};
  ExpectSameError(int_out, kInvalid, "output 1 must be a float type");

  // RMSNormalization: the stash type, the rank, the axis, the scale.
  const OpType rms = OpType::kRMSNormalization;
  ExpectSameError(Spec(rms, {{"stash_type", IntAttr(7)}}, {x23, s3}), kInvalid, "not a float type");
  ExpectSameError(Spec(rms, {}, {scalar, scalar}), kInvalid, "rank >= 1");
  ExpectSameError(Spec(rms, {{"axis", IntAttr(2)}}, {x23, s3}), kInvalid, "out of range");
  ExpectSameError(Spec(rms, {}, {x23, MakeFloat({2}, {1, 2})}), kInvalid, "does not broadcast");
  ExpectSameError(Spec(rms, {}, {x23, MakeInt64({3}, {1, 2, 3})}), kInvalid,
                  "scale must be a float tensor");
}

TEST(OpenClNormFusedTest, RefusedNodesStayOnTheCpu) {
  const ir::Tensor x234 = MakeFloat({2, 3, 4}, Iota(24, 0));
  const ir::Tensor s4 = MakeFloat({4}, {1, 2, 3, 4});
  const ir::Tensor s31 = MakeFloat({3, 1}, {1, 2, 3});
  // A scale that broadcasts within the row, and one that varies across rows.
  ExpectRefused(Spec(OpType::kAddLayerNorm, {{"axis", IntAttr(1)}}, {x234, x234, s31}));
  ExpectRefused(Spec(OpType::kAddLayerNorm, {}, {x234, x234, MakeFloat({3, 4}, Iota(12, 1))}));
  ExpectRefused(Spec(OpType::kRMSNormalization, {{"axis", IntAttr(1)}}, {x234, s31}));
  ExpectRefused(Spec(OpType::kRMSNormalization, {}, {x234, MakeFloat({3, 4}, Iota(12, 1))}));
  // Double operands or outputs (the reference computes in double).
  NodeSpec dbl = Spec(OpType::kAddLayerNorm, {},
                      {x234, MakeTensor<double>({4}, {1, 2, 3, 4}, DataType::kF64), s4});
  ExpectRefused(dbl);
  NodeSpec dbl_out = Spec(OpType::kAddLayerNorm, {}, {x234, x234, s4});
  dbl_out.num_outputs = 2;
  dbl_out.output_dtypes = {DataType::kF32, DataType::kF64};
  ExpectRefused(dbl_out);
  // A + B broadcasting over more than 4 merged dims.
  ExpectRefused(Spec(
      OpType::kAddLayerNorm, {},
      {MakeFloat({2, 1, 2, 1, 2, 3}, UniformValues(24, -1, 1, 1)),
       MakeFloat({1, 2, 1, 2, 1, 3}, UniformValues(12, -1, 1, 2)), MakeFloat({3}, {1, 2, 3})}));
  // RMSNormalization with fp16 or double statistics.
  ExpectRefused(Spec(OpType::kRMSNormalization, {{"stash_type", IntAttr(10)}}, {x234, s4}));
  ExpectRefused(Spec(OpType::kRMSNormalization, {{"stash_type", IntAttr(11)}}, {x234, s4}));
}

}  // namespace
}  // namespace kiln::testing
