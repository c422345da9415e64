// The oneDNN Conv and FusedConv (cpu/dnnl/conv_dnnl.cc) against the reference kernels, on graphs
// whose W and B are constants, as in a built engine (the oneDNN kernel takes only constant
// weights).
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/cpu_features.h"
#include "engine/common/half.h"
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

// A one-node graph: X a graph input, W and the optional B constants. `constant_w` = false makes W
// a plain input.
struct ConvGraph {
  // `z`, when given (with `b`), is FusedConv's residual input 3, a graph input like X.
  ConvGraph(ir::OpType op, const Attrs& attrs, const ir::Tensor& x, const ir::Tensor& w,
            const ir::Tensor& b, bool constant_w = true, const ir::Tensor& z = ir::Tensor()) {
    node = g.AddNode(op, "test_node");
    node->since_version = op == ir::OpType::kConv ? 22 : 1;
    for (const auto& [k, v] : attrs) node->attrs[k] = v;
    int i = 0;
    for (const ir::Tensor* t : {&x, &w, &b, &z}) {
      if (!t->defined()) break;
      ir::Value* v = *g.AddValue("in" + std::to_string(i));
      v->dtype = t->dtype();
      v->shape = ir::Shape::Of(t->dims());
      const bool weight = i == 1 || i == 2;
      if (weight && constant_w) v->constant = *t;
      if (!weight || !constant_w) v->is_graph_input = true;
      node->inputs.push_back(v);
      ++i;
    }
    ir::Value* y = *g.AddValue("out0");
    y->dtype = x.dtype();
    node->outputs.push_back(y);
    g.RebuildEdges();
  }

  // The kernel Registry::Find picks for a CPU with `features`.
  const kernels::KernelDef* Def(uint64_t features) const {
    auto def = kernels::Registry::Default().Find(*node, features);
    EXPECT_TRUE(def.ok()) << def.status();
    return def.ok() ? *def : nullptr;
  }

  ir::Graph g;
  ir::Node* node = nullptr;
};

// Runs `kernel` on `in`; output 0, undefined (and a test failure) on error. With `output_over`,
// output 0 is written over that input (given here as a copy of its own).
ir::Tensor RunKernel(kernels::Kernel& kernel, std::vector<ir::Tensor> in, int output_over = -1) {
  if (output_over >= 0) in.at(output_over) = in.at(output_over).Clone();
  TensorContext ctx(std::move(in), output_over);
  absl::Status s = kernel.Run(ctx);
  EXPECT_TRUE(s.ok()) << s;
  return s.ok() ? ctx.out() : ir::Tensor();
}

std::unique_ptr<kernels::Kernel> Make(const kernels::KernelDef& def, const ir::Node& node) {
  auto k = def.factory(node);
  EXPECT_TRUE(k.ok()) << k.status();
  return k.ok() ? *std::move(k) : nullptr;
}

struct ConvCase {
  const char* name;
  Dims x, w;
  Attrs attrs;
};

std::vector<ConvCase> Cases() {
  return {
      {"1x1", {1, 16, 7, 7}, {8, 16, 1, 1}, {}},
      {"3x3_stride2",
       {1, 8, 13, 13},
       {16, 8, 3, 3},
       {{"strides", IntsAttr({2, 2})}, {"pads", IntsAttr({1, 1, 1, 1})}}},
      {"depthwise",
       {1, 12, 10, 10},
       {12, 1, 3, 3},
       {{"group", IntAttr(12)}, {"pads", IntsAttr({1, 1, 1, 1})}}},
      {"depthwise_multiplier",
       {1, 6, 9, 9},
       {12, 1, 3, 3},
       {{"group", IntAttr(6)}, {"strides", IntsAttr({2, 2})}}},
      {"grouped", {1, 12, 9, 9}, {18, 4, 3, 3}, {{"group", IntAttr(3)}}},
      {"dilated",
       {1, 6, 15, 15},
       {8, 6, 3, 3},
       {{"dilations", IntsAttr({2, 3})}, {"pads", IntsAttr({2, 3, 2, 3})}}},
      {"asymmetric_pads", {1, 5, 11, 8}, {7, 5, 3, 2}, {{"pads", IntsAttr({0, 1, 2, 1})}}},
      {"same_upper_stride2",
       {1, 4, 10, 9},
       {6, 4, 3, 3},
       {{"auto_pad", StringAttr("SAME_UPPER")}, {"strides", IntsAttr({2, 2})}}},
      {"same_lower", {1, 4, 7, 7}, {6, 4, 4, 4}, {{"auto_pad", StringAttr("SAME_LOWER")}}},
      {"valid_stride_1x2",
       {1, 3, 9, 9},
       {4, 3, 5, 5},
       {{"auto_pad", StringAttr("VALID")}, {"strides", IntsAttr({1, 2})}}},
      {"batch2", {2, 8, 12, 12}, {16, 8, 3, 3}, {{"pads", IntsAttr({1, 1, 1, 1})}}},
      {"deep_k576", {1, 64, 14, 14}, {32, 64, 3, 3}, {{"pads", IntsAttr({1, 1, 1, 1})}}},
      // 1-D (X [N, C, L], W [M, C/g, K]): the 2-D primitive with H = 1.
      {"1d_silero_stft", {1, 1, 640}, {258, 1, 256}, {{"strides", IntsAttr({128})}}},
      {"1d_silero_encoder", {1, 129, 4}, {128, 129, 3}, {{"pads", IntsAttr({1, 1})}}},
      {"1d_pointwise_l1", {1, 128, 1}, {1, 128, 1}, {{"kernel_shape", IntsAttr({1})}}},
      {"1d_stride2_odd_batch2",
       {2, 8, 17},
       {16, 8, 3},
       {{"strides", IntsAttr({2})}, {"pads", IntsAttr({1, 1})}}},
      {"1d_depthwise",
       {1, 12, 31},
       {12, 1, 5},
       {{"group", IntAttr(12)}, {"pads", IntsAttr({2, 2})}}},
      {"1d_depthwise_multiplier",
       {1, 6, 19},
       {12, 1, 3},
       {{"group", IntAttr(6)}, {"strides", IntsAttr({2})}}},
      {"1d_grouped", {1, 12, 13}, {18, 4, 3}, {{"group", IntAttr(3)}}},
      {"1d_dilated_asymmetric_pads",
       {1, 6, 23},
       {8, 6, 3},
       {{"dilations", IntsAttr({3})}, {"pads", IntsAttr({3, 2})}}},
      {"1d_pads_end_only", {1, 5, 11}, {7, 5, 4}, {{"pads", IntsAttr({0, 2})}}},
      {"1d_same_upper_stride2",
       {1, 4, 10},
       {6, 4, 3},
       {{"auto_pad", StringAttr("SAME_UPPER")}, {"strides", IntsAttr({2})}}},
      {"1d_same_lower_even_k", {1, 4, 9}, {6, 4, 4}, {{"auto_pad", StringAttr("SAME_LOWER")}}},
      {"1d_same_lower_stride3_dilated",
       {1, 3, 14},
       {5, 3, 3},
       {{"auto_pad", StringAttr("SAME_LOWER")},
        {"strides", IntsAttr({3})},
        {"dilations", IntsAttr({2})}}},
      {"1d_same_upper_odd_total_pad",
       {1, 3, 8},
       {4, 3, 2},
       {{"auto_pad", StringAttr("SAME_UPPER")}}},
      {"1d_valid_stride2",
       {1, 3, 9},
       {4, 3, 5},
       {{"auto_pad", StringAttr("VALID")}, {"strides", IntsAttr({2})}}},
      // 2-D along H alone (W 1 wide, unpadded): described to oneDNN as the H = 1 convolution.
      {"2d_width1_magika_like", {2, 6, 17, 1}, {8, 6, 5, 1}, {}},
      {"2d_width1_stride_pads_dilation",
       {1, 5, 19, 1},
       {7, 5, 3, 1},
       {{"strides", IntsAttr({2, 3})},
        {"dilations", IntsAttr({2, 4})},
        {"pads", IntsAttr({1, 0, 2, 0})}}},
      {"2d_width1_grouped", {1, 6, 11, 1}, {9, 2, 4, 1}, {{"group", IntAttr(3)}}},
  };
}

// The K of Check's bound: the products per output element, C/g times the kernel taps (W's dims
// after the first).
int64_t ProductsPerOutput(const Dims& w) {
  int64_t k = 1;
  for (size_t i = 1; i < w.size(); ++i) k *= w[i];
  return k;
}

struct Act {
  const char* name;
  Attrs attrs;
};

// Every FusedConv activation, Clip both with lo <= hi (a oneDNN post-op) and lo > hi (applied by
// the kernel); op Conv runs with no activation.
std::vector<Act> Activations() {
  return {{"", {}},
          {"Relu", {}},
          {"LeakyRelu", {{"activation_alpha", FloatAttr(0.1f)}}},
          {"Clip", {{"activation_min", FloatAttr(0.0f)}, {"activation_max", FloatAttr(6.0f)}}},
          {"Clip", {{"activation_min", FloatAttr(1.0f)}, {"activation_max", FloatAttr(-1.0f)}}},
          {"HardSwish", {}},
          {"Sigmoid", {}},
          {"Swish", {}}};
}

bool HasAvx512() { return CpuHas(kernels::IsaCpuFeatures(Isa::kAvx512)); }

// How far apart two roundings of fp32 sums that differ only by the bound of Check may land:
// half an output ulp on each side, relative (bf16 2^-8 each, fp16 2^-11 each) and, for fp16's
// subnormals, absolute (half of 2^-24 each).
double RoundingRel(DataType dt) {
  return dt == DataType::kBF16 ? 0x1p-7 : dt == DataType::kF16 ? 0x1p-10 : 0.0;
}
double RoundingAbs(DataType dt) { return dt == DataType::kF16 ? 0x1p-24 : 0.0; }

// Checks the oneDNN kernel against the reference on one case.
void Check(ir::OpType op, const ConvCase& cs, const Act& act, bool with_bias, DataType dt,
           std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << cs.name << " " << ir::OpName(op) << " act=\"" << act.name
                                    << "\" bias=" << with_bias << " " << DataTypeName(dt));
  const ir::Tensor x = RandomNormal(cs.x, dt, rng), w = RandomNormal(cs.w, dt, rng);
  const ir::Tensor b = with_bias ? RandomNormal({cs.w[0]}, dt, rng) : ir::Tensor();
  Attrs attrs = cs.attrs;
  if (op == ir::OpType::kFusedConv) {
    attrs.push_back({"activation", StringAttr(act.name)});
    attrs.insert(attrs.end(), act.attrs.begin(), act.attrs.end());
  }
  ConvGraph graph(op, attrs, x, w, b);
  const kernels::KernelDef* fast_def = graph.Def(DetectCpuFeatures());
  const kernels::KernelDef* ref_def = graph.Def(0);
  ASSERT_TRUE(fast_def && ref_def);
  ASSERT_EQ(fast_def->isa, Isa::kDnnl);
  ASSERT_EQ(ref_def->isa, Isa::kRef);
  auto fast_kernel = Make(*fast_def, *graph.node);
  auto ref_kernel = Make(*ref_def, *graph.node);
  ASSERT_TRUE(fast_kernel && ref_kernel);
  const ir::Tensor fast = RunKernel(*fast_kernel, {x, w, b});
  const ir::Tensor ref = RunKernel(*ref_kernel, {x, w, b});
  ASSERT_TRUE(fast.defined() && ref.defined());
  ASSERT_EQ(fast.dims(), ref.dims());
  ASSERT_EQ(fast.dtype(), dt);

  // sum |w * x| + |b| per output element: the reference Conv on absolute values.
  ConvGraph abs_graph(ir::OpType::kConv, cs.attrs, AbsToFloat(x), AbsToFloat(w),
                      with_bias ? AbsToFloat(b) : ir::Tensor());
  auto abs_kernel = Make(*abs_graph.Def(0), *abs_graph.node);
  const std::vector<float> mag = ToFloats(RunKernel(
      *abs_kernel, {AbsToFloat(x), AbsToFloat(w), with_bias ? AbsToFloat(b) : ir::Tensor()}));

  // Both kernels sum the same K + 1 terms (K products and the bias) in fp32, in different
  // orders: each is within (K + 1) * 2^-24 * sum|terms| of the exact sum, so they differ by at
  // most twice that. The activation's slope scales the difference (at most 1.5, HardSwish at
  // x = 3). bf16 and fp16 add one rounding of the output on each side (RoundingRel,
  // RoundingAbs). Their products are exact in fp32, so the fp32 bound holds for them unchanged.
  const int64_t k = ProductsPerOutput(cs.w) + 1;
  const double rel = RoundingRel(dt), abs = RoundingAbs(dt);
  const std::vector<float> got = ToFloats(fast), want = ToFloats(ref);
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = 1.5 * 2 * k * 0x1p-24 * mag[i] + rel * std::fabs(want[i]) + abs;
    ASSERT_LE(std::fabs(got[i] - want[i]), bound)
        << "element " << i << ": " << got[i] << " vs " << want[i];
  }
}

void CheckAll(DataType dt) {
  std::mt19937 rng(7);
  for (const ConvCase& cs : Cases()) {
    for (bool with_bias : {false, true}) {
      Check(ir::OpType::kConv, cs, {"", {}}, with_bias, dt, rng);
      for (const Act& act : Activations()) {
        Check(ir::OpType::kFusedConv, cs, act, with_bias, dt, rng);
      }
    }
  }
}

TEST(DnnlConvTest, Fp32MatchesReference) { CheckAll(DataType::kF32); }

TEST(DnnlConvTest, Bf16MatchesReference) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "needs AVX-512 with BF16";
  CheckAll(DataType::kBF16);
}

// fp16 storage: the fp32 primitive between conversions, on AVX-512 (F16C) CPUs.
TEST(DnnlConvTest, Fp16MatchesReference) {
  if (!HasAvx512()) GTEST_SKIP() << "needs AVX-512";
  CheckAll(DataType::kF16);
}

TEST(DnnlConvTest, RebuildsWhenTheInputShapeChanges) {
  std::mt19937 rng(11);
  const ir::Tensor w = RandomNormal({4, 3, 3, 3}, DataType::kF32, rng);
  const ir::Tensor x1 = RandomNormal({1, 3, 8, 8}, DataType::kF32, rng);
  const ir::Tensor x2 = RandomNormal({2, 3, 5, 11}, DataType::kF32, rng);
  ConvGraph graph(ir::OpType::kConv, {{"pads", IntsAttr({1, 1, 1, 1})}}, x1, w, ir::Tensor());
  auto fast = Make(*graph.Def(DetectCpuFeatures()), *graph.node);
  auto ref = Make(*graph.Def(0), *graph.node);
  for (const ir::Tensor* x : {&x1, &x2, &x1}) {
    const ir::Tensor a = RunKernel(*fast, {*x, w}), b = RunKernel(*ref, {*x, w});
    ASSERT_EQ(a.dims(), b.dims());
    const std::vector<float> av = ToFloats(a), bv = ToFloats(b);
    // K = 27 products of N(0, 1) values: (K + 1) * 2^-24 * sum|w x| stays far below 1e-4.
    for (size_t i = 0; i < av.size(); ++i) EXPECT_NEAR(av[i], bv[i], 1e-4) << i;
  }
}

// A bf16 subnormal in X or W is read as its value, not as zero (as the bf16 dot products would):
// the run takes the fp32 primitive on widened tensors. One product each: exact, the reference's
// bits, and not zero.
TEST(DnnlConvTest, Bf16SubnormalIsNotFlushed) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "needs AVX-512 with BF16";
  std::mt19937 rng(5);
  for (bool in_w : {false, true}) {
    ir::Tensor x = RandomNormal({1, 4, 6, 6}, DataType::kBF16, rng);
    ir::Tensor w = RandomNormal({5, 4, 3, 3}, DataType::kBF16, rng);
    std::fill_n(x.data<uint16_t>(), x.num_elements(), 0);  // +0
    std::fill_n(w.data<uint16_t>(), w.num_elements(), 0);
    // 2^-133 (the smallest positive bf16 subnormal) times 2^10: 2^-123, a normal fp32.
    (in_w ? w : x).data<uint16_t>()[0] = 0x0001;
    (in_w ? x : w).data<uint16_t>()[0] = 0x4480;  // 1024
    ConvGraph graph(ir::OpType::kConv, {}, x, w, ir::Tensor());
    auto fast = Make(*graph.Def(DetectCpuFeatures()), *graph.node);
    auto ref = Make(*graph.Def(0), *graph.node);
    const ir::Tensor got = RunKernel(*fast, {x, w});
    EXPECT_EQ(Bits16(got), Bits16(RunKernel(*ref, {x, w}))) << (in_w ? "in W" : "in X");
    EXPECT_NE(got.data<uint16_t>()[0], 0) << (in_w ? "in W" : "in X");
  }
}

// FusedConv with a residual Z (the conv+residual fusion) = Relu(Conv(X, W) + B + Z): on oneDNN
// (Z through the sum post-op; with a bf16 subnormal in X, the fp32 primitive on widened X), with
// NCHW tensors and channels-last ones, Y in memory of its own and over Z's bytes, against the
// reference kernel on the NCHW tensors.
TEST(DnnlConvTest, ResidualIsAddedBeforeTheActivation) {
  std::mt19937 rng(17);
  for (DataType dt : {DataType::kF32, DataType::kBF16, DataType::kF16}) {
    if (dt == DataType::kBF16 && !HasAvx512Bf16()) continue;
    if (dt == DataType::kF16 && !HasAvx512()) continue;
    for (bool subnormal : {false, true}) {
      if (subnormal && dt != DataType::kBF16) continue;
      ir::Tensor x = RandomNormal({1, 4, 6, 6}, dt, rng);
      if (subnormal) x.data<uint16_t>()[3] = 0x0001;
      const ir::Tensor w = RandomNormal({5, 4, 3, 3}, dt, rng), b = RandomNormal({5}, dt, rng);
      const ir::Tensor z = RandomNormal({1, 5, 6, 6}, dt, rng);
      const Attrs attrs = {{"pads", IntsAttr({1, 1, 1, 1})}, {"activation", StringAttr("Relu")}};
      ConvGraph ref_graph(ir::OpType::kFusedConv, attrs, x, w, b, true, z);
      auto ref = Make(*ref_graph.Def(0), *ref_graph.node);
      ASSERT_TRUE(ref);
      const std::vector<float> want = ToFloats(RunKernel(*ref, {x, w, b, z}));
      for (bool channels_last : {false, true}) {
        Attrs a = attrs;
        ir::Tensor xi = x, zi = z;
        if (channels_last) {
          a.push_back({kernels::kChannelsLastAttr, IntAttr(1)});
          xi = *ir::ChannelsLastCopy(x, true);
          zi = *ir::ChannelsLastCopy(z, true);
        }
        ConvGraph graph(ir::OpType::kFusedConv, a, xi, w, b, true, zi);
        const kernels::KernelDef* def = graph.Def(DetectCpuFeatures());
        ASSERT_TRUE(def);
        ASSERT_EQ(def->isa, Isa::kDnnl);
        auto fast = Make(*def, *graph.node);
        ASSERT_TRUE(fast);
        for (bool over_z : {false, true}) {
          ir::Tensor y = RunKernel(*fast, {xi, w, b, zi}, over_z ? 3 : -1);
          ASSERT_TRUE(y.defined());
          if (channels_last) y = *ir::ChannelsLastCopy(y, false);
          const std::vector<float> got = ToFloats(y);
          ASSERT_EQ(got.size(), want.size());
          const std::string what =
              absl::StrCat(DataTypeName(dt), subnormal ? " subnormal" : "",
                           channels_last ? " channels-last" : " NCHW", over_z ? ", Y over Z" : "");
          for (size_t i = 0; i < got.size(); ++i) {
            // 37 products of N(0, 1) values, the bias and Z summed in fp32 in two orders: far
            // below 1e-4 apart; bf16 and fp16 add half an output ulp on each side.
            ASSERT_LE(std::fabs(got[i] - want[i]),
                      1e-4 + RoundingRel(dt) * std::fabs(want[i]) + RoundingAbs(dt))
                << what << " element " << i << ": " << got[i] << " vs " << want[i];
          }
        }
      }
    }
  }
}

// One channels-last fp32 FusedConv (activation `act`, with or without B and the residual Z)
// through the oneDNN kernel against the reference on the NCHW tensors, run twice: the second run
// reuses the packed W and writes Y over Z when there is one. `y_dims_out`, when given, gets Y's
// dims.
void CheckChannelsLastFusedConv(const ConvCase& cs, const Act& act, bool with_bias, bool with_z,
                                std::mt19937& rng, Dims* y_dims_out = nullptr) {
  SCOPED_TRACE(::testing::Message()
               << cs.name << " act=\"" << act.name << "\" bias=" << with_bias << " z=" << with_z);
  const int64_t k = cs.w[1] * cs.w[2] * cs.w[3];
  const ir::Tensor x = RandomNormal(cs.x, DataType::kF32, rng);
  const ir::Tensor w = RandomNormal(cs.w, DataType::kF32, rng);
  const ir::Tensor b = with_bias ? RandomNormal({cs.w[0]}, DataType::kF32, rng) : ir::Tensor();
  Attrs attrs = cs.attrs;
  attrs.push_back({"activation", StringAttr(act.name)});
  attrs.insert(attrs.end(), act.attrs.begin(), act.attrs.end());
  // Y's dims from a run of the reference without Z.
  ConvGraph shape_graph(ir::OpType::kFusedConv, attrs, x, w, b);
  auto shape_kernel = Make(*shape_graph.Def(0), *shape_graph.node);
  ASSERT_TRUE(shape_kernel);
  const Dims y_dims = RunKernel(*shape_kernel, {x, w, b}).dims();
  if (y_dims_out != nullptr) *y_dims_out = y_dims;
  const ir::Tensor z = with_z ? RandomNormal(y_dims, DataType::kF32, rng) : ir::Tensor();
  ConvGraph ref_graph(ir::OpType::kFusedConv, attrs, x, w, b, true, z);
  auto ref = Make(*ref_graph.Def(0), *ref_graph.node);
  ASSERT_TRUE(ref);
  const std::vector<float> want = ToFloats(RunKernel(*ref, {x, w, b, z}));
  // sum |w * x| + |b| + |z| per output element: the reference on absolute values.
  const ir::Tensor ab = with_bias ? AbsToFloat(b) : ir::Tensor();
  const ir::Tensor az = with_z ? AbsToFloat(z) : ir::Tensor();
  Attrs abs_attrs = cs.attrs;
  abs_attrs.push_back({"activation", StringAttr("")});
  ConvGraph abs_graph(ir::OpType::kFusedConv, abs_attrs, AbsToFloat(x), AbsToFloat(w), ab, true,
                      az);
  auto abs_kernel = Make(*abs_graph.Def(0), *abs_graph.node);
  ASSERT_TRUE(abs_kernel);
  const std::vector<float> mag =
      ToFloats(RunKernel(*abs_kernel, {AbsToFloat(x), AbsToFloat(w), ab, az}));
  Attrs cl = attrs;
  cl.push_back({kernels::kChannelsLastAttr, IntAttr(1)});
  const ir::Tensor xi = *ir::ChannelsLastCopy(x, true);
  const ir::Tensor zi = with_z ? *ir::ChannelsLastCopy(z, true) : ir::Tensor();
  ConvGraph graph(ir::OpType::kFusedConv, cl, xi, w, b, true, zi);
  const kernels::KernelDef* def = graph.Def(DetectCpuFeatures());
  ASSERT_TRUE(def);
  ASSERT_EQ(def->isa, Isa::kDnnl);
  auto fast = Make(*def, *graph.node);
  ASSERT_TRUE(fast);
  for (int run = 0; run < 2; ++run) {
    ir::Tensor y = RunKernel(*fast, {xi, w, b, zi}, run == 1 && with_z ? 3 : -1);
    ASSERT_TRUE(y.defined());
    y = *ir::ChannelsLastCopy(y, false);
    const std::vector<float> got = ToFloats(y);
    ASSERT_EQ(got.size(), want.size());
    // The K products, the bias and Z summed in fp32 in two orders (or groupings), each within
    // (K + 2) 2^-24 sum|terms| of the exact sum; the activation's slope (at most 1.5 over the
    // activations of these tests) scales the difference.
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_LE(std::fabs(got[i] - want[i]), 1.5 * 2 * (k + 2) * 0x1p-24 * mag[i])
          << "run " << run << " element " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

// Channels-last fp32 convolutions on small images with a W of 2 MB or more run as one GEMM per
// kernel tap (conv_dnnl.cc): 1x1 in place, 3x3 with padding, strides 2, an uneven dilated
// window; every activation, with and without the bias and the residual, batch 2 and a channel
// count that is no multiple of 16, against the reference on the NCHW tensors (the bound of
// Check).
TEST(DnnlConvTest, SmallImagesAsGemmMatchReference) {
  std::mt19937 rng(23);
  const std::vector<ConvCase> cases = {
      {"1x1", {2, 512, 2, 3}, {1024, 512, 1, 1}, {}},
      {"1x1_stride2", {2, 512, 3, 5}, {1024, 512, 1, 1}, {{"strides", IntsAttr({2, 2})}}},
      {"3x3_pad1", {2, 240, 2, 3}, {256, 240, 3, 3}, {{"pads", IntsAttr({1, 1, 1, 1})}}},
      {"3x3_stride2",
       {1, 240, 6, 6},
       {256, 240, 3, 3},
       {{"strides", IntsAttr({2, 2})}, {"pads", IntsAttr({1, 1, 1, 1})}}},
      {"2x3_dilated",
       {1, 200, 4, 5},
       {440, 200, 2, 3},
       {{"dilations", IntsAttr({2, 1})}, {"pads", IntsAttr({1, 0, 0, 2})}}},
  };
  const std::vector<Act> few = {{"", {}}, {"Relu", {}}};
  for (const ConvCase& cs : cases) {
    // The activations are the same epilogue for every window: all of them on the first.
    for (const Act& act : &cs == &cases[0] ? Activations() : few) {
      for (bool with_bias : {false, true}) {
        for (bool with_z : {false, true}) {
          if (with_z && !with_bias) continue;  // Z is input 3: B comes with it
          Dims y_dims;
          ASSERT_NO_FATAL_FAILURE(
              CheckChannelsLastFusedConv(cs, act, with_bias, with_z, rng, &y_dims));
          ASSERT_LE(y_dims[2] * y_dims[3], 64) << "a small image";
          ASSERT_GE(cs.w[0] * cs.w[1] * cs.w[2] * cs.w[3] * sizeof(float), size_t{2} << 20)
              << "a W that streams from memory";
        }
      }
    }
  }
}

// Channels-last fp32 convolutions along one spatial axis (the other 1 wide in X, the kernel and
// Y, unpadded; magika's [N, C, 512, 1] by a 5 x 1 kernel) run as one GEMM per image on X's own
// rows (conv_dnnl.cc, RunLineGemm): along H and along W, with stride, padding (the zero-padded
// copy of X), a batch, channel counts that are no multiple of 16, the bias, the residual (also
// with Y over Z) and activations, against the reference on the NCHW tensors (the bound of
// Check).
TEST(DnnlConvTest, ThinChannelsLastAsGemmMatchReference) {
  if (!HasAvx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(29);
  const std::vector<ConvCase> cases = {
      {"along_h", {2, 40, 23, 1}, {70, 40, 5, 1}, {}},
      {"along_h_stride2_pads",
       {1, 33, 30, 1},
       {48, 33, 3, 1},
       {{"strides", IntsAttr({2, 5})}, {"pads", IntsAttr({2, 0, 1, 0})}}},
      {"along_w_same_upper",
       {3, 36, 1, 17},
       {33, 36, 1, 4},
       {{"auto_pad", StringAttr("SAME_UPPER")}}},
  };
  const std::vector<Act> acts = {{"", {}}, {"Relu", {}}, {"Sigmoid", {}}};
  for (const ConvCase& cs : cases) {
    for (const Act& act : acts) {
      for (bool with_bias : {false, true}) {
        for (bool with_z : {false, true}) {
          if (with_z && !with_bias) continue;  // Z is input 3: B comes with it
          ASSERT_NO_FATAL_FAILURE(CheckChannelsLastFusedConv(cs, act, with_bias, with_z, rng));
        }
      }
    }
  }
}

// The build's W in the kernel's own layout (PrepackConvWeights, input kPrepackedWeightsInput):
// read where it lies when its layout is the running primitive's (or the GEMM path's packing), so
// the run gives the plain W's bits and zeroed bytes change the output; with a layout record that
// does not match (another oneDNN), the plain W is reordered as before and the bytes are ignored.
TEST(DnnlConvTest, PrepackedWeightsAreReadWhereTheyLieAndIgnoredWhenStale) {
  if (!kernels::CpuHasIsa(Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  struct Case {
    const char* name;
    DataType dt;
    bool channels_last;
    Dims x, w;
  };
  const Case cases[] = {
      {"nchw", DataType::kF32, false, {1, 16, 14, 14}, {32, 16, 3, 3}},
      {"nhwc", DataType::kF32, true, {1, 24, 10, 9}, {40, 24, 3, 3}},
      {"nhwc_fp16", DataType::kF16, true, {1, 16, 8, 8}, {32, 16, 1, 1}},
      {"nhwc_gemm_path", DataType::kF32, true, {1, 512, 3, 3}, {1024, 512, 1, 1}},
      // 1-D: the record is the 4-D descriptor of the H = 1 primitive.
      {"ncl_1d", DataType::kF32, false, {1, 16, 20}, {32, 16, 3}},
      {"ncl_1d_fp16", DataType::kF16, false, {1, 16, 7}, {24, 16, 3}},
  };
  std::mt19937 rng(41);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ir::Tensor x = RandomNormal(c.x, c.dt, rng);
    if (c.channels_last) x = *ir::ChannelsLastCopy(x, true);
    const ir::Tensor w = RandomNormal(c.w, c.dt, rng), b = RandomNormal({c.w[0]}, c.dt, rng);
    // Padding 1 on each side of every spatial axis.
    Attrs attrs = {{"pads", IntsAttr(std::vector<int64_t>(2 * (c.x.size() - 2), 1))},
                   {"activation", StringAttr("Relu")}};
    if (c.channels_last) attrs.push_back({kernels::kChannelsLastAttr, IntAttr(1)});
    ConvGraph graph(ir::OpType::kFusedConv, attrs, x, w, b);
    const kernels::KernelDef* def = graph.Def(DetectCpuFeatures());
    ASSERT_TRUE(def);
    ASSERT_EQ(def->isa, Isa::kDnnl);
    auto pre = kernels::cpu::dnnl::PrepackConvWeights(*graph.node, *def);
    ASSERT_TRUE(pre.ok()) << pre.status();
    ASSERT_TRUE(pre->has_value());
    const ir::Tensor& bytes = (*pre)->bytes;
    ASSERT_EQ(bytes.dtype(), DataType::kU8);
    auto plain = Make(*def, *graph.node);
    ASSERT_TRUE(plain);
    const std::vector<float> want = ToFloats(RunKernel(*plain, {x, w, b}));
    ir::Tensor zeros = *ir::Tensor::Allocate(DataType::kU8, bytes.dims());
    // The node as the build leaves it: the bytes as input 4, their layout in the attribute.
    auto run = [&](const std::vector<int64_t>& desc, const ir::Tensor& packed) {
      ir::Node node = *graph.node;
      node.attrs[kernels::cpu::dnnl::kPrepackedWeightsAttr] = IntsAttr(desc);
      auto k = Make(*def, node);
      EXPECT_TRUE(k);
      if (!k) return std::vector<float>();
      return ToFloats(RunKernel(*k, {x, w, b, ir::Tensor(), packed}));
    };
    EXPECT_EQ(run((*pre)->desc, bytes), want);
    EXPECT_NE(run((*pre)->desc, zeros), want);  // the bytes are what the run read
    std::vector<int64_t> stale = (*pre)->desc;
    stale[0] += 1;  // another oneDNN version (or, on the GEMM path, another packing)
    EXPECT_EQ(run(stale, zeros), want);
  }
}

// A 1-D convolution whose length changes between runs (an If branch's shapes are known only
// when it runs): the primitive is rebuilt for each new X, and each run matches the reference.
TEST(DnnlConv1dTest, RebuildsWhenTheLengthChanges) {
  std::mt19937 rng(13);
  const ir::Tensor w = RandomNormal({4, 3, 3}, DataType::kF32, rng);
  const ir::Tensor x1 = RandomNormal({1, 3, 16}, DataType::kF32, rng);
  const ir::Tensor x2 = RandomNormal({2, 3, 7}, DataType::kF32, rng);
  ConvGraph graph(ir::OpType::kConv, {{"pads", IntsAttr({1, 1})}, {"strides", IntsAttr({2})}}, x1,
                  w, ir::Tensor());
  const kernels::KernelDef* def = graph.Def(DetectCpuFeatures());
  ASSERT_TRUE(def);
  ASSERT_EQ(def->isa, Isa::kDnnl);
  auto fast = Make(*def, *graph.node);
  auto ref = Make(*graph.Def(0), *graph.node);
  ASSERT_TRUE(fast && ref);
  for (const ir::Tensor* x : {&x1, &x2, &x1}) {
    const ir::Tensor a = RunKernel(*fast, {*x, w}), b = RunKernel(*ref, {*x, w});
    ASSERT_EQ(a.dims(), b.dims());
    ASSERT_EQ(a.dims(), (Dims{x->dim(0), 4, (x->dim(2) + 2 - 3) / 2 + 1}));
    const std::vector<float> av = ToFloats(a), bv = ToFloats(b);
    // K = 9 products of N(0, 1) values: 2 (K + 1) 2^-24 sum|w x| stays far below 1e-4 (sum|w x|
    // would have to pass 80).
    for (size_t i = 0; i < av.size(); ++i) EXPECT_NEAR(av[i], bv[i], 1e-4) << i;
  }
}

// 1-D FusedConv with a residual Z = Relu(Conv(X, W) + B + Z), through oneDNN's sum post-op on
// the H = 1 view, Y in memory of its own and over Z's bytes; bf16 with a subnormal in X runs the
// fp32 primitive on widened X (the same bound).
TEST(DnnlConv1dTest, ResidualIsAddedBeforeTheActivation) {
  std::mt19937 rng(19);
  for (DataType dt : {DataType::kF32, DataType::kBF16, DataType::kF16}) {
    if (dt == DataType::kBF16 && !HasAvx512Bf16()) continue;
    if (dt == DataType::kF16 && !HasAvx512()) continue;
    for (bool subnormal : {false, true}) {
      if (subnormal && dt != DataType::kBF16) continue;
      ir::Tensor x = RandomNormal({1, 6, 13}, dt, rng);
      if (subnormal) x.data<uint16_t>()[5] = 0x0001;
      const ir::Tensor w = RandomNormal({5, 6, 3}, dt, rng), b = RandomNormal({5}, dt, rng);
      const ir::Tensor z = RandomNormal({1, 5, 13}, dt, rng);
      const Attrs attrs = {{"pads", IntsAttr({1, 1})}, {"activation", StringAttr("Relu")}};
      ConvGraph graph(ir::OpType::kFusedConv, attrs, x, w, b, true, z);
      const kernels::KernelDef* def = graph.Def(DetectCpuFeatures());
      ASSERT_TRUE(def);
      ASSERT_EQ(def->isa, Isa::kDnnl);
      auto fast = Make(*def, *graph.node);
      auto ref = Make(*graph.Def(0), *graph.node);
      ASSERT_TRUE(fast && ref);
      const std::vector<float> want = ToFloats(RunKernel(*ref, {x, w, b, z}));
      for (bool over_z : {false, true}) {
        const ir::Tensor y = RunKernel(*fast, {x, w, b, z}, over_z ? 3 : -1);
        ASSERT_TRUE(y.defined());
        ASSERT_EQ(y.dims(), z.dims());
        const std::vector<float> got = ToFloats(y);
        ASSERT_EQ(got.size(), want.size());
        const std::string what = absl::StrCat(DataTypeName(dt), subnormal ? " subnormal" : "",
                                              over_z ? ", Y over Z" : "");
        for (size_t i = 0; i < got.size(); ++i) {
          // 18 products of N(0, 1) values, the bias and Z summed in fp32 in two orders: far
          // below 1e-4 apart; bf16 and fp16 add half an output ulp on each side.
          ASSERT_LE(std::fabs(got[i] - want[i]),
                    1e-4 + RoundingRel(dt) * std::fabs(want[i]) + RoundingAbs(dt))
              << what << " element " << i << ": " << got[i] << " vs " << want[i];
        }
      }
    }
  }
}

// `Supports` does not ask X's rank (an If branch's may be unknown at build time): X of rank 4
// under a 1-D W fails the run with the reference's error, naming the node.
TEST(DnnlConv1dTest, XRankUnlikeWIsTheReferenceError) {
  std::mt19937 rng(29);
  const ir::Tensor x = RandomNormal({1, 2, 3, 9}, DataType::kF32, rng);
  const ir::Tensor w = RandomNormal({3, 2, 3}, DataType::kF32, rng);
  ConvGraph graph(ir::OpType::kConv, {}, RandomNormal({1, 2, 9}, DataType::kF32, rng), w,
                  ir::Tensor());
  const kernels::KernelDef* def = graph.Def(DetectCpuFeatures());
  ASSERT_TRUE(def);
  ASSERT_EQ(def->isa, Isa::kDnnl);
  auto fast = Make(*def, *graph.node);
  auto ref = Make(*graph.Def(0), *graph.node);
  ASSERT_TRUE(fast && ref);
  TensorContext fast_ctx({x, w}), ref_ctx({x, w});
  const absl::Status got = fast->Run(fast_ctx), want = ref->Run(ref_ctx);
  EXPECT_EQ(got.code(), absl::StatusCode::kInvalidArgument) << got;
  EXPECT_EQ(got, want);
  EXPECT_NE(got.message().find("test_node"), std::string::npos) << got;
}

TEST(DnnlConvTest, OtherCasesStayOnTheReference) {
  std::mt19937 rng(3);
  const uint64_t cpu = DetectCpuFeatures();
  // W not constant.
  ConvGraph input_w(ir::OpType::kConv, {}, RandomNormal({1, 2, 5, 5}, DataType::kF32, rng),
                    RandomNormal({3, 2, 3, 3}, DataType::kF32, rng), ir::Tensor(), false);
  EXPECT_EQ(input_w.Def(cpu)->isa, Isa::kRef);
  // 1-D runs on oneDNN (DnnlConv1dTest), but not channels-last (the layout pass makes only
  // rank-4 convolutions channels-last; the kernel's NHWC view is rank 4). 3-D stays on the
  // reference.
  ConvGraph conv1d(ir::OpType::kConv, {}, RandomNormal({1, 2, 9}, DataType::kF32, rng),
                   RandomNormal({3, 2, 3}, DataType::kF32, rng), ir::Tensor());
  EXPECT_EQ(conv1d.Def(cpu)->isa, Isa::kDnnl);
  ConvGraph conv1d_nlc(ir::OpType::kConv, {{kernels::kChannelsLastAttr, IntAttr(1)}},
                       RandomNormal({1, 9, 2}, DataType::kF32, rng),
                       RandomNormal({3, 2, 3}, DataType::kF32, rng), ir::Tensor());
  EXPECT_EQ(conv1d_nlc.Def(cpu)->isa, Isa::kRef);
  ConvGraph conv3d(ir::OpType::kConv, {}, RandomNormal({1, 2, 4, 4, 4}, DataType::kF32, rng),
                   RandomNormal({3, 2, 3, 3, 3}, DataType::kF32, rng), ir::Tensor());
  EXPECT_EQ(conv3d.Def(cpu)->isa, Isa::kRef);
  // fp16 without AVX-512 (the F16C conversions around the fp32 primitive are AVX-512 code).
  std::vector<float> xv(50, 0.5f), wv(54, 0.25f);
  ConvGraph fp16(ir::OpType::kConv, {}, MakeHalf({1, 2, 5, 5}, xv), MakeHalf({3, 2, 3, 3}, wv),
                 ir::Tensor());
  EXPECT_EQ(fp16.Def(kCpuSse42 | kCpuF16c)->isa, Isa::kRef);
  ConvGraph fp16_1d(ir::OpType::kConv, {}, MakeHalf({1, 2, 25}, xv), MakeHalf({3, 2, 9}, wv),
                    ir::Tensor());
  EXPECT_EQ(fp16_1d.Def(kCpuSse42 | kCpuF16c)->isa, Isa::kRef);
  if (HasAvx512()) {
    EXPECT_EQ(fp16.Def(cpu)->isa, Isa::kDnnl);
    EXPECT_EQ(fp16_1d.Def(cpu)->isa, Isa::kDnnl);
  }
  // An activation the reference FusedConv rejects: the reference reports it.
  ConvGraph gelu(ir::OpType::kFusedConv, {{"activation", StringAttr("Gelu")}},
                 RandomNormal({1, 2, 5, 5}, DataType::kF32, rng),
                 RandomNormal({3, 2, 3, 3}, DataType::kF32, rng), ir::Tensor());
  EXPECT_EQ(gelu.Def(cpu)->isa, Isa::kRef);
  // With SSE4.2 alone oneDNN's fp32 kernel is still chosen; bf16 needs AVX-512 BF16.
  ConvGraph f32(ir::OpType::kConv, {}, RandomNormal({1, 2, 5, 5}, DataType::kF32, rng),
                RandomNormal({3, 2, 3, 3}, DataType::kF32, rng), ir::Tensor());
  EXPECT_EQ(f32.Def(kCpuSse42)->isa, Isa::kDnnl);
  ConvGraph bf16(ir::OpType::kConv, {}, RandomNormal({1, 2, 5, 5}, DataType::kBF16, rng),
                 RandomNormal({3, 2, 3, 3}, DataType::kBF16, rng), ir::Tensor());
  EXPECT_EQ(bf16.Def(kCpuSse42)->isa, Isa::kRef);
  ConvGraph bf16_1d(ir::OpType::kConv, {}, RandomNormal({1, 2, 5}, DataType::kBF16, rng),
                    RandomNormal({3, 2, 3}, DataType::kBF16, rng), ir::Tensor());
  EXPECT_EQ(bf16_1d.Def(kCpuSse42)->isa, Isa::kRef);
  if (HasAvx512Bf16()) {
    EXPECT_EQ(bf16_1d.Def(cpu)->isa, Isa::kDnnl);
  }
  EXPECT_STREQ(kernels::IsaName(Isa::kDnnl), "dnnl");
}

}  // namespace
}  // namespace kiln::testing
