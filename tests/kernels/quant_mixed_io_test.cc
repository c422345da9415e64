// Quantization kernels reading and writing fp16 / bf16 with fp32 scales (what precision
// lowering gives them: passes/precision_lowering.h), on the AVX-512 kernels and the reference
// kernels, byte for byte against the fp32 sequence they replace:
//   QuantizeLinear(x half, scale fp32) == QuantizeLinear(Cast(x -> fp32), scale)
//   DequantizeLinear(q, scale fp32, output_dtype half) == Cast(DequantizeLinear(q, scale) -> half)
//   DequantizeLinear(int32 sums, scale, output_dtype) == Cast(Mul(Cast(sums -> fp32), scale))
//     for sums within 2^24 (the qdq-integer form lowering replaces), and its reference bits beyond
// over per-tensor and per-axis layouts (inner runs of 1, 3 and many elements; sizes that are not
// multiples of 16; tensors large enough to run on the OpenMP threads), uint8 / int8 / int32
// data, and the reference's error for output_dtype before opset 23. The AVX-512 parts are
// skipped on CPUs without AVX-512 (+BF16).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/common/half.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // NodeSpec{op}

namespace kiln::testing {
namespace {

using ir::OpType;

const uint64_t kFeatures = kernels::IsaCpuFeatures(kernels::Isa::kAvx512) | kCpuAvx512Bf16;

bool HasFast() { return (DetectCpuFeatures() & kFeatures) == kFeatures; }

// The kernels to check: the reference (cpu_features 0) and, where the CPU has it, the fast one.
std::vector<std::optional<uint64_t>> Kernels() {
  std::vector<std::optional<uint64_t>> k = {uint64_t{0}};
  if (HasFast()) k.push_back(std::nullopt);
  return k;
}

int64_t Count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Expects a and b of one dtype and dims and identical bytes.
void ExpectSameBytes(const ir::Tensor& a, const ir::Tensor& b) {
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.dims(), b.dims());
  const size_t es = DataTypeSize(a.dtype());
  const auto* pa = static_cast<const uint8_t*>(a.raw_data());
  const auto* pb = static_cast<const uint8_t*>(b.raw_data());
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    if (std::memcmp(pa + i * es, pb + i * es, es) != 0) {
      ADD_FAILURE() << "element " << i << ": " << ir::ElementAsDouble(a, i) << " against "
                    << ir::ElementAsDouble(b, i);
      return;
    }
  }
}

// fp32 values rounded to `half` (fp16 or bf16), as a Cast rounds them (nearest even).
ir::Tensor Round(const ir::Tensor& f32, DataType half) {
  const std::vector<float> v = ToFloats(f32);
  return half == DataType::kF16 ? MakeHalf(f32.dims(), v) : MakeBf16(f32.dims(), v);
}

// A layout: x's dims, the scale's length (1: per tensor) and the axis.
struct Layout {
  std::vector<int64_t> dims;
  int64_t scales;
  int64_t axis;
};

// Per tensor; per axis with inner runs of many, 3 and 1 elements; odd sizes; and two layouts
// above the kernels' threading threshold (65536 elements).
const std::vector<Layout>& Layouts() {
  static const std::vector<Layout> l = {
      {{3, 37}, 1, 1},     {{2, 5, 7}, 5, 1},     {{4, 9, 3}, 9, 1},      {{33, 19}, 19, -1},
      {{5, 11, 1}, 11, 1}, {{301, 384}, 384, -1}, {{2, 48, 1001}, 48, 1}, {{70001}, 1, 0},
  };
  return l;
}

ir::Tensor Scales(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.0005f, 0.09f);
  std::vector<float> s(n);
  for (auto& e : s) e = u(rng);
  return n == 1 ? MakeFloat({}, s) : MakeFloat({n}, s);
}

NodeSpec QuantNode(OpType op, const Layout& l, ir::Tensor x, ir::Tensor scale, ir::Tensor zp) {
  NodeSpec spec{op};
  spec.since_version = 21;
  spec.inputs = {std::move(x), std::move(scale), std::move(zp)};
  if (l.scales != 1) spec.attrs.push_back({"axis", IntAttr(l.axis)});
  spec.constant_inputs = {1, 2};
  return spec;
}

TEST(QuantMixedIoTest, QuantizeReadsHalfXAsItsFp32Widening) {
  std::mt19937 rng(7);
  for (DataType half : {DataType::kF16, DataType::kBF16}) {
    for (DataType qt : {DataType::kU8, DataType::kI8}) {
      for (const Layout& l : Layouts()) {
        SCOPED_TRACE(::testing::Message() << DataTypeName(half) << " -> " << DataTypeName(qt) << " "
                                          << ir::DimsToString(l.dims));
        const int64_t n = Count(l.dims);
        // Values across the quantized range and beyond it (saturating), exact midpoints of the
        // grid, NaN and infinities.
        std::uniform_real_distribution<float> u(-14.0f, 14.0f);
        std::vector<float> v(n);
        for (int64_t i = 0; i < n; ++i) v[i] = u(rng);
        for (int64_t i = 5; i < n; i += 97) v[i] = std::numeric_limits<float>::quiet_NaN();
        for (int64_t i = 9; i < n; i += 89) v[i] = (i % 2 ? 1 : -1) * INFINITY;
        for (int64_t i = 2; i < n; i += 7) v[i] = 0.5f + static_cast<float>(i % 9);
        const ir::Tensor x = half == DataType::kF16 ? MakeHalf(l.dims, v) : MakeBf16(l.dims, v);
        const ir::Tensor x32 = MakeFloat(l.dims, ToFloats(x));  // exact widening
        // Scales of 1 and 0.5 make the midpoints exact ties.
        ir::Tensor scale = Scales(l.scales, rng);
        scale.data<float>()[0] = 1.0f;
        if (l.scales > 1) scale.data<float>()[1] = 0.5f;
        std::vector<int> z(l.scales);
        for (int64_t j = 0; j < l.scales; ++j) z[j] = static_cast<int>(j % 9) - 4;
        if (qt == DataType::kU8) {
          for (auto& e : z) e += 128;
        }
        const std::vector<int64_t> zdims =
            l.scales == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{l.scales};
        const ir::Tensor zp = qt == DataType::kU8
                                  ? MakeTensor<uint8_t>(zdims, {z.begin(), z.end()}, qt)
                                  : MakeTensor<int8_t>(zdims, {z.begin(), z.end()}, qt);
        NodeSpec ref = QuantNode(OpType::kQuantizeLinear, l, x32, scale, zp);
        ref.cpu_features = 0;
        const ir::Tensor want = RunNodeOk0(ref);
        for (const auto& k : Kernels()) {
          NodeSpec spec = QuantNode(OpType::kQuantizeLinear, l, x, scale, zp);
          spec.cpu_features = k;
          ExpectSameBytes(RunNodeOk0(spec), want);
        }
      }
    }
  }
}

TEST(QuantMixedIoTest, DequantizeWritesHalfAsTheRoundedFp32) {
  std::mt19937 rng(11);
  for (DataType xt : {DataType::kU8, DataType::kI8, DataType::kI32}) {
    for (DataType half : {DataType::kF16, DataType::kBF16}) {
      for (const Layout& l : Layouts()) {
        SCOPED_TRACE(::testing::Message() << DataTypeName(xt) << " -> " << DataTypeName(half) << " "
                                          << ir::DimsToString(l.dims));
        const int64_t n = Count(l.dims);
        const std::vector<int64_t> zdims =
            l.scales == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{l.scales};
        ir::Tensor x, zp;
        if (xt == DataType::kI32) {
          // Sums beyond fp32's integers and beyond fp16's range (after scaling) too.
          std::uniform_int_distribution<int32_t> u(-40000000, 40000000);
          std::vector<int32_t> v(n), z(l.scales);
          for (auto& e : v) e = u(rng);
          for (int64_t j = 0; j < l.scales; ++j) z[j] = static_cast<int32_t>(j * 7919 % 1001) - 500;
          x = MakeTensor<int32_t>(l.dims, v, xt);
          zp = MakeTensor<int32_t>(zdims, z, xt);
        } else {
          std::uniform_int_distribution<int> u(0, 255);
          std::vector<int> v(n), z(l.scales);
          for (auto& e : v) e = u(rng);
          for (int64_t j = 0; j < l.scales; ++j) z[j] = static_cast<int>(j * 31 % 200) + 20;
          if (xt == DataType::kU8) {
            x = MakeTensor<uint8_t>(l.dims, {v.begin(), v.end()}, xt);
            zp = MakeTensor<uint8_t>(zdims, {z.begin(), z.end()}, xt);
          } else {
            for (auto& e : v) e -= 128;
            for (auto& e : z) e -= 128;
            x = MakeTensor<int8_t>(l.dims, {v.begin(), v.end()}, xt);
            zp = MakeTensor<int8_t>(zdims, {z.begin(), z.end()}, xt);
          }
        }
        const ir::Tensor scale = Scales(l.scales, rng);
        NodeSpec ref = QuantNode(OpType::kDequantizeLinear, l, x, scale, zp);
        ref.cpu_features = 0;
        const ir::Tensor want = Round(RunNodeOk0(ref), half);
        for (const auto& k : Kernels()) {
          NodeSpec spec = QuantNode(OpType::kDequantizeLinear, l, x, scale, zp);
          spec.since_version = 23;
          spec.attrs.push_back({"output_dtype", IntAttr(static_cast<int64_t>(half))});
          spec.cpu_features = k;
          ExpectSameBytes(RunNodeOk0(spec), want);
        }
      }
    }
  }
}

// The form lowering makes of a qdq-integer rewrite's Cast(int32 -> fp32) + Mul(scale): one
// DequantizeLinear of the sums, its bits where every |sum| <= 2^24 (IntegerSumsExactInFloat).
TEST(QuantMixedIoTest, DequantizedSumsEqualCastAndMul) {
  std::mt19937 rng(3);
  for (const Layout& l : Layouts()) {
    SCOPED_TRACE(ir::DimsToString(l.dims));
    const int64_t n = Count(l.dims);
    std::uniform_int_distribution<int32_t> u(-(1 << 24), 1 << 24);
    std::vector<int32_t> v(n);
    for (auto& e : v) e = u(rng);
    v[0] = 1 << 24;
    v[n - 1] = -(1 << 24);
    const ir::Tensor x = MakeTensor<int32_t>(l.dims, v, DataType::kI32);
    ir::Tensor scale = Scales(l.scales, rng);
    // Cast + Mul as the rewrite wrote them: the scale broadcast over the axis.
    NodeSpec cast{OpType::kCast};
    cast.since_version = 13;
    cast.attrs = {{"to", IntAttr(static_cast<int64_t>(DataType::kF32))}};
    cast.inputs = {x};
    cast.output_dtypes = {DataType::kF32};
    cast.cpu_features = 0;
    const ir::Tensor f = RunNodeOk0(cast);
    std::vector<int64_t> bdims(l.dims.size(), 1);
    const int64_t rank = static_cast<int64_t>(l.dims.size());
    if (l.scales != 1) bdims[l.axis < 0 ? l.axis + rank : l.axis] = l.scales;
    NodeSpec mul{OpType::kMul};
    mul.since_version = 14;
    mul.inputs = {f, l.scales == 1 ? scale : scale.Reshaped(bdims)};
    mul.cpu_features = 0;
    const ir::Tensor product = RunNodeOk0(mul);
    for (DataType yt : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
      SCOPED_TRACE(DataTypeName(yt));
      const ir::Tensor want = yt == DataType::kF32 ? product : Round(product, yt);
      for (const auto& k : Kernels()) {
        NodeSpec spec{OpType::kDequantizeLinear};
        spec.since_version = 23;
        spec.inputs = {x, scale};
        spec.constant_inputs = {1};
        if (l.scales != 1) spec.attrs.push_back({"axis", IntAttr(l.axis)});
        if (yt != DataType::kF32) {
          spec.attrs.push_back({"output_dtype", IntAttr(static_cast<int64_t>(yt))});
        }
        spec.cpu_features = k;
        ExpectSameBytes(RunNodeOk0(spec), want);
      }
    }
  }
}

// The fast kernels take these nodes (else the tests above compare the reference with itself).
TEST(QuantMixedIoTest, RegistryPicksTheFastKernels) {
  if (!HasFast())
    GTEST_SKIP() << "CPU lacks " << CpuFeatureString(kFeatures & ~DetectCpuFeatures());
  for (DataType x : {DataType::kF16, DataType::kBF16, DataType::kU8, DataType::kI32}) {
    ir::Graph g;
    const bool quantize = IsFloating(x);
    ir::Node* node =
        g.AddNode(quantize ? OpType::kQuantizeLinear : OpType::kDequantizeLinear, "pick");
    node->since_version = 23;
    if (!quantize) node->attrs["output_dtype"] = IntAttr(static_cast<int64_t>(DataType::kF16));
    for (int i = 0; i < 2; ++i) {
      auto v = g.AddValue(i == 0 ? "x" : "scale");
      ASSERT_TRUE(v.ok());
      (*v)->dtype = i == 0 ? x : DataType::kF32;
      node->inputs.push_back(*v);
    }
    auto def = kernels::Registry::Default().Find(*node, kFeatures);
    ASSERT_TRUE(def.ok()) << def.status();
    EXPECT_EQ((*def)->isa, kernels::Isa::kAvx512) << DataTypeName(x);
  }
}

TEST(QuantMixedIoTest, OutputDtypeBeforeOpset23IsAnError) {
  for (const auto& k : Kernels()) {
    NodeSpec spec{OpType::kDequantizeLinear};
    spec.since_version = 21;
    spec.inputs = {MakeTensor<uint8_t>({4}, {1, 2, 3, 4}, DataType::kU8), MakeFloat({}, {0.5f})};
    spec.attrs = {{"output_dtype", IntAttr(static_cast<int64_t>(DataType::kF16))}};
    spec.cpu_features = k;
    ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "output_dtype");
  }
}

}  // namespace
}  // namespace kiln::testing
