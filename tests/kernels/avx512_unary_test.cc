// The AVX-512 unary math and activation kernels (kernels/cpu/avx512/activation_ops.cc) and the
// vector functions under them (math.h): each function against the C library in double over a
// sweep of fp32 inputs (a strided sample of all bit patterns, and the edges: +-0, subnormals,
// large |x|, +-Inf, NaN, the saturation regions, negative inputs of Log and Sqrt) within the
// bound math.h states; each kernel against the reference kernel on the same node (float, float16,
// bfloat16; the piecewise-linear and exactly rounded ops bit for bit); registry selection and
// the reference's errors. Skipped on CPUs without AVX-512 (and AVX512_BF16 for the kernels).
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/common/half.h"
#include "engine/kernels/cpu/avx512/math.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/kernel_test_helpers.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ir::OpType;
using kernels::Isa;
namespace vm = kernels::cpu::avx512;

const uint64_t kAvx512 = kernels::IsaCpuFeatures(Isa::kAvx512);
const uint64_t kAvx512Bf16 = kAvx512 | kCpuAvx512Bf16;

bool Has(uint64_t features) { return (DetectCpuFeatures() & features) == features; }

#define SKIP_WITHOUT(features)                                                           \
  if (!Has(features)) {                                                                  \
    GTEST_SKIP() << "CPU lacks " << CpuFeatureString((features) & ~DetectCpuFeatures()); \
  }

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Distance in fp32 steps (bit patterns ordered, so subnormal steps count one each; +-0 are one
// apart, which no bound here relies on).
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

// Every 4093rd fp32 bit pattern (about a million, every exponent of both signs, NaNs included)
// plus the edges named above.
std::vector<float> Sweep() {
  std::vector<float> out;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4093) {
    const uint32_t b = static_cast<uint32_t>(u);
    float f;
    std::memcpy(&f, &b, 4);
    out.push_back(f);
  }
  for (float v : {0.0f,    -0.0f,   1e-45f, -1e-45f, 1e-40f,  -1e-40f,  1.17549435e-38f,
                  1e-30f,  -1e-30f, 1e-8f,  -1e-8f,  0.5f,    -0.5f,    0.625f,
                  -0.625f, 1.0f,    -1.0f,  2.0f,    3.0f,    -3.0f,    8.0f,
                  -8.0f,   9.0f,    -9.0f,  15.9f,   -15.9f,  16.7f,    -16.7f,
                  17.4f,   -17.4f,  20.0f,  -20.0f,  30.0f,   -30.0f,   87.0f,
                  -87.0f,  88.5f,   -88.5f, 100.0f,  -100.0f, 103.0f,   -103.0f,
                  120.0f,  -120.0f, 1e10f,  -1e10f,  3.4e38f, -3.4e38f, kInf,
                  -kInf,   kNaN,    -kNaN}) {
    out.push_back(v);
  }
  // Dense stretches: around 0, 1 and the saturation regions.
  for (int i = -4000; i <= 4000; ++i) out.push_back(i * 0.01f);
  for (int i = 0; i < 2000; ++i) out.push_back(0.75f + i * (0.75f / 2000));  // Log's m range
  return out;
}

// Checks `f` (an array function of math.h) against `exact` (double) within `ulps` plus `abs(x)`
// absolute; `exact` returns the expected value (NaN: NaN expected). Prints the largest distance
// seen (for the bounds' record).
void CheckAgainstDouble(const std::string& name, const std::vector<float>& x,
                        const std::function<void(const float*, float*, int64_t)>& f,
                        const std::function<double(double)>& exact, int64_t ulps,
                        const std::function<double(double)>& abs_tol = nullptr) {
  std::vector<float> y(x.size());
  f(x.data(), y.data(), static_cast<int64_t>(x.size()));
  int64_t worst = 0;
  float worst_x = 0;
  int failures = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = exact(x[i]);
    const float want = static_cast<float>(e);
    if (std::isnan(e)) {
      if (!std::isnan(y[i]) && ++failures <= 5) {
        ADD_FAILURE() << name << "(" << x[i] << ") = " << y[i] << ", want NaN";
      }
      continue;
    }
    const int64_t d = UlpDistance(y[i], want);
    const double slack = abs_tol ? abs_tol(x[i]) : 0.0;
    const bool ok = d <= ulps || std::abs(static_cast<double>(y[i]) - e) <= slack;
    if (ok && std::abs(static_cast<double>(y[i]) - e) > slack && d > worst) {
      worst = d;
      worst_x = x[i];
    }
    if (!ok && ++failures <= 5) {
      ADD_FAILURE() << name << "(" << x[i] << ") = " << y[i] << ", want " << want << " (" << d
                    << " ulp)";
    }
  }
  EXPECT_EQ(failures, 0) << name;
  std::cout << "[ bound ] " << name << ": worst " << worst << " ulp (at " << worst_x
            << ") outside the absolute slack, stated " << ulps << "\n";
}

// ---------------------------------------------------------------- vector math vs double

TEST(Avx512Math, LogWithinOneUlp) {
  SKIP_WITHOUT(kAvx512);
  CheckAgainstDouble(
      "log", Sweep(), vm::LogF32, [](double x) { return std::log(x); }, 1);
  const float special[6] = {0.0f, -0.0f, -1.0f, kInf, -kInf, kNaN};
  float out[6];
  vm::LogF32(special, out, 6);
  EXPECT_EQ(out[0], -kInf);
  EXPECT_EQ(out[1], -kInf);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_EQ(out[3], kInf);
  EXPECT_TRUE(std::isnan(out[4]));
  EXPECT_TRUE(std::isnan(out[5]));
  // Every subnormal exponent, and the whole mantissa range of one binade densely.
  std::vector<float> x;
  for (uint32_t u = 1; u < 0x00800000u; u += 31) x.push_back(std::bit_cast<float>(u));
  for (uint32_t u = 0x3f000000u; u < 0x3f800000u; u += 7) x.push_back(std::bit_cast<float>(u));
  for (uint32_t u = 0x3f800000u; u < 0x40000000u; u += 7) x.push_back(std::bit_cast<float>(u));
  CheckAgainstDouble(
      "log (dense)", x, vm::LogF32, [](double v) { return std::log(v); }, 1);
}

TEST(Avx512Math, SigmoidWithinThreeUlpSubnormalsIncluded) {
  SKIP_WITHOUT(kAvx512);
  CheckAgainstDouble(
      "sigmoid", Sweep(), vm::SigmoidF32, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, 3);
}

TEST(Avx512Math, TanhWithinThreeUlp) {
  SKIP_WITHOUT(kAvx512);
  CheckAgainstDouble(
      "tanh", Sweep(), vm::TanhF32, [](double x) { return std::tanh(x); }, 3);
}

TEST(Avx512Math, SoftplusWithinTwoUlp) {
  SKIP_WITHOUT(kAvx512);
  CheckAgainstDouble(
      "softplus", Sweep(), vm::SoftplusF32,
      [](double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x))); }, 2);
}

TEST(Avx512Math, MishWithinFiveUlpWhereNormal) {
  SKIP_WITHOUT(kAvx512);
  // Below x = -87 the result is subnormal and its Softplus factor exp(x) carries an absolute
  // error of up to a subnormal step (2^-149), scaled by |x| in the product.
  CheckAgainstDouble(
      "mish", Sweep(), vm::MishF32,
      [](double x) { return x * std::tanh(std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)))); },
      5, [](double x) { return (std::abs(x) + 1) * 0x1p-148; });
}

TEST(Avx512Math, SwishWithinThreeUlpOfItsFormula) {
  SKIP_WITHOUT(kAvx512);
  for (float alpha : {1.0f, 1.702f, -0.5f}) {
    // -alpha * x rounded to fp32 as the reference rounds it; the rest exact. Arguments within
    // one ulp of exp's overflow threshold (88.7228) may give 0 against a tiny value: skipped.
    std::vector<float> x;
    for (float v : Sweep()) {
      const float t = -alpha * v;
      if (!(std::abs(t - 88.7228f) < 1e-4f)) x.push_back(v);
    }
    CheckAgainstDouble(
        "swish alpha " + std::to_string(alpha), x,
        [alpha](const float* a, float* b, int64_t n) { vm::SwishF32(a, b, n, alpha); },
        [alpha](double v) {
          const double t = static_cast<float>(-alpha * static_cast<float>(v));
          // exp overflows fp32 past 88.72 (the reference's too): x / Inf, a signed 0.
          const double e = std::exp(t);
          return e > std::numeric_limits<float>::max() ? v * 0.0 : v / (1.0 + e);
        },
        3);
  }
}

TEST(Avx512Math, EluWithinTwoUlp) {
  SKIP_WITHOUT(kAvx512);
  for (float alpha : {1.0f, 0.3f}) {
    CheckAgainstDouble(
        "elu alpha " + std::to_string(alpha), Sweep(),
        [alpha](const float* a, float* b, int64_t n) { vm::EluF32(a, b, n, alpha); },
        [alpha](double v) { return v < 0 ? alpha * std::expm1(v) : v; }, 2);
  }
  // -0 stays -0 (x < 0 is false for it), as the reference.
  const float z = -0.0f;
  float out;
  vm::EluF32(&z, &out, 1, 1.0f);
  EXPECT_TRUE(std::signbit(out));
}

TEST(Avx512Math, CeluWithinThreeUlp) {
  SKIP_WITHOUT(kAvx512);
  for (float alpha : {1.0f, 2.5f, -0.8f}) {
    CheckAgainstDouble(
        "celu alpha " + std::to_string(alpha), Sweep(),
        [alpha](const float* a, float* b, int64_t n) { vm::CeluF32(a, b, n, alpha); },
        [alpha](double v) {
          if (std::isnan(v)) return 0.0;  // the reference's comparisons give 0 + 0
          const double z = static_cast<float>(static_cast<float>(v) / alpha);
          // expm1 overflows fp32 past 88.72 (the reference's too): alpha * Inf.
          double e = std::expm1(z);
          if (e > std::numeric_limits<float>::max()) e = INFINITY;
          return std::max(v, 0.0) + std::min(alpha * e, 0.0);
        },
        3);
  }
}

TEST(Avx512Math, SeluWithinTwoUlpPlusCancellation) {
  SKIP_WITHOUT(kAvx512);
  const float alpha = 1.67326319217681884765625f, gamma = 1.05070102214813232421875f;
  CheckAgainstDouble(
      "selu", Sweep(),
      [&](const float* a, float* b, int64_t n) { vm::SeluF32(a, b, n, alpha, gamma); },
      [&](double v) {
        return v > 0 ? gamma * v : gamma * (alpha * std::exp(v) - static_cast<double>(alpha));
      },
      2, [&](double x) { return x <= 0 ? static_cast<double>(gamma) * alpha * 0x1p-23 : 0.0; });
}

TEST(Avx512Math, GeluTanhWithinFourUlpPlusCancellation) {
  SKIP_WITHOUT(kAvx512);
  CheckAgainstDouble(
      "gelu tanh", Sweep(), vm::GeluTanhF32,
      [](double v) {
        const double k = static_cast<float>(0.79788456080286535588);
        return 0.5 * v * (1 + std::tanh(k * (v + static_cast<double>(0.044715f) * v * v * v)));
      },
      4, [](double x) { return x < 0 ? std::abs(x) * 0x1p-23 : 0.0; });
}

// ---------------------------------------------------------------- kernels vs reference

struct Case {
  std::string name;
  OpType op;
  std::vector<std::pair<std::string, ir::Attribute>> attrs;
  int64_t ulps = 0;  // 0: bit for bit
  // Absolute slack (cancellation, subnormal factors) at input x; null: none.
  std::function<double(double)> abs_tol;
  int since_version = 23;
  std::vector<float> clip_bounds;  // Clip-11+: {min, max}; NaN marks an omitted one
};

// Inputs: the edges of Sweep, uniform [-12, 12] (the transition regions) and log-uniform
// magnitudes 1e-40 .. 1e38 of both signs; 4 chunks of 4096 and a tail, so the threaded path
// and the masked tail both run.
std::vector<float> KernelInputs() {
  std::vector<float> v = {0.0f,   -0.0f,   1e-45f,   -1e-45f, 1e-40f, -1e-40f, 1e-8f,   -1e-8f,
                          0.5f,   -0.5f,   1.5f,     2.5f,    -2.5f,  3.0f,    -3.0f,   6.0f,
                          -6.0f,  20.0f,   -20.0f,   88.0f,   -88.0f, 100.0f,  -100.0f, 1e10f,
                          -1e10f, 3.4e38f, -3.4e38f, kInf,    -kInf,  kNaN};
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> uni(-12, 12), mag(-40, 38);
  while (v.size() < 4 * 4096 + 37) {
    v.push_back(uni(gen));
    const float m = std::pow(10.0f, mag(gen));
    v.push_back(gen() % 2 ? m : -m);
  }
  v.resize(4 * 4096 + 37);
  return v;
}

ir::Tensor Make(DataType t, const std::vector<float>& v) {
  const std::vector<int64_t> dims = {static_cast<int64_t>(v.size())};
  return t == DataType::kF32   ? MakeFloat(dims, v)
         : t == DataType::kF16 ? MakeHalf(dims, v)
                               : MakeBf16(dims, v);
}

// The spacing of `t` at |w| (one step of the type's grid).
double Spacing(DataType t, float w) {
  const int mant = t == DataType::kF16 ? 10 : 7;
  const int min_exp = t == DataType::kF16 ? -14 : -126;
  const int e = w == 0 || !std::isfinite(w) ? min_exp : std::max(std::ilogb(w), min_exp);
  return std::ldexp(1.0, e - mant);
}

void RunCase(const Case& c) {
  const std::vector<float> in = KernelInputs();
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    NodeSpec spec;
    spec.op = c.op;
    spec.attrs = c.attrs;
    spec.since_version = c.since_version;
    spec.inputs = {Make(t, in)};
    if (!c.clip_bounds.empty()) {
      for (float b : c.clip_bounds) {
        spec.inputs.push_back(std::isnan(b) ? ir::Tensor() : Make(t, {b}));
      }
    }
    const ir::Tensor fast = RunNodeOk0(spec);
    spec.cpu_features = 0;
    const ir::Tensor ref = RunNodeOk0(spec);
    ASSERT_EQ(fast.dtype(), t);
    ASSERT_EQ(fast.num_elements(), ref.num_elements());
    const std::vector<float> x = ToFloats(spec.inputs[0]);
    const std::vector<float> g = ToFloats(fast), w = ToFloats(ref);
    const std::vector<uint16_t> gb = Bits16(fast), wb = Bits16(ref);
    int failures = 0;
    int64_t worst = 0;  // fp32: the largest distance outside the absolute slack
    for (size_t i = 0; i < g.size(); ++i) {
      if (std::isnan(w[i]) && std::isnan(g[i])) continue;
      bool ok;
      if (c.ulps == 0) {
        ok = std::memcmp(&g[i], &w[i], 4) == 0;  // bit for bit (-0 against +0 too)
      } else {
        const double slack = c.abs_tol ? c.abs_tol(x[i]) : 0.0;
        const double diff = std::abs(static_cast<double>(g[i]) - w[i]);
        if (t == DataType::kF32) {
          // The fp32 bound.
          const int64_t d = UlpDistance(g[i], w[i]);
          ok = d <= c.ulps || diff <= slack;
          if (diff > slack) worst = std::max(worst, d);
        } else {
          // Values a few fp32 ulp apart round to the same or neighbouring 16-bit values (bit
          // patterns one apart, same sign: also FLT16 max against Inf); an absolute slack
          // widens by one step of the type.
          const bool neighbours = std::signbit(g[i]) == std::signbit(w[i]) &&
                                  std::abs(static_cast<int>(gb[i]) - static_cast<int>(wb[i])) <= 1;
          ok = g[i] == w[i] || neighbours || diff <= slack + Spacing(t, w[i]);
        }
      }
      if (!ok && ++failures <= 5) {
        ADD_FAILURE() << c.name << " " << DataTypeOnnxName(t) << " x = " << x[i] << ": fast "
                      << g[i] << ", reference " << w[i];
      }
    }
    EXPECT_EQ(failures, 0) << c.name << " " << DataTypeOnnxName(t);
    if (t == DataType::kF32 && c.ulps > 0) {
      std::cout << "[ bound ] " << c.name << " vs reference: worst " << worst << " ulp, allowed "
                << c.ulps << "\n";
    }
  }
}

Case C(std::string name, OpType op, std::vector<std::pair<std::string, ir::Attribute>> attrs,
       int64_t ulps = 0, std::function<double(double)> abs_tol = nullptr, int since_version = 23,
       std::vector<float> clip_bounds = {}) {
  return Case{std::move(name),       op, std::move(attrs), ulps, std::move(abs_tol), since_version,
              std::move(clip_bounds)};
}

// Tolerances against the reference kernel (fp32 steps; the 16-bit types then allow neighbours,
// RunCase): the fast function's bound (math.h) plus the reference's own error against the exact
// value, its fp32 steps being the same but for the C library calls (glibc: expf, logf under
// 1 ulp; log1pf, expm1f 1; tanhf, erff 2) and the roundings around them: Sigmoid 3 + 2, Tanh
// 3 + 2, Exp 1 + 1, Log 1 + 1, Softplus 2 + 2, Elu 2 + 2, Celu 3 + 2, Mish 5 + 5, Swish 3 + 2,
// Gelu (ErfF32 2 ulp of erf against erff's 1, then the same steps) 4, Gelu tanh 4 + 2. Where a
// formula cancels (1 + erf, 1 + tanh for x < 0; Selu's alpha e^x - alpha for x <= 0) the bound is
// absolute, as math.h states it, doubled for the reference's share; Mish's subnormal results
// carry |x| subnormal steps (math.h).
std::vector<Case> Cases() {
  auto below0 = [](double k) { return [k](double x) { return x < 0 ? std::abs(x) * k : 0.0; }; };
  const double selu_slack = 1.0507 * 1.6733 * 0x1p-22;
  return {
      C("Sigmoid", OpType::kSigmoid, {}, 5),
      C("Tanh", OpType::kTanh, {}, 5),
      C("Exp", OpType::kExp, {}, 2),
      C("Log", OpType::kLog, {}, 2),
      C("Softplus", OpType::kSoftplus, {}, 4),
      C("Elu", OpType::kElu, {{"alpha", FloatAttr(0.7f)}}, 4),
      C("Selu", OpType::kSelu, {}, 3, [selu_slack](double x) { return x <= 0 ? selu_slack : 0.0; }),
      C("Celu", OpType::kCelu, {{"alpha", FloatAttr(1.3f)}}, 5),
      C("Mish", OpType::kMish, {}, 10, [](double x) { return (std::abs(x) + 1) * 0x1p-147; }),
      C("Swish", OpType::kSwish, {{"alpha", FloatAttr(1.702f)}}, 5, nullptr, 24),
      C("Gelu", OpType::kGelu, {}, 4, below0(0x1p-22), 20),
      C("GeluTanh", OpType::kGelu, {{"approximate", StringAttr("tanh")}}, 6, below0(0x1p-22), 20),
      C("LeakyRelu", OpType::kLeakyRelu, {{"alpha", FloatAttr(0.1f)}}),
      C("HardSigmoid", OpType::kHardSigmoid,
        {{"alpha", FloatAttr(0.3f)}, {"beta", FloatAttr(0.4f)}}),
      C("HardSwish", OpType::kHardSwish, {}),
      C("Sqrt", OpType::kSqrt, {}),
      C("Reciprocal", OpType::kReciprocal, {}),
      C("Neg", OpType::kNeg, {}),
      C("Abs", OpType::kAbs, {}),
      C("Floor", OpType::kFloor, {}),
      C("Ceil", OpType::kCeil, {}),
      C("Round", OpType::kRound, {}),
      C("Clip-6", OpType::kClip, {{"min", FloatAttr(-0.5f)}, {"max", FloatAttr(6.0f)}}, 0, nullptr,
        6),
      C("Clip-6 defaults", OpType::kClip, {}, 0, nullptr, 6),
      C("Clip-13", OpType::kClip, {}, 0, nullptr, 13, {0.0f, 6.0f}),
      C("Clip-13 max only", OpType::kClip, {}, 0, nullptr, 13, {kNaN, 1.0f}),
      C("Clip-13 min only", OpType::kClip, {}, 0, nullptr, 13, {-2.0f}),
      C("Clip-13 min > max", OpType::kClip, {}, 0, nullptr, 13, {3.0f, -1.0f}),
  };
}

TEST(Avx512Activation, MatchesReferenceOnEveryOpAndType) {
  SKIP_WITHOUT(kAvx512Bf16);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    RunCase(c);
  }
}

TEST(Avx512Activation, RegistryPicksTheFastKernelForFloatTypesOnly) {
  SKIP_WITHOUT(kAvx512Bf16);
  for (OpType op : {OpType::kSigmoid, OpType::kTanh, OpType::kHardSwish, OpType::kClip,
                    OpType::kRound, OpType::kGelu}) {
    for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
      auto def = FindKernelFor(op, t, kAvx512Bf16);
      ASSERT_TRUE(def.ok()) << def.status();
      EXPECT_EQ((*def)->isa, Isa::kAvx512) << ir::OpName(op);
      def = FindKernelFor(op, DataType::kF64, kAvx512Bf16);
      ASSERT_TRUE(def.ok()) << def.status();
      EXPECT_EQ((*def)->isa, Isa::kRef) << ir::OpName(op);
      // bfloat16 outputs need AVX512_BF16.
      def = FindKernelFor(op, DataType::kBF16, kAvx512);
      ASSERT_TRUE(def.ok()) << def.status();
      EXPECT_EQ((*def)->isa, Isa::kRef) << ir::OpName(op);
    }
  }
}

TEST(Avx512Activation, BadAttributesAndBoundsGiveTheReferenceErrors) {
  SKIP_WITHOUT(kAvx512Bf16);
  NodeSpec celu;
  celu.op = OpType::kCelu;
  celu.attrs = {{"alpha", FloatAttr(0.0f)}};
  celu.inputs = {MakeFloat({2}, {1, -1})};
  ExpectNodeError(celu, absl::StatusCode::kInvalidArgument, "alpha");
  NodeSpec gelu;
  gelu.op = OpType::kGelu;
  gelu.since_version = 20;
  gelu.attrs = {{"approximate", StringAttr("fast")}};
  gelu.inputs = {MakeFloat({2}, {1, -1})};
  ExpectNodeError(gelu, absl::StatusCode::kInvalidArgument, "approximate");
  NodeSpec clip;
  clip.op = OpType::kClip;
  clip.since_version = 13;
  clip.inputs = {MakeFloat({2}, {1, -1}), MakeFloat({2}, {0, 0})};
  ExpectNodeError(clip, absl::StatusCode::kInvalidArgument, "min must be a scalar");
  clip.inputs = {MakeFloat({2}, {1, -1}), ir::Tensor(), MakeHalf({1}, {0})};
  ExpectNodeError(clip, absl::StatusCode::kInvalidArgument, "input 2 has dtype float16");
}

// Inputs the fast path does not take run on the reference kernel: a one-element bound tensor
// of shape [1] (not a scalar) is accepted by both.
TEST(Avx512Activation, ClipBoundOfShapeOneClips) {
  SKIP_WITHOUT(kAvx512Bf16);
  NodeSpec clip;
  clip.op = OpType::kClip;
  clip.since_version = 13;
  clip.inputs = {MakeFloat({4}, {-3, -0.5f, 0.5f, 3}), MakeFloat({1}, {-1}), MakeFloat({1}, {1})};
  EXPECT_EQ(ToFloats(RunNodeOk0(clip)), (std::vector<float>{-1, -0.5f, 0.5f, 1}));
}

}  // namespace
}  // namespace kiln::testing
