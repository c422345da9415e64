// Reference kernels of the nn family: Gemm, MatMul, Einsum, Attention. Conv and the pools are in
// nn_conv_test.cc.
#include <cmath>
#include <limits>

#include "tests/kernels/nn_test_util.h"

namespace kiln::testing::nn {
namespace {

using ir::OpType;

// ---------------------------------------------------------------- Gemm

TEST(GemmTest, HandComputedWithTransposesAlphaBeta) {
  // A' = [[1,2,3],[4,5,6]] stored transposed; B' = [[1,0],[0,1],[1,1]] stored transposed.
  auto a = MakeFloat({3, 2}, {1, 4, 2, 5, 3, 6});
  auto b = MakeFloat({2, 3}, {1, 0, 1, 0, 1, 1});
  auto c = MakeFloat({2}, {10, 20});  // broadcast along rows
  // A'B' = [[4,5],[10,11]]; Y = 2*A'B' + 0.5*C.
  auto y = RunFloats(OpType::kGemm, {a, b, c},
                     {{"transA", IntAttr(1)},
                      {"transB", IntAttr(1)},
                      {"alpha", FloatAttr(2)},
                      {"beta", FloatAttr(0.5f)}});
  ExpectNear(y, {13, 20, 25, 32});
}

TEST(GemmTest, ColumnBiasAndOptionalC) {
  auto a = MakeFloat({2, 2}, {1, 2, 3, 4});
  auto b = MakeFloat({2, 2}, {1, 1, 1, 1});
  ExpectNear(RunFloats(OpType::kGemm, {a, b, MakeFloat({2, 1}, {1, -1})}), {4, 4, 6, 6});
  ExpectNear(RunFloats(OpType::kGemm, {a, b}), {3, 3, 7, 7});
}

TEST(GemmTest, Int32) {
  auto a = MakeTensor<int32_t>({1, 2}, {3, -4}, DataType::kI32);
  auto b = MakeTensor<int32_t>({2, 1}, {5, 6}, DataType::kI32);
  auto c = MakeTensor<int32_t>({1}, {100}, DataType::kI32);
  auto r = RunOp(OpType::kGemm, {a, b, c});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DataType::kI32);
  EXPECT_EQ((*r)[0].data<int32_t>()[0], 15 - 24 + 100);
}

TEST(GemmTest, Fp16AccumulatesInFp32AndRoundsOnce) {
  // 1 + 2^-11 + 2^-11: summed in fp16 each step rounds back to 1; in fp32 the sum 1 + 2^-10 is
  // exactly representable in fp16.
  const float e = std::ldexp(1.0f, -11);
  auto a = MakeHalf({1, 3}, {1, e, e});
  auto b = MakeHalf({3, 1}, {1, 1, 1});
  auto y = RunFloats(OpType::kGemm, {a, b});
  ExpectNear(y, {1.0f + 2 * e});
}

TEST(GemmTest, Bf16AccumulatesInFp32AndRoundsOnce) {
  const float e = std::ldexp(1.0f, -8);  // half an ulp of bf16 at 1
  auto y = RunFloats(OpType::kGemm, {MakeBf16({1, 3}, {1, e, e}), MakeBf16({3, 1}, {1, 1, 1})});
  ExpectNear(y, {1.0f + 2 * e});
}

TEST(GemmTest, Errors) {
  auto a = MakeFloat({2, 3}, std::vector<float>(6, 1));
  auto b = MakeFloat({2, 3}, std::vector<float>(6, 1));
  ExpectInvalid(RunOp(OpType::kGemm, {a, b}).status());  // inner dims 3 vs 2
  auto bt = MakeFloat({3, 2}, std::vector<float>(6, 1));
  ExpectInvalid(RunOp(OpType::kGemm, {a, bt, MakeFloat({3}, {1, 2, 3})}).status());  // C
  ExpectInvalid(RunOp(OpType::kGemm, {a, bt}, {}, 1, 9).status());  // C required before 11
}

// ---------------------------------------------------------------- MatMul

// Plain triple loop for one (m x k) * (k x n) product.
std::vector<float> NaiveMatMul(const std::vector<float>& a, const std::vector<float>& b, int m,
                               int k, int n) {
  std::vector<float> y(m * n, 0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int p = 0; p < k; ++p) y[i * n + j] += a[i * k + p] * b[p * n + j];
  return y;
}

TEST(MatMulTest, TwoD) {
  auto y = RunFloats(OpType::kMatMul, {MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6}),
                                       MakeFloat({3, 2}, {7, 8, 9, 10, 11, 12})});
  ExpectNear(y, {58, 64, 139, 154});
}

TEST(MatMulTest, VectorOperands) {
  std::vector<int64_t> dims;
  auto y =
      RunFloats(OpType::kMatMul, {MakeFloat({3}, {1, 2, 3}), MakeFloat({3}, {4, 5, 6})}, {}, &dims);
  EXPECT_TRUE(dims.empty());
  ExpectNear(y, {32});
  // (3) x (2, 3, 2) -> (2, 2)
  auto b = MakeFloat({2, 3, 2}, {1, 0, 0, 1, 1, 1, 2, 0, 0, 2, 2, 2});
  y = RunFloats(OpType::kMatMul, {MakeFloat({3}, {1, 2, 3}), b}, {}, &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{2, 2}));
  ExpectNear(y, {4, 5, 8, 10});
  // (2, 3) x (3) -> (2)
  y = RunFloats(OpType::kMatMul, {MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6}), MakeFloat({3}, {1, 1, 1})},
                {}, &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{2}));
  ExpectNear(y, {6, 15});
}

TEST(MatMulTest, BroadcastBatchesMatchNaive) {
  // (2, 1, 3, 4) x (3, 4, 5) -> (2, 3, 3, 5); a's batch dim 1 broadcasts against b's 3.
  auto av = RandomFloats(2 * 3 * 4, 1), bv = RandomFloats(3 * 4 * 5, 2);
  std::vector<int64_t> dims;
  auto y = RunFloats(OpType::kMatMul, {MakeFloat({2, 1, 3, 4}, av), MakeFloat({3, 4, 5}, bv)}, {},
                     &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{2, 3, 3, 5}));
  ASSERT_EQ(y.size(), 2u * 3 * 15);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      std::vector<float> a(av.begin() + i * 12, av.begin() + (i + 1) * 12);
      std::vector<float> b(bv.begin() + j * 20, bv.begin() + (j + 1) * 20);
      std::vector<float> got(y.begin() + (i * 3 + j) * 15, y.begin() + (i * 3 + j + 1) * 15);
      ExpectNear(got, NaiveMatMul(a, b, 3, 4, 5), 1e-5f);  // summation order differs only
    }
  }
}

TEST(MatMulTest, LargeMatchesNaive) {
  // Large enough to take the tiled, parallel path (several tiles in every direction).
  const int m = 70, k = 300, n = 600;
  auto av = RandomFloats(m * k, 3), bv = RandomFloats(k * n, 4);
  auto y = RunFloats(OpType::kMatMul, {MakeFloat({m, k}, av), MakeFloat({k, n}, bv)});
  // |terms| <= 1 and k = 300: fp32 reassociation error stays far below 1e-3.
  ExpectNear(y, NaiveMatMul(av, bv, m, k, n), 1e-3f);
}

TEST(MatMulTest, Int64AndUint32) {
  auto r = RunOp(OpType::kMatMul, {MakeInt64({1, 2}, {1LL << 40, 3}), MakeInt64({2, 1}, {2, 5})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].data<int64_t>()[0], (1LL << 41) + 15);
  auto u = MakeTensor<int32_t>({1, 1}, {-1}, DataType::kU32);  // 0xffffffff
  r = RunOp(OpType::kMatMul, {u, MakeTensor<int32_t>({1, 1}, {2}, DataType::kU32)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].data<uint32_t>()[0], 0xfffffffeu);  // wraps modulo 2^32
}

TEST(MatMulTest, Errors) {
  ExpectInvalid(RunOp(OpType::kMatMul, {MakeFloat({2, 3}, std::vector<float>(6)),
                                        MakeFloat({2, 3}, std::vector<float>(6))})
                    .status());
  ExpectInvalid(RunOp(OpType::kMatMul, {MakeFloat({2, 2, 3}, std::vector<float>(12)),
                                        MakeFloat({3, 3, 1}, std::vector<float>(9))})
                    .status());  // batch 2 vs 3
}

// ---------------------------------------------------------------- Einsum

ir::Attribute Eq(const char* s) { return StringAttr(s); }

TEST(EinsumTest, MatMulTransposeAndImplicit) {
  auto a = MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6});
  auto b = MakeFloat({3, 2}, {7, 8, 9, 10, 11, 12});
  ExpectNear(RunFloats(OpType::kEinsum, {a, b}, {{"equation", Eq("ij,jk->ik")}}),
             {58, 64, 139, 154});
  ExpectNear(RunFloats(OpType::kEinsum, {a, b}, {{"equation", Eq("ij,jk")}}), {58, 64, 139, 154});
  // Explicit "ij->ji" transposes; implicit "ba" orders the output labels alphabetically (a, b),
  // which transposes too.
  std::vector<int64_t> dims;
  ExpectNear(RunFloats(OpType::kEinsum, {a}, {{"equation", Eq("ij->ji")}}, &dims),
             {1, 4, 2, 5, 3, 6});
  EXPECT_EQ(dims, (std::vector<int64_t>{3, 2}));
  ExpectNear(RunFloats(OpType::kEinsum, {a}, {{"equation", Eq("ba")}}, &dims), {1, 4, 2, 5, 3, 6});
}

TEST(EinsumTest, TraceDiagonalSumOuter) {
  auto m = MakeFloat({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  std::vector<int64_t> dims;
  ExpectNear(RunFloats(OpType::kEinsum, {m}, {{"equation", Eq("ii->")}}, &dims), {15});
  EXPECT_TRUE(dims.empty());
  ExpectNear(RunFloats(OpType::kEinsum, {m}, {{"equation", Eq("ii")}}), {15});
  ExpectNear(RunFloats(OpType::kEinsum, {m}, {{"equation", Eq("ii->i")}}), {1, 5, 9});
  ExpectNear(RunFloats(OpType::kEinsum, {m}, {{"equation", Eq("ij->j")}}), {12, 15, 18});
  ExpectNear(RunFloats(OpType::kEinsum, {MakeFloat({2}, {1, 2}), MakeFloat({3}, {1, 10, 100})},
                       {{"equation", Eq("i,j->ij")}}),
             {1, 10, 100, 2, 20, 200});
  ExpectNear(RunFloats(OpType::kEinsum, {MakeFloat({3}, {1, 2, 3}), MakeFloat({3}, {4, 5, 6})},
                       {{"equation", Eq("i,i")}}),
             {32});
}

TEST(EinsumTest, EllipsisBroadcastBatchMatMul) {
  // (1, 2, 3) "...ij" x (4, 3, 2) "...jk": a's ellipsis dim of size 1 broadcasts against 4.
  auto av = RandomFloats(1 * 2 * 3, 5), bv = RandomFloats(4 * 3 * 2, 6);
  std::vector<int64_t> dims;
  auto y = RunFloats(OpType::kEinsum, {MakeFloat({1, 2, 3}, av), MakeFloat({4, 3, 2}, bv)},
                     {{"equation", Eq("...ij,...jk->...ik")}}, &dims);
  EXPECT_EQ(dims, (std::vector<int64_t>{4, 2, 2}));
  for (int bt = 0; bt < 4; ++bt) {
    std::vector<float> b(bv.begin() + bt * 6, bv.begin() + (bt + 1) * 6);
    std::vector<float> got(y.begin() + bt * 4, y.begin() + (bt + 1) * 4);
    ExpectNear(got, NaiveMatMul(av, b, 2, 3, 2), 1e-6f);  // 3-term sums in another order
  }
  // Implicit output puts the ellipsis dims first: "i..." is a transpose.
  auto x = MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6});
  ExpectNear(RunFloats(OpType::kEinsum, {x}, {{"equation", Eq("i...")}}, &dims),
             {1, 4, 2, 5, 3, 6});
  EXPECT_EQ(dims, (std::vector<int64_t>{3, 2}));
}

TEST(EinsumTest, BatchDiagonalAndInt) {
  auto x = MakeFloat({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  ExpectNear(RunFloats(OpType::kEinsum, {x}, {{"equation", Eq("...ii->...i")}}), {1, 4, 5, 8});
  auto r = RunOp(OpType::kEinsum,
                 {MakeTensor<int32_t>({2}, {3, 4}, DataType::kI32),
                  MakeTensor<int32_t>({2}, {5, -6}, DataType::kI32)},
                 {{"equation", Eq("i,i->")}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].data<int32_t>()[0], -9);
}

TEST(EinsumTest, Fp16RoundsOnce) {
  const float e = std::ldexp(1.0f, -11);
  auto y = RunFloats(OpType::kEinsum, {MakeHalf({3}, {1, e, e}), MakeHalf({3}, {1, 1, 1})},
                     {{"equation", Eq("i,i->")}});
  ExpectNear(y, {1.0f + 2 * e});
}

TEST(EinsumTest, Errors) {
  auto m = MakeFloat({2, 3}, std::vector<float>(6));
  ExpectInvalid(RunOp(OpType::kEinsum, {m}, {{"equation", Eq("i$->i")}}).status());
  ExpectInvalid(RunOp(OpType::kEinsum, {m}, {{"equation", Eq("ijk->i")}}).status());     // rank
  ExpectInvalid(RunOp(OpType::kEinsum, {m}, {{"equation", Eq("ii->i")}}).status());      // 2 vs 3
  ExpectInvalid(RunOp(OpType::kEinsum, {m}, {{"equation", Eq("ij->k")}}).status());      // unknown
  ExpectInvalid(RunOp(OpType::kEinsum, {m}, {{"equation", Eq("ij->ii")}}).status());     // repeat
  ExpectInvalid(RunOp(OpType::kEinsum, {m}, {{"equation", Eq("ij,jk->ik")}}).status());  // count
  ExpectInvalid(RunOp(OpType::kEinsum, {m}).status());  // no equation
}

// ---------------------------------------------------------------- Attention

// softmax(scale * q.k_j) . v for one query row; keys/values as rows.
std::vector<float> AttendRow(const std::vector<float>& q, const std::vector<std::vector<float>>& k,
                             const std::vector<std::vector<float>>& v, float scale,
                             const std::vector<bool>& allowed) {
  std::vector<double> w(k.size());
  double mx = -1e30, sum = 0;
  for (size_t j = 0; j < k.size(); ++j) {
    double s = 0;
    for (size_t d = 0; d < q.size(); ++d) s += q[d] * k[j][d];
    w[j] = allowed[j] ? s * scale : -INFINITY;
    mx = std::max(mx, w[j]);
  }
  for (double& x : w) sum += (x = std::exp(x - mx));
  std::vector<float> out(v[0].size(), 0);
  for (size_t j = 0; j < k.size(); ++j)
    for (size_t d = 0; d < out.size(); ++d) out[d] += static_cast<float>(w[j] / sum) * v[j][d];
  return out;
}

TEST(AttentionTest, FourDWithCausalMask) {
  // One head, 2 queries, 2 keys, head size 2, v head size 1.
  auto q = MakeFloat({1, 1, 2, 2}, {1, 0, 0, 1});
  auto k = MakeFloat({1, 1, 2, 2}, {1, 2, 3, 4});
  auto v = MakeFloat({1, 1, 2, 1}, {10, 20});
  const float scale = 1.0f / std::sqrt(2.0f);
  auto y = RunFloats(OpType::kAttention, {q, k, v});
  std::vector<float> want0 = AttendRow({1, 0}, {{1, 2}, {3, 4}}, {{10}, {20}}, scale, {1, 1});
  std::vector<float> want1 = AttendRow({0, 1}, {{1, 2}, {3, 4}}, {{10}, {20}}, scale, {1, 1});
  // The kernel scales Q and K by sqrt(scale) each: a few fp32 ulps of the weights.
  ExpectNear(y, {want0[0], want1[0]}, 1e-4f);
  y = RunFloats(OpType::kAttention, {q, k, v}, {{"is_causal", IntAttr(1)}});
  ExpectNear(y, {10, AttendRow({0, 1}, {{1, 2}, {3, 4}}, {{10}, {20}}, scale, {1, 1})[0]}, 1e-4f);
}

TEST(AttentionTest, BoolMaskFullyMaskedRowIsZeroAndFloatMaskAdds) {
  auto q = MakeFloat({1, 1, 2, 1}, {1, 1});
  auto k = MakeFloat({1, 1, 2, 1}, {1, 2});
  auto v = MakeFloat({1, 1, 2, 1}, {3, 5});
  auto mask = MakeTensor<uint8_t>({2, 2}, {1, 0, 0, 0}, DataType::kBool);
  auto y = RunFloats(OpType::kAttention, {q, k, v, mask}, {{"scale", FloatAttr(1)}});
  ExpectNear(y, {3, 0});
  // Additive mask of -1000 on key 1 for row 0 only.
  auto fmask = MakeFloat({1, 2}, {0, -1000});
  y = RunFloats(OpType::kAttention, {q, k, v, fmask}, {{"scale", FloatAttr(1)}});
  ExpectNear(y, {3, 3}, 1e-5f);
  // A mask shorter than the key count pads with masked-out keys.
  auto short_mask = MakeFloat({2, 1}, {0, 0});
  y = RunFloats(OpType::kAttention, {q, k, v, short_mask}, {{"scale", FloatAttr(1)}});
  ExpectNear(y, {3, 3}, 1e-5f);
}

TEST(AttentionTest, ThreeDGqaPastPresentAndQkOutput) {
  // B=1, Sq=1, q heads 2 sharing 1 kv head, head size 2; one past key/value plus one new.
  auto q = MakeFloat({1, 1, 4}, {1, 0, 0, 1});
  auto k = MakeFloat({1, 1, 2}, {0, 2});
  auto v = MakeFloat({1, 1, 2}, {1, 2});
  auto pk = MakeFloat({1, 1, 1, 2}, {2, 0});
  auto pv = MakeFloat({1, 1, 1, 2}, {3, 4});
  auto r = RunOp(OpType::kAttention, {q, k, v, ir::Tensor(), pk, pv},
                 {{"q_num_heads", IntAttr(2)},
                  {"kv_num_heads", IntAttr(1)},
                  {"scale", FloatAttr(1)},
                  {"qk_matmul_output_mode", IntAttr(0)}},
                 4);
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& out = *r;
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{1, 1, 4}));
  EXPECT_EQ(out[1].dims(), (std::vector<int64_t>{1, 1, 2, 2}));
  ExpectNear(ToFloats(out[1]), {2, 0, 0, 2});
  ExpectNear(ToFloats(out[2]), {3, 4, 1, 2});
  // Head 0: scores [2, 0]; head 1: [0, 2].
  ExpectNear(ToFloats(out[3]), {2, 0, 0, 2});
  const float p = 1.0f / (1.0f + std::exp(-2.0f));  // weight of the larger score
  ExpectNear(ToFloats(out[0]),
             {p * 3 + (1 - p) * 1, p * 4 + (1 - p) * 2,  //
              (1 - p) * 3 + p * 1, (1 - p) * 4 + p * 2},
             1e-5f);
}

TEST(AttentionTest, SoftcapAndQkModes) {
  auto q = MakeFloat({1, 1, 1, 1}, {4});
  auto k = MakeFloat({1, 1, 2, 1}, {1, 2});
  auto v = MakeFloat({1, 1, 2, 1}, {0, 1});
  auto mask = MakeFloat({1, 2}, {0, -1});
  auto run_mode = [&](int mode) {
    auto r = RunOp(OpType::kAttention, {q, k, v, mask},
                   {{"scale", FloatAttr(1)},
                    {"softcap", FloatAttr(5)},
                    {"qk_matmul_output_mode", IntAttr(mode)}},
                   4);
    EXPECT_TRUE(r.ok()) << r.status();
    return ToFloats((*r)[3]);
  };
  const float c0 = 5 * std::tanh(4.0f / 5), c1 = 5 * std::tanh(8.0f / 5);
  ExpectNear(run_mode(0), {4, 8});
  ExpectNear(run_mode(1), {c0, c1}, 1e-5f);
  ExpectNear(run_mode(2), {c0, c1 - 1}, 1e-5f);
  const float e = std::exp(c1 - 1 - c0);
  ExpectNear(run_mode(3), {1 / (1 + e), e / (1 + e)}, 1e-5f);
}

TEST(AttentionTest, Fp16) {
  auto q = MakeHalf({1, 1, 1, 2}, {1, 1});
  auto k = MakeHalf({1, 1, 2, 2}, {1, 1, 1, 1});
  auto v = MakeHalf({1, 1, 2, 2}, {1, 2, 3, 4});
  auto r = RunOp(OpType::kAttention, {q, k, v});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DataType::kF16);
  ExpectNear(ToFloats((*r)[0]), {2, 3});  // equal weights: exact means
}

TEST(AttentionTest, Errors) {
  auto q3 = MakeFloat({1, 1, 4}, std::vector<float>(4));
  ExpectInvalid(RunOp(OpType::kAttention, {q3, q3, q3}).status());  // heads missing for 3-D
  auto q = MakeFloat({1, 2, 1, 2}, std::vector<float>(4));
  auto k = MakeFloat({1, 3, 1, 2}, std::vector<float>(6));
  ExpectInvalid(RunOp(OpType::kAttention, {q, k, k}).status());  // 2 q heads vs 3 kv heads
  auto pk = MakeFloat({1, 2, 1, 2}, std::vector<float>(4));
  ExpectInvalid(RunOp(OpType::kAttention, {q, q, q, ir::Tensor(), pk}).status());  // no past_value
  ExpectInvalid(RunOp(OpType::kAttention, {q, q, q, MakeFloat({1, 3}, {0, 0, 0})}).status());
  ExpectInvalid(
      RunOp(OpType::kAttention, {q, q, q}, {{"qk_matmul_output_mode", IntAttr(4)}}).status());
}

}  // namespace
}  // namespace kiln::testing::nn
