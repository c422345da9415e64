// The accuracy report of quantized models (issue "the report compares a quantized model against
// its own float computation"): a QDQ model's quantization error, against its float computation
// (the Q->DQ pairs bypassed), matches an independent computation in the test and stays apart
// from the policy's error; an integer model (MatMulInteger) says its float computation is not in
// the model; a model mixing both measures the pairs only; a float model reports "none"; the
// detection and the bypass rewrite on the IR; the text, HTML and JSON renderings.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/builder/accuracy.h"
#include "engine/builder/builder.h"
#include "engine/builder/quantization_reference.h"
#include "engine/common/status.h"
#include "engine/import/onnx_importer.h"
#include "engine/plan/engine_blob.h"
#include "engine/report/render.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"

namespace kiln {
namespace {

using testing::AddFloatInitializer;
using testing::AddOnnxNode;
using testing::AddTensorValueInfo;
using ::testing::HasSubstr;
using ::testing::Not;

// Power-of-two scales keep every quantized product and sum exact in fp32, so the engine and this
// test round the same values (ties to even alike) and the expected figures are exact.
constexpr float kXScale = 1.0f / 16;
constexpr float kWScale = 1.0f / 32;
constexpr float kYScale = 1.0f / 8;
// Weights, int8, [4, 3]: |x| <= 2 and |w| <= 20/32 keep |m| <= 5, so m / kYScale <= 40 never
// saturates.
const std::vector<int> kWq = {12, -7, 3, -20, 5, 9, 1, 17, -11, 8, -2, 14};

onnx::TensorProto* AddIntInitializer(onnx::GraphProto* g, const std::string& name,
                                     int32_t elem_type, const std::vector<int64_t>& dims,
                                     const std::vector<int>& values) {
  onnx::TensorProto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(elem_type);
  for (int64_t d : dims) t->add_dims(d);
  for (int v : values) t->add_int32_data(v);
  return t;
}

onnx::ModelProto NewModel(const std::string& name) {
  onnx::ModelProto m;
  m.set_ir_version(10);
  m.set_producer_name("kiln-tests");
  auto* imp = m.add_opset_import();
  imp->set_domain("");
  imp->set_version(21);
  m.mutable_graph()->set_name(name);
  return m;
}

// x[2,4] -> Q -> DQ -> MatMul(., DQ(w int8)) -> Q -> DQ -> y[2,3]. `x_dq_scale` is the scale of
// the first DequantizeLinear (kXScale: a pair; another: a requantization, not a pair).
onnx::ModelProto QdqMatMulModel(float x_dq_scale = kXScale) {
  onnx::ModelProto m = NewModel("qdq_matmul");
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "x", {2, 4});
  AddFloatInitializer(g, "x_scale", {}, {kXScale});
  AddFloatInitializer(g, "x_dq_scale", {}, {x_dq_scale});
  AddIntInitializer(g, "zp", onnx::TensorProto::INT8, {}, {0});
  AddIntInitializer(g, "w_q", onnx::TensorProto::INT8, {4, 3}, kWq);
  AddFloatInitializer(g, "w_scale", {}, {kWScale});
  AddFloatInitializer(g, "y_scale", {}, {kYScale});
  AddOnnxNode(g, "QuantizeLinear", {"x", "x_scale", "zp"}, {"x_q"}, "quant_x");
  AddOnnxNode(g, "DequantizeLinear", {"x_q", "x_dq_scale", "zp"}, {"x_dq"}, "dequant_x");
  AddOnnxNode(g, "DequantizeLinear", {"w_q", "w_scale", "zp"}, {"w"}, "dequant_w");
  AddOnnxNode(g, "MatMul", {"x_dq", "w"}, {"m"}, "matmul");
  AddOnnxNode(g, "QuantizeLinear", {"m", "y_scale", "zp"}, {"m_q"}, "quant_m");
  AddOnnxNode(g, "DequantizeLinear", {"m_q", "y_scale", "zp"}, {"y"}, "dequant_y");
  AddTensorValueInfo(g->mutable_output(), "y", {2, 3});
  return m;
}

// Dynamic quantization: x -> DynamicQuantizeLinear -> MatMulInteger(., w uint8) -> Cast ->
// * x_scale * w_scale -> y[2,3]; with `output_pair`, y also goes through Q -> DQ into z.
onnx::ModelProto IntegerMatMulModel(bool output_pair = false) {
  onnx::ModelProto m = NewModel("integer_matmul");
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "x", {2, 4});
  std::vector<int> w;
  for (int v : kWq) w.push_back(v + 128);
  AddIntInitializer(g, "w_q", onnx::TensorProto::UINT8, {4, 3}, w);
  AddIntInitializer(g, "w_zp", onnx::TensorProto::UINT8, {}, {128});
  AddFloatInitializer(g, "w_scale", {}, {kWScale});
  AddOnnxNode(g, "DynamicQuantizeLinear", {"x"}, {"x_q", "x_s", "x_zp"}, "dyn_quant");
  AddOnnxNode(g, "MatMulInteger", {"x_q", "w_q", "x_zp", "w_zp"}, {"acc"}, "matmul_int");
  auto* cast = AddOnnxNode(g, "Cast", {"acc"}, {"acc_f"}, "cast");
  auto* to = cast->add_attribute();
  to->set_name("to");
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(onnx::TensorProto::FLOAT);
  AddOnnxNode(g, "Mul", {"acc_f", "x_s"}, {"scaled"}, "mul_x_scale");
  AddOnnxNode(g, "Mul", {"scaled", "w_scale"}, {"y"}, "mul_w_scale");
  AddTensorValueInfo(g->mutable_output(), "y", {2, 3});
  if (output_pair) {
    AddFloatInitializer(g, "z_scale", {}, {kYScale});
    AddIntInitializer(g, "z_zp", onnx::TensorProto::INT8, {}, {0});
    AddOnnxNode(g, "QuantizeLinear", {"y", "z_scale", "z_zp"}, {"z_q"}, "quant_z");
    AddOnnxNode(g, "DequantizeLinear", {"z_q", "z_scale", "z_zp"}, {"z"}, "dequant_z");
    AddTensorValueInfo(g->mutable_output(), "z", {2, 3});
  }
  return m;
}

// Two samples of x[2, cols].
std::vector<std::vector<ir::Tensor>> Samples(int64_t cols = 4) {
  std::vector<std::vector<ir::Tensor>> samples;
  for (float phase : {0.3f, 1.9f}) {
    auto t = ir::Tensor::Allocate(DataType::kF32, {2, cols});
    EXPECT_TRUE(t.ok()) << t.status();
    const std::vector<float> v = testing::Wave(2 * cols, 1.9f, phase);
    std::copy(v.begin(), v.end(), t->data<float>());
    samples.push_back({*std::move(t)});
  }
  return samples;
}

struct Reported {
  builder::BuildResult built;
  v1::AccuracyReport report;
};

// As `kiln build --report` does (keep_reference), or with the report importing the model and
// building the reference itself.
absl::StatusOr<Reported> Report(const onnx::ModelProto& model, const std::string& policy,
                                bool keep_reference = true, int64_t cols = 4) {
  const std::string bytes = testing::SerializeModel(model);
  builder::BuildOptions opts;
  opts.policy = policy;
  opts.keep_reference = keep_reference;
  Reported r;
  ASSIGN_OR_RETURN(r.built, builder::BuildEngine(bytes, opts, nullptr));
  std::shared_ptr<const plan::Engine> engine = r.built.engine;
  if (!keep_reference) {
    ASSIGN_OR_RETURN(engine,
                     plan::LoadEngineFromBytes(std::make_shared<const std::string>(r.built.blob)));
  }
  builder::ReportOptions ro;
  ASSIGN_OR_RETURN(r.report, builder::BuildAccuracyReport(bytes, opts, r.built, engine,
                                                          std::move(r.built.reference),
                                                          Samples(cols), ro, nullptr));
  return r;
}

// The expected quantization error of QdqMatMulModel's y over Samples(), computed here: the
// model at fp32 (every rounding of the graph) against its float computation (x @ DQ(w), x not
// rounded; the weights stay as stored).
struct Expected {
  double max_abs = 0, max_rel = 0, mean_abs = 0;
  int64_t elements = 0;
};

float QuantizeDequantize(float v, float scale) {
  const float q = std::clamp(std::nearbyint(v / scale), -128.0f, 127.0f);  // int8, ties to even
  return q * scale;
}

Expected ExpectedQdqError() {
  Expected e;
  double sum = 0;
  for (const auto& sample : Samples()) {
    const float* x = sample[0].data<float>();
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 3; ++j) {
        float m = 0;
        double f = 0;
        for (int k = 0; k < 4; ++k) {
          const float w = kWq[k * 3 + j] * kWScale;
          m += QuantizeDequantize(x[i * 4 + k], kXScale) * w;  // exact: dyadic values
          f += static_cast<double>(x[i * 4 + k]) * w;
        }
        const double y = QuantizeDequantize(m, kYScale);
        const double d = std::abs(y - f);
        e.max_abs = std::max(e.max_abs, d);
        e.max_rel = std::max(e.max_rel, d / std::max(std::abs(f), 1e-6));
        sum += d;
        ++e.elements;
      }
    }
  }
  e.mean_abs = sum / e.elements;
  return e;
}

TEST(QuantizationDetectionTest, QdqPairsWeightsAndTheBypass) {
  auto g = import::ImportModel(testing::SerializeModel(QdqMatMulModel()), {});
  ASSERT_TRUE(g.ok()) << g.status();
  const builder::QuantizationForm f = builder::DetectQuantization(**g);
  EXPECT_EQ(f.Name(), "qdq");
  EXPECT_EQ(f.activation_pairs, 2);
  EXPECT_EQ(f.weight_pairs, 0);
  EXPECT_EQ(f.weight_dequantize, 1);
  EXPECT_EQ(f.mismatched_pairs, 0);
  EXPECT_TRUE(f.integer_ops.empty());

  int bypassed = -1;
  auto fg = builder::FloatComputationOf(**g, &bypassed);
  ASSERT_TRUE(fg.ok()) << fg.status();
  EXPECT_EQ(bypassed, 2);
  // The weight's DequantizeLinear stays; those of the pairs read the quantizers' inputs.
  int dq = 0;
  for (const auto& n : (*fg)->nodes()) {
    if (n->op == ir::OpType::kDequantizeLinear) {
      ++dq;
      EXPECT_EQ(n->name, "dequant_w");
    }
    if (n->name == "dequant_x") {
      EXPECT_EQ(n->op, ir::OpType::kIdentity);
      ASSERT_EQ(n->inputs.size(), 1u);
      EXPECT_EQ(n->inputs[0]->name, "x");
    }
    if (n->name == "dequant_y") {
      EXPECT_EQ(n->op, ir::OpType::kIdentity);
      EXPECT_EQ(n->inputs[0]->name, "m");
      EXPECT_EQ(n->outputs[0]->name, "y");  // the graph output keeps its name
    }
  }
  EXPECT_EQ(dq, 1);
  // The original graph is untouched.
  EXPECT_EQ(builder::DetectQuantization(**g).activation_pairs, 2);
  // A DequantizeLinear with another scale than its quantizer's is a requantization: kept.
  auto re = import::ImportModel(testing::SerializeModel(QdqMatMulModel(kXScale * 2)), {});
  ASSERT_TRUE(re.ok()) << re.status();
  const builder::QuantizationForm rf = builder::DetectQuantization(**re);
  EXPECT_EQ(rf.activation_pairs, 1);
  EXPECT_EQ(rf.mismatched_pairs, 1);
}

TEST(QuantizationDetectionTest, IntegerOps) {
  auto g = import::ImportModel(testing::SerializeModel(IntegerMatMulModel()), {});
  ASSERT_TRUE(g.ok()) << g.status();
  const builder::QuantizationForm f = builder::DetectQuantization(**g);
  EXPECT_EQ(f.Name(), "integer");
  EXPECT_EQ(f.IntegerOpsText(), "DynamicQuantizeLinear x1, MatMulInteger x1");
  EXPECT_EQ(f.activation_pairs, 0);
}

TEST(QuantizationReportTest, QdqErrorMatchesTheFloatComputation) {
  const Expected want = ExpectedQdqError();
  ASSERT_GT(want.max_abs, 0);  // the test model does lose something to quantization
  for (bool keep_reference : {true, false}) {
    SCOPED_TRACE(keep_reference ? "reference kept by the build" : "reference built by the report");
    auto r = Report(QdqMatMulModel(), "fp32", keep_reference);
    ASSERT_TRUE(r.ok()) << r.status();
    const v1::AccuracyReport& rep = r->report;
    // The policy's error: the fp32 engine against the fp32 reference of the quantized model.
    ASSERT_EQ(rep.outputs_size(), 1);
    EXPECT_TRUE(rep.pass());
    EXPECT_EQ(rep.outputs(0).error().max_abs(), 0);
    const v1::QuantizationSummary& q = rep.quantization();
    EXPECT_EQ(q.form(), "qdq");
    EXPECT_TRUE(q.error_measured());
    EXPECT_EQ(q.activation_pairs_bypassed(), 2);
    EXPECT_EQ(q.weight_dequantize_kept(), 1);
    EXPECT_THAT(q.note(), HasSubstr("float values are not in the model"));
    ASSERT_EQ(q.outputs_size(), 1);
    EXPECT_EQ(q.outputs(0).tensor(), "y");
    const v1::ErrorStats& e = q.outputs(0).error();
    EXPECT_EQ(e.elements(), want.elements);
    // The float computation's dot products are fp32 in the engine and double here: ~1e-7
    // relative on values below 5, far below the 1e-5 allowed; the quantized side is exact.
    EXPECT_NEAR(e.max_abs(), want.max_abs, 1e-5);
    EXPECT_NEAR(e.mean_abs(), want.mean_abs, 1e-5);
    // max_rel divides by |f|: the same 1e-7 relative, on a ratio of at most a few units here
    // (no output of the float computation is within 1e-2 of zero for these samples).
    EXPECT_NEAR(e.max_rel(), want.max_rel, 1e-4 * std::max(1.0, want.max_rel));
    EXPECT_EQ(e.nan_count() + e.inf_count(), 0);
  }
}

TEST(QuantizationReportTest, QuantizationErrorIsApartFromThePolicysError) {
  auto fp32 = Report(QdqMatMulModel(), "fp32");
  auto bf16 = Report(QdqMatMulModel(), "bf16");
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  // Both references run at fp32 whatever the policy: the quantization error is the same.
  ASSERT_EQ(bf16->report.quantization().outputs_size(), 1);
  EXPECT_EQ(bf16->report.quantization().outputs(0).error().max_abs(),
            fp32->report.quantization().outputs(0).error().max_abs());
  EXPECT_EQ(bf16->report.quantization().form(), "qdq");
}

TEST(QuantizationReportTest, IntegerModelSaysTheFloatComputationIsNotInTheModel) {
  auto r = Report(IntegerMatMulModel(), "fp32");
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::QuantizationSummary& q = r->report.quantization();
  EXPECT_EQ(q.form(), "integer");
  EXPECT_FALSE(q.error_measured());
  EXPECT_EQ(q.outputs_size(), 0);
  EXPECT_EQ(q.activation_pairs_bypassed(), 0);
  ASSERT_EQ(q.integer_ops_size(), 2);
  EXPECT_EQ(q.integer_ops(0).op_type(), "DynamicQuantizeLinear");
  EXPECT_EQ(q.integer_ops(1).op_type(), "MatMulInteger");
  EXPECT_EQ(q.integer_ops(1).count(), 1);
  EXPECT_THAT(q.note(), HasSubstr("no float computation in the model"));
  EXPECT_THAT(q.note(), HasSubstr("compared against itself at fp32"));
  EXPECT_THAT(q.note(), HasSubstr("quantization error is not measured"));
  EXPECT_THAT(q.note(), HasSubstr("MatMulInteger x1"));
  const std::string text = report::RenderTable(r->report);
  EXPECT_THAT(text, HasSubstr("Quantization: integer"));
  EXPECT_THAT(text, HasSubstr("integer ops: DynamicQuantizeLinear x1, MatMulInteger x1"));
  EXPECT_THAT(text, Not(HasSubstr("Quantization error per output")));
}

TEST(QuantizationReportTest, MixedModelMeasuresThePairsOnly) {
  auto r = Report(IntegerMatMulModel(/*output_pair=*/true), "fp32");
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::QuantizationSummary& q = r->report.quantization();
  EXPECT_EQ(q.form(), "qdq+integer");
  EXPECT_TRUE(q.error_measured());
  EXPECT_EQ(q.activation_pairs_bypassed(), 1);
  EXPECT_THAT(q.note(), HasSubstr("covers those pairs only"));
  ASSERT_EQ(q.outputs_size(), 2);
  EXPECT_EQ(q.outputs(0).tensor(), "y");
  EXPECT_EQ(q.outputs(0).error().max_abs(), 0);  // no pair before y
  EXPECT_EQ(q.outputs(1).tensor(), "z");
  // One rounding to kYScale, unsaturated (|y| <= 5): at most half a quantum, and some.
  EXPECT_GT(q.outputs(1).error().max_abs(), 0);
  EXPECT_LE(q.outputs(1).error().max_abs(), kYScale / 2 + 1e-6);
}

TEST(QuantizationReportTest, FloatModelReportsNone) {
  auto r = Report(testing::AddReluMulModel(), "fp16", true, /*cols=*/3);
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::QuantizationSummary& q = r->report.quantization();
  EXPECT_TRUE(r->report.has_quantization());
  EXPECT_EQ(q.form(), "none");
  EXPECT_FALSE(q.error_measured());
  EXPECT_EQ(q.outputs_size(), 0);
  EXPECT_EQ(q.integer_ops_size(), 0);
  EXPECT_THAT(q.note(), HasSubstr("not quantized"));
}

TEST(QuantizationReportTest, Renderings) {
  auto r = Report(QdqMatMulModel(), "fp32");
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string text = report::RenderTable(r->report);
  EXPECT_THAT(text, HasSubstr("Quantization: qdq"));
  EXPECT_THAT(text, HasSubstr("2 activation Q->DQ pair(s) bypassed in the float reference"));
  EXPECT_THAT(text, HasSubstr("Quantization error per output"));
  const std::string html = report::RenderHtml(r->report);
  EXPECT_THAT(html, HasSubstr("<h2>Quantization</h2>"));
  EXPECT_THAT(html, HasSubstr("id=\"quantization-error\""));
  EXPECT_THAT(html, HasSubstr("Q&#8594;DQ"));
  const std::string json = report::RenderJson(r->report);
  EXPECT_THAT(json, HasSubstr("\"form\": \"qdq\""));
  EXPECT_THAT(json, HasSubstr("\"activationPairsBypassed\": 2"));
  EXPECT_THAT(json, HasSubstr("\"errorMeasured\": true"));
}

}  // namespace
}  // namespace kiln
