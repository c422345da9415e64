// The AVX-512 kernels on float16 / bfloat16 storage convert in registers (activation.h's
// ActivationHalf, math.h's MathHalf and SoftmaxRowHalf, the GEMM's per-tile widening of A) and
// promise the numbers of the same kernel run on an fp32 copy, rounded once: checked here bit for
// bit, running each node on the 16-bit tensor and on its exact fp32 widening, over lengths that
// are not multiples of 16, with NaN, infinities and values that round to 16-bit subnormals.
// Skipped on CPUs without AVX-512 and AVX512_BF16.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/common/half.h"
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

ir::Tensor Make(DataType t, const std::vector<int64_t>& dims, const std::vector<float>& v) {
  if (t == DataType::kF16) return MakeHalf(dims, v);
  return t == DataType::kBF16 ? MakeBf16(dims, v) : MakeFloat(dims, v);
}

// Values of `t` (rounded), with specials sprinkled in: NaN, +-Inf, +-0, tiny values.
std::vector<float> Values(DataType t, int64_t n, float scale, std::mt19937& rng, bool specials) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  if (specials && n > 40) {
    v[3] = std::numeric_limits<float>::quiet_NaN();
    v[7] = std::numeric_limits<float>::infinity();
    v[11] = -std::numeric_limits<float>::infinity();
    v[17] = -0.0f;
    v[23] = 1e-6f;
    v[29] = -3e-7f;
  }
  return ToFloats(Make(t, {n}, v));
}

// Output 0 of `spec` run on 16-bit inputs equals, bit for bit, the same node run on the fp32
// widening of those inputs with its outputs rounded once to the 16-bit type.
void ExpectParity(NodeSpec spec16, DataType t, const std::string& what) {
  NodeSpec spec32 = spec16;
  for (ir::Tensor& in : spec32.inputs) {
    if (in.dtype() == t) in = MakeFloat(in.dims(), ToFloats(in));
  }
  const ir::Tensor got = RunNodeOk0(spec16);
  const ir::Tensor wide = RunNodeOk0(spec32);
  ASSERT_EQ(got.dtype(), t) << what;
  ASSERT_EQ(got.dims(), wide.dims()) << what;
  const std::vector<float> w = ToFloats(wide);
  const uint16_t* g = got.data<uint16_t>();
  for (size_t i = 0; i < w.size(); ++i) {
    const uint16_t want = t == DataType::kF16 ? FloatToHalfBits(w[i]) : FloatToBFloat16Bits(w[i]);
    if (std::isnan(w[i])) {
      const float gv = t == DataType::kF16 ? HalfBitsToFloat(g[i]) : BFloat16BitsToFloat(g[i]);
      ASSERT_TRUE(std::isnan(gv)) << what << " element " << i;
      continue;
    }
    ASSERT_EQ(g[i], want) << what << " element " << i << " fp32 " << w[i];
  }
}

TEST(Avx512F16Parity, ActivationsMatchTheirFp32RunRoundedOnce) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(11);
  const std::vector<std::pair<OpType, std::vector<std::pair<std::string, ir::Attribute>>>> ops = {
      {OpType::kGelu, {}},
      {OpType::kGelu, {{"approximate", ir::Attribute::String("tanh")}}},
      {OpType::kSigmoid, {}},
      {OpType::kTanh, {}},
      {OpType::kExp, {}},
      {OpType::kLog, {}},
      {OpType::kSoftplus, {}},
      {OpType::kMish, {}},
      {OpType::kErf, {}},
      {OpType::kHardSwish, {}},
      {OpType::kHardSigmoid, {}},
      {OpType::kLeakyRelu, {{"alpha", ir::Attribute::Float(0.1f)}}},
      {OpType::kElu, {{"alpha", ir::Attribute::Float(0.7f)}}},
      {OpType::kSelu, {}},
      {OpType::kCelu, {}},
      {OpType::kSqrt, {}},
      {OpType::kReciprocal, {}},
      {OpType::kAbs, {}},
      {OpType::kNeg, {}},
      {OpType::kFloor, {}},
      {OpType::kCeil, {}},
      {OpType::kRound, {}},
  };
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    for (const auto& [op, attrs] : ops) {
      // 1: one masked vector; 45: two full and a tail; 5000: past one 4096 chunk; 70001: threads.
      for (int64_t n : {int64_t{1}, int64_t{45}, int64_t{5000}, int64_t{70001}}) {
        NodeSpec s{op, attrs, {Make(t, {n}, Values(t, n, 3.0f, rng, true))}};
        s.since_version = op == OpType::kGelu ? 20 : 13;
        ExpectParity(s, t, std::string(ir::OpName(op)) + " n " + std::to_string(n));
      }
    }
    // Clip with bounds as inputs (opset 13) and as attributes (opset 6).
    for (int64_t n : {int64_t{17}, int64_t{9000}}) {
      const std::vector<float> v = Values(t, n, 4.0f, rng, true);
      NodeSpec s{OpType::kClip, {}, {Make(t, {n}, v), Make(t, {}, {0.0f}), Make(t, {}, {6.0f})}};
      s.since_version = 13;
      ExpectParity(s, t, "Clip-13 n " + std::to_string(n));
      NodeSpec s6{OpType::kClip,
                  {{"min", ir::Attribute::Float(-1.5f)}, {"max", ir::Attribute::Float(2.0f)}},
                  {Make(t, {n}, v)}};
      s6.since_version = 6;
      ExpectParity(s6, t, "Clip-6 n " + std::to_string(n));
    }
  }
}

TEST(Avx512F16Parity, SoftmaxMatchesItsFp32RunRoundedOnce) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(5);
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    // Last axis (rows converted in registers), a middle axis (gathered rows), rows of 1 and odd
    // lengths, a row holding a NaN.
    const std::vector<std::pair<std::vector<int64_t>, int64_t>> cases = {
        {{3, 1}, -1}, {{4, 45}, -1}, {{2, 6, 400}, -1}, {{2, 37, 5}, 1}, {{64, 600}, 1}};
    for (const auto& [dims, axis] : cases) {
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      std::vector<float> v = Values(t, n, 4.0f, rng, false);
      if (n > 100) v[50] = std::numeric_limits<float>::quiet_NaN();
      NodeSpec s{OpType::kSoftmax, {{"axis", ir::Attribute::Int(axis)}}, {Make(t, dims, v)}};
      s.since_version = 13;
      ExpectParity(s, t, "Softmax dims " + ir::DimsToString(dims));
    }
  }
}

TEST(Avx512F16Parity, MatMulOfTwoActivationsMatchesItsFp32RunRoundedOnce) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 rng(9);
  // N of one strip, of two (A widened per row tile) and of three (one widened copy of A); M not a
  // multiple of 6 or 7; batches; K odd.
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{2, 3, 50, 64}, {2, 3, 64, 40}},
      {{1, 2, 37, 33}, {1, 2, 33, 128}},
      {{4, 61, 20}, {4, 20, 130}},
      {{100, 96}, {96, 64}},
  };
  // fp16 only: bf16 may take the vdpbf16ps / AMX paths, whose order is not fp32's (gemm.h).
  const DataType t = DataType::kF16;
  {
    for (const auto& [ad, bd] : cases) {
      int64_t na = 1, nb = 1;
      for (int64_t d : ad) na *= d;
      for (int64_t d : bd) nb *= d;
      NodeSpec s{OpType::kMatMul,
                 {},
                 {Make(t, ad, Values(t, na, 1.0f, rng, false)),
                  Make(t, bd, Values(t, nb, 1.0f, rng, false))}};
      s.since_version = 13;
      ExpectParity(s, t, "MatMul " + ir::DimsToString(ad) + " x " + ir::DimsToString(bd));
    }
  }
}

}  // namespace
}  // namespace kiln::testing
