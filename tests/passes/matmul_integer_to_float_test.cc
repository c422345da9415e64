// MatMulIntegerToFloat fusion (passes/qdq_integer.h, FuseIntegerToFloat): an authored
// MatMulInteger + Add(int32 B per column) + Cast + Mul(scale per column) chain (ONNX Runtime's
// quantize_dynamic form) becomes one MatMulIntegerToFloat with the separate nodes' bits, unless
// fusion is off, `--no-fuse pattern:matmul-integer-to-float`, the Cast's output is read twice or
// is a graph output, or B is per row; a QDQ MatMul whose integer sums are not exact in fp32 runs
// as one MatMulIntegerToFloat (the qdq-matmul rewrite with its Cast + Mul fused).
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

constexpr float kSx = 0.0625f;

// ---- MatMulIntegerToFloat: authored MatMulInteger + Add + Cast + Mul ------------------------

// x [2, 5, 23] -> DynamicQuantizeLinear -> MatMulInteger(W int8 [23, 37], w_zero_point per
// column) -> Add(B int32 [37]) -> Cast(float) -> Mul(x_scale * w_scale [37]) -> y [2, 5, 37].
// Variant 1: the Cast's output is a graph output too; 2: the Cast's output is read twice (a
// second Mul, another output); 3: B is [5, 1] (per row, not per column).
constexpr int64_t kDk = 23, kDn = 37;

onnx::ModelProto DynamicMatMulModel(int variant) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("dynamic_matmul");
  AddTensorValueInfo(g->mutable_input(), "x", {2, 5, kDk});
  AddInt8Initializer(g, "wq", {kDk, kDn}, WeightQ(kDk * kDn), false);
  AddFloatInitializer(g, "ws", {kDn}, WeightScales(kDn));
  AddInt8Initializer(g, "wz", {kDn}, WeightZeros(kDn), false);
  const std::vector<int64_t> b_dims =
      variant == 3 ? std::vector<int64_t>{5, 1} : std::vector<int64_t>{kDn};
  onnx::TensorProto* b = g->add_initializer();
  b->set_name("b");
  b->set_data_type(onnx::TensorProto::INT32);
  for (int64_t d : b_dims) b->add_dims(d);
  for (int64_t i = 0; i < b_dims[0]; ++i) b->add_int32_data(static_cast<int32_t>(i * 7919 - 20000));
  AddOnnxNode(g, "DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"}, "/dql");
  AddOnnxNode(g, "MatMulInteger", {"xq", "wq", "xz", "wz"}, {"acc"}, "/mm");
  AddOnnxNode(g, "Add", {"acc", "b"}, {"acc_b"}, "/bias_add");
  auto* cast = AddOnnxNode(g, "Cast", {"acc_b"}, {"accf"}, "/to_float");
  AddIntAttribute(cast, "to", onnx::TensorProto::FLOAT);
  AddOnnxNode(g, "Mul", {"xs", "ws"}, {"s"}, "/scales");
  AddOnnxNode(g, "Mul", {"s", "accf"}, {"y"}, "/scale");  // the scale first: either order
  AddTensorValueInfo(g->mutable_output(), "y", {2, 5, kDn});
  if (variant == 1) AddTensorValueInfo(g->mutable_output(), "accf", {2, 5, kDn});
  if (variant == 2) {
    AddOnnxNode(g, "Mul", {"accf", "accf"}, {"sq"}, "/square");
    AddTensorValueInfo(g->mutable_output(), "sq", {2, 5, kDn});
  }
  return m;
}

std::vector<ir::Tensor> DynamicMatMulInputs() {
  return {Tensor({2, 5, kDk}, Wave(230, 2.5f, 0.3f))};
}

TEST(MatMulIntegerToFloatFusionTest, ChainBecomesOneKernelWithTheSameBits) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  auto fused = Build(DynamicMatMulModel(0));
  auto off = Build(DynamicMatMulModel(0), "fp32", false);
  auto no_fuse = Build(DynamicMatMulModel(0), "fp32", true, {"pattern:matmul-integer-to-float"});
  ASSERT_NE(fused, nullptr);
  ASSERT_NE(off, nullptr);
  ASSERT_NE(no_fuse, nullptr);
  if ((DetectCpuFeatures() & kCpuAvx512Vnni) == 0) GTEST_SKIP() << "no VNNI: kernels stay apart";
  EXPECT_EQ(CountKernels(*fused, ir::OpType::kMatMulIntegerToFloat), 1);
  EXPECT_EQ(CountKernels(*fused, ir::OpType::kMatMulInteger), 0);
  EXPECT_EQ(CountKernels(*fused, ir::OpType::kCast), 0);
  for (const auto* e : {&off, &no_fuse}) {
    EXPECT_EQ(CountKernels(**e, ir::OpType::kMatMulIntegerToFloat), 0);
    EXPECT_EQ(CountKernels(**e, ir::OpType::kMatMulInteger), 1);
    EXPECT_EQ(CountKernels(**e, ir::OpType::kCast), 1);
  }
  // Provenance: the fused kernel lists the four nodes it computes, at fp32.
  for (size_t k = 0; k < fused->order.size(); ++k) {
    if (fused->order[k]->op != ir::OpType::kMatMulIntegerToFloat) continue;
    const v1::Kernel& kd = fused->metadata.kernels(static_cast<int>(k));
    EXPECT_EQ(kd.isa(), "avx512");
    std::vector<std::string> names;
    for (const auto& p : kd.nodes()) {
      names.push_back(p.node_name());
      EXPECT_EQ(p.fusion(), "matmul-integer-to-float");
    }
    EXPECT_EQ(names, (std::vector<std::string>{"/mm", "/bias_add", "/to_float", "/scale"}));
  }
  const std::vector<ir::Tensor> a = RunEngineOk(fused, DynamicMatMulInputs());
  const std::vector<ir::Tensor> b = RunEngineOk(off, DynamicMatMulInputs());
  const std::vector<ir::Tensor> c = RunEngineOk(no_fuse, DynamicMatMulInputs());
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  ASSERT_EQ(c.size(), 1u);
  ExpectSameBits(a[0], b[0]);  // the separate Add, Cast and Mul round exactly so
  ExpectSameBits(a[0], c[0]);
  double largest = 0;
  for (int64_t i = 0; i < a[0].num_elements(); ++i) {
    largest = std::max(largest, std::fabs(double(a[0].data<float>()[i])));
  }
  EXPECT_GT(largest, 0.1);  // a real output, not zeros

  // fp16 policy: still fused (the Cast and Mul compute in fp32, higher than assigned) and runs.
  auto half = Build(DynamicMatMulModel(0), "fp16");
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(CountKernels(*half, ir::OpType::kMatMulIntegerToFloat), 1);
  const std::vector<ir::Tensor> h = RunEngineOk(half, DynamicMatMulInputs());
  ASSERT_EQ(h.size(), 1u);
  ASSERT_EQ(h[0].num_elements(), a[0].num_elements());
  // x rounded to fp16 (and its scale xs with it) may move each element of xq by one step: at
  // most xs * ws[j] * sum_k |wq - wz| in column j (xs = x's range / 255, with 1% slack for its
  // own rounding); the scale product and y rounded to fp16 add 2^-10 of |y|.
  const std::vector<float> x = Wave(230, 2.5f, 0.3f);
  const double xs = (std::max(0.0f, *std::max_element(x.begin(), x.end())) -
                     std::min(0.0f, *std::min_element(x.begin(), x.end()))) /
                    255.0 * 1.01;
  const std::vector<int> wq = WeightQ(kDk * kDn), wz = WeightZeros(kDn);
  const std::vector<float> ws = WeightScales(kDn);
  for (int64_t i = 0; i < h[0].num_elements(); ++i) {
    const int64_t j = i % kDn;
    double steps = 0;
    for (int64_t k = 0; k < kDk; ++k) steps += std::abs(wq[k * kDn + j] - wz[j]);
    const double y = a[0].data<float>()[i];
    EXPECT_LE(std::fabs(ir::ElementAsDouble(h[0], i) - y), xs * ws[j] * steps + std::fabs(y) / 1024)
        << i;
  }
}

TEST(MatMulIntegerToFloatFusionTest, RefusedForACastReadElsewhereOrAPerRowBias) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (int variant : {1, 2, 3}) {
    SCOPED_TRACE(variant);
    auto e = Build(DynamicMatMulModel(variant));
    auto off = Build(DynamicMatMulModel(variant), "fp32", false);
    ASSERT_NE(e, nullptr);
    ASSERT_NE(off, nullptr);
    EXPECT_EQ(CountKernels(*e, ir::OpType::kMatMulIntegerToFloat), 0);
    EXPECT_EQ(CountKernels(*e, ir::OpType::kMatMulInteger), 1);
    const std::vector<ir::Tensor> a = RunEngineOk(e, DynamicMatMulInputs());
    const std::vector<ir::Tensor> b = RunEngineOk(off, DynamicMatMulInputs());
    ASSERT_EQ(a.size(), b.size());
    for (size_t o = 0; o < a.size(); ++o) ExpectSameBits(a[o], b[o]);
  }
}

// x [4, 600] -> Q/DQ (uint8, zero point 0) -> MatMul(DQ(W int8 [600, 20] of +-127, per
// column)): 255 * 127 * 600 > 2^24, so the sums are not exact in fp32 (IntegerSumsExactInFloat)
// and precision lowering could never make the rewrite's Cast + Mul a DequantizeLinear: they fuse.
constexpr int64_t kWk = 600, kWn = 20;

onnx::ModelProto WideQdqMatMulModel() {
  onnx::ModelProto m;
  m.set_ir_version(10);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(21);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("qdq_wide_matmul");
  AddTensorValueInfo(g->mutable_input(), "x", {4, kWk});
  AddFloatInitializer(g, "sx", {}, {kSx});
  AddInt8Initializer(g, "zx", {}, {0}, true);
  std::vector<int> wq(kWk * kWn);
  for (size_t i = 0; i < wq.size(); ++i) wq[i] = (i * 7 % 3 == 0) ? -127 : 127;
  AddInt8Initializer(g, "wq", {kWk, kWn}, wq, false);
  AddFloatInitializer(g, "sw", {kWn}, WeightScales(kWn));
  AddInt8Initializer(g, "zw", {kWn}, std::vector<int>(kWn, 0), false);
  AddOnnxNode(g, "QuantizeLinear", {"x", "sx", "zx"}, {"xq"}, "/q");
  AddOnnxNode(g, "DequantizeLinear", {"xq", "sx", "zx"}, {"xd"}, "/dq_x");
  auto* dw = AddOnnxNode(g, "DequantizeLinear", {"wq", "sw", "zw"}, {"wd"}, "/dq_w");
  AddIntAttribute(dw, "axis", 1);
  AddOnnxNode(g, "MatMul", {"xd", "wd"}, {"y"}, "/linear/MatMul");
  AddTensorValueInfo(g->mutable_output(), "y", {4, kWn});
  return m;
}

TEST(MatMulIntegerToFloatFusionTest, QdqMatMulWithInexactSumsRunsAsOneKernel) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  if ((DetectCpuFeatures() & kCpuAvx512Vnni) == 0) GTEST_SKIP() << "no VNNI: no rewrite";
  auto fused = Build(WideQdqMatMulModel());
  auto apart = Build(WideQdqMatMulModel(), "fp32", true, {"pattern:matmul-integer-to-float"});
  ASSERT_NE(fused, nullptr);
  ASSERT_NE(apart, nullptr);
  EXPECT_EQ(CountKernels(*fused, ir::OpType::kMatMulIntegerToFloat), 1);
  EXPECT_EQ(CountKernels(*fused, ir::OpType::kMatMulInteger), 0);
  EXPECT_EQ(CountKernels(*fused, ir::OpType::kCast), 0);
  EXPECT_EQ(CountKernels(*fused, ir::OpType::kMul), 0);
  EXPECT_EQ(CountKernels(*apart, ir::OpType::kMatMulInteger), 1);
  EXPECT_EQ(CountKernels(*apart, ir::OpType::kCast), 1);
  // Provenance: the MatMul and both absorbed dequantizers, once each, as the qdq-matmul rewrite.
  for (size_t k = 0; k < fused->order.size(); ++k) {
    if (fused->order[k]->op != ir::OpType::kMatMulIntegerToFloat) continue;
    std::vector<std::string> names;
    for (const auto& p : fused->metadata.kernels(static_cast<int>(k)).nodes()) {
      names.push_back(p.node_name());
      EXPECT_EQ(p.fusion(), "qdq-matmul");
      EXPECT_EQ(p.effective_precision(), "fp32");
    }
    EXPECT_EQ(names, (std::vector<std::string>{"/linear/MatMul", "/dq_x", "/dq_w"}));
  }
  std::vector<float> x(4 * kWk);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 53 + 7) % 256) * kSx;
  const std::vector<ir::Tensor> a = RunEngineOk(fused, {Tensor({4, kWk}, x)});
  const std::vector<ir::Tensor> b = RunEngineOk(apart, {Tensor({4, kWk}, x)});
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  ExpectSameBits(a[0], b[0]);
}

}  // namespace
}  // namespace kiln::testing
