// The AVX-512 FusedConvChain (cpu/avx512/conv_chain_ops.cc) against its members run one after
// another by the reference FusedConv kernel, in fp32, fp16 and bf16: shapes with channel counts
// that are not whole vectors, strides, asymmetric pads, batches, a band of rows smaller than the
// image, with and without the expansion, the projection, the biases and the residual, HardSwish
// members, on 1, 2, 5 and 16 threads (bands of rows, image by image, image by image in phases:
// the same bits); a 16-bit chain's rounding of its interior tensors; and a depthwise Conv or
// FusedConv alone, which runs on the same kernel.
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

// bf16 blocks take the chain kernel only where it pays (conv_chain_ops.cc: not on AMX CPUs,
// where oneDNN's convolutions run on AMX tiles); the test takes it everywhere, on vdpbf16ps
// unless KILN_CHAIN_BF16_DOT already names a path.
const bool kBf16Chains = setenv("KILN_CHAIN_BF16_DOT", "1", /*overwrite=*/0) == 0;

using Dims = std::vector<int64_t>;
using Attrs = std::vector<std::pair<std::string, ir::Attribute>>;

struct Act {
  std::string name;  // "" none, "Relu", "LeakyRelu", "Clip", "HardSwish"
  float a = 0, b = 0;
};

// Attributes of activation `act` with `prefix` ("" for a FusedConv).
void AddAct(Attrs& attrs, const std::string& prefix, const Act& act) {
  attrs.push_back({prefix + "activation", StringAttr(act.name)});
  if (act.name == "LeakyRelu") attrs.push_back({prefix + "activation_alpha", FloatAttr(act.a)});
  if (act.name == "Clip") {
    attrs.push_back({prefix + "activation_min", FloatAttr(act.a)});
    attrs.push_back({prefix + "activation_max", FloatAttr(act.b)});
  }
}

struct ChainCase {
  const char* name;
  int64_t n, c0, h, w, c1, kh, kw;
  Dims strides, pads;
  int64_t c2;
  bool expand, biases, residual;
  Act act[3];
  bool project = true;  // false: the chain ends at the depthwise convolution (c2 == c1)
};

std::vector<ChainCase> Cases() {
  const Act none, relu{"Relu"}, leaky{"LeakyRelu", 0.1f}, relu6{"Clip", 0.0f, 6.0f},
      clip{"Clip", -1.0f, 2.0f}, hswish{"HardSwish"};
  return {
      // PP-OCRv4's depthwise / pointwise pairs: HardSwish members; three images (on more
      // threads than rows, image by image in phases with the next image's E after this one's
      // projection).
      {"hardswish_three_images",
       3,
       12,
       9,
       10,
       40,
       3,
       3,
       {1, 1},
       {1, 1, 1, 1},
       24,
       true,
       true,
       true,
       {hswish, hswish, hswish}},
      // Three images without an expansion (phases: the next image's D after this projection),
      // and three without a projection (the next image's E after this depthwise step).
      {"three_images_no_expansion",
       3,
       40,
       6,
       7,
       40,
       3,
       3,
       {1, 1},
       {1, 1, 1, 1},
       20,
       false,
       true,
       true,
       {none, relu6, hswish}},
      {"three_images_no_projection",
       3,
       8,
       7,
       6,
       72,
       5,
       5,
       {2, 2},
       {2, 2, 2, 2},
       72,
       true,
       true,
       false,
       {relu6, hswish, none},
       false},
      {"inverted_residual",
       1,
       16,
       20,
       20,
       96,
       3,
       3,
       {1, 1},
       {1, 1, 1, 1},
       16,
       true,
       true,
       true,
       {relu6, relu6, none}},
      {"stride2_odd_channels",
       2,
       5,
       13,
       11,
       20,
       3,
       3,
       {2, 2},
       {1, 1, 1, 1},
       7,
       true,
       true,
       false,
       {relu, leaky, clip}},
      {"no_expansion_5x5_asymmetric_pads",
       1,
       24,
       9,
       17,
       24,
       5,
       5,
       {1, 1},
       {2, 1, 2, 3},
       40,
       false,
       false,
       true,
       {none, relu, relu}},
      // 70 rows: several bands of rows per thread, and a ring that wraps.
      {"tall_image",
       1,
       8,
       70,
       6,
       48,
       3,
       3,
       {1, 1},
       {0, 1, 2, 1},
       9,
       true,
       true,
       true,
       {relu6, none, leaky}},
      {"window_1x3_strides_2x1",
       1,
       3,
       8,
       15,
       32,
       1,
       3,
       {2, 1},
       {0, 0, 0, 0},
       33,
       true,
       false,
       false,
       {clip, relu6, none}},
      // 5x5 at stride 2, 40 channels: a two-vector block, then one masked vector; 23 columns.
      {"window_5x5_stride2_channel_tail",
       1,
       6,
       12,
       23,
       40,
       5,
       5,
       {2, 2},
       {2, 2, 2, 2},
       8,
       true,
       true,
       false,
       {relu, relu6, none}},
      // E of 1.2 MB: bands of rows on two threads as on one (smaller images go image by image
      // on two threads).
      {"bands_on_two_threads",
       1,
       16,
       48,
       48,
       128,
       3,
       3,
       {1, 1},
       {1, 1, 1, 1},
       16,
       true,
       true,
       true,
       {relu6, relu6, none}},
      // Only the depthwise convolution, on X's own 40 channels (the last vector's loads masked).
      {"depthwise_only",
       2,
       40,
       10,
       21,
       40,
       3,
       3,
       {1, 1},
       {1, 1, 1, 1},
       40,
       false,
       true,
       false,
       {none, relu6, none},
       false},
      {"expansion_and_depthwise_stride2",
       1,
       8,
       17,
       30,
       24,
       3,
       3,
       {2, 2},
       {0, 0, 1, 1},
       24,
       true,
       true,
       false,
       {relu, leaky, none},
       false},
      // An image of one pixel padded to 3 x 3 outputs, on two threads (image by image): one
      // thread's share of the expansion is empty.
      {"one_pixel",
       1,
       8,
       1,
       1,
       32,
       3,
       3,
       {1, 1},
       {2, 2, 2, 2},
       8,
       true,
       true,
       true,
       {relu6, relu6, none}},
      // A projection from 160 channels to 64: four panels of weights past L1, so 7-pixel tiles
      // (49 pixels as 7 x 7).
      {"projection_tiles_of_seven",
       1,
       8,
       7,
       7,
       160,
       3,
       3,
       {1, 1},
       {1, 1, 1, 1},
       64,
       true,
       true,
       false,
       {relu6, relu6, none}},
      // YuNet's 16-channel blocks (whole vectors everywhere: the unmasked stores and loads; an
      // expansion whose pixels are prefetched tiles ahead), 41 x 37 in several bands.
      {"sixteen_channels_no_projection",
       1,
       16,
       41,
       37,
       16,
       3,
       3,
       {1, 1},
       {1, 1, 1, 1},
       16,
       true,
       true,
       false,
       {none, relu, none},
       false},
      {"thirty_two_to_sixty_four",
       2,
       32,
       19,
       21,
       32,
       3,
       3,
       {1, 1},
       {1, 1, 1, 1},
       64,
       false,
       true,
       false,
       {none, relu, none}},
      // A window the register tiles do not cover (7 wide, stride 3): one pixel at a time.
      {"window_7x7_stride3",
       1,
       4,
       16,
       19,
       17,
       7,
       7,
       {3, 3},
       {3, 2, 1, 3},
       5,
       true,
       true,
       false,
       {leaky, clip, relu}},
  };
}

ir::Tensor Random(const Dims& dims, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(ir::NumElementsOf(dims));
  for (float& f : v) f = d(rng);
  return MakeFloat(dims, v);
}

// |t| as fp32 (fp16 values are exact in fp32).
ir::Tensor Abs(const ir::Tensor& t) {
  std::vector<float> v = ToFloats(t);
  for (float& f : v) f = std::fabs(f);
  return MakeFloat(t.dims(), v);
}

// A tensor of type `dt` (fp32, fp16 or bf16) with `values`.
ir::Tensor Typed(DataType dt, const Dims& dims, const std::vector<float>& values) {
  if (dt == DataType::kF16) return MakeHalf(dims, values);
  if (dt == DataType::kBF16) return MakeBf16(dims, values);
  return MakeFloat(dims, values);
}

// A tensor of t's type with `values`.
ir::Tensor Like(const ir::Tensor& t, const Dims& dims, const std::vector<float>& values) {
  return Typed(t.dtype(), dims, values);
}

// t rounded to `dt` (undefined stays undefined).
ir::Tensor RoundTo(const ir::Tensor& t, DataType dt) {
  return t.defined() ? Typed(dt, t.dims(), ToFloats(t)) : t;
}
ir::Tensor Half(const ir::Tensor& t) { return RoundTo(t, DataType::kF16); }

// NCHW <-> NHWC copies of a rank-4 fp32 or fp16 tensor (NCHW results as fp32).
ir::Tensor ToNhwc(const ir::Tensor& t) {
  const auto& d = t.dims();
  std::vector<float> in = ToFloats(t), out(in.size());
  for (int64_t n = 0; n < d[0]; ++n)
    for (int64_t c = 0; c < d[1]; ++c)
      for (int64_t p = 0; p < d[2] * d[3]; ++p)
        out[(n * d[2] * d[3] + p) * d[1] + c] = in[(n * d[1] + c) * d[2] * d[3] + p];
  return Like(t, {d[0], d[2], d[3], d[1]}, out);
}

ir::Tensor ToNchw(const ir::Tensor& t) {
  const auto& d = t.dims();
  std::vector<float> in = ToFloats(t), out(in.size());
  for (int64_t n = 0; n < d[0]; ++n)
    for (int64_t p = 0; p < d[1] * d[2]; ++p)
      for (int64_t c = 0; c < d[3]; ++c)
        out[(n * d[3] + c) * d[1] * d[2] + p] = in[(n * d[1] * d[2] + p) * d[3] + c];
  return MakeFloat({d[0], d[3], d[1], d[2]}, out);
}

struct Operands {
  ir::Tensor x, w[3], b[3], z;  // x and z NCHW
};

// Every operand rounded to `dt`.
Operands RoundedOf(const Operands& o, DataType dt) {
  Operands h;
  h.x = RoundTo(o.x, dt);
  h.z = RoundTo(o.z, dt);
  for (int s = 0; s < 3; ++s) {
    h.w[s] = RoundTo(o.w[s], dt);
    h.b[s] = RoundTo(o.b[s], dt);
  }
  return h;
}
Operands HalfOf(const Operands& o) { return RoundedOf(o, DataType::kF16); }

// The operands of the bounds' chains on absolute values (fp32): |X|, |W|, |B| and |Z|.
Operands AbsOf(const Operands& o) {
  Operands a = o;
  a.x = Abs(o.x);
  for (int s = 0; s < 3; ++s) {
    if (o.w[s].defined()) a.w[s] = Abs(o.w[s]);
    if (o.b[s].defined()) a.b[s] = Abs(o.b[s]);
  }
  if (o.z.defined()) a.z = Abs(o.z);
  return a;
}

Operands Make(const ChainCase& c, std::mt19937& rng) {
  Operands o;
  o.x = Random({c.n, c.c0, c.h, c.w}, rng, 1.0f);
  if (c.expand) o.w[0] = Random({c.c1, c.c0, 1, 1}, rng, 1.0f / std::sqrt(float(c.c0)));
  o.w[1] = Random({c.c1, 1, c.kh, c.kw}, rng, 1.0f / std::sqrt(float(c.kh * c.kw)));
  if (c.project) o.w[2] = Random({c.c2, c.c1, 1, 1}, rng, 1.0f / std::sqrt(float(c.c1)));
  const int64_t outs[3] = {c.c1, c.c1, c.c2};
  for (int s = 0; s < 3 && c.biases; ++s) {
    if (o.w[s].defined()) o.b[s] = Random({outs[s]}, rng, 0.5f);
  }
  if (c.residual) {
    const int64_t oh = (c.h + c.pads[0] + c.pads[2] - c.kh) / c.strides[0] + 1;
    const int64_t ow = (c.w + c.pads[1] + c.pads[3] - c.kw) / c.strides[1] + 1;
    o.z = Random({c.n, c.c2, oh, ow}, rng, 1.0f);
  }
  return o;
}

// The members one after another through the reference FusedConv (NCHW); `act` false drops the
// activations (the bound's chain of absolute values).
ir::Tensor Reference(const ChainCase& c, const Operands& o, bool act) {
  ir::Tensor v = o.x;
  for (int s = 0; s < 3; ++s) {
    if (!o.w[s].defined()) continue;
    NodeSpec spec{ir::OpType::kFusedConv, {}, {v, o.w[s], o.b[s]}};
    if (s == 2 && o.z.defined()) spec.inputs.push_back(o.z);
    spec.since_version = 1;
    spec.cpu_features = 0;  // the reference kernel
    if (s == 1) {
      spec.attrs = {
          {"group", IntAttr(c.c1)}, {"strides", IntsAttr(c.strides)}, {"pads", IntsAttr(c.pads)}};
    }
    AddAct(spec.attrs, "", act ? c.act[s] : Act{});
    v = RunNodeOk0(spec);
    if (!v.defined()) return v;
  }
  return v;
}

// The chain node on NHWC X (and Z), Y back in NCHW; run twice (weights packed at the first run).
ir::Tensor Chain(const ChainCase& c, const Operands& o) {
  NodeSpec spec{ir::OpType::kFusedConvChain, {}, {}};
  spec.inputs = {ToNhwc(o.x), o.w[0], o.b[0], o.w[1],
                 o.b[1],      o.w[2], o.b[2], o.z.defined() ? ToNhwc(o.z) : ir::Tensor()};
  spec.constant_inputs = {1, 2, 3, 4, 5, 6};
  spec.since_version = 1;
  spec.runs = 2;
  spec.attrs = {{"strides", IntsAttr(c.strides)}, {"pads", IntsAttr(c.pads)}};
  const char* prefixes[3] = {"expand_", "depthwise_", "project_"};
  for (int s = 0; s < 3; ++s) AddAct(spec.attrs, prefixes[s], c.act[s]);
  ir::Tensor y = RunNodeOk0(spec);
  return y.defined() ? ToNchw(y) : y;
}

// The chain on 1, 2, 5 and 16 threads against the reference's `ref`: each element within
// bound[i]; and every run the same bits as the first (two threads split the rows, each
// recomputing the expanded rows its first window needs; five and sixteen go image by image in
// phases, splitting each step over pixels and output channels: the same sums in the same order).
void ExpectChainWithin(const ChainCase& c, const Operands& o, const ir::Tensor& ref,
                       const std::vector<double>& bound) {
  const int saved = omp_get_max_threads();
  const int counts[] = {1, 2, 5, 16};
  std::vector<float> runs[4];
  for (int i = 0; i < 4; ++i) {
    omp_set_num_threads(counts[i]);
    const ir::Tensor y = Chain(c, o);
    omp_set_num_threads(saved);
    ASSERT_TRUE(y.defined());
    ASSERT_EQ(y.dims(), ref.dims());
    runs[i] = ToFloats(y);
  }
  const std::vector<float> r = ToFloats(ref);
  ASSERT_EQ(bound.size(), r.size());
  for (size_t i = 0; i < r.size(); ++i) {
    ASSERT_LE(std::fabs(runs[0][i] - r[i]), bound[i]) << "element " << i;
  }
  for (int i = 1; i < 4; ++i) EXPECT_EQ(runs[0], runs[i]) << counts[i] << " threads";
}

// Lipschitz constant of the case's activations: 1, or 1.5 with a HardSwish member (its slope
// x / 3 + 1/2 lies in [-1/2, 3/2] on [-3, 3]; it is 0 or 1 elsewhere).
double Lipschitz(const ChainCase& c) {
  for (const Act& a : c.act) {
    if (a.name == "HardSwish") return 1.5;
  }
  return 1.0;
}

// What HardSwish members add to the bound, relative to M: each of the (at most three) steps
// carries the error of its input times 1.5, and the two runs' HardSwish computations (x / 6,
// + 0.5, times x, each rounded) on their unequal inputs differ by at most 3 roundings each of
// at most 2^-24 |x|, |x| <= M: 6 * 3 * 2^-24. So (g + 18 * 2^-24) * 1.5^3 for g without them.
double HardSwishSlack(const ChainCase& c) {
  return Lipschitz(c) > 1.0 ? 18 * std::ldexp(1.0, -24) : 0.0;
}

// Each output is, in the chain and in the reference alike, three fp32 sums in some order (at most
// c0, kh * kw and c1 products, plus the bias and the residual): each rounding moves a partial sum
// by at most 2^-24 of the sum of its terms' magnitudes, the activations are 1-Lipschitz and no
// larger in magnitude than their argument (Clip ranges here contain 0, LeakyRelu alpha < 1), so
// the two results differ by at most 2 * (c0 + kh * kw + c1 + 3) * 2^-24 times the same chain run
// on absolute values without the activations (HardSwish: see HardSwishSlack).
TEST(ConvChainTest, MatchesTheMembersRunOneAfterAnother) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(7);
  for (const ChainCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    const Operands o = Make(c, rng);
    const ir::Tensor ref = Reference(c, o, true);
    const ir::Tensor abs = Reference(c, AbsOf(o), false);
    ASSERT_TRUE(ref.defined() && abs.defined());
    const double lip3 = std::pow(Lipschitz(c), 3);
    const double gamma =
        lip3 * (2.0 * (c.c0 + c.kh * c.kw + c.c1 + 3) * std::ldexp(1.0, -24) + HardSwishSlack(c));
    std::vector<double> bound;
    for (float m : ToFloats(abs)) bound.push_back(gamma * m + 1e-30);
    ExpectChainWithin(c, o, ref, bound);
  }
}

// A 16-bit chain against its members run one after another in that type by the reference. Both
// round each step's fp32 result to the type. Step s's results before that rounding differ by at
// most g_s M_s (the sums' orders, as in fp32: g_s = 2 (terms + 1) 2^-24) plus |W_s| times the
// difference of its inputs, then each rounding adds at most u of its value (M_s, 1% of margin
// for the fp32 rounding of M itself; u = 2^-11 for fp16, 2^-8 for bf16) or, below fp16's normal
// range, 2^-25. By induction the outputs differ by at most (sum of g_s + 3 * 2 * u) * 1.01 * M,
// M the chain on absolute values without the activations, plus, in fp16, A, the same chain on
// X = 0 and Z = 0 with every bias 2^-24 (the subnormal roundings, carried through the later
// steps' |W|; bf16's subnormals are below 2^-126, under the 1e-30 floor). HardSwish members
// multiply this by 1.5^3 and add their own roundings (HardSwishSlack).
void ExpectSixteenBitChainsMatch(DataType dt, uint32_t seed) {
  std::mt19937 rng(seed);
  const bool half = dt == DataType::kF16;
  const double u = std::ldexp(1.0, half ? -11 : -8);
  for (const ChainCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    const Operands o = RoundedOf(Make(c, rng), dt);
    const ir::Tensor ref = Reference(c, o, true);
    const Operands a = AbsOf(o);
    Operands e = a;  // A's operands
    e.x = MakeFloat(o.x.dims(), std::vector<float>(o.x.num_elements(), 0.0f));
    if (o.z.defined()) e.z = MakeFloat(o.z.dims(), std::vector<float>(o.z.num_elements(), 0.0f));
    const int64_t outs[3] = {c.c1, c.c1, c.c2};
    for (int s = 0; s < 3; ++s) {
      if (o.w[s].defined()) {
        e.b[s] = MakeFloat({outs[s]}, std::vector<float>(outs[s], std::ldexp(1.0f, -24)));
      }
    }
    const ir::Tensor abs = Reference(c, a, false), sub = Reference(c, e, false);
    ASSERT_TRUE(ref.defined() && abs.defined() && sub.defined());
    ASSERT_EQ(ref.dtype(), dt);
    const std::vector<float> m = ToFloats(abs), sm = ToFloats(sub);
    const double lip3 = std::pow(Lipschitz(c), 3);
    const double g = 2.0 * (c.c0 + c.kh * c.kw + c.c1 + 3) * std::ldexp(1.0, -24);
    const double k = lip3 * (1.01 * (g + 6 * u) + HardSwishSlack(c));
    std::vector<double> bound;
    for (size_t i = 0; i < m.size(); ++i) {
      bound.push_back(k * m[i] + (half ? lip3 * sm[i] : 1e-30));
    }
    ExpectChainWithin(c, o, ref, bound);
  }
}

TEST(ConvChainTest, Fp16MatchesTheMembersRunOneAfterAnother) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  ExpectSixteenBitChainsMatch(DataType::kF16, 17);
}

TEST(ConvChainTest, Bf16MatchesTheMembersRunOneAfterAnother) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512) || !(DetectCpuFeatures() & kCpuAvx512Bf16)) {
    GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  }
  ExpectSixteenBitChainsMatch(DataType::kBF16, 19);
}

// HardSwish members to the bit: values on a grid of 1/4 and 1/16 small enough that every sum of
// the chain is exact in fp32 (in any order) and every interior value exact in fp16 and bf16 too
// (or rounded alike in both from the same exact sum), so the chain and the reference apply
// HardSwish to the same x: the results must be the same bits (x / 6 divided, then + 0.5, the
// clamp, times x, as the reference's HardSwishOp), on every thread count, in all three types.
TEST(ConvChainTest, HardSwishIsTheReferencesToTheBit) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const Act relu{"Relu"}, hswish{"HardSwish"};
  // X in [-3, 3] / 4, W in [-2, 2] / 4, biases in [-8, 8] / 16: E = sum of 8 products, a
  // multiple of 1/16 of magnitude < 4 (6 bits: exact in every type); D a multiple of 1/64 below
  // 16; Y a sum of 24 products of D (rounded or not) by W2, multiples of 1/256 below 2^8.
  const ChainCase cases[] = {
      {"hardswish_last",
       2,
       8,
       9,
       7,
       24,
       3,
       3,
       {1, 1},
       {1, 1, 1, 1},
       20,
       true,
       true,
       true,
       {relu, relu, hswish}},
      {"hardswish_depthwise_only",
       1,
       24,
       8,
       11,
       24,
       3,
       3,
       {2, 2},
       {1, 1, 1, 1},
       24,
       false,
       true,
       false,
       {{}, hswish, {}},
       false},
  };
  std::mt19937 rng(23);
  auto grid = [&rng](const Dims& dims, int lo, int hi, float step) {
    std::uniform_int_distribution<int> d(lo, hi);
    std::vector<float> v(ir::NumElementsOf(dims));
    for (float& f : v) f = d(rng) * step;
    return MakeFloat(dims, v);
  };
  const bool bf16 = (DetectCpuFeatures() & kCpuAvx512Bf16) != 0;
  for (const ChainCase& c : cases) {
    SCOPED_TRACE(c.name);
    Operands o;
    o.x = grid({c.n, c.c0, c.h, c.w}, -3, 3, 0.25f);
    if (c.expand) o.w[0] = grid({c.c1, c.c0, 1, 1}, -2, 2, 0.25f);
    o.w[1] = grid({c.c1, 1, c.kh, c.kw}, -2, 2, 0.25f);
    if (c.project) o.w[2] = grid({c.c2, c.c1, 1, 1}, -2, 2, 0.25f);
    const int64_t outs[3] = {c.c1, c.c1, c.c2};
    for (int s = 0; s < 3; ++s) {
      if (o.w[s].defined()) o.b[s] = grid({outs[s]}, -8, 8, 1.0f / 16);
    }
    if (c.residual) o.z = grid({c.n, c.c2, 9, 7}, -3, 3, 0.25f);
    for (DataType dt : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
      if (dt == DataType::kBF16 && !bf16) continue;
      SCOPED_TRACE(DataTypeName(dt));
      const Operands t = RoundedOf(o, dt);
      EXPECT_EQ(ToFloats(t.x), ToFloats(o.x));  // every operand exact in the type
      const ir::Tensor ref = Reference(c, t, true);
      ASSERT_TRUE(ref.defined());
      const std::vector<float> want = ToFloats(ref);
      // Some outputs on HardSwish's curved part (-3 < x < 3, x not 0): the check can fail there.
      int curved = 0;
      for (float v : want) curved += v != 0.0f && v > -0.375f && v < 3.0f;
      EXPECT_GT(curved, 0);
      ExpectChainWithin(c, t, ref, std::vector<double>(want.size(), 0.0));
    }
  }
}

// An fp16 chain keeps E and D in fp32 (a fused kernel's interior) and rounds only Y: values
// chosen so that each rounding decides the output. u = 2^-10 (fp16's spacing at 1), X = 1 + u:
//   E = (1 + u)^2 = 1 + 2u + u^2 in both channels (fp16 would round it to 1 + 2u);
//   D0 = 1024 E0 - 1026 = 1024 u^2 = 2^-10 (0 from an fp16 E0);
//   D1 = (1 + u) E1 = 1 + 3u + 3u^2 in fp32 (u^3 = 2^-30 is below its half spacing; fp16 E1
//   and D1 give 1 + 3u);
//   Y = 1024 D0 + 1024 D1 - 1027 = 1 + 3u, an fp16 value: 0 with both roundings (the members
//   one after another, as `--fusion off` runs them).
// Every step's sum is exact in fp32 in any order, with or without FMA, but D1's single product.
TEST(ConvChainTest, Fp16KeepsTheInteriorInFp32) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const float u = std::ldexp(1.0f, -10);
  const ChainCase c = {"rounding",   1, 1,    1,    1,     2, 1, 1, {1, 1},
                       {0, 0, 0, 0}, 1, true, true, false, {}};
  Operands o;
  o.x = MakeFloat({1, 1, 1, 1}, {1 + u});
  o.w[0] = MakeFloat({2, 1, 1, 1}, {1 + u, 1 + u});
  o.w[1] = MakeFloat({2, 1, 1, 1}, {1024, 1 + u});
  o.b[1] = MakeFloat({2}, {-1026, 0});
  o.w[2] = MakeFloat({1, 2, 1, 1}, {1024, 1024});
  o.b[2] = MakeFloat({1}, {-1027});
  const Operands h = HalfOf(o);
  EXPECT_EQ(ToFloats(h.x), ToFloats(o.x));  // every operand is an fp16 value
  EXPECT_EQ(ToFloats(h.w[1]), ToFloats(o.w[1]));
  EXPECT_EQ(ToFloats(Reference(c, h, true)), std::vector<float>{0.0f});
  EXPECT_EQ(ToFloats(Chain(c, h)), std::vector<float>{1 + 3 * u});
  EXPECT_EQ(ToFloats(Chain(c, o)), std::vector<float>{1 + 3 * u});  // the fp32 chain alike
}

// A channels-last depthwise Conv or FusedConv alone, fp32 or fp16: the registry prefers the chain
// kernel's depthwise step to oneDNN's convolution, and it computes what the reference computes.
TEST(ConvChainTest, DepthwiseConvolutionAloneRunsOnTheChainKernel) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  struct Case {
    ir::OpType op;
    int64_t c, h, w, k;
    Dims strides, pads;
    Act act;
  };
  const Case cases[] = {
      {ir::OpType::kConv, 32, 15, 20, 3, {1, 1}, {1, 1, 1, 1}, {}},
      {ir::OpType::kFusedConv, 40, 9, 9, 3, {2, 2}, {1, 1, 1, 1}, {"Clip", 0.0f, 6.0f}},
      {ir::OpType::kFusedConv, 24, 11, 13, 5, {1, 2}, {2, 1, 2, 3}, {"LeakyRelu", 0.1f}},
  };
  std::mt19937 rng(11);
  for (const DataType dt : {DataType::kF32, DataType::kF16})
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(ir::OpName(c.op)) + " " + std::string(DataTypeName(dt)));
      const bool half = dt == DataType::kF16;
      auto typed = [half](const ir::Tensor& t) { return half ? Half(t) : t; };
      const ir::Tensor x = typed(Random({1, c.c, c.h, c.w}, rng, 1.0f));
      const ir::Tensor w = typed(Random({c.c, 1, c.k, c.k}, rng, 1.0f / c.k));
      const ir::Tensor b = typed(Random({c.c}, rng, 0.5f));
      Attrs attrs = {
          {"group", IntAttr(c.c)}, {"strides", IntsAttr(c.strides)}, {"pads", IntsAttr(c.pads)}};
      const int version = c.op == ir::OpType::kConv ? 22 : 1;
      auto run = [&](const Attrs& a, const ir::Tensor& xi, const ir::Tensor& wi,
                     const ir::Tensor& bi, std::optional<uint64_t> cpu) {
        NodeSpec spec{c.op, a, {xi, wi, bi}};
        spec.since_version = version;
        spec.cpu_features = cpu;
        spec.constant_inputs = {1, 2};
        spec.runs = 2;
        return RunNodeOk0(spec);
      };
      Attrs with_act = attrs;
      if (c.op == ir::OpType::kFusedConv) AddAct(with_act, "", c.act);
      const std::vector<float> want = ToFloats(run(with_act, x, w, b, 0));
      Attrs abs_attrs = attrs;
      if (c.op == ir::OpType::kFusedConv) AddAct(abs_attrs, "", Act{});
      const std::vector<float> mag = ToFloats(run(abs_attrs, Abs(x), Abs(w), Abs(b), 0));
      Attrs cl = with_act;
      cl.push_back({kernels::kChannelsLastAttr, IntAttr(1)});
      const std::vector<float> got = ToFloats(ToNchw(run(cl, ToNhwc(x), w, b, std::nullopt)));
      ASSERT_EQ(got.size(), want.size());
      // k * k products and the bias summed in fp32 in two orders: each within (k * k + 1) 2^-24
      // of the sum of the terms' magnitudes; the activations are 1-Lipschitz. In fp16 both then
      // round to fp16: 2^-11 of the magnitude each (1% of margin for mag's own fp32 rounding), or
      // 2^-25 below the normal range.
      const double gamma = 2.0 * (c.k * c.k + 1) * std::ldexp(1.0, -24) +
                           (half ? 1.01 * 2 * std::ldexp(1.0, -11) : 0.0);
      const double floor = half ? std::ldexp(1.0, -24) : 1e-30;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_LE(std::fabs(got[i] - want[i]), gamma * mag[i] + floor) << "element " << i;
      }
      // The kernel the registry chooses for the node.
      ir::Graph g;
      ir::Node* n = g.AddNode(c.op, "dw");
      n->since_version = version;
      for (const auto& [k, v] : cl) n->attrs[k] = v;
      int i = 0;
      for (const ir::Tensor* t : {&x, &w, &b}) {
        ir::Value* v = *g.AddValue("in" + std::to_string(i++));
        v->dtype = dt;
        v->shape = ir::Shape::Of(t->dims());
        if (t != &x) v->constant = *t;
        n->inputs.push_back(v);
      }
      ir::Value* y = *g.AddValue("y");
      y->dtype = dt;
      n->outputs.push_back(y);
      g.RebuildEdges();
      auto def = kernels::Registry::Default().Find(*n);
      ASSERT_TRUE(def.ok()) << def.status();
      EXPECT_EQ((*def)->isa, kernels::Isa::kAvx512);
      EXPECT_TRUE((*def)->preferred);
      // Without the channels-last layout, oneDNN's convolution (or the reference) as before.
      n->attrs.erase(kernels::kChannelsLastAttr);
      def = kernels::Registry::Default().Find(*n);
      ASSERT_TRUE(def.ok()) << def.status();
      EXPECT_FALSE((*def)->preferred);
    }
}

// A NaN in X reaches the outputs whose sums take it, through every activation, as in the
// reference (the activations' comparisons are ordered: NaN passes through).
TEST(ConvChainTest, NanPassesThroughTheActivations) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(13);
  for (const ChainCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    Operands o = Make(c, rng);
    std::vector<float> x = ToFloats(o.x);
    x[x.size() / 3] = std::nanf("");
    o.x = MakeFloat(o.x.dims(), x);
    const std::vector<float> want = ToFloats(Reference(c, o, true)), got = ToFloats(Chain(c, o));
    ASSERT_EQ(got.size(), want.size());
    int nans = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(std::isnan(got[i]), std::isnan(want[i])) << "element " << i;
      nans += std::isnan(want[i]);
    }
    EXPECT_GT(nans, 0);
  }
}

TEST(ConvChainTest, BadShapesNameTheNode) {
  if (!kernels::CpuHasIsa(kernels::Isa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(3);
  const ChainCase c = Cases()[0];
  const Operands o = Make(c, rng);
  NodeSpec spec{ir::OpType::kFusedConvChain, {}, {}};
  spec.since_version = 1;
  spec.constant_inputs = {1, 2, 3, 4, 5, 6};
  spec.attrs = {{"strides", IntsAttr(c.strides)}, {"pads", IntsAttr(c.pads)}};
  // X with the wrong channel count.
  spec.inputs = {ToNhwc(Random({1, c.c0 + 1, 8, 8}, rng, 1.0f)),
                 o.w[0],
                 o.b[0],
                 o.w[1],
                 o.b[1],
                 o.w[2],
                 o.b[2]};
  ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "channels");
  // A residual of the wrong shape.
  spec.inputs = {ToNhwc(o.x), o.w[0], o.b[0], o.w[1],
                 o.b[1],      o.w[2], o.b[2], Random({1, 3, 3, c.c2}, rng, 1.0f)};
  ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "does not match Y");
  // A window larger than the padded input.
  spec.inputs = {ToNhwc(Random({1, c.c0, 1, 1}, rng, 1.0f)),
                 o.w[0],
                 o.b[0],
                 Random({c.c1, 1, 5, 5}, rng, 1.0f),
                 o.b[1],
                 o.w[2],
                 o.b[2]};
  ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "smaller than the depthwise window");
  // A residual without the projection it would be added to: no kernel takes the node.
  spec.inputs = {ToNhwc(o.x), o.w[0],       o.b[0],       o.w[1],
                 o.b[1],      ir::Tensor(), ir::Tensor(), ToNhwc(o.x)};
  ExpectNodeError(spec, absl::StatusCode::kUnimplemented, "");
}

}  // namespace
}  // namespace kiln::testing
