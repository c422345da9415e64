// LSTMQuantizedR (an LSTM whose R is stored int8 / uint8 with one scale and zero point per row of
// R; engine/ir/ops.def): the reference kernel against the reference LSTM on the dequantized R
// (bit for bit in fp32), the AVX-512 kernel (R's integers packed as int8 or int16, the row scale
// applied to each finished dot product) against the reference kernel over directions, layouts,
// odd hidden sizes, batch sizes, sequence_lens, both integer storages, weights as run-time inputs,
// several threads and fp32 / fp16 / bf16, and the errors naming the node.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/cpu_features.h"
#include "engine/common/half.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ir::OpType;

const uint64_t kAvx512 = kernels::IsaCpuFeatures(kernels::Isa::kAvx512);
const uint64_t kAvx512Bf16 = kAvx512 | kCpuAvx512Bf16;

bool Has(uint64_t features) { return (DetectCpuFeatures() & features) == features; }

#define SKIP_WITHOUT(features)                                                           \
  if (!Has(features)) {                                                                  \
    GTEST_SKIP() << "CPU lacks " << CpuFeatureString((features) & ~DetectCpuFeatures()); \
  }

// How R is quantized.
enum class Quant {
  kInt8Symmetric,  // int8, zero point 0: q - zp always fits int8 (the packed int8 path)
  kInt8SmallZp,    // int8 in [-120, 120], zero points in [-3, 3]: still fits int8
  kInt8WideZp,     // int8 in [-128, 127], zero points +-9: q - zp past int8 (the int16 path)
  kUint8,          // uint8 around zero points near 128: q - zp in int8 range (int8 path)
  kUint8WideZp,    // uint8 in [0, 255], zero points in [0, 20]: the int16 path
};

struct Config {
  std::string direction = "forward";
  int64_t seq = 4, batch = 2, input = 7, hidden = 37;
  int layout = 0;
  DataType dtype = DataType::kF32;
  Quant quant = Quant::kInt8Symmetric;
  bool bias = true, init = false, peepholes = false;
  std::vector<int32_t> lens;

  int dirs() const { return direction == "bidirectional" ? 2 : 1; }
};

std::string Describe(const Config& c) {
  return absl::StrCat(c.direction, " seq ", c.seq, " batch ", c.batch, " input ", c.input,
                      " hidden ", c.hidden, " layout ", c.layout, " ", DataTypeOnnxName(c.dtype),
                      " quant ", static_cast<int>(c.quant), c.lens.empty() ? "" : " lens",
                      c.peepholes ? " peepholes" : "", c.init ? " h0 c0" : "");
}

float RoundTo(DataType t, float v) {
  switch (t) {
    case DataType::kF16:
      return HalfBitsToFloat(FloatToHalfBits(v));
    case DataType::kBF16:
      return BFloat16BitsToFloat(FloatToBFloat16Bits(v));
    default:
      return v;
  }
}

ir::Tensor Make(DataType t, std::vector<int64_t> dims, const std::vector<float>& v) {
  switch (t) {
    case DataType::kF16:
      return MakeHalf(std::move(dims), v);
    case DataType::kBF16:
      return MakeBf16(std::move(dims), v);
    default:
      return MakeFloat(std::move(dims), v);
  }
}

// One node's inputs: the LSTMQuantizedR form (R integers, scales, zero points) and, for the
// reference comparison, the plain LSTM form with R dequantized in fp32 as the reference does.
struct Data {
  std::vector<float> x, w, b, h0, c0, p, scale, r_dequantized;
  std::vector<int32_t> q, zp;  // R's integers and zero points, [dirs][4 * hidden]([hidden])
};

// Inputs in [-1, 1]; W in [-s, s] and R's rows spanning about [-s, s] once dequantized, s = 1.5 /
// sqrt(input + hidden), so that the gates' sums stay of order 1.
Data MakeData(const Config& c, unsigned seed) {
  std::mt19937 gen(seed);
  auto fill = [&](int64_t n, float scale) {
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = RoundTo(c.dtype, dist(gen));
    return v;
  };
  auto ints = [&](int64_t n, int lo, int hi) {
    std::uniform_int_distribution<int> dist(lo, hi);
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = dist(gen);
    return v;
  };
  const int64_t d = c.dirs(), gh = 4 * c.hidden, rows = d * gh;
  const float s = 1.5f / std::sqrt(static_cast<float>(c.input + c.hidden));
  Data data;
  data.x = fill(c.seq * c.batch * c.input, 1.0f);
  data.w = fill(d * gh * c.input, s);
  if (c.bias) data.b = fill(d * 2 * gh, 0.5f);
  if (c.init) data.h0 = fill(d * c.batch * c.hidden, 1.0f);
  if (c.init) data.c0 = fill(d * c.batch * c.hidden, 1.0f);
  if (c.peepholes) data.p = fill(d * 3 * c.hidden, 0.5f);
  switch (c.quant) {
    case Quant::kInt8Symmetric:
      data.q = ints(rows * c.hidden, -127, 127), data.zp = std::vector<int32_t>(rows, 0);
      break;
    case Quant::kInt8SmallZp:
      data.q = ints(rows * c.hidden, -120, 120), data.zp = ints(rows, -3, 3);
      break;
    case Quant::kInt8WideZp:
      data.q = ints(rows * c.hidden, -128, 127), data.zp = ints(rows, -9, 9);
      data.zp[0] = 9;  // row 0 holds -128 - 9 past int8 for certain
      data.q[0] = -128;
      break;
    case Quant::kUint8:
      data.q = ints(rows * c.hidden, 8, 248), data.zp = ints(rows, 126, 130);
      break;
    case Quant::kUint8WideZp:
      data.q = ints(rows * c.hidden, 0, 255), data.zp = ints(rows, 0, 20);
      data.q[0] = 255, data.zp[0] = 0;  // 255: past int8 for certain
      break;
  }
  // Per-row scales around s / 127, rounded to the node's dtype (the precision pass stores them
  // in it).
  std::uniform_real_distribution<float> sd(0.5f, 1.5f);
  data.scale.resize(rows);
  for (float& v : data.scale) v = RoundTo(c.dtype, s / 127.0f * sd(gen));
  data.r_dequantized.resize(rows * c.hidden);
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t k = 0; k < c.hidden; ++k) {
      // The reference kernel's formula, in fp32.
      data.r_dequantized[j * c.hidden + k] =
          (static_cast<float>(data.q[j * c.hidden + k]) - static_cast<float>(data.zp[j])) *
          data.scale[j];
    }
  }
  return data;
}

bool Unsigned(Quant q) { return q == Quant::kUint8 || q == Quant::kUint8WideZp; }

ir::Tensor Ints(DataType t, std::vector<int64_t> dims, const std::vector<int32_t>& v) {
  if (t == DataType::kU8) return MakeTensor<uint8_t>(dims, {v.begin(), v.end()}, t);
  return MakeTensor<int8_t>(dims, {v.begin(), v.end()}, t);
}

struct RunOptions {
  uint64_t features = 0;  // 0: the reference kernel
  bool quantized = true;  // LSTMQuantizedR, else LSTM on the dequantized R
  bool constant_weights = true;
  int runs = 1;
};

NodeSpec Spec(const Config& c, const Data& d, const RunOptions& o) {
  const int64_t dirs = c.dirs(), gh = 4 * c.hidden;
  const std::vector<int64_t> state = c.layout == 0 ? std::vector<int64_t>{dirs, c.batch, c.hidden}
                                                   : std::vector<int64_t>{c.batch, dirs, c.hidden};
  NodeSpec s;
  s.op = o.quantized ? OpType::kLSTMQuantizedR : OpType::kLSTM;
  s.since_version = 22;
  s.num_outputs = 3;
  s.cpu_features = o.features;
  s.runs = o.runs;
  s.attrs = {{"direction", StringAttr(c.direction)}, {"hidden_size", IntAttr(c.hidden)}};
  if (c.layout != 0) s.attrs.push_back({"layout", IntAttr(c.layout)});
  s.inputs.resize(o.quantized ? 10 : 8);
  s.inputs[0] = Make(c.dtype,
                     c.layout == 0 ? std::vector<int64_t>{c.seq, c.batch, c.input}
                                   : std::vector<int64_t>{c.batch, c.seq, c.input},
                     d.x);
  s.inputs[1] = Make(c.dtype, {dirs, gh, c.input}, d.w);
  const DataType qt = Unsigned(c.quant) ? DataType::kU8 : DataType::kI8;
  s.inputs[2] = o.quantized ? Ints(qt, {dirs, gh, c.hidden}, d.q)
                            : MakeFloat({dirs, gh, c.hidden}, d.r_dequantized);
  if (c.bias) s.inputs[3] = Make(c.dtype, {dirs, 2 * gh}, d.b);
  if (!c.lens.empty()) s.inputs[4] = MakeTensor<int32_t>({c.batch}, c.lens, DataType::kI32);
  if (c.init) s.inputs[5] = Make(c.dtype, state, d.h0);
  if (c.init) s.inputs[6] = Make(c.dtype, state, d.c0);
  if (c.peepholes) s.inputs[7] = Make(c.dtype, {dirs, 3 * c.hidden}, d.p);
  if (o.quantized) {
    s.inputs[8] = Make(c.dtype, {dirs, gh}, d.scale);
    s.inputs[9] = Ints(qt, {dirs, gh}, d.zp);
    if (o.constant_weights) s.constant_inputs = {1, 2, 8, 9};
  } else if (o.constant_weights) {
    s.constant_inputs = {1, 2};
  }
  return s;
}

// The kernel the registry picks for the quantized node.
kernels::Isa PickedIsa(const Config& c, uint64_t features) {
  ir::Graph g;
  ir::Node* n = g.AddNode(OpType::kLSTMQuantizedR, "test_node");
  n->since_version = 22;
  n->attrs["hidden_size"] = IntAttr(c.hidden);
  absl::StatusOr<ir::Value*> x = g.AddValue("x");
  if (!x.ok()) return kernels::Isa::kRef;
  (*x)->dtype = c.dtype;
  n->inputs.push_back(*x);
  absl::StatusOr<const kernels::KernelDef*> def = kernels::Registry::Default().Find(*n, features);
  return def.ok() ? (*def)->isa : kernels::Isa::kRef;
}

// One unit in the last place of `dtype` at magnitude |v|.
double Ulp(DataType dtype, double v) {
  const int bits = dtype == DataType::kF16 ? 10 : dtype == DataType::kBF16 ? 7 : 23;
  const double m = std::max(std::fabs(v), dtype == DataType::kF16 ? 6.1e-5 : 1.2e-38);
  return std::ldexp(1.0, std::ilogb(m) - bits);
}

// `got` within `atol` of `want`, plus one ulp of the dtype for fp16 / bf16 outputs (each is
// rounded once from fp32: two fp32 values a hair apart may round to neighbours).
void ExpectClose(const ir::Tensor& got, const ir::Tensor& want, double atol,
                 const std::string& what) {
  ASSERT_TRUE(got.defined() && want.defined()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.dims(), want.dims()) << what;
  const std::vector<float> g = ToFloats(got), w = ToFloats(want);
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    const double tol = atol + (got.dtype() == DataType::kF32 ? 0.0 : Ulp(got.dtype(), w[i]));
    if (!(std::fabs(static_cast<double>(g[i]) - w[i]) <= tol)) {
      ++bad;
      ADD_FAILURE() << what << " element " << i << ": " << g[i] << ", want " << w[i]
                    << " (tolerance " << tol << ")";
    }
  }
}

const char* const kNames[] = {"Y", "Y_h", "Y_c"};

// The fast kernel against the reference kernel, both on the quantized node. The reference sums
// h . ((q - zp) * s) with each weight rounded to fp32, the fast kernel s * (h . (q - zp)) with
// exact integer weights and one rounding of the scaled sum, in another order: each gate's sum of
// at most input + hidden <= 344 products, whose magnitudes sum to order 1 (the scales keep the
// weights within 1.5 / sqrt(input + hidden)), differs by a few dozen 2^-24, and SigmoidF32 /
// TanhF32 add 3 ulp against the C library; the activations are at most 1-Lipschitz, so the few
// steps here do not grow it: 1e-5 absolute, as for the fp32 LSTM (recurrent_test.cc; the largest
// difference measured over these tests is 7.2e-7, at hidden 320), while one wrong weight row (a
// scale or zero point misapplied) changes outputs by 1e-2 or more.
void ExpectFastMatchesReference(const Config& c, unsigned seed, bool constant_weights = true,
                                int runs = 1) {
  SCOPED_TRACE(Describe(c));
  const uint64_t features = c.dtype == DataType::kBF16 ? kAvx512Bf16 : kAvx512;
  EXPECT_EQ(PickedIsa(c, features), kernels::Isa::kAvx512);
  const Data d = MakeData(c, seed);
  absl::StatusOr<std::vector<ir::Tensor>> ref = RunNode(Spec(c, d, {0, true, constant_weights}));
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<std::vector<ir::Tensor>> fast =
      RunNode(Spec(c, d, {features, true, constant_weights, runs}));
  ASSERT_TRUE(fast.ok()) << fast.status();
  for (int i = 0; i < 3; ++i) ExpectClose((*fast)[i], (*ref)[i], 1e-5, kNames[i]);
}

std::vector<Config> Configs() {
  std::vector<Config> out;
  int k = 0;
  for (const char* dir : {"forward", "reverse", "bidirectional"}) {
    for (int layout : {0, 1}) {
      Config c;
      c.direction = dir;
      c.layout = layout;
      // Odd hidden sizes: partial blocks of 16 units (below 16: one partial block).
      c.seq = 5, c.batch = layout == 0 ? 5 : 3, c.input = 7, c.hidden = layout == 0 ? 37 : 9;
      c.init = layout == 0;
      c.bias = std::string(dir) != "reverse";
      c.peepholes = layout == 0;
      c.lens = layout == 0 ? std::vector<int32_t>{5, 2, 0, 4, 5} : std::vector<int32_t>{};
      c.quant = static_cast<Quant>(k++ % 5);
      out.push_back(c);
    }
  }
  for (Quant q : {Quant::kInt8Symmetric, Quant::kInt8SmallZp, Quant::kInt8WideZp, Quant::kUint8,
                  Quant::kUint8WideZp}) {
    Config c;  // batch 1 (a row chunk of 1), as in the OCR model
    c.direction = "bidirectional";
    c.batch = 1, c.hidden = 50, c.input = 33;
    c.quant = q;
    out.push_back(c);
  }
  return out;
}

TEST(LstmInt8RReference, EqualsLstmOnDequantizedRBitForBit) {
  // fp32: the reference LSTMQuantizedR dequantizes R exactly as the import did before, (q - zp) *
  // s in fp32, then runs the same evaluator: every output bit equal.
  unsigned seed = 100;
  for (const Config& c : Configs()) {
    SCOPED_TRACE(Describe(c));
    const Data d = MakeData(c, seed++);
    for (bool constant : {true, false}) {
      std::vector<ir::Tensor> q = RunNodeOk(Spec(c, d, {0, true, constant}));
      std::vector<ir::Tensor> f = RunNodeOk(Spec(c, d, {0, false, constant}));
      for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(q[i].defined() && f[i].defined()) << kNames[i];
        ASSERT_EQ(q[i].dims(), f[i].dims()) << kNames[i];
        const std::vector<float> a = ToFloats(q[i]), b = ToFloats(f[i]);
        int bad = 0;
        for (size_t j = 0; j < a.size() && bad < 5; ++j) {
          if (std::memcmp(&a[j], &b[j], sizeof(float)) != 0) {
            ++bad;
            ADD_FAILURE() << kNames[i] << " element " << j << ": " << a[j] << " vs " << b[j];
          }
        }
      }
    }
  }
}

TEST(LstmInt8RAvx512, MatchesReferenceFp32) {
  SKIP_WITHOUT(kAvx512);
  unsigned seed = 1000;
  for (const Config& c : Configs()) ExpectFastMatchesReference(c, seed++);
}

TEST(LstmInt8RAvx512, MatchesReferenceFp16) {
  SKIP_WITHOUT(kAvx512);
  unsigned seed = 2000;
  for (Config c : Configs()) {
    c.dtype = DataType::kF16;
    ExpectFastMatchesReference(c, seed++);
  }
}

TEST(LstmInt8RAvx512, MatchesReferenceBf16) {
  SKIP_WITHOUT(kAvx512Bf16);
  unsigned seed = 3000;
  for (Config c : Configs()) {
    c.dtype = DataType::kBF16;
    ExpectFastMatchesReference(c, seed++);
  }
}

TEST(LstmInt8RAvx512, WeightsAsInputsAndRepeatedRuns) {
  SKIP_WITHOUT(kAvx512);
  Config c;
  c.direction = "bidirectional";
  c.hidden = 21;
  c.peepholes = true;
  for (Quant q : {Quant::kInt8SmallZp, Quant::kUint8WideZp}) {
    c.quant = q;
    ExpectFastMatchesReference(c, 11, /*constant_weights=*/false, /*runs=*/2);
    ExpectFastMatchesReference(c, 12, /*constant_weights=*/true, /*runs=*/3);
  }
}

TEST(LstmInt8RAvx512, LargeHiddenRunsOnSeveralThreads) {
  SKIP_WITHOUT(kAvx512);
  // Large enough for the time loop to split the units over threads: the per-step barriers and
  // the block split (each thread's slice of scales) must give the single thread's numbers.
  const int saved = omp_get_max_threads();
  omp_set_num_threads(4);
  Config c;
  c.seq = 4, c.batch = 1, c.input = 24, c.hidden = 320;  // a team of 3 threads
  c.init = c.peepholes = true;
  c.quant = Quant::kInt8SmallZp;
  ExpectFastMatchesReference(c, 4000);
  c.direction = "bidirectional";  // two teams of 2 at once
  c.quant = Quant::kUint8WideZp;
  ExpectFastMatchesReference(c, 4001);
  omp_set_num_threads(saved);
}

TEST(LstmInt8RErrors, InputsNameTheNode) {
  Config c;
  c.hidden = 4;
  const Data d = MakeData(c, 7);
  for (uint64_t features : {uint64_t{0}, kAvx512}) {
    if (features != 0 && !Has(features)) continue;
    {
      NodeSpec s = Spec(c, d, {features, true, false});
      s.inputs[2] = MakeFloat({1, 16, 4}, d.r_dequantized);  // R float, not quantized
      ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "R int8 or uint8");
    }
    {
      NodeSpec s = Spec(c, d, {features, true, false});
      s.inputs[8] = MakeFloat({1, 15}, std::vector<float>(15, 0.01f));
      ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "R_scale has shape");
    }
    {
      NodeSpec s = Spec(c, d, {features, true, false});
      s.inputs[9] = MakeTensor<uint8_t>({1, 16}, std::vector<uint8_t>(16, 0), DataType::kU8);
      ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "R_zero_point");
    }
    {
      NodeSpec s = Spec(c, d, {features, true, false});
      s.inputs.resize(9);  // no R_zero_point
      ExpectNodeError(s, absl::StatusCode::kInvalidArgument, "");
    }
  }
}

}  // namespace
}  // namespace kiln::testing
