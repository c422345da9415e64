// AVX-512 kernels against the reference kernels and against scalar emulations of their defined
// arithmetic: registry selection, the vectorised fp16/bf16 conversions (every 16-bit value and a
// strided sample of fp32 bit patterns, bit for bit), Cast, and Gemm / MatMul on float, float16
// and bfloat16 (bit for bit against the accumulation order of kernels/cpu/avx512/gemm.h, and
// within an accumulation-order bound of the reference). Skipped on CPUs without the features.
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/common/half.h"
#include "engine/kernels/cpu/avx512/convert.h"
#include "engine/kernels/cpu/avx512/gemm.h"
#include "engine/kernels/cpu/avx512/math.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ir::OpType;
using kernels::Isa;

const uint64_t kAvx512 = kernels::IsaCpuFeatures(Isa::kAvx512);
const uint64_t kAvx512Bf16 = kAvx512 | kCpuAvx512Bf16;

bool Has(uint64_t features) { return (DetectCpuFeatures() & features) == features; }

#define SKIP_WITHOUT(features)                                                           \
  if (!Has(features)) {                                                                  \
    GTEST_SKIP() << "CPU lacks " << CpuFeatureString((features) & ~DetectCpuFeatures()); \
  }

// ---------------------------------------------------------------- registry selection

// The kernel Find picks for a one-node graph of `op` on inputs of `dtype` (Cast: to `to`).
const kernels::KernelDef* Pick(OpType op, DataType dtype, uint64_t features,
                               DataType to = DataType::kUndefined) {
  static ir::Graph* g = new ir::Graph();  // nodes must outlive the returned pointers' checks
  ir::Node* n = g->AddNode(op, "pick");
  for (int i = 0; i < 2; ++i) {
    auto v = g->AddValue("in" + std::to_string(g->values().size()));
    EXPECT_TRUE(v.ok());
    (*v)->dtype = dtype;
    n->inputs.push_back(*v);
  }
  if (to != DataType::kUndefined) n->attrs["to"] = IntAttr(static_cast<int64_t>(to));
  auto def = kernels::Registry::Default().Find(*n, features);
  EXPECT_TRUE(def.ok()) << def.status();
  return def.ok() ? *def : nullptr;
}

TEST(Avx512Registry, PrefersFastestSupportedIsaAndFallsBackToRef) {
  EXPECT_EQ(Pick(OpType::kMatMul, DataType::kF32, kAvx512)->isa, Isa::kAvx512);
  EXPECT_EQ(Pick(OpType::kMatMul, DataType::kF32, 0)->isa, Isa::kRef);
  EXPECT_EQ(Pick(OpType::kMatMul, DataType::kF32, kAvx512 & ~kCpuAvx512Bw)->isa, Isa::kRef);
  EXPECT_EQ(Pick(OpType::kGemm, DataType::kF16, kAvx512)->isa, Isa::kAvx512);
  // bf16 needs AVX512_BF16 on top of the Isa's features.
  EXPECT_EQ(Pick(OpType::kGemm, DataType::kBF16, kAvx512)->isa, Isa::kRef);
  EXPECT_EQ(Pick(OpType::kGemm, DataType::kBF16, kAvx512Bf16)->isa, Isa::kAvx512);
  // Dtypes without a fast kernel keep the reference one.
  EXPECT_EQ(Pick(OpType::kMatMul, DataType::kF64, kAvx512Bf16)->isa, Isa::kRef);
  EXPECT_EQ(Pick(OpType::kAdd, DataType::kF64, kAvx512Bf16)->isa, Isa::kRef);
  // Shapes unknown at build time: the broadcasting kernels plan at run time.
  EXPECT_EQ(Pick(OpType::kAdd, DataType::kF32, kAvx512Bf16)->isa, Isa::kAvx512);
  // Cast: only the float / float16 / bfloat16 pairs and int32 -> float are fast
  // (KernelDef::supports).
  EXPECT_EQ(Pick(OpType::kCast, DataType::kF32, kAvx512Bf16, DataType::kF16)->isa, Isa::kAvx512);
  EXPECT_EQ(Pick(OpType::kCast, DataType::kI32, kAvx512Bf16, DataType::kF32)->isa, Isa::kAvx512);
  EXPECT_EQ(Pick(OpType::kCast, DataType::kBool, kAvx512Bf16, DataType::kF32)->isa, Isa::kAvx512);
  EXPECT_EQ(Pick(OpType::kCast, DataType::kI32, kAvx512Bf16, DataType::kF16)->isa, Isa::kRef);
  EXPECT_EQ(Pick(OpType::kCast, DataType::kF32, kAvx512Bf16, DataType::kI32)->isa, Isa::kRef);
  EXPECT_EQ(Pick(OpType::kCast, DataType::kF16, kAvx512Bf16, DataType::kF16)->isa, Isa::kRef);
  EXPECT_EQ(Pick(OpType::kCast, DataType::kI8, kAvx512Bf16, DataType::kF16)->isa, Isa::kRef);
  EXPECT_STREQ(kernels::IsaName(Isa::kAvx512), "avx512");
}

// ---------------------------------------------------------------- conversions

// fp32 bit patterns: every `stride`-th one plus the boundaries where rounding changes regime.
std::vector<float> Fp32Sample() {
  std::vector<uint32_t> bits;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4093) bits.push_back(static_cast<uint32_t>(u));
  for (uint32_t base : {0x00000000u, 0x00800000u, 0x33000000u, 0x387fe000u, 0x38800000u,
                        0x477fe000u, 0x477ff000u, 0x47800000u, 0x7f7f8000u, 0x7f800000u,
                        0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0x3f808000u, 0x3f818000u}) {
    for (uint32_t d = 0; d < 64; ++d) {
      for (uint32_t sign : {0u, 0x80000000u}) {
        bits.push_back(sign | (base + d));
        bits.push_back(sign | (base - d));
      }
    }
  }
  std::vector<float> out(bits.size());
  std::memcpy(out.data(), bits.data(), bits.size() * 4);
  return out;
}

std::vector<uint16_t> All16() {
  std::vector<uint16_t> v(65536);
  for (int i = 0; i < 65536; ++i) v[i] = static_cast<uint16_t>(i);
  return v;
}

TEST(Avx512Convert, EveryHalfAndBf16ToFloatIsBitExact) {
  SKIP_WITHOUT(kAvx512);
  std::vector<uint16_t> in = All16();
  std::vector<float> out(in.size());
  kernels::cpu::avx512::HalfToFloat(in.data(), out.data(), in.size());
  for (int i = 0; i < 65536; ++i) {
    ASSERT_EQ(FloatBits(out[i]), FloatBits(HalfBitsToFloat(in[i]))) << "fp16 0x" << std::hex << i;
  }
  kernels::cpu::avx512::Bf16ToFloat(in.data(), out.data(), in.size());
  for (int i = 0; i < 65536; ++i) {
    ASSERT_EQ(FloatBits(out[i]), FloatBits(BFloat16BitsToFloat(in[i])))
        << "bf16 0x" << std::hex << i;
  }
}

TEST(Avx512Convert, FloatToHalfAndBf16MatchPortableOnStridedSample) {
  SKIP_WITHOUT(kAvx512Bf16);
  std::vector<float> in = Fp32Sample();
  std::vector<uint16_t> out(in.size());
  kernels::cpu::avx512::FloatToHalf(in.data(), out.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(out[i], FloatToHalfBits(in[i])) << "fp32 0x" << std::hex << FloatBits(in[i]);
  }
  kernels::cpu::avx512::FloatToBf16(in.data(), out.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(out[i], FloatToBFloat16Bits(in[i])) << "fp32 0x" << std::hex << FloatBits(in[i]);
  }
  // Every subnormal fp32 mantissa pattern of one sign near the bf16 rounding points (vcvtneps2bf16
  // alone would flush these to zero).
  std::vector<float> sub;
  for (uint32_t u = 1; u < 0x00800000u; u += 97) sub.push_back(BitsToFloat(u | 0x80000000u));
  std::vector<uint16_t> sub_out(sub.size());
  kernels::cpu::avx512::FloatToBf16(sub.data(), sub_out.data(), sub.size());
  for (size_t i = 0; i < sub.size(); ++i) ASSERT_EQ(sub_out[i], FloatToBFloat16Bits(sub[i]));
}

// The Cast op: fast against reference kernel, every pair, bit for bit.
TEST(Avx512Cast, EveryPairMatchesReferenceKernel) {
  SKIP_WITHOUT(kAvx512Bf16);
  std::vector<uint16_t> all16 = All16();
  std::vector<float> f32 = Fp32Sample();
  const DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};
  for (DataType from : kTypes) {
    for (DataType to : kTypes) {
      if (from == to) continue;
      NodeSpec spec;
      spec.op = OpType::kCast;
      spec.attrs = {{"to", IntAttr(static_cast<int64_t>(to))}};
      spec.inputs = {from == DataType::kF32 ? MakeFloat({static_cast<int64_t>(f32.size())}, f32)
                                            : MakeTensor<uint16_t>({65536}, all16, from)};
      spec.output_dtypes = {to};
      ir::Tensor fast = RunNodeOk0(spec);
      spec.cpu_features = 0;
      ir::Tensor ref = RunNodeOk0(spec);
      ASSERT_EQ(fast.dtype(), to);
      ASSERT_EQ(fast.byte_size(), ref.byte_size());
      EXPECT_EQ(std::memcmp(fast.raw_data(), ref.raw_data(), ref.byte_size()), 0)
          << DataTypeOnnxName(from) << " -> " << DataTypeOnnxName(to);
    }
  }
  // int32 -> float: exact below 2^24, rounded to nearest even above (ties: odd multiples of
  // 2^(e-24)), the extremes, and a length that is no multiple of 16.
  std::vector<int32_t> ints = {
      0,        1,        -1,         16777216,        16777217,  16777219,  -16777217,
      33554434, 33554438, 2147483647, -2147483647 - 1, 123456789, -987654321};
  for (int32_t i = 0; i < 1000; ++i) ints.push_back(i * 2654435761u);
  NodeSpec spec;
  spec.op = OpType::kCast;
  spec.attrs = {{"to", IntAttr(static_cast<int64_t>(DataType::kF32))}};
  spec.inputs = {MakeTensor<int32_t>({static_cast<int64_t>(ints.size())}, ints, DataType::kI32)};
  spec.output_dtypes = {DataType::kF32};
  ir::Tensor fast = RunNodeOk0(spec);
  spec.cpu_features = 0;
  ir::Tensor ref = RunNodeOk0(spec);
  ASSERT_EQ(fast.byte_size(), ref.byte_size());
  EXPECT_EQ(std::memcmp(fast.raw_data(), ref.raw_data(), ref.byte_size()), 0) << "int32 -> float";
  // bool -> float: 0 -> 0, any other byte -> 1, over a length that is no multiple of 16.
  std::vector<uint8_t> bools(37);
  for (size_t i = 0; i < bools.size(); ++i) bools[i] = i % 3 == 0 ? 0 : (i % 3 == 1 ? 1 : 0xfe);
  NodeSpec b;
  b.op = OpType::kCast;
  b.attrs = {{"to", IntAttr(static_cast<int64_t>(DataType::kF32))}};
  b.inputs = {MakeTensor<uint8_t>({static_cast<int64_t>(bools.size())}, bools, DataType::kBool)};
  b.output_dtypes = {DataType::kF32};
  const ir::Tensor fast_b = RunNodeOk0(b);
  b.cpu_features = 0;
  const ir::Tensor ref_b = RunNodeOk0(b);
  ASSERT_EQ(fast_b.byte_size(), ref_b.byte_size());
  EXPECT_EQ(std::memcmp(fast_b.raw_data(), ref_b.raw_data(), ref_b.byte_size()), 0) << "bool";
  EXPECT_EQ(fast_b.data<float>()[2], 1.0f);
}

// ---------------------------------------------------------------- same-shape elementwise

// The kernel Find picks for `op` on `inputs` values of `dtype` and static `dims`, output alike.
const kernels::KernelDef* PickShaped(OpType op, DataType dtype, const std::vector<int64_t>& dims,
                                     int inputs, const std::vector<int64_t>& last_dims = {}) {
  static ir::Graph* g = new ir::Graph();
  ir::Node* n = g->AddNode(op, "pick");
  for (int i = 0; i <= inputs; ++i) {
    auto v = g->AddValue("v" + std::to_string(g->values().size()));
    EXPECT_TRUE(v.ok());
    (*v)->dtype = dtype;
    (*v)->shape = ir::Shape::Of(i == inputs - 1 && !last_dims.empty() ? last_dims : dims);
    (i < inputs ? n->inputs : n->outputs).push_back(*v);
  }
  auto def = kernels::Registry::Default().Find(*n, kAvx512Bf16);
  EXPECT_TRUE(def.ok()) << def.status();
  return def.ok() ? *def : nullptr;
}

TEST(Avx512Elementwise, FullScalarRowAndColumnOperandsTakeTheFastKernel) {
  EXPECT_EQ(PickShaped(OpType::kAdd, DataType::kF32, {2, 8}, 2)->isa, Isa::kAvx512);
  EXPECT_EQ(PickShaped(OpType::kAdd, DataType::kF32, {2, 8}, 2, {8})->isa, Isa::kAvx512);
  EXPECT_EQ(PickShaped(OpType::kDiv, DataType::kF32, {2, 8}, 2, {2, 1})->isa, Isa::kAvx512);
  EXPECT_EQ(PickShaped(OpType::kMul, DataType::kBF16, {2, 3, 8}, 2, {})->isa, Isa::kAvx512);
  EXPECT_EQ(PickShaped(OpType::kSum, DataType::kBF16, {3, 5}, 4)->isa, Isa::kAvx512);
  EXPECT_EQ(PickShaped(OpType::kRelu, DataType::kF16, {7}, 1)->isa, Isa::kAvx512);
  // Any broadcast (avx512_broadcast_test.cc covers them); other dtypes: the reference.
  EXPECT_EQ(PickShaped(OpType::kAdd, DataType::kF32, {4, 5, 8}, 2, {4, 1, 8})->isa, Isa::kAvx512);
  EXPECT_EQ(PickShaped(OpType::kSum, DataType::kF32, {2, 8}, 2, {8})->isa, Isa::kAvx512);
  EXPECT_EQ(PickShaped(OpType::kAdd, DataType::kF64, {2, 8}, 2)->isa, Isa::kRef);
}

// Add, Sub, Mul and Div with an operand broadcast as a scalar, a row (the output's trailing
// dims) or a column (its leading dims), either side: the reference's bits, special values
// included, on row lengths around the 16-lane tail and above the parallel threshold.
TEST(Avx512Elementwise, BroadcastOperandsMatchTheReferenceBitForBit) {
  SKIP_WITHOUT(kAvx512Bf16);
  std::mt19937 gen(6);
  std::uniform_real_distribution<float> dist(-4, 4);
  const std::vector<float> special = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, 65504.0f};
  struct Case {
    std::vector<int64_t> a, b;
  };
  const Case cases[] = {{{3, 17}, {17}},          {{3, 17}, {3, 1}},     {{1}, {5, 33}},
                        {{2, 3, 40}, {1, 1, 40}}, {{2, 3, 40}, {}},      {{2, 3, 1}, {2, 3, 7}},
                        {{700, 130}, {130}},      {{700, 130}, {700, 1}}};
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (const Case& c : cases) {
      for (OpType op : {OpType::kAdd, OpType::kSub, OpType::kMul, OpType::kDiv}) {
        for (int swap = 0; swap < 2; ++swap) {
          NodeSpec spec;
          spec.op = op;
          spec.since_version = 14;
          for (const auto* dims : {swap ? &c.b : &c.a, swap ? &c.a : &c.b}) {
            std::vector<float> v(std::max<int64_t>(1, ir::NumElementsOf(*dims)));
            for (float& e : v) e = dist(gen);
            for (size_t j = 0; j < special.size() && 3 * j < v.size(); ++j) v[3 * j] = special[j];
            spec.inputs.push_back(t == DataType::kF32   ? MakeFloat(*dims, v)
                                  : t == DataType::kF16 ? MakeHalf(*dims, v)
                                                        : MakeBf16(*dims, v));
          }
          spec.output_dtypes = {t};
          const ir::Tensor a = RunNodeOk0(spec);
          spec.cpu_features = 0;
          const ir::Tensor b = RunNodeOk0(spec);
          ASSERT_EQ(a.dims(), b.dims());
          EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()), 0)
              << ir::OpName(op) << " " << DataTypeOnnxName(t) << " " << ir::DimsToString(c.a) << " "
              << ir::DimsToString(c.b) << " swap " << swap;
        }
      }
    }
  }
}

// Add, Sub, Mul, Sum (two and three inputs) and Relu without broadcasting: the reference's bits,
// special values included (NaN, +-Inf, +-0, subnormals and values that round on output), on
// lengths around the 16-lane tail and above the parallel threshold.
TEST(Avx512Elementwise, SameShapeOpsMatchTheReferenceBitForBit) {
  SKIP_WITHOUT(kAvx512Bf16);
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(-4, 4);
  const std::vector<float> special = {NAN,    INFINITY, -INFINITY, 0.0f,  -0.0f,
                                      1e-40f, -3e-39f,  65504.0f,  1e-8f, 3.0f + 0x1p-20f};
  struct Case {
    OpType op;
    int inputs;
  };
  const Case cases[] = {{OpType::kAdd, 2}, {OpType::kSub, 2}, {OpType::kMul, 2},
                        {OpType::kSum, 2}, {OpType::kSum, 3}, {OpType::kRelu, 1}};
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{17}, int64_t{70001}}) {
      for (const Case& c : cases) {
        NodeSpec spec;
        spec.op = c.op;
        spec.since_version = 14;
        for (int k = 0; k < c.inputs; ++k) {
          std::vector<float> v(n);
          for (float& e : v) e = dist(gen) * (k == 0 ? 1.0f : 0.37f);
          for (size_t j = 0; j < special.size() && j < v.size(); ++j) {
            v[(j * 7 + k * 3) % v.size()] = special[(j + k) % special.size()];
          }
          spec.inputs.push_back(t == DataType::kF32   ? MakeFloat({n}, v)
                                : t == DataType::kF16 ? MakeHalf({n}, v)
                                                      : MakeBf16({n}, v));
        }
        spec.output_dtypes = {t};
        ASSERT_EQ(PickShaped(c.op, t, {n}, c.inputs)->isa, Isa::kAvx512);
        ir::Tensor a = RunNodeOk0(spec);
        spec.cpu_features = 0;
        ir::Tensor b = RunNodeOk0(spec);
        ASSERT_EQ(a.byte_size(), b.byte_size());
        EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()), 0)
            << ir::OpName(c.op) << "/" << c.inputs << " " << DataTypeOnnxName(t) << " n=" << n;
      }
    }
  }
}

// ---------------------------------------------------------------- channels-last pools

// `v` as a tensor of float dtype `t` (fp16 / bf16 rounded to nearest even).
ir::Tensor MakeOf(DataType t, const std::vector<int64_t>& dims, const std::vector<float>& v) {
  return t == DataType::kF32   ? MakeFloat(dims, v)
         : t == DataType::kF16 ? MakeHalf(dims, v)
                               : MakeBf16(dims, v);
}

// Runs `spec` on the reference kernel with `nchw` as input 0 and on the fast kernel with its
// channels-last copy (kChannelsLastAttr), and expects the same bits back in NCHW.
void ExpectChannelsLastMatchesReference(NodeSpec spec, const ir::Tensor& nchw,
                                        const std::string& what) {
  auto nhwc = ir::ChannelsLastCopy(nchw, true);
  ASSERT_TRUE(nhwc.ok());
  if (spec.inputs.empty()) spec.inputs.resize(1);
  spec.inputs[0] = nchw;
  spec.cpu_features = 0;
  const ir::Tensor ref = RunNodeOk0(spec);
  spec.inputs[0] = *nhwc;
  spec.attrs.push_back({kernels::kChannelsLastAttr, IntAttr(1)});
  spec.cpu_features = std::nullopt;
  const ir::Tensor fast = RunNodeOk0(spec);
  auto back = ir::ChannelsLastCopy(fast, false);
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->dims(), ref.dims()) << what;
  EXPECT_EQ(std::memcmp(back->raw_data(), ref.raw_data(), ref.byte_size()), 0)
      << what << " " << DataTypeOnnxName(nchw.dtype());
}

// MaxPool, AveragePool and GlobalAveragePool on NHWC tensors (kChannelsLastAttr) against the
// reference on the NCHW tensors, bit for bit: windows with pads, strides, dilations and
// ceil_mode, channel counts around the 16-lane tail; for MaxPool NaN cells (skipped), ties of +0
// and -0 (the first cell wins) and a window that is all NaN (the lowest float, as the
// reference); AveragePool with and without count_include_pad, and windows with cells in the
// padding and past it (ceil_mode); windows inside the input and across its borders, and one
// taller than 16 rows.
TEST(Avx512Pool, ChannelsLastPoolsMatchTheReferenceBitForBit) {
  SKIP_WITHOUT(kAvx512Bf16);
  std::mt19937 gen(9);
  std::uniform_real_distribution<float> dist(-3, 3);
  struct Window {
    std::vector<int64_t> kernel, strides, pads, dilations;
    int64_t ceil_mode;
  };
  const Window windows[] = {{{2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 0},
                            {{3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0},
                            {{3, 2}, {1, 2}, {0, 1, 2, 0}, {2, 1}, 1},
                            {{2, 3}, {3, 2}, {0, 0, 0, 0}, {1, 1}, 1},
                            // The MaxPool windows with a loop of their own (2 x 2 and 3 x 3)
                            // where they lie inside the input, some crossing its end or pads.
                            {{2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 1},
                            {{3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 0},
                            {{3, 3}, {1, 2}, {0, 2, 1, 0}, {1, 1}, 0},
                            // Taller than the kernel lists window rows for (16).
                            {{18, 1}, {1, 1}, {6, 0, 6, 0}, {1, 1}, 0}};
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (int64_t c : {int64_t{3}, int64_t{16}, int64_t{37}}) {
      const std::vector<int64_t> dims = {2, c, 7, 9};
      std::vector<float> v(ir::NumElementsOf(dims));
      for (float& e : v) e = dist(gen);
      for (size_t i = 0; i < v.size(); i += 11) v[i] = NAN;
      for (size_t i = 5; i < v.size(); i += 13) v[i] = (i / 13) % 2 ? 0.0f : -0.0f;
      for (int64_t x = 0; x < 2; ++x) v[x] = NAN;  // (0, 0, 0, 0..1): NaN corner windows
      v[dims[3]] = NAN;
      v[dims[3] + 1] = NAN;
      const ir::Tensor nchw = MakeOf(t, dims, v);
      auto check = [&](const NodeSpec& spec, const ir::Tensor& x, const std::string& what) {
        ExpectChannelsLastMatchesReference(spec, x, what + " C=" + std::to_string(c));
      };
      for (const Window& w : windows) {
        NodeSpec spec;
        spec.op = OpType::kMaxPool;
        spec.since_version = 12;
        spec.attrs = {{"kernel_shape", IntsAttr(w.kernel)},
                      {"strides", IntsAttr(w.strides)},
                      {"pads", IntsAttr(w.pads)},
                      {"dilations", IntsAttr(w.dilations)},
                      {"ceil_mode", IntAttr(w.ceil_mode)}};
        check(spec, nchw, "MaxPool " + ir::DimsToString(w.kernel));
      }
      NodeSpec gap;
      gap.op = OpType::kGlobalAveragePool;
      gap.since_version = 1;
      // No NaN: one would make its whole plane NaN and hide the sums.
      for (float& e : v) e = std::isnan(e) ? 1.5f : e;
      const ir::Tensor finite = MakeOf(t, dims, v);
      check(gap, finite, "GlobalAveragePool");
      for (const Window& w : windows) {
        for (int64_t include : {0, 1}) {
          NodeSpec spec;
          spec.op = OpType::kAveragePool;
          spec.since_version = 19;
          spec.attrs = {
              {"kernel_shape", IntsAttr(w.kernel)}, {"strides", IntsAttr(w.strides)},
              {"pads", IntsAttr(w.pads)},           {"dilations", IntsAttr(w.dilations)},
              {"ceil_mode", IntAttr(w.ceil_mode)},  {"count_include_pad", IntAttr(include)}};
          check(spec, finite,
                "AveragePool " + ir::DimsToString(w.kernel) + " include_pad " +
                    std::to_string(include));
        }
      }
    }
  }
}

// BatchNormalization in inference mode on NHWC tensors against the reference on the NCHW
// tensors, bit for bit: channel counts around the 16-lane tail, parameters of another float
// dtype than X, opsets 9 and 15, negative and zero variances next to epsilon.
TEST(Avx512Norm, ChannelsLastBatchNormMatchesTheReferenceBitForBit) {
  SKIP_WITHOUT(kAvx512Bf16);
  std::mt19937 gen(13);
  std::uniform_real_distribution<float> dist(-3, 3);
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (int64_t c : {int64_t{3}, int64_t{16}, int64_t{37}}) {
      const std::vector<int64_t> dims = {2, c, 5, 7};
      std::vector<float> v(ir::NumElementsOf(dims));
      for (float& e : v) e = dist(gen);
      const ir::Tensor nchw = MakeOf(t, dims, v);
      std::vector<float> scale(c), bias(c), mean(c), var(c);
      for (int64_t j = 0; j < c; ++j) {
        scale[j] = dist(gen);
        bias[j] = dist(gen);
        mean[j] = dist(gen);
        var[j] = j % 5 == 0 ? 0.0f : std::fabs(dist(gen)) + 0.01f;
      }
      for (int opset : {9, 15}) {
        // Opset 15 lets the parameters have their own float dtype: fp32 with fp16 / bf16 X.
        const DataType pt = opset == 15 ? DataType::kF32 : t;
        auto param = [&](const std::vector<float>& p) { return MakeOf(pt, {c}, p); };
        NodeSpec spec;
        spec.op = OpType::kBatchNormalization;
        spec.since_version = opset;
        spec.attrs = {{"epsilon", FloatAttr(1e-3f)}};
        spec.inputs = {nchw, param(scale), param(bias), param(mean), param(var)};
        ExpectChannelsLastMatchesReference(
            spec, nchw, "C=" + std::to_string(c) + " opset " + std::to_string(opset));
      }
    }
  }
}

// LRN on NHWC tensors against the reference on the NCHW tensors, bit for bit: odd and even
// window sizes (windows clipped at both channel ends), a window wider than the channels,
// channel counts around the 16-lane tail.
TEST(Avx512Norm, ChannelsLastLrnMatchesTheReferenceBitForBit) {
  SKIP_WITHOUT(kAvx512Bf16);
  std::mt19937 gen(29);
  std::uniform_real_distribution<float> dist(-3, 3);
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (int64_t c : {int64_t{3}, int64_t{16}, int64_t{37}}) {
      const std::vector<int64_t> dims = {2, c, 4, 5};
      std::vector<float> v(ir::NumElementsOf(dims));
      for (float& e : v) e = dist(gen);
      const ir::Tensor nchw = MakeOf(t, dims, v);
      for (int64_t size : {1, 4, 5, 41}) {
        NodeSpec spec;
        spec.op = OpType::kLRN;
        spec.since_version = 13;
        spec.attrs = {{"size", IntAttr(size)},
                      {"alpha", FloatAttr(0.02f)},
                      {"beta", FloatAttr(0.75f)},
                      {"bias", FloatAttr(1.5f)}};
        ExpectChannelsLastMatchesReference(
            spec, nchw, "C=" + std::to_string(c) + " size " + std::to_string(size));
      }
    }
  }
}

// The reference pools, BatchNormalization and LRN refuse a channels-last node rather than read
// NHWC as NCHW.
TEST(Avx512Pool, ReferencePoolsRefuseChannelsLastNodes) {
  NodeSpec spec;
  spec.op = OpType::kMaxPool;
  spec.since_version = 12;
  spec.attrs = {{"kernel_shape", IntsAttr({2, 2})}, {kernels::kChannelsLastAttr, IntAttr(1)}};
  spec.inputs = {MakeFloat({1, 4, 4, 2}, std::vector<float>(32, 1.0f))};
  spec.cpu_features = 0;
  ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "channels-last");
  // And so does the reference BatchNormalization.
  NodeSpec bn;
  bn.op = OpType::kBatchNormalization;
  bn.since_version = 15;
  bn.attrs = {{kernels::kChannelsLastAttr, IntAttr(1)}};
  const ir::Tensor p = MakeFloat({2}, {1.0f, 1.0f});
  bn.inputs = {MakeFloat({1, 4, 4, 2}, std::vector<float>(32, 1.0f)), p, p, p, p};
  bn.cpu_features = 0;
  ExpectNodeError(bn, absl::StatusCode::kInvalidArgument, "channels-last");
  // And the reference LRN.
  NodeSpec lrn;
  lrn.op = OpType::kLRN;
  lrn.since_version = 13;
  lrn.attrs = {{"size", IntAttr(3)}, {kernels::kChannelsLastAttr, IntAttr(1)}};
  lrn.inputs = {MakeFloat({1, 4, 4, 2}, std::vector<float>(32, 1.0f))};
  lrn.cpu_features = 0;
  ExpectNodeError(lrn, absl::StatusCode::kInvalidArgument, "channels-last");
}

// ---------------------------------------------------------------- Erf

// Distance in units in the last place between two finite floats of the same sign.
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;  // order negative floats below the positive ones
  if (ib < 0) ib = INT32_MIN - ib;
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

TEST(Avx512Erf, Float32WithinTwoUlpOfExactAndSpecialValuesAsReference) {
  SKIP_WITHOUT(kAvx512Bf16);
  std::vector<float> x = Fp32Sample();  // strided over every fp32 bit pattern, NaN and Inf too
  for (float v : {0.0f, -0.0f, 1e-30f, 0.5f, 0.921875f, 1.0f, 2.0f, 3.9f, 4.0f, 10.0f, -2.5f}) {
    x.push_back(v);
  }
  NodeSpec spec;
  spec.op = OpType::kErf;
  spec.inputs = {MakeFloat({static_cast<int64_t>(x.size())}, x)};
  ASSERT_EQ(Pick(OpType::kErf, DataType::kF32, kAvx512Bf16)->isa, Isa::kAvx512);
  ir::Tensor fast = RunNodeOk0(spec);
  spec.cpu_features = 0;
  ir::Tensor ref = RunNodeOk0(spec);
  int64_t worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float got = fast.data<float>()[i], want = ref.data<float>()[i];
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(got)) << i;
      continue;
    }
    // The exact value rounded once to fp32 (erf in double is far more precise than fp32).
    const double e = std::erf(static_cast<double>(x[i]));
    const float exact = static_cast<float>(e);
    // libmvec's bound, measured over every 3rd fp32 pattern: 2 ulp for normal inputs with
    // |erf| < 0.99999; nearer +-1 it saturates up to 4 ulp early, and on subnormal inputs its
    // result is off in relative terms only: both within 2^-22 absolute.
    const bool normal = std::fabs(x[i]) >= 0x1p-126f && std::fabs(e) < 0.99999;
    if (normal) {
      ASSERT_LE(UlpDistance(got, exact), 2) << "erf(" << x[i] << ") = " << got << ", want " << e;
      worst = std::max(worst, UlpDistance(got, exact));
    } else {
      ASSERT_LE(std::fabs(got - e), 0x1p-22) << "erf(" << x[i] << ") = " << got << ", want " << e;
    }
    // The reference's scalar erff (libm, within 1 ulp) is as close.
    if (normal) {
      EXPECT_LE(UlpDistance(got, want), 3) << x[i];
    }
  }
  RecordProperty("worst_ulp", static_cast<int>(worst));
}

TEST(Avx512Erf, HalfTypesRoundTheFloatErfOnce) {
  SKIP_WITHOUT(kAvx512Bf16);
  std::vector<uint16_t> all16 = All16();
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    NodeSpec spec;
    spec.op = OpType::kErf;
    spec.inputs = {MakeTensor<uint16_t>({65536}, all16, t)};
    ir::Tensor fast = RunNodeOk0(spec);
    ASSERT_EQ(fast.dtype(), t);
    for (int i = 0; i < 65536; ++i) {
      const uint16_t b = all16[i];
      const float v = t == DataType::kF16 ? HalfBitsToFloat(b) : BFloat16BitsToFloat(b);
      const uint16_t got = fast.data<uint16_t>()[i];
      const float g = t == DataType::kF16 ? HalfBitsToFloat(got) : BFloat16BitsToFloat(got);
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(g)) << i;
        continue;
      }
      // erf computed in fp32 within 2 ulp, then rounded once: at most one 16-bit step from the
      // exact value rounded to the type.
      const float exact = static_cast<float>(std::erf(static_cast<double>(v)));
      const uint16_t want =
          t == DataType::kF16 ? FloatToHalfBits(exact) : FloatToBFloat16Bits(exact);
      const float w = t == DataType::kF16 ? HalfBitsToFloat(want) : BFloat16BitsToFloat(want);
      const int diff = std::abs(static_cast<int>(got & 0x7fff) - static_cast<int>(want & 0x7fff));
      EXPECT_TRUE(got == want || (diff <= 1 && (g >= 0) == (w >= 0)))
          << DataTypeOnnxName(t) << " erf(" << v << ") = " << g << ", want " << w;
    }
  }
}

// ---------------------------------------------------------------- Exp and Softmax

TEST(Avx512Exp, WithinOneUlpOfExactDownToSubnormalResults) {
  SKIP_WITHOUT(kAvx512);
  std::vector<float> x;
  for (float v : Fp32Sample()) {
    if (v > -110.0f && v < 88.7f) x.push_back(v);  // up to FLT_MAX, down past the subnormals
  }
  for (float v : {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 10.0f, -10.0f, 88.0f, -87.0f, -100.0f, -103.9f,
                  -1e4f, -3.4e38f}) {
    x.push_back(v);
  }
  std::vector<float> y(x.size());
  kernels::cpu::avx512::ExpF32(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const float exact = static_cast<float>(std::exp(static_cast<double>(x[i])));
    // Within one ulp (math.h): the polynomial's truncation is under 0.05 ulp, the rest is the
    // rounding of r and of Horner's steps (one ulp is the bound measured over this sample); in
    // the subnormal range vscalefps rounds once more (the distance counts subnormal steps, bit
    // patterns being ordered).
    ASSERT_LE(UlpDistance(y[i], exact), 1) << "exp(" << x[i] << ") = " << y[i];
  }
  const float special[4] = {-INFINITY, INFINITY, NAN, 89.0f};
  float out[4];
  kernels::cpu::avx512::ExpF32(special, out, 4);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], INFINITY);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_EQ(out[3], INFINITY);
}

// Softmax over the last axis against the reference kernel: the same arithmetic but the vector
// exp (1 ulp) and the sum's order (16 lanes; an n-term fp32 sum's rounding differs by at most
// n * 2^-24 relative, 130 terms: 7.7e-6): 2e-5 relative covers both with margin; 16-bit outputs
// may then round to a neighbour: one ulp of the type more.
TEST(Avx512Softmax, MatchesReferenceOnRowsOfEveryLength) {
  SKIP_WITHOUT(kAvx512Bf16);
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-8, 8);
  const std::vector<std::vector<int64_t>> shapes = {{3, 1},  {2, 7},      {4, 16},
                                                    {3, 17}, {2, 3, 128}, {2, 12, 130}};
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (const auto& dims : shapes) {
      std::vector<float> v(ir::NumElementsOf(dims));
      for (float& e : v) e = dist(gen);
      if (v.size() > 20) v[5] = NAN;  // its row is NaN everywhere, in both
      // MakeHalf / MakeBf16 round each value once (NaN stays NaN).
      ir::Tensor x = t == DataType::kF32   ? MakeFloat(dims, v)
                     : t == DataType::kF16 ? MakeHalf(dims, v)
                                           : MakeBf16(dims, v);
      NodeSpec spec;
      spec.op = OpType::kSoftmax;
      spec.since_version = 13;
      spec.inputs = {x};
      spec.output_dtypes = {t};
      ir::Tensor fast = RunNodeOk0(spec);
      spec.cpu_features = 0;
      ir::Tensor ref = RunNodeOk0(spec);
      const std::vector<float> a = ToFloats(fast), b = ToFloats(ref);
      ASSERT_EQ(a.size(), b.size());
      const double type_ulp = t == DataType::kF32 ? 0 : t == DataType::kF16 ? 0x1p-10 : 0x1p-7;
      for (size_t i = 0; i < a.size(); ++i) {
        if (std::isnan(b[i])) {
          EXPECT_TRUE(std::isnan(a[i])) << i;
          continue;
        }
        EXPECT_LE(std::fabs(a[i] - b[i]), (2e-5 + type_ulp) * std::fabs(b[i]) + 1e-30)
            << DataTypeOnnxName(t) << " " << ir::DimsToString(dims) << " element " << i;
      }
    }
  }
}

// Any axis, any opset: inner axes gather strided rows, opset 11 flattens from the axis on; the
// same tolerance as above.
TEST(Avx512Softmax, EveryAxisAndOpsetAsTheReference) {
  SKIP_WITHOUT(kAvx512Bf16);
  std::vector<float> v(2 * 3 * 20);
  std::mt19937 gen(12);
  std::uniform_real_distribution<float> dist(-6, 6);
  for (float& e : v) e = dist(gen);
  for (DataType t : {DataType::kF32, DataType::kBF16}) {
    for (auto [version, axis] : {std::pair{13, int64_t{0}},
                                 {13, int64_t{1}},
                                 {13, int64_t{-1}},
                                 {11, int64_t{1}},
                                 {11, int64_t{0}}}) {
      NodeSpec spec;
      spec.op = OpType::kSoftmax;
      spec.since_version = version;
      spec.attrs = {{"axis", IntAttr(axis)}};
      spec.inputs = {t == DataType::kF32 ? MakeFloat({2, 3, 20}, v) : MakeBf16({2, 3, 20}, v)};
      spec.output_dtypes = {t};
      ir::Graph g;
      ir::Node* n = g.AddNode(OpType::kSoftmax, "s");
      auto x = g.AddValue("x");
      ASSERT_TRUE(x.ok());
      (*x)->dtype = t;  // shape unknown: chosen all the same
      n->inputs = {*x};
      n->since_version = version;
      auto def = kernels::Registry::Default().Find(*n, DetectCpuFeatures());
      ASSERT_TRUE(def.ok()) << def.status();
      EXPECT_EQ((*def)->isa, Isa::kAvx512);
      const std::vector<float> a = ToFloats(RunNodeOk0(spec));
      spec.cpu_features = 0;
      const std::vector<float> b = ToFloats(RunNodeOk0(spec));
      const double type_ulp = t == DataType::kF32 ? 0 : 0x1p-7;
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_LE(std::fabs(a[i] - b[i]), (2e-5 + type_ulp) * std::fabs(b[i]) + 1e-30)
            << DataTypeOnnxName(t) << " opset " << version << " axis " << axis << " element " << i;
      }
    }
  }
}

// The vector row is the scalar loop its header spells out, bit for bit: max, ExpF32 of each
// difference, the sum in 16 lanes, one division each; rows of every tail length, with a NaN, an
// Inf and -0.
TEST(Avx512Softmax, RowIsTheScalarLoopBitForBit) {
  SKIP_WITHOUT(kAvx512);
  std::mt19937 gen(13);
  std::uniform_real_distribution<float> dist(-30, 30);
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 48; ++n) lengths.push_back(n);
  for (int64_t n : {127, 128, 129, 1000}) lengths.push_back(n);
  for (int64_t n : lengths) {
    for (int special = 0; special < 4; ++special) {
      std::vector<float> x(n);
      for (float& e : x) e = dist(gen);
      if (special == 1) x[n / 2] = NAN;
      if (special == 2) x[n - 1] = INFINITY;
      if (special == 3) x[0] = -0.0f;
      std::vector<float> want(x);
      float mx = -INFINITY;
      for (float v : want) mx = v > mx ? v : mx;
      for (float& v : want) v -= mx;
      kernels::cpu::avx512::ExpF32(want.data(), want.data(), n);
      float lanes[16] = {};
      for (int64_t i = 0; i < n; ++i) lanes[i % 16] += want[i];
      float sum = 0.0f;
      for (float l : lanes) sum += l;
      for (float& v : want) v /= sum;
      std::vector<float> got(n), in_place(x);
      kernels::cpu::avx512::SoftmaxRowF32(x.data(), got.data(), n);
      kernels::cpu::avx512::SoftmaxRowF32(in_place.data(), in_place.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::memcmp(&got[i], &want[i], 4), 0)
            << "n " << n << " case " << special << " element " << i << ": " << got[i] << " vs "
            << want[i];
        ASSERT_EQ(std::memcmp(&in_place[i], &want[i], 4), 0) << "in place, n " << n << " " << i;
      }
    }
  }
}

// ---------------------------------------------------------------- LayerNorm

// The kernel Registry::Find picks for a spec's node on this CPU.
Isa ChosenIsa(OpType op, DataType t, std::vector<std::pair<std::string, ir::Attribute>> attrs) {
  ir::Graph g;
  ir::Node* n = g.AddNode(op, "n");
  auto x = g.AddValue("x");
  if (!x.ok()) return Isa::kRef;
  (*x)->dtype = t;
  n->inputs = {*x};
  for (auto& [k, v] : attrs) n->attrs[k] = v;
  auto def = kernels::Registry::Default().Find(*n, DetectCpuFeatures());
  return def.ok() ? (*def)->isa : Isa::kRef;
}

// Bound on |fast - reference| for one LayerNorm output: the two kernels add the row's values
// (and the squared differences) in different orders; an n-term fp32 sum in any order is within
// (n - 1) * 2^-24 * sum|terms| of the exact sum, so two orders differ by twice that. The mean
// then moves every d by at most that much over n, the variance by the same relative amount over
// sum d^2 (inv_std by half of it); 4x the first-order bound, plus a few roundings of y itself.
double LayerNormBound(const std::vector<float>& v, int64_t j, double s) {
  const double n = static_cast<double>(v.size());
  double mean = 0, abs_sum = 0;
  for (float e : v) mean += e, abs_sum += std::fabs(e);
  mean /= n;
  double sq = 0;
  for (float e : v) sq += (e - mean) * (e - mean);
  const double inv_std = 1 / std::sqrt(sq / n + 1e-5);
  const double order = 2 * n * 0x1p-24;
  const double d = std::fabs(v[j] - mean);
  return 4 * order * (abs_sum / n + d) * inv_std * std::fabs(s) +
         8 * 0x1p-24 * (d * inv_std * std::fabs(s) + 1);
}

// LayerNormalization against the reference on rows of every tail length, each dtype, with and
// without bias, scale shaped [n] or [1, n], Mean and InvStdDev requested.
TEST(Avx512LayerNorm, MatchesReferenceOnRowsOfEveryLength) {
  SKIP_WITHOUT(kAvx512Bf16);
  std::mt19937 gen(21);
  std::uniform_real_distribution<float> dist(-4, 4);
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    EXPECT_EQ(ChosenIsa(OpType::kLayerNormalization, t, {}), Isa::kAvx512);
    for (int64_t n : {1, 7, 16, 17, 100, 768}) {
      for (bool with_bias : {false, true}) {
        const int64_t rows = 3;
        std::vector<float> xv(rows * n), sv(n), bv(n);
        for (float& e : xv) e = dist(gen);
        for (float& e : sv) e = dist(gen);
        for (float& e : bv) e = dist(gen);
        auto make = [t](std::vector<int64_t> dims, const std::vector<float>& v) {
          return t == DataType::kF32   ? MakeFloat(dims, v)
                 : t == DataType::kF16 ? MakeHalf(dims, v)
                                       : MakeBf16(dims, v);
        };
        NodeSpec spec;
        spec.op = OpType::kLayerNormalization;
        spec.since_version = 17;
        spec.inputs = {make({rows, n}, xv),
                       make(with_bias ? std::vector<int64_t>{n} : std::vector<int64_t>{1, n}, sv)};
        if (with_bias) spec.inputs.push_back(make({n}, bv));
        spec.num_outputs = 3;
        const std::vector<ir::Tensor> fast = RunNodeOk(spec);
        spec.cpu_features = 0;
        const std::vector<ir::Tensor> ref = RunNodeOk(spec);
        ASSERT_EQ(fast.size(), 3u);
        // The values the kernels read: x rounded to the type.
        const std::vector<float> xr = ToFloats(spec.inputs[0]), sr = ToFloats(spec.inputs[1]);
        const std::vector<float> a = ToFloats(fast[0]), b = ToFloats(ref[0]);
        ASSERT_EQ(a.size(), b.size());
        const double type_ulp = t == DataType::kF32 ? 0 : t == DataType::kF16 ? 0x1p-10 : 0x1p-7;
        for (int64_t r = 0; r < rows; ++r) {
          const std::vector<float> row(xr.begin() + r * n, xr.begin() + (r + 1) * n);
          for (int64_t j = 0; j < n; ++j) {
            const int64_t i = r * n + j;
            EXPECT_LE(std::fabs(a[i] - b[i]),
                      LayerNormBound(row, j, sr[j]) + type_ulp * std::fabs(b[i]))
                << DataTypeOnnxName(t) << " n " << n << " row " << r << " element " << j;
          }
        }
        for (int k = 1; k <= 2; ++k) {
          ASSERT_EQ(fast[k].dtype(), DataType::kF32);
          EXPECT_EQ(fast[k].dims(), (std::vector<int64_t>{rows, 1}));
          const std::vector<float> fa = ToFloats(fast[k]), fb = ToFloats(ref[k]);
          for (int64_t r = 0; r < rows; ++r) {
            // Mean within the order bound of its sum; InvStdDev within it relatively.
            EXPECT_NEAR(fa[r], fb[r], 1e-5 * std::max(1.0f, std::fabs(fb[r]))) << k << " " << r;
          }
        }
      }
    }
  }
}

// The fused AddLayerNorm is Add then LayerNormalization to the bit in fp32 (the report relies
// on an fp32 engine matching its unfused reference), and its sum output is the Add's.
TEST(Avx512LayerNorm, FusedAddIsAddThenLayerNormBitForBit) {
  SKIP_WITHOUT(kAvx512Bf16);
  EXPECT_EQ(ChosenIsa(OpType::kAddLayerNorm, DataType::kF32, {}), Isa::kAvx512);
  std::mt19937 gen(22);
  std::uniform_real_distribution<float> dist(-3, 3);
  for (int64_t n : {5, 32, 33, 768}) {
    const int64_t rows = 4;
    std::vector<float> av(rows * n), bv(rows * n), sv(n), cv(n);
    for (auto* v : {&av, &bv, &sv, &cv}) {
      for (float& e : *v) e = dist(gen);
    }
    const ir::Tensor a = MakeFloat({rows, n}, av), b = MakeFloat({rows, n}, bv);
    const ir::Tensor scale = MakeFloat({n}, sv), bias = MakeFloat({n}, cv);
    NodeSpec fused;
    fused.op = OpType::kAddLayerNorm;
    fused.since_version = 1;
    fused.attrs = {{"axis", IntAttr(-1)}, {"epsilon", FloatAttr(1e-5f)}};
    fused.inputs = {a, b, scale, bias};
    fused.num_outputs = 2;
    const std::vector<ir::Tensor> f = RunNodeOk(fused);
    NodeSpec add;
    add.op = OpType::kAdd;
    add.inputs = {a, b};
    const ir::Tensor sum = RunNodeOk0(add);
    NodeSpec ln;
    ln.op = OpType::kLayerNormalization;
    ln.since_version = 17;
    ln.inputs = {sum, scale, bias};
    const ir::Tensor y = RunNodeOk0(ln);
    ASSERT_EQ(f.size(), 2u);
    ASSERT_EQ(f[0].num_elements(), y.num_elements());
    EXPECT_EQ(std::memcmp(f[0].raw_data(), y.raw_data(), y.num_elements() * 4), 0) << n;
    EXPECT_EQ(std::memcmp(f[1].raw_data(), sum.raw_data(), sum.num_elements() * 4), 0) << n;
    // And within the order bound of the reference's fused kernel.
    fused.cpu_features = 0;
    const std::vector<float> r = ToFloats(RunNodeOk(fused)[0]), got = ToFloats(f[0]);
    const std::vector<float> s = ToFloats(sum);
    for (int64_t row = 0; row < rows; ++row) {
      const std::vector<float> v(s.begin() + row * n, s.begin() + (row + 1) * n);
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_LE(std::fabs(got[row * n + j] - r[row * n + j]), LayerNormBound(v, j, sv[j]))
            << n << " " << row << " " << j;
      }
    }
  }
}

// What the rows do not cover runs the reference kernel, to the bit: a scale broadcast within the
// row, an AddLayerNorm operand broadcast; a bfloat16 stash is never picked.
TEST(Avx512LayerNorm, UncoveredRunsAreTheReference) {
  SKIP_WITHOUT(kAvx512Bf16);
  EXPECT_EQ(ChosenIsa(OpType::kLayerNormalization, DataType::kF32, {{"stash_type", IntAttr(16)}}),
            Isa::kRef);
  std::vector<float> xv(2 * 3 * 8);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(static_cast<float>(i));
  NodeSpec ln;
  ln.op = OpType::kLayerNormalization;
  ln.since_version = 17;
  ln.attrs = {{"axis", IntAttr(1)}};
  ln.inputs = {MakeFloat({2, 3, 8}, xv), MakeFloat({8}, Iota(8, 0.5f))};  // per last dim only
  NodeSpec add;
  add.op = OpType::kAddLayerNorm;
  add.since_version = 1;
  add.inputs = {MakeFloat({2, 3, 8}, xv), MakeFloat({8}, Iota(8, 1.0f)),  // B broadcast
                MakeFloat({8}, Iota(8, 0.5f))};
  for (NodeSpec* spec : {&ln, &add}) {
    spec->cpu_features.reset();
    const ir::Tensor fast = RunNodeOk0(*spec);
    spec->cpu_features = 0;
    const ir::Tensor ref = RunNodeOk0(*spec);
    ASSERT_EQ(fast.num_elements(), ref.num_elements());
    EXPECT_EQ(std::memcmp(fast.raw_data(), ref.raw_data(), ref.num_elements() * 4), 0)
        << OpName(spec->op);
  }
}

// ---------------------------------------------------------------- GEMM

// Flushes a subnormal to zero of the same sign (vdpbf16ps's FTZ).
float Ftz(float x) { return std::fabs(x) < 0x1p-126f ? std::copysign(0.0f, x) : x; }

bool HasSubnormalBf16(const std::vector<uint16_t>& v) {
  for (uint16_t b : v) {
    if ((b & 0x7f80) == 0 && (b & 0x7f) != 0) return true;
  }
  return false;
}

// One GEMM problem: A' (m x k) and B' (k x n) as exact fp32 values of the storage type, and the
// Gemm epilogue.
struct Problem {
  DataType type = DataType::kF32;
  int64_t m = 0, n = 0, k = 0;
  std::vector<float> a, b;  // row-major A' and B' (after the transposes)
  bool gemm = false;
  float alpha = 1.0f, beta = 1.0f;
  std::vector<float> c;  // m x n after broadcasting, empty if none
  bool bf16_dot = false;
};

Problem MakeProblem(DataType t, int64_t m, int64_t n, int64_t k) {
  Problem p;
  p.type = t;
  p.m = m;
  p.n = n;
  p.k = k;
  return p;
}

// Scalar emulation of gemm.h's arithmetic; returns fp32 values before the output rounding.
std::vector<float> Emulate(const Problem& p) {
  std::vector<float> y(p.m * p.n);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      auto a = [&](int64_t kk) { return kk < p.k ? p.a[i * p.k + kk] : 0.0f; };
      auto b = [&](int64_t kk) { return kk < p.k ? p.b[kk * p.n + j] : 0.0f; };
      float acc = 0.0f;
      if (p.bf16_dot) {
        for (int64_t q = 0; 2 * q < p.k; ++q) {
          acc = Ftz(std::fma(a(2 * q + 1), b(2 * q + 1), acc));
          acc = Ftz(std::fma(a(2 * q), b(2 * q), acc));
        }
      } else {
        for (int64_t kk = 0; kk < p.k; ++kk) acc = std::fma(a(kk), b(kk), acc);
      }
      if (p.gemm) {
        acc = p.alpha * acc;
        if (!p.c.empty()) acc = acc + p.beta * p.c[i * p.n + j];
      }
      y[i * p.n + j] = acc;
    }
  }
  return y;
}

float RoundTo(DataType t, float v) {
  if (t == DataType::kF16) return HalfBitsToFloat(FloatToHalfBits(v));
  if (t == DataType::kBF16) return BFloat16BitsToFloat(FloatToBFloat16Bits(v));
  return v;
}

// Spacing of the output type at |v| (0 for fp32: the fp32 bound already covers it).
float OutputUlp(DataType t, float v) {
  if (t == DataType::kF32) return 0.0f;
  const int mant = t == DataType::kF16 ? 10 : 7;
  const int min_exp = t == DataType::kF16 ? -14 : -126;
  int e = v == 0.0f ? min_exp : std::max(min_exp, std::ilogb(v));
  return std::ldexp(1.0f, e - mant);
}

// Random values in [-1, 1] exactly representable in `t`, and their storage.
ir::Tensor RandomTensor(DataType t, std::vector<int64_t> dims, std::mt19937& gen,
                        std::vector<float>* values) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  values->resize(n);
  for (float& v : *values) v = RoundTo(t, dist(gen));
  if (t == DataType::kF32) return MakeFloat(dims, *values);
  return t == DataType::kF16 ? MakeHalf(dims, *values) : MakeBf16(dims, *values);
}

std::vector<float> Floats(const ir::Tensor& t) { return ToFloats(t); }

// Runs `spec` on the fast and the reference kernel and checks (1) fast == rounded emulation bit
// for bit when `p` is given, (2) |fast - ref| within the accumulation-order bound.
void CheckAgainstRef(NodeSpec spec, const Problem* p, const std::vector<float>& abs_dot,
                     const std::vector<float>& abs_c, float abs_alpha, int64_t k, DataType t,
                     bool bf16_dot) {
  ir::Tensor fast_t = RunNodeOk0(spec);
  spec.cpu_features = 0;
  ir::Tensor ref_t = RunNodeOk0(spec);
  ASSERT_TRUE(fast_t.defined() && ref_t.defined());
  ASSERT_EQ(fast_t.dims(), ref_t.dims());
  std::vector<float> fast = Floats(fast_t), ref = Floats(ref_t);
  ASSERT_EQ(fast.size(), abs_dot.size());
  // On AMX the tile unit's rounding inside a block of pairs is the hardware's own (gemm_avx512.cc),
  // so the bit-exact emulation holds for the vdpbf16ps order only; the bound below still holds.
  const bool amx = bf16_dot && kernels::cpu::avx512::GemmUsesAmx();
  if (p != nullptr && !amx) {
    std::vector<float> emu = Emulate(*p);
    for (size_t i = 0; i < fast.size(); ++i) {
      ASSERT_EQ(FloatBits(fast[i]), FloatBits(RoundTo(t, emu[i])))
          << "emulation mismatch at " << i << " (m,n,k)=" << p->m << "," << p->n << "," << p->k;
    }
  }
  // Both kernels compute each output as an fp32 sum of the same K products (exact for fp16 and
  // bf16 inputs) in different orders, then the same epilogue. Any order of a K-term dot product
  // is within gamma_K * sum|a b| of the exact value (Higham, Accuracy and Stability, 3.1), with
  // gamma_n = n u / (1 - n u), u = 2^-24; the epilogue's two roundings count as two more terms.
  // The difference of the two is at most twice that. The vdpbf16ps path also flushes each
  // subnormal partial sum (at most 2^-126 per step, 2 per pair). A 16-bit output rounds both
  // values once, which can split them by one more unit in the last place at most.
  const double u = std::ldexp(1.0, -24);
  const double n_terms = static_cast<double>(k + 2);
  const double gamma = n_terms * u / (1.0 - n_terms * u);
  for (size_t i = 0; i < fast.size(); ++i) {
    double tol = 2.0 * gamma * (abs_alpha * abs_dot[i] + abs_c[i]);
    if (bf16_dot) tol += static_cast<double>(k + 1) * std::ldexp(1.0, -126);
    tol += OutputUlp(t, std::max(std::fabs(fast[i]), std::fabs(ref[i])));
    ASSERT_LE(std::fabs(static_cast<double>(fast[i]) - ref[i]), tol)
        << "at " << i << " fast " << fast[i] << " ref " << ref[i] << " k " << k;
  }
}

uint64_t FeaturesFor(DataType t) { return t == DataType::kBF16 ? kAvx512Bf16 : kAvx512; }

// sum_k |A'(i,k) B'(k,j)| per output.
std::vector<float> AbsDot(const Problem& p) {
  std::vector<float> s(p.m * p.n, 0.0f);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double acc = 0;
      for (int64_t kk = 0; kk < p.k; ++kk) acc += std::fabs(p.a[i * p.k + kk] * p.b[kk * p.n + j]);
      s[i * p.n + j] = static_cast<float>(acc);
    }
  }
  return s;
}

bool DotPath(DataType t, const ir::Tensor& a, const ir::Tensor& b) {
  return t == DataType::kBF16 && !HasSubnormalBf16(Bits16(a)) && !HasSubnormalBf16(Bits16(b));
}

class Avx512Gemm : public ::testing::TestWithParam<DataType> {};

struct Shape {
  int64_t m, n, k;
};

// Odd sizes, edge tiles (rows % 6, columns % 64, odd K for the bf16 pairs), K = 0 and 1; the
// fp32 6-row tile's unrolled loop with every K % 4 (K = 2: no unrolled step at all).
std::vector<Shape> Shapes() {
  std::vector<Shape> s = {{1, 1, 1},   {1, 64, 1},    {6, 64, 8},     {7, 65, 3},
                          {5, 17, 2},  {13, 130, 33}, {64, 64, 64},   {37, 200, 129},
                          {2, 3, 0},   {3, 1, 5},     {12, 128, 768}, {128, 96, 64},
                          {24, 70, 2}, {18, 64, 7},   {30, 100, 14}};
  std::mt19937 gen(7);
  for (int i = 0; i < 12; ++i) {
    s.push_back({1 + static_cast<int64_t>(gen() % 40), 1 + static_cast<int64_t>(gen() % 150),
                 1 + static_cast<int64_t>(gen() % 90)});
  }
  return s;
}

TEST_P(Avx512Gemm, MatMulMatchesEmulationAndReference) {
  const DataType t = GetParam();
  SKIP_WITHOUT(FeaturesFor(t));
  std::mt19937 gen(11);
  for (const Shape& s : Shapes()) {
    Problem p = MakeProblem(t, s.m, s.n, s.k);
    ir::Tensor a = RandomTensor(t, {s.m, s.k}, gen, &p.a);
    ir::Tensor b = RandomTensor(t, {s.k, s.n}, gen, &p.b);
    p.bf16_dot = DotPath(t, a, b);
    NodeSpec spec;
    spec.op = OpType::kMatMul;
    spec.inputs = {a, b};
    CheckAgainstRef(spec, &p, AbsDot(p), std::vector<float>(s.m * s.n, 0.0f), 1.0f, s.k, t,
                    p.bf16_dot);
  }
}

TEST_P(Avx512Gemm, GemmTransposesAlphaBetaAndBiasShapes) {
  const DataType t = GetParam();
  SKIP_WITHOUT(FeaturesFor(t));
  std::mt19937 gen(12);
  const std::vector<Shape> shapes = {{7, 65, 3}, {13, 130, 33}, {1, 5, 64}, {30, 70, 17}};
  int variant = 0;
  for (const Shape& s : shapes) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb, ++variant) {
        Problem p = MakeProblem(t, s.m, s.n, s.k);
        p.gemm = true;
        p.alpha = variant % 3 == 0 ? 1.0f : 0.5f;
        p.beta = variant % 2 == 0 ? 2.0f : 1.0f;
        std::vector<float> av, bv, cv;
        ir::Tensor a = RandomTensor(
            t, ta ? std::vector<int64_t>{s.k, s.m} : std::vector<int64_t>{s.m, s.k}, gen, &av);
        ir::Tensor b = RandomTensor(
            t, tb ? std::vector<int64_t>{s.n, s.k} : std::vector<int64_t>{s.k, s.n}, gen, &bv);
        p.a.resize(s.m * s.k);
        p.b.resize(s.k * s.n);
        for (int64_t i = 0; i < s.m; ++i) {
          for (int64_t kk = 0; kk < s.k; ++kk) {
            p.a[i * s.k + kk] = ta ? av[kk * s.m + i] : av[i * s.k + kk];
          }
        }
        for (int64_t kk = 0; kk < s.k; ++kk) {
          for (int64_t j = 0; j < s.n; ++j) {
            p.b[kk * s.n + j] = tb ? bv[j * s.k + kk] : bv[kk * s.n + j];
          }
        }
        // C: none, [n], [m, 1], [m, n], [1] in turn.
        std::vector<int64_t> cdims;
        const int ckind = variant % 5;
        if (ckind == 1) cdims = {s.n};
        if (ckind == 2) cdims = {s.m, 1};
        if (ckind == 3) cdims = {s.m, s.n};
        if (ckind == 4) cdims = {1};
        NodeSpec spec;
        spec.op = OpType::kGemm;
        spec.attrs = {{"transA", IntAttr(ta)},
                      {"transB", IntAttr(tb)},
                      {"alpha", FloatAttr(p.alpha)},
                      {"beta", FloatAttr(p.beta)}};
        spec.inputs = {a, b};
        std::vector<float> abs_c(s.m * s.n, 0.0f);
        if (ckind != 0) {
          ir::Tensor c = RandomTensor(t, cdims, gen, &cv);
          spec.inputs.push_back(c);
          p.c.resize(s.m * s.n);
          for (int64_t i = 0; i < s.m; ++i) {
            for (int64_t j = 0; j < s.n; ++j) {
              const int64_t ci = ckind == 1 ? j : ckind == 2 ? i : ckind == 3 ? i * s.n + j : 0;
              p.c[i * s.n + j] = cv[ci];
              abs_c[i * s.n + j] = std::fabs(p.beta * cv[ci]);
            }
          }
        }
        p.bf16_dot = DotPath(t, a, b);
        CheckAgainstRef(spec, &p, AbsDot(p), abs_c, std::fabs(p.alpha), s.k, t, p.bf16_dot);
      }
    }
  }
}

// A constant fp32, fp16 or bf16 B of Gemm (a classifier's weight, usually transposed) is packed
// once, at the first run: the bits of the unpacked path, on the packing run and on a later one that
// reads the cached packing.
TEST(Avx512Gemm, ConstantWeightPackedAtTheFirstRunGivesTheSameBits) {
  SKIP_WITHOUT(kAvx512);
  std::mt19937 gen(21);
  const std::vector<Shape> shapes = {{5, 130, 70}, {3, 1000, 64}, {1, 65, 1}};
  for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    if (dt == DataType::kBF16 && (DetectCpuFeatures() & kCpuAvx512Bf16) == 0) continue;
    for (const Shape& s : shapes) {
      for (int tb = 0; tb < 2; ++tb) {
        std::vector<float> unused;
        NodeSpec spec;
        spec.op = OpType::kGemm;
        spec.attrs = {{"transB", IntAttr(tb)}, {"beta", FloatAttr(0.5f)}};
        spec.inputs = {
            RandomTensor(dt, {s.m, s.k}, gen, &unused),
            RandomTensor(dt, tb ? std::vector<int64_t>{s.n, s.k} : std::vector<int64_t>{s.k, s.n},
                         gen, &unused),
            RandomTensor(dt, {s.n}, gen, &unused)};
        const ir::Tensor plain = RunNodeOk0(spec);
        spec.constant_inputs = {1};
        for (int runs : {1, 3}) {
          spec.runs = runs;
          const ir::Tensor packed = RunNodeOk0(spec);
          ASSERT_EQ(packed.byte_size(), plain.byte_size());
          EXPECT_EQ(std::memcmp(packed.raw_data(), plain.raw_data(), plain.byte_size()), 0)
              << DataTypeName(dt) << " " << s.m << "x" << s.n << "x" << s.k << " transB " << tb
              << " runs " << runs;
        }
      }
    }
  }
}

// Batched MatMul with broadcast batch dims and 1-D operands, against the reference kernel.
TEST_P(Avx512Gemm, MatMulBroadcastAndVectors) {
  const DataType t = GetParam();
  SKIP_WITHOUT(FeaturesFor(t));
  std::mt19937 gen(13);
  struct Case {
    std::vector<int64_t> a, b;
  };
  const std::vector<Case> cases = {{{2, 1, 7, 9}, {3, 9, 70}},
                                   {{12, 13, 64}, {12, 64, 13}},
                                   {{9}, {2, 9, 5}},
                                   {{4, 6, 9}, {9}},
                                   {{9}, {9}},
                                   {{1, 5, 3}, {4, 3, 2}}};
  for (const Case& c : cases) {
    std::vector<float> av, bv;
    ir::Tensor a = RandomTensor(t, c.a, gen, &av);
    ir::Tensor b = RandomTensor(t, c.b, gen, &bv);
    NodeSpec spec;
    spec.op = OpType::kMatMul;
    spec.inputs = {a, b};
    spec.cpu_features = 0;
    ir::Tensor ref = RunNodeOk0(spec);
    // Every product is bounded by 1 in magnitude, so sum |a b| <= K for the bound.
    const int64_t k = c.a.back();
    std::vector<float> bound(ref.num_elements(), static_cast<float>(k));
    spec.cpu_features.reset();
    CheckAgainstRef(spec, nullptr, bound, std::vector<float>(bound.size(), 0.0f), 1.0f, k, t,
                    DotPath(t, a, b));
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Avx512Gemm,
                         ::testing::Values(DataType::kF32, DataType::kF16, DataType::kBF16),
                         [](const auto& info) {
                           return std::string(DataTypeOnnxName(info.param));
                         });

// bf16 corner cases of the dot path's definition: a subnormal partial sum is flushed (products
// of normal bf16 values can be subnormal in fp32), and a subnormal input switches to the fp32
// path, which keeps it.
TEST(Avx512GemmBf16, FlushesSubnormalPartialSumsButNeverSubnormalInputs) {
  SKIP_WITHOUT(kAvx512Bf16);
  const float tiny = std::ldexp(1.0f, -70), small = std::ldexp(1.0f, -60);  // product 2^-130
  {
    Problem p = MakeProblem(DataType::kBF16, 1, 1, 2);
    p.a = {tiny, tiny};
    p.b = {small, small};
    p.bf16_dot = true;
    NodeSpec spec;
    spec.op = OpType::kMatMul;
    spec.inputs = {MakeBf16({1, 2}, p.a), MakeBf16({2, 1}, p.b)};
    ir::Tensor y = RunNodeOk0(spec);
    EXPECT_EQ(ToFloats(y)[0], RoundTo(DataType::kBF16, Emulate(p)[0]));
    EXPECT_EQ(ToFloats(y)[0], 0.0f);  // the reference keeps 2^-129
  }
  {
    const float sub = std::ldexp(1.0f, -130);  // a subnormal bf16 input
    Problem p = MakeProblem(DataType::kBF16, 1, 1, 3);
    p.a = {sub, 1.0f, 1.0f};
    p.b = {1.0f, std::ldexp(1.0f, -140), -std::ldexp(1.0f, -140)};
    p.bf16_dot = false;
    NodeSpec spec;
    spec.op = OpType::kMatMul;
    spec.inputs = {MakeBf16({1, 3}, p.a), MakeBf16({3, 1}, p.b)};
    ir::Tensor y = RunNodeOk0(spec);
    EXPECT_EQ(ToFloats(y)[0], RoundTo(DataType::kBF16, Emulate(p)[0]));
    EXPECT_EQ(ToFloats(y)[0], sub);
  }
}

// The subnormal scan that picks the bf16 path: a single subnormal (either sign, the smallest
// and largest mantissa) found wherever it sits, in the unrolled body's four vectors and in the
// tail; normal values, zeros of either sign, infinities and NaNs never count.
TEST(Avx512GemmBf16, SubnormalScanFindsOneValueAnywhere) {
  SKIP_WITHOUT(kAvx512Bf16);
  namespace x = kernels::cpu::avx512;
  // 1, the smallest normal, +0 and -0, inf, a NaN, minus the smallest normal.
  const std::vector<uint16_t> fill = {0x3f80, 0x0080, 0x8000, 0x0000, 0x7f80, 0xffc1, 0x8080};
  for (int64_t n : {1, 31, 32, 127, 128, 129, 300, 4096}) {
    std::vector<uint16_t> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = fill[i % fill.size()];
    EXPECT_TRUE(x::Bf16DotPathAllowed(v.data(), n)) << n;
    for (int64_t at : {int64_t{0}, n / 2, n - 1, std::min<int64_t>(n - 1, 40),
                       std::min<int64_t>(n - 1, 70), std::min<int64_t>(n - 1, 100)}) {
      for (uint16_t sub :
           {uint16_t{0x0001}, uint16_t{0x007f}, uint16_t{0x8001}, uint16_t{0x807f}}) {
        std::vector<uint16_t> w = v;
        w[at] = sub;
        EXPECT_FALSE(x::Bf16DotPathAllowed(w.data(), n)) << n << " at " << at << " " << sub;
        // Values past n are not read as part of it.
        EXPECT_TRUE(x::Bf16DotPathAllowed(w.data(), at)) << n << " at " << at;
      }
    }
  }
}

// A MatMul of two activations large enough for the threads to scan A and B together: one
// subnormal in either, anywhere, sends it down the fp32-order path. The subnormal is the only
// term of one output (its row of A or column of B otherwise zero, its partner 2^100), which the
// dot path would read as zero: 2^-128 * 2^100 = 2^-28 there, 0 on the dot path.
TEST(Avx512GemmBf16, LargeActivationsWithOneSubnormalTakeTheFp32Order) {
  SKIP_WITHOUT(kAvx512Bf16);
  const int64_t m = 96, k = 700, n = 130;  // A 67200 values, B 91000: six 32K chunks in all
  const float sub = std::ldexp(1.0f, -128), big = std::ldexp(1.0f, 100);
  std::mt19937 gen(5);
  // Where the subnormal goes: none, A's last chunk, B's first chunk, B's last chunk.
  const int64_t a_at[] = {-1, m * k - 5, -1, -1}, b_at[] = {-1, -1, 100, k * n - 1};
  for (int which = 0; which < 4; ++which) {
    Problem p = MakeProblem(DataType::kBF16, m, n, k);
    RandomTensor(DataType::kBF16, {m, k}, gen, &p.a);
    RandomTensor(DataType::kBF16, {k, n}, gen, &p.b);
    int64_t out = -1;  // the output the subnormal alone makes
    if (a_at[which] >= 0) {
      const int64_t i = a_at[which] / k, kk = a_at[which] % k;
      for (int64_t c = 0; c < k; ++c) p.a[i * k + c] = 0.0f;
      p.a[a_at[which]] = sub;
      p.b[kk * n] = big;
      out = i * n;
    }
    if (b_at[which] >= 0) {
      const int64_t kk = b_at[which] / n, j = b_at[which] % n;
      for (int64_t r = 0; r < k; ++r) p.b[r * n + j] = 0.0f;
      p.b[b_at[which]] = sub;
      p.a[kk] = big;
      out = j;
    }
    const ir::Tensor a = MakeBf16({m, k}, p.a), b = MakeBf16({k, n}, p.b);
    p.bf16_dot = which == 0;
    ASSERT_EQ(DotPath(DataType::kBF16, a, b), p.bf16_dot);
    NodeSpec spec;
    spec.op = OpType::kMatMul;
    spec.inputs = {a, b};
    CheckAgainstRef(spec, &p, AbsDot(p), std::vector<float>(m * n, 0.0f), 1.0f, k, DataType::kBF16,
                    p.bf16_dot);
    if (out >= 0) EXPECT_EQ(ToFloats(RunNodeOk0(spec))[out], std::ldexp(1.0f, -28)) << which;
  }
}

// A bf16 weight the build stored packed (builder PackWeights, kPackedBAttr) gives the same bits
// as the plain weight: on the dot path, and on the fp32-order path an A with a subnormal takes.
TEST(Avx512GemmBf16, PackedWeightGivesTheSameBits) {
  SKIP_WITHOUT(kAvx512Bf16);
  std::mt19937 gen(5);
  for (const Shape& s : Shapes()) {
    if (s.k == 0) continue;
    for (bool subnormal_a : {false, true}) {
      std::vector<float> av, bv;
      ir::Tensor a = RandomTensor(DataType::kBF16, {s.m, s.k}, gen, &av);
      if (subnormal_a) {
        av[0] = std::ldexp(1.0f, -130);
        a = MakeBf16({s.m, s.k}, av);
      }
      ir::Tensor b = RandomTensor(DataType::kBF16, {s.k, s.n}, gen, &bv);
      const int64_t strips = (s.n + 63) / 64;
      const int64_t strip = kernels::cpu::avx512::PackedBStripElems(s.k);
      auto packed = ir::Tensor::Allocate(DataType::kBF16, {strips, strip});
      ASSERT_TRUE(packed.ok());
      std::vector<uint16_t> bits = Bits16(b);
      kernels::cpu::avx512::PackBBf16(bits.data(), s.k, s.n, packed->data<uint16_t>());
      NodeSpec plain;
      plain.op = OpType::kMatMul;
      plain.inputs = {a, b};
      NodeSpec pk = plain;
      pk.inputs = {a, *packed};
      pk.attrs = {{kernels::kPackedBAttr, ir::Attribute::Ints({s.k, s.n})}};
      EXPECT_EQ(Bits16(RunNodeOk0(plain)), Bits16(RunNodeOk0(pk)))
          << "(m,n,k)=" << s.m << "," << s.n << "," << s.k << " subnormal A " << subnormal_a;
      if (s.m == 1 && s.n == 1 && s.k == 1) {
        // The reference kernel cannot read a packed B and says so.
        pk.cpu_features = 0;
        auto ref = RunNode(pk);
        ASSERT_FALSE(ref.ok());
        EXPECT_THAT(ref.status().message(), ::testing::HasSubstr("packed"));
      }
    }
  }
}

// An fp32 or fp16 weight the build stored packed (PackBF32, PackBHalf) gives the same bits as the
// plain weight, with and without a FusedMatMul bias, and the reference kernel refuses it.
TEST(Avx512GemmF32, PackedWeightGivesTheSameBits) {
  SKIP_WITHOUT(kAvx512);
  std::mt19937 gen(9);
  for (DataType t : {DataType::kF32, DataType::kF16}) {
    for (const Shape& s : Shapes()) {
      if (s.k == 0) continue;
      std::vector<float> av, bv, cv;
      ir::Tensor a = RandomTensor(t, {s.m, s.k}, gen, &av);
      ir::Tensor b = RandomTensor(t, {s.k, s.n}, gen, &bv);
      ir::Tensor bias = RandomTensor(t, {s.n}, gen, &cv);
      const int64_t strips = (s.n + 63) / 64;
      auto packed =
          ir::Tensor::Allocate(t, {strips, kernels::cpu::avx512::PackedBStripElemsF32(s.k)});
      ASSERT_TRUE(packed.ok());
      if (t == DataType::kF32) {
        kernels::cpu::avx512::PackBF32(b.data<float>(), s.k, s.n, packed->data<float>());
      } else {
        kernels::cpu::avx512::PackBHalf(b.data<uint16_t>(), s.k, s.n, packed->data<uint16_t>());
      }
      for (bool fused : {false, true}) {
        NodeSpec plain;
        plain.op = fused ? OpType::kFusedMatMul : OpType::kMatMul;
        plain.inputs = {a, b};
        if (fused) {
          plain.inputs.push_back(bias);
          plain.output_dtypes = {t};  // typed, so the AVX-512 kernel takes it
        }
        NodeSpec pk = plain;
        pk.inputs[1] = *packed;
        pk.attrs = {{kernels::kPackedBAttr, ir::Attribute::Ints({s.k, s.n})}};
        const ir::Tensor want = RunNodeOk0(plain), got = RunNodeOk0(pk);
        ASSERT_EQ(want.byte_size(), got.byte_size());
        EXPECT_EQ(std::memcmp(want.raw_data(), got.raw_data(), want.byte_size()), 0)
            << DataTypeOnnxName(t) << " (m,n,k)=" << s.m << "," << s.n << "," << s.k << " fused "
            << fused;
      }
      if (s.m == 1 && s.n == 1 && s.k == 1) {
        NodeSpec pk;
        pk.op = OpType::kMatMul;
        pk.inputs = {a, *packed};
        pk.attrs = {{kernels::kPackedBAttr, ir::Attribute::Ints({s.k, s.n})}};
        pk.cpu_features = 0;
        auto ref = RunNode(pk);
        ASSERT_FALSE(ref.ok());
        EXPECT_THAT(ref.status().message(), ::testing::HasSubstr("packed"));
      }
    }
  }
}

}  // namespace
}  // namespace kiln::testing
