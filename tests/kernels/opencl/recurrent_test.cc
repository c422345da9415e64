// The OpenCL LSTM, GRU and RNN (engine/kernels/opencl/recurrent.cc) against the reference kernel
// (cpu/ref/recurrent.cc) at fp32, fp16 and bf16 storage, on the machine's OpenCL device (PoCL in
// CI): every direction, layouts 0 and 1, sequence_lens (shorter entries and empty ones), initial
// states, peepholes, clip, input_forget, linear_before_reset, the activations with their alpha
// and beta, hidden sizes that are not multiples of 16, state in local and in global memory,
// sequences cut into several chunks, and the shape of Silero VAD's LSTM.
//
// Why the bounds hold. The device performs the reference's fp32 operations in the reference's
// order (each dot product acc = acc + v[k] * m[k] for k in order, then the bias; the gates, clip
// and state updates as recurrent.h writes them), and 16-bit inputs widen exactly on both sides.
// So the two agree bit for bit until an activation that calls exp, tanh or log1p (or divides)
// differs: the device's built-ins are within 3 (exp), 5 (tanh), 2 (log1p) and 2.5 (division)
// ulps of the exact value (OpenCL C 1.2, 7.4), the C library's within 1-2, so such an activation
// differs by at most 16 u of its output's magnitude (u = 2^-24). Nodes whose activations are all
// exact operations (Relu, LeakyRelu, ThresholdedRelu, Affine, HardSigmoid) must therefore match
// bit for bit, however long the sequence. Otherwise a difference, once there, propagates:
// Bound() below follows the reference's operations on pairs (e, m), e a bound on the difference
// of the two sides' values and m on the value's magnitude, from the inputs' magnitudes (max |X|,
// the largest row sums of |W| and |R|, max |B|, |P|, |initial states|):
//   a rounded product or sum of differing operands: e = ea mb + ma eb + ea eb, plus 2u m for the
//   two sides' roundings; a dot product of n terms plus a bias whose inputs differ by e:
//   rho e + 2 gamma(n + 2) (rho m + |bias|) (each side within gamma of the exact sum, Higham
//   3.1), rho the largest row sum of |R|; an activation: its Lipschitz constant times e, plus
//   16u of its magnitude where it is evaluated inexactly (4u for an exact one whose input
//   differs: its own roundings); clip is 1-Lipschitz.
// The bound for every output is the largest e over the steps (Y, Y_h) and of Ct (Y_c). The
// weights are drawn small enough (R in +-r_scale / hidden) that the worst case, which lines every
// difference up, grows slowly over the steps tested; a wrong gate, bias or state differs by
// 1e-2 or more. 16-bit outputs: both fp32 values rounded once, up to one unit of the storage
// type's last place apart (ExpectClose adds it).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/kernels/opencl/opencl_testing.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ir::OpType;
using Dims = std::vector<int64_t>;

constexpr double kU = 0x1p-24;
const DataType kTypes[] = {DataType::kF32, DataType::kF16, DataType::kBF16};
const double kInf = std::numeric_limits<double>::infinity();

ir::Attribute StringsAttr(std::vector<std::string> v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kStrings;
  a.strings = std::move(v);
  return a;
}

// One node and its inputs' shapes.
struct Case {
  OpType op = OpType::kLSTM;
  DataType dt = DataType::kF32;
  std::string direction = "forward";
  int layout = 0;
  int64_t seq = 5, batch = 3, input = 7, hidden = 37;
  bool bias = true, init_h = false, init_c = false, peep = false;
  std::vector<int32_t> lens;  // empty: no sequence_lens
  float clip = 0;             // 0: none
  bool input_forget = false, lbr = false;
  std::vector<std::string> acts;  // empty: the defaults
  std::vector<float> alphas, betas;
  double r_scale = 1;          // R uniform in +-r_scale / hidden
  int outputs = 0;             // 0: all (3 for LSTM, 2 otherwise)
  std::vector<int> constants;  // inputs given as graph constants
  bool lens_constant = false;

  int dirs() const { return direction == "bidirectional" ? 2 : 1; }
  int gates() const { return op == OpType::kLSTM ? 4 : op == OpType::kGRU ? 3 : 1; }
  int acts_per_dir() const { return op == OpType::kLSTM ? 3 : op == OpType::kGRU ? 2 : 1; }
  std::string Describe() const {
    return absl::StrCat(ir::OpName(op), " ", DataTypeOnnxName(dt), " ", direction, " layout ",
                        layout, " seq ", seq, " batch ", batch, " input ", input, " hidden ",
                        hidden, bias ? " B" : "", init_h ? " h0" : "", init_c ? " c0" : "",
                        peep ? " P" : "", lens.empty() ? "" : " lens", clip > 0 ? " clip" : "",
                        input_forget ? " input_forget" : "", lbr ? " lbr" : "", " acts [",
                        absl::StrJoin(acts, ","), "]");
  }
};

// The node's inputs as floats (already rounded to the storage type) and tensors.
struct Inputs {
  std::vector<float> x, w, r, b, h0, c0, p;
  std::vector<ir::Tensor> tensors;
};

Inputs MakeInputs(const Case& c, uint32_t seed) {
  const int64_t dirs = c.dirs(), gh = c.gates() * c.hidden;
  const Dims state = c.layout == 0 ? Dims{dirs, c.batch, c.hidden} : Dims{c.batch, dirs, c.hidden};
  const Dims xd = c.layout == 0 ? Dims{c.seq, c.batch, c.input} : Dims{c.batch, c.seq, c.input};
  Inputs in;
  std::vector<ir::Tensor>& t = in.tensors;
  t.resize(c.op == OpType::kLSTM ? 8 : 6);
  // Each input drawn, rounded to the storage type, and kept as the floats the kernels read.
  const auto make = [&](int slot, const Dims& dims, float scale, std::vector<float>& out) {
    t[slot] =
        MakeStored(c.dt, dims, UniformValues(ir::NumElementsOf(dims), -scale, scale, seed + slot));
    out = ToFloats(t[slot]);
  };
  make(0, xd, 1.0f, in.x);
  make(1, {dirs, gh, c.input}, 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(c.input, 1))),
       in.w);
  make(2, {dirs, gh, c.hidden}, static_cast<float>(c.r_scale / c.hidden), in.r);
  if (c.bias) make(3, {dirs, 2 * gh}, 0.5f, in.b);
  if (!c.lens.empty()) t[4] = MakeTensor<int32_t>({c.batch}, c.lens, DataType::kI32);
  if (c.init_h) make(5, state, 1.0f, in.h0);
  if (c.op == OpType::kLSTM) {
    if (c.init_c) make(6, state, 1.0f, in.c0);
    if (c.peep) make(7, {dirs, 3 * c.hidden}, 0.5f, in.p);
  }
  while (!t.empty() && !t.back().defined()) t.pop_back();
  return in;
}

NodeSpec MakeSpec(const Case& c, const Inputs& in) {
  std::vector<std::pair<std::string, ir::Attribute>> attrs = {
      {"direction", StringAttr(c.direction)}, {"hidden_size", IntAttr(c.hidden)}};
  if (c.layout != 0) attrs.emplace_back("layout", IntAttr(c.layout));
  if (!c.acts.empty()) attrs.emplace_back("activations", StringsAttr(c.acts));
  if (!c.alphas.empty()) attrs.emplace_back("activation_alpha", FloatsAttr(c.alphas));
  if (!c.betas.empty()) attrs.emplace_back("activation_beta", FloatsAttr(c.betas));
  if (c.clip > 0) attrs.emplace_back("clip", FloatAttr(c.clip));
  if (c.input_forget) attrs.emplace_back("input_forget", IntAttr(1));
  if (c.lbr) attrs.emplace_back("linear_before_reset", IntAttr(1));
  NodeSpec spec = Spec(c.op, std::move(attrs), in.tensors);
  spec.since_version = 22;
  spec.num_outputs = c.outputs > 0 ? c.outputs : c.op == OpType::kLSTM ? 3 : 2;
  spec.constant_inputs = c.constants;
  if (c.lens_constant) spec.constant_inputs.push_back(4);
  return spec;
}

// ---- The bound (see the top of the file) ----

// A value on both sides: e bounds their difference, m the magnitude of each.
struct Val {
  double e = 0, m = 0;
};
// The two sides' roundings of a result whose operands differ (none when they agree).
Val Rounded(Val v) {
  if (v.e > 0) v.e += 2 * kU * v.m;
  v.m *= 1 + kU;
  return v;
}
Val Add(Val a, Val b) { return Rounded({a.e + b.e, a.m + b.m}); }
Val Mul(Val a, Val b) { return Rounded({a.e * b.m + a.m * b.e + a.e * b.e, a.m * b.m}); }
Val Exact(double m) { return {0, m}; }
double Gamma(double n) { return n * kU / (1 - n * kU); }

// An activation's Lipschitz constant, its magnitude for inputs within m, and whether it is
// evaluated exactly (the same fp32 operations on both sides).
struct Activation {
  std::string name;
  float alpha = 0, beta = 0;

  // Outputs in [0, 1]: 1 - f(x) is in [0, 1] too.
  bool unit() const { return name == "sigmoid" || name == "hardsigmoid"; }
  bool exact() const {
    return name == "relu" || name == "leakyrelu" || name == "thresholdedrelu" || name == "affine" ||
           name == "hardsigmoid";
  }
  double Lipschitz() const {
    const double a = std::fabs(alpha), b = std::fabs(beta);
    if (name == "sigmoid") return 0.25;
    if (name == "affine" || name == "hardsigmoid") return a;
    if (name == "leakyrelu" || name == "elu") return std::max(1.0, a);
    if (name == "thresholdedrelu") return kInf;  // a step at alpha
    if (name == "scaledtanh") return a * b;
    return 1;  // relu, tanh, softsign, softplus
  }
  double Magnitude(double m) const {
    const double a = std::fabs(alpha), b = std::fabs(beta);
    if (name == "sigmoid" || name == "hardsigmoid") return 1;
    if (name == "tanh" || name == "softsign") return std::min(1.0, m);
    if (name == "affine") return a * m + b;
    if (name == "leakyrelu") return std::max(1.0, a) * m;
    if (name == "scaledtanh") return a * std::min(1.0, b * m);
    if (name == "elu") return std::max(m, a);
    if (name == "softplus") return m + std::log(2.0);
    return m;  // relu, thresholdedrelu
  }
  Val operator()(Val x) const {
    const double m = Magnitude(x.m);
    if (exact()) return {x.e == 0 ? 0 : Lipschitz() * x.e + 4 * kU * m, m};
    return {Lipschitz() * x.e + 16 * kU * m, m};
  }
};

// 1 - v, where v is in [0, 1] when `unit`.
Val OneMinus(Val v, bool unit) {
  const Val r = Rounded({v.e, 1 + v.m});
  return unit ? Val{r.e, 1} : r;
}

// The case's activations per direction, with alpha and beta consumed in order by those that
// take them and the ONNX defaults otherwise (as rnn::ReadAttrs reads them).
std::vector<std::vector<Activation>> Activations(const Case& c) {
  std::vector<std::string> names = c.acts;
  if (names.empty()) {
    const std::vector<std::string> def =
        c.op == OpType::kLSTM  ? std::vector<std::string>{"sigmoid", "tanh", "tanh"}
        : c.op == OpType::kGRU ? std::vector<std::string>{"sigmoid", "tanh"}
                               : std::vector<std::string>{"tanh"};
    for (int d = 0; d < c.dirs(); ++d) names.insert(names.end(), def.begin(), def.end());
  }
  size_t na = 0, nb = 0;
  std::vector<std::vector<Activation>> out(c.dirs());
  for (size_t i = 0; i < names.size(); ++i) {
    Activation a{absl::AsciiStrToLower(names[i])};
    const std::string& n = a.name;
    const bool uses_alpha = n == "affine" || n == "leakyrelu" || n == "thresholdedrelu" ||
                            n == "scaledtanh" || n == "hardsigmoid" || n == "elu";
    const bool uses_beta = n == "affine" || n == "scaledtanh" || n == "hardsigmoid";
    const float alpha0 = n == "leakyrelu" ? 0.01f : n == "hardsigmoid" ? 0.2f : 1.0f;
    const float beta0 = n == "hardsigmoid" ? 0.5f : n == "scaledtanh" ? 1.0f : 0.0f;
    if (uses_alpha) a.alpha = na < c.alphas.size() ? c.alphas[na++] : alpha0;
    if (uses_beta) a.beta = nb < c.betas.size() ? c.betas[nb++] : beta0;
    out[i / c.acts_per_dir()].push_back(a);
  }
  return out;
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}
// The largest sum of |row| over rows of `cols` elements.
double MaxRowSum(const std::vector<float>& v, int64_t cols) {
  double best = 0;
  for (size_t r = 0; cols > 0 && r < v.size() / cols; ++r) {
    double s = 0;
    for (int64_t k = 0; k < cols; ++k) s += std::fabs(v[r * cols + k]);
    best = std::max(best, s);
  }
  return best;
}

// Bounds on |device - reference| for Y and Y_h (first) and Y_c (second), in fp32.
std::pair<double, double> Bound(const Case& c, const Inputs& in) {
  const int64_t hs = c.hidden;
  const double rho = MaxRowSum(in.r, hs), wb = c.bias ? MaxAbs(in.b) : 0;
  const Val xw = Exact(MaxRowSum(in.w, c.input) * MaxAbs(in.x) * (1 + Gamma(c.input + 2)) + wb);
  const Val peep = Exact(MaxAbs(in.p));
  const double clip = c.clip > 0 ? c.clip : kInf;
  // Ht-1 R^T + Rb from state v.
  const auto dot = [&](Val v) {
    const double m = (rho * v.m + wb) * (1 + Gamma(hs + 2));
    if (v.e == 0) return Exact(m);
    return Val{rho * v.e + 2 * Gamma(hs + 2) * (rho * (v.m + v.e) + wb), m};
  };
  const auto clipped = [&](Val v) { return Val{v.e, std::min(v.m, clip)}; };
  double eh = 0, ec = 0;
  for (const std::vector<Activation>& act : Activations(c)) {
    Val h = Exact(MaxAbs(in.h0)), cs = Exact(MaxAbs(in.c0));
    for (int64_t s = 0; s < c.seq; ++s) {
      const Val hr = dot(h);
      if (c.op == OpType::kRNN) {
        h = act[0](clipped(Add(xw, hr)));
      } else if (c.op == OpType::kGRU) {
        const Val z = act[0](clipped(Add(xw, hr)));
        const Val r = z;  // the same bound
        Val ht;
        if (c.lbr) {
          ht = act[1](clipped(Add(xw, Mul(r, hr))));
        } else {
          ht = act[1](clipped(Add(xw, dot(Mul(r, h)))));
        }
        const Val h_prev = h;
        h = Add(Mul(OneMinus(z, act[0].unit()), ht), Mul(z, h));
        // A convex combination where z is in [0, 1]: no larger than the larger of its terms
        // (times three roundings).
        if (act[0].unit()) h.m = std::max(ht.m, h_prev.m) * (1 + 3 * kU);
      } else {
        const auto with_peep = [&](Val pre, Val state) {
          return c.peep ? Add(pre, Mul(peep, state)) : pre;
        };
        const Val it = act[0](clipped(with_peep(Add(xw, hr), cs)));
        const Val ft = c.input_forget ? OneMinus(it, act[0].unit())
                                      : act[0](clipped(with_peep(Add(xw, hr), cs)));
        const Val ct = act[1](clipped(Add(xw, hr)));
        cs = Add(Mul(ft, cs), Mul(it, ct));
        const Val ot = act[0](clipped(with_peep(Add(xw, hr), cs)));
        h = Mul(ot, act[2](cs));
        ec = std::max(ec, cs.e);
      }
      eh = std::max(eh, h.e);
    }
  }
  return {eh, ec};
}

// Bit for bit (NaN alike).
void ExpectBits(const ir::Tensor& want, const ir::Tensor& got) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.dims(), want.dims());
  ASSERT_EQ(got.byte_size(), want.byte_size());
  if (want.byte_size() == 0) return;
  EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.byte_size()), 0)
      << "differs from the reference bit for bit";
}

// Runs `c` on both and checks every output within Bound (bit for bit where it is 0).
void Check(const Case& c, uint32_t seed) {
  SCOPED_TRACE(c.Describe());
  const Inputs in = MakeInputs(c, seed);
  const Runs r = RunBoth(MakeSpec(c, in));
  const auto [eh, ec] = Bound(c, in);
  ASSERT_EQ(r.got.size(), r.want.size());
  const char* names[] = {"Y", "Y_h", "Y_c"};
  for (size_t o = 0; o < r.want.size(); ++o) {
    SCOPED_TRACE(names[o]);
    ASSERT_TRUE(r.want[o].defined());
    ASSERT_TRUE(r.got[o].defined());
    const double bound = o == 2 ? ec : eh;
    if (bound == 0) {
      ExpectBits(r.want[o], r.got[o]);
    } else {
      ExpectClose(r.want[o], r.got[o], [&](int64_t) { return bound; });
    }
  }
}

// Exact activations (bit for bit), for LSTM, GRU, RNN; direction 1 with others than direction 0.
std::vector<std::string> ExactActs(OpType op, int dirs) {
  std::vector<std::string> a;
  for (int d = 0; d < dirs; ++d) {
    if (op == OpType::kLSTM) {
      a.insert(a.end(), {"HardSigmoid", d == 0 ? "LeakyRelu" : "Relu", "Affine"});
    } else if (op == OpType::kGRU) {
      a.insert(a.end(), {"HardSigmoid", d == 0 ? "Affine" : "LeakyRelu"});
    } else {
      a.push_back(d == 0 ? "LeakyRelu" : "Affine");
    }
  }
  return a;
}

// Every cell, direction and layout, with and without lengths, initial states, peepholes, bias.
std::vector<Case> Cases() {
  std::vector<Case> out;
  for (OpType op : {OpType::kLSTM, OpType::kGRU, OpType::kRNN}) {
    for (const char* dir : {"forward", "reverse", "bidirectional"}) {
      for (int layout : {0, 1}) {
        Case c;
        c.op = op;
        c.direction = dir;
        c.layout = layout;
        c.batch = layout == 0 ? 5 : 3;
        c.hidden = layout == 0 ? 37 : 9;
        c.init_h = c.init_c = layout == 0;
        c.bias = std::string(dir) != "reverse";
        // A full, a shorter, an empty and a one-step entry.
        if (layout == 0) c.lens = {5, 2, 0, 1, 5};
        c.peep = op == OpType::kLSTM && layout == 0;
        c.lbr = op == OpType::kGRU && std::string(dir) == "bidirectional";
        out.push_back(c);
      }
    }
  }
  return out;
}

TEST(OpenClRecurrentTest, ExactActivationsMatchBitForBit) {
  uint32_t seed = 1;
  for (DataType dt : kTypes) {
    for (Case c : Cases()) {
      c.dt = dt;
      c.acts = ExactActs(c.op, c.dirs());
      Check(c, seed += 10);
    }
  }
}

TEST(OpenClRecurrentTest, DefaultActivationsWithinTheBound) {
  uint32_t seed = 1000;
  for (DataType dt : kTypes) {
    for (Case c : Cases()) {
      c.dt = dt;
      Check(c, seed += 10);
    }
  }
}

TEST(OpenClRecurrentTest, ClipInputForgetAndResetGate) {
  uint32_t seed = 2000;
  for (DataType dt : kTypes) {
    for (bool exact : {false, true}) {
      // GRU both ways of the reset gate, clipped; batch 1.
      for (bool lbr : {false, true}) {
        Case c;
        c.op = OpType::kGRU;
        c.dt = dt;
        c.lbr = lbr;
        c.batch = 1, c.hidden = 20, c.clip = 0.5f;
        c.init_h = true;
        if (exact) c.acts = ExactActs(c.op, 1);
        Check(c, seed += 10);
      }
      // LSTM with input_forget, peepholes and clip; a hidden size below 16.
      Case lf;
      lf.dt = dt;
      lf.input_forget = true;
      lf.batch = 2, lf.hidden = 13, lf.clip = 0.8f;
      lf.peep = lf.init_c = true;
      if (exact) lf.acts = ExactActs(lf.op, 1);
      Check(lf, seed += 10);
    }
  }
}

TEST(OpenClRecurrentTest, EveryActivationWithAlphaAndBeta) {
  // Each as RNN's f (and LSTM's g and h), in both directions with different parameters.
  const std::vector<std::string> names = {
      "Relu",       "Tanh",        "Sigmoid", "Affine",   "LeakyRelu", "ThresholdedRelu",
      "ScaledTanh", "HardSigmoid", "Elu",     "Softsign", "Softplus"};
  uint32_t seed = 3000;
  for (DataType dt : kTypes) {
    for (const std::string& n : names) {
      Case c;
      c.op = OpType::kRNN;
      c.dt = dt;
      c.direction = "bidirectional";
      c.seq = 4, c.batch = 2, c.hidden = 17;
      c.init_h = true;
      c.acts = {n, n};
      c.alphas = {0.7f, 0.3f};
      c.betas = {0.4f, 0.9f};
      Check(c, seed += 10);
      // ThresholdedRelu steps at alpha: it may be g only at the first step, where g's input is
      // the same on both sides (h's input, Ct, is not: it follows the sigmoid gates).
      const bool step = n == "ThresholdedRelu";
      Case l;
      l.dt = dt;
      l.seq = step ? 1 : 3, l.batch = 2, l.hidden = 11;
      l.acts = {"Sigmoid", n, step ? "Relu" : n};
      l.alphas = {0.6f, 0.2f};
      l.betas = {0.3f, 0.8f};
      Check(l, seed += 10);
    }
  }
}

TEST(OpenClRecurrentTest, SileroVadShape) {
  // Silero VAD's LSTM: batch 1, input and hidden 128, one step per call from the state of the
  // previous one; also a few steps. Weights as graph constants (R transposed once, reused by the
  // second run) and as plain inputs.
  uint32_t seed = 4000;
  for (DataType dt : kTypes) {
    for (int64_t seq : {1, 8}) {
      for (bool constants : {true, false}) {
        Case c;
        c.dt = dt;
        c.seq = seq, c.batch = 1, c.input = 128, c.hidden = 128;
        c.init_h = c.init_c = true;
        if (constants) c.constants = {1, 2, 3};
        Check(c, seed += 10);
      }
    }
  }
}

TEST(OpenClRecurrentTest, LongSequencesInSeveralChunks) {
  // 70 steps of 64 entries in two directions: the projection scratch holds fewer steps, so the
  // state carries over between launches (local memory saved to global and back). Exact
  // activations: bit for bit over every step. Lengths as a graph constant and read back.
  uint32_t seed = 5000;
  for (OpType op : {OpType::kLSTM, OpType::kGRU}) {
    for (bool constant : {true, false}) {
      Case c;
      c.op = op;
      c.direction = "bidirectional";
      c.seq = 70, c.batch = 64, c.input = 8, c.hidden = op == OpType::kLSTM ? 64 : 100;
      c.init_h = c.init_c = c.peep = true;
      c.lens.resize(c.batch);
      for (int64_t b = 0; b < c.batch; ++b) c.lens[b] = static_cast<int32_t>((b * 37) % 71);
      c.lens_constant = constant;
      c.acts = ExactActs(op, 2);
      Check(c, seed += 10);
    }
  }
}

TEST(OpenClRecurrentTest, LargeHiddenKeepsTheStateInGlobalMemory) {
  // 4 * hidden floats over the local-memory limit (4096 floats).
  uint32_t seed = 6000;
  for (OpType op : {OpType::kLSTM, OpType::kGRU, OpType::kRNN}) {
    for (bool exact : {true, false}) {
      Case c;
      c.op = op;
      c.direction = "bidirectional";
      c.seq = 3, c.batch = 2, c.input = 5, c.hidden = 1030;
      c.init_h = c.init_c = true;
      c.lens = {3, 2};
      if (exact) c.acts = ExactActs(op, 2);
      Check(c, seed += 10);
    }
  }
}

TEST(OpenClRecurrentTest, OutputSubsetsAndEmptyDims) {
  uint32_t seed = 7000;
  for (DataType dt : kTypes) {
    // Y only; Y and Y_h.
    for (int outputs : {1, 2}) {
      Case c;
      c.dt = dt;
      c.outputs = outputs;
      c.lens = {5, 3, 4};
      Check(c, seed += 10);
    }
    // No steps: Y empty, Y_h and Y_c zero; every length 0; no batch; no inputs per step.
    Case empty;
    empty.dt = dt;
    empty.seq = 0;
    empty.init_h = empty.init_c = true;
    Check(empty, seed += 10);
    Case zero = empty;
    zero.seq = 4;
    zero.lens = {0, 0, 0};
    Check(zero, seed += 10);
    Case nobatch;
    nobatch.dt = dt;
    nobatch.batch = 0;
    Check(nobatch, seed += 10);
    Case noinput;
    noinput.op = OpType::kGRU;
    noinput.dt = dt;
    noinput.input = 0;
    Check(noinput, seed += 10);
  }
}

TEST(OpenClRecurrentTest, ErrorsAsTheReference) {
  Case c;
  Inputs in = MakeInputs(c, 8000);
  NodeSpec spec = MakeSpec(c, in);
  spec.inputs.resize(5);
  spec.inputs[4] = MakeTensor<int32_t>({3}, {5, 6, 1}, DataType::kI32);
  ExpectSameError(spec, absl::StatusCode::kInvalidArgument, "sequence_lens[1] = 6");
  spec = MakeSpec(c, in);
  spec.attrs.emplace_back("activations", StringsAttr({"Sigmoid", "Tanh", "Cosh"}));
  ExpectSameError(spec, absl::StatusCode::kInvalidArgument, "unknown activation function 'Cosh'");
  spec = MakeSpec(c, in);
  spec.inputs[2] = MakeStored(DataType::kF32, {1, 4 * 37, 36}, std::vector<float>(4 * 37 * 36));
  ExpectSameError(spec, absl::StatusCode::kInvalidArgument, "R has shape");
}

TEST(OpenClRecurrentTest, SupportsRefusesWhatTheDeviceDoesNotRun) {
  // B of another dtype than X's: `supports` refuses it (the registry then finds no OpenCL
  // kernel), so placement keeps it on the CPU, where the reference reports the mismatch.
  Case c;
  Inputs in = MakeInputs(c, 9000);
  NodeSpec spec = MakeSpec(c, in);
  spec.inputs[3] = MakeStored(DataType::kF16, {1, 2 * 4 * 37}, in.b);
  spec.cpu_features = 0;
  ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "B is float16");
  spec.cpu_features.reset();
  spec.opencl = true;
  ExpectNodeError(spec, absl::StatusCode::kUnimplemented, "on OpenCL");

  // LSTMQuantizedR (an int8 R with its scale and zero point) has no OpenCL kernel.
  const int64_t h = 4;
  NodeSpec q =
      Spec(OpType::kLSTMQuantizedR, {{"hidden_size", IntAttr(h)}},
           {RandomStored(DataType::kF32, {2, 1, 3}, 1),
            RandomStored(DataType::kF32, {1, 4 * h, 3}, 2),
            MakeTensor<int8_t>({1, 4 * h, h}, std::vector<int8_t>(4 * h * h, 3), DataType::kI8),
            {},
            {},
            {},
            {},
            {},
            MakeFloat({1, 4 * h}, std::vector<float>(4 * h, 0.05f)),
            MakeTensor<int8_t>({1, 4 * h}, std::vector<int8_t>(4 * h, 1), DataType::kI8)});
  q.since_version = 22;
  q.num_outputs = 3;
  ExpectRefused(q);
}

}  // namespace
}  // namespace kiln::testing
