// The AVX-512 reduction kernels (kernels/cpu/avx512/reduce_ops.cc) against the reference kernels
// on the same nodes: every Reduce* op on float, float16 and bfloat16 over inner (contiguous),
// middle and outer axes, merged axis runs, axes apart (reduced run by run), size-1 dims, keepdims
// 0 / 1, axes as an input and as an attribute, sizes that are not multiples of 16 and large enough
// for the threaded loops; Max and Min exactly, the sums and products within the bound of a
// different summation order; NaN; the cases the fast kernel hands to the reference (LogSumExp
// over axes apart, noop_with_empty_axes, empty reductions, bad axes) with the reference's numbers
// and errors. Skipped on CPUs without AVX-512 and AVX512_BF16.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/common/half.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/kernel_test_helpers.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ir::OpType;

#define SKIP_WITHOUT_AVX512()                             \
  if (!HasAvx512Bf16()) {                                 \
    GTEST_SKIP() << "CPU lacks AVX-512 with AVX512_BF16"; \
  }

constexpr OpType kOps[] = {OpType::kReduceSum,      OpType::kReduceMean,      OpType::kReduceMax,
                           OpType::kReduceMin,      OpType::kReduceProd,      OpType::kReduceL1,
                           OpType::kReduceL2,       OpType::kReduceSumSquare, OpType::kReduceLogSum,
                           OpType::kReduceLogSumExp};
constexpr DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};

struct Case {
  std::vector<int64_t> dims;
  std::vector<int64_t> axes;
  bool keepdims = true;
};

// Inner, middle and outer axes; merged runs; size-1 dims between; odd sizes (masked tails of
// one, two and three 16-lane vectors); inputs past the 65536 elements where both threads work.
const Case kCases[] = {
    {{3, 37}, {1}, true},
    {{5, 130}, {-1}, false},
    {{2, 7, 33}, {1}, true},
    {{70, 3}, {0}, false},
    {{2, 3, 5, 17}, {1, 2}, true},
    {{1, 9, 1, 200}, {3}, false},
    {{1, 9, 1, 200}, {1, 2}, true},
    {{6, 100}, {}, true},
    {{4, 1, 50}, {0, 1}, false},
    {{8, 129, 65}, {2}, true},
    {{3, 300, 150}, {1}, false},
    {{2, 2, 2, 16}, {-2}, true},
    // Reduced axes apart: run by run.
    {{3, 4, 5}, {0, 2}, true},
    {{2, 9, 3, 40}, {1, 3}, false},
    {{5, 1, 6, 2, 33}, {0, 2, 4}, true},
    {{40, 3, 300}, {0, 2}, false},
};

ir::Tensor Axes(const std::vector<int64_t>& axes) {
  return MakeTensor<int64_t>({static_cast<int64_t>(axes.size())}, axes, DataType::kI64);
}

// The node of `op` on x: axes as the input of opset 18 (ReduceSum: 13), or the attribute of
// opset 13 when `as_attribute`.
NodeSpec Spec(OpType op, const ir::Tensor& x, const Case& c, bool as_attribute) {
  NodeSpec s{op, {{"keepdims", ir::Attribute::Int(c.keepdims ? 1 : 0)}}, {x}};
  if (as_attribute) {
    s.since_version = op == OpType::kReduceSum ? 11 : 13;
    if (!c.axes.empty()) s.attrs.push_back({"axes", ir::Attribute::Ints(c.axes)});
  } else {
    s.since_version = 18;
    if (!c.axes.empty()) s.inputs.push_back(Axes(c.axes));
  }
  return s;
}

// Inputs each op is defined on without overflow or domain errors: values near 1 for products,
// positive ones for LogSum, standard normal otherwise (rounded to the dtype).
ir::Tensor Input(OpType op, const std::vector<int64_t>& dims, DataType dt, std::mt19937& rng) {
  ir::Tensor t = RandomNormal(dims, dt, rng);
  std::vector<float> v = ToFloats(t);
  for (float& f : v) {
    if (op == OpType::kReduceProd) f = 1.0f + f * 0.01f;
    if (op == OpType::kReduceLogSum) f = std::fabs(f) + 0.25f;
  }
  if (dt == DataType::kF16) return MakeHalf(dims, v);
  return dt == DataType::kBF16 ? MakeBf16(dims, v) : MakeFloat(dims, v);
}

// One step of the output type at |v| (fp32 has 23 fraction bits, fp16 10, bf16 7).
double Ulp(double v, DataType dt) {
  const int bits = dt == DataType::kF32 ? 23 : dt == DataType::kF16 ? 10 : 7;
  const int min_exp = dt == DataType::kF16 ? -14 : -126;
  int e;
  std::frexp(std::fabs(v), &e);
  return std::ldexp(1.0, std::max(e - 1, min_exp) - bits);
}

// The allowed |fast - reference| of one output. Both kernels accumulate in fp32 (u = 2^-24) in
// different orders: any order of n - 1 additions is within (n - 1) u sum|terms| of the exact sum,
// so two orders are within 2 n u sum|terms| of each other. Mean divides that by n; L2's square
// root halves the relative difference; LogSum turns a relative difference r into an absolute r;
// a product's n roundings bound its relative difference by 2 n u. LogSumExp adds the exps'
// errors (ExpF32 and std::exp each within 1 ulp) and the reference's rescaling (a product by an
// exp per new maximum, at most n): relative (6 n + 4) u on the sum, absolute after the log, plus
// the final addition of the max (an ulp of the result). Two fp32 values that close may round to
// neighbouring values of a 16-bit output: one output ulp more. Max and Min: 0.
double Bound(OpType op, const std::vector<double>& terms_abs, double ref, DataType dt) {
  const double u = std::ldexp(1.0, -24);
  const double n = static_cast<double>(terms_abs.size());
  double s = 0;
  for (double a : terms_abs) s += a;
  double b = 0;
  switch (op) {
    case OpType::kReduceMax:
    case OpType::kReduceMin:
      return 0;
    case OpType::kReduceSum:
    case OpType::kReduceL1:
    case OpType::kReduceSumSquare:
      b = 2 * n * u * s;
      break;
    case OpType::kReduceMean:
      b = 2 * u * s;
      break;
    case OpType::kReduceL2:
      b = n * u * std::sqrt(s) + Ulp(ref, DataType::kF32);
      break;
    case OpType::kReduceLogSum:
      b = 2 * n * u + Ulp(ref, DataType::kF32);
      break;
    case OpType::kReduceProd:
      b = 2 * n * u * std::fabs(ref);
      break;
    default:  // LogSumExp
      b = (6 * n + 4) * u + 2 * Ulp(ref, DataType::kF32);
      break;
  }
  return b + (dt == DataType::kF32 ? 0 : Ulp(ref, dt));
}

// |term| of each element of `x` feeding output `o`, for Bound: output o gathers the elements
// whose kept coordinates are o's (the reduced axes need not be one run).
std::vector<std::vector<double>> TermsByOutput(OpType op, const ir::Tensor& x, const Case& c) {
  const int rank = x.rank();
  std::vector<bool> reduced(rank, c.axes.empty());
  for (int64_t a : c.axes) reduced[a < 0 ? a + rank : a] = true;
  int64_t outputs = 1;
  for (int d = 0; d < rank; ++d) outputs *= reduced[d] ? 1 : x.dim(d);
  const std::vector<float> v = ToFloats(x);
  std::vector<std::vector<double>> terms(outputs);
  for (int64_t e = 0; e < x.num_elements(); ++e) {
    int64_t rest = e, o = 0, stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t coord = rest % x.dim(d);
      rest /= x.dim(d);
      if (!reduced[d]) {
        o += coord * stride;
        stride *= x.dim(d);
      }
    }
    const double t = op == OpType::kReduceSumSquare || op == OpType::kReduceL2 ? double(v[e]) * v[e]
                     : op == OpType::kReduceLogSumExp                          ? 1.0
                                                                               : std::fabs(v[e]);
    terms[o].push_back(t);
  }
  return terms;
}

std::string Name(OpType op) { return ir::OpName(op); }

TEST(Avx512Reduce, MatchesReferenceOnEveryOpTypeAndAxisForm) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(7);
  for (OpType op : kOps) {
    for (DataType dt : kTypes) {
      for (const Case& c : kCases) {
        for (bool as_attribute : {false, true}) {
          const ir::Tensor x = Input(op, c.dims, dt, rng);
          NodeSpec fast = Spec(op, x, c, as_attribute);
          NodeSpec ref = fast;
          ref.cpu_features = 0;
          const ir::Tensor got = RunNodeOk0(fast);
          const ir::Tensor want = RunNodeOk0(ref);
          ASSERT_EQ(got.dims(), want.dims()) << Name(op);
          ASSERT_EQ(got.dtype(), dt);
          const std::vector<float> g = ToFloats(got), w = ToFloats(want);
          const auto terms = TermsByOutput(op, x, c);
          ASSERT_EQ(terms.size(), w.size());
          for (size_t i = 0; i < w.size(); ++i) {
            const double bound = Bound(op, terms[i], w[i], dt);
            ASSERT_LE(std::fabs(static_cast<double>(g[i]) - w[i]), bound)
                << Name(op) << " " << DataTypeOnnxName(dt) << " dims " << ir::DimsToString(c.dims)
                << " output " << i << ": fast " << g[i] << " reference " << w[i];
          }
        }
      }
    }
  }
}

TEST(Avx512Reduce, PicksTheAvx512KernelForFloatTypes) {
  SKIP_WITHOUT_AVX512();
  for (OpType op : kOps) {
    for (DataType dt : kTypes) {
      absl::StatusOr<const kernels::KernelDef*> def = FindKernelFor(op, dt, Avx512Bf16Features());
      ASSERT_TRUE(def.ok()) << def.status();
      EXPECT_EQ((*def)->isa, kernels::Isa::kAvx512) << Name(op);
    }
  }
}

TEST(Avx512Reduce, NanWinsMaxAndMinAndPropagatesThroughSums) {
  SKIP_WITHOUT_AVX512();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DataType dt : kTypes) {
    // Row 1 holds a NaN at element 20 (the second vector), column 5 of the middle-axis form too.
    std::vector<float> v(3 * 40);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 7) - 3.0f;
    v[40 + 20] = nan;
    const ir::Tensor x = dt == DataType::kF16    ? MakeHalf({3, 40}, v)
                         : dt == DataType::kBF16 ? MakeBf16({3, 40}, v)
                                                 : MakeFloat({3, 40}, v);
    for (OpType op :
         {OpType::kReduceMax, OpType::kReduceMin, OpType::kReduceSum, OpType::kReduceLogSumExp}) {
      for (int64_t axis : {int64_t{1}, int64_t{0}}) {
        const std::vector<float> y =
            ToFloats(RunNodeOk0(Spec(op, x, Case{{3, 40}, {axis}, false}, false)));
        for (size_t i = 0; i < y.size(); ++i) {
          const bool has_nan = axis == 1 ? i == 1 : i == 20;
          EXPECT_EQ(std::isnan(y[i]), has_nan) << Name(op) << " axis " << axis << " output " << i;
        }
      }
    }
  }
}

TEST(Avx512Reduce, LogSumExpOfInfinitiesAsTheReference) {
  SKIP_WITHOUT_AVX512();
  const float inf = std::numeric_limits<float>::infinity();
  // Rows: all -Inf (-Inf), one +Inf (+Inf), finite and large (no overflow through the shift).
  const std::vector<float> v = {-inf, -inf, -inf,  -inf,  1.0f,   inf,
                                2.0f, -inf, 80.0f, 90.0f, 100.0f, 101.0f};
  const ir::Tensor x = MakeFloat({3, 4}, v);
  NodeSpec fast = Spec(OpType::kReduceLogSumExp, x, Case{{3, 4}, {1}, false}, false);
  NodeSpec ref = fast;
  ref.cpu_features = 0;
  const std::vector<float> got = ToFloats(RunNodeOk0(fast)), want = ToFloats(RunNodeOk0(ref));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], -inf);
  EXPECT_EQ(got[1], inf);
  EXPECT_EQ(want[0], -inf);
  EXPECT_EQ(want[1], inf);
  // 101 + log(1 + e^-1 + e^-11 + e^-21): the bound of Bound for n = 4.
  EXPECT_NEAR(got[2], want[2], 28 * std::ldexp(1.0, -24) + 2 * Ulp(want[2], DataType::kF32));
}

TEST(Avx512Reduce, HandsTheRestToTheReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(3);
  const ir::Tensor x = RandomNormal({3, 4, 5}, DataType::kF16, rng);
  // LogSumExp over axes apart (0 and 2), noop_with_empty_axes without axes, an empty reduced
  // dim: the reference's numbers, bit for bit.
  std::vector<NodeSpec> specs;
  specs.push_back(Spec(OpType::kReduceLogSumExp, x, Case{{3, 4, 5}, {0, 2}, true}, false));
  NodeSpec noop = Spec(OpType::kReduceSumSquare, x, Case{{3, 4, 5}, {}, true}, false);
  noop.attrs.push_back({"noop_with_empty_axes", ir::Attribute::Int(1)});
  specs.push_back(noop);
  specs.push_back(
      Spec(OpType::kReduceMean, MakeHalf({2, 0, 3}, {}), Case{{2, 0, 3}, {1}, true}, false));
  for (const NodeSpec& fast : specs) {
    NodeSpec ref = fast;
    ref.cpu_features = 0;
    const ir::Tensor got = RunNodeOk0(fast), want = RunNodeOk0(ref);
    ASSERT_EQ(got.dims(), want.dims());
    const std::vector<float> g = ToFloats(got), w = ToFloats(want);
    for (size_t i = 0; i < w.size(); ++i) {
      if (std::isnan(w[i])) {
        EXPECT_TRUE(std::isnan(g[i]));
      } else {
        EXPECT_EQ(g[i], w[i]) << i;
      }
    }
  }
  // Bad axes: the reference's errors, naming the node.
  ExpectNodeError(Spec(OpType::kReduceMax, x, Case{{3, 4, 5}, {3}, true}, false),
                  absl::StatusCode::kInvalidArgument, "axis");
  ExpectNodeError(Spec(OpType::kReduceMax, x, Case{{3, 4, 5}, {1, -2}, true}, false),
                  absl::StatusCode::kInvalidArgument, "repeated");
}

}  // namespace
}  // namespace kiln::testing
