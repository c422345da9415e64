// The OpenCL MatMul and Gemm against the reference kernels at fp32, fp16 and bf16 storage, and,
// where this CPU runs the AVX-512 GEMM, bit for bit against it at fp32 and fp16: both accumulate
// acc = fma(a[k], b[k], acc) in k order (cpu/avx512/gemm.h).
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/kernels/opencl/kernel_base.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/kernels/opencl/opencl_testing.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ir::OpType;

const DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};

// The device against the reference. Both sum K products in fp32 in different orders: each is
// within K * 2^-24 * sum|a_k b_k| of the exact sum (the standard bound gamma_K, first order), so
// they are within twice that of each other; inputs lie in [-1, 1], so sum|a_k b_k| <= K. A
// 16-bit output rounds the two fp32 values once: up to one more unit of its own last place.
void ExpectNearReference(const NodeSpec& spec, int64_t k, double act_ulps = 0) {
  const double accumulation = 2.0 * k * std::ldexp(1.0, -24) * k;
  ExpectWithinOfReference(spec, [&](float w) {
    return accumulation * 1.01 + act_ulps * Fp32RangeUlp(w, DataType::kF32);
  });
}

// The device against the AVX-512 GEMM, bit for bit (fp32 and fp16 storage), with k unsplit
// (a device with many compute units would split it for small GEMMs).
void ExpectSameAsAvx512(const NodeSpec& spec) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) return;
  NodeSpec cl = spec;
  cl.opencl = true;
  const ir::Tensor want = RunNodeOk0(spec);
  kernels::opencl::ForceGemmTileForTesting(4, 1);
  const ir::Tensor got = RunNodeOk0(cl);
  kernels::opencl::ForceGemmTileForTesting(0);
  ASSERT_TRUE(got.defined() && want.defined());
  ASSERT_EQ(got.byte_size(), want.byte_size());
  EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), got.byte_size()), 0)
      << "differs from the AVX-512 GEMM";
}

TEST(OpenClMatMulTest, ShapesAndBatchesAsTheReference) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{5, 7}, {7, 9}},
      {{130, 300}, {300, 70}},  // neither M nor N a multiple of the 64-wide tile; K past 16
      {{1, 64}, {64, 1}},
      {{33}, {33, 5}},                      // a vector on the left
      {{4, 33}, {33}},                      // and on the right
      {{2, 1, 3, 20, 17}, {4, 1, 17, 65}},  // batch dims broadcast both ways
      {{3, 12, 16, 8}, {3, 12, 8, 16}},     // attention-shaped
      {{0, 5}, {5, 3}},
      {{3, 0}, {0, 4}},  // K = 0: zeros
  };
  uint32_t seed = 1;
  for (DataType dt : kTypes) {
    for (const auto& [a, b] : shapes) {
      SCOPED_TRACE(
          absl::StrCat(DataTypeOnnxName(dt), " ", ir::DimsToString(a), " x ", ir::DimsToString(b)));
      NodeSpec s{OpType::kMatMul, {}, {RandomStored(dt, a, seed++), RandomStored(dt, b, seed++)}};
      ExpectNearReference(s, a.back());
      if (dt != DataType::kBF16 && a.size() == 2 && b.size() == 2) ExpectSameAsAvx512(s);
    }
  }
}

TEST(OpenClMatMulTest, GemmTransposesScalesAndBroadcastsC) {
  const int64_t m = 37, k = 45, n = 70;
  const std::vector<std::vector<int64_t>> cs = {{}, {n}, {1, n}, {m, 1}, {m, n}, {1, 1}};
  uint32_t seed = 100;
  for (DataType dt : kTypes) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        for (size_t ci = 0; ci <= cs.size(); ++ci) {
          SCOPED_TRACE(absl::StrCat(DataTypeOnnxName(dt), " transA ", ta, " transB ", tb,
                                    ci < cs.size() ? " C " + ir::DimsToString(cs[ci]) : " no C"));
          std::vector<ir::Tensor> in = {
              RandomStored(dt, ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k},
                           seed++),
              RandomStored(dt, tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n},
                           seed++)};
          if (ci < cs.size()) in.push_back(RandomStored(dt, cs[ci], seed++));
          NodeSpec s{OpType::kGemm,
                     {{"transA", IntAttr(ta)},
                      {"transB", IntAttr(tb)},
                      {"alpha", FloatAttr(0.75f)},
                      {"beta", FloatAttr(-1.5f)}},
                     in};
          // |alpha| < 1; beta * C adds one rounding of a value within 1.5 ulps-worth: covered
          // by the 16-bit unit and, at fp32, by the 1% margin over the accumulation bound.
          ExpectNearReference(s, k);
          if (dt != DataType::kBF16) ExpectSameAsAvx512(s);
        }
      }
    }
  }
}

// Every tiling (2, 4 or 8 outputs per item per dim; operands staged along k or not) sums each
// output in the same k order: the same bits, and those of the AVX-512 GEMM.
TEST(OpenClMatMulTest, EveryTilingGivesTheSameBits) {
  const int64_t m = 150, k = 70, n = 133;  // none a multiple of any tile; K past 4 slices
  uint32_t seed = 500;
  for (DataType dt : {DataType::kF32, DataType::kF16}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        SCOPED_TRACE(absl::StrCat(DataTypeOnnxName(dt), " transA ", ta, " transB ", tb));
        NodeSpec s{
            OpType::kGemm,
            {{"transA", IntAttr(ta)}, {"transB", IntAttr(tb)}},
            {RandomStored(dt, ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}, seed++),
             RandomStored(dt, tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n},
                          seed++)}};
        ExpectSameBitsForEveryTile(s);
        ExpectSameAsAvx512(s);
      }
    }
  }
}

// A k range split into parts (small GEMMs on a device of many compute units): each part summed
// in k order, the parts' sums added in order, then the epilogue. Another fp32 order of the same
// products: within ExpectNearReference's bound, and the same bits from run to run.
TEST(OpenClMatMulTest, SplitKSumsWithinTheBoundAndRepeats) {
  uint32_t seed = 700;
  for (DataType dt : kTypes) {
    for (int parts : {2, 3, 7}) {
      SCOPED_TRACE(absl::StrCat(DataTypeOnnxName(dt), " k in ", parts, " parts"));
      kernels::opencl::ForceGemmTileForTesting(4, parts);
      // Gemm with C (alpha, beta), batched MatMul, FusedMatMul with bias and activation.
      const std::vector<NodeSpec> specs = {
          {OpType::kGemm,
           {{"transB", IntAttr(1)}, {"alpha", FloatAttr(0.75f)}, {"beta", FloatAttr(-1.5f)}},
           {RandomStored(dt, {37, 200}, seed++), RandomStored(dt, {70, 200}, seed++),
            RandomStored(dt, {70}, seed++)}},
          {OpType::kMatMul,
           {},
           {RandomStored(dt, {3, 20, 150}, seed++), RandomStored(dt, {3, 150, 33}, seed++)}},
          {OpType::kFusedMatMul,
           {{"activation", StringAttr("Gelu")}},
           {RandomStored(dt, {2, 13, 99}, seed++), RandomStored(dt, {99, 40}, seed++),
            RandomStored(dt, {40}, seed++)}},
      };
      for (NodeSpec s : specs) {
        if (s.op == OpType::kFusedMatMul) s.output_dtypes = {dt};
        const int64_t k = s.inputs[0].dims().back();
        ExpectNearReference(s, s.op == OpType::kFusedMatMul ? k + 1 : k,
                            s.op == OpType::kFusedMatMul ? 24 : 0);
        s.opencl = true;
        const ir::Tensor a = RunNodeOk0(s), b = RunNodeOk0(s);
        ASSERT_TRUE(a.defined() && b.defined());
        EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()), 0);
      }
      kernels::opencl::ForceGemmTileForTesting(0);
    }
  }
}

// The split is a pure function of the sizes: parts of whole 16-deep slices, none empty.
TEST(OpenClMatMulTest, SplitKPartsCoverTheRange) {
  for (uint64_t k : {1u, 15u, 16u, 17u, 100u, 768u, 3072u, 5000u}) {
    for (int parts : {1, 2, 3, 7, 32}) {
      const int got = kernels::opencl::SplitK(k, parts);
      const uint64_t chunk = kernels::opencl::SplitChunk(k, parts);
      EXPECT_GE(got, 1);
      EXPECT_LE(got, parts);
      EXPECT_EQ(chunk % 16, 0u);
      EXPECT_GE(chunk * got, k) << k << " in " << parts;
      EXPECT_LT(chunk * (got - 1), k) << k << " in " << parts << ": an empty part";
    }
  }
}

// FusedMatMul: act(A B + bias). The activations add their own error: up to 24 fp32 ulps of the
// result (GELU's erf is within 16 ulps by the OpenCL C spec, the rest a few roundings).
TEST(OpenClMatMulTest, FusedMatMulBiasAndActivations) {
  const std::vector<std::string> acts = {"", "Relu", "Gelu", "GeluTanh", "Sigmoid", "Tanh"};
  const std::vector<std::vector<int64_t>> biases = {{40}, {1, 40}, {13, 1}, {}};
  uint32_t seed = 900;
  for (DataType dt : kTypes) {
    for (const std::string& act : acts) {
      for (size_t bi = 0; bi <= biases.size(); ++bi) {
        SCOPED_TRACE(absl::StrCat(
            DataTypeOnnxName(dt), " '", act, "'",
            bi < biases.size() ? " bias " + ir::DimsToString(biases[bi]) : " no bias"));
        std::vector<ir::Tensor> in = {RandomStored(dt, {2, 3, 13, 33}, seed++),
                                      RandomStored(dt, {33, 40}, seed++)};
        if (bi < biases.size()) in.push_back(RandomStored(dt, biases[bi], seed++));
        NodeSpec s{OpType::kFusedMatMul, {{"activation", StringAttr(act)}}, in};
        s.output_dtypes = {dt};
        ExpectNearReference(s, 33 + 1, act.empty() || act == "Relu" ? 0 : 24);
      }
    }
  }
}

TEST(OpenClMatMulTest, BadShapesNameTheNode) {
  NodeSpec inner{
      OpType::kMatMul, {}, {MakeFloat({2, 3}, Iota(6, 0)), MakeFloat({4, 2}, Iota(8, 0))}};
  inner.opencl = true;
  ExpectNodeError(inner, absl::StatusCode::kInvalidArgument, "inner dimensions differ");
  NodeSpec c{
      OpType::kGemm,
      {},
      {MakeFloat({2, 3}, Iota(6, 0)), MakeFloat({3, 2}, Iota(6, 0)), MakeFloat({3}, Iota(3, 0))}};
  c.opencl = true;
  ExpectNodeError(c, absl::StatusCode::kInvalidArgument, "does not broadcast");
}

}  // namespace
}  // namespace kiln::testing
