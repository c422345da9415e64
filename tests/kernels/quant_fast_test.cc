// The AVX-512 quantization kernels (kernels/cpu/avx512/quant_ops.cc, quant_integer_ops.cc)
// against the reference kernels, byte for byte: QuantizeLinear and DequantizeLinear (every
// storage type, float / float16 / bfloat16, per-tensor and per-axis with inner runs of 1, 3 and
// many elements, odd sizes, NaN, infinities, exact halves, saturation), DynamicQuantizeLinear,
// and MatMulInteger / ConvInteger (uint8 and int8 on both sides, every zero-point form, batches,
// odd sizes, strides, pads, dilations, groups, 1-D, int32 wrap-around). The integer GEMM is also
// checked directly against a naive sum (so the fast path is known to run), and the registry
// selection and the reference's errors. Skipped on CPUs without AVX-512 (+BF16, +VNNI).
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/quant.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // NodeSpec{op}

namespace kiln::testing {
namespace {

using ir::OpType;
using kernels::Isa;
namespace av = kernels::cpu::avx512;

const uint64_t kFeatures = kernels::IsaCpuFeatures(Isa::kAvx512) | kCpuAvx512Bf16 | kCpuAvx512Vnni;

#define SKIP_WITHOUT_FEATURES()                                                         \
  if ((DetectCpuFeatures() & kFeatures) != kFeatures) {                                 \
    GTEST_SKIP() << "CPU lacks " << CpuFeatureString(kFeatures & ~DetectCpuFeatures()); \
  }

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Runs `spec` on the running CPU's kernel and on the reference kernel (cpu_features 0) and
// expects every output identical, byte for byte.
void ExpectSameAsReference(NodeSpec spec) {
  spec.cpu_features.reset();
  const std::vector<ir::Tensor> fast = RunNodeOk(spec);
  spec.cpu_features = 0;
  const std::vector<ir::Tensor> ref = RunNodeOk(spec);
  ASSERT_EQ(fast.size(), ref.size());
  for (size_t o = 0; o < fast.size(); ++o) {
    ASSERT_EQ(fast[o].dtype(), ref[o].dtype()) << "output " << o;
    ASSERT_EQ(fast[o].dims(), ref[o].dims()) << "output " << o;
    const size_t es = DataTypeSize(ref[o].dtype());
    const auto* a = static_cast<const uint8_t*>(fast[o].raw_data());
    const auto* b = static_cast<const uint8_t*>(ref[o].raw_data());
    for (int64_t i = 0; i < ref[o].num_elements(); ++i) {
      if (std::memcmp(a + i * es, b + i * es, es) != 0) {
        ADD_FAILURE() << "output " << o << " element " << i << ": fast "
                      << ir::ElementAsDouble(fast[o], i) << ", reference "
                      << ir::ElementAsDouble(ref[o], i);
        return;
      }
    }
  }
}

// Float data of `dtype` (rounded for float16 / bfloat16): uniform in [-range, range], exact
// quantization midpoints k + 0.5 times `scale`, and the special values.
ir::Tensor FloatData(DataType dtype, std::vector<int64_t> dims, float range, float scale,
                     std::mt19937& rng) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::uniform_real_distribution<float> u(-range, range);
  std::vector<float> v(n);
  const float specials[] = {kNaN, kInf, -kInf, 0.0f, -0.0f, 1e-40f, 3e38f, -3e38f};
  for (int64_t i = 0; i < n; ++i) {
    if (i % 7 == 3) {
      v[i] = (static_cast<float>(static_cast<int>(i % 41) - 20) + 0.5f) * scale;  // a midpoint
    } else if (i % 53 == 11) {
      v[i] = specials[(i / 53) % 8];
    } else {
      v[i] = u(rng);
    }
  }
  if (dtype == DataType::kF16) return MakeHalf(dims, v);
  if (dtype == DataType::kBF16) return MakeBf16(dims, v);
  return MakeFloat(dims, v);
}

// Integer data of a quantized storage type, uniform over its whole range.
ir::Tensor IntData(DataType dtype, std::vector<int64_t> dims, std::mt19937& rng) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  switch (dtype) {
    case DataType::kU8: {
      std::uniform_int_distribution<int> u(0, 255);
      std::vector<uint8_t> v(n);
      for (auto& e : v) e = static_cast<uint8_t>(u(rng));
      return MakeTensor<uint8_t>(dims, v, dtype);
    }
    case DataType::kI8: {
      std::uniform_int_distribution<int> u(-128, 127);
      std::vector<int8_t> v(n);
      for (auto& e : v) e = static_cast<int8_t>(u(rng));
      return MakeTensor<int8_t>(dims, v, dtype);
    }
    case DataType::kU16: {
      std::uniform_int_distribution<int> u(0, 65535);
      std::vector<uint16_t> v(n);
      for (auto& e : v) e = static_cast<uint16_t>(u(rng));
      return MakeTensor<uint16_t>(dims, v, dtype);
    }
    case DataType::kI16: {
      std::uniform_int_distribution<int> u(-32768, 32767);
      std::vector<int16_t> v(n);
      for (auto& e : v) e = static_cast<int16_t>(u(rng));
      return MakeTensor<int16_t>(dims, v, dtype);
    }
    default: {
      std::uniform_int_distribution<int32_t> u(INT32_MIN, INT32_MAX);
      std::vector<int32_t> v(n);
      for (auto& e : v) e = u(rng);
      return MakeTensor<int32_t>(dims, v, DataType::kI32);
    }
  }
}

// Positive scales (with a few tiny and large ones) in `dtype`.
ir::Tensor Scales(DataType dtype, std::vector<int64_t> dims, std::mt19937& rng) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::uniform_real_distribution<float> u(0.001f, 0.2f);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = i % 5 == 4 ? 1e-3f * (i % 3 + 1) : u(rng);
  if (dtype == DataType::kF16) return MakeHalf(dims, v);
  if (dtype == DataType::kBF16) return MakeBf16(dims, v);
  return MakeFloat(dims, v);
}

// The layouts: {x dims, axis, scale dims} (scale dims [] = per-tensor).
struct Layout {
  std::vector<int64_t> x;
  int64_t axis;
  std::vector<int64_t> scale;
};
std::vector<Layout> Layouts() {
  return {{{1}, 1, {}},        {{15}, 1, {}},          {{17}, 1, {}},           {{3, 7, 11}, 1, {}},
          {{70001}, 1, {}},    {{4, 33}, 0, {4}},      {{4, 33}, 1, {33}},      {{2, 5, 3}, 1, {5}},
          {{3, 37}, -1, {37}}, {{2, 19, 40}, 1, {19}}, {{5, 300, 64}, 1, {300}}};
}

TEST(QuantFast, QuantizeLinearMatchesReference) {
  SKIP_WITHOUT_FEATURES();
  std::mt19937 rng(1);
  for (DataType xt : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (DataType qt : {DataType::kU8, DataType::kI8, DataType::kU16, DataType::kI16}) {
      for (const Layout& l : Layouts()) {
        for (bool with_zp : {true, false}) {
          if (!with_zp && qt != DataType::kU8) continue;  // no zero point: uint8 output
          SCOPED_TRACE(std::string(DataTypeName(xt)) + " -> " + DataTypeName(qt) + " x " +
                       ir::DimsToString(l.x) + " axis " + std::to_string(l.axis) +
                       (with_zp ? "" : " no zp"));
          const bool wide = qt == DataType::kU16 || qt == DataType::kI16;
          NodeSpec s{OpType::kQuantizeLinear};
          s.since_version = 21;
          if (!l.scale.empty()) s.attrs = {{"axis", IntAttr(l.axis)}};
          const ir::Tensor scale = Scales(xt, l.scale, rng);
          // Data spanning past the saturation bounds of the type (in units of the scale).
          s.inputs = {FloatData(xt, l.x, wide ? 9000.0f : 40.0f, 0.05f, rng), scale};
          if (with_zp) s.inputs.push_back(IntData(qt, l.scale, rng));
          ExpectSameAsReference(s);
        }
      }
    }
  }
}

TEST(QuantFast, QuantizeLinearZeroScaleAndScalarZeroPointForms) {
  SKIP_WITHOUT_FEATURES();
  std::mt19937 rng(2);
  NodeSpec s{OpType::kQuantizeLinear};
  s.since_version = 13;
  // x / 0 is +-inf (saturates) or NaN (0 / 0: the zero point).
  s.inputs = {FloatData(DataType::kF32, {50}, 3.0f, 1.0f, rng), MakeFloat({}, {0.0f}),
              MakeTensor<uint8_t>({1}, {77}, DataType::kU8)};
  ExpectSameAsReference(s);
  s.inputs[1] = MakeFloat({1}, {0.25f});  // [1] scale against [1] zero point
  ExpectSameAsReference(s);
}

TEST(QuantFast, DequantizeLinearMatchesReference) {
  SKIP_WITHOUT_FEATURES();
  std::mt19937 rng(3);
  for (DataType xt :
       {DataType::kU8, DataType::kI8, DataType::kU16, DataType::kI16, DataType::kI32}) {
    for (DataType st : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
      for (const Layout& l : Layouts()) {
        for (bool with_zp : {true, false}) {
          SCOPED_TRACE(std::string(DataTypeName(xt)) + " scale " + DataTypeName(st) + " x " +
                       ir::DimsToString(l.x) + " axis " + std::to_string(l.axis) +
                       (with_zp ? "" : " no zp"));
          NodeSpec s{OpType::kDequantizeLinear};
          s.since_version = 21;
          if (!l.scale.empty()) s.attrs = {{"axis", IntAttr(l.axis)}};
          s.inputs = {IntData(xt, l.x, rng), Scales(st, l.scale, rng)};
          if (with_zp) s.inputs.push_back(IntData(xt, l.scale, rng));
          ExpectSameAsReference(s);
        }
      }
    }
  }
}

TEST(QuantFast, DynamicQuantizeLinearMatchesReference) {
  SKIP_WITHOUT_FEATURES();
  std::mt19937 rng(4);
  for (int64_t n : {1, 5, 16, 33, 1000, 70001}) {
    for (float range : {0.5f, 7.0f}) {
      SCOPED_TRACE("n " + std::to_string(n) + " range " + std::to_string(range));
      NodeSpec s{OpType::kDynamicQuantizeLinear};
      s.since_version = 11;
      s.num_outputs = 3;
      s.inputs = {FloatData(DataType::kF32, {n}, range, 0.03f, rng)};
      // FloatData puts infinities in from 54 elements on; keep finite ranges too.
      if (n < 1000) ExpectSameAsReference(s);
      std::vector<float> v(n);
      std::uniform_real_distribution<float> u(-range, range * 0.3f);
      for (auto& e : v) e = u(rng);
      if (n > 3) v[3] = kNaN;
      s.inputs = {MakeFloat({n}, v)};
      ExpectSameAsReference(s);
      for (auto& e : v) e = std::abs(e) + 0.1f;  // all positive: zero point 0
      s.inputs = {MakeFloat({n}, v)};
      ExpectSameAsReference(s);
    }
  }
  NodeSpec zeros{OpType::kDynamicQuantizeLinear};
  zeros.since_version = 11;
  zeros.num_outputs = 3;
  zeros.inputs = {MakeFloat({3, 7}, std::vector<float>(21, 0.0f))};  // scale 1
  ExpectSameAsReference(zeros);
}

// ---- MatMulInteger / ConvInteger ------------------------------------------------------------

TEST(QuantFast, MatMulIntegerMatchesReference) {
  SKIP_WITHOUT_FEATURES();
  std::mt19937 rng(5);
  struct Shape {
    std::vector<int64_t> a, b;
  };
  const std::vector<Shape> shapes = {
      {{1, 1}, {1, 1}},           {{5, 7}, {7, 3}},    {{21, 1024}, {1024, 100}},
      {{13, 33}, {33, 70}},       {{7, 64}, {64, 16}}, {{2, 3, 5, 6}, {6, 17}},
      {{2, 1, 5, 6}, {3, 6, 17}}, {{9}, {9, 20}},      {{4, 9}, {9}},
      {{2, 40000}, {40000, 3}}};
  for (const Shape& sh : shapes) {
    for (DataType at : {DataType::kU8, DataType::kI8}) {
      for (DataType bt : {DataType::kU8, DataType::kI8}) {
        // zero points: 0 none, 1 scalar, 2 per row of A and per column of B.
        for (int zp = 0; zp < 3; ++zp) {
          for (bool b_const : {true, false}) {
            const int64_t m = sh.a.size() >= 2 ? sh.a[sh.a.size() - 2] : 1;
            const int64_t n = sh.b.size() >= 2 ? sh.b.back() : 1;
            if (zp == 2 && (sh.a.size() < 2 || sh.b.size() < 2)) continue;
            SCOPED_TRACE(ir::DimsToString(sh.a) + " x " + ir::DimsToString(sh.b) + " " +
                         DataTypeName(at) + " x " + DataTypeName(bt) + " zp form " +
                         std::to_string(zp) + (b_const ? " constant B" : ""));
            NodeSpec s{OpType::kMatMulInteger};
            s.since_version = 10;
            s.inputs = {IntData(at, sh.a, rng), IntData(bt, sh.b, rng)};
            if (zp == 1) {
              s.inputs.push_back(IntData(at, {}, rng));
              s.inputs.push_back(IntData(bt, {1}, rng));
            } else if (zp == 2) {
              s.inputs.push_back(IntData(at, {m}, rng));
              s.inputs.push_back(IntData(bt, {n}, rng));
            }
            if (b_const) s.constant_inputs = {1};
            s.runs = 2;
            ExpectSameAsReference(s);
          }
        }
      }
    }
  }
}

TEST(QuantFast, MatMulIntegerWrapsAroundLikeTheReference) {
  SKIP_WITHOUT_FEATURES();
  // 255 * 255 * 40000 > 2^31: both wrap modulo 2^32.
  NodeSpec s{OpType::kMatMulInteger};
  s.since_version = 10;
  s.inputs = {MakeTensor<uint8_t>({2, 40000}, std::vector<uint8_t>(80000, 255), DataType::kU8),
              MakeTensor<uint8_t>({40000, 3}, std::vector<uint8_t>(120000, 255), DataType::kU8)};
  ExpectSameAsReference(s);
  const ir::Tensor y = RunNodeOk0(s);
  ASSERT_EQ(y.num_elements(), 6);
  EXPECT_EQ(y.data<int32_t>()[0], static_cast<int32_t>(static_cast<uint32_t>(2601000000u)));
}

struct ConvCase {
  std::string name;
  std::vector<int64_t> x, w;
  std::vector<std::pair<std::string, ir::Attribute>> attrs;
};

std::vector<ConvCase> ConvCases() {
  return {
      {"3x3 pad 1", {1, 5, 9, 11}, {7, 5, 3, 3}, {{"pads", IntsAttr({1, 1, 1, 1})}}},
      {"3x3 stride 2 pad 1",
       {2, 3, 13, 17},
       {20, 3, 3, 3},
       {{"pads", IntsAttr({1, 1, 1, 1})}, {"strides", IntsAttr({2, 2})}}},
      {"1x1", {1, 24, 8, 21}, {33, 24, 1, 1}, {}},
      {"dilation 2, asymmetric pads",
       {1, 4, 10, 12},
       {6, 4, 3, 2},
       {{"pads", IntsAttr({2, 0, 1, 3})}, {"dilations", IntsAttr({2, 2})}}},
      {"group 2, stride 3",
       {1, 6, 11, 14},
       {8, 3, 2, 3},
       {{"group", IntAttr(2)}, {"strides", IntsAttr({3, 3})}}},
      {"SAME_UPPER", {1, 2, 7, 9}, {5, 2, 4, 4}, {{"auto_pad", StringAttr("SAME_UPPER")}}},
      {"1-D", {2, 80, 37}, {17, 80, 3}, {{"pads", IntsAttr({1, 1})}, {"strides", IntsAttr({2})}}},
      {"depthwise",
       {1, 8, 9, 9},
       {8, 1, 3, 3},
       {{"group", IntAttr(8)}, {"pads", IntsAttr({1, 1, 1, 1})}}},
  };
}

TEST(QuantFast, ConvIntegerMatchesReference) {
  SKIP_WITHOUT_FEATURES();
  std::mt19937 rng(6);
  for (const ConvCase& c : ConvCases()) {
    for (DataType xt : {DataType::kU8, DataType::kI8}) {
      for (DataType wt : {DataType::kU8, DataType::kI8}) {
        // zero points: 0 none, 1 scalar, 2 scalar x and per output channel w.
        for (int zp = 0; zp < 3; ++zp) {
          SCOPED_TRACE(c.name + " " + DataTypeName(xt) + " x " + DataTypeName(wt) + " zp form " +
                       std::to_string(zp));
          NodeSpec s{OpType::kConvInteger};
          s.since_version = 10;
          s.attrs = c.attrs;
          s.inputs = {IntData(xt, c.x, rng), IntData(wt, c.w, rng)};
          if (zp >= 1) s.inputs.push_back(IntData(xt, {}, rng));
          if (zp == 1) s.inputs.push_back(IntData(wt, {}, rng));
          if (zp == 2) s.inputs.push_back(IntData(wt, {c.w[0]}, rng));
          s.constant_inputs = {1};
          s.runs = 2;
          ExpectSameAsReference(s);
        }
      }
    }
  }
}

TEST(QuantFast, ConvIntegerBadZeroPointGivesTheReferenceError) {
  SKIP_WITHOUT_FEATURES();
  std::mt19937 rng(7);
  NodeSpec s{OpType::kConvInteger};
  s.since_version = 10;
  s.inputs = {IntData(DataType::kU8, {1, 2, 5, 5}, rng), IntData(DataType::kU8, {3, 2, 3, 3}, rng),
              IntData(DataType::kU8, {}, rng), IntData(DataType::kU8, {2}, rng)};
  s.constant_inputs = {1};
  ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "w_zero_point");
}

// GemmInt8 called directly against a naive sum: the VNNI path itself, every tile shape.
TEST(QuantFast, GemmInt8MatchesNaiveSums) {
  SKIP_WITHOUT_FEATURES();
  std::mt19937 rng(8);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{
           {1, 1, 1}, {6, 64, 4}, {7, 65, 5}, {13, 31, 130}, {25, 200, 3}, {2, 17, 0}}) {
    SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
    std::vector<uint8_t> a(m * k), b(k * n);  // A int8 (signed), B uint8
    for (auto& e : a) e = static_cast<uint8_t>(byte(rng));
    for (auto& e : b) e = static_cast<uint8_t>(byte(rng));
    std::vector<int32_t> za(m), zb(n);
    for (auto& e : za) e = byte(rng) - 128;
    for (auto& e : zb) e = byte(rng);
    std::vector<uint8_t> ap(m * av::Int8KPadded(k)), bp(av::Int8PackedBBytes(k, n));
    std::vector<int32_t> rows(m), cols(n), y(m * n, -1);
    av::PackAInt8(a.data(), /*a_signed=*/true, m, k, k, ap.data(), rows.data());
    av::PackBInt8(b.data(), /*b_signed=*/false, k, n, n, bp.data(), cols.data());
    std::vector<int32_t> sza(m), szb(n);  // stored: int8 A + 128, uint8 B - 128
    for (int64_t i = 0; i < m; ++i) sza[i] = za[i] + 128;
    for (int64_t j = 0; j < n; ++j) szb[j] = zb[j] - 128;
    av::GemmInt8Args g;
    g.m = m, g.n = n, g.k = k, g.a = ap.data(), g.b = bp.data(), g.row_sums = rows.data();
    g.col_sums = cols.data(), g.za = sza.data(), g.zb = szb.data(), g.y = y.data(), g.y_rs = n;
    av::GemmInt8(g);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t want = 0;
        for (int64_t q = 0; q < k; ++q) {
          want += (static_cast<int8_t>(a[i * k + q]) - za[i]) * (int64_t{b[q * n + j]} - zb[j]);
        }
        ASSERT_EQ(y[i * n + j], static_cast<int32_t>(want)) << i << ", " << j;
      }
    }
  }
}

TEST(QuantFast, RegistryPicksTheFastKernels) {
  SKIP_WITHOUT_FEATURES();
  struct Pick {
    OpType op;
    DataType t;
    uint64_t features;
    Isa want;
  };
  const uint64_t avx512 = kernels::IsaCpuFeatures(Isa::kAvx512);
  for (const Pick& p : std::vector<Pick>{
           {OpType::kQuantizeLinear, DataType::kF32, avx512, Isa::kAvx512},
           {OpType::kQuantizeLinear, DataType::kI32, kFeatures, Isa::kRef},
           {OpType::kDequantizeLinear, DataType::kU8, kFeatures, Isa::kAvx512},
           {OpType::kDequantizeLinear, DataType::kU8, avx512, Isa::kRef},  // bf16 outputs
           {OpType::kDynamicQuantizeLinear, DataType::kF32, avx512, Isa::kAvx512},
           {OpType::kMatMulInteger, DataType::kU8, kFeatures, Isa::kAvx512},
           {OpType::kMatMulInteger, DataType::kI8, avx512 | kCpuAvx512Bf16, Isa::kRef}}) {
    ir::Graph g;
    ir::Node* node = g.AddNode(p.op, "pick");
    for (int i = 0; i < 2; ++i) {
      auto v = g.AddValue(i == 0 ? "x" : "scale");
      ASSERT_TRUE(v.ok());
      (*v)->dtype = i == 0 ? p.t : DataType::kF32;
      node->inputs.push_back(*v);
    }
    auto def = kernels::Registry::Default().Find(*node, p.features);
    ASSERT_TRUE(def.ok()) << def.status();
    EXPECT_EQ((*def)->isa, p.want) << ir::OpName(p.op) << " " << DataTypeName(p.t);
  }
}

}  // namespace
}  // namespace kiln::testing
