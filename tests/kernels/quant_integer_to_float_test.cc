// ConvIntegerToFloat and MatMulIntegerToFloat (engine/ir/ops.def; cpu/ref/quant_integer.cc,
// cpu/avx512/quant_integer_ops.cc): y = float(ConvInteger(...) / MatMulInteger(...) [+ B]) *
// scale. The reference kernel is
// checked against the separate reference nodes it replaces (ConvInteger, Add, Cast, Mul), bit
// for bit, and the AVX-512 VNNI kernel against the reference, bit for bit: uint8 / int8 X and W,
// every zero-point form, B absent / one value / per channel ([M, 1, 1], [1, M, 1, 1], 1-D
// [M, 1]), scale one value / per channel, odd sizes, rows wider than one vector at strides 1
// and 2 (the im2col's vector paths), pads, groups, 1-D, sums rounded by
// the int32 -> fp32 conversion (above 2^24) and an int32 Add that wraps. Bad B / scale forms give
// an error naming the node and the input. Skipped where the CPU lacks AVX-512 VNNI (the
// reference checks run everywhere). MatMulIntegerToFloat likewise against MatMulInteger, Add,
// Cast and Mul: B and scale one value or per column ([N], [1, N], [1, 1, N]), N not a multiple of
// 16 and exactly 16, K not a multiple of 4, batched A and B, 1-D A and B, every zero-point form,
// B constant and computed.
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // NodeSpec{op}

namespace kiln::testing {
namespace {

using ir::OpType;
using kernels::Isa;

const uint64_t kFeatures = kernels::IsaCpuFeatures(Isa::kAvx512) | kCpuAvx512Vnni;

bool HasFastKernel() { return (DetectCpuFeatures() & kFeatures) == kFeatures; }

ir::Tensor IntData(DataType dtype, const std::vector<int64_t>& dims, std::mt19937& rng) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::uniform_int_distribution<int> u(dtype == DataType::kU8 ? 0 : -128,
                                       dtype == DataType::kU8 ? 255 : 127);
  if (dtype == DataType::kU8) {
    std::vector<uint8_t> v(n);
    for (auto& e : v) e = static_cast<uint8_t>(u(rng));
    return MakeTensor<uint8_t>(dims, v, dtype);
  }
  std::vector<int8_t> v(n);
  for (auto& e : v) e = static_cast<int8_t>(u(rng));
  return MakeTensor<int8_t>(dims, v, dtype);
}

// int32 biases: small ones, ones that push sums past 2^24 (the conversion rounds) and ones near
// the int32 limits (the Add wraps).
ir::Tensor BiasData(const std::vector<int64_t>& dims, std::mt19937& rng) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::uniform_int_distribution<int32_t> small(-5000, 5000);
  std::vector<int32_t> v(n);
  for (int64_t i = 0; i < n; ++i) {
    switch (i % 4) {
      case 0:
      case 1:
        v[i] = small(rng);
        break;
      case 2:
        v[i] = (1 << 25) + small(rng);  // odd sums above 2^24: round to even in fp32
        break;
      default:
        v[i] = std::numeric_limits<int32_t>::max() - 1000 + small(rng) / 10;  // wraps
    }
  }
  return MakeTensor<int32_t>(dims, v, DataType::kI32);
}

ir::Tensor ScaleData(const std::vector<int64_t>& dims, std::mt19937& rng) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::uniform_real_distribution<float> u(1e-5f, 3e-2f);
  std::vector<float> v(n);
  for (auto& e : v) e = u(rng);
  return MakeTensor<float>(dims, v, DataType::kF32);
}

void ExpectSameBits(const ir::Tensor& a, const ir::Tensor& b) {
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.dims(), b.dims());
  const size_t es = DataTypeSize(a.dtype());
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    if (std::memcmp(static_cast<const uint8_t*>(a.raw_data()) + i * es,
                    static_cast<const uint8_t*>(b.raw_data()) + i * es, es) != 0) {
      ADD_FAILURE() << "element " << i << ": " << ir::ElementAsDouble(a, i) << " vs "
                    << ir::ElementAsDouble(b, i);
      return;
    }
  }
}

struct ConvCase {
  std::string name;
  std::vector<int64_t> x, w;
  std::vector<std::pair<std::string, ir::Attribute>> attrs;
};

std::vector<ConvCase> Cases() {
  return {
      {"3x3 pad 1 odd", {1, 5, 9, 11}, {7, 5, 3, 3}, {{"pads", IntsAttr({1, 1, 1, 1})}}},
      {"3x3 stride 2 batch 2",
       {2, 3, 13, 17},
       {20, 3, 3, 3},
       {{"pads", IntsAttr({1, 1, 1, 1})}, {"strides", IntsAttr({2, 2})}}},
      {"1x1", {1, 24, 8, 21}, {33, 24, 1, 1}, {}},
      // Rows wider than one 64-byte vector (stride 1) and one 32-column step (stride 2).
      {"wide rows", {1, 2, 5, 150}, {3, 2, 3, 3}, {{"pads", IntsAttr({1, 1, 1, 1})}}},
      {"wide rows stride 2",
       {1, 4, 7, 83},
       {5, 4, 3, 3},
       {{"pads", IntsAttr({1, 1, 1, 1})}, {"strides", IntsAttr({2, 2})}}},
      {"group 2 stride 3",
       {1, 6, 11, 14},
       {8, 3, 2, 3},
       {{"group", IntAttr(2)}, {"strides", IntsAttr({3, 3})}}},
      {"1-D", {2, 40, 37}, {17, 40, 3}, {{"pads", IntsAttr({1, 1})}, {"strides", IntsAttr({2})}}},
  };
}

// Per-channel dims for an output of `rank` with `m` channels: [M, 1, ...] (rank - 1) or, with
// `leading_one`, [1, M, 1, ...] (rank).
std::vector<int64_t> ChannelDims(int64_t m, int rank, bool leading_one) {
  std::vector<int64_t> d(leading_one ? rank : rank - 1, 1);
  d[leading_one ? 1 : 0] = m;
  return d;
}

// The fused node's inputs for a case: X, W, zero points (form zp: 0 none, 1 per tensor, 2 w per
// channel), B (form b: 0 none, 1 one value, 2 [M, 1..], 3 [1, M, 1..]), scale (form s: 0 one
// value, 1 [M, 1..], 2 [1, M, 1..]).
std::vector<ir::Tensor> Inputs(const ConvCase& c, DataType xt, DataType wt, int zp, int b, int s,
                               std::mt19937& rng) {
  const int64_t m = c.w[0];
  const int rank = static_cast<int>(c.x.size());
  std::vector<ir::Tensor> in = {IntData(xt, c.x, rng), IntData(wt, c.w, rng), ir::Tensor(),
                                ir::Tensor()};
  if (zp >= 1) in[2] = IntData(xt, {}, rng);
  if (zp == 1) in[3] = IntData(wt, {}, rng);
  if (zp == 2) in[3] = IntData(wt, {m}, rng);
  if (b == 0) in.push_back(ir::Tensor());
  if (b == 1) in.push_back(BiasData({}, rng));
  if (b >= 2) in.push_back(BiasData(ChannelDims(m, rank, b == 3), rng));
  in.push_back(s == 0 ? ScaleData({1}, rng) : ScaleData(ChannelDims(m, rank, s == 2), rng));
  return in;
}

NodeSpec Fused(const ConvCase& c, std::vector<ir::Tensor> inputs) {
  NodeSpec s{OpType::kConvIntegerToFloat};
  s.since_version = 1;
  s.attrs = c.attrs;
  s.inputs = std::move(inputs);
  s.constant_inputs = {1};
  return s;
}

// The separate reference nodes: ConvInteger, Add(B), Cast(to float), Mul(scale).
ir::Tensor Separate(const ConvCase& c, const std::vector<ir::Tensor>& in) {
  NodeSpec conv{OpType::kConvInteger};
  conv.since_version = 10;
  conv.attrs = c.attrs;
  conv.inputs = {in[0], in[1], in[2], in[3]};
  conv.cpu_features = 0;
  ir::Tensor acc = RunNodeOk0(conv);
  if (in[4].defined()) {
    NodeSpec add{OpType::kAdd};
    add.since_version = 14;
    add.inputs = {acc, in[4]};
    add.cpu_features = 0;
    acc = RunNodeOk0(add);
  }
  NodeSpec cast{OpType::kCast, {{"to", IntAttr(static_cast<int64_t>(DataType::kF32))}}};
  cast.since_version = 13;
  cast.inputs = {acc};
  cast.output_dtypes = {DataType::kF32};
  cast.cpu_features = 0;
  NodeSpec mul{OpType::kMul};
  mul.since_version = 14;
  mul.inputs = {RunNodeOk0(cast), in[5]};
  mul.cpu_features = 0;
  return RunNodeOk0(mul);
}

TEST(ConvIntegerToFloat, ReferenceIsTheSeparateNodes) {
  std::mt19937 rng(11);
  for (const ConvCase& c : Cases()) {
    for (int b = 0; b < 4; ++b) {
      for (int s = 0; s < 3; ++s) {
        SCOPED_TRACE(c.name + " B form " + std::to_string(b) + " scale form " + std::to_string(s));
        const std::vector<ir::Tensor> in = Inputs(c, DataType::kU8, DataType::kI8, 2, b, s, rng);
        NodeSpec f = Fused(c, in);
        f.cpu_features = 0;
        ExpectSameBits(RunNodeOk0(f), Separate(c, in));
      }
    }
  }
}

TEST(ConvIntegerToFloat, FastKernelMatchesReference) {
  if (!HasFastKernel()) GTEST_SKIP() << "CPU lacks AVX-512 VNNI";
  std::mt19937 rng(12);
  for (const ConvCase& c : Cases()) {
    for (DataType xt : {DataType::kU8, DataType::kI8}) {
      for (DataType wt : {DataType::kU8, DataType::kI8}) {
        for (int zp = 0; zp < 3; ++zp) {
          for (int b = 0; b < 4; ++b) {
            const int s = (zp + b) % 3;
            SCOPED_TRACE(c.name + " " + DataTypeName(xt) + " x " + DataTypeName(wt) + " zp form " +
                         std::to_string(zp) + " B form " + std::to_string(b) + " scale form " +
                         std::to_string(s));
            NodeSpec f = Fused(c, Inputs(c, xt, wt, zp, b, s, rng));
            f.runs = 2;  // W packed at the first run, reused at the second
            const ir::Tensor fast = RunNodeOk0(f);
            f.cpu_features = 0;
            ExpectSameBits(fast, RunNodeOk0(f));
          }
        }
      }
    }
  }
}

TEST(ConvIntegerToFloat, RegistryPicksTheFastKernel) {
  if (!HasFastKernel()) GTEST_SKIP() << "CPU lacks AVX-512 VNNI";
  ir::Graph g;
  ir::Node* node = g.AddNode(OpType::kConvIntegerToFloat, "pick");
  auto x = g.AddValue("x");
  auto w = g.AddValue("w");
  ASSERT_TRUE(x.ok() && w.ok());
  (*x)->dtype = DataType::kU8;
  (*w)->dtype = DataType::kI8;
  std::mt19937 rng(13);
  (*w)->constant = IntData(DataType::kI8, {4, 2, 3, 3}, rng);
  node->inputs = {*x, *w};
  auto fast = kernels::Registry::Default().Find(*node, kFeatures);
  ASSERT_TRUE(fast.ok()) << fast.status();
  EXPECT_EQ((*fast)->isa, Isa::kAvx512);
  auto ref = kernels::Registry::Default().Find(*node, 0);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ((*ref)->isa, Isa::kRef);
}

TEST(ConvIntegerToFloat, BadBiasAndScaleFormsNameTheInput) {
  std::mt19937 rng(14);
  const ConvCase c = Cases()[0];  // output [1, 7, 9, 11]
  for (const std::optional<uint64_t> features :
       {std::optional<uint64_t>{0}, std::optional<uint64_t>{}}) {
    if (!features && !HasFastKernel()) continue;
    std::vector<ir::Tensor> in = Inputs(c, DataType::kU8, DataType::kU8, 1, 2, 1, rng);
    // [M] broadcasts along the last spatial axis, not the channels.
    in[4] = BiasData({7}, rng);
    NodeSpec f = Fused(c, in);
    f.cpu_features = features;
    ExpectNodeError(f, absl::StatusCode::kInvalidArgument, "B of shape [7]");
    in[4] = ScaleData({7, 1, 1}, rng);  // a float B
    f = Fused(c, in);
    f.cpu_features = features;
    ExpectNodeError(f, absl::StatusCode::kInvalidArgument, "B dtype float");
    in[4] = ir::Tensor();
    in[5] = ScaleData({1, 1, 9, 1}, rng);  // per row, not per channel
    f = Fused(c, in);
    f.cpu_features = features;
    ExpectNodeError(f, absl::StatusCode::kInvalidArgument, "scale of shape [1,1,9,1]");
    in[5] = BiasData({}, rng);  // an int32 scale
    f = Fused(c, in);
    f.cpu_features = features;
    ExpectNodeError(f, absl::StatusCode::kInvalidArgument, "scale dtype int32");
    in.pop_back();  // no scale
    f = Fused(c, in);
    f.cpu_features = features;
    ExpectNodeError(f, absl::StatusCode::kInvalidArgument, "");
  }
}

// ---- MatMulIntegerToFloat -------------------------------------------------------------------

struct MatMulCase {
  std::string name;
  std::vector<int64_t> a, b;
  bool b_constant;
};

std::vector<MatMulCase> MatMulCases() {
  return {
      {"N 37", {5, 40}, {40, 37}, true},
      {"K 19 N 16", {7, 19}, {19, 16}, true},         // full panels: unmasked stores
      {"batched A", {2, 3, 13, 21}, {21, 70}, true},  // rank-4 A, 5 panels (2 tile widths)
      {"batched B", {2, 6, 11}, {2, 11, 33}, false},  // a B per matrix, computed
      {"many tiles", {1, 64, 50}, {50, 48}, false},   // 11 row tiles of 6
      {"1-D A", {13}, {13, 20}, true},                // y [20]
      {"1-D B", {9, 33}, {33}, true},                 // y [9]: one column
  };
}

// The output of a case (numpy.matmul rules) and its column count N.
std::vector<int64_t> MatMulOut(const MatMulCase& c, int64_t& n) {
  std::vector<int64_t> a = c.a, b = c.b;
  const bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  std::vector<int64_t> out;
  const size_t batch = std::max(a.size(), b.size()) - 2;
  for (size_t i = 0; i < batch; ++i) {
    const int64_t da = i + a.size() >= batch + 2 ? a[i + a.size() - batch - 2] : 1;
    const int64_t db = i + b.size() >= batch + 2 ? b[i + b.size() - batch - 2] : 1;
    out.push_back(std::max(da, db));
  }
  if (!a1) out.push_back(a[a.size() - 2]);
  if (!b1) out.push_back(b.back());
  n = b.back();
  return out;
}

// Per-column dims for an output of `rank`: [N] (form 0) or [1, ..., 1, N] of the output's rank
// (form 1).
std::vector<int64_t> ColumnDims(int64_t n, int rank, int form) {
  if (form == 0 || rank <= 1) return {n};
  std::vector<int64_t> d(rank, 1);
  d.back() = n;
  return d;
}

// The fused node's inputs: A, B, zero points (form zp: 0 none, 1 per tensor, 2 B per column,
// 3 A per row), B (form b: 0 none, 1 one value, 2 [N], 3 [1, .., N]), scale (form s: 0 [1],
// 1 [N], 2 [1, .., N]). A 1-D B has one column: its per-column forms are one value.
std::vector<ir::Tensor> MatMulInputs(const MatMulCase& c, DataType at, DataType bt, int zp, int b,
                                     int s, std::mt19937& rng) {
  int64_t n = 0;
  const int rank = static_cast<int>(MatMulOut(c, n).size());
  const int64_t cols = c.b.size() == 1 ? 1 : n;
  std::vector<ir::Tensor> in = {IntData(at, c.a, rng), IntData(bt, c.b, rng), ir::Tensor(),
                                ir::Tensor()};
  if (zp >= 1) in[2] = IntData(at, {}, rng);
  if (zp == 1 || (zp == 2 && c.b.size() == 1)) in[3] = IntData(bt, {}, rng);
  if (zp == 2 && c.b.size() > 1) in[3] = IntData(bt, {n}, rng);
  if (zp == 3 && c.a.size() >= 2) in[2] = IntData(at, {c.a[c.a.size() - 2]}, rng);
  if (b == 0) in.push_back(ir::Tensor());
  if (b == 1) in.push_back(BiasData({}, rng));
  if (b >= 2) in.push_back(BiasData(ColumnDims(cols, rank, b - 2), rng));
  in.push_back(s == 0 ? ScaleData({1}, rng) : ScaleData(ColumnDims(cols, rank, s - 1), rng));
  return in;
}

NodeSpec MatMulFused(const MatMulCase& c, std::vector<ir::Tensor> inputs) {
  NodeSpec s{OpType::kMatMulIntegerToFloat};
  s.since_version = 1;
  s.inputs = std::move(inputs);
  if (c.b_constant) s.constant_inputs = {1};
  return s;
}

// The separate reference nodes: MatMulInteger, Add(B), Cast(to float), Mul(scale).
ir::Tensor MatMulSeparate(const std::vector<ir::Tensor>& in) {
  NodeSpec mm{OpType::kMatMulInteger};
  mm.since_version = 10;
  mm.inputs = {in[0], in[1], in[2], in[3]};
  mm.cpu_features = 0;
  ir::Tensor acc = RunNodeOk0(mm);
  if (in[4].defined()) {
    NodeSpec add{OpType::kAdd};
    add.since_version = 14;
    add.inputs = {acc, in[4]};
    add.cpu_features = 0;
    acc = RunNodeOk0(add);
  }
  NodeSpec cast{OpType::kCast, {{"to", IntAttr(static_cast<int64_t>(DataType::kF32))}}};
  cast.since_version = 13;
  cast.inputs = {acc};
  cast.output_dtypes = {DataType::kF32};
  cast.cpu_features = 0;
  NodeSpec mul{OpType::kMul};
  mul.since_version = 14;
  mul.inputs = {RunNodeOk0(cast), in[5]};
  mul.cpu_features = 0;
  return RunNodeOk0(mul);
}

TEST(MatMulIntegerToFloat, ReferenceIsTheSeparateNodes) {
  std::mt19937 rng(21);
  for (const MatMulCase& c : MatMulCases()) {
    for (int b = 0; b < 4; ++b) {
      for (int s = 0; s < 3; ++s) {
        SCOPED_TRACE(c.name + " B form " + std::to_string(b) + " scale form " + std::to_string(s));
        const std::vector<ir::Tensor> in =
            MatMulInputs(c, DataType::kU8, DataType::kI8, 2, b, s, rng);
        NodeSpec f = MatMulFused(c, in);
        f.cpu_features = 0;
        ExpectSameBits(RunNodeOk0(f), MatMulSeparate(in));
      }
    }
  }
}

TEST(MatMulIntegerToFloat, FastKernelMatchesReference) {
  if (!HasFastKernel()) GTEST_SKIP() << "CPU lacks AVX-512 VNNI";
  std::mt19937 rng(22);
  for (const MatMulCase& c : MatMulCases()) {
    for (DataType at : {DataType::kU8, DataType::kI8}) {
      for (DataType bt : {DataType::kU8, DataType::kI8}) {
        for (int zp = 0; zp < 4; ++zp) {
          for (int b = 0; b < 4; ++b) {
            const int s = (zp + b) % 3;
            SCOPED_TRACE(c.name + " " + DataTypeName(at) + " x " + DataTypeName(bt) + " zp form " +
                         std::to_string(zp) + " B form " + std::to_string(b) + " scale form " +
                         std::to_string(s));
            const std::vector<ir::Tensor> in = MatMulInputs(c, at, bt, zp, b, s, rng);
            NodeSpec f = MatMulFused(c, in);
            f.runs = 2;  // a constant B packed at the first run, reused at the second
            const ir::Tensor fast = RunNodeOk0(f);
            f.cpu_features = 0;
            ExpectSameBits(fast, RunNodeOk0(f));
            if (zp == 0 && b == 3) ExpectSameBits(fast, MatMulSeparate(in));
          }
        }
      }
    }
  }
}

TEST(MatMulIntegerToFloat, RegistryPicksTheFastKernel) {
  if (!HasFastKernel()) GTEST_SKIP() << "CPU lacks AVX-512 VNNI";
  ir::Graph g;
  ir::Node* node = g.AddNode(OpType::kMatMulIntegerToFloat, "pick");
  auto a = g.AddValue("a");
  auto b = g.AddValue("b");
  ASSERT_TRUE(a.ok() && b.ok());
  (*a)->dtype = DataType::kI8;
  (*b)->dtype = DataType::kU8;
  node->inputs = {*a, *b};
  auto fast = kernels::Registry::Default().Find(*node, kFeatures);
  ASSERT_TRUE(fast.ok()) << fast.status();
  EXPECT_EQ((*fast)->isa, Isa::kAvx512);
  auto ref = kernels::Registry::Default().Find(*node, 0);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ((*ref)->isa, Isa::kRef);
}

TEST(MatMulIntegerToFloat, BadBiasAndScaleFormsNameTheInput) {
  std::mt19937 rng(23);
  const MatMulCase c = MatMulCases()[2];  // output [2, 3, 13, 70]
  for (const std::optional<uint64_t> features :
       {std::optional<uint64_t>{0}, std::optional<uint64_t>{}}) {
    if (!features && !HasFastKernel()) continue;
    std::vector<ir::Tensor> in = MatMulInputs(c, DataType::kU8, DataType::kU8, 1, 2, 1, rng);
    in[4] = BiasData({13, 1}, rng);  // per row, not per column
    NodeSpec f = MatMulFused(c, in);
    f.cpu_features = features;
    ExpectNodeError(f, absl::StatusCode::kInvalidArgument, "B of shape [13,1]");
    in[4] = ScaleData({70}, rng);  // a float B
    f = MatMulFused(c, in);
    f.cpu_features = features;
    ExpectNodeError(f, absl::StatusCode::kInvalidArgument, "B dtype float");
    in[4] = ir::Tensor();
    in[5] = ScaleData({1, 1, 1, 1, 70}, rng);  // would broadcast y to rank 5
    f = MatMulFused(c, in);
    f.cpu_features = features;
    ExpectNodeError(f, absl::StatusCode::kInvalidArgument, "scale of shape [1,1,1,1,70]");
    in[5] = ScaleData({69}, rng);
    f = MatMulFused(c, in);
    f.cpu_features = features;
    ExpectNodeError(f, absl::StatusCode::kInvalidArgument, "one per output column");
    in[5] = BiasData({70}, rng);  // an int32 scale
    f = MatMulFused(c, in);
    f.cpu_features = features;
    ExpectNodeError(f, absl::StatusCode::kInvalidArgument, "scale dtype int32");
    in.pop_back();  // no scale
    f = MatMulFused(c, in);
    f.cpu_features = features;
    ExpectNodeError(f, absl::StatusCode::kInvalidArgument, "");
  }
}

}  // namespace
}  // namespace kiln::testing
