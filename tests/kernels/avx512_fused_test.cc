// The AVX-512 FusedMatMul against the reference FusedMatMul.
#include <cmath>
#include <random>

#include "engine/common/cpu_features.h"
#include "engine/common/half.h"
#include "engine/kernels/cpu/avx512/math.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

ir::Tensor Random(std::vector<int64_t> dims, DataType dt, std::mt19937& rng) {
  ir::Tensor f = *ir::Tensor::Allocate(DataType::kF32, dims);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (int64_t i = 0; i < f.num_elements(); ++i) f.data<float>()[i] = d(rng);
  if (dt == DataType::kF32) return f;
  ir::Tensor t = *ir::Tensor::Allocate(dt, dims);
  for (int64_t i = 0; i < f.num_elements(); ++i) {
    float v = f.data<float>()[i];
    t.data<uint16_t>()[i] = dt == DataType::kF16 ? FloatToHalfBits(v) : FloatToBFloat16Bits(v);
  }
  return t;
}

TEST(Avx512FusedMatMulTest, MatchesReferenceForEveryActivationAndDtype) {
  uint64_t need = kCpuAvx512F | kCpuAvx512Bw | kCpuAvx512Vl | kCpuAvx512Dq | kCpuAvx512Bf16;
  if ((DetectCpuFeatures() & need) != need) GTEST_SKIP() << "needs AVX-512 with BF16";
  std::mt19937 rng(3);
  const int64_t k = 37;
  for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (const char* act : {"", "Relu", "Gelu", "GeluTanh", "Sigmoid", "Tanh"}) {
      NodeSpec spec;
      spec.op = ir::OpType::kFusedMatMul;
      spec.since_version = 1;
      spec.attrs = {{"activation", StringAttr(act)}};
      spec.inputs = {Random({2, 5, k}, dt, rng), Random({k, 19}, dt, rng), Random({19}, dt, rng)};
      spec.output_dtypes = {dt};
      auto fast = RunNode(spec);
      ASSERT_TRUE(fast.ok()) << fast.status();
      NodeSpec ref_spec = spec;
      ref_spec.cpu_features = 0;  // the reference kernel
      auto ref = RunNode(ref_spec);
      ASSERT_TRUE(ref.ok()) << ref.status();
      std::vector<float> a = ToFloats((*fast)[0]), b = ToFloats((*ref)[0]);
      ASSERT_EQ(a.size(), b.size());
      // The two differ by the GEMM's accumulation order (fp32, K = 37 products of |x| ~ 1:
      // well under 1e-4), GELU's vector erf (within 2 ulp of the scalar one: ~1e-7) and, for
      // 16-bit outputs, by the fast kernel rounding the biased sum to
      // the output type before the activation (the reference keeps it in fp32): one rounding of
      // the activation's input, amplified by its slope (<= ~1.13 for GELU), plus the output's
      // own rounding: 3 ulps of the output type relative to |y|, 2^-8 for fp16 and 2^-6 for bf16,
      // with a floor at |y| = 0.5: the activations map inputs of a few units (whose rounding
      // error is that large) to outputs near zero.
      double rel = dt == DataType::kF32 ? 0 : dt == DataType::kF16 ? 3 * 0x1p-11 : 3 * 0x1p-8;
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_LE(std::fabs(a[i] - b[i]), 1e-4 + rel * std::fabs(b[i]) + rel * 0.5)
            << DataTypeName(dt) << " " << act << " element " << i;
      }
    }
  }
}

// GELU runs in the GEMM's epilogue: the same numbers, bit for bit, as the GELU pass over the
// stored bias sum (GeluF32 of the sum as stored, rounded once to the output type), for every
// tile height, a partial column strip, and fp32, fp16 and bf16 storage.
TEST(Avx512FusedMatMulTest, GeluInTheEpilogueIsThePassOverTheSum) {
  const uint64_t need = kCpuAvx512F | kCpuAvx512Bw | kCpuAvx512Vl | kCpuAvx512Dq;
  if ((DetectCpuFeatures() & need) != need) GTEST_SKIP() << "needs AVX-512";
  std::mt19937 rng(5);
  for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    if (dt == DataType::kBF16 && !(DetectCpuFeatures() & kCpuAvx512Bf16)) continue;
    auto stored = [dt](float v) {
      if (dt == DataType::kF16) return HalfBitsToFloat(FloatToHalfBits(v));
      if (dt == DataType::kBF16) return BFloat16BitsToFloat(FloatToBFloat16Bits(v));
      return v;
    };
    for (int64_t m : {1, 6, 7, 13, 40}) {
      for (int64_t n : {19, 64, 70}) {
        NodeSpec spec;
        spec.op = ir::OpType::kFusedMatMul;
        spec.since_version = 1;
        spec.attrs = {{"activation", StringAttr("Gelu")}};
        spec.inputs = {Random({m, 33}, dt, rng), Random({33, n}, dt, rng), Random({n}, dt, rng)};
        spec.output_dtypes = {dt};
        auto gelu = RunNode(spec);
        ASSERT_TRUE(gelu.ok()) << gelu.status();
        spec.attrs = {{"activation", StringAttr("")}};
        auto sum = RunNode(spec);
        ASSERT_TRUE(sum.ok()) << sum.status();
        std::vector<float> want = ToFloats((*sum)[0]), got = ToFloats((*gelu)[0]);
        kernels::cpu::avx512::GeluF32(want.data(), want.data(), static_cast<int64_t>(want.size()));
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(got[i], stored(want[i]))
              << DataTypeName(dt) << " M " << m << " N " << n << " element " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln::testing
