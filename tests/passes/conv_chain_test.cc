// Convolution chains (passes/conv_chain.h): an fp32, fp16 or bf16 inverted-residual block (or a
// depthwise convolution with only its projection) becomes one FusedConvChain that computes what the
// separate convolutions compute, its members stay visible (fusion label, provenance, the accuracy
// report's interior tensors), a depthwise convolution alone stays a convolution, and `--fusion
// off`,
// `--no-fuse pattern:conv-chain` and NCHW convolutions stay apart.
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "engine/builder/builder.h"
#include "engine/kernels/registry.h"
#include "engine/plan/engine_blob.h"
#include "engine/report/analysis.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"
#include "tests/testing/run_model.h"

namespace kiln::testing {
namespace {

// bf16 blocks chain only where the kernel pays (not on AMX CPUs: conv_chain_ops.cc); the tests
// chain them everywhere unless KILN_CHAIN_BF16_DOT already names a path.
const bool kBf16Chains = setenv("KILN_CHAIN_BF16_DOT", "1", /*overwrite=*/0) == 0;

// 16 channels at 64 x 64, expanded to 96.
constexpr int64_t kC = 16, kE = 96, kS = 64;

void Conv(onnx::GraphProto* g, const std::string& name, const std::string& x, int64_t cin,
          int64_t cout, int64_t k, int64_t group, int64_t stride, const std::string& y) {
  const int64_t per_group = cin / group;
  AddFloatInitializer(
      g, name + ".w", {cout, per_group, k, k},
      Wave(cout * per_group * k * k, 1.0f / std::sqrt(float(per_group * k * k)), 0.3f + cout));
  AddFloatInitializer(g, name + ".b", {cout}, Wave(cout, 0.1f, 1.0f));
  auto* n = AddOnnxNode(g, "Conv", {x, name + ".w", name + ".b"}, {y}, name);
  AddIntsAttribute(n, "pads", {k / 2, k / 2, k / 2, k / 2});
  AddIntsAttribute(n, "strides", {stride, stride});
  AddIntAttribute(n, "group", group);
}

void Relu6(onnx::GraphProto* g, const std::string& x, const std::string& y) {
  AddOnnxNode(g, "Clip", {x, "zero", "six"}, {y}, "/clip_" + y);
}

// An opset-21 model named `name` with the Clip bounds "zero" and "six".
onnx::ModelProto Model(const std::string& name) {
  onnx::ModelProto m;
  m.set_ir_version(10);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(21);
  auto* g = m.mutable_graph();
  g->set_name(name);
  AddFloatInitializer(g, "zero", {}, {0.0f});
  AddFloatInitializer(g, "six", {}, {6.0f});
  return m;
}

// x -> block 1 (expand, Clip, depthwise, Clip, project, + x) -> block 2 (the same with stride 2,
// projecting to 24 channels, no residual) -> y.
onnx::ModelProto Blocks() {
  onnx::ModelProto m = Model("blocks");
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "x", {1, kC, kS, kS});
  Conv(g, "/b1/expand", "x", kC, kE, 1, 1, 1, "e1");
  Relu6(g, "e1", "e1r");
  Conv(g, "/b1/dw", "e1r", kE, kE, 3, kE, 1, "d1");
  Relu6(g, "d1", "d1r");
  Conv(g, "/b1/project", "d1r", kE, kC, 1, 1, 1, "p1");
  AddOnnxNode(g, "Add", {"p1", "x"}, {"s1"}, "/b1/add");
  Conv(g, "/b2/expand", "s1", kC, kE, 1, 1, 1, "e2");
  Relu6(g, "e2", "e2r");
  Conv(g, "/b2/dw", "e2r", kE, kE, 3, kE, 2, "d2");
  Relu6(g, "d2", "d2r");
  Conv(g, "/b2/project", "d2r", kE, 24, 1, 1, 1, "y");
  AddTensorValueInfo(g->mutable_output(), "y", {1, 24, kS / 2, kS / 2});
  return m;
}

// x [1, 16, 20, 20] -> depthwise 3x3, Clip, project to 8 channels (a block without an expansion)
// -> depthwise 3x3 at stride 2, Clip -> y: the second depthwise convolution has neither an
// expansion of its own (the first projection is taken) nor a projection.
onnx::ModelProto Tails() {
  onnx::ModelProto m = Model("tails");
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "x", {1, kC, 20, 20});
  Conv(g, "/t1/dw", "x", kC, kC, 3, kC, 1, "d1");
  Relu6(g, "d1", "d1r");
  Conv(g, "/t1/project", "d1r", kC, 8, 1, 1, 1, "p1");
  Conv(g, "/t2/dw", "p1", 8, 8, 3, 8, 2, "d2");
  Relu6(g, "d2", "y");
  AddTensorValueInfo(g->mutable_output(), "y", {1, 8, 10, 10});
  return m;
}

void MaxPool2(onnx::GraphProto* g, const std::string& x, const std::string& y) {
  auto* n = AddOnnxNode(g, "MaxPool", {x}, {y}, "/pool_" + y);
  AddIntsAttribute(n, "kernel_shape", {2, 2});
  AddIntsAttribute(n, "strides", {2, 2});
}

// x [1, 16, 33, 35] -> block (expand to 48, Clip, depthwise, Clip, project to 16) -> MaxPool 2x2
// -> depthwise 3x3, Clip -> MaxPool 2x2 -> y [1, 16, 8, 8] (odd sizes: the floor drops a row and
// a column). With `pre_pool_output` the second depthwise convolution's output is also a graph
// output, so its MaxPool stays a kernel of its own.
onnx::ModelProto Pooled(bool pre_pool_output = false) {
  onnx::ModelProto m = Model("pooled");
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "x", {1, kC, 33, 35});
  Conv(g, "/b1/expand", "x", kC, 48, 1, 1, 1, "e1");
  Relu6(g, "e1", "e1r");
  Conv(g, "/b1/dw", "e1r", 48, 48, 3, 48, 1, "d1");
  Relu6(g, "d1", "d1r");
  Conv(g, "/b1/project", "d1r", 48, kC, 1, 1, 1, "p1");
  MaxPool2(g, "p1", "q1");
  Conv(g, "/t/dw", "q1", kC, kC, 3, kC, 1, "d2");
  Relu6(g, "d2", "d2r");
  MaxPool2(g, "d2r", "y");
  AddTensorValueInfo(g->mutable_output(), "y", {1, kC, 8, 8});
  if (pre_pool_output) AddTensorValueInfo(g->mutable_output(), "d2r", {1, kC, 16, 17});
  return m;
}

std::shared_ptr<const plan::Engine> Build(const std::string& policy, bool fusion,
                                          std::vector<std::string> no_fuse = {},
                                          bool channels_last = true,
                                          const onnx::ModelProto& model = Blocks()) {
  builder::BuildOptions o;
  o.policy = policy;
  o.fusion.enabled = fusion;
  o.fusion.no_fuse = std::move(no_fuse);
  o.channels_last = channels_last;
  auto r = builder::BuildEngine(SerializeModel(model), o, nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return nullptr;
  auto e = plan::LoadEngineFromBytes(std::make_shared<const std::string>(r->blob));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

int Chains(const plan::Engine& e) {
  int n = 0;
  for (const ir::Node* node : e.order) n += node->op == ir::OpType::kFusedConvChain;
  return n;
}

// x [1, kC, h, w] (w = h unless given).
std::vector<ir::Tensor> Input(int64_t h = kS, int64_t w = 0) {
  w = w > 0 ? w : h;
  auto t = ir::Tensor::Allocate(DataType::kF32, {1, kC, h, w});
  std::vector<float> v = Wave(kC * h * w, 1.0f, 0.0f);
  std::copy(v.begin(), v.end(), t->data<float>());
  return {*std::move(t)};
}

ir::Tensor RunEngine(const std::shared_ptr<const plan::Engine>& e, int64_t h = kS, int64_t w = 0) {
  auto s = runtime::Session::Create(e);
  EXPECT_TRUE(s.ok()) << s.status();
  auto out = (*s)->Run(Input(h, w));
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() && !out->empty() ? (*out)[0] : ir::Tensor();
}

// The chained engine's output `a` against the separate convolutions' `b`: within `budget` (3e-5
// unless given) of b's range (which is not degenerate). Each test's budget is beside its call.
void ExpectClose(const ir::Tensor& a, const ir::Tensor& b, float budget = 3e-5f) {
  ASSERT_TRUE(a.defined() && b.defined());
  ASSERT_EQ(a.dims(), b.dims());
  float range = 0, diff = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    range = std::max(range, std::fabs(b.data<float>()[i]));
    diff = std::max(diff, std::fabs(a.data<float>()[i] - b.data<float>()[i]));
  }
  EXPECT_GT(range, 0.1f);
  EXPECT_LE(diff, budget * range);
}

// Blocks() under `policy`, chained and with `--no-fuse pattern:conv-chain`: two chains and none.
std::pair<std::shared_ptr<const plan::Engine>, std::shared_ptr<const plan::Engine>> BlocksBuilt(
    const std::string& policy) {
  auto chained = Build(policy, true);
  auto separate = Build(policy, true, {"pattern:conv-chain"});
  if (chained) {
    EXPECT_EQ(Chains(*chained), 2);
  }
  if (separate) {
    EXPECT_EQ(Chains(*separate), 0);
  }
  return {chained, separate};
}

TEST(ConvChainPassTest, BlocksBecomeChainsThatComputeWhatTheConvolutionsCompute) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const auto [chained, separate] = BlocksBuilt("fp32");
  ASSERT_NE(chained, nullptr);
  ASSERT_NE(separate, nullptr);
  for (size_t k = 0; k < chained->order.size(); ++k) {
    if (chained->order[k]->op != ir::OpType::kFusedConvChain) continue;
    // Each chain carries its members' ONNX nodes: expand, Clip, depthwise, Clip, project (and
    // the residual Add in the first block), each with the chain's fusion label.
    const v1::Kernel& kd = chained->metadata.kernels(static_cast<int>(k));
    EXPECT_GE(kd.nodes_size(), 5);
    for (const auto& p : kd.nodes()) {
      EXPECT_TRUE(absl::StartsWith(p.fusion(), "conv-chain(")) << p.fusion();
    }
  }
  // fp32 sums of at most 96 * 1 and 9 terms per layer in different orders, through six layers:
  // each rounding is within 2^-24 of its sum's terms, 96 * 2^-24 < 6e-6; 3e-5 of the output
  // range leaves room for six layers of it.
  ExpectClose(RunEngine(chained), RunEngine(separate));
}

// Under the fp16 policy the blocks chain as well (fp16 in and out; the interior, which the
// separate convolutions round to fp16, stays fp32 in the chain, and its members' effective
// precision says so; the kernel test checks that exactly).
TEST(ConvChainPassTest, Fp16BlocksChainToo) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const auto [chained, separate] = BlocksBuilt("fp16");
  ASSERT_NE(chained, nullptr);
  ASSERT_NE(separate, nullptr);
  for (size_t k = 0; k < chained->order.size(); ++k) {
    if (chained->order[k]->op != ir::OpType::kFusedConvChain) continue;
    EXPECT_EQ(chained->order[k]->outputs[0]->dtype, DataType::kF16);
    const v1::Kernel& kd = chained->metadata.kernels(static_cast<int>(k));
    EXPECT_EQ(kd.isa(), "avx512");
    // Expand, its Clip, depthwise, its Clip: fp32; the projection (and a residual Add): fp16.
    std::vector<std::string> effective;
    for (const auto& p : kd.nodes()) {
      EXPECT_EQ(p.assigned_precision(), "fp16") << p.node_name();
      effective.push_back(p.effective_precision());
    }
    ASSERT_GE(effective.size(), 5u);
    for (size_t i = 0; i < effective.size(); ++i) {
      EXPECT_EQ(effective[i], i < 4 ? "fp32" : "fp16") << kd.nodes(static_cast<int>(i)).node_name();
    }
  }
  // The separate convolutions round the six layers' outputs to fp16 (2^-11 of each value), the
  // chains only the two blocks' outputs: differences of up to 2^-11 of the value per rounding,
  // carried into the later layers (gains about 1 here: weights scaled by 1/sqrt(fan-in)), plus
  // fp32 sums in different orders. Six such roundings, 6 * 2^-11 < 3e-3: 1e-2 of the output
  // range.
  ExpectClose(RunEngine(chained), RunEngine(separate), 1e-2f);
}

// Under the bf16 policy too (bf16 in and out, each member's output rounded to bf16 as the
// separate convolutions round it; the kernel test checks the chain against its members).
TEST(ConvChainPassTest, Bf16BlocksChainToo) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const auto [chained, separate] = BlocksBuilt("bf16");
  ASSERT_NE(chained, nullptr);
  ASSERT_NE(separate, nullptr);
  int chains = 0;
  for (size_t k = 0; k < chained->order.size(); ++k) {
    if (chained->order[k]->op != ir::OpType::kFusedConvChain) continue;
    EXPECT_EQ(chained->order[k]->outputs[0]->dtype, DataType::kBF16);
    EXPECT_EQ(chained->metadata.kernels(static_cast<int>(k)).isa(), "avx512");
    ++chains;
  }
  EXPECT_EQ(chains, 2);
  // As in fp16 with bf16's steps (2^-8 of the value, 8 times fp16's): six layers of one-step
  // differences, 6 * 2^-7 < 5e-2, plus the outputs' own rounding: 8e-2 of the output range.
  ExpectClose(RunEngine(chained), RunEngine(separate), 8e-2f);
}

TEST(ConvChainPassTest, DepthwiseWithOnlyAProjectionChainsAndALoneOneStays) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  auto chained = Build("fp32", true, {}, true, Tails());
  auto separate = Build("fp32", true, {"pattern:conv-chain"}, true, Tails());
  ASSERT_NE(chained, nullptr);
  ASSERT_NE(separate, nullptr);
  EXPECT_EQ(Chains(*chained), 1);
  EXPECT_EQ(Chains(*separate), 0);
  int alone = 0;
  for (size_t k = 0; k < chained->order.size(); ++k) {
    const v1::Kernel& kd = chained->metadata.kernels(static_cast<int>(k));
    if (chained->order[k]->op == ir::OpType::kFusedConvChain) {
      // The first depthwise convolution, its Clip and the projection.
      ASSERT_EQ(kd.nodes_size(), 3);
      EXPECT_EQ(kd.nodes(0).fusion(), "conv-chain(conv+Clip, conv)");
    } else if (kd.op_type() == "FusedConv") {
      // The second depthwise convolution (with its Clip): the chain kernel's depthwise step.
      EXPECT_EQ(kd.isa(), "avx512");
      ++alone;
    }
  }
  EXPECT_EQ(alone, 1);
  // fp32 sums of at most 16 and 9 terms per layer in different orders, through three layers:
  // far below 3e-5 of the output range (as above).
  ExpectClose(RunEngine(chained, 20), RunEngine(separate, 20));
}

// A MaxPool 2x2 after a block and after a lone depthwise convolution goes into their chains
// (fp32 and fp16, odd sizes), which compute what the separate kernels compute; the pooled
// convolution's output, stored in the chain's type, keeps its precision in fp16. A MaxPool whose
// input has another reader stays.
TEST(ConvChainPassTest, MaxPoolAfterAChainGoesIntoIt) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (const char* policy : {"fp32", "fp16"}) {
    SCOPED_TRACE(policy);
    auto chained = Build(policy, true, {}, true, Pooled());
    auto separate = Build(policy, true, {"pattern:conv-chain"}, true, Pooled());
    ASSERT_NE(chained, nullptr);
    ASSERT_NE(separate, nullptr);
    EXPECT_EQ(Chains(*chained), 2);
    EXPECT_EQ(CountKernels(*chained, ir::OpType::kMaxPool), 0);
    EXPECT_EQ(CountKernels(*separate, ir::OpType::kMaxPool), 2);
    const bool half = std::string(policy) == "fp16";
    int pools = 0;
    for (size_t k = 0; k < chained->order.size(); ++k) {
      if (chained->order[k]->op != ir::OpType::kFusedConvChain) continue;
      const v1::Kernel& kd = chained->metadata.kernels(static_cast<int>(k));
      ASSERT_GE(kd.nodes_size(), 3);
      const auto& last = kd.nodes(kd.nodes_size() - 1);
      EXPECT_EQ(last.op_type(), "MaxPool");
      EXPECT_TRUE(absl::EndsWith(last.fusion(), ", maxpool)")) << last.fusion();
      // The convolution (with its Clip) the pool reads: stored in the chain's type.
      EXPECT_EQ(kd.nodes(kd.nodes_size() - 2).effective_precision(), half ? "fp16" : "fp32");
      pools += last.op_type() == "MaxPool";
    }
    EXPECT_EQ(pools, 2);
    // fp32: sums in other orders through three layers (3e-5 of the range, as above); the maxima
    // are exact. fp16: as Fp16BlocksChainToo (1e-2).
    ExpectClose(RunEngine(chained, 33, 35), RunEngine(separate, 33, 35), half ? 1e-2f : 3e-5f);
  }
  auto shared = Build("fp32", true, {}, true, Pooled(/*pre_pool_output=*/true));
  ASSERT_NE(shared, nullptr);
  EXPECT_EQ(Chains(*shared), 1);
  EXPECT_EQ(CountKernels(*shared, ir::OpType::kMaxPool), 1);
}

TEST(ConvChainPassTest, FusionOffAndNchwKeepTheConvolutionsApart) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (auto e :
       {Build("fp32", false), Build("fp32", true, {"op:Conv"}), Build("fp32", true, {}, false)}) {
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(Chains(*e), 0);
  }
  // A scope selector keeps only its block apart.
  for (const char* scope : {"scope:/b1/", "scope:/b2/"}) {
    auto one = Build("fp32", true, {scope});
    ASSERT_NE(one, nullptr);
    EXPECT_EQ(Chains(*one), 1) << scope;
  }
}

// The accuracy report sees inside a chain: the expanded and depthwise tensors are recomputed from
// the kernel's inputs by the reference kernels and compared, each within fp32 rounding.
TEST(ConvChainPassTest, ReportComparesTheTensorsInsideAChain) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  auto chained = Build("fp32", true);
  auto ref = Build("fp32", false, {}, false);
  ASSERT_NE(chained, nullptr);
  ASSERT_NE(ref, nullptr);
  auto a = report::EngineAnalysis::Create(chained, ref, report::Tolerance{});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->AddSample(Input()).ok());
  const v1::AccuracyReport r = (*a)->Report();
  int inside = 0;
  for (const v1::TensorReport& t : r.tensors()) {
    inside += t.inside_fused_kernel();
    // As above: within 3e-5 of the tensor's range.
    EXPECT_LE(t.accumulated().max_abs(), 3e-5 * std::max(1.0, t.ref_max_abs())) << t.tensor();
  }
  // e1, e1r, d1, d1r, p1 and e2, e2r, d2, d2r: kept inside the two chains.
  EXPECT_EQ(inside, 9);
  EXPECT_TRUE(r.pass());
}

}  // namespace
}  // namespace kiln::testing
