// The oneDNN ConvTranspose (kernels/cpu/dnnl/deconv_dnnl.cc) and the channels-first AVX-512
// pools (kernels/cpu/avx512/pool_nchw_ops.cc) against the reference kernels: ConvTranspose
// within a bound derived from fp32 summation order (it differs from the reference only in the
// order of its additions), the pools bit for bit (they visit the reference's cells in its
// order). 1-D, 2-D and 3-D, strides, dilations, pads, groups, output_padding, output_shape,
// auto_pad, ceil_mode, count_include_pad; fp32, fp16 and bf16; sizes not a multiple of 16.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/common/cpu_features.h"
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

// A one-node graph: input 0 a graph input, the others constants (W, B).
struct OneNode {
  OneNode(ir::OpType op, int since, const Attrs& attrs, const std::vector<ir::Tensor>& in) {
    node = g.AddNode(op, "test_node");
    node->since_version = since;
    for (const auto& [k, v] : attrs) node->attrs[k] = v;
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].defined()) break;
      ir::Value* v = *g.AddValue("in" + std::to_string(i));
      v->dtype = in[i].dtype();
      v->shape = ir::Shape::Of(in[i].dims());
      if (i == 0) {
        v->is_graph_input = true;
      } else {
        v->constant = in[i];
      }
      node->inputs.push_back(v);
    }
    ir::Value* y = *g.AddValue("out0");
    y->dtype = in[0].dtype();
    node->outputs.push_back(y);
    g.RebuildEdges();
  }
  // The kernel Registry::Find picks for `features`, made for the node, and run on `in`.
  ir::Tensor Run(uint64_t features, const std::vector<ir::Tensor>& in, Isa want) {
    auto def = kernels::Registry::Default().Find(*node, features);
    EXPECT_TRUE(def.ok()) << def.status();
    if (!def.ok()) return ir::Tensor();
    EXPECT_EQ((*def)->isa, want);
    auto k = (*def)->factory(*node);
    EXPECT_TRUE(k.ok()) << k.status();
    if (!k.ok()) return ir::Tensor();
    TensorContext ctx(in);
    absl::Status s = (*k)->Run(ctx);
    EXPECT_TRUE(s.ok()) << s;
    // A second run of the same kernel (its cached primitive or tables) gives the same bytes.
    TensorContext again(in);
    EXPECT_TRUE((*k)->Run(again).ok());
    if (s.ok()) {
      EXPECT_EQ(0,
                std::memcmp(ctx.out().raw_data(), again.out().raw_data(), ctx.out().byte_size()));
    }
    return s.ok() ? ctx.out() : ir::Tensor();
  }
  ir::Graph g;
  ir::Node* node = nullptr;
};

constexpr DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};

// ---------------------------------------------------------------- ConvTranspose

struct DeconvCase {
  const char* name;
  Dims x, w;  // W [C, M/g, k...]
  Attrs attrs;
};

std::vector<DeconvCase> DeconvCases() {
  return {
      {"ppocr_2x2_s2", {1, 16, 9, 11}, {16, 8, 2, 2}, {{"strides", IntsAttr({2, 2})}}},
      // Non-overlapping 2x (the AVX-512 path): one output channel, widths past 16, kh = 3.
      {"s2_m1_wide", {1, 24, 5, 37}, {24, 1, 2, 2}, {{"strides", IntsAttr({2, 2})}}},
      {"s3x2_k3x2", {2, 5, 4, 20}, {5, 3, 3, 2}, {{"strides", IntsAttr({3, 2})}}},
      // Blocks of 3 output channels by 32 columns (M a multiple of 3: PP-OCRv4's 24 -> 24 with a
      // width past 32, M = 6 and M = 3 at widths of 19 and 70), of 2 by 32 (M = 5 with a last
      // block of 1, kh = 3 and batch 2; M = 2 of width 1) and of 1 by 64 (M = 1, width 17).
      {"s2_m24_blocks4", {1, 24, 3, 45}, {24, 24, 2, 2}, {{"strides", IntsAttr({2, 2})}}},
      {"s2_m6_last_block2", {1, 7, 4, 19}, {7, 6, 2, 2}, {{"strides", IntsAttr({2, 2})}}},
      {"s3x2_m5_batch2", {2, 3, 3, 33}, {3, 5, 3, 2}, {{"strides", IntsAttr({3, 2})}}},
      {"s2_m3_wide", {1, 5, 2, 70}, {5, 3, 2, 2}, {{"strides", IntsAttr({2, 2})}}},
      {"s2_m2_width1", {1, 4, 3, 1}, {4, 2, 2, 2}, {{"strides", IntsAttr({2, 2})}}},
      {"s2_m1_width17", {1, 9, 2, 17}, {9, 1, 2, 2}, {{"strides", IntsAttr({2, 2})}}},
      {"3x3_pads", {2, 5, 7, 6}, {5, 7, 3, 3}, {{"pads", IntsAttr({1, 1, 1, 1})}}},
      {"s2_output_padding",
       {1, 4, 5, 7},
       {4, 6, 3, 3},
       {{"strides", IntsAttr({2, 2})},
        {"pads", IntsAttr({1, 1, 1, 1})},
        {"output_padding", IntsAttr({1, 1})}}},
      {"grouped_dilated",
       {1, 6, 6, 5},
       {6, 2, 3, 2},
       {{"group", IntAttr(3)}, {"dilations", IntsAttr({2, 1})}, {"strides", IntsAttr({1, 2})}}},
      {"depthwise",
       {1, 8, 10, 10},
       {8, 1, 4, 4},
       {{"group", IntAttr(8)}, {"strides", IntsAttr({2, 2})}, {"pads", IntsAttr({1, 1, 1, 1})}}},
      {"output_shape",
       {1, 3, 4, 5},
       {3, 2, 3, 3},
       {{"strides", IntsAttr({2, 2})}, {"output_shape", IntsAttr({8, 10})}}},
      {"same_upper",
       {1, 3, 5, 5},
       {3, 4, 3, 3},
       {{"strides", IntsAttr({2, 2})}, {"auto_pad", StringAttr("SAME_UPPER")}}},
      {"same_lower",
       {1, 3, 5, 4},
       {3, 4, 4, 4},
       {{"strides", IntsAttr({2, 2})}, {"auto_pad", StringAttr("SAME_LOWER")}}},
      {"asymmetric_pads", {1, 4, 6, 7}, {4, 3, 3, 3}, {{"pads", IntsAttr({0, 1, 2, 1})}}},
      {"1d", {2, 5, 17}, {5, 3, 4}, {{"strides", IntsAttr({3})}, {"pads", IntsAttr({1, 2})}}},
      {"1d_grouped", {1, 4, 9}, {4, 3, 3}, {{"group", IntAttr(2)}}},
      {"3d", {1, 3, 4, 5, 3}, {3, 4, 2, 3, 2}, {{"strides", IntsAttr({2, 1, 2})}}},
      {"3d_grouped_pads",
       {1, 4, 3, 4, 5},
       {4, 2, 3, 3, 3},
       {{"group", IntAttr(2)}, {"pads", IntsAttr({1, 0, 1, 1, 0, 1})}}},
      // Larger than the natural size: negative pads, which oneDNN does not take (reference).
      {"output_shape_larger", {1, 2, 3, 3}, {2, 2, 2, 2}, {{"output_shape", IntsAttr({6, 6})}}},
  };
}

void CheckDeconv(const DeconvCase& cs, bool bias, DataType dt, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << cs.name << " bias=" << bias << " " << DataTypeName(dt));
  const int64_t group = [&] {
    for (const auto& [k, v] : cs.attrs) {
      if (k == "group") return v.i;
    }
    return int64_t{1};
  }();
  const ir::Tensor x = RandomNormal(cs.x, dt, rng), w = RandomNormal(cs.w, dt, rng);
  const ir::Tensor b = bias ? RandomNormal({cs.w[1] * group}, dt, rng) : ir::Tensor();
  OneNode graph(ir::OpType::kConvTranspose, 22, cs.attrs, {x, w, b});
  const ir::Tensor fast = graph.Run(DetectCpuFeatures(), {x, w, b}, Isa::kDnnl);
  const ir::Tensor ref = graph.Run(0, {x, w, b}, Isa::kRef);
  ASSERT_TRUE(fast.defined() && ref.defined());
  ASSERT_EQ(fast.dims(), ref.dims());
  // sum |w * x| + |b| per output element: the reference ConvTranspose on absolute values.
  const ir::Tensor ax = AbsToFloat(x), aw = AbsToFloat(w), ab = bias ? AbsToFloat(b) : ir::Tensor();
  OneNode abs_graph(ir::OpType::kConvTranspose, 22, cs.attrs, {ax, aw, ab});
  const std::vector<float> mag = ToFloats(abs_graph.Run(0, {ax, aw, ab}, Isa::kRef));
  // Both kernels add the same K + 1 terms (at most C/g * taps products, and the bias) in fp32 in
  // different orders: each within (K + 1) * 2^-24 * sum|terms| of the exact sum, so at most
  // twice that apart. bf16 and fp16 outputs add one rounding on each side (half an ulp,
  // relative 2^-8 or 2^-11 each), fp16 subnormals half of 2^-24 each; their products are exact
  // in fp32, so the fp32 bound holds unchanged.
  int64_t k = cs.x[1] / group;
  for (size_t i = 2; i < cs.w.size(); ++i) k *= cs.w[i];
  const double rel = dt == DataType::kBF16 ? 0x1p-7 : dt == DataType::kF16 ? 0x1p-10 : 0.0;
  const double abs = dt == DataType::kF16 ? 0x1p-24 : 0.0;
  const std::vector<float> got = ToFloats(fast), want = ToFloats(ref);
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = 2.0 * (k + 1) * 0x1p-24 * mag[i] + rel * std::fabs(want[i]) + abs;
    ASSERT_LE(std::fabs(got[i] - want[i]), bound)
        << "element " << i << ": " << got[i] << " vs " << want[i];
  }
}

TEST(DeconvDnnl, MatchesReferenceEveryForm) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "needs AVX-512 with BF16";
  std::mt19937 rng(11);
  for (DataType dt : kTypes) {
    for (const DeconvCase& cs : DeconvCases()) {
      for (bool bias : {false, true}) CheckDeconv(cs, bias, dt, rng);
    }
  }
}

// A W that is not a constant (a graph input) stays on the reference kernel.
TEST(DeconvDnnl, NonConstantWeightsUseTheReference) {
  ir::Graph g;
  ir::Node* node = g.AddNode(ir::OpType::kConvTranspose, "test_node");
  node->since_version = 22;
  for (int i = 0; i < 2; ++i) {
    ir::Value* v = *g.AddValue("in" + std::to_string(i));
    v->dtype = DataType::kF32;
    v->is_graph_input = true;
    node->inputs.push_back(v);
  }
  ir::Value* y = *g.AddValue("y");
  y->dtype = DataType::kF32;
  node->outputs.push_back(y);
  g.RebuildEdges();
  auto def = kernels::Registry::Default().Find(*node, DetectCpuFeatures());
  ASSERT_TRUE(def.ok());
  EXPECT_EQ((*def)->isa, Isa::kRef);
}

TEST(DeconvDnnl, ErrorsAreTheReferences) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "needs AVX-512 with BF16";
  NodeSpec spec;
  spec.op = ir::OpType::kConvTranspose;
  spec.since_version = 22;
  spec.constant_inputs = {1};
  spec.inputs = {MakeFloat({1, 3, 4, 4}, Iota(48, 0)), MakeFloat({2, 2, 1, 1}, Iota(4, 0))};
  ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "");
}

// ---------------------------------------------------------------- pools

struct PoolCase {
  const char* name;
  Dims x;
  Attrs attrs;
};

std::vector<PoolCase> PoolCases() {
  return {
      {"2x2_s2",
       {1, 3, 8, 10},
       {{"kernel_shape", IntsAttr({2, 2})}, {"strides", IntsAttr({2, 2})}}},
      {"3x3_s1_pads_odd",
       {2, 3, 9, 37},
       {{"kernel_shape", IntsAttr({3, 3})}, {"pads", IntsAttr({1, 1, 1, 1})}}},
      {"spp_13x13",
       {1, 2, 20, 20},
       {{"kernel_shape", IntsAttr({13, 13})}, {"pads", IntsAttr({6, 6, 6, 6})}}},
      {"3x3_s2_ceil",
       {1, 2, 10, 11},
       {{"kernel_shape", IntsAttr({3, 3})},
        {"strides", IntsAttr({2, 2})},
        {"ceil_mode", IntAttr(1)}}},
      {"ceil_pads",
       {1, 2, 7, 8},
       {{"kernel_shape", IntsAttr({3, 2})},
        {"strides", IntsAttr({2, 3})},
        {"pads", IntsAttr({1, 0, 1, 1})},
        {"ceil_mode", IntAttr(1)}}},
      {"dilated",
       {1, 2, 12, 19},
       {{"kernel_shape", IntsAttr({3, 3})},
        {"dilations", IntsAttr({2, 3})},
        {"pads", IntsAttr({2, 1, 0, 2})}}},
      {"same_upper",
       {1, 2, 7, 9},
       {{"kernel_shape", IntsAttr({4, 3})},
        {"strides", IntsAttr({2, 2})},
        {"auto_pad", StringAttr("SAME_UPPER")}}},
      {"same_lower",
       {1, 2, 7, 9},
       {{"kernel_shape", IntsAttr({4, 3})}, {"auto_pad", StringAttr("SAME_LOWER")}}},
      {"1d",
       {2, 3, 35},
       {{"kernel_shape", IntsAttr({4})}, {"strides", IntsAttr({3})}, {"pads", IntsAttr({2, 1})}}},
      {"3d",
       {1, 2, 5, 6, 19},
       {{"kernel_shape", IntsAttr({2, 3, 3})},
        {"strides", IntsAttr({1, 2, 2})},
        {"pads", IntsAttr({0, 1, 1, 1, 0, 1})}}},
      {"large_s1",
       {1, 8, 40, 40},
       {{"kernel_shape", IntsAttr({5, 5})}, {"pads", IntsAttr({2, 2, 2, 2})}}},
  };
}

ir::Tensor PoolInput(const Dims& dims, DataType dt, std::mt19937& rng, bool nan) {
  std::normal_distribution<float> d(0.0f, 2.0f);
  int64_t n = 1;
  for (int64_t v : dims) n *= v;
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  if (nan) {  // NaN cells (skipped by MaxPool, kept by the averages), -0, an infinity
    for (int64_t i = 0; i < n; i += 7) v[i] = std::numeric_limits<float>::quiet_NaN();
    v[n / 3] = -0.0f;
    v[n / 2] = -std::numeric_limits<float>::infinity();
  }
  if (dt == DataType::kF16) return MakeHalf(dims, v);
  return dt == DataType::kBF16 ? MakeBf16(dims, v) : MakeFloat(dims, v);
}

void ExpectSameBytes(const ir::Tensor& a, const ir::Tensor& b) {
  ASSERT_TRUE(a.defined() && b.defined());
  ASSERT_EQ(a.dims(), b.dims());
  ASSERT_EQ(0, std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()));
}

TEST(PoolNchw, WindowedPoolsBitForBit) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "needs AVX-512 with BF16";
  std::mt19937 rng(5);
  for (DataType dt : kTypes) {
    for (const PoolCase& cs : PoolCases()) {
      for (bool nan : {false, true}) {
        const ir::Tensor x = PoolInput(cs.x, dt, rng, nan);
        SCOPED_TRACE(::testing::Message() << cs.name << " " << DataTypeName(dt) << " nan=" << nan);
        OneNode max(ir::OpType::kMaxPool, 12, cs.attrs, {x});
        ExpectSameBytes(max.Run(DetectCpuFeatures(), {x}, Isa::kAvx512),
                        max.Run(0, {x}, Isa::kRef));
        for (int include : {0, 1}) {
          Attrs attrs = cs.attrs;
          attrs.push_back({"count_include_pad", IntAttr(include)});
          OneNode avg(ir::OpType::kAveragePool, 19, attrs, {x});
          ExpectSameBytes(avg.Run(DetectCpuFeatures(), {x}, Isa::kAvx512),
                          avg.Run(0, {x}, Isa::kRef));
        }
      }
    }
  }
}

TEST(PoolNchw, GlobalPoolsBitForBit) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "needs AVX-512 with BF16";
  std::mt19937 rng(9);
  for (DataType dt : kTypes) {
    for (const Dims& dims : std::vector<Dims>{{1, 3, 7, 9},
                                              {2, 37, 5, 5},
                                              {1, 40, 1, 1},
                                              {2, 5, 33},
                                              {1, 17, 2, 3, 4},
                                              {3, 16},
                                              {6, 64, 1, 256}}) {
      for (bool nan : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << ir::DimsToString(dims) << " " << DataTypeName(dt) << " nan=" << nan);
        const ir::Tensor x = PoolInput(dims, dt, rng, nan);  // NaN first in plane 0
        for (ir::OpType op : {ir::OpType::kGlobalAveragePool, ir::OpType::kGlobalMaxPool}) {
          OneNode g(op, 1, {}, {x});
          ExpectSameBytes(g.Run(DetectCpuFeatures(), {x}, Isa::kAvx512), g.Run(0, {x}, Isa::kRef));
        }
      }
    }
  }
}

// GlobalMaxPool's ties between -0 and +0 (the reference keeps the first zero it meets) and a
// NaN first element (kept), on long planes (lanes within a plane) and short ones (16 planes).
TEST(PoolNchw, GlobalMaxZeroSignsAndLeadingNaN) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "needs AVX-512 with BF16";
  for (int64_t size : {5, 40, 100}) {
    std::vector<float> v;
    for (int plane = 0; plane < 6; ++plane) {
      for (int64_t i = 0; i < size; ++i) v.push_back(-1.0f - static_cast<float>(i % 7));
      float* p = v.data() + plane * size;
      switch (plane) {
        case 0:  // -0 first, +0 later
          p[size / 2] = -0.0f;
          p[size - 1] = 0.0f;
          break;
        case 1:  // +0 first, -0 later
          p[1] = 0.0f;
          p[size - 2] = -0.0f;
          break;
        case 2:  // a zero first element
          p[0] = -0.0f;
          p[size - 1] = 0.0f;
          break;
        case 3:  // a NaN first element
          p[0] = std::numeric_limits<float>::quiet_NaN();
          break;
        case 4:  // NaN later, ignored
          p[size - 1] = std::numeric_limits<float>::quiet_NaN();
          break;
        default:
          break;
      }
    }
    for (DataType dt : kTypes) {
      SCOPED_TRACE(::testing::Message() << "size " << size << " " << DataTypeName(dt));
      const Dims dims = {2, 3, size};
      const ir::Tensor x = dt == DataType::kF16    ? MakeHalf(dims, v)
                           : dt == DataType::kBF16 ? MakeBf16(dims, v)
                                                   : MakeFloat(dims, v);
      OneNode g(ir::OpType::kGlobalMaxPool, 1, {}, {x});
      ExpectSameBytes(g.Run(DetectCpuFeatures(), {x}, Isa::kAvx512), g.Run(0, {x}, Isa::kRef));
    }
  }
}

// ---------------------------------------------------------------- BatchNormalization

// Inference BatchNormalization on channels-first X of rank 2 to 5 (avx512/batchnorm_nchw.h,
// through norm_ops.cc) bit for bit: the reference's four fp32 operations per element. Channel
// counts and planes not a multiple of 16, a plane large enough to be split between chunks, fp16
// parameters with fp32 X.
TEST(BatchNormNchw, BitForBit) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "needs AVX-512 with BF16";
  std::mt19937 rng(3);
  for (DataType dt : kTypes) {
    for (const Dims& dims :
         std::vector<Dims>{{3, 5}, {2, 7, 19}, {1, 24, 9, 13}, {2, 3, 4, 5, 6}, {1, 2, 100, 90}}) {
      for (DataType pdt : {dt, DataType::kF16}) {
        SCOPED_TRACE(::testing::Message() << ir::DimsToString(dims) << " " << DataTypeName(dt)
                                          << " params " << DataTypeName(pdt));
        const int64_t c = dims[1];
        const ir::Tensor x = RandomNormal(dims, dt, rng);
        ir::Tensor scale = RandomNormal({c}, pdt, rng), bias = RandomNormal({c}, pdt, rng);
        ir::Tensor mean = RandomNormal({c}, pdt, rng),
                   var = AbsToFloat(RandomNormal({c}, pdt, rng));
        if (pdt == DataType::kF16) var = MakeHalf({c}, ToFloats(var));
        OneNode bn(ir::OpType::kBatchNormalization, 15, {{"epsilon", FloatAttr(1e-3f)}},
                   {x, scale, bias, mean, var});
        ExpectSameBytes(bn.Run(DetectCpuFeatures(), {x, scale, bias, mean, var}, Isa::kAvx512),
                        bn.Run(0, {x, scale, bias, mean, var}, Isa::kRef));
      }
    }
  }
}

TEST(PoolNchw, ErrorsAreTheReferences) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "needs AVX-512 with BF16";
  NodeSpec spec;
  spec.op = ir::OpType::kMaxPool;
  spec.since_version = 12;
  spec.attrs = {{"kernel_shape", IntsAttr({2, 2})}};
  spec.inputs = {MakeFloat({1, 2, 3}, Iota(6, 0))};
  ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "kernel_shape");
  spec.op = ir::OpType::kGlobalAveragePool;
  spec.attrs = {};
  spec.inputs = {MakeFloat({3}, Iota(3, 0))};
  ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "rank");
}

}  // namespace
}  // namespace kiln::testing
