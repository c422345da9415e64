// LSTM, GRU and RNN: the reference kernel against hand-computed values and against a
// double-precision oracle written from the operator docs' equations (every activation, clip,
// peepholes, input_forget, linear_before_reset, layouts, directions, sequence_lens, initial
// states), and the AVX-512 kernel against the reference kernel across directions, layouts, sequence
// lengths, batch sizes, odd hidden sizes and fp32 / fp16 / bf16; plus the vector sigmoid and tanh
// it uses (kernels/cpu/avx512/math.h).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/common/cpu_features.h"
#include "engine/common/half.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/avx512/math.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/registry.h"
#include "gmock/gmock.h"
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

// ---------------------------------------------------------------- a configuration and its data

struct Config {
  OpType op = OpType::kLSTM;
  std::string direction = "forward";
  int64_t seq = 3, batch = 2, input = 5, hidden = 4;
  int layout = 0;
  DataType dtype = DataType::kF32;
  bool bias = true, init_h = false, init_c = false, peepholes = false, hidden_attr = true;
  std::vector<int32_t> lens;  // sequence_lens when not empty
  std::vector<std::string> acts;
  std::vector<float> alphas, betas;
  float clip = 0;  // 0: none
  bool input_forget = false;
  bool linear_before_reset = false;

  int dirs() const { return direction == "bidirectional" ? 2 : 1; }
  int gates() const { return op == OpType::kLSTM ? 4 : op == OpType::kGRU ? 3 : 1; }
};

// Input values as floats (already rounded to the config's dtype), in ONNX layout.
struct Data {
  std::vector<float> x, w, r, b, h0, c0, p;
};

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

// Deterministic values: inputs and states in [-1, 1], weights in [-s, s] with s = 1.5 /
// sqrt(input + hidden), so the gates' sums stay of order 1 (neither saturated nor vanishing).
Data MakeData(const Config& c, unsigned seed) {
  std::mt19937 gen(seed);
  auto fill = [&](int64_t n, float scale) {
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = RoundTo(c.dtype, dist(gen));
    return v;
  };
  const int64_t d = c.dirs(), gh = c.gates() * c.hidden;
  const float s = 1.5f / std::sqrt(static_cast<float>(c.input + c.hidden));
  Data data;
  data.x = fill(c.seq * c.batch * c.input, 1.0f);
  data.w = fill(d * gh * c.input, s);
  data.r = fill(d * gh * c.hidden, s);
  if (c.bias) data.b = fill(d * 2 * gh, 0.5f);
  if (c.init_h) data.h0 = fill(d * c.batch * c.hidden, 1.0f);
  if (c.init_c) data.c0 = fill(d * c.batch * c.hidden, 1.0f);
  if (c.peepholes) data.p = fill(d * 3 * c.hidden, 0.5f);
  return data;
}

ir::Attribute StringsAttr(std::vector<std::string> v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kStrings;
  a.strings = std::move(v);
  return a;
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

// A context whose outputs start as NaN bit patterns (a kernel must write every element), and
// may be left unrequested.
class Context final : public kernels::KernelContext {
 public:
  Context(const std::vector<ir::Tensor>& in, int outputs, std::vector<bool> requested)
      : in_(in), out_(outputs), requested_(std::move(requested)) {}
  int num_inputs() const override { return static_cast<int>(in_.size()); }
  const ir::Tensor* input(int i) const override {
    return i < static_cast<int>(in_.size()) && in_[i].defined() ? &in_[i] : nullptr;
  }
  int num_outputs() const override { return static_cast<int>(out_.size()); }
  absl::StatusOr<ir::Tensor*> output(int i, DataType dtype, std::vector<int64_t> dims) override {
    if (!output_requested(i)) return absl::InternalError("output not requested");
    ASSIGN_OR_RETURN(out_[i], ir::Tensor::Allocate(dtype, std::move(dims)));
    std::memset(out_[i].raw_data(), 0xff, out_[i].byte_size());
    return &out_[i];
  }
  bool output_requested(int i) const override {
    return i < static_cast<int>(requested_.size()) ? requested_[i] : true;
  }
  std::vector<ir::Tensor>& outputs() { return out_; }

 private:
  const std::vector<ir::Tensor>& in_;
  std::vector<ir::Tensor> out_;
  std::vector<bool> requested_;
};

struct RunOptions {
  uint64_t features = 0;  // Registry::Find's CPU features: 0 picks the reference kernel
  bool constant_weights = true;
  int runs = 1;
  std::vector<bool> requested = {};  // outputs asked for (default: all)
};

struct RunResult {
  std::vector<ir::Tensor> out;
  kernels::Isa isa = kernels::Isa::kRef;
};

std::vector<ir::Tensor> Inputs(const Config& c, const Data& d) {
  const int64_t dirs = c.dirs(), gh = c.gates() * c.hidden;
  const std::vector<int64_t> state = c.layout == 0 ? std::vector<int64_t>{dirs, c.batch, c.hidden}
                                                   : std::vector<int64_t>{c.batch, dirs, c.hidden};
  std::vector<ir::Tensor> in(c.op == OpType::kLSTM ? 8 : 6);
  in[0] = Make(c.dtype,
               c.layout == 0 ? std::vector<int64_t>{c.seq, c.batch, c.input}
                             : std::vector<int64_t>{c.batch, c.seq, c.input},
               d.x);
  in[1] = Make(c.dtype, {dirs, gh, c.input}, d.w);
  in[2] = Make(c.dtype, {dirs, gh, c.hidden}, d.r);
  if (c.bias) in[3] = Make(c.dtype, {dirs, 2 * gh}, d.b);
  if (!c.lens.empty()) in[4] = MakeTensor<int32_t>({c.batch}, c.lens, DataType::kI32);
  if (c.init_h) in[5] = Make(c.dtype, state, d.h0);
  if (c.op == OpType::kLSTM) {
    if (c.init_c) in[6] = Make(c.dtype, state, d.c0);
    if (c.peepholes) in[7] = Make(c.dtype, {dirs, 3 * c.hidden}, d.p);
  }
  while (!in.empty() && !in.back().defined()) in.pop_back();
  return in;
}

void SetAttrs(const Config& c, ir::Node* n) {
  n->attrs["direction"] = StringAttr(c.direction);
  if (c.hidden_attr) n->attrs["hidden_size"] = IntAttr(c.hidden);
  if (c.layout != 0) n->attrs["layout"] = IntAttr(c.layout);
  if (!c.acts.empty()) n->attrs["activations"] = StringsAttr(c.acts);
  if (!c.alphas.empty()) n->attrs["activation_alpha"] = FloatsAttr(c.alphas);
  if (!c.betas.empty()) n->attrs["activation_beta"] = FloatsAttr(c.betas);
  if (c.clip > 0) n->attrs["clip"] = FloatAttr(c.clip);
  if (c.input_forget) n->attrs["input_forget"] = IntAttr(1);
  if (c.linear_before_reset) n->attrs["linear_before_reset"] = IntAttr(1);
}

absl::StatusOr<RunResult> RunRecurrent(const Config& c, const Data& d, const RunOptions& o) {
  const std::vector<ir::Tensor> in = Inputs(c, d);
  ir::Graph g;
  ir::Node* n = g.AddNode(c.op, "test_node");
  n->since_version = 22;
  SetAttrs(c, n);
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].defined()) {
      n->inputs.push_back(nullptr);
      continue;
    }
    ASSIGN_OR_RETURN(ir::Value * v, g.AddValue(absl::StrCat("in", i)));
    v->dtype = in[i].dtype();
    v->shape = ir::Shape::Of(in[i].dims());
    if (o.constant_weights && (i == 1 || i == 2)) v->constant = in[i];
    n->inputs.push_back(v);
  }
  const int outputs = c.op == OpType::kLSTM ? 3 : 2;
  for (int i = 0; i < outputs; ++i) {
    ASSIGN_OR_RETURN(ir::Value * v, g.AddValue(absl::StrCat("out", i)));
    v->dtype = c.dtype;
    n->outputs.push_back(v);
  }
  g.RebuildEdges();
  ASSIGN_OR_RETURN(const kernels::KernelDef* def,
                   kernels::Registry::Default().Find(*n, o.features));
  ASSIGN_OR_RETURN(auto kernel, def->factory(*n));
  RunResult r;
  r.isa = def->isa;
  for (int run = 0; run < o.runs; ++run) {
    Context ctx(in, outputs, o.requested);
    RETURN_IF_ERROR(kernel->Run(ctx));
    r.out = std::move(ctx.outputs());
  }
  return r;
}

// ---------------------------------------------------------------- the oracle

// One activation in double, from the operator docs' formulas, with the defaults of the ONNX ops
// of the same name for the alpha / beta values not given.
struct OracleAct {
  std::string name;
  double alpha = 0, beta = 0;
  double operator()(double x) const {
    if (name == "Relu") return std::max(0.0, x);
    if (name == "Tanh") return std::tanh(x);
    if (name == "Sigmoid") return 1.0 / (1.0 + std::exp(-x));
    if (name == "Affine") return alpha * x + beta;
    if (name == "LeakyRelu") return x >= 0 ? x : alpha * x;
    if (name == "ThresholdedRelu") return x >= alpha ? x : 0.0;
    if (name == "ScaledTanh") return alpha * std::tanh(beta * x);
    if (name == "HardSigmoid") return std::min(std::max(alpha * x + beta, 0.0), 1.0);
    if (name == "Elu") return x >= 0 ? x : alpha * (std::exp(x) - 1.0);
    if (name == "Softsign") return x / (1.0 + std::fabs(x));
    if (name == "Softplus") return std::log(1.0 + std::exp(x));
    ADD_FAILURE() << "no activation " << name;
    return 0;
  }
};

std::vector<OracleAct> OracleActs(const Config& c) {
  std::vector<std::string> names = c.acts;
  const int per = c.op == OpType::kLSTM ? 3 : c.op == OpType::kGRU ? 2 : 1;
  if (names.empty()) {
    for (int d = 0; d < c.dirs(); ++d) {
      if (c.op == OpType::kRNN) names.push_back("Tanh");
      if (c.op != OpType::kRNN) names.insert(names.end(), {"Sigmoid", "Tanh"});
      if (c.op == OpType::kLSTM) names.push_back("Tanh");
    }
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(per * c.dirs()));
  // Alphas and betas go, in order, to the activations that take them.
  size_t ia = 0, ib = 0;
  std::vector<OracleAct> out;
  for (std::string nm : names) {
    // The docs' spelling (names match ignoring case).
    for (const char* known : {"Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu",
                              "ScaledTanh", "HardSigmoid", "Elu", "Softsign", "Softplus"}) {
      if (absl::EqualsIgnoreCase(nm, known)) nm = known;
    }
    OracleAct a{nm};
    const bool takes_alpha = nm == "Affine" || nm == "LeakyRelu" || nm == "ThresholdedRelu" ||
                             nm == "ScaledTanh" || nm == "HardSigmoid" || nm == "Elu";
    const bool takes_beta = nm == "Affine" || nm == "ScaledTanh" || nm == "HardSigmoid";
    const double da = nm == "LeakyRelu" ? 0.01 : nm == "HardSigmoid" ? 0.2 : 1.0;
    const double db = nm == "HardSigmoid" ? 0.5 : nm == "ScaledTanh" ? 1.0 : 0.0;
    if (takes_alpha) a.alpha = ia < c.alphas.size() ? c.alphas[ia++] : da;
    if (takes_beta) a.beta = ib < c.betas.size() ? c.betas[ib++] : db;
    out.push_back(a);
  }
  return out;
}

struct Expected {
  std::vector<double> y, y_h, y_c;
};

// Y, Y_h and Y_c in double, one time step at a time, straight from the equations.
Expected Oracle(const Config& c, const Data& data) {
  const int64_t S = c.seq, B = c.batch, I = c.input, H = c.hidden, D = c.dirs();
  const int G = c.gates();
  const std::vector<OracleAct> acts = OracleActs(c);
  const int per = static_cast<int>(acts.size()) / D;
  auto x_at = [&](int64_t t, int64_t b, int64_t k) {
    return static_cast<double>(data.x[(c.layout == 0 ? t * B + b : b * S + t) * I + k]);
  };
  auto y_index = [&](int64_t t, int64_t d, int64_t b) {
    return (c.layout == 0 ? (t * D + d) * B + b : (b * S + t) * D + d) * H;
  };
  auto state_index = [&](int64_t d, int64_t b) {
    return (c.layout == 0 ? d * B + b : b * D + d) * H;
  };
  auto clip = [&](double v) { return c.clip > 0 ? std::clamp<double>(v, -c.clip, c.clip) : v; };
  Expected e;
  e.y.assign(S * D * B * H, 0.0);
  e.y_h.assign(D * B * H, 0.0);
  e.y_c.assign(D * B * H, 0.0);
  for (int64_t d = 0; d < D; ++d) {
    const bool rev = c.direction == "reverse" || d == 1;
    const OracleAct& f = acts[d * per];
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = c.lens.empty() ? S : c.lens[b];
      std::vector<double> h(H, 0.0), cs(H, 0.0);
      for (int64_t u = 0; u < H; ++u) {
        if (c.init_h) h[u] = data.h0[state_index(d, b) + u];
        if (c.init_c) cs[u] = data.c0[state_index(d, b) + u];
      }
      // Gate `g`, unit `u`: Xt W^T + Wb and state . R^T + Rb, as separate terms.
      auto xw = [&](int64_t t, int g, int64_t u) {
        double v = c.bias ? data.b[d * 2 * G * H + g * H + u] : 0.0;
        for (int64_t k = 0; k < I; ++k) v += x_at(t, b, k) * data.w[((d * G + g) * H + u) * I + k];
        return v;
      };
      auto hr = [&](const std::vector<double>& state, int g, int64_t u) {
        double v = c.bias ? data.b[d * 2 * G * H + (G + g) * H + u] : 0.0;
        for (int64_t k = 0; k < H; ++k) v += state[k] * data.r[((d * G + g) * H + u) * H + k];
        return v;
      };
      for (int64_t s = 0; s < len; ++s) {
        const int64_t t = rev ? len - 1 - s : s;
        std::vector<double> hn(H);
        if (c.op == OpType::kRNN) {
          for (int64_t u = 0; u < H; ++u) hn[u] = f(clip(xw(t, 0, u) + hr(h, 0, u)));
        } else if (c.op == OpType::kGRU) {
          const OracleAct& g = acts[d * per + 1];
          std::vector<double> z(H), r(H), rh(H);
          for (int64_t u = 0; u < H; ++u) {
            z[u] = f(clip(xw(t, 0, u) + hr(h, 0, u)));
            r[u] = f(clip(xw(t, 1, u) + hr(h, 1, u)));
            rh[u] = r[u] * h[u];
          }
          for (int64_t u = 0; u < H; ++u) {
            const double hh = c.linear_before_reset ? g(clip(xw(t, 2, u) + r[u] * hr(h, 2, u)))
                                                    : g(clip(xw(t, 2, u) + hr(rh, 2, u)));
            hn[u] = (1 - z[u]) * hh + z[u] * h[u];
          }
        } else {
          const OracleAct& g = acts[d * per + 1];
          const OracleAct& ha = acts[d * per + 2];
          auto peep = [&](int k, int64_t u) {
            return c.peepholes ? static_cast<double>(data.p[d * 3 * H + k * H + u]) : 0.0;
          };
          for (int64_t u = 0; u < H; ++u) {
            // Gate rows i, o, f, c; peepholes i, o, f.
            const double it = f(clip(xw(t, 0, u) + hr(h, 0, u) + peep(0, u) * cs[u]));
            const double ft =
                c.input_forget ? 1 - it : f(clip(xw(t, 2, u) + hr(h, 2, u) + peep(2, u) * cs[u]));
            const double ct = g(clip(xw(t, 3, u) + hr(h, 3, u)));
            const double cn = ft * cs[u] + it * ct;
            const double ot = f(clip(xw(t, 1, u) + hr(h, 1, u) + peep(1, u) * cn));
            hn[u] = ot * ha(cn);
            cs[u] = cn;  // read by nothing else this step: hr uses h only
          }
        }
        h = hn;
        for (int64_t u = 0; u < H; ++u) e.y[y_index(t, d, b) + u] = h[u];
      }
      for (int64_t u = 0; u < H && len > 0; ++u) {
        e.y_h[state_index(d, b) + u] = h[u];
        e.y_c[state_index(d, b) + u] = cs[u];
      }
    }
  }
  return e;
}

// One unit in the last place of `dtype` at magnitude |v| (fp32's for kF32).
double Ulp(DataType dtype, double v) {
  const int bits = dtype == DataType::kF16 ? 10 : dtype == DataType::kBF16 ? 7 : 23;
  const double m = std::max(std::fabs(v), dtype == DataType::kF16 ? 6.1e-5 : 1.2e-38);
  return std::ldexp(1.0, std::ilogb(m) - bits);
}

void ExpectClose(const ir::Tensor& got, const std::vector<double>& want, DataType dtype,
                 double atol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.dtype(), dtype) << what;
  const std::vector<float> g = ToFloats(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    // The output is rounded once to its dtype: half an ulp there, on top of `atol`.
    const double tol = atol + (dtype == DataType::kF32 ? 0.0 : Ulp(dtype, want[i]));
    if (!(std::fabs(g[i] - want[i]) <= tol)) {
      ++bad;
      ADD_FAILURE() << what << " element " << i << ": " << g[i] << ", want " << want[i]
                    << " (tolerance " << tol << ")";
    }
  }
}

std::string Describe(const Config& c) {
  return absl::StrCat(ir::OpName(c.op), " ", c.direction, " seq ", c.seq, " batch ", c.batch,
                      " input ", c.input, " hidden ", c.hidden, " layout ", c.layout, " ",
                      DataTypeOnnxName(c.dtype), c.lens.empty() ? "" : " lens",
                      c.peepholes ? " peepholes" : "", c.init_h ? " h0" : "", c.init_c ? " c0" : "",
                      c.clip > 0 ? " clip" : "", c.input_forget ? " input_forget" : "",
                      c.linear_before_reset ? " linear_before_reset" : "",
                      c.acts.empty() ? "" : absl::StrCat(" ", c.acts[0], "..."));
}

// The reference kernel against the oracle. fp32: each gate sums at most input + hidden <= 12
// products of values of order 1 / sqrt(input + hidden) and 1, so its fp32 rounding error is a
// few 2^-24 (about 1e-7: the largest difference measured over these tests is 1.3e-7); the C
// library's exp and tanh add under an ulp, and no activation here amplifies an error by more
// than its slope (at most 1.2, ScaledTanh's alpha * beta), over at most 4 steps: 1e-5 absolute
// leaves a wide margin and still catches any wrong term (whose effect is of order 0.1). fp16 /
// bf16: the same fp32 arithmetic, then one rounding of each output (ExpectClose adds an ulp of
// the dtype).
void ExpectReferenceMatchesOracle(const Config& c, unsigned seed) {
  SCOPED_TRACE(Describe(c));
  const Data d = MakeData(c, seed);
  absl::StatusOr<RunResult> r = RunRecurrent(c, d, {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->isa, kernels::Isa::kRef);
  const Expected e = Oracle(c, d);
  ExpectClose(r->out[0], e.y, c.dtype, 1e-5, "Y");
  ExpectClose(r->out[1], e.y_h, c.dtype, 1e-5, "Y_h");
  if (c.op == OpType::kLSTM) ExpectClose(r->out[2], e.y_c, c.dtype, 1e-5, "Y_c");
}

// ---------------------------------------------------------------- hand-computed values

TEST(RecurrentReference, RnnOneUnitByHand) {
  // H1 = tanh(0.5 x1 - 1 * H0 + 0.1 + 0.2), H2 likewise from H1; H0 = 0.3, x = 1, 2.
  Config c;
  c.op = OpType::kRNN;
  c.seq = 2, c.batch = 1, c.input = 1, c.hidden = 1;
  c.init_h = true;
  Data d;
  d.x = {1, 2};
  d.w = {0.5f};
  d.r = {-1};
  d.b = {0.1f, 0.2f};
  d.h0 = {0.3f};
  absl::StatusOr<RunResult> r = RunRecurrent(c, d, {});
  ASSERT_TRUE(r.ok()) << r.status();
  const float h1 = std::tanh(0.5f * 1 - 1 * 0.3f + (0.1f + 0.2f));
  const float h2 = std::tanh(0.5f * 2 - 1 * h1 + (0.1f + 0.2f));
  // Y [2, 1, 1, 1]; fp32 sums of 2 terms in another order: within a few ulp.
  EXPECT_THAT(ToFloats(r->out[0]), ::testing::ElementsAre(::testing::FloatNear(h1, 1e-6f),
                                                          ::testing::FloatNear(h2, 1e-6f)));
  EXPECT_THAT(ToFloats(r->out[1]), ::testing::ElementsAre(::testing::FloatNear(h2, 1e-6f)));
}

TEST(RecurrentReference, LstmOneUnitWithPeepholesByHand) {
  Config c;
  c.op = OpType::kLSTM;
  c.seq = 1, c.batch = 1, c.input = 1, c.hidden = 1;
  c.bias = false;
  c.init_h = c.init_c = c.peepholes = true;
  Data d;
  d.x = {2};
  d.w = {0.1f, 0.2f, 0.3f, 0.4f};    // i, o, f, c
  d.r = {-0.1f, 0.5f, 0.25f, 1.0f};  // i, o, f, c
  d.h0 = {0.5f};
  d.c0 = {-1};
  d.p = {0.5f, 2.0f, -1.0f};  // i, o, f
  absl::StatusOr<RunResult> r = RunRecurrent(c, d, {});
  ASSERT_TRUE(r.ok()) << r.status();
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  const double i = sig(0.1 * 2 - 0.1 * 0.5 + 0.5 * -1);
  const double f = sig(0.3 * 2 + 0.25 * 0.5 + -1.0 * -1);
  const double g = std::tanh(0.4 * 2 + 1.0 * 0.5);
  const double cn = f * -1 + i * g;
  const double o = sig(0.2 * 2 + 0.5 * 0.5 + 2.0 * cn);
  const double h = o * std::tanh(cn);
  // fp32 arithmetic on values of order 1: a few ulp.
  EXPECT_NEAR(ToFloats(r->out[0])[0], h, 1e-6);
  EXPECT_NEAR(ToFloats(r->out[1])[0], h, 1e-6);
  EXPECT_NEAR(ToFloats(r->out[2])[0], cn, 1e-6);
}

TEST(RecurrentReference, SequenceLensZeroPastTheEndAndLastValidState) {
  Config c;
  c.op = OpType::kGRU;
  c.direction = "bidirectional";
  c.seq = 4, c.batch = 3;
  c.lens = {4, 2, 0};
  c.init_h = true;
  const Data d = MakeData(c, 7);
  absl::StatusOr<RunResult> r = RunRecurrent(c, d, {});
  ASSERT_TRUE(r.ok()) << r.status();
  const std::vector<float> y = ToFloats(r->out[0]), yh = ToFloats(r->out[1]);
  const int64_t H = c.hidden, B = c.batch;
  for (int dir = 0; dir < 2; ++dir) {
    for (int64_t t = 0; t < c.seq; ++t) {
      for (int64_t u = 0; u < H; ++u) {
        // Entry 1 (length 2) has Y zero from t = 2 on, entry 2 (length 0) everywhere.
        if (t >= 2) {
          EXPECT_EQ(y[((t * 2 + dir) * B + 1) * H + u], 0.0f);
        }
        EXPECT_EQ(y[((t * 2 + dir) * B + 2) * H + u], 0.0f);
      }
    }
    for (int64_t u = 0; u < H; ++u) {
      // Forward: the state after step 1 (t = 1); reverse: after its last step, at t = 0.
      const int64_t last_t = dir == 0 ? 1 : 0;
      EXPECT_EQ(yh[(dir * B + 1) * H + u], y[((last_t * 2 + dir) * B + 1) * H + u]);
      EXPECT_EQ(yh[(dir * B + 2) * H + u], 0.0f);  // an empty sequence: zero, as ORT gives
    }
  }
}

// ---------------------------------------------------------------- the reference kernel vs the
// oracle

std::vector<Config> OracleConfigs() {
  std::vector<Config> out;
  for (OpType op : {OpType::kRNN, OpType::kGRU, OpType::kLSTM}) {
    for (const char* dir : {"forward", "reverse", "bidirectional"}) {
      for (int layout : {0, 1}) {
        Config c;
        c.op = op;
        c.direction = dir;
        c.layout = layout;
        c.seq = 4, c.batch = 3, c.input = 5, c.hidden = 6;
        c.init_h = c.init_c = true;
        c.lens = {4, 1, 3};
        c.peepholes = op == OpType::kLSTM && layout == 1;
        c.linear_before_reset = op == OpType::kGRU && layout == 1;
        out.push_back(c);
      }
    }
  }
  return out;
}

TEST(RecurrentReference, MatchesOracleAcrossCellsDirectionsLayouts) {
  unsigned seed = 100;
  for (const Config& c : OracleConfigs()) ExpectReferenceMatchesOracle(c, seed++);
}

TEST(RecurrentReference, MatchesOracleInHalfPrecisions) {
  unsigned seed = 200;
  for (DataType t : {DataType::kF16, DataType::kBF16}) {
    for (Config c : OracleConfigs()) {
      c.dtype = t;
      ExpectReferenceMatchesOracle(c, seed++);
    }
  }
}

TEST(RecurrentReference, EveryActivationWithAlphaBeta) {
  // Each listed function in every position, alphas / betas consumed in order by the activations
  // that take them (LeakyRelu 0.2; HardSigmoid 0.3 / 0.4; ...); some left to their defaults.
  const std::vector<std::vector<std::string>> lstm_sets = {
      {"Relu", "Tanh", "Sigmoid"},          {"Affine", "LeakyRelu", "ThresholdedRelu"},
      {"ScaledTanh", "HardSigmoid", "Elu"}, {"Softsign", "Softplus", "HardSigmoid"},
      {"HardSigmoid", "Softsign", "Elu"},
  };
  unsigned seed = 300;
  for (const auto& set : lstm_sets) {
    Config c;
    c.op = OpType::kLSTM;
    c.acts = set;
    c.alphas = {0.7f, 0.2f};  // fewer than the activations that take one: the rest default
    c.betas = {0.3f};
    c.init_h = c.init_c = true;
    ExpectReferenceMatchesOracle(c, seed++);
  }
  Config gru;
  gru.op = OpType::kGRU;
  gru.direction = "bidirectional";
  gru.acts = {"HardSigmoid", "Elu", "Sigmoid", "LeakyRelu"};
  gru.alphas = {0.25f, 0.5f, 0.1f};
  gru.betas = {0.45f};
  ExpectReferenceMatchesOracle(gru, seed++);
  Config rnn;
  rnn.op = OpType::kRNN;
  rnn.direction = "bidirectional";
  rnn.acts = {"Relu", "ScaledTanh"};
  rnn.alphas = {1.2f};
  rnn.betas = {0.8f};
  ExpectReferenceMatchesOracle(rnn, seed++);
  // Names are matched ignoring case, as ONNX Runtime does.
  Config lower;
  lower.op = OpType::kRNN;
  lower.acts = {"relu"};
  ExpectReferenceMatchesOracle(lower, seed++);
}

TEST(RecurrentReference, ClipInputForgetNoBiasHiddenFromR) {
  unsigned seed = 400;
  for (OpType op : {OpType::kRNN, OpType::kGRU, OpType::kLSTM}) {
    Config c;
    c.op = op;
    c.clip = 0.3f;  // small enough that many gate inputs are clipped
    c.input_forget = op == OpType::kLSTM;
    c.bias = false;
    c.hidden_attr = false;  // hidden from R's dims
    c.init_h = true;
    ExpectReferenceMatchesOracle(c, seed++);
  }
}

TEST(RecurrentReference, DoubleComputesInDouble) {
  Config c;
  c.op = OpType::kLSTM;
  c.dtype = DataType::kF64;
  c.direction = "bidirectional";
  c.init_h = c.init_c = c.peepholes = true;
  const Data d = MakeData(c, 9);
  std::vector<ir::Tensor> in = Inputs(c, d);
  // Inputs() builds float tensors for kF64: rebuild them as double.
  for (ir::Tensor& t : in) {
    if (!t.defined() || t.dtype() != DataType::kF32) continue;
    const std::vector<float> f = ToFloats(t);
    t = MakeTensor<double>(t.dims(), std::vector<double>(f.begin(), f.end()), DataType::kF64);
  }
  NodeSpec spec;
  spec.op = OpType::kLSTM;
  spec.inputs = in;
  spec.num_outputs = 3;
  spec.cpu_features = 0;
  spec.attrs = {{"hidden_size", IntAttr(c.hidden)}, {"direction", StringAttr(c.direction)}};
  std::vector<ir::Tensor> out = RunNodeOk(spec);
  ASSERT_EQ(out.size(), 3u);
  ASSERT_EQ(out[0].dtype(), DataType::kF64);
  const Expected e = Oracle(c, d);
  const double* y = out[0].data<double>();
  // Double arithmetic in both, sums in another order: within 1e-12 of each other.
  for (size_t i = 0; i < e.y.size(); ++i) EXPECT_NEAR(y[i], e.y[i], 1e-12) << i;
}

// ---------------------------------------------------------------- errors

Config SmallLstm() {
  Config c;
  c.seq = 2, c.batch = 1, c.input = 2, c.hidden = 3;
  return c;
}

void ExpectRunError(const Config& c, const std::string& fragment,
                    absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  SCOPED_TRACE(fragment);
  const Data d = MakeData(c, 1);
  for (uint64_t features : {uint64_t{0}, DetectCpuFeatures()}) {
    absl::StatusOr<RunResult> r = RunRecurrent(c, d, {features});
    ASSERT_FALSE(r.ok());
    ExpectStatusError(r.status(), code, fragment);
  }
}

TEST(RecurrentErrors, AttributesAndInputsNameTheNode) {
  Config c = SmallLstm();
  c.direction = "sideways";
  ExpectRunError(c, "direction must be forward, reverse or bidirectional");
  c = SmallLstm();
  c.acts = {"Sigmoid", "Tanh"};
  ExpectRunError(c, "activations has 2 functions, expected 3");
  c = SmallLstm();
  c.direction = "bidirectional";
  c.acts = {"Sigmoid", "Tanh", "Tanh"};
  ExpectRunError(c, "activations has 3 functions, expected 6");
  c = SmallLstm();
  c.acts = {"Sigmoid", "Tanh", "Gelu"};
  ExpectRunError(c, "unknown activation function 'Gelu'");
  c = SmallLstm();
  c.layout = 2;
  ExpectRunError(c, "layout must be 0 or 1");
  {
    const Data d = MakeData(SmallLstm(), 1);
    NodeSpec spec;
    spec.op = OpType::kLSTM;
    spec.inputs = Inputs(SmallLstm(), d);
    spec.num_outputs = 3;
    spec.attrs = {{"hidden_size", IntAttr(3)}, {"clip", FloatAttr(0)}};
    ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "clip must be positive");
    spec.attrs = {{"hidden_size", IntAttr(0)}};
    ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "hidden_size must be positive");
    // hidden_size 2 where W and R hold 3 units.
    spec.attrs = {{"hidden_size", IntAttr(2)}};
    ExpectNodeError(spec, absl::StatusCode::kInvalidArgument,
                    "W has shape [1,12,2], expected [1,8,2]");
    // sequence_lens of the wrong dtype, then out of range.
    spec.attrs = {{"hidden_size", IntAttr(3)}};
    spec.inputs.resize(5);
    spec.inputs[4] = MakeInt64({1}, {2});
    ExpectNodeError(spec, absl::StatusCode::kInvalidArgument,
                    "sequence_lens is int64, expected int32");
    spec.inputs[4] = MakeTensor<int32_t>({1}, {3}, DataType::kI32);
    ExpectNodeError(spec, absl::StatusCode::kInvalidArgument,
                    "sequence_lens[0] = 3 is outside [0, 2]");
    // B of the wrong dtype.
    spec.inputs.resize(4);
    spec.inputs[3] = MakeHalf({1, 24}, std::vector<float>(24, 0));
    ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "B is float16, expected float");
  }
}

// ---------------------------------------------------------------- the AVX-512 kernel

// The fast kernel against the reference one on the same inputs. fp32: both compute in fp32 from
// the same values and differ by the order of each gate's sums (at most input + hidden <= 344
// products whose sum of magnitudes stays of order sqrt(input + hidden): rounding differences of
// a few 2^-24 * 19, about 1e-6) and by SigmoidF32 / TanhF32 against the C library (3 ulp); the
// activations are at most 1-Lipschitz, so the differences do not grow through the few steps
// here: 1e-5 absolute (the largest difference measured over these tests is 5.7e-7, at hidden
// 320), while a wrong term changes outputs by 0.1. fp16 / bf16: the same fp32 differences, then
// each output rounded once to the dtype: the two kernels may round a value next to a rounding
// boundary to neighbours, one ulp of the dtype apart (ExpectClose adds it).
void ExpectFastMatchesReference(const Config& c, unsigned seed, bool constant_weights = true,
                                int runs = 1) {
  SCOPED_TRACE(Describe(c));
  const uint64_t features = c.dtype == DataType::kBF16 ? kAvx512Bf16 : kAvx512;
  const Data d = MakeData(c, seed);
  absl::StatusOr<RunResult> ref = RunRecurrent(c, d, {0, constant_weights, 1});
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<RunResult> fast = RunRecurrent(c, d, {features, constant_weights, runs});
  ASSERT_TRUE(fast.ok()) << fast.status();
  EXPECT_EQ(fast->isa, kernels::Isa::kAvx512);
  const int outputs = c.op == OpType::kLSTM ? 3 : 2;
  const char* names[] = {"Y", "Y_h", "Y_c"};
  for (int i = 0; i < outputs; ++i) {
    ASSERT_EQ(fast->out[i].dims(), ref->out[i].dims()) << names[i];
    const std::vector<float> r = ToFloats(ref->out[i]);
    std::vector<double> want(r.begin(), r.end());
    ExpectClose(fast->out[i], want, c.dtype, 1e-5, names[i]);
  }
}

std::vector<Config> FastConfigs() {
  std::vector<Config> out;
  for (OpType op : {OpType::kRNN, OpType::kGRU, OpType::kLSTM}) {
    for (const char* dir : {"forward", "reverse", "bidirectional"}) {
      for (int layout : {0, 1}) {
        Config c;
        c.op = op;
        c.direction = dir;
        c.layout = layout;
        // Odd hidden sizes: a partial block of 16 units (and below 16: one partial block).
        c.seq = 5, c.batch = layout == 0 ? 5 : 3, c.input = 7, c.hidden = layout == 0 ? 37 : 9;
        c.init_h = c.init_c = layout == 0;
        c.bias = std::string(dir) != "reverse";
        c.lens = layout == 0 ? std::vector<int32_t>{5, 2, 0, 4, 5} : std::vector<int32_t>{};
        c.peepholes = op == OpType::kLSTM && layout == 0;
        out.push_back(c);
      }
    }
  }
  // GRU both ways of the reset gate; LSTM with input_forget; clip; batch 1 (a row chunk of 1).
  for (bool lbr : {false, true}) {
    Config c;
    c.op = OpType::kGRU;
    c.linear_before_reset = lbr;
    c.batch = 1, c.hidden = 20;
    c.clip = 0.5f;
    out.push_back(c);
  }
  Config lf;
  lf.op = OpType::kLSTM;
  lf.input_forget = true;
  lf.batch = 2, lf.hidden = 33;
  lf.clip = 0.8f;
  lf.peepholes = true;
  out.push_back(lf);
  // Relu in every position it is allowed.
  Config relu;
  relu.op = OpType::kLSTM;
  relu.acts = {"Sigmoid", "Relu", "Relu"};
  relu.hidden = 18;
  out.push_back(relu);
  return out;
}

TEST(RecurrentAvx512, MatchesReferenceFp32) {
  SKIP_WITHOUT(kAvx512);
  unsigned seed = 1000;
  for (const Config& c : FastConfigs()) ExpectFastMatchesReference(c, seed++);
}

TEST(RecurrentAvx512, MatchesReferenceFp16) {
  SKIP_WITHOUT(kAvx512);
  unsigned seed = 2000;
  for (Config c : FastConfigs()) {
    c.dtype = DataType::kF16;
    ExpectFastMatchesReference(c, seed++);
  }
}

TEST(RecurrentAvx512, MatchesReferenceBf16) {
  SKIP_WITHOUT(kAvx512Bf16);
  unsigned seed = 3000;
  for (Config c : FastConfigs()) {
    c.dtype = DataType::kBF16;
    ExpectFastMatchesReference(c, seed++);
  }
}

TEST(RecurrentAvx512, WeightsAsInputsAndRepeatedRuns) {
  SKIP_WITHOUT(kAvx512);
  Config c;
  c.op = OpType::kLSTM;
  c.direction = "bidirectional";
  c.hidden = 21;
  c.peepholes = true;
  ExpectFastMatchesReference(c, 11, /*constant_weights=*/false, /*runs=*/2);
  ExpectFastMatchesReference(c, 12, /*constant_weights=*/true, /*runs=*/3);
  c.op = OpType::kGRU;
  ExpectFastMatchesReference(c, 13, /*constant_weights=*/false, /*runs=*/2);
}

TEST(RecurrentAvx512, LargeHiddenRunsOnSeveralThreads) {
  SKIP_WITHOUT(kAvx512);
  // Large enough for the time loop to split the units over threads (kMinStepMacsPerThread):
  // the team's per-step barriers and the block split must give the single thread's numbers.
  const int saved = omp_get_max_threads();
  omp_set_num_threads(4);
  std::vector<Config> big;
  Config lstm;
  lstm.op = OpType::kLSTM;
  lstm.seq = 4, lstm.batch = 1, lstm.input = 24, lstm.hidden = 320;  // a team of 3 threads
  lstm.peepholes = lstm.init_h = lstm.init_c = true;
  big.push_back(lstm);
  lstm.direction = "bidirectional";  // two teams of 2 at once
  big.push_back(lstm);
  for (bool lbr : {false, true}) {
    Config gru;
    gru.op = OpType::kGRU;
    gru.linear_before_reset = lbr;
    gru.seq = 3, gru.batch = 3, gru.input = 10, gru.hidden = 200;
    gru.lens = {3, 1, 2};
    big.push_back(gru);
  }
  Config rnn;
  rnn.op = OpType::kRNN;
  rnn.direction = "reverse";
  rnn.seq = 3, rnn.batch = 6, rnn.input = 8, rnn.hidden = 250;
  rnn.layout = 1;
  big.push_back(rnn);
  unsigned seed = 4000;
  for (const Config& c : big) ExpectFastMatchesReference(c, seed++);
  omp_set_num_threads(saved);
}

TEST(RecurrentAvx512, EmptyDimensions) {
  SKIP_WITHOUT(kAvx512);
  // No steps (Y empty, Y_h zero), no batch, no input features (the projection is the bias).
  unsigned seed = 5000;
  for (OpType op : {OpType::kRNN, OpType::kGRU, OpType::kLSTM}) {
    Config c;
    c.op = op;
    c.init_h = true;
    c.seq = 0;
    ExpectFastMatchesReference(c, seed++);
    c.seq = 3, c.batch = 0;
    ExpectFastMatchesReference(c, seed++);
    c.batch = 2, c.input = 0;
    ExpectFastMatchesReference(c, seed++);
  }
}

TEST(RecurrentAvx512, UnrequestedOutputs) {
  SKIP_WITHOUT(kAvx512);
  Config c;
  c.op = OpType::kLSTM;
  c.hidden = 17;
  const Data d = MakeData(c, 5);
  for (const std::vector<bool>& req : std::vector<std::vector<bool>>{
           {false, true, false}, {true, false, false}, {false, false, true}}) {
    absl::StatusOr<RunResult> fast = RunRecurrent(c, d, {kAvx512, true, 1, req});
    absl::StatusOr<RunResult> ref = RunRecurrent(c, d, {0, true, 1, req});
    ASSERT_TRUE(fast.ok()) << fast.status();
    ASSERT_TRUE(ref.ok()) << ref.status();
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(fast->out[i].defined(), req[i]);
      if (!req[i]) continue;
      const std::vector<float> r = ToFloats(ref->out[i]);
      // As ExpectFastMatchesReference.
      ExpectClose(fast->out[i], std::vector<double>(r.begin(), r.end()), c.dtype, 1e-5, "out");
    }
  }
}

TEST(RecurrentAvx512, RegistryPicksFastOnlyForItsActivations) {
  SKIP_WITHOUT(kAvx512);
  Config c;
  c.op = OpType::kGRU;
  const Data d = MakeData(c, 3);
  absl::StatusOr<RunResult> r = RunRecurrent(c, d, {kAvx512});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->isa, kernels::Isa::kAvx512);
  c.acts = {"HardSigmoid", "Tanh"};  // not in the fast kernel: the reference kernel runs it
  r = RunRecurrent(c, d, {kAvx512});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->isa, kernels::Isa::kRef);
  // bf16 needs AVX512_BF16 on top.
  c.acts.clear();
  c.dtype = DataType::kBF16;
  const Data d16 = MakeData(c, 3);
  r = RunRecurrent(c, d16, {kAvx512});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->isa, kernels::Isa::kRef);
}

// ---------------------------------------------------------------- SigmoidF32, TanhF32

// Distance in representable floats (bit patterns of one sign are ordered).
int64_t UlpDistance(float a, float b) {
  auto key = [](float v) {
    const int32_t i = static_cast<int32_t>(FloatBits(v));
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
  };
  return std::llabs(key(a) - key(b));
}

std::vector<float> MathSample(float lo, float hi) {
  std::vector<float> x;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 977) {
    const float v = BitsToFloat(static_cast<uint32_t>(u));
    if (v >= lo && v <= hi) x.push_back(v);
  }
  for (float v : {0.0f, -0.0f, 0.625f, -0.625f, 0.62499994f, 1e-30f, -1e-30f, 9.0f, -9.0f, 20.0f}) {
    x.push_back(v);
  }
  return x;
}

TEST(RecurrentMath, TanhWithinThreeUlp) {
  SKIP_WITHOUT(kAvx512);
  const std::vector<float> x = MathSample(-20.0f, 20.0f);
  std::vector<float> y(x.size());
  kernels::cpu::avx512::TanhF32(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const float exact = static_cast<float>(std::tanh(static_cast<double>(x[i])));
    // math.h: under 1 ulp on the polynomial side, under 3 on the exp side (ExpF32's ulp, the
    // division and the subtraction from 1).
    ASSERT_LE(UlpDistance(y[i], exact), 3) << "tanh(" << x[i] << ") = " << y[i];
  }
  const float special[5] = {INFINITY, -INFINITY, NAN, -0.0f, 100.0f};
  float out[5];
  kernels::cpu::avx512::TanhF32(special, out, 5);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -1.0f);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_TRUE(out[3] == 0.0f && std::signbit(out[3]));
  EXPECT_EQ(out[4], 1.0f);
}

TEST(RecurrentMath, SigmoidWithinThreeUlp) {
  SKIP_WITHOUT(kAvx512);
  const std::vector<float> x = MathSample(-100.0f, 100.0f);
  std::vector<float> y(x.size());
  kernels::cpu::avx512::SigmoidF32(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
    if (exact >= std::ldexp(1.0, -126)) {
      // math.h: ExpF32's ulp, then one addition and one division.
      ASSERT_LE(UlpDistance(y[i], static_cast<float>(exact)), 3) << "sigmoid(" << x[i] << ")";
    } else {
      ASSERT_LE(std::fabs(y[i] - exact), std::ldexp(1.0, -126)) << "sigmoid(" << x[i] << ")";
    }
  }
  const float special[4] = {INFINITY, -INFINITY, NAN, 0.0f};
  float out[4];
  kernels::cpu::avx512::SigmoidF32(special, out, 4);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_EQ(out[3], 0.5f);
}

}  // namespace
}  // namespace kiln::testing
