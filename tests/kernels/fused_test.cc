// Tests of the fused reference kernels (FusedMatMul, FusedConv, AddLayerNorm) against the
// unfused chains they replace, run op by op through the same registry.
//
// Why exact equality with the fp32 chain: a fused kernel runs the very code of the unfused ops
// (the shared GEMM and im2col loops in the same order, the same LayerNorm row, the same
// activation functors) in fp32, and the unfused fp32 chain rounds every intermediate to fp32 —
// which is what fp32 arithmetic does anyway. So the only difference the precision contract
// allows, rounding of intermediates to a narrower dtype, cannot occur in fp32 and the results
// agree bit for bit. For fp16/bf16 the fused result must equal the fp32 chain rounded once.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/common/half.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

// NodeSpec literals leave cpu_features to its default.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace kiln::testing {
namespace {

using ir::OpType;
using Attrs = std::vector<std::pair<std::string, ir::Attribute>>;

absl::StatusOr<std::vector<ir::Tensor>> Run(OpType op, std::vector<ir::Tensor> in, Attrs attrs = {},
                                            int num_outputs = 1,
                                            std::vector<DataType> out_dtypes = {}) {
  NodeSpec spec;
  spec.op = op;
  spec.inputs = std::move(in);
  spec.attrs = std::move(attrs);
  spec.num_outputs = num_outputs;
  spec.output_dtypes = std::move(out_dtypes);
  spec.cpu_features = 0;  // reference kernels on both sides
  return RunNode(spec);
}

std::vector<ir::Tensor> RunOk(OpType op, std::vector<ir::Tensor> in, Attrs attrs = {},
                              int num_outputs = 1, std::vector<DataType> out_dtypes = {}) {
  auto r = Run(op, std::move(in), std::move(attrs), num_outputs, std::move(out_dtypes));
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return std::vector<ir::Tensor>(num_outputs);
  return *std::move(r);
}

ir::Tensor Make(DataType dt, std::vector<int64_t> dims, const std::vector<float>& v) {
  switch (dt) {
    case DataType::kF16:
      return MakeHalf(std::move(dims), v);
    case DataType::kBF16:
      return MakeBf16(std::move(dims), v);
    case DataType::kF64:
      return MakeTensor<double>(std::move(dims), std::vector<double>(v.begin(), v.end()), dt);
    default:
      return MakeFloat(std::move(dims), v);
  }
}

ir::Tensor Random(DataType dt, std::vector<int64_t> dims, uint32_t seed, float lo = -2,
                  float hi = 2) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(ir::NumElementsOf(dims));
  for (float& x : v) x = dist(gen);
  return Make(dt, std::move(dims), v);
}

// The same values as fp32 (exact for fp16 / bf16 inputs).
ir::Tensor ToF32(const ir::Tensor& t) { return MakeFloat(t.dims(), ToFloats(t)); }

// Rounds fp32 values once to `dt` and returns them as floats.
std::vector<float> RoundOnce(const std::vector<float>& v, DataType dt) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    r[i] = dt == DataType::kF16 ? HalfBitsToFloat(FloatToHalfBits(v[i]))
                                : BFloat16BitsToFloat(FloatToBFloat16Bits(v[i]));
  }
  return r;
}

// Bitwise comparison of float vectors (NaN never expected here).
void ExpectSame(const std::vector<float>& got, const std::vector<float>& want,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << what << " element " << i;
  }
}

int CountDiffering(const std::vector<float>& a, const std::vector<float>& b) {
  int n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += a[i] != b[i];
  return n;
}

struct Act {
  std::string name;
  float alpha = 0.01f, lo = -INFINITY, hi = INFINITY;
};

Attrs ActAttrs(const Act& a) {
  Attrs at = {{"activation", StringAttr(a.name)}};
  if (a.name == "LeakyRelu") at.push_back({"activation_alpha", FloatAttr(a.alpha)});
  if (a.name == "Clip") {
    at.push_back({"activation_min", FloatAttr(a.lo)});
    at.push_back({"activation_max", FloatAttr(a.hi)});
  }
  return at;
}

// The unfused activation op on `x`, in x's dtype.
ir::Tensor ApplyAct(const Act& a, const ir::Tensor& x) {
  const DataType dt = x.dtype();
  if (a.name.empty()) return x;
  if (a.name == "Relu") return RunOk(OpType::kRelu, {x})[0];
  if (a.name == "Sigmoid") return RunOk(OpType::kSigmoid, {x})[0];
  if (a.name == "Tanh") return RunOk(OpType::kTanh, {x})[0];
  if (a.name == "HardSwish") return RunOk(OpType::kHardSwish, {x})[0];
  if (a.name == "Swish") return RunOk(OpType::kMul, {x, RunOk(OpType::kSigmoid, {x})[0]})[0];
  if (a.name == "Gelu") return RunOk(OpType::kGelu, {x})[0];
  if (a.name == "GeluTanh")
    return RunOk(OpType::kGelu, {x}, {{"approximate", StringAttr("tanh")}})[0];
  if (a.name == "LeakyRelu") {
    return RunOk(OpType::kLeakyRelu, {x}, {{"alpha", FloatAttr(a.alpha)}})[0];
  }
  if (a.name == "Clip") {
    return RunOk(OpType::kClip, {x, Make(dt, {}, {a.lo}), Make(dt, {}, {a.hi})})[0];
  }
  ADD_FAILURE() << "no unfused activation " << a.name;
  return x;
}

// MatMul -> Add(bias) -> activation, op by op, in the inputs' dtype.
ir::Tensor UnfusedMatMul(const ir::Tensor& a, const ir::Tensor& b, const ir::Tensor* bias,
                         const Act& act) {
  ir::Tensor y = RunOk(OpType::kMatMul, {a, b})[0];
  if (bias) y = RunOk(OpType::kAdd, {y, *bias})[0];
  return ApplyAct(act, y);
}

const std::vector<Act> kMatMulActs = {{""},         {"Relu"},    {"Gelu"},
                                      {"GeluTanh"}, {"Sigmoid"}, {"Tanh"}};

// ---- FusedMatMul ---------------------------------------------------------------------------

TEST(FusedMatMulTest, HandComputed) {
  // [1 2; 3 4] x [1; -1] = [-1; -1], + bias [3] -> [2; 2]... bias broadcast over [2, 1].
  auto out =
      RunOk(OpType::kFusedMatMul,
            {MakeFloat({2, 2}, {1, 2, 3, 4}), MakeFloat({2, 1}, {1, -1}), MakeFloat({1}, {0.5f})},
            {{"activation", StringAttr("Relu")}});
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2, 1}));
  EXPECT_THAT(ToFloats(out[0]), ::testing::ElementsAre(0.0f, 0.0f));
  out = RunOk(OpType::kFusedMatMul, {MakeFloat({2, 2}, {1, 2, 3, 4}), MakeFloat({2, 1}, {1, -1}),
                                     MakeFloat({1}, {1.5f})});
  EXPECT_THAT(ToFloats(out[0]), ::testing::ElementsAre(0.5f, 0.5f));
}

struct MatMulCase {
  std::vector<int64_t> a, b, bias;  // empty bias: none
};

const std::vector<MatMulCase> kMatMulCases = {
    {{3, 5}, {5, 4}, {4}},              // the usual Linear layer
    {{2, 3, 5}, {5, 4}, {4}},           // batched A
    {{2, 1, 3, 5}, {3, 5, 2}, {3, 1}},  // batch broadcast, bias over rows
    {{5}, {2, 5, 3}, {3}},              // 1-D A
    {{2, 3, 5}, {5}, {}},               // 1-D B, no bias
    {{3, 4}, {4, 6}, {2, 1, 6}},        // bias widens the result to [2, 3, 6]
};

TEST(FusedMatMulTest, Fp32EqualsUnfusedChain) {
  uint32_t seed = 1;
  for (const MatMulCase& c : kMatMulCases) {
    const ir::Tensor a = Random(DataType::kF32, c.a, seed++);
    const ir::Tensor b = Random(DataType::kF32, c.b, seed++);
    const ir::Tensor bias = c.bias.empty() ? ir::Tensor() : Random(DataType::kF32, c.bias, seed++);
    const ir::Tensor* bp = c.bias.empty() ? nullptr : &bias;
    for (const Act& act : kMatMulActs) {
      const ir::Tensor want = UnfusedMatMul(a, b, bp, act);
      std::vector<ir::Tensor> in = {a, b};
      if (bp) in.push_back(bias);
      const ir::Tensor got = RunOk(OpType::kFusedMatMul, in, ActAttrs(act))[0];
      const std::string what =
          ir::DimsToString(c.a) + " x " + ir::DimsToString(c.b) + " " + act.name;
      EXPECT_EQ(got.dims(), want.dims()) << what;
      EXPECT_EQ(got.dtype(), DataType::kF32) << what;
      ExpectSame(ToFloats(got), ToFloats(want), what);
    }
  }
}

TEST(FusedMatMulTest, DoubleEqualsUnfusedChain) {
  const ir::Tensor a = Random(DataType::kF64, {2, 3, 7}, 11);
  const ir::Tensor b = Random(DataType::kF64, {7, 4}, 12);
  const ir::Tensor bias = Random(DataType::kF64, {4}, 13);
  for (const Act& act : kMatMulActs) {
    const ir::Tensor want = UnfusedMatMul(a, b, &bias, act);
    const ir::Tensor got = RunOk(OpType::kFusedMatMul, {a, b, bias}, ActAttrs(act))[0];
    ASSERT_EQ(got.dtype(), DataType::kF64);
    EXPECT_EQ(Values<double>(got), Values<double>(want)) << act.name;
  }
}

// fp16 / bf16: the fp32 chain rounded once, never the op-by-op rounding.
TEST(FusedMatMulTest, HalfTypesRoundOnce) {
  for (DataType dt : {DataType::kF16, DataType::kBF16}) {
    const ir::Tensor a = Random(dt, {4, 3, 16}, 21);
    const ir::Tensor b = Random(dt, {16, 8}, 22);
    const ir::Tensor bias = Random(dt, {8}, 23);
    const ir::Tensor a32 = ToF32(a), b32 = ToF32(b), bias32 = ToF32(bias);
    for (const Act& act : kMatMulActs) {
      const std::string what = std::string(DataTypeOnnxName(dt)) + " " + act.name;
      const ir::Tensor got = RunOk(OpType::kFusedMatMul, {a, b, bias}, ActAttrs(act))[0];
      ASSERT_EQ(got.dtype(), dt) << what;
      const std::vector<float> once =
          RoundOnce(ToFloats(UnfusedMatMul(a32, b32, &bias32, act)), dt);
      ExpectSame(ToFloats(got), once, what);
      // Op-by-op rounding differs somewhere on these 384 values (MatMul and Add outputs are
      // rounded to the half type before the next op); if it did not, this test could not tell
      // the two apart.
      if (act.name != "Relu" && act.name != "") {
        EXPECT_GT(CountDiffering(ToFloats(got), ToFloats(UnfusedMatMul(a, b, &bias, act))), 0)
            << what;
      }
    }
  }
}

// Crafted: MatMul = 1 + 2^-11 is a tie in fp16 and rounds to 1 op by op; adding the bias 2^-11
// then ties again to 1. Fused, the sum 1 + 2^-10 is exact and representable.
TEST(FusedMatMulTest, Fp16CraftedDoubleRounding) {
  const float e = std::ldexp(1.0f, -11);
  const ir::Tensor a = MakeHalf({1, 2}, {1, e});
  const ir::Tensor b = MakeHalf({2, 1}, {1, 1});
  const ir::Tensor bias = MakeHalf({1}, {e});
  const ir::Tensor fused = RunOk(OpType::kFusedMatMul, {a, b, bias})[0];
  EXPECT_THAT(ToFloats(fused), ::testing::ElementsAre(1 + 2 * e));
  EXPECT_THAT(ToFloats(UnfusedMatMul(a, b, &bias, {""})), ::testing::ElementsAre(1.0f));
}

// A fp16 with an fp32 bias: the bias is read as fp32 (not rounded to fp16), and the output
// takes the graph's dtype.
TEST(FusedMatMulTest, MixedInputDtypes) {
  const ir::Tensor a = Random(DataType::kF16, {3, 8}, 31);
  const ir::Tensor b = Random(DataType::kF16, {8, 5}, 32);
  const ir::Tensor bias = Random(DataType::kF32, {5}, 33, -0.01f, 0.01f);
  const std::vector<float> chain = ToFloats(UnfusedMatMul(ToF32(a), ToF32(b), &bias, {"Sigmoid"}));
  // Output fp32 (as the graph says): the fp32 chain exactly.
  const ir::Tensor got32 =
      RunOk(OpType::kFusedMatMul, {a, b, bias}, ActAttrs({"Sigmoid"}), 1, {DataType::kF32})[0];
  ASSERT_EQ(got32.dtype(), DataType::kF32);
  ExpectSame(ToFloats(got32), chain, "fp32 output");
  // Output fp16: rounded once.
  const ir::Tensor got16 =
      RunOk(OpType::kFusedMatMul, {a, b, bias}, ActAttrs({"Sigmoid"}), 1, {DataType::kF16})[0];
  ASSERT_EQ(got16.dtype(), DataType::kF16);
  ExpectSame(ToFloats(got16), RoundOnce(chain, DataType::kF16), "fp16 output");
  // Had the bias been rounded to fp16 first, the fp32 output would differ.
  const ir::Tensor bias16 = ToF32(Make(DataType::kF16, {5}, ToFloats(bias)));
  EXPECT_GT(
      CountDiffering(chain, ToFloats(UnfusedMatMul(ToF32(a), ToF32(b), &bias16, {"Sigmoid"}))), 0);
}

TEST(FusedMatMulTest, Errors) {
  const ir::Tensor a = MakeFloat({2, 3}, Iota(6, 0)), b = MakeFloat({3, 2}, Iota(6, 0));
  ExpectNodeError({OpType::kFusedMatMul, {{"activation", StringAttr("Swish")}}, {a, b}},
                  absl::StatusCode::kInvalidArgument, "activation");
  // LeakyRelu is a FusedConv activation, not a FusedMatMul one.
  ExpectNodeError({OpType::kFusedMatMul, {{"activation", StringAttr("LeakyRelu")}}, {a, b}},
                  absl::StatusCode::kInvalidArgument, "activation");
  ExpectNodeError({OpType::kFusedMatMul, {}, {a, a}}, absl::StatusCode::kInvalidArgument,
                  "inner dimensions");
  ExpectNodeError({OpType::kFusedMatMul, {}, {a, b, MakeFloat({3}, {1, 2, 3})}},
                  absl::StatusCode::kInvalidArgument, "broadcast");
  ExpectNodeError({OpType::kFusedMatMul, {}, {a, b, MakeInt64({2}, {1, 2})}},
                  absl::StatusCode::kInvalidArgument, "bias");
  ExpectNodeError({OpType::kFusedMatMul, {}, {a, b}, 1, 23, {DataType::kI32}},
                  absl::StatusCode::kInvalidArgument, "output 0");
}

// ---- FusedConv -----------------------------------------------------------------------------

const std::vector<Act> kConvActs = {
    {""},        {"Relu"}, {"LeakyRelu", 0.2f}, {"Clip", 0.01f, -0.5f, 1.5f}, {"HardSwish"},
    {"Sigmoid"}, {"Swish"}};

Attrs ConvAttrs() {
  return {{"pads", IntsAttr({1, 0, 2, 1})},
          {"strides", IntsAttr({2, 1})},
          {"dilations", IntsAttr({1, 2})},
          {"group", IntAttr(2)}};
}

Attrs Join(Attrs a, const Attrs& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(FusedConvTest, HandComputed) {
  // 1x1 conv of [1, -2] with weight 3 and bias 1: [4, -5] -> Relu [4, 0].
  auto out =
      RunOk(OpType::kFusedConv,
            {MakeFloat({1, 1, 1, 2}, {1, -2}), MakeFloat({1, 1, 1, 1}, {3}), MakeFloat({1}, {1})},
            {{"activation", StringAttr("Relu")}});
  EXPECT_THAT(ToFloats(out[0]), ::testing::ElementsAre(4.0f, 0.0f));
}

TEST(FusedConvTest, Fp32EqualsUnfusedChain) {
  const ir::Tensor x = Random(DataType::kF32, {2, 4, 7, 9}, 41);
  const ir::Tensor w = Random(DataType::kF32, {6, 2, 3, 2}, 42, -0.5f, 0.5f);
  const ir::Tensor b = Random(DataType::kF32, {6}, 43);
  for (bool with_bias : {true, false}) {
    std::vector<ir::Tensor> in = {x, w};
    if (with_bias) in.push_back(b);
    const ir::Tensor conv = RunOk(OpType::kConv, in, ConvAttrs())[0];
    for (const Act& act : kConvActs) {
      const ir::Tensor got = RunOk(OpType::kFusedConv, in, Join(ConvAttrs(), ActAttrs(act)))[0];
      EXPECT_EQ(got.dims(), conv.dims());
      ExpectSame(ToFloats(got), ToFloats(ApplyAct(act, conv)), act.name);
    }
  }
  // auto_pad and a 1-D, pointwise case go through the same shared geometry.
  const ir::Tensor x1 = Random(DataType::kF32, {1, 3, 10}, 44);
  for (Attrs attrs : {Attrs{{"auto_pad", StringAttr("SAME_UPPER")}, {"strides", IntsAttr({3})}},
                      Attrs{{"kernel_shape", IntsAttr({1})}}}) {
    const std::vector<int64_t> k =
        attrs.size() == 1 ? std::vector<int64_t>{4, 3, 1} : std::vector<int64_t>{4, 3, 2};
    const ir::Tensor w1 = Random(DataType::kF32, k, 45);
    const ir::Tensor conv = RunOk(OpType::kConv, {x1, w1}, attrs)[0];
    const ir::Tensor got =
        RunOk(OpType::kFusedConv, {x1, w1}, Join(attrs, ActAttrs({"Sigmoid"})))[0];
    ExpectSame(ToFloats(got), ToFloats(ApplyAct({"Sigmoid"}, conv)), "1-D");
  }
}

TEST(FusedConvTest, DoubleEqualsUnfusedChain) {
  const ir::Tensor x = Random(DataType::kF64, {1, 4, 6, 5}, 51);
  const ir::Tensor w = Random(DataType::kF64, {6, 2, 3, 2}, 52);
  const ir::Tensor b = Random(DataType::kF64, {6}, 53);
  const ir::Tensor conv = RunOk(OpType::kConv, {x, w, b}, ConvAttrs())[0];
  for (const Act& act : kConvActs) {
    const ir::Tensor got =
        RunOk(OpType::kFusedConv, {x, w, b}, Join(ConvAttrs(), ActAttrs(act)))[0];
    EXPECT_EQ(Values<double>(got), Values<double>(ApplyAct(act, conv))) << act.name;
  }
}

TEST(FusedConvTest, HalfTypesRoundOnce) {
  for (DataType dt : {DataType::kF16, DataType::kBF16}) {
    const ir::Tensor x = Random(dt, {2, 4, 7, 9}, 61);
    const ir::Tensor w = Random(dt, {6, 2, 3, 2}, 62, -0.5f, 0.5f);
    const ir::Tensor b = Random(dt, {6}, 63);
    const ir::Tensor conv32 = RunOk(OpType::kConv, {ToF32(x), ToF32(w), ToF32(b)}, ConvAttrs())[0];
    const ir::Tensor conv = RunOk(OpType::kConv, {x, w, b}, ConvAttrs())[0];
    for (const Act& act : kConvActs) {
      const std::string what = std::string(DataTypeOnnxName(dt)) + " " + act.name;
      const ir::Tensor got =
          RunOk(OpType::kFusedConv, {x, w, b}, Join(ConvAttrs(), ActAttrs(act)))[0];
      ASSERT_EQ(got.dtype(), dt);
      ExpectSame(ToFloats(got), RoundOnce(ToFloats(ApplyAct(act, conv32)), dt), what);
      // Sigmoid and HardSwish of the already-rounded conv output round twice; on these 540
      // values that differs somewhere.
      if (act.name == "Sigmoid" || act.name == "HardSwish") {
        EXPECT_GT(CountDiffering(ToFloats(got), ToFloats(ApplyAct(act, conv))), 0) << what;
      }
    }
  }
}

// X and W fp16, B fp32 with values fp16 cannot hold, output fp32 from the graph.
TEST(FusedConvTest, MixedInputDtypes) {
  const ir::Tensor x = Random(DataType::kF16, {1, 4, 5, 5}, 71);
  const ir::Tensor w = Random(DataType::kF16, {6, 2, 3, 2}, 72);
  const ir::Tensor b = Random(DataType::kF32, {6}, 73, -1e-3f, 1e-3f);
  const ir::Tensor conv = RunOk(OpType::kConv, {ToF32(x), ToF32(w), b}, ConvAttrs())[0];
  const ir::Tensor got = RunOk(OpType::kFusedConv, {x, w, b}, Join(ConvAttrs(), ActAttrs({"Relu"})),
                               1, {DataType::kF32})[0];
  ASSERT_EQ(got.dtype(), DataType::kF32);
  ExpectSame(ToFloats(got), ToFloats(ApplyAct({"Relu"}, conv)), "mixed");
}

TEST(FusedConvTest, Errors) {
  const ir::Tensor x = MakeFloat({1, 2, 3, 3}, Iota(18, 0));
  const ir::Tensor w = MakeFloat({1, 2, 2, 2}, Iota(8, 0));
  ExpectNodeError({OpType::kFusedConv, {{"activation", StringAttr("Gelu")}}, {x, w}},
                  absl::StatusCode::kInvalidArgument, "activation");
  ExpectNodeError({OpType::kFusedConv, {{"group", IntAttr(0)}}, {x, w}},
                  absl::StatusCode::kInvalidArgument, "group");
  ExpectNodeError({OpType::kFusedConv, {}, {x, MakeFloat({1, 3, 2, 2}, Iota(12, 0))}},
                  absl::StatusCode::kInvalidArgument, "channels");
  ExpectNodeError({OpType::kFusedConv, {}, {x, w, MakeFloat({2}, {1, 2})}},
                  absl::StatusCode::kInvalidArgument, "B must have shape");
  ExpectNodeError({OpType::kFusedConv, {}, {MakeFloat({1, 2, 3}, Iota(6, 0)), w}},
                  absl::StatusCode::kInvalidArgument, "rank");
}

// ---- AddLayerNorm --------------------------------------------------------------------------

struct LnCase {
  std::vector<int64_t> a, b, scale;
  int64_t axis;
};

const std::vector<LnCase> kLnCases = {
    {{2, 3, 16}, {2, 3, 16}, {16}, -1},  // residual add
    {{2, 3, 16}, {16}, {16}, -1},        // broadcast B
    {{2, 3, 8}, {2, 3, 8}, {3, 8}, 1},   // two normalized axes
    {{3, 1, 8}, {1, 4, 8}, {8}, 2},      // both operands broadcast
};

// Add -> LayerNormalization, op by op, in the inputs' dtype (stash fp32 by default).
std::vector<ir::Tensor> UnfusedAddLn(const ir::Tensor& a, const ir::Tensor& b,
                                     const ir::Tensor& scale, const ir::Tensor& bias,
                                     int64_t axis) {
  ir::Tensor s = RunOk(OpType::kAdd, {a, b})[0];
  ir::Tensor y = RunOk(OpType::kLayerNormalization, {s, scale, bias}, {{"axis", IntAttr(axis)}})[0];
  return {y, s};
}

TEST(AddLayerNormTest, HandComputed) {
  // A + B = [1, 3] (mean 2, variance 1); epsilon 0: normalized [-1, 1], * 2 + 0.5.
  auto out = RunOk(OpType::kAddLayerNorm,
                   {MakeFloat({1, 2}, {0, 1}), MakeFloat({1, 2}, {1, 2}), MakeFloat({2}, {2, 2}),
                    MakeFloat({2}, {0.5f, 0.5f})},
                   {{"epsilon", FloatAttr(0)}}, 2);
  EXPECT_THAT(ToFloats(out[0]), ::testing::ElementsAre(-1.5f, 2.5f));
  EXPECT_THAT(ToFloats(out[1]), ::testing::ElementsAre(1.0f, 3.0f));
}

TEST(AddLayerNormTest, Fp32EqualsUnfusedChain) {
  uint32_t seed = 80;
  for (const LnCase& c : kLnCases) {
    const ir::Tensor a = Random(DataType::kF32, c.a, seed++);
    const ir::Tensor b = Random(DataType::kF32, c.b, seed++);
    const ir::Tensor scale = Random(DataType::kF32, c.scale, seed++);
    const ir::Tensor bias = Random(DataType::kF32, c.scale, seed++);
    const std::vector<ir::Tensor> want = UnfusedAddLn(a, b, scale, bias, c.axis);
    const std::vector<ir::Tensor> got =
        RunOk(OpType::kAddLayerNorm, {a, b, scale, bias}, {{"axis", IntAttr(c.axis)}}, 2);
    const std::string what = ir::DimsToString(c.a) + " + " + ir::DimsToString(c.b);
    EXPECT_EQ(got[0].dims(), want[0].dims()) << what;
    ExpectSame(ToFloats(got[0]), ToFloats(want[0]), what + " output 0");
    ExpectSame(ToFloats(got[1]), ToFloats(want[1]), what + " output 1");
    // Without bias and without output 1.
    const ir::Tensor y =
        RunOk(OpType::kAddLayerNorm, {a, b, scale}, {{"axis", IntAttr(c.axis)}})[0];
    const ir::Tensor s = RunOk(OpType::kAdd, {a, b})[0];
    const ir::Tensor y_want =
        RunOk(OpType::kLayerNormalization, {s, scale}, {{"axis", IntAttr(c.axis)}})[0];
    ExpectSame(ToFloats(y), ToFloats(y_want), what + " no bias");
  }
}

TEST(AddLayerNormTest, DoubleEqualsUnfusedChain) {
  const ir::Tensor a = Random(DataType::kF64, {2, 3, 16}, 91);
  const ir::Tensor b = Random(DataType::kF64, {2, 3, 16}, 92);
  const ir::Tensor scale = Random(DataType::kF64, {16}, 93);
  const ir::Tensor bias = Random(DataType::kF64, {16}, 94);
  // stash_type = double so that the unfused LayerNormalization also keeps its statistics in
  // double, as the fused kernel does for double data.
  ir::Tensor s = RunOk(OpType::kAdd, {a, b})[0];
  ir::Tensor y_want =
      RunOk(OpType::kLayerNormalization, {s, scale, bias}, {{"stash_type", IntAttr(11)}})[0];
  auto got = RunOk(OpType::kAddLayerNorm, {a, b, scale, bias}, {}, 2);
  EXPECT_EQ(Values<double>(got[0]), Values<double>(y_want));
  EXPECT_EQ(Values<double>(got[1]), Values<double>(s));
}

TEST(AddLayerNormTest, HalfTypesRoundOnce) {
  for (DataType dt : {DataType::kF16, DataType::kBF16}) {
    const ir::Tensor a = Random(dt, {4, 3, 32}, 101);
    const ir::Tensor b = Random(dt, {4, 3, 32}, 102);
    const ir::Tensor scale = Random(dt, {32}, 103);
    const ir::Tensor bias = Random(dt, {32}, 104);
    const std::vector<ir::Tensor> chain32 =
        UnfusedAddLn(ToF32(a), ToF32(b), ToF32(scale), ToF32(bias), -1);
    const std::vector<ir::Tensor> got = RunOk(OpType::kAddLayerNorm, {a, b, scale, bias}, {}, 2);
    const std::string what = DataTypeOnnxName(dt);
    ASSERT_EQ(got[0].dtype(), dt);
    ASSERT_EQ(got[1].dtype(), dt);
    ExpectSame(ToFloats(got[0]), RoundOnce(ToFloats(chain32[0]), dt), what + " output 0");
    ExpectSame(ToFloats(got[1]), RoundOnce(ToFloats(chain32[1]), dt), what + " output 1");
    // Op by op, the sum is rounded to the half type before it is normalized.
    const std::vector<ir::Tensor> per_op = UnfusedAddLn(a, b, scale, bias, -1);
    EXPECT_GT(CountDiffering(ToFloats(got[0]), ToFloats(per_op[0])), 0) << what;
  }
}

// Output 0 fp32 and output 1 fp16 (as a graph typing the two differently asks), from fp32
// inputs, and from mixed fp16 / fp32 inputs.
TEST(AddLayerNormTest, OutputDtypesFromGraph) {
  const ir::Tensor b = Random(DataType::kF32, {2, 24}, 112);
  const ir::Tensor scale = Random(DataType::kF32, {24}, 113);
  const ir::Tensor bias = Random(DataType::kF16, {24}, 114);
  for (DataType a_dt : {DataType::kF32, DataType::kF16}) {
    const ir::Tensor a = Random(a_dt, {2, 24}, 111);
    const std::vector<ir::Tensor> want = UnfusedAddLn(ToF32(a), b, scale, ToF32(bias), -1);
    const std::vector<ir::Tensor> got =
        RunOk(OpType::kAddLayerNorm, {a, b, scale, bias}, {}, 2, {DataType::kF32, DataType::kF16});
    const std::string what = DataTypeOnnxName(a_dt);
    ASSERT_EQ(got[0].dtype(), DataType::kF32) << what;
    ASSERT_EQ(got[1].dtype(), DataType::kF16) << what;
    ExpectSame(ToFloats(got[0]), ToFloats(want[0]), what + " output 0");
    ExpectSame(ToFloats(got[1]), RoundOnce(ToFloats(want[1]), DataType::kF16), what + " output 1");
  }
}

TEST(AddLayerNormTest, Errors) {
  const ir::Tensor a = MakeFloat({2, 3}, Iota(6, 0));
  const ir::Tensor scale = MakeFloat({3}, {1, 1, 1});
  // Bad axis: found by the factory from the static ranks.
  ExpectNodeError({OpType::kAddLayerNorm, {{"axis", IntAttr(2)}}, {a, a, scale}},
                  absl::StatusCode::kInvalidArgument, "axis");
  ExpectNodeError({OpType::kAddLayerNorm, {{"axis", IntAttr(-3)}}, {a, a, scale}},
                  absl::StatusCode::kInvalidArgument, "axis");
  ExpectNodeError({OpType::kAddLayerNorm, {}, {a, MakeFloat({2}, {1, 2}), scale}},
                  absl::StatusCode::kInvalidArgument, "broadcast");
  ExpectNodeError({OpType::kAddLayerNorm, {}, {a, a, MakeFloat({2}, {1, 1})}},
                  absl::StatusCode::kInvalidArgument, "scale");
  ExpectNodeError({OpType::kAddLayerNorm, {}, {a, a, scale, MakeFloat({4}, {1, 1, 1, 1})}},
                  absl::StatusCode::kInvalidArgument, "bias");
  ExpectNodeError({OpType::kAddLayerNorm, {}, {a, a}}, absl::StatusCode::kInvalidArgument,
                  "input 2");
  ExpectNodeError(
      {OpType::kAddLayerNorm, {}, {a, a, scale}, 2, 23, {DataType::kF32, DataType::kI64}},
      absl::StatusCode::kInvalidArgument, "output 1");
}

}  // namespace
}  // namespace kiln::testing
