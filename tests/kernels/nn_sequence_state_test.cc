// Reference kernels of the newest sequence-model ops: RotaryEmbedding (opset 23), LinearAttention
// and CausalConvWithState (opset 27). Hand-computed cases for each mode, an independent
// double-precision recurrence for LinearAttention's GQA / per-key decay indexing, fp16 / bf16
// storage, and the errors bad inputs give.
#include <cmath>
#include <vector>

#include "tests/kernels/nn_test_util.h"

namespace kiln::testing::nn {
namespace {

using ir::OpType;

// ---------------------------------------------------------------- RotaryEmbedding

TEST(RotaryEmbeddingTest, HalvesAndInterleavedFourD) {
  // (B=1, H=1, S=2, D=4); position 0 does not rotate (cos 1, sin 0), position 1 by 90 degrees.
  auto x = MakeFloat({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  auto cos = MakeFloat({1, 2, 2}, {1, 1, 0, 0});
  auto sin = MakeFloat({1, 2, 2}, {0, 0, 1, 1});
  // Halves: x1 = (5, 6), x2 = (7, 8) -> (cos x1 - sin x2, sin x1 + cos x2) = (-7, -8, 5, 6).
  ExpectNear(RunFloats(OpType::kRotaryEmbedding, {x, cos, sin}), {1, 2, 3, 4, -7, -8, 5, 6});
  // Interleaved pairs (5, 6), (7, 8) -> (-6, 5), (-8, 7).
  ExpectNear(RunFloats(OpType::kRotaryEmbedding, {x, cos, sin}, {{"interleaved", IntAttr(1)}}),
             {1, 2, 3, 4, -6, 5, -8, 7});
}

TEST(RotaryEmbeddingTest, PositionIdsPartialRotationAndThreeD) {
  // 3-D input (B=1, S=2, 2 heads * 4), partial rotation of the first 2 dims of each head. The
  // cache has 3 rows; position_ids pick rows 2 and 0.
  auto x = MakeFloat({1, 2, 8}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  auto cos = MakeFloat({3, 1}, {1, 0.5f, 0});
  auto sin = MakeFloat({3, 1}, {0, 0.5f, 1});
  auto pos = MakeInt64({1, 2}, {2, 0});
  // Token 0 (row 2: 90 degrees): each head's (a, b) -> (-b, a). Token 1 (row 0): unchanged.
  ExpectNear(RunFloats(OpType::kRotaryEmbedding, {x, cos, sin, pos},
                       {{"num_heads", IntAttr(2)}, {"rotary_embedding_dim", IntAttr(2)}}),
             {-2, 1, 3, 4, -6, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
}

TEST(RotaryEmbeddingTest, HalfStorageRoundsOnce) {
  // cos = sin = 0.5 at one position: (x1, x2) = (1, 3) -> (0.5 - 1.5, 0.5 + 1.5) = (-1, 2), exact
  // in fp16 and bf16.
  auto y = RunNode(
      {OpType::kRotaryEmbedding,
       {},
       {MakeHalf({1, 1, 1, 2}, {1, 3}), MakeHalf({1, 1, 1}, {0.5f}), MakeHalf({1, 1, 1}, {0.5f})}});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ((*y)[0].dtype(), DataType::kF16);
  ExpectNear(ToFloats((*y)[0]), {-1, 2});
  y = RunNode(
      {OpType::kRotaryEmbedding,
       {},
       {MakeBf16({1, 1, 1, 2}, {1, 3}), MakeBf16({1, 1, 1}, {0.5f}), MakeBf16({1, 1, 1}, {0.5f})}});
  ASSERT_TRUE(y.ok()) << y.status();
  ExpectNear(ToFloats((*y)[0]), {-1, 2});
}

TEST(RotaryEmbeddingTest, Errors) {
  auto x4 = MakeFloat({1, 1, 1, 4}, {1, 2, 3, 4});
  auto c = MakeFloat({2, 2}, {1, 1, 1, 1});
  ExpectInvalid(RunOp(OpType::kRotaryEmbedding, {x4, c, c, MakeInt64({1, 1}, {2})}).status());
  ExpectInvalid(RunOp(OpType::kRotaryEmbedding, {x4, c, c, MakeInt64({1, 1}, {-1})}).status());
  ExpectInvalid(RunOp(OpType::kRotaryEmbedding,
                      {MakeFloat({1, 1, 4}, {1, 2, 3, 4}), c, c, MakeInt64({1, 1}, {0})})
                    .status());  // 3-D without num_heads
  ExpectInvalid(RunOp(OpType::kRotaryEmbedding, {x4, c, c, MakeInt64({1, 1}, {0})},
                      {{"rotary_embedding_dim", IntAttr(3)}})
                    .status());  // odd
  ExpectInvalid(RunOp(OpType::kRotaryEmbedding, {x4, MakeFloat({2, 1}, {1, 1}),
                                                 MakeFloat({2, 1}, {1, 1}), MakeInt64({1, 1}, {0})})
                    .status());  // cache width != head / 2
}

// ---------------------------------------------------------------- LinearAttention

// One head, d_k = d_v = 1, T = 2: q = (1, 2), k = (1, 1), v = (3, 4), scale 1.
struct Tiny {
  ir::Tensor q = MakeFloat({1, 2, 1}, {1, 2});
  ir::Tensor k = MakeFloat({1, 2, 1}, {1, 1});
  ir::Tensor v = MakeFloat({1, 2, 1}, {3, 4});
};

Attrs LinearAttrs(const char* rule) {
  return {{"q_num_heads", IntAttr(1)},
          {"kv_num_heads", IntAttr(1)},
          {"scale", FloatAttr(1)},
          {"update_rule", StringAttr(rule)}};
}

std::vector<std::vector<float>> RunLinear(std::vector<ir::Tensor> in, Attrs attrs) {
  auto r = RunOp(OpType::kLinearAttention, std::move(in), std::move(attrs), 2, 27);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {{}, {}};
  return {ToFloats((*r)[0]), ToFloats((*r)[1])};
}

TEST(LinearAttentionTest, EachUpdateRuleByHand) {
  Tiny t;
  const ir::Tensor none;
  const float half_log = std::log(0.5f);
  // linear: S = 3, 7; o = 1*3, 2*7.
  auto r = RunLinear({t.q, t.k, t.v}, LinearAttrs("linear"));
  ExpectNear(r[0], {3, 14});
  ExpectNear(r[1], {7});
  // gated, g = (0, ln 0.5): S = 3, 0.5*3 + 4 = 5.5; o = 3, 11. exp(ln 0.5) is 0.5 within an ulp.
  auto g = MakeFloat({1, 2, 1}, {0, half_log});
  r = RunLinear({t.q, t.k, t.v, none, g}, LinearAttrs("gated"));
  ExpectNear(r[0], {3, 11}, 1e-5f);
  // delta, beta = 0.5: v1' = 0.5*3, S = 1.5; v2' = 0.5*(4 - 1.5), S = 2.75; o = 1.5, 5.5.
  auto beta = MakeFloat({1, 2, 1}, {0.5f, 0.5f});
  r = RunLinear({t.q, t.k, t.v, none, none, beta}, LinearAttrs("delta"));
  ExpectNear(r[0], {1.5f, 5.5f});
  ExpectNear(r[1], {2.75f});
  // gated_delta: S = 1.5; decayed 0.75; v2' = 0.5*(4 - 0.75) = 1.625; S = 2.375; o = 1.5, 4.75
  // (the decay again exp(ln 0.5), 0.5 within an ulp, scaled by values <= 4: under 1e-5).
  r = RunLinear({t.q, t.k, t.v, none, g, beta}, LinearAttrs("gated_delta"));
  ExpectNear(r[0], {1.5f, 4.75f}, 1e-5f);
  ExpectNear(r[1], {2.375f}, 1e-5f);
  // past_state 2, linear: S = 5, 9; o = 5, 18.
  r = RunLinear({t.q, t.k, t.v, MakeFloat({1, 1, 1, 1}, {2})}, LinearAttrs("linear"));
  ExpectNear(r[0], {5, 18});
  ExpectNear(r[1], {9});
}

// The recurrence in double, as the specification writes it, for (B, T, H*d) packed inputs.
void ReferenceLinear(int b_n, int t_n, int hq, int hkv, int dk, int dv, const std::vector<float>& q,
                     const std::vector<float>& k, const std::vector<float>& v,
                     const std::vector<float>& g, int g_width, const std::vector<float>& beta,
                     double scale, std::vector<float>& out, std::vector<float>& state) {
  out.assign(b_n * t_n * hq * dv, 0);
  state.assign(b_n * hkv * dk * dv, 0);
  for (int b = 0; b < b_n; ++b) {
    for (int h = 0; h < hkv; ++h) {
      std::vector<double> s(dk * dv, 0.0);
      for (int t = 0; t < t_n; ++t) {
        const int bt = b * t_n + t;
        std::vector<double> kt(dk), vt(dv);
        for (int d = 0; d < dk; ++d) kt[d] = k[(bt * hkv + h) * dk + d];
        for (int m = 0; m < dv; ++m) vt[m] = v[(bt * hkv + h) * dv + m];
        for (int d = 0; d < dk; ++d) {
          const double gd = g_width == hkv ? g[bt * hkv + h] : g[(bt * hkv + h) * dk + d];
          for (int m = 0; m < dv; ++m) s[d * dv + m] *= std::exp(gd);
        }
        for (int m = 0; m < dv; ++m) {
          double r = 0;
          for (int d = 0; d < dk; ++d) r += s[d * dv + m] * kt[d];
          vt[m] = beta[bt * hkv + h] * (vt[m] - r);
        }
        for (int d = 0; d < dk; ++d)
          for (int m = 0; m < dv; ++m) s[d * dv + m] += kt[d] * vt[m];
        for (int qh = h * (hq / hkv); qh < (h + 1) * (hq / hkv); ++qh) {
          for (int m = 0; m < dv; ++m) {
            double acc = 0;
            for (int d = 0; d < dk; ++d) acc += q[(bt * hq + qh) * dk + d] * s[d * dv + m];
            out[(bt * hq + qh) * dv + m] = static_cast<float>(scale * acc);
          }
        }
      }
      for (int i = 0; i < dk * dv; ++i) state[(b * hkv + h) * dk * dv + i] = s[i];
    }
  }
}

TEST(LinearAttentionTest, GatedDeltaGqaPerKeyDecayMatchesRecurrence) {
  const int b = 2, t = 3, hq = 4, hkv = 2, dk = 3, dv = 2;
  auto q = RandomFloats(b * t * hq * dk, 1), k = RandomFloats(b * t * hkv * dk, 2);
  auto v = RandomFloats(b * t * hkv * dv, 3), g = RandomFloats(b * t * hkv * dk, 4);
  auto beta = RandomFloats(b * t * hkv, 5);
  for (float& x : g) x = -0.5f * std::fabs(x);  // log-space decay <= 0, as gates give
  for (float& x : beta) x = 0.5f + 0.5f * x;    // in (0, 1), as a sigmoid gives
  std::vector<float> want, want_state;
  ReferenceLinear(b, t, hq, hkv, dk, dv, q, k, v, g, hkv * dk, beta, 1.0 / std::sqrt(3.0), want,
                  want_state);
  Attrs attrs = {{"q_num_heads", IntAttr(hq)}, {"kv_num_heads", IntAttr(hkv)}};  // default rule
  auto r = RunLinear({MakeFloat({b, t, hq * dk}, q), MakeFloat({b, t, hkv * dk}, k),
                      MakeFloat({b, t, hkv * dv}, v), ir::Tensor(), MakeFloat({b, t, hkv * dk}, g),
                      MakeFloat({b, t, hkv}, beta)},
                     attrs);
  // fp32 against double over 3 steps of O(1) values: a few ulps of the accumulated state.
  ExpectNear(r[0], want, 1e-5f);
  ExpectNear(r[1], want_state, 1e-5f);
}

TEST(LinearAttentionTest, HalfActivationsWithFloatState) {
  // T = fp16, S = fp32: present_state keeps past_state's dtype; output rounds to fp16.
  auto r = RunOp(OpType::kLinearAttention,
                 {MakeHalf({1, 2, 1}, {1, 2}), MakeHalf({1, 2, 1}, {1, 1}),
                  MakeHalf({1, 2, 1}, {3, 4}), MakeFloat({1, 1, 1, 1}, {0.25f})},
                 LinearAttrs("linear"), 2, 27);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DataType::kF16);
  EXPECT_EQ((*r)[1].dtype(), DataType::kF32);
  ExpectNear(ToFloats((*r)[0]), {3.25f, 14.5f});  // exact in fp16
  ExpectNear(ToFloats((*r)[1]), {7.25f});
}

TEST(LinearAttentionTest, Errors) {
  Tiny t;
  const ir::Tensor none;
  auto run = [&](std::vector<ir::Tensor> in, Attrs attrs) {
    return RunOp(OpType::kLinearAttention, std::move(in), std::move(attrs), 2, 27).status();
  };
  ExpectInvalid(run({t.q, t.k, t.v}, LinearAttrs("gated")));  // decay missing
  ExpectInvalid(run({t.q, t.k, t.v, none, none, MakeFloat({1, 2, 1}, {1, 1})},
                    LinearAttrs("linear")));  // beta forbidden
  ExpectInvalid(run({t.q, t.k, t.v, MakeFloat({1, 1, 2, 1}, {0, 0})}, LinearAttrs("linear")));
  ExpectInvalid(run({t.q, t.k, t.v}, LinearAttrs("quadratic")));
  ExpectInvalid(run({t.q, t.k, t.v}, {{"q_num_heads", IntAttr(3)},
                                      {"kv_num_heads", IntAttr(2)},
                                      {"update_rule", StringAttr("linear")}}));
  ExpectInvalid(run({MakeFloat({2, 1}, {1, 2}), t.k, t.v}, LinearAttrs("linear")));  // rank 2
}

// ---------------------------------------------------------------- CausalConvWithState

std::vector<std::vector<float>> RunCausal(std::vector<ir::Tensor> in, Attrs attrs = {}) {
  auto r = RunOp(OpType::kCausalConvWithState, std::move(in), std::move(attrs), 2, 27);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {{}, {}};
  EXPECT_EQ((*r)[1].dims().size(), 3u);
  return {ToFloats((*r)[0]), ToFloats((*r)[1])};
}

TEST(CausalConvWithStateTest, ByHandWithAndWithoutState) {
  // x = (1, 2, 3), w = (1, 10, 100): w[k-1] weighs the current position.
  auto x = MakeFloat({1, 1, 3}, {1, 2, 3});
  auto w = MakeFloat({1, 1, 3}, {1, 10, 100});
  // Zero state: padded (0, 0, 1, 2, 3).
  auto r = RunCausal({x, w});
  ExpectNear(r[0], {100, 210, 321});
  ExpectNear(r[1], {2, 3});
  // State (5, 6) and bias 1: padded (5, 6, 1, 2, 3).
  r = RunCausal({x, w, MakeFloat({1}, {1}), MakeFloat({1, 1, 2}, {5, 6})});
  ExpectNear(r[0], {166, 217, 322});
  ExpectNear(r[1], {2, 3});
  // An input shorter than the state: the state shifts by one, padded (5, 6, 7).
  r = RunCausal({MakeFloat({1, 1, 1}, {7}), w, ir::Tensor(), MakeFloat({1, 1, 2}, {5, 6})});
  ExpectNear(r[0], {765});
  ExpectNear(r[1], {6, 7});
}

TEST(CausalConvWithStateTest, SiluChannelsAndKernelSizeOne) {
  // Two channels, k = 1 (no state): y = silu(w_c * x).
  auto x = MakeFloat({1, 2, 2}, {-1, 0, 2, 3});
  auto w = MakeFloat({2, 1, 1}, {1, -1});
  auto silu = [](float v) { return v / (1 + std::exp(-v)); };
  for (const char* act : {"silu", "swish"}) {
    auto r = RunCausal({x, w}, {{"activation", StringAttr(act)}});
    // The same fp32 formula on both sides, up to the kernel's order of operations: ~1 ulp.
    ExpectNear(r[0], {silu(-1), silu(0), silu(-2), silu(-3)}, 1e-6f);
    EXPECT_TRUE(r[1].empty());  // present_state (1, 2, 0)
  }
}

TEST(CausalConvWithStateTest, HalfStorage) {
  auto r = RunOp(OpType::kCausalConvWithState,
                 {MakeBf16({1, 1, 2}, {1, 2}), MakeBf16({1, 1, 2}, {0.5f, 4})}, {}, 2, 27);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].dtype(), DataType::kBF16);
  ExpectNear(ToFloats((*r)[0]), {4, 8.5f});  // exact in bf16
  ExpectNear(ToFloats((*r)[1]), {2});
}

TEST(CausalConvWithStateTest, Errors) {
  auto x = MakeFloat({1, 2, 3}, Iota(6, 0));
  auto run = [](std::vector<ir::Tensor> in, Attrs attrs = {}) {
    return RunOp(OpType::kCausalConvWithState, std::move(in), std::move(attrs), 2, 27).status();
  };
  ExpectInvalid(run({x, MakeFloat({2, 2, 2}, Iota(8, 0))}));  // middle dim != 1
  ExpectInvalid(run({x, MakeFloat({3, 1, 2}, Iota(6, 0))}));  // channels
  ExpectInvalid(run({x, MakeFloat({2, 1, 2}, Iota(4, 0))}, {{"activation", StringAttr("relu")}}));
  ExpectInvalid(run({x, MakeFloat({2, 1, 2}, Iota(4, 0)), ir::Tensor(),
                     MakeFloat({1, 2, 2}, Iota(4, 0))}));  // state length != k - 1
  ExpectInvalid(run({MakeFloat({2, 3}, Iota(6, 0)), MakeFloat({2, 1, 2}, Iota(4, 0))}));
}

}  // namespace
}  // namespace kiln::testing::nn
