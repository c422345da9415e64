// The OpenCL Attention kernel against the reference kernel (cpu/ref/nn_attention.cc) at fp32,
// fp16 and bf16 storage, on the machine's OpenCL device (PoCL in CI): 4-D and 3-D layouts,
// grouped-query heads, S_q != S_kv, rows longer than a work-group and than local memory holds,
// causal, boolean and additive masks of every shape the reference broadcasts, scale and softcap,
// fully masked rows, the same errors, and the nodes `supports` leaves to the CPU.
//
// Bounds (fp32; u = 2^-24, the unit roundoff; k ulps are at most 2k u relative). Both sides read
// the same inputs and use the same scale factor. Per key j of a row:
//  - the dot products (D terms, any order) are each within D u sum|q k| of the exact one (Higham,
//    "Accuracy and Stability of Numerical Algorithms", 4.2), so within 2 D u sum|q k| of each
//    other; times the factor, plus 2u |x| for its rounding on each side;
//  - softcap c tanh(x / c) (slope <= 1): the division's 2u |x|, tanh within 5 ulps on the device
//    (OpenCL C 1.2, table 7.1) and 2 in glibc, 14u |y|, and the product's 2u |y|;
//  - adding the mask: 2u |s|. Masked keys are -inf on both sides exactly.
// The maxima then differ by at most the largest score difference dm; exp's argument s - m by
// ds + dm + 2u |s - m|, and exp (3 ulps on the device, 1 in glibc) adds 8u relative: each
// exp(s - m) is within re = expm1(dt) + 8u relative. The sums of the exps (S_kv terms, any
// order) are within max re + 2 S_kv u relative; the probabilities (division: 1 ulp + 2.5 ulps
// where the device's is not correctly rounded) within re + rS + 6u. Y = sum_j p_j v_j (S_kv terms,
// any order): sum_j p_j |v_j| (rp_j + 2 S_kv u). First-order terms, with 1% for the rest. A 16-bit
// Y adds one of its own ulps (two fp32 values within the bound may round to neighbours).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ir::OpType;
using Dims = std::vector<int64_t>;

constexpr double kU = 0x1p-24;
const DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};
const float kInf = std::numeric_limits<float>::infinity();

std::vector<float> Values(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

ir::Tensor Make(DataType dt, Dims dims, const std::vector<float>& v) {
  switch (dt) {
    case DataType::kF16:
      return MakeHalf(std::move(dims), v);
    case DataType::kBF16:
      return MakeBf16(std::move(dims), v);
    case DataType::kBool: {
      std::vector<uint8_t> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) b[i] = v[i] != 0;
      return MakeTensor<uint8_t>(std::move(dims), b, DataType::kBool);
    }
    default:
      return MakeFloat(std::move(dims), v);
  }
}

double Ulp(float m, DataType dt) {
  const int mant = dt == DataType::kF32 ? 23 : dt == DataType::kF16 ? 10 : 7;
  const int min_e = dt == DataType::kF16 ? -13 : -125;
  int e = 0;
  std::frexp(std::fabs(m), &e);
  return std::ldexp(1.0, std::max(e, min_e) - 1 - mant);
}

// One Attention node: shapes, attributes and a mask (values: for kBool 0 or 1).
struct Case {
  DataType dt = DataType::kF32;
  bool three_d = false;
  int64_t batch = 1, hq = 1, hkv = 1, sq = 1, skv = 1, d = 8, dv = 8;
  bool causal = false;
  std::optional<float> scale = std::nullopt;
  float softcap = 0;
  Dims mask_dims = {};  // none when empty
  DataType mask_dt = DataType::kBool;
  std::vector<float> mask = {};  // random when empty
  float range = 1;               // Q and K in [-range, range]; V in [-1, 1]
  uint32_t seed = 1;
  int runs = 2;

  std::string Name() const {
    return absl::StrCat(DataTypeOnnxName(dt), three_d ? " 3-D" : " 4-D", " B", batch, " H", hq, "/",
                        hkv, " S", sq, "x", skv, " D", d, "/", dv, causal ? " causal" : "",
                        scale ? absl::StrCat(" scale ", *scale) : "",
                        softcap > 0 ? absl::StrCat(" softcap ", softcap) : "",
                        mask_dims.empty() ? ""
                                          : absl::StrCat(" mask ", DataTypeOnnxName(mask_dt), " ",
                                                         ir::DimsToString(mask_dims)));
  }
  Dims QDims() const { return Layout(sq, hq, d); }
  Dims KDims() const { return Layout(skv, hkv, d); }
  Dims VDims() const { return Layout(skv, hkv, dv); }
  Dims Layout(int64_t s, int64_t h, int64_t e) const {
    return three_d ? Dims{batch, s, h * e} : Dims{batch, h, s, e};
  }
  // Element (b, h, s, e) of a tensor laid out as Layout(S, H, E).
  int64_t At(int64_t b, int64_t h, int64_t s, int64_t e, int64_t S, int64_t H, int64_t E) const {
    return three_d ? ((b * S + s) * H + h) * E + e : ((b * H + h) * S + s) * E + e;
  }
};

struct Built {
  NodeSpec spec;
  std::vector<float> q, k, v, mask;  // as stored
};

Built Build(const Case& c) {
  Built r;
  uint32_t seed = c.seed;
  const ir::Tensor q =
      Make(c.dt, c.QDims(), Values(ir::NumElementsOf(c.QDims()), -c.range, c.range, seed++));
  const ir::Tensor k =
      Make(c.dt, c.KDims(), Values(ir::NumElementsOf(c.KDims()), -c.range, c.range, seed++));
  const ir::Tensor v = Make(c.dt, c.VDims(), Values(ir::NumElementsOf(c.VDims()), -1, 1, seed++));
  r.q = ToFloats(q);
  r.k = ToFloats(k);
  r.v = ToFloats(v);
  r.spec.op = OpType::kAttention;
  r.spec.inputs = {q, k, v};
  r.spec.runs = c.runs;
  if (c.causal) r.spec.attrs.push_back({"is_causal", IntAttr(1)});
  if (c.scale) r.spec.attrs.push_back({"scale", FloatAttr(*c.scale)});
  if (c.softcap > 0) r.spec.attrs.push_back({"softcap", FloatAttr(c.softcap)});
  if (c.three_d) {
    r.spec.attrs.push_back({"q_num_heads", IntAttr(c.hq)});
    r.spec.attrs.push_back({"kv_num_heads", IntAttr(c.hkv)});
  }
  if (!c.mask_dims.empty()) {
    std::vector<float> m = c.mask;
    if (m.empty()) {
      // Bool: about one key in five masked out; float: [-2, 2] with one in ten -inf.
      m = Values(ir::NumElementsOf(c.mask_dims), 0, 1, seed++);
      for (float& x : m) {
        if (c.mask_dt == DataType::kBool) {
          x = x < 0.2f ? 0.0f : 1.0f;
        } else {
          x = x < 0.1f ? -kInf : 4 * x - 2;
        }
      }
    }
    const ir::Tensor mt = Make(c.mask_dt, c.mask_dims, m);
    r.spec.inputs.push_back(mt);
    r.mask = ToFloats(mt);
    if (c.mask_dt == DataType::kBool) {
      for (float& x : r.mask) x = x != 0 ? 0.0f : -kInf;
    }
  }
  return r;
}

// The reference's scale factor: sqrt(scale) rounded to Q's type, squared in fp32.
float Factor(const Case& c) {
  const double scale = c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(c.d));
  const float root = ToFloats(Make(c.dt, {1}, {static_cast<float>(std::sqrt(scale))}))[0];
  return root * root;
}

// The bound above for each element of Y (0 on fully masked rows, whose Y is 0 exactly).
std::vector<double> Bounds(const Case& c, const Built& in) {
  const int64_t y_n = c.batch * c.hq * c.sq * c.dv;
  std::vector<double> tol(y_n, 0);
  const double factor = Factor(c);
  int64_t md[4] = {1, 1, 1, 1}, ms[4] = {0, 0, 0, 0};
  const int mr = static_cast<int>(c.mask_dims.size());
  for (int i = 0; i < mr; ++i) md[4 - mr + i] = c.mask_dims[i];
  for (int i = 3, st = 1; i >= 0; st *= md[i], --i) ms[i] = md[i] == 1 ? 0 : st;
  std::vector<double> s(c.skv), ds(c.skv), e(c.skv), re(c.skv);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.hq; ++h) {
      const int64_t hk = h / (c.hq / c.hkv);
      for (int64_t i = 0; i < c.sq; ++i) {
        bool any = false;
        double m = -INFINITY, dm = 0;
        for (int64_t j = 0; j < c.skv; ++j) {
          double add = 0;
          if (mr > 0) {
            add = j < md[3] ? in.mask[b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3]] : -INFINITY;
          }
          if (c.causal && j > i) add = -INFINITY;
          if (add == -INFINITY) {
            s[j] = -INFINITY;
            ds[j] = 0;
            continue;
          }
          double dot = 0, abs = 0;
          for (int64_t t = 0; t < c.d; ++t) {
            const double p = static_cast<double>(in.q[c.At(b, h, i, t, c.sq, c.hq, c.d)]) *
                             in.k[c.At(b, hk, j, t, c.skv, c.hkv, c.d)];
            dot += p;
            abs += std::fabs(p);
          }
          double x = factor * dot;
          double dx = factor * 2 * c.d * kU * abs + 2 * kU * std::fabs(x);
          if (c.softcap > 0) {
            const double y = c.softcap * std::tanh(x / c.softcap);
            dx += 2 * kU * std::fabs(x) + 16 * kU * std::fabs(y);
            x = y;
          }
          s[j] = x + add;
          ds[j] = dx + 2 * kU * std::fabs(s[j]);
          m = std::max(m, s[j]);
          dm = std::max(dm, ds[j]);
          any = true;
        }
        if (!any) continue;  // every key masked out: Y is 0 on both sides
        double sum = 0, max_re = 0;
        for (int64_t j = 0; j < c.skv; ++j) {
          if (s[j] == -INFINITY) {
            e[j] = re[j] = 0;
            continue;
          }
          const double t = s[j] - m;
          e[j] = std::exp(t);
          re[j] = std::expm1(ds[j] + dm + 2 * kU * std::fabs(t)) + 8 * kU;
          sum += e[j];
          max_re = std::max(max_re, re[j]);
        }
        const double rs = max_re + 2 * c.skv * kU;
        for (int64_t col = 0; col < c.dv; ++col) {
          double t = 0;
          for (int64_t j = 0; j < c.skv; ++j) {
            const double vj = std::fabs(in.v[c.At(b, hk, j, col, c.skv, c.hkv, c.dv)]);
            t += e[j] / sum * vj * (re[j] + rs + 6 * kU + 2 * c.skv * kU);
          }
          tol[c.At(b, h, i, col, c.sq, c.hq, c.dv)] = 1.01 * t;
        }
      }
    }
  }
  return tol;
}

// got within tol[i] of want (plus one storage ulp for 16-bit types); NaN and infinities alike.
void ExpectClose(const ir::Tensor& want, const ir::Tensor& got, const std::vector<double>& tol) {
  ASSERT_TRUE(want.defined());
  ASSERT_TRUE(got.defined());
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.dims(), want.dims());
  const DataType dt = want.dtype();
  const std::vector<float> w = ToFloats(want), g = ToFloats(got);
  ASSERT_EQ(w.size(), tol.size());
  int bad = 0;
  for (size_t i = 0; i < w.size() && bad < 5; ++i) {
    if (!std::isfinite(w[i]) || !std::isfinite(g[i])) {
      if (!(std::isnan(w[i]) && std::isnan(g[i])) && w[i] != g[i]) {
        ++bad;
        ADD_FAILURE() << "element " << i << ": want " << w[i] << ", got " << g[i];
      }
      continue;
    }
    const double bound = tol[i] + (dt == DataType::kF32 ? 0 : Ulp(w[i], dt));
    if (std::fabs(static_cast<double>(w[i]) - g[i]) > bound) {
      ++bad;
      ADD_FAILURE() << "element " << i << ": want " << w[i] << ", got " << g[i] << " (bound "
                    << bound << ")";
    }
  }
}

// The case on the reference and on OpenCL (run c.runs times: later runs reuse the program and
// the scratch); returns both Ys.
std::pair<ir::Tensor, ir::Tensor> Check(const Case& c) {
  SCOPED_TRACE(c.Name());
  const Built in = Build(c);
  NodeSpec ref = in.spec;
  ref.cpu_features = 0;
  ref.runs = 1;
  NodeSpec cl = in.spec;
  cl.opencl = true;
  const ir::Tensor want = RunNodeOk0(ref);
  const ir::Tensor got = RunNodeOk0(cl);
  ExpectClose(want, got, Bounds(c, in));
  return {want, got};
}

// The node fails alike on both backends: same code, naming the node, with `fragment`.
void ExpectSameError(NodeSpec spec, absl::StatusCode code, const std::string& fragment) {
  spec.cpu_features = 0;
  ExpectNodeError(spec, code, fragment);
  spec.cpu_features.reset();
  spec.opencl = true;
  ExpectNodeError(spec, code, fragment);
}

// The reference runs the node; OpenCL's `supports` refuses it (placement keeps it on the CPU).
void ExpectRefused(NodeSpec spec) {
  spec.cpu_features = 0;
  const absl::StatusOr<std::vector<ir::Tensor>> ref = RunNode(spec);
  EXPECT_TRUE(ref.ok()) << ref.status();
  spec.cpu_features.reset();
  spec.opencl = true;
  ExpectNodeError(spec, absl::StatusCode::kUnimplemented, "on OpenCL");
}

TEST(OpenClAttentionTest, FourDShapesAsTheReference) {
  // S_q != S_kv both ways; 300 keys (more than a work-group); V's columns more and fewer than
  // the items; a head too long to stage in local memory; one query, one key.
  struct Shape {
    int64_t batch, hq, sq, skv, d, dv;
  };
  const Shape shapes[] = {{2, 3, 5, 7, 8, 6},    {1, 2, 9, 4, 16, 16},  {1, 2, 4, 300, 16, 16},
                          {2, 1, 3, 4, 20, 300}, {1, 1, 2, 3, 1100, 5}, {1, 1, 1, 1, 1, 1},
                          {1, 2, 64, 64, 64, 64}};
  uint32_t seed = 1;
  for (DataType dt : kTypes) {
    for (const Shape& s : shapes) {
      Case c{.dt = dt,
             .batch = s.batch,
             .hq = s.hq,
             .hkv = s.hq,
             .sq = s.sq,
             .skv = s.skv,
             .d = s.d,
             .dv = s.dv,
             .range = 2,
             .seed = seed};
      seed += 10;
      Check(c);
    }
  }
}

TEST(OpenClAttentionTest, ThreeDLayoutAndGroupedQueryHeads) {
  uint32_t seed = 100;
  for (DataType dt : kTypes) {
    for (bool three_d : {true, false}) {
      // GQA (two q heads per kv head), MQA (one kv head), and plain heads in 3-D.
      for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 2}, {6, 1}, {3, 3}}) {
        Case c{.dt = dt,
               .three_d = three_d,
               .batch = 2,
               .hq = hq,
               .hkv = hkv,
               .sq = 5,
               .skv = 9,
               .d = 8,
               .dv = 12,
               .range = 2,
               .seed = seed};
        seed += 10;
        Check(c);
      }
    }
  }
}

TEST(OpenClAttentionTest, CausalAlignsTopLeft) {
  // The reference masks key j > query i (no KV cache: no offset), for S_q <, = and > S_kv.
  uint32_t seed = 200;
  for (DataType dt : kTypes) {
    for (auto [sq, skv] : {std::pair<int64_t, int64_t>{5, 9}, {7, 7}, {9, 4}, {3, 300}}) {
      Case c{.dt = dt,
             .batch = 2,
             .hq = 2,
             .hkv = 1,
             .sq = sq,
             .skv = skv,
             .causal = true,
             .range = 2,
             .seed = seed};
      seed += 10;
      Check(c);
    }
  }
}

TEST(OpenClAttentionTest, BoolAndFloatMasksBroadcast) {
  // Every shape the reference broadcasts to [B, H, S_q, S_kv]: rank 1 to 4, dims of 1, and a
  // last dim shorter than S_kv (the keys past it are masked out). Masks of another float type
  // than Q, and with causal.
  const int64_t b = 2, h = 3, sq = 4, skv = 6;
  const Dims shapes[] = {{skv},          {sq, skv},    {b, h, sq, skv}, {b, 1, sq, skv},
                         {1, h, 1, skv}, {h, sq, skv}, {sq, skv - 2},   {1},
                         {b, 1, 1, 3}};
  uint32_t seed = 300;
  for (DataType dt : kTypes) {
    for (DataType mdt : {DataType::kBool, DataType::kF32, dt, DataType::kF16}) {
      for (const Dims& md : shapes) {
        for (bool causal : {false, true}) {
          Case c{.dt = dt,
                 .batch = b,
                 .hq = h,
                 .hkv = h,
                 .sq = sq,
                 .skv = skv,
                 .causal = causal,
                 .mask_dims = md,
                 .mask_dt = mdt,
                 .range = 2,
                 .seed = seed};
          seed += 10;
          Check(c);
        }
      }
    }
    // A long masked row, 3-D with GQA.
    Case c{.dt = dt,
           .three_d = true,
           .batch = 1,
           .hq = 4,
           .hkv = 2,
           .sq = 3,
           .skv = 300,
           .d = 16,
           .dv = 16,
           .mask_dims = {3, 300},
           .mask_dt = DataType::kF32,
           .seed = seed++};
    Check(c);
  }
}

TEST(OpenClAttentionTest, ScaleAndSoftcap) {
  // Q and K in [-4, 4]: scores of a few units, which a softcap of 1.5 bends; in [-30, 30]:
  // scores of hundreds, whose exp overflows fp32 unless the maximum is subtracted first.
  uint32_t seed = 400;
  for (DataType dt : kTypes) {
    for (std::optional<float> scale : {std::optional<float>(), std::optional<float>(0.3f)}) {
      for (float softcap : {0.0f, 1.5f, 20.0f}) {
        for (float range : {4.0f, 30.0f}) {
          Case c{.dt = dt,
                 .batch = 1,
                 .hq = 2,
                 .hkv = 2,
                 .sq = 6,
                 .skv = 40,
                 .d = 16,
                 .dv = 8,
                 .scale = scale,
                 .softcap = softcap,
                 .range = range,
                 .seed = seed};
          seed += 10;
          Check(c);
        }
      }
    }
  }
}

TEST(OpenClAttentionTest, FullyMaskedRowsAreZeroAsTheReference) {
  // The reference gives a row whose every key is masked out probabilities 0, so Y 0: rows by a
  // bool mask (row 1 all false), a float mask (-inf everywhere in row 2), a mask shorter than
  // S_kv with causal (batch 0's row 0 sees key 0 only, which its mask drops). Rows count
  // (batch, head, query) in order.
  const int64_t sq = 4, skv = 5;
  std::vector<float> bools(sq * skv, 1), adds(sq * skv, 0.5f);
  std::fill(bools.begin() + skv, bools.begin() + 2 * skv, 0.0f);
  std::fill(adds.begin() + 2 * skv, adds.begin() + 3 * skv, -kInf);
  const std::vector<float> short_mask = {0, 1, 1, 1, 1, 1, 1, 1};  // [2, 1, 1, 4]
  for (DataType dt : kTypes) {
    struct Masked {
      Case c;
      int64_t zero_row;
    };
    const Masked cases[] = {
        {{.dt = dt, .sq = sq, .skv = skv, .mask_dims = {sq, skv}, .mask = bools}, 1},
        {{.dt = dt, .sq = sq, .skv = skv, .mask_dims = {sq, skv}, .mask_dt = dt, .mask = adds}, 2},
        {{.dt = dt,
          .batch = 2,
          .sq = 2,
          .skv = skv,
          .causal = true,
          .mask_dims = {2, 1, 1, 4},
          .mask = short_mask},
         0},
    };
    for (const Masked& m : cases) {
      SCOPED_TRACE(m.c.Name());
      const auto [want, got] = Check(m.c);
      ASSERT_TRUE(got.defined());
      const std::vector<float> w = ToFloats(want), g = ToFloats(got);
      const int64_t rows = m.c.batch * m.c.hq * m.c.sq;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t col = 0; col < m.c.dv; ++col) {
          const int64_t at = r * m.c.dv + col;
          if (r == m.zero_row) {
            EXPECT_EQ(w[at], 0.0f) << "reference row " << r;
            EXPECT_EQ(g[at], 0.0f) << "row " << r;
          } else {
            EXPECT_NE(g[at], 0.0f) << "row " << r;
          }
        }
      }
    }
  }
}

TEST(OpenClAttentionTest, LongRowsUseTheGlobalScratch) {
  // 5000 keys do not fit local memory's scores row (2048): the scratch, 4M floats, holds 838 rows
  // per launch, so 900 rows take two launches; run twice, the second reuses the scratch.
  uint32_t seed = 500;
  for (DataType dt : kTypes) {
    Case c{.dt = dt,
           .batch = 1,
           .hq = 2,
           .hkv = 1,
           .sq = 450,
           .skv = 5000,
           .d = 4,
           .dv = 4,
           .causal = dt == DataType::kF16,
           .range = 2,
           .seed = seed};
    seed += 10;
    Check(c);
  }
  Case masked{.dt = DataType::kF32,
              .batch = 1,
              .hq = 1,
              .hkv = 1,
              .sq = 3,
              .skv = 3000,
              .d = 4,
              .dv = 4,
              .mask_dims = {3000},
              .seed = seed};
  Check(masked);
}

TEST(OpenClAttentionTest, EmptyShapes) {
  for (DataType dt : kTypes) {
    // No query: an empty Y. No key: the reference's Y is 0 (a fully masked row).
    for (auto [sq, skv] : {std::pair<int64_t, int64_t>{0, 4}, {3, 0}}) {
      Case c{.dt = dt, .batch = 1, .hq = 2, .hkv = 2, .sq = sq, .skv = skv, .d = 4, .dv = 4};
      const auto [want, got] = Check(c);
      ASSERT_TRUE(got.defined());
      EXPECT_EQ(got.dims(), (Dims{1, 2, sq, 4}));
      for (float y : ToFloats(got)) EXPECT_EQ(y, 0.0f);
    }
  }
}

TEST(OpenClAttentionTest, ErrorsNameTheNode) {
  const auto f = [](Dims d) { return MakeFloat(d, Values(ir::NumElementsOf(d), -1, 1, 1)); };
  const auto spec = [](std::vector<ir::Tensor> in,
                       std::vector<std::pair<std::string, ir::Attribute>> attrs = {}) {
    NodeSpec s;
    s.op = OpType::kAttention;
    s.inputs = std::move(in);
    s.attrs = std::move(attrs);
    return s;
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  const Dims q4 = {1, 4, 3, 8}, k4 = {1, 2, 5, 8};
  ExpectSameError(spec({f({1, 3, 8}), f(k4), f(k4)}), kInvalid, "must all be 3-D or all 4-D");
  ExpectSameError(spec({f(q4), f(k4), MakeHalf(k4, Values(40, -1, 1, 2))}), kInvalid, "same dtype");
  ExpectSameError(spec({f(q4), f({2, 2, 5, 8}), f({2, 2, 5, 8})}), kInvalid, "batch sizes differ");
  ExpectSameError(spec({f({1, 3, 32}), f({1, 5, 16}), f({1, 5, 16})}), kInvalid,
                  "q_num_heads and kv_num_heads are required");
  ExpectSameError(spec({f({1, 3, 30}), f({1, 5, 16}), f({1, 5, 16})},
                       {{"q_num_heads", IntAttr(4)}, {"kv_num_heads", IntAttr(2)}}),
                  kInvalid, "not divisible by the head counts");
  ExpectSameError(spec({f(q4), f({1, 2, 5, 6}), f(k4)}), kInvalid, "Q and K head sizes differ");
  ExpectSameError(spec({f(q4), f(k4), f({1, 2, 4, 8})}), kInvalid, "K and V shapes disagree");
  ExpectSameError(spec({f(q4), f({1, 3, 5, 8}), f({1, 3, 5, 8})}), kInvalid,
                  "must be a multiple of kv heads");
  ExpectSameError(spec({f(q4), f(k4), f(k4), f({2, 1, 3, 5})}), kInvalid,
                  "cannot be broadcast to [1,4,3,5]");
  ExpectSameError(spec({f(q4), f(k4), f(k4), f({3, 6})}), kInvalid, "6 keys, more than 5");
  ExpectSameError(spec({f(q4), f(k4), f(k4), f({1, 1, 1, 3, 5})}), kInvalid, "rank 1 to 4");
  ExpectSameError(spec({f(q4), f(k4)}), kInvalid, "input 2 is required but missing");
  ExpectSameError(spec({f(q4), f(k4), f(k4)}, {{"left_window_size", IntAttr(-1)}}), kInvalid,
                  "not defined before opset 25");
}

TEST(OpenClAttentionTest, RefusesWhatRunsOnTheCpu) {
  const auto f = [](Dims d) { return MakeFloat(d, Values(ir::NumElementsOf(d), -1, 1, 3)); };
  const Dims q4 = {1, 2, 3, 8}, k4 = {1, 2, 5, 8};
  NodeSpec base;
  base.op = OpType::kAttention;
  base.inputs = {f(q4), f(k4), f(k4)};
  {
    SCOPED_TRACE("past_key / past_value");
    NodeSpec s = base;
    s.inputs.push_back(ir::Tensor());
    s.inputs.push_back(f({1, 2, 4, 8}));
    s.inputs.push_back(f({1, 2, 4, 8}));
    ExpectRefused(s);
  }
  {
    SCOPED_TRACE("nonpad_kv_seqlen");
    NodeSpec s = base;
    s.since_version = 24;
    s.inputs.resize(6);
    s.inputs.push_back(MakeInt64({1}, {4}));
    ExpectRefused(s);
  }
  for (int outputs : {2, 3, 4}) {
    SCOPED_TRACE(absl::StrCat(outputs, " outputs"));
    NodeSpec s = base;
    s.num_outputs = outputs;
    ExpectRefused(s);
  }
  {
    SCOPED_TRACE("qk_matmul_output_mode");
    NodeSpec s = base;
    s.attrs = {{"qk_matmul_output_mode", IntAttr(1)}};
    ExpectRefused(s);
  }
  for (const char* window : {"left_window_size", "right_window_size"}) {
    SCOPED_TRACE(window);
    NodeSpec s = base;
    s.since_version = 25;
    s.attrs = {{window, IntAttr(2)}};
    ExpectRefused(s);
  }
  {
    SCOPED_TRACE("double mask and double Q");
    NodeSpec s = base;
    s.inputs.push_back(MakeTensor<double>({3, 5}, std::vector<double>(15, 0.5), DataType::kF64));
    ExpectRefused(s);
    const auto d = [](Dims dims) {
      return MakeTensor<double>(dims, std::vector<double>(ir::NumElementsOf(dims), 0.25),
                                DataType::kF64);
    };
    s.inputs = {d(q4), d(k4), d(k4)};
    ExpectRefused(s);
  }
}

}  // namespace
}  // namespace kiln::testing
