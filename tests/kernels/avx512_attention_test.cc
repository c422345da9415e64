// The AVX-512 Attention kernel (kernels/cpu/avx512/attention_ops.cc) against the reference
// kernel on the same node: 3-D and 4-D operands, head sizes that are and are not multiples of
// 16 (15, the SVTR recognizer's), key counts around the 16-key vectors, GQA head groups, query
// blocks beyond one task, additive and boolean masks broadcast every way (and shorter than the
// keys), is_causal, fully masked rows, float16 and bfloat16; the forms it leaves to the reference
// (softcap, a KV cache) giving the reference's numbers; registry selection.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/common/cpu_features.h"
#include "gtest/gtest.h"
#include "tests/testing/kernel_test_helpers.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ir::OpType;

#define SKIP_WITHOUT_AVX512_BF16() \
  if (!HasAvx512Bf16()) GTEST_SKIP() << "CPU lacks AVX-512 with AVX512_BF16"

struct Case {
  std::string name;
  bool three_d = false;
  int64_t batch = 1, q_heads = 2, kv_heads = 2, q_len = 5, kv_len = 7, head = 8, v_head = 8;
  std::vector<int64_t> mask_dims;  // empty: no mask
  DataType mask_dtype = DataType::kF32;
  bool causal = false;
  std::vector<std::pair<std::string, ir::Attribute>> extra;
};

Case Shaped(std::string name, bool three_d, int64_t batch, int64_t q_heads, int64_t kv_heads,
            int64_t q_len, int64_t kv_len, int64_t head, int64_t v_head) {
  Case c;
  c.name = std::move(name);
  c.three_d = three_d;
  c.batch = batch;
  c.q_heads = q_heads;
  c.kv_heads = kv_heads;
  c.q_len = q_len;
  c.kv_len = kv_len;
  c.head = head;
  c.v_head = v_head;
  return c;
}

Case Named(std::string name) {
  Case c;
  c.name = std::move(name);
  return c;
}

std::vector<ir::Tensor> Inputs(const Case& c, DataType dt, std::mt19937& rng) {
  auto dims = [&](int64_t heads, int64_t len, int64_t width) {
    return c.three_d ? std::vector<int64_t>{c.batch, len, heads * width}
                     : std::vector<int64_t>{c.batch, heads, len, width};
  };
  std::vector<ir::Tensor> in = {RandomNormal(dims(c.q_heads, c.q_len, c.head), dt, rng),
                                RandomNormal(dims(c.kv_heads, c.kv_len, c.head), dt, rng),
                                RandomNormal(dims(c.kv_heads, c.kv_len, c.v_head), dt, rng)};
  if (!c.mask_dims.empty()) {
    int64_t n = 1;
    for (int64_t d : c.mask_dims) n *= d;
    if (c.mask_dtype == DataType::kBool) {
      // Every third key of every row masked out, plus the whole of row 1 where there is one.
      std::vector<uint8_t> m(n);
      const int64_t keys = c.mask_dims.back();
      const int64_t rows = c.mask_dims.size() >= 2 ? c.mask_dims[c.mask_dims.size() - 2] : 1;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = (i / keys) % rows;
        m[i] = (i % keys) % 3 != 1 && !(rows > 1 && row == 1);
      }
      in.push_back(MakeTensor<uint8_t>(c.mask_dims, m, DataType::kBool));
    } else {
      ir::Tensor m = RandomNormal(c.mask_dims, c.mask_dtype, rng);
      // Some keys masked with -inf as exporters write them (and -1e4 as others do).
      std::vector<float> v = ToFloats(m);
      for (size_t i = 0; i < v.size(); i += 5) v[i] = -std::numeric_limits<float>::infinity();
      for (size_t i = 2; i < v.size(); i += 7) v[i] = -1e4f;
      in.push_back(c.mask_dtype == DataType::kF16    ? MakeHalf(c.mask_dims, v)
                   : c.mask_dtype == DataType::kBF16 ? MakeBf16(c.mask_dims, v)
                                                     : MakeFloat(c.mask_dims, v));
    }
  }
  return in;
}

NodeSpec Spec(const Case& c, std::vector<ir::Tensor> in) {
  NodeSpec s;
  s.op = OpType::kAttention;
  s.attrs = c.extra;
  s.inputs = std::move(in);
  if (c.three_d) {
    s.attrs.emplace_back("q_num_heads", IntAttr(c.q_heads));
    s.attrs.emplace_back("kv_num_heads", IntAttr(c.kv_heads));
  }
  if (c.causal) s.attrs.emplace_back("is_causal", IntAttr(1));
  return s;
}

// Fast against reference. The kernels differ in the order of the fp32 sums (Q.K over the head,
// the softmax denominator, P.V over the keys) and in exp (ExpF32 within 1 ulp of the exact
// value, the reference's std::exp within 1 ulp too): for unit-normal operands and head sizes up
// to 72 that is a few fp32 ulps of the largest term, so fp32 outputs agree within 1e-5 absolute
// (outputs are convex combinations of V rows, |y| < 4) plus 1e-5 relative. An fp16 / bf16 output
// is that fp32 value rounded once: the two may round to neighbouring values, one ulp of the
// type apart (2^-10 and 2^-7 relative), never more.
// Returns whether the two are bit-identical.
bool ExpectMatches(const Case& c, DataType dt) {
  std::mt19937 rng(7);
  std::vector<ir::Tensor> in = Inputs(c, dt, rng);
  NodeSpec fast = Spec(c, in);
  NodeSpec ref = Spec(c, in);
  ref.cpu_features = 0;
  fast.runs = 2;  // per-thread scratch reused
  ir::Tensor got = RunNodeOk0(fast);
  ir::Tensor want = RunNodeOk0(ref);
  EXPECT_TRUE(got.defined() && want.defined());
  EXPECT_EQ(got.dims(), want.dims()) << c.name;
  if (!got.defined() || !want.defined() || got.dims() != want.dims()) return false;
  const std::vector<float> g = ToFloats(got), w = ToFloats(want);
  const double rel = dt == DataType::kF32 ? 1e-5 : dt == DataType::kF16 ? 1.0 / 1024 : 1.0 / 128;
  const double abs = dt == DataType::kF32 ? 1e-5 : 1e-6;
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    const double tol = abs + rel * std::fabs(w[i]);
    if (!(std::fabs(g[i] - w[i]) <= tol)) {
      ++bad;
      ADD_FAILURE() << c.name << " " << DataTypeName(dt) << " element " << i << ": fast " << g[i]
                    << " reference " << w[i];
    }
  }
  return g == w;
}

std::vector<Case> Cases() {
  std::vector<Case> out;
  out.push_back(Named("plain_4d"));
  Case svtr = Shaped("svtr_head15", false, 1, 8, 8, 40, 40, 15, 15);
  out.push_back(svtr);
  Case bert = Shaped("bert_like", false, 1, 4, 4, 33, 33, 64, 64);
  bert.mask_dims = {1, 1, 1, 33};
  out.push_back(bert);
  Case three = Shaped("three_d_gqa", true, 2, 6, 2, 9, 17, 24, 40);
  out.push_back(three);
  Case blocks = Shaped("many_query_blocks", false, 1, 3, 1, 150, 31, 16, 80);
  blocks.mask_dims = {150, 31};
  out.push_back(blocks);
  Case full = Shaped("full_mask_4d", false, 2, 2, 2, 6, 19, 12, 20);
  full.mask_dims = {2, 2, 6, 19};
  full.mask_dtype = DataType::kF16;
  out.push_back(full);
  Case short_mask = Shaped("mask_shorter_than_keys", false, 1, 2, 2, 4, 21, 8, 8);
  short_mask.mask_dims = {1, 2, 1, 17};
  short_mask.mask_dtype = DataType::kBF16;
  out.push_back(short_mask);
  Case boolean = Shaped("bool_mask_row_masked", false, 1, 2, 2, 5, 18, 16, 16);
  boolean.mask_dims = {1, 1, 5, 18};
  boolean.mask_dtype = DataType::kBool;
  out.push_back(boolean);
  Case causal = Shaped("causal", false, 1, 2, 2, 20, 20, 32, 32);
  causal.causal = true;
  out.push_back(causal);
  Case scaled = Shaped("scale_attr", true, 1, 4, 4, 16, 16, 15, 15);
  scaled.extra = {{"scale", FloatAttr(0.125f)}};
  out.push_back(scaled);
  Case no_keys = Shaped("one_key", false, 1, 1, 1, 3, 1, 5, 3);
  out.push_back(no_keys);
  return out;
}

TEST(Avx512Attention, MatchesReferenceFp32) {
  SKIP_WITHOUT_AVX512_BF16();
  int identical = 0;
  for (const Case& c : Cases()) identical += ExpectMatches(c, DataType::kF32);
  // The fast kernel ran (a fallback to the reference would give its bits in every case).
  EXPECT_LT(identical, static_cast<int>(Cases().size()));
}

TEST(Avx512Attention, MatchesReferenceFp16) {
  SKIP_WITHOUT_AVX512_BF16();
  for (const Case& c : Cases()) ExpectMatches(c, DataType::kF16);
}

TEST(Avx512Attention, MatchesReferenceBf16) {
  SKIP_WITHOUT_AVX512_BF16();
  for (const Case& c : Cases()) ExpectMatches(c, DataType::kBF16);
}

TEST(Avx512Attention, LeavesOtherFormsToTheReference) {
  SKIP_WITHOUT_AVX512_BF16();
  // softcap: the reference's numbers exactly (it runs them).
  Case capped = Named("softcap");
  capped.extra = {{"softcap", FloatAttr(2.0f)}};
  std::mt19937 rng(3);
  std::vector<ir::Tensor> in = Inputs(capped, DataType::kF32, rng);
  NodeSpec fast = Spec(capped, in), ref = Spec(capped, in);
  ref.cpu_features = 0;
  EXPECT_EQ(ToFloats(RunNodeOk0(fast)), ToFloats(RunNodeOk0(ref)));
  // A KV cache (past_key / past_value).
  Case cached = Named("past");
  in = Inputs(cached, DataType::kF32, rng);
  in.push_back(ir::Tensor());  // no mask
  in.push_back(RandomNormal({1, 2, 3, 8}, DataType::kF32, rng));
  in.push_back(RandomNormal({1, 2, 3, 8}, DataType::kF32, rng));
  fast = Spec(cached, in);
  ref = Spec(cached, in);
  ref.cpu_features = 0;
  EXPECT_EQ(ToFloats(RunNodeOk0(fast)), ToFloats(RunNodeOk0(ref)));
}

TEST(Avx512Attention, BadShapesGiveTheReferenceError) {
  SKIP_WITHOUT_AVX512_BF16();
  std::mt19937 rng(5);
  // K's head size differs from Q's.
  NodeSpec s;
  s.op = OpType::kAttention;
  s.inputs = {RandomNormal({1, 2, 4, 8}, DataType::kF32, rng),
              RandomNormal({1, 2, 4, 6}, DataType::kF32, rng),
              RandomNormal({1, 2, 4, 8}, DataType::kF32, rng)};
  auto r = RunNode(s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("head sizes differ"), std::string::npos)
      << r.status();
}

TEST(Avx512Attention, RegistryPicksIt) {
  SKIP_WITHOUT_AVX512_BF16();
  for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    auto def = FindKernelFor(OpType::kAttention, dt, Avx512Bf16Features());
    ASSERT_TRUE(def.ok()) << def.status();
    EXPECT_EQ((*def)->isa, kernels::Isa::kAvx512) << DataTypeName(dt);
  }
}

}  // namespace
}  // namespace kiln::testing
