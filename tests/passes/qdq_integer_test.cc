// QdqToInteger (passes/qdq_integer.h): a QDQ MatMul (activation quantized to uint8 per tensor,
// int8 weight per column) and a QDQ 1-D Conv with a bias become MatMulInteger / ConvInteger +
// Cast + Mul [+ Add] computing the exact integer sum scaled once, under fp32 and fp16 policies;
// the rewrite is refused for a run-time scale, a weight quantized per row of B (per K), `--fusion
// off` and `--no-fuse pattern:qdq-matmul`; a dequantizer with another reader stays. An authored
// ConvInteger + Add(int32 B) + Cast + Mul chain (ONNX Runtime's quantize_dynamic) becomes one
// ConvIntegerToFloat with the separate nodes' bits, unless fusion is off, `--no-fuse
// pattern:conv-integer-to-float`, an intermediate is read elsewhere or B is not per channel.
// (MatMulIntegerToFloat: tests/passes/matmul_integer_to_float_test.cc.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/builder/builder.h"
#include "engine/common/cpu_features.h"
#include "engine/kernels/registry.h"
#include "engine/plan/engine_blob.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"
#include "tests/passes/qdq_test_data.h"
#include "tests/testing/onnx_models.h"
#include "tests/testing/run_model.h"

namespace kiln::testing {
namespace {

// x [3, 5, K] -> QuantizeLinear(1/16, 121: uint8) -> DequantizeLinear -> MatMul(., W [K, N]).
constexpr int64_t kK = 40, kN = 37, kRows = 15;
constexpr float kSx = 0.0625f;
constexpr int kZx = 121;

// The weight (qdq_test_data.h) is quantized per column of B unless `per_row`.
struct Variant {
  bool runtime_scale = false;   // sa a graph input: not a constant
  bool per_row = false;         // W quantized per row of B (axis 0, [K])
  bool dq_also_output = false;  // the activation's DequantizeLinear output is a graph output too
};

onnx::ModelProto MatMulModel(const Variant& v = {}) {
  onnx::ModelProto m;
  m.set_ir_version(10);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(21);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("qdq_matmul");
  AddTensorValueInfo(g->mutable_input(), "x", {3, 5, kK});
  if (v.runtime_scale) {
    AddTensorValueInfo(g->mutable_input(), "sa", {});
  } else {
    AddFloatInitializer(g, "sa", {}, {kSx});
  }
  AddFloatInitializer(g, "sx", {}, {kSx});
  AddInt8Initializer(g, "zx", {}, {kZx}, true);
  AddInt8Initializer(g, "wq", {kK, kN}, WeightQ(kK * kN), false);
  const int64_t per = v.per_row ? kK : kN;
  AddFloatInitializer(g, "sw", {per}, WeightScales(per));
  AddInt8Initializer(g, "zw", {per}, WeightZeros(per), false);
  AddOnnxNode(g, "QuantizeLinear", {"x", "sx", "zx"}, {"xq"}, "/q");
  AddOnnxNode(g, "DequantizeLinear", {"xq", "sa", "zx"}, {"xd"}, "/dq_x");
  auto* dw = AddOnnxNode(g, "DequantizeLinear", {"wq", "sw", "zw"}, {"wd"}, "/dq_w");
  AddIntAttribute(dw, "axis", v.per_row ? 0 : 1);
  AddOnnxNode(g, "MatMul", {"xd", "wd"}, {"y"}, "/linear/MatMul");
  AddTensorValueInfo(g->mutable_output(), "y", {3, 5, kN});
  if (v.dq_also_output) AddTensorValueInfo(g->mutable_output(), "xd", {3, 5, kK});
  return m;
}

// DequantizeLinear nodes reading int8 / uint8 (the authored ones), or the int32 sums.
int CountDequantizers(const plan::Engine& e, bool of_sums) {
  int n = 0;
  for (const ir::Node* node : e.order) {
    if (node->op != ir::OpType::kDequantizeLinear) continue;
    n += (node->inputs[0]->dtype == DataType::kI32) == of_sums;
  }
  return n;
}

// The quantization grid's integers of x (so QuantizeLinear is exact: x = (q - 121) / 16).
std::vector<int> InputQ(int64_t n) {
  std::vector<int> q(n);
  for (int64_t i = 0; i < n; ++i) q[i] = static_cast<int>((i * 53 + 7) % 256);
  return q;
}

std::vector<ir::Tensor> MatMulInputs(bool runtime_scale) {
  std::vector<float> x;
  for (int q : InputQ(kRows * kK)) x.push_back(static_cast<float>(q - kZx) * kSx);
  std::vector<ir::Tensor> in = {Tensor({3, 5, kK}, x)};
  if (runtime_scale) in.push_back(Tensor({}, {kSx}));
  return in;
}

// The exact result y[r][j] = sum_k (qa - za) sa * (qb - zb) sb[j] in double, and the sum of the
// magnitudes of its terms (what an fp32 sum's rounding error scales with).
void ExactMatMul(std::vector<double>& y, std::vector<double>& magnitude) {
  const std::vector<int> qa = InputQ(kRows * kK), qb = WeightQ(kK * kN), zb = WeightZeros(kN);
  const std::vector<float> sb = WeightScales(kN);
  y.assign(kRows * kN, 0);
  magnitude.assign(kRows * kN, 0);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t j = 0; j < kN; ++j) {
      for (int64_t k = 0; k < kK; ++k) {
        const double t =
            double(qa[r * kK + k] - kZx) * kSx * double(qb[k * kN + j] - zb[j]) * sb[j];
        y[r * kN + j] += t;
        magnitude[r * kN + j] += std::fabs(t);
      }
    }
  }
}

constexpr double kU = 1.0 / (1 << 24);  // fp32's unit roundoff

TEST(QdqIntegerPassTest, MatMulRunsOnTheIntegerGemmWithinTheFp32Rounding) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  auto rewritten = Build(MatMulModel());
  auto plain = Build(MatMulModel(), "fp32", true, {"pattern:qdq-matmul"});
  ASSERT_NE(rewritten, nullptr);
  ASSERT_NE(plain, nullptr);
  // At fp32 the sums are scaled by the rewrite's Cast + Mul in the integer GEMM's output stage
  // (MatMulIntegerToFloat; lowering makes them one DequantizeLinear for a reduced-precision
  // reader: tests/passes/quant_lowering_test.cc).
  ASSERT_EQ(CountKernels(*rewritten, ir::OpType::kMatMulIntegerToFloat), 1);
  EXPECT_EQ(CountKernels(*rewritten, ir::OpType::kMatMulInteger), 0);
  EXPECT_EQ(CountKernels(*rewritten, ir::OpType::kMatMul), 0);
  EXPECT_EQ(CountDequantizers(*rewritten, false), 0);  // both absorbed
  EXPECT_EQ(CountDequantizers(*rewritten, true), 0);
  EXPECT_EQ(CountKernels(*rewritten, ir::OpType::kCast), 0);
  EXPECT_EQ(CountKernels(*rewritten, ir::OpType::kMul), 0);
  EXPECT_EQ(CountKernels(*plain, ir::OpType::kMatMulIntegerToFloat), 0);
  EXPECT_EQ(CountKernels(*plain, ir::OpType::kMatMul), 1);
  // Provenance: the integer node implements the MatMul and both dequantizers, at fp32.
  for (size_t k = 0; k < rewritten->order.size(); ++k) {
    if (rewritten->order[k]->op != ir::OpType::kMatMulIntegerToFloat) continue;
    const v1::Kernel& kd = rewritten->metadata.kernels(static_cast<int>(k));
    EXPECT_EQ(kd.isa(), "avx512");
    std::vector<std::string> names;
    for (const auto& p : kd.nodes()) {
      names.push_back(p.node_name());
      EXPECT_EQ(p.fusion(), "qdq-matmul");
      EXPECT_EQ(p.effective_precision(), "fp32");
    }
    EXPECT_EQ(names, (std::vector<std::string>{"/linear/MatMul", "/dq_x", "/dq_w"}));
  }
  std::vector<double> exact, magnitude;
  ExactMatMul(exact, magnitude);
  const std::vector<ir::Tensor> a = RunEngineOk(rewritten, MatMulInputs(false));
  const std::vector<ir::Tensor> b = RunEngineOk(plain, MatMulInputs(false));
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  ASSERT_EQ(a[0].num_elements(), kRows * kN);
  double range = 0;
  for (int64_t i = 0; i < kRows * kN; ++i) {
    range = std::max(range, std::fabs(exact[i]));
    // The integer sum is exact (|sum| < 2^24: the int32 -> fp32 conversion too); then sa * sb
    // and the final product round once each: 2 units of |y| (3 for slack on the scale's own
    // rounding against the double product).
    EXPECT_LE(std::fabs(a[0].data<float>()[i] - exact[i]), 3 * kU * std::fabs(exact[i]) + 1e-30)
        << i;
    // The float MatMul rounds each dequantized operand and product (2 units of each term) and
    // its K-term fp32 sum ((K - 1) units of the terms' magnitude): (K + 2) units of the
    // magnitude bound it; the rewritten result is within 3 units of |y| of the exact one.
    EXPECT_LE(std::fabs(a[0].data<float>()[i] - b[0].data<float>()[i]),
              (kK + 2) * kU * magnitude[i] + 3 * kU * std::fabs(exact[i]))
        << i;
  }
  EXPECT_GT(range, 1.0);  // not a degenerate output
}

// Under fp16 the rewritten MatMul still computes in fp32 (effective fp32 >= assigned fp16): its
// fp32 graph output is the exact result within fp32 rounding, where the float MatMul's is not.
TEST(QdqIntegerPassTest, Fp16PolicyComputesTheIntegerSumInFp32) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  auto rewritten = Build(MatMulModel(), "fp16");
  ASSERT_NE(rewritten, nullptr);
  ASSERT_EQ(CountKernels(*rewritten, ir::OpType::kMatMulInteger), 1);
  for (size_t k = 0; k < rewritten->order.size(); ++k) {
    const v1::Kernel& kd = rewritten->metadata.kernels(static_cast<int>(k));
    for (const auto& p : kd.nodes()) {
      if (p.node_name() != "/linear/MatMul") continue;
      EXPECT_EQ(p.assigned_precision(), "fp16");
      EXPECT_EQ(p.effective_precision(), "fp32");
    }
  }
  std::vector<double> exact, magnitude;
  ExactMatMul(exact, magnitude);
  const std::vector<ir::Tensor> a = RunEngineOk(rewritten, MatMulInputs(false));
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(a[0].dtype(), DataType::kF32);
  for (int64_t i = 0; i < kRows * kN; ++i) {
    // As in the fp32 test: 3 units of |y|.
    EXPECT_LE(std::fabs(a[0].data<float>()[i] - exact[i]), 3 * kU * std::fabs(exact[i]) + 1e-30)
        << i;
  }
}

TEST(QdqIntegerPassTest, RefusedForRuntimeScalePerRowWeightsAndFusionOff) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  Variant runtime_scale;
  runtime_scale.runtime_scale = true;
  Variant per_row;
  per_row.per_row = true;
  for (auto e : {Build(MatMulModel(runtime_scale)), Build(MatMulModel(per_row)),
                 Build(MatMulModel(), "fp32", false),
                 Build(MatMulModel(), "fp32", true, {"pattern:qdq-matmul"}),
                 Build(MatMulModel(), "fp32", true, {"scope:/linear/"})}) {
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(CountKernels(*e, ir::OpType::kMatMulInteger), 0);
    EXPECT_EQ(CountKernels(*e, ir::OpType::kMatMul), 1);
  }
  // The run-time scale's engine still computes the MatMul (the float one).
  auto e = Build(MatMulModel(runtime_scale));
  ASSERT_NE(e, nullptr);
  std::vector<double> exact, magnitude;
  ExactMatMul(exact, magnitude);
  const std::vector<ir::Tensor> out = RunEngineOk(e, MatMulInputs(true));
  ASSERT_EQ(out.size(), 1u);
  for (int64_t i = 0; i < kRows * kN; ++i) {
    // The float MatMul's bound of the first test.
    EXPECT_LE(std::fabs(out[0].data<float>()[i] - exact[i]), (kK + 2) * kU * magnitude[i]) << i;
  }
}

// A dequantizer with another reader (here a graph output) stays, and the integer node does not
// claim its source; the rewrite still happens.
TEST(QdqIntegerPassTest, DequantizerWithAnotherReaderStays) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  Variant v;
  v.dq_also_output = true;
  auto e = Build(MatMulModel(v));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(CountKernels(*e, ir::OpType::kMatMulIntegerToFloat), 1);  // with its Cast + Mul at fp32
  EXPECT_EQ(CountDequantizers(*e, false), 1);
  for (size_t k = 0; k < e->order.size(); ++k) {
    if (e->order[k]->op != ir::OpType::kMatMulIntegerToFloat) continue;
    for (const auto& p : e->metadata.kernels(static_cast<int>(k)).nodes()) {
      EXPECT_NE(p.node_name(), "/dq_x");
    }
  }
  const std::vector<ir::Tensor> out = RunEngineOk(e, MatMulInputs(false));
  ASSERT_EQ(out.size(), 2u);
  const std::vector<int> qa = InputQ(kRows * kK);
  for (int64_t i = 0; i < kRows * kK; ++i) {
    // x's dequantized values are exact (grid values times a power of two).
    EXPECT_EQ(out[1].data<float>()[i], static_cast<float>(qa[i] - kZx) * kSx) << i;
  }
}

// x [2, 6, 17] -> Q/DQ (uint8) -> Conv(DQ(W int8 [5, 6, 3] per output channel), B, pads 1,
// stride 2) -> y [2, 5, 9].
constexpr int64_t kC = 6, kM = 5, kL = 17, kKw = 3, kOl = 9;

onnx::ModelProto ConvModel() {
  onnx::ModelProto m;
  m.set_ir_version(10);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(21);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("qdq_conv");
  AddTensorValueInfo(g->mutable_input(), "x", {2, kC, kL});
  AddFloatInitializer(g, "sx", {}, {kSx});
  AddInt8Initializer(g, "zx", {}, {kZx}, true);
  AddInt8Initializer(g, "wq", {kM, kC, kKw}, WeightQ(kM * kC * kKw), false);
  AddFloatInitializer(g, "sw", {kM}, WeightScales(kM));
  AddInt8Initializer(g, "zw", {kM}, WeightZeros(kM), false);
  AddFloatInitializer(g, "b", {kM}, Wave(kM, 0.5f, 0.2f));
  AddOnnxNode(g, "QuantizeLinear", {"x", "sx", "zx"}, {"xq"}, "/q");
  AddOnnxNode(g, "DequantizeLinear", {"xq", "sx", "zx"}, {"xd"}, "/dq_x");
  auto* dw = AddOnnxNode(g, "DequantizeLinear", {"wq", "sw", "zw"}, {"wd"}, "/dq_w");
  AddIntAttribute(dw, "axis", 0);
  auto* c = AddOnnxNode(g, "Conv", {"xd", "wd", "b"}, {"y"}, "/conv");
  AddIntsAttribute(c, "pads", {1, 1});
  AddIntsAttribute(c, "strides", {2});
  AddTensorValueInfo(g->mutable_output(), "y", {2, kM, kOl});
  return m;
}

TEST(QdqIntegerPassTest, ConvRunsOnTheIntegerConvolution) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  auto rewritten = Build(ConvModel());
  auto plain = Build(ConvModel(), "fp32", true, {"pattern:qdq-conv"});
  ASSERT_NE(rewritten, nullptr);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(CountKernels(*rewritten, ir::OpType::kConvInteger), 1);
  EXPECT_EQ(CountKernels(*rewritten, ir::OpType::kConv), 0);
  EXPECT_EQ(CountKernels(*plain, ir::OpType::kConvInteger), 0);
  const std::vector<int> qx = InputQ(2 * kC * kL), qw = WeightQ(kM * kC * kKw);
  const std::vector<int> zw = WeightZeros(kM);
  const std::vector<float> sw = WeightScales(kM), bias = Wave(kM, 0.5f, 0.2f);
  std::vector<float> x;
  for (int q : qx) x.push_back(static_cast<float>(q - kZx) * kSx);
  const std::vector<ir::Tensor> a = RunEngineOk(rewritten, {Tensor({2, kC, kL}, x)});
  const std::vector<ir::Tensor> b = RunEngineOk(plain, {Tensor({2, kC, kL}, x)});
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  ASSERT_EQ(a[0].num_elements(), 2 * kM * kOl);
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t m = 0; m < kM; ++m) {
      for (int64_t o = 0; o < kOl; ++o) {
        double y = 0, magnitude = 0;
        for (int64_t c = 0; c < kC; ++c) {
          for (int64_t t = 0; t < kKw; ++t) {
            const int64_t l = o * 2 - 1 + t;
            if (l < 0 || l >= kL) continue;
            const double v = double(qx[(n * kC + c) * kL + l] - kZx) * kSx *
                             double(qw[(m * kC + c) * kKw + t] - zw[m]) * sw[m];
            y += v;
            magnitude += std::fabs(v);
          }
        }
        const int64_t i = (n * kM + m) * kOl + o;
        // The exact integer sum scaled (2 roundings, 3 units with slack, of |sum|) plus the
        // bias Add's rounding (1 unit of |y + b|).
        const double exact = y + bias[m];
        EXPECT_LE(std::fabs(a[0].data<float>()[i] - exact),
                  3 * kU * std::fabs(y) + kU * std::fabs(exact) + 1e-30)
            << i;
        // The float Conv: (C * Kw + 3) units of the terms' magnitude and the bias (as the
        // MatMul test, with a bias term in its sum), plus the rewritten result's own bound.
        EXPECT_LE(std::fabs(a[0].data<float>()[i] - b[0].data<float>()[i]),
                  (kC * kKw + 3) * kU * (magnitude + std::fabs(bias[m])) + 3 * kU * std::fabs(y) +
                      kU * std::fabs(exact))
            << i;
      }
    }
  }
}

// ---- ConvIntegerToFloat: authored ConvInteger + Add + Cast + Mul (quantize_dynamic's form) --

// x [1, 3, 9, 11] -> DynamicQuantizeLinear -> ConvInteger(W uint8 [5, 3, 3, 3], pads 1) ->
// Add(B int32 [1, 5, 1, 1]) -> Cast(float) -> Mul(x_scale * w_scale) -> y [1, 5, 9, 11].
// Variant 1: the Cast's output is a graph output too; 2: B is [11] (per column, not channel).
onnx::ModelProto DynamicConvModel(int variant) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("dynamic_conv");
  AddTensorValueInfo(g->mutable_input(), "x", {1, 3, 9, 11});
  std::vector<int> wq(5 * 3 * 3 * 3);
  for (size_t i = 0; i < wq.size(); ++i) wq[i] = static_cast<int>((i * 89 + 3) % 256);
  AddInt8Initializer(g, "wq", {5, 3, 3, 3}, wq, true);
  AddFloatInitializer(g, "ws", {}, {0.0123f});
  AddInt8Initializer(g, "wz", {}, {131}, true);
  const int64_t nb = variant == 2 ? 11 : 5;
  onnx::TensorProto* b = g->add_initializer();
  b->set_name("b");
  b->set_data_type(onnx::TensorProto::INT32);
  b->add_dims(nb);
  for (int64_t i = 0; i < nb; ++i) b->add_int32_data(static_cast<int32_t>(i * 7919 - 20000));
  AddInt64Initializer(g, "b_shape", {1, nb, 1, 1});
  AddOnnxNode(g, "DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"}, "/dql");
  auto* c = AddOnnxNode(g, "ConvInteger", {"xq", "wq", "xz", "wz"}, {"acc"}, "/conv");
  AddIntsAttribute(c, "pads", {1, 1, 1, 1});
  if (variant == 2) {
    AddOnnxNode(g, "Add", {"acc", "b"}, {"acc_b"}, "/bias_add");
  } else {
    AddOnnxNode(g, "Reshape", {"b", "b_shape"}, {"b4"}, "/bias_reshape");
    AddOnnxNode(g, "Add", {"acc", "b4"}, {"acc_b"}, "/bias_add");
  }
  auto* cast = AddOnnxNode(g, "Cast", {"acc_b"}, {"accf"}, "/to_float");
  AddIntAttribute(cast, "to", onnx::TensorProto::FLOAT);
  AddOnnxNode(g, "Mul", {"xs", "ws"}, {"s"}, "/scales");
  AddOnnxNode(g, "Mul", {"accf", "s"}, {"y"}, "/scale");
  AddTensorValueInfo(g->mutable_output(), "y", {1, 5, 9, 11});
  if (variant == 1) AddTensorValueInfo(g->mutable_output(), "accf", {1, 5, 9, 11});
  return m;
}

std::vector<ir::Tensor> DynamicConvInputs() {
  return {Tensor({1, 3, 9, 11}, Wave(297, 2.5f, 0.3f))};
}

TEST(ConvIntegerToFloatFusionTest, ChainBecomesOneKernelWithTheSameBits) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  auto fused = Build(DynamicConvModel(0));
  auto off = Build(DynamicConvModel(0), "fp32", false);
  auto no_fuse = Build(DynamicConvModel(0), "fp32", true, {"pattern:conv-integer-to-float"});
  ASSERT_NE(fused, nullptr);
  ASSERT_NE(off, nullptr);
  ASSERT_NE(no_fuse, nullptr);
  if ((DetectCpuFeatures() & kCpuAvx512Vnni) == 0) GTEST_SKIP() << "no VNNI: kernels stay apart";
  EXPECT_EQ(CountKernels(*fused, ir::OpType::kConvIntegerToFloat), 1);
  EXPECT_EQ(CountKernels(*fused, ir::OpType::kConvInteger), 0);
  EXPECT_EQ(CountKernels(*fused, ir::OpType::kCast), 0);
  for (const auto* e : {&off, &no_fuse}) {
    EXPECT_EQ(CountKernels(**e, ir::OpType::kConvIntegerToFloat), 0);
    EXPECT_EQ(CountKernels(**e, ir::OpType::kConvInteger), 1);
  }
  // Provenance: the fused kernel lists the four nodes it computes.
  for (size_t k = 0; k < fused->order.size(); ++k) {
    if (fused->order[k]->op != ir::OpType::kConvIntegerToFloat) continue;
    std::vector<std::string> names;
    for (const auto& p : fused->metadata.kernels(static_cast<int>(k)).nodes()) {
      names.push_back(p.node_name());
    }
    EXPECT_EQ(names, (std::vector<std::string>{"/conv", "/bias_add", "/to_float", "/scale"}));
  }
  const std::vector<ir::Tensor> a = RunEngineOk(fused, DynamicConvInputs());
  const std::vector<ir::Tensor> b = RunEngineOk(off, DynamicConvInputs());
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  ExpectSameBits(a[0], b[0]);  // the separate Add, Cast and Mul round exactly so
  double largest = 0;
  for (int64_t i = 0; i < a[0].num_elements(); ++i) {
    largest = std::max(largest, std::fabs(double(a[0].data<float>()[i])));
  }
  EXPECT_GT(largest, 0.1);  // a real output, not zeros

  // fp16 policy: still fused (the Cast and Mul compute in fp32, higher than assigned) and runs.
  auto half = Build(DynamicConvModel(0), "fp16");
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(CountKernels(*half, ir::OpType::kConvIntegerToFloat), 1);
  const std::vector<ir::Tensor> h = RunEngineOk(half, DynamicConvInputs());
  ASSERT_EQ(h.size(), 1u);
  ASSERT_EQ(h[0].num_elements(), a[0].num_elements());
  for (int64_t i = 0; i < h[0].num_elements(); ++i) {
    // x and the scale product rounded to fp16 (2^-11 relative) may move an element of xq by one
    // quantization step (1/255 of x's range times a weight) and scale y by 1 +- 2^-10: 2% of
    // the output's largest magnitude bounds both with margin.
    EXPECT_LE(std::fabs(ir::ElementAsDouble(h[0], i) - a[0].data<float>()[i]), 0.02 * largest) << i;
  }
}

TEST(ConvIntegerToFloatFusionTest, RefusedForAnOutputReadElsewhereOrAPerColumnBias) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (int variant : {1, 2}) {
    SCOPED_TRACE(variant);
    auto e = Build(DynamicConvModel(variant));
    auto off = Build(DynamicConvModel(variant), "fp32", false);
    ASSERT_NE(e, nullptr);
    ASSERT_NE(off, nullptr);
    EXPECT_EQ(CountKernels(*e, ir::OpType::kConvIntegerToFloat), 0);
    EXPECT_EQ(CountKernels(*e, ir::OpType::kConvInteger), 1);
    const std::vector<ir::Tensor> a = RunEngineOk(e, DynamicConvInputs());
    const std::vector<ir::Tensor> b = RunEngineOk(off, DynamicConvInputs());
    ASSERT_EQ(a.size(), b.size());
    for (size_t o = 0; o < a.size(); ++o) ExpectSameBits(a[o], b[o]);
  }
}

}  // namespace
}  // namespace kiln::testing
