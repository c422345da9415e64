// The oneDNN Conv / FusedConv with kChannelsLastYOnly (cpu/dnnl/register.h): X read as the NCHW
// tensor it is, Y (and a FusedConv's residual Z) NHWC. Against the reference kernel on NCHW
// tensors, for the shapes oneDNN runs from NCHW X into nChw16c Y (16 output channels) and for
// those it has no such kernel for (the run on an NHWC copy of X), in fp32, fp16 and bf16.
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/dnnl/register.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/kernel_test_helpers.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using kernels::Isa;
using Dims = std::vector<int64_t>;
using Attrs = std::vector<std::pair<std::string, ir::Attribute>>;

// A one-node graph: X (and Z) graph inputs, W and B constants.
struct ConvGraph {
  ConvGraph(ir::OpType op, const Attrs& attrs, const ir::Tensor& x, const ir::Tensor& w,
            const ir::Tensor& b, const ir::Tensor& z = ir::Tensor()) {
    node = g.AddNode(op, "test_node");
    node->since_version = op == ir::OpType::kConv ? 22 : 1;
    for (const auto& [k, v] : attrs) node->attrs[k] = v;
    int i = 0;
    for (const ir::Tensor* t : {&x, &w, &b, &z}) {
      if (!t->defined()) break;
      ir::Value* v = *g.AddValue("in" + std::to_string(i));
      v->dtype = t->dtype();
      v->shape = ir::Shape::Of(t->dims());
      if (i == 1 || i == 2) {
        v->constant = *t;
      } else {
        v->is_graph_input = true;
      }
      node->inputs.push_back(v);
      ++i;
    }
    ir::Value* y = *g.AddValue("out0");
    y->dtype = x.dtype();
    node->outputs.push_back(y);
    g.RebuildEdges();
  }

  std::unique_ptr<kernels::Kernel> Make(uint64_t features, Isa want) const {
    auto def = kernels::Registry::Default().Find(*node, features);
    EXPECT_TRUE(def.ok()) << def.status();
    if (!def.ok()) return nullptr;
    EXPECT_EQ((*def)->isa, want);
    auto k = (*def)->factory(*node);
    EXPECT_TRUE(k.ok()) << k.status();
    return k.ok() ? *std::move(k) : nullptr;
  }

  ir::Graph g;
  ir::Node* node = nullptr;
};

ir::Tensor Run(kernels::Kernel& kernel, std::vector<ir::Tensor> in) {
  TensorContext ctx(std::move(in));
  absl::Status s = kernel.Run(ctx);
  EXPECT_TRUE(s.ok()) << s;
  return s.ok() ? ctx.out() : ir::Tensor();
}

struct Case {
  const char* name;
  Dims x, w;
  Attrs attrs;
};

std::vector<Case> Cases() {
  const Attrs s2p1 = {{"strides", IntsAttr({2, 2})}, {"pads", IntsAttr({1, 1, 1, 1})}};
  return {
      // 16 outputs, one group: oneDNN's NCHW-X, nChw16c-Y kernel (YuNet's stem, odd sizes).
      {"stem_3to16_s2", {1, 3, 23, 37}, {16, 3, 3, 3}, s2p1},
      {"stem_1to16_batch2", {2, 1, 17, 19}, {16, 1, 3, 3}, {{"pads", IntsAttr({1, 1, 1, 1})}}},
      {"stem_4to16_5x5_asym", {1, 4, 12, 21}, {16, 4, 5, 5}, {{"pads", IntsAttr({2, 1, 0, 2})}}},
      // No such kernel: the run on an NHWC copy of X (M not 16, groups).
      {"stem_3to8", {1, 3, 11, 13}, {8, 3, 3, 3}, s2p1},
      {"stem_3to24", {1, 3, 15, 18}, {24, 3, 3, 3}, s2p1},
      {"grouped_4to16", {1, 4, 9, 9}, {16, 2, 3, 3}, {{"group", IntAttr(2)}}},
  };
}

// Y of the node with kChannelsLastYOnly (NHWC, returned NCHW) against the reference on NCHW
// tensors: the bound of conv_dnnl_test.cc's Check (both sum the same K products, the bias and Z
// in fp32 in different orders, each within (K + 2) 2^-24 sum|terms| of the exact sum; an
// activation's slope of at most 1.5 scales that; bf16 and fp16 outputs add half an ulp of
// rounding on each side, relative 2^-8 or 2^-11 each, fp16 subnormals half of 2^-24 each).
void Check(const Case& cs, const char* act, bool with_bias, bool with_z, DataType dt,
           std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << cs.name << " act=\"" << act << "\" bias=" << with_bias
                                    << " z=" << with_z << " " << DataTypeName(dt));
  const ir::OpType op = act == nullptr ? ir::OpType::kConv : ir::OpType::kFusedConv;
  Attrs attrs = cs.attrs;
  if (act != nullptr) attrs.push_back({"activation", StringAttr(act)});
  const ir::Tensor x = RandomNormal(cs.x, dt, rng), w = RandomNormal(cs.w, dt, rng);
  const ir::Tensor b = with_bias || with_z ? RandomNormal({cs.w[0]}, dt, rng) : ir::Tensor();
  // Y's NCHW dims from the reference without Z.
  ConvGraph shape_graph(op, attrs, x, w, b);  // kernels keep their node: the graph outlives them
  auto shape_kernel = shape_graph.Make(0, Isa::kRef);
  ASSERT_TRUE(shape_kernel);
  const Dims y_dims = Run(*shape_kernel, {x, w, b}).dims();
  ASSERT_EQ(y_dims.size(), 4u);
  const ir::Tensor z = with_z ? RandomNormal(y_dims, dt, rng) : ir::Tensor();
  ConvGraph ref_graph(op, attrs, x, w, b, z);
  auto ref = ref_graph.Make(0, Isa::kRef);
  ASSERT_TRUE(ref);
  const ir::Tensor want_t = Run(*ref, {x, w, b, z});
  ASSERT_TRUE(want_t.defined());
  const std::vector<float> want = ToFloats(want_t);
  // sum |w * x| + |b| + |z| per output element: the reference on absolute values.
  const ir::Tensor ab = b.defined() ? AbsToFloat(b) : ir::Tensor();
  const ir::Tensor az = with_z ? AbsToFloat(z) : ir::Tensor();
  Attrs abs_attrs = cs.attrs;
  abs_attrs.push_back({"activation", StringAttr("")});
  ConvGraph abs_graph(ir::OpType::kFusedConv, abs_attrs, AbsToFloat(x), AbsToFloat(w), ab, az);
  auto abs_kernel = abs_graph.Make(0, Isa::kRef);
  ASSERT_TRUE(abs_kernel);
  const std::vector<float> mag = ToFloats(Run(*abs_kernel, {AbsToFloat(x), AbsToFloat(w), ab, az}));

  Attrs y_only = attrs;
  y_only.push_back({kernels::kChannelsLastAttr, IntAttr(kernels::cpu::dnnl::kChannelsLastYOnly)});
  const ir::Tensor zi = with_z ? *ir::ChannelsLastCopy(z, true) : ir::Tensor();
  ConvGraph graph(op, y_only, x, w, b, zi);
  // The oneDNN kernel, never the AVX-512 depthwise one (which reads NHWC X).
  auto fast = graph.Make(DetectCpuFeatures(), Isa::kDnnl);
  ASSERT_TRUE(fast);
  const int64_t k = cs.w[1] * cs.w[2] * cs.w[3] + 2;
  const double rel = dt == DataType::kBF16 ? 0x1p-7 : dt == DataType::kF16 ? 0x1p-10 : 0.0;
  const double abs = dt == DataType::kF16 ? 0x1p-24 : 0.0;
  for (int run = 0; run < 2; ++run) {  // the second on the cached primitive
    const ir::Tensor y = Run(*fast, {x, w, b, zi});
    ASSERT_TRUE(y.defined());
    ASSERT_EQ(y.dtype(), dt);
    ASSERT_EQ(y.dims(), (Dims{y_dims[0], y_dims[2], y_dims[3], y_dims[1]}));
    const std::vector<float> got = ToFloats(*ir::ChannelsLastCopy(y, false));
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const double bound = 1.5 * 2 * k * 0x1p-24 * mag[i] + rel * std::fabs(want[i]) + abs;
      ASSERT_LE(std::fabs(got[i] - want[i]), bound)
          << "run " << run << " element " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

bool HasAvx512() { return CpuHas(kernels::IsaCpuFeatures(Isa::kAvx512)); }

void CheckAll(DataType dt) {
  std::mt19937 rng(5);
  for (const Case& cs : Cases()) {
    for (bool with_bias : {false, true}) {
      Check(cs, nullptr, with_bias, false, dt, rng);
      // Relu: a oneDNN post-op; HardSwish: the kernel's own epilogue on the fp32 sums.
      for (const char* act : {"Relu", "HardSwish"}) Check(cs, act, with_bias, false, dt, rng);
    }
    Check(cs, "Relu", true, /*with_z=*/true, dt, rng);
  }
}

TEST(DnnlConvNchwXTest, Fp32MatchesReference) { CheckAll(DataType::kF32); }

TEST(DnnlConvNchwXTest, Fp16MatchesReference) {
  if (!HasAvx512()) GTEST_SKIP() << "needs AVX-512";
  CheckAll(DataType::kF16);
}

TEST(DnnlConvNchwXTest, Bf16MatchesReference) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "needs AVX-512 with BF16";
  CheckAll(DataType::kBF16);
}

// A run whose X is not rank 4 is refused with the node's name, as channels-last runs are.
TEST(DnnlConvNchwXTest, XOfAnotherRankIsAnError) {
  std::mt19937 rng(3);
  const ir::Tensor x = RandomNormal({1, 3, 9}, DataType::kF32, rng);
  const ir::Tensor w = RandomNormal({16, 3, 3, 3}, DataType::kF32, rng);
  ConvGraph graph(ir::OpType::kConv,
                  {{kernels::kChannelsLastAttr, IntAttr(kernels::cpu::dnnl::kChannelsLastYOnly)}},
                  x, w, ir::Tensor());
  auto fast = graph.Make(DetectCpuFeatures(), Isa::kDnnl);
  ASSERT_TRUE(fast);
  TensorContext ctx({x, w});
  const absl::Status s = fast->Run(ctx);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("test_node"), std::string::npos) << s;
}

}  // namespace
}  // namespace kiln::testing
