// LSTM, GRU and RNN: attribute and input checks (recurrent.h) and the reference kernel, one
// batch entry and one step at a time, as the operator docs write the equations; LSTMQuantizedR
// (recurrent.h) with its R dequantized first.
//
// Precision (DESIGN.md §5): inputs of the node's dtype P are widened to the compute type (fp32;
// double for double), every gate is computed in it, and each output is rounded to P once. The
// recurrent state (Ht and Ct between steps) stays in the compute type inside the kernel: fp16 and
// bf16 nodes carry it in fp32, higher than assigned, which the precision guarantee allows (an
// unfused chain of ops would round it to P at every step).
#include "engine/kernels/cpu/ref/recurrent.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace rnn {
namespace {

// Input slots.
enum Slot { kX, kW, kR, kB, kSequenceLens, kInitialH, kInitialC, kP, kRScale, kRZeroPoint };

struct ActInfo {
  const char* name;  // lower case
  ActKind kind;
  bool uses_alpha, uses_beta;
  float alpha, beta;  // defaults
};

// The activation functions of the operator docs, with the defaults of the ONNX ops of the same
// name (Affine and ScaledTanh, ops of old opsets: alpha 1 / beta 0 and alpha 1 / beta 1).
constexpr ActInfo kActs[] = {
    {"relu", ActKind::kRelu, false, false, 0.0f, 0.0f},
    {"tanh", ActKind::kTanh, false, false, 0.0f, 0.0f},
    {"sigmoid", ActKind::kSigmoid, false, false, 0.0f, 0.0f},
    {"affine", ActKind::kAffine, true, true, 1.0f, 0.0f},
    {"leakyrelu", ActKind::kLeakyRelu, true, false, 0.01f, 0.0f},
    {"thresholdedrelu", ActKind::kThresholdedRelu, true, false, 1.0f, 0.0f},
    {"scaledtanh", ActKind::kScaledTanh, true, true, 1.0f, 1.0f},
    {"hardsigmoid", ActKind::kHardSigmoid, true, true, 0.2f, 0.5f},
    {"elu", ActKind::kElu, true, false, 1.0f, 0.0f},
    {"softsign", ActKind::kSoftsign, false, false, 0.0f, 0.0f},
    {"softplus", ActKind::kSoftplus, false, false, 0.0f, 0.0f},
};

std::string ShapeOf(const ir::Tensor& t) { return ir::DimsToString(t.dims()); }

// `t` (when present) has exactly `dims`; `name` in the error.
absl::Status CheckDims(const ir::Node& node, const ir::Tensor* t, const char* name,
                       const std::vector<int64_t>& dims) {
  if (t == nullptr || t->dims() == dims) return absl::OkStatus();
  return InvalidNode(node, name, " has shape ", ShapeOf(*t), ", expected ", ir::DimsToString(dims));
}

// An input of the node's dtype T, or absent.
absl::StatusOr<const ir::Tensor*> OptionalInput(const ir::Node& node, KernelContext& ctx, int i,
                                                const char* name, DataType dtype) {
  const ir::Tensor* t = ctx.input(i);
  if (t != nullptr && t->dtype() != dtype) {
    return InvalidNode(node, name, " is ", DataTypeOnnxName(t->dtype()), ", expected ",
                       DataTypeOnnxName(dtype));
  }
  return t;
}

template <typename T>
class Evaluator {
 public:
  using C = Compute<T>;

  Evaluator(const Attrs& a, const Problem& p) : a_(a), p_(p) {}

  void Run() {
    w_ = Widen(p_.w);
    r_ = a_.quantized_r ? Dequantize(*p_.r, *p_.r_scale, *p_.r_zero_point) : Widen(p_.r);
    b_ = Widen(p_.b);
    peep_ = Widen(p_.p);
    for (int d = 0; d < p_.dirs; ++d) {
      for (int64_t b = 0; b < p_.batch; ++b) Sequence(d, b);
    }
  }

 private:
  static std::vector<C> Widen(const ir::Tensor* t) {
    std::vector<C> v;
    if (t == nullptr) return v;
    v.resize(t->num_elements());
    const T* src = t->data<T>();
    for (int64_t i = 0; i < t->num_elements(); ++i) v[i] = Load(src[i]);
    return v;
  }

  // Row j of the quantized R `q` ([rows][cols]) as (q - zero_point[j]) * scale[j] in C.
  static std::vector<C> Dequantize(const ir::Tensor& q, const ir::Tensor& scale,
                                   const ir::Tensor& zero_point) {
    const int64_t cols = q.dim(2), rows = q.num_elements() / std::max<int64_t>(cols, 1);
    std::vector<C> v(q.num_elements());
    for (int64_t j = 0; j < rows; ++j) {
      const C sc = static_cast<C>(ir::ElementAsDouble(scale, j));
      const C zp = static_cast<C>(ir::ElementAsDouble(zero_point, j));
      for (int64_t k = 0; k < cols; ++k) {
        v[j * cols + k] = (static_cast<C>(ir::ElementAsDouble(q, j * cols + k)) - zp) * sc;
      }
    }
    return v;
  }

  C Clip(C x) const {
    const C c = static_cast<C>(a_.clip);
    return x > c ? c : x < -c ? -c : x;  // NaN passes through
  }

  // out[j] = bias[j] + sum_k v[k] * m[j][k] for j < rows (m row-major with `cols` columns).
  static void MatVec(const C* m, int64_t rows, int64_t cols, const C* v, const C* bias, C* out) {
    for (int64_t j = 0; j < rows; ++j) {
      const C* row = m + j * cols;
      C acc = 0;
      for (int64_t k = 0; k < cols; ++k) acc += v[k] * row[k];
      out[j] = acc + (bias != nullptr ? bias[j] : C(0));
    }
  }

  // Batch entry `b` through direction `d`.
  void Sequence(int d, int64_t b) {
    const int64_t hs = p_.hidden, in = p_.input, gh = a_.gates * hs;
    const int len = p_.lens[b];
    const bool rev = a_.DirReverse(d);
    const C* w = w_.data() + d * gh * in;
    const C* r = r_.data() + d * gh * hs;
    const C* wb = b_.empty() ? nullptr : b_.data() + d * 2 * gh;
    const C* rb = wb == nullptr ? nullptr : wb + gh;
    const C* peep = peep_.empty() ? nullptr : peep_.data() + d * 3 * hs;
    std::vector<C> x(in), xw(gh), hr(gh), h(hs, C(0)), c(hs, C(0)), hn(hs);
    std::vector<C> z(hs), rt(hs), rh(hs);  // GRU
    const int64_t state = p_.StateRow(d, b);
    if (p_.init_h != nullptr) {
      for (int64_t u = 0; u < hs; ++u) h[u] = Load(p_.init_h->data<T>()[state + u]);
    }
    if (p_.init_c != nullptr) {
      for (int64_t u = 0; u < hs; ++u) c[u] = Load(p_.init_c->data<T>()[state + u]);
    }
    const Act& f = a_.act(d, 0);
    for (int s = 0; s < len; ++s) {
      const int64_t t = rev ? len - 1 - s : s;
      const T* xt = p_.x->data<T>() + p_.XRow(t, b);
      for (int64_t k = 0; k < in; ++k) x[k] = Load(xt[k]);
      MatVec(w, gh, in, x.data(), wb, xw.data());
      switch (a_.cell) {
        case Cell::kRnn: {
          MatVec(r, gh, hs, h.data(), rb, hr.data());
          for (int64_t u = 0; u < hs; ++u) hn[u] = f(Clip(xw[u] + hr[u]));
          break;
        }
        case Cell::kGru: {
          const Act& g = a_.act(d, 1);
          // z and r from Ht-1; the h gate's recurrent part depends on linear_before_reset.
          MatVec(r, 2 * hs, hs, h.data(), rb, hr.data());
          for (int64_t u = 0; u < hs; ++u) {
            z[u] = f(Clip(xw[u] + hr[u]));
            rt[u] = f(Clip(xw[hs + u] + hr[hs + u]));
          }
          const C* rh_rows = r + 2 * hs * hs;
          const C* rbh = rb == nullptr ? nullptr : rb + 2 * hs;
          if (a_.linear_before_reset) {
            // rt . (Ht-1 Rh^T + Rbh)
            MatVec(rh_rows, hs, hs, h.data(), rbh, hr.data() + 2 * hs);
            for (int64_t u = 0; u < hs; ++u) {
              const C ht = g(Clip(xw[2 * hs + u] + rt[u] * hr[2 * hs + u]));
              hn[u] = (C(1) - z[u]) * ht + z[u] * h[u];
            }
          } else {
            // (rt . Ht-1) Rh^T + Rbh
            for (int64_t u = 0; u < hs; ++u) rh[u] = rt[u] * h[u];
            MatVec(rh_rows, hs, hs, rh.data(), rbh, hr.data() + 2 * hs);
            for (int64_t u = 0; u < hs; ++u) {
              const C ht = g(Clip(xw[2 * hs + u] + hr[2 * hs + u]));
              hn[u] = (C(1) - z[u]) * ht + z[u] * h[u];
            }
          }
          break;
        }
        case Cell::kLstm: {
          const Act& g = a_.act(d, 1);
          const Act& ha = a_.act(d, 2);
          MatVec(r, gh, hs, h.data(), rb, hr.data());
          // Gate rows i, o, f, c; peepholes i, o, f.
          for (int64_t u = 0; u < hs; ++u) {
            C pi = xw[u] + hr[u];
            if (peep != nullptr) pi += peep[u] * c[u];
            const C it = f(Clip(pi));
            C ft;
            if (a_.input_forget) {
              ft = C(1) - it;
            } else {
              C pf = xw[2 * hs + u] + hr[2 * hs + u];
              if (peep != nullptr) pf += peep[2 * hs + u] * c[u];
              ft = f(Clip(pf));
            }
            const C ct = g(Clip(xw[3 * hs + u] + hr[3 * hs + u]));
            const C cn = ft * c[u] + it * ct;
            C po = xw[hs + u] + hr[hs + u];
            if (peep != nullptr) po += peep[hs + u] * cn;
            const C ot = f(Clip(po));
            hn[u] = ot * ha(cn);
            c[u] = cn;  // only unit u reads c[u]
          }
          break;
        }
      }
      h.swap(hn);
      if (p_.y != nullptr) {
        T* yt = p_.y->data<T>() + p_.YRow(t, d, b);
        for (int64_t u = 0; u < hs; ++u) yt[u] = Store<T>(h[u]);
      }
    }
    if (p_.y != nullptr) {
      for (int64_t t = len; t < p_.seq; ++t) {
        T* yt = p_.y->data<T>() + p_.YRow(t, d, b);
        std::fill(yt, yt + hs, Store<T>(C(0)));
      }
    }
    if (p_.y_h != nullptr) {
      T* out = p_.y_h->data<T>() + state;
      for (int64_t u = 0; u < hs; ++u) out[u] = Store<T>(len > 0 ? h[u] : C(0));
    }
    if (p_.y_c != nullptr) {
      T* out = p_.y_c->data<T>() + state;
      for (int64_t u = 0; u < hs; ++u) out[u] = Store<T>(len > 0 ? c[u] : C(0));
    }
  }

  const Attrs& a_;
  const Problem& p_;
  std::vector<C> w_, r_, b_, peep_;
};

class RecurrentKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(Attrs attrs, ReadAttrs(node));
    return std::unique_ptr<Kernel>(new RecurrentKernel(node, std::move(attrs)));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const Problem p, Prepare(node_, attrs_, ctx));
    return DispatchFloat(p.x->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      Evaluator<T>(attrs_, p).Run();
      return absl::OkStatus();
    });
  }

 private:
  RecurrentKernel(const ir::Node& node, Attrs attrs) : node_(node), attrs_(std::move(attrs)) {}
  const ir::Node& node_;
  const Attrs attrs_;
};

}  // namespace

absl::StatusOr<Attrs> ReadAttrs(const ir::Node& node) {
  Attrs a;
  switch (node.op) {
    case ir::OpType::kLSTM:
    case ir::OpType::kLSTMQuantizedR:
      a.cell = Cell::kLstm;
      a.gates = 4;
      a.acts_per_dir = 3;
      a.quantized_r = node.op == ir::OpType::kLSTMQuantizedR;
      break;
    case ir::OpType::kGRU:
      a.cell = Cell::kGru;
      a.gates = 3;
      a.acts_per_dir = 2;
      break;
    case ir::OpType::kRNN:
      a.cell = Cell::kRnn;
      a.gates = 1;
      a.acts_per_dir = 1;
      break;
    default:
      return absl::InternalError(absl::StrCat(node.Label(), " is not a recurrent op"));
  }
  const std::string direction = node.GetString("direction", "forward");
  if (direction == "bidirectional") {
    a.num_directions = 2;
  } else if (direction == "reverse") {
    a.reverse = true;
  } else if (direction != "forward") {
    return InvalidNode(node, "direction must be forward, reverse or bidirectional, got '",
                       direction, "'");
  }
  if (node.has_attr("hidden_size")) {
    a.hidden_size = node.GetInt("hidden_size", 0);
    if (a.hidden_size <= 0) {
      return InvalidNode(node, "hidden_size must be positive, got ", a.hidden_size);
    }
  }
  if (node.has_attr("clip")) {
    a.clip = node.GetFloat("clip", 0.0f);
    if (!(a.clip > 0)) return InvalidNode(node, "clip must be positive, got ", a.clip);
  }
  const int64_t layout = node.GetInt("layout", 0);
  if (layout != 0 && layout != 1) return InvalidNode(node, "layout must be 0 or 1, got ", layout);
  a.layout = static_cast<int>(layout);
  a.input_forget = node.GetInt("input_forget", 0) != 0;
  a.linear_before_reset = node.GetInt("linear_before_reset", 0) != 0;

  std::vector<std::string> names;
  if (const ir::Attribute* attr = node.attr("activations")) {
    names = attr->strings;
  } else {
    static const char* const kDefaults[3][3] = {
        {"tanh"}, {"sigmoid", "tanh"}, {"sigmoid", "tanh", "tanh"}};
    for (int d = 0; d < a.num_directions; ++d) {
      for (int j = 0; j < a.acts_per_dir; ++j) names.push_back(kDefaults[a.acts_per_dir - 1][j]);
    }
  }
  const size_t want = static_cast<size_t>(a.num_directions * a.acts_per_dir);
  if (names.size() != want) {
    return InvalidNode(node, "activations has ", names.size(), " functions, expected ", want, " (",
                       a.acts_per_dir, " per direction, direction ", direction, ")");
  }
  const std::vector<float> alphas = node.GetFloats("activation_alpha");
  const std::vector<float> betas = node.GetFloats("activation_beta");
  size_t next_alpha = 0, next_beta = 0;
  for (const std::string& name : names) {
    const std::string lower = absl::AsciiStrToLower(name);
    const ActInfo* info = nullptr;
    for (const ActInfo& k : kActs) {
      if (lower == k.name) info = &k;
    }
    if (info == nullptr) {
      return InvalidNode(node, "unknown activation function '", name,
                         "' (expected Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, "
                         "ScaledTanh, HardSigmoid, Elu, Softsign or Softplus)");
    }
    Act act{info->kind, 0.0f, 0.0f};
    if (info->uses_alpha) {
      act.alpha = next_alpha < alphas.size() ? alphas[next_alpha++] : info->alpha;
    }
    if (info->uses_beta) act.beta = next_beta < betas.size() ? betas[next_beta++] : info->beta;
    a.acts.push_back(act);
  }
  return a;
}

absl::StatusOr<Problem> Prepare(const ir::Node& node, const Attrs& a, KernelContext& ctx) {
  Problem p;
  p.dirs = a.num_directions;
  p.layout = a.layout;
  ASSIGN_OR_RETURN(p.x, RequireInput(node, ctx, kX));
  ASSIGN_OR_RETURN(p.w, RequireInput(node, ctx, kW));
  ASSIGN_OR_RETURN(p.r, RequireInput(node, ctx, kR));
  const DataType dt = p.x->dtype();
  if (!IsFloating(dt)) {
    return InvalidNode(node, "X must be a floating tensor, got ", DataTypeOnnxName(dt));
  }
  if (a.quantized_r) {
    const DataType rt = p.r->dtype();
    if (p.w->dtype() != dt || (rt != DataType::kI8 && rt != DataType::kU8)) {
      return InvalidNode(node, "X and W must have the same dtype and R int8 or uint8, got ",
                         DataTypeOnnxName(dt), ", ", DataTypeOnnxName(p.w->dtype()), " and ",
                         DataTypeOnnxName(rt));
    }
    ASSIGN_OR_RETURN(p.r_scale, RequireInput(node, ctx, kRScale));
    ASSIGN_OR_RETURN(p.r_zero_point, RequireInput(node, ctx, kRZeroPoint));
    if (!IsFloating(p.r_scale->dtype()) || p.r_zero_point->dtype() != rt) {
      return InvalidNode(node, "R_scale must be floating and R_zero_point ", DataTypeOnnxName(rt),
                         " (R's dtype), got ", DataTypeOnnxName(p.r_scale->dtype()), " and ",
                         DataTypeOnnxName(p.r_zero_point->dtype()));
    }
  } else if (p.w->dtype() != dt || p.r->dtype() != dt) {
    return InvalidNode(node, "X, W and R must have the same dtype, got ", DataTypeOnnxName(dt),
                       ", ", DataTypeOnnxName(p.w->dtype()), " and ",
                       DataTypeOnnxName(p.r->dtype()));
  }
  ASSIGN_OR_RETURN(p.b, OptionalInput(node, ctx, kB, "B", dt));
  ASSIGN_OR_RETURN(p.init_h, OptionalInput(node, ctx, kInitialH, "initial_h", dt));
  if (a.cell == Cell::kLstm) {
    ASSIGN_OR_RETURN(p.init_c, OptionalInput(node, ctx, kInitialC, "initial_c", dt));
    ASSIGN_OR_RETURN(p.p, OptionalInput(node, ctx, kP, "P", dt));
  }
  if (p.x->rank() != 3) return InvalidNode(node, "X must be 3-D, got ", ShapeOf(*p.x));
  if (p.r->rank() != 3) return InvalidNode(node, "R must be 3-D, got ", ShapeOf(*p.r));
  p.seq = p.x->dim(a.layout == 0 ? 0 : 1);
  p.batch = p.x->dim(a.layout == 0 ? 1 : 0);
  p.input = p.x->dim(2);
  p.hidden = a.hidden_size >= 0 ? a.hidden_size : p.r->dim(2);
  const int64_t gh = a.gates * p.hidden;
  RETURN_IF_ERROR(CheckDims(node, p.w, "W", {p.dirs, gh, p.input}));
  RETURN_IF_ERROR(CheckDims(node, p.r, "R", {p.dirs, gh, p.hidden}));
  RETURN_IF_ERROR(CheckDims(node, p.r_scale, "R_scale", {p.dirs, gh}));
  RETURN_IF_ERROR(CheckDims(node, p.r_zero_point, "R_zero_point", {p.dirs, gh}));
  RETURN_IF_ERROR(CheckDims(node, p.b, "B", {p.dirs, 2 * gh}));
  const std::vector<int64_t> state = a.layout == 0
                                         ? std::vector<int64_t>{p.dirs, p.batch, p.hidden}
                                         : std::vector<int64_t>{p.batch, p.dirs, p.hidden};
  RETURN_IF_ERROR(CheckDims(node, p.init_h, "initial_h", state));
  RETURN_IF_ERROR(CheckDims(node, p.init_c, "initial_c", state));
  RETURN_IF_ERROR(CheckDims(node, p.p, "P", {p.dirs, 3 * p.hidden}));

  if (p.seq > INT32_MAX) return InvalidNode(node, "sequence length ", p.seq, " is too long");
  p.lens.assign(p.batch, static_cast<int32_t>(p.seq));
  if (const ir::Tensor* lens = ctx.input(kSequenceLens)) {
    if (lens->dtype() != DataType::kI32) {
      return InvalidNode(node, "sequence_lens is ", DataTypeOnnxName(lens->dtype()),
                         ", expected int32");
    }
    RETURN_IF_ERROR(CheckDims(node, lens, "sequence_lens", {p.batch}));
    for (int64_t b = 0; b < p.batch; ++b) {
      const int32_t len = lens->data<int32_t>()[b];
      if (len < 0 || len > p.seq) {
        return InvalidNode(node, "sequence_lens[", b, "] = ", len, " is outside [0, ", p.seq, "]");
      }
      p.lens[b] = len;
    }
  }

  if (ctx.num_outputs() > 0 && ctx.output_requested(0)) {
    std::vector<int64_t> dims = a.layout == 0
                                    ? std::vector<int64_t>{p.seq, p.dirs, p.batch, p.hidden}
                                    : std::vector<int64_t>{p.batch, p.seq, p.dirs, p.hidden};
    ASSIGN_OR_RETURN(p.y, ctx.output(0, dt, std::move(dims)));
  }
  if (ctx.num_outputs() > 1 && ctx.output_requested(1)) {
    ASSIGN_OR_RETURN(p.y_h, ctx.output(1, dt, state));
  }
  if (a.cell == Cell::kLstm && ctx.num_outputs() > 2 && ctx.output_requested(2)) {
    ASSIGN_OR_RETURN(p.y_c, ctx.output(2, dt, state));
  }
  return p;
}

}  // namespace rnn

void RegisterRecurrent(Registry& r) {
  for (ir::OpType op :
       {ir::OpType::kLSTM, ir::OpType::kLSTMQuantizedR, ir::OpType::kGRU, ir::OpType::kRNN}) {
    r.AddRef(op, FloatTypes(), &rnn::RecurrentKernel::Create);
  }
}

}  // namespace kiln::kernels::cpu::ref
