// The channels-last layout pass (passes/layout.h): convolutions and the elementwise nodes between
// them run on NHWC tensors, transposes are inserted only where an NCHW reader needs one, the
// engine computes what the NCHW engine computes, and the accuracy report and `kiln compare` see
// every ONNX tensor in its own layout.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/builder/builder.h"
#include "engine/common/cpu_features.h"
#include "engine/import/onnx_importer.h"
#include "engine/kernels/cpu/dnnl/register.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/registry.h"
#include "engine/plan/engine_blob.h"
#include "engine/report/analysis.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/passes/layout_test_models.h"
#include "tests/testing/node_runner.h"
#include "tests/testing/onnx_models.h"

namespace kiln::testing {
namespace {

using layout::Built;
using layout::Conv;
using layout::Input;
using layout::kC;
using layout::kH;
using layout::kW;

// x [1, 8, 10, 10] -> a stem Conv+Relu scaled and shifted per channel (Mul by a [C, 1, 1]
// constant, Add of a [1, C, 1, 1] one: after the Relu, not folded into the Conv's weights) -> a
// residual block (Conv+Relu,
// Conv, Add, Relu), a BatchNormalization and a MaxPool on it, a branch
// concatenated with the pool on channels, a last Conv, a GlobalAveragePool and a 2x bilinear
// Resize of its output; the first block's sum is also an output.
onnx::ModelProto ResidualNet() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("layout_test");
  AddTensorValueInfo(g->mutable_input(), "x", {1, kC, kH, kW});
  Conv(g, "/stem", "x", kC, kC, 3, "s0");
  AddFloatInitializer(g, "scale", {kC, 1, 1}, Wave(kC, 0.5f, 1.0f));
  AddFloatInitializer(g, "shift", {1, kC, 1, 1}, Wave(kC, 0.2f, 0.0f));
  AddOnnxNode(g, "Relu", {"s0"}, {"s0r"}, "/stem/relu");
  AddOnnxNode(g, "Mul", {"s0r", "scale"}, {"sm"}, "/stem/scale");
  AddOnnxNode(g, "Add", {"sm", "shift"}, {"s"}, "/stem/shift");
  Conv(g, "/block/conv1", "s", kC, kC, 3, "c1");
  AddOnnxNode(g, "Relu", {"c1"}, {"r1"}, "/block/relu1");
  Conv(g, "/block/conv2", "r1", kC, kC, 1, "c2");
  AddOnnxNode(g, "Add", {"c2", "s"}, {"sum"}, "/block/add");
  AddOnnxNode(g, "Relu", {"sum"}, {"r2"}, "/block/relu2");
  for (const char* p : {"bn.scale", "bn.b", "bn.mean"}) {
    AddFloatInitializer(g, p, {kC}, Wave(kC, 0.5f, 0.3f));
  }
  std::vector<float> var = Wave(kC, 0.5f, 1.0f);  // a wave in [-0.5, 0.5]: made positive
  for (float& v : var) v = std::fabs(v) + 0.25f;
  AddFloatInitializer(g, "bn.var", {kC}, var);
  AddOnnxNode(g, "BatchNormalization", {"r2", "bn.scale", "bn.b", "bn.mean", "bn.var"}, {"r2n"},
              "/bn");
  auto* pool = AddOnnxNode(g, "MaxPool", {"r2n"}, {"p"}, "/pool");
  AddIntsAttribute(pool, "kernel_shape", {2, 2});
  AddIntsAttribute(pool, "strides", {2, 2});
  Conv(g, "/branch", "p", kC, kC, 3, "b");
  AddIntAttribute(AddOnnxNode(g, "Concat", {"p", "b"}, {"cat"}, "/concat"), "axis", 1);
  Conv(g, "/head", "cat", 2 * kC, 4, 3, "y");
  AddOnnxNode(g, "GlobalAveragePool", {"y"}, {"gap"}, "/gap");
  AddFloatInitializer(g, "up.scales", {4}, {1.0f, 1.0f, 2.0f, 2.0f});
  auto* up = AddOnnxNode(g, "Resize", {"y", "", "up.scales"}, {"up"}, "/up");
  up->add_attribute()->set_name("mode");
  up->mutable_attribute(0)->set_type(onnx::AttributeProto::STRING);
  up->mutable_attribute(0)->set_s("linear");
  AddTensorValueInfo(g->mutable_output(), "y", {1, 4, kH / 2, kW / 2});
  AddTensorValueInfo(g->mutable_output(), "sum", {1, kC, kH, kW});
  AddTensorValueInfo(g->mutable_output(), "gap", {1, 4, 1, 1});
  AddTensorValueInfo(g->mutable_output(), "up", {1, 4, kH, kW});
  return m;
}

Built Build(const std::string& policy, bool channels_last, bool fusion = true) {
  builder::BuildOptions o;
  o.policy = policy;
  o.channels_last = channels_last;
  o.fusion.enabled = fusion;
  auto r = builder::BuildEngine(SerializeModel(ResidualNet()), o, nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  Built b{*std::move(r), nullptr};
  auto e = plan::LoadEngineFromBytes(std::make_shared<const std::string>(b.result.blob));
  EXPECT_TRUE(e.ok()) << e.status();
  if (e.ok()) b.engine = *std::move(e);
  return b;
}

std::vector<ir::Tensor> RunOutputs(const std::shared_ptr<const plan::Engine>& e) {
  auto s = runtime::Session::Create(e);
  EXPECT_TRUE(s.ok()) << s.status();
  auto out = (*s)->Run(Input());
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : std::vector<ir::Tensor>{};
}

bool OneDnnConvolutions(const std::string& policy) {
  // fp32 convolutions always run on oneDNN; bf16 ones need AVX512_BF16 (the kernel's features).
  return policy == "fp32" || (DetectCpuFeatures() & kCpuAvx512Bf16) != 0;
}

TEST(ChannelsLastTest, ConvolutionsAndTheElementwiseNodesBetweenThemRunNhwc) {
  Built b = Build("fp32", true);
  ASSERT_NE(b.engine, nullptr);
  EXPECT_EQ(b.result.summary.layout_convolutions, 5);
  const bool fast_pools = (DetectCpuFeatures() & kCpuAvx512Bf16) != 0 &&
                          (DetectCpuFeatures() & kernels::IsaCpuFeatures(kernels::Isa::kAvx512)) ==
                              kernels::IsaCpuFeatures(kernels::Isa::kAvx512);
  int transposes = 0, channels_last = 0;
  const ir::Node* concat = nullptr;
  int channel_rows = 0, resizes = 0;
  for (const ir::Node* n : b.engine->order) {
    if (n->op == ir::OpType::kMul || n->op == ir::OpType::kAdd) {
      // The stem's per-channel Mul and Add on its NHWC output, by the constants as [C] rows.
      ASSERT_EQ(n->num_inputs(), 2) << n->name;
      EXPECT_TRUE(absl::EndsWith(n->inputs[0]->name, "::nhwc")) << n->name;
      ASSERT_TRUE(n->inputs[1]->constant.has_value()) << n->name;
      EXPECT_EQ(n->inputs[1]->constant->dims(), (std::vector<int64_t>{kC})) << n->name;
      ++channel_rows;
    }
    if (n->op == ir::OpType::kTranspose) {
      ++transposes;
      EXPECT_TRUE(n->sources.empty()) << n->name;
    }
    if (n->op == ir::OpType::kConcat) concat = n;
    if (n->op == ir::OpType::kResize) {
      // On the head's NHWC output, its scales in NHWC order.
      EXPECT_TRUE(absl::EndsWith(n->inputs[0]->name, "::nhwc"));
      ASSERT_TRUE(n->inputs[2]->constant.has_value());
      EXPECT_EQ(ToFloats(*n->inputs[2]->constant), (std::vector<float>{1, 2, 2, 1}));
      ++resizes;
    }
    if (n->GetInt(kernels::kChannelsLastAttr, 0) != 0) ++channels_last;
  }
  // Five convolutions, and the BatchNormalization, MaxPool and GlobalAveragePool where the
  // AVX-512 kernels for them run.
  EXPECT_EQ(channels_last, fast_pools ? 8 : 5);
  // With the fast pools, in: x; out: the graph outputs `sum`, `y`, `gap` and `up`. The Concat joins
  // the pool's and the branch's NHWC outputs on channels, axis 3 in NHWC. Nothing between two
  // NHWC nodes (the residual Add runs inside conv2's FusedConv, the Relu after it on its NHWC
  // output; the first Relu is fused into conv1). Without them the BatchNormalization and the
  // MaxPool run NCHW, and so
  // does the Concat of its output: r2 out, p in, the branch's output out and the Concat's
  // output in, and `y` serves the GlobalAveragePool too.
  const int expected = fast_pools ? 5 : 8;
  EXPECT_EQ(channel_rows, 2);
  EXPECT_EQ(resizes, 1);
  EXPECT_EQ(transposes, expected);
  EXPECT_EQ(b.result.summary.layout_transposes, expected);
  ASSERT_NE(concat, nullptr);
  EXPECT_EQ(concat->GetInt("axis", 0), fast_pools ? 3 : 1);
  // Graph outputs keep their names, NCHW dims and order.
  ASSERT_EQ(b.engine->graph->outputs().size(), 4u);
  EXPECT_EQ(b.engine->graph->outputs()[0]->name, "y");
  EXPECT_EQ(b.engine->graph->outputs()[1]->name, "sum");
  EXPECT_EQ(b.engine->graph->outputs()[2]->name, "gap");
  EXPECT_EQ(b.engine->graph->outputs()[3]->name, "up");
  std::vector<ir::Tensor> out = RunOutputs(b.engine);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{1, 4, kH / 2, kW / 2}));
  EXPECT_EQ(out[1].dims(), (std::vector<int64_t>{1, kC, kH, kW}));
  EXPECT_EQ(out[2].dims(), (std::vector<int64_t>{1, 4, 1, 1}));
  EXPECT_EQ(out[3].dims(), (std::vector<int64_t>{1, 4, kH, kW}));
}

// The NHWC engine computes what the NCHW engine computes: the same products summed in fp32, in
// the order oneDNN picks for each layout, so the outputs agree to the fp32 rounding of sums of
// at most 16 * 9 = 144 terms (relative 144 * 2^-24 < 1e-5 of the largest term; 1e-5 of the
// output range is a bound with room for the five layers).
TEST(ChannelsLastTest, SameOutputsAsTheNchwEngine) {
  for (const char* policy : {"fp32", "bf16"}) {
    Built nhwc = Build(policy, true), nchw = Build(policy, false);
    ASSERT_NE(nhwc.engine, nullptr);
    ASSERT_NE(nchw.engine, nullptr);
    EXPECT_EQ(nchw.result.summary.layout_convolutions, 0);
    if (!OneDnnConvolutions(policy)) {
      EXPECT_EQ(nhwc.result.summary.layout_convolutions, 0) << policy;
      continue;
    }
    std::vector<ir::Tensor> a = RunOutputs(nhwc.engine), b = RunOutputs(nchw.engine);
    ASSERT_EQ(a.size(), b.size());
    for (size_t o = 0; o < a.size(); ++o) {
      ASSERT_EQ(a[o].dims(), b[o].dims());
      ASSERT_EQ(a[o].dtype(), DataType::kF32);
      const float* x = a[o].data<float>();
      const float* y = b[o].data<float>();
      float range = 0, diff = 0;
      for (int64_t i = 0; i < a[o].num_elements(); ++i) {
        range = std::max(range, std::fabs(y[i]));
        diff = std::max(diff, std::fabs(x[i] - y[i]));
      }
      EXPECT_GT(range, 0.1f);
      // bf16 policy: the same bound in the fp32 sums; each bf16 rounding of a value that lands
      // on a tie differently may flip one bf16 ulp (2^-8 relative) downstream.
      const float bound = std::string(policy) == "fp32" ? 1e-5f * range : 2e-2f * range;
      EXPECT_LE(diff, bound) << policy << " output " << o;
    }
  }
}

// The accuracy report of a channels-last engine compares every ONNX tensor in its own layout:
// the fp32 engine's report lists the same tensors as the NCHW engine's, each within fp32
// rounding of the reference (a tensor compared in the wrong layout would be off by its range).
TEST(ChannelsLastTest, ReportComparesEveryTensorInItsOnnxLayout) {
  Built nhwc = Build("fp32", true), nchw = Build("fp32", false);
  Built ref = Build("fp32", false, /*fusion=*/false);
  ASSERT_NE(nhwc.engine, nullptr);
  ASSERT_NE(nchw.engine, nullptr);
  ASSERT_NE(ref.engine, nullptr);
  v1::AccuracyReport reports[2];
  for (int i = 0; i < 2; ++i) {
    auto a = report::EngineAnalysis::Create(i == 0 ? nhwc.engine : nchw.engine, ref.engine,
                                            report::Tolerance{});
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE((*a)->AddSample(Input()).ok());
    reports[i] = (*a)->Report();
  }
  const v1::AccuracyReport& a = reports[0];
  const v1::AccuracyReport& b = reports[1];
  ASSERT_EQ(a.tensors_size(), b.tensors_size());
  EXPECT_GE(a.tensors_size(), 10);
  for (int i = 0; i < a.tensors_size(); ++i) {
    const v1::TensorReport& t = a.tensors(i);
    EXPECT_EQ(t.tensor(), b.tensors(i).tensor());
    EXPECT_FALSE(absl::StrContains(t.tensor(), "::")) << t.tensor();
    EXPECT_GT(t.accumulated().elements(), 0) << t.tensor();
    // Sums of at most 144 fp32 products through five layers (see above).
    const double bound = 1e-5 * std::max(1.0, t.ref_max_abs());
    EXPECT_LE(t.accumulated().max_abs(), bound) << t.tensor();
    EXPECT_LE(t.introduced().max_abs(), bound) << t.tensor();
  }
  EXPECT_TRUE(a.pass());
}

// `kiln compare` with a channels-last engine on either side: the NHWC engine's tensors are read
// back in NCHW whether it is compared or the reference.
TEST(ChannelsLastTest, CompareReadsAChannelsLastReference) {
  Built nhwc = Build("fp32", true), nchw = Build("fp32", false);
  ASSERT_NE(nhwc.engine, nullptr);
  ASSERT_NE(nchw.engine, nullptr);
  auto a = report::EngineAnalysis::Create(nchw.engine, nhwc.engine, report::Tolerance{});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->AddSample(Input()).ok());
  v1::AccuracyReport r = (*a)->Report();
  int convs = 0;
  for (const auto& t : r.tensors()) {
    convs += t.op_type() == "Conv";
    EXPECT_LE(t.accumulated().max_abs(), 1e-5 * std::max(1.0, t.ref_max_abs())) << t.tensor();
  }
  EXPECT_GE(convs, 1);
  EXPECT_TRUE(r.pass());
}

// A Clip between two convolutions whose lower bound is a graph input (a scalar) runs on the
// NHWC values, its bound read as it is (no transpose of a scalar), and computes what the NCHW
// engine computes.
TEST(ChannelsLastTest, ClipWithAGraphInputBoundRunsNhwc) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("clip_bound");
  AddTensorValueInfo(g->mutable_input(), "x", {1, kC, kH, kW});
  AddTensorValueInfo(g->mutable_input(), "lo", {});
  Conv(g, "/a", "x", kC, kC, 3, "a");
  AddOnnxNode(g, "Clip", {"a", "lo"}, {"c"}, "/clip");
  Conv(g, "/b", "c", kC, kC, 1, "y");
  AddTensorValueInfo(g->mutable_output(), "y", {1, kC, kH, kW});
  std::vector<ir::Tensor> outs[2];
  for (bool channels_last : {true, false}) {
    builder::BuildOptions o;
    o.policy = "fp32";
    o.channels_last = channels_last;
    auto r = builder::BuildEngine(SerializeModel(m), o, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    auto loaded = plan::LoadEngineFromBytes(std::make_shared<const std::string>(r->blob));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    std::shared_ptr<const plan::Engine> e = *std::move(loaded);
    if (channels_last) {
      int transposes = 0;
      for (const ir::Node* n : e->order) transposes += n->op == ir::OpType::kTranspose;
      EXPECT_EQ(transposes, 2);  // x in, y out
    }
    auto s = runtime::Session::Create(e);
    ASSERT_TRUE(s.ok()) << s.status();
    std::vector<ir::Tensor> in = Input();
    in.push_back(MakeFloat({}, {-0.05f}));
    auto out = (*s)->Run(in);
    ASSERT_TRUE(out.ok()) << out.status();
    outs[channels_last ? 0 : 1] = *std::move(out);
  }
  ASSERT_EQ(outs[0].size(), 1u);
  ASSERT_EQ(outs[1].size(), 1u);
  const std::vector<float> a = ToFloats(outs[0][0]), b = ToFloats(outs[1][0]);
  ASSERT_EQ(a.size(), b.size());
  // Sums of at most 72 fp32 products in two orders (see SameOutputsAsTheNchwEngine).
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << i;
}

// The inserted transposes come in execution order: two builds of a model give the same blob
// (the server's cache and its bit-for-bit match with a local build rely on it).
TEST(ChannelsLastTest, BuildsAreDeterministic) {
  Built a = Build("fp32", true), b = Build("fp32", true);
  ASSERT_FALSE(a.result.blob.empty());
  EXPECT_EQ(a.result.blob, b.result.blob);
}

TEST(ChannelsLastTest, ReferenceConvolutionRefusesAChannelsLastNode) {
  onnx::ModelProto m = ResidualNet();
  auto built = builder::BuildEngine(SerializeModel(m), builder::BuildOptions{}, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  auto e = plan::LoadEngineFromBytes(std::make_shared<const std::string>(built->blob));
  ASSERT_TRUE(e.ok());
  for (const ir::Node* n : (*e)->order) {
    if (n->GetInt(kernels::kChannelsLastAttr, 0) == 0) continue;
    auto ref = kernels::Registry::Default().Find(*n, 0);
    ASSERT_TRUE(ref.ok());
    auto k = (*ref)->factory(*n);
    ASSERT_FALSE(k.ok());
    EXPECT_THAT(std::string(k.status().message()), ::testing::HasSubstr("channels-last"));
    return;
  }
  FAIL() << "no channels-last convolution";
}

}  // namespace
}  // namespace kiln::testing
