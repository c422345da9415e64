// Precision lowering around quantization (passes/precision_lowering.h): under fp16 / bf16 a
// QuantizeLinear reads its fp16 / bf16 x without a conversion, a DequantizeLinear read only at
// its assigned precision writes that dtype itself, and the Cast + Mul scaling a qdq-integer
// rewrite's int32 sums becomes one DequantizeLinear rounding to its reader's dtype. Checked on a
// small QDQ model built here: the conversions inserted (fewer than with the quantization ops
// pinned to fp32 by rules, the old conversions-around-fp32 path), the outputs bit-identical to
// that path's (with fusion on and with `--fusion off`), and the provenance (effective
// precision) of the nodes involved.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/builder/builder.h"
#include "engine/kernels/registry.h"
#include "engine/plan/engine_blob.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"
#include "tests/testing/run_model.h"

namespace kiln::testing {
namespace {

constexpr int64_t kK = 24, kN = 19;

// x [2, 7, K] -> Mul(c1) -> Q/DQ (uint8) -> MatMul(DQ(int8 W [K, N] per column)) -> Relu
//   -> Q/DQ (int8) -> Add(c2) -> y
onnx::ModelProto QdqModel() {
  onnx::ModelProto m;
  m.set_ir_version(10);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(21);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("qdq_lowering");
  AddTensorValueInfo(g->mutable_input(), "x", {2, 7, kK});
  AddFloatInitializer(g, "c1", {kK}, Wave(kK, 1.5f, 0.3f));
  AddFloatInitializer(g, "sx", {}, {0.0371f});
  AddInt8Initializer(g, "zx", {}, {117}, true);
  std::vector<int> w(kK * kN);
  for (int64_t i = 0; i < kK * kN; ++i) w[i] = static_cast<int>((i * 53 + 5) % 255) - 127;
  AddInt8Initializer(g, "wq", {kK, kN}, w, false);
  std::vector<float> sw(kN);
  std::vector<int> zw(kN);
  for (int64_t j = 0; j < kN; ++j) {
    sw[j] = 0.0021f + 0.00037f * static_cast<float>(j % 11);
    zw[j] = static_cast<int>(j % 5) - 2;
  }
  AddFloatInitializer(g, "sw", {kN}, sw);
  AddInt8Initializer(g, "zw", {kN}, zw, false);
  AddFloatInitializer(g, "s2", {}, {0.0613f});
  AddInt8Initializer(g, "z2", {}, {-3}, false);
  AddFloatInitializer(g, "c2", {kN}, Wave(kN, 0.75f, 1.1f));
  AddOnnxNode(g, "Mul", {"x", "c1"}, {"a"}, "/pre/Mul");
  AddOnnxNode(g, "QuantizeLinear", {"a", "sx", "zx"}, {"aq"}, "/q_a");
  AddOnnxNode(g, "DequantizeLinear", {"aq", "sx", "zx"}, {"ad"}, "/dq_a");
  AddIntAttribute(AddOnnxNode(g, "DequantizeLinear", {"wq", "sw", "zw"}, {"wd"}, "/dq_w"), "axis",
                  1);
  AddOnnxNode(g, "MatMul", {"ad", "wd"}, {"h"}, "/linear/MatMul");
  AddOnnxNode(g, "Relu", {"h"}, {"r"}, "/act/Relu");
  AddOnnxNode(g, "QuantizeLinear", {"r", "s2", "z2"}, {"rq"}, "/q_r");
  AddOnnxNode(g, "DequantizeLinear", {"rq", "s2", "z2"}, {"rd"}, "/dq_r");
  AddOnnxNode(g, "Add", {"rd", "c2"}, {"y"}, "/post/Add");
  AddTensorValueInfo(g->mutable_output(), "y", {2, 7, kN});
  return m;
}

struct Built {
  std::shared_ptr<const plan::Engine> engine;
  int inserted_conversions = -1;
};

Built Build(const std::string& policy, std::vector<std::string> rules, bool fusion) {
  builder::BuildOptions o;
  o.policy = policy;
  o.rules = std::move(rules);
  o.fusion.enabled = fusion;
  auto r = builder::BuildEngine(SerializeModel(QdqModel()), o, nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  Built b;
  b.inserted_conversions = r->summary.inserted_conversions;
  auto e = plan::LoadEngineFromBytes(std::make_shared<const std::string>(r->blob));
  EXPECT_TRUE(e.ok()) << e.status();
  if (e.ok()) b.engine = *std::move(e);
  return b;
}

ir::Tensor Tensor(const std::vector<int64_t>& dims, const std::vector<float>& v) {
  auto t = ir::Tensor::Allocate(DataType::kF32, dims);
  std::copy(v.begin(), v.end(), t->data<float>());
  return *std::move(t);
}

// Output y of `e` on a fixed x (values across several quantization steps, some saturating).
ir::Tensor RunY(const std::shared_ptr<const plan::Engine>& e) {
  std::vector<float> x = Wave(2 * 7 * kK, 6.0f, 0.17f);
  for (size_t i = 0; i < x.size(); i += 13) x[i] *= 3.0f;  // beyond the uint8 range: saturates
  auto s = runtime::Session::Create(e);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return {};
  auto out = (*s)->Run({Tensor({2, 7, kK}, x)});
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok() || out->size() != 1) return {};
  return std::move((*out)[0]);
}

void ExpectBitIdentical(const ir::Tensor& a, const ir::Tensor& b) {
  ASSERT_EQ(a.dtype(), DataType::kF32);
  ASSERT_EQ(b.dtype(), DataType::kF32);
  ASSERT_EQ(a.num_elements(), b.num_elements());
  ASSERT_EQ(a.num_elements(), 2 * 7 * kN);
  int differ = 0, nonzero = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    differ += std::memcmp(a.data<float>() + i, b.data<float>() + i, sizeof(float)) != 0;
    nonzero += a.data<float>()[i] != 0.0f;
  }
  EXPECT_EQ(differ, 0);
  EXPECT_GT(nonzero, a.num_elements() / 2);  // not a degenerate output
}

// The effective precision the blob records for source node `name` ("" when absent).
std::string Effective(const plan::Engine& e, const std::string& name) {
  for (int k = 0; k < e.metadata.kernels_size(); ++k) {
    for (const auto& p : e.metadata.kernels(k).nodes()) {
      if (p.node_name() == name) return p.effective_precision();
    }
  }
  return "";
}

// The quantization ops (and the MatMul, whose qdq-integer Cast + Mul then stays fp32) pinned to
// fp32: every conversion around them inserted, as lowering did before it let them read and
// write fp16 / bf16.
const std::vector<std::string> kFp32Quantization = {
    "op:QuantizeLinear = fp32", "op:DequantizeLinear = fp32", "name:/linear/MatMul = fp32"};

TEST(QuantLoweringTest, ReducedPrecisionQdqNeedsNoConversionsAroundQuantization) {
  for (const char* policy : {"fp16", "bf16"}) {
    SCOPED_TRACE(policy);
    const DataType half = std::string(policy) == "fp16" ? DataType::kF16 : DataType::kBF16;
    Built lowered = Build(policy, {}, true);
    Built pinned = Build(policy, kFp32Quantization, true);
    ASSERT_NE(lowered.engine, nullptr);
    ASSERT_NE(pinned.engine, nullptr);
    // x into the first Mul and y out of the last Add; nothing around the quantization.
    EXPECT_EQ(lowered.inserted_conversions, 2);
    EXPECT_EQ(CountKernels(*lowered.engine, ir::OpType::kCast), 2);
    // Pinned: also the Relu's input (the MatMul's fp32 output) and the Add's (the last DQ's).
    EXPECT_EQ(pinned.inserted_conversions, 4);
    ExpectBitIdentical(RunY(lowered.engine), RunY(pinned.engine));

    // The last DequantizeLinear writes the half dtype, computing in fp32: effective = assigned.
    bool found = false;
    for (const ir::Node* n : lowered.engine->order) {
      if (n->op != ir::OpType::kDequantizeLinear || n->inputs[0]->dtype != DataType::kI8) continue;
      found = true;
      EXPECT_EQ(n->outputs[0]->dtype, half);
      EXPECT_EQ(n->GetInt("output_dtype", 0), static_cast<int64_t>(half));
    }
    EXPECT_TRUE(found);
    EXPECT_EQ(Effective(*lowered.engine, "/dq_r"), policy);
    EXPECT_EQ(Effective(*pinned.engine, "/dq_r"), "fp32");
    EXPECT_EQ(Effective(*lowered.engine, "/q_r"), policy);

    if (CountKernels(*lowered.engine, ir::OpType::kMatMulInteger) == 1) {
      // The qdq-integer rewrite: its int32 sums dequantized once to the Relu's dtype (no Cast,
      // no Mul left); the MatMul's output is rounded as assigned.
      EXPECT_EQ(CountKernels(*lowered.engine, ir::OpType::kMul), 1);  // only /pre/Mul
      int sums = 0;
      for (const ir::Node* n : lowered.engine->order) {
        if (n->op != ir::OpType::kDequantizeLinear || n->inputs[0]->dtype != DataType::kI32) {
          continue;
        }
        ++sums;
        EXPECT_EQ(n->outputs[0]->dtype, half);
        EXPECT_EQ(n->GetInt("axis", 1), -1);  // per column of W
      }
      EXPECT_EQ(sums, 1);
      EXPECT_EQ(Effective(*lowered.engine, "/linear/MatMul"), policy);
      // Pinned to fp32, the rewrite keeps its fp32 output, its Cast + Mul in the integer GEMM's
      // output stage (MatMulIntegerToFloat, passes/qdq_integer.h).
      EXPECT_EQ(CountKernels(*pinned.engine, ir::OpType::kMul), 1);  // only /pre/Mul
      EXPECT_EQ(CountKernels(*pinned.engine, ir::OpType::kMatMulIntegerToFloat), 1);
      EXPECT_EQ(CountKernels(*pinned.engine, ir::OpType::kMatMulInteger), 0);
      EXPECT_EQ(Effective(*pinned.engine, "/linear/MatMul"), "fp32");
    }
  }
}

// `--fusion off` (no qdq-integer rewrite): the float MatMul reads the first DequantizeLinear's
// half output directly, and the results are still those of the fp32 quantization path.
TEST(QuantLoweringTest, FusionOffMatchesTheFp32QuantizationPath) {
  for (const char* policy : {"fp16", "bf16"}) {
    SCOPED_TRACE(policy);
    Built lowered = Build(policy, {}, false);
    Built pinned = Build(policy, {"op:QuantizeLinear = fp32", "op:DequantizeLinear = fp32"}, false);
    ASSERT_NE(lowered.engine, nullptr);
    ASSERT_NE(pinned.engine, nullptr);
    EXPECT_EQ(CountKernels(*lowered.engine, ir::OpType::kMatMulInteger), 0);
    EXPECT_EQ(lowered.inserted_conversions, 2);
    // Pinned: also the MatMul's two inputs (the weight's DequantizeLinear is folded only after
    // lowering, its conversion with it) and the Add's input.
    EXPECT_EQ(pinned.inserted_conversions, 5);
    ExpectBitIdentical(RunY(lowered.engine), RunY(pinned.engine));
  }
}

// A DequantizeLinear read at fp32 (the graph output, and a reader pinned to fp32) keeps its fp32
// output: rounding it to fp16 there would lose what the reader computes at.
TEST(QuantLoweringTest, DequantizeReadAtFp32KeepsFp32) {
  Built b = Build("fp16", {"name:/post/Add = fp32"}, true);
  ASSERT_NE(b.engine, nullptr);
  for (const ir::Node* n : b.engine->order) {
    if (n->op != ir::OpType::kDequantizeLinear || n->inputs[0]->dtype != DataType::kI8) continue;
    EXPECT_EQ(n->outputs[0]->dtype, DataType::kF32);
    EXPECT_FALSE(n->has_attr("output_dtype"));
  }
}

}  // namespace
}  // namespace kiln::testing
