#include "engine/passes/fusion.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/passes/layout.h"

namespace kiln::passes {
namespace {

using precision::PatternInstance;
using precision::PatternKind;
using precision::Precision;

using ir::Attribute;

// The fused kernels' name for activation node `a` (empty when `a` is not an activation).
std::string ActivationOf(const ir::Node& a) {
  switch (a.op) {
    case ir::OpType::kRelu:
      return "Relu";
    case ir::OpType::kSigmoid:
      return "Sigmoid";
    case ir::OpType::kTanh:
      return "Tanh";
    case ir::OpType::kHardSwish:
      return "HardSwish";
    case ir::OpType::kLeakyRelu:
      return "LeakyRelu";
    case ir::OpType::kClip:
      return "Clip";
    case ir::OpType::kGelu:
      return a.GetString("approximate", "none") == "tanh" ? "GeluTanh" : "Gelu";
    default:
      return "";
  }
}

// The constant tensor behind `v`: an initializer (or a value a pass made constant), or the
// `value` tensor of the Constant node computing it (Paddle2ONNX writes every weight so; the fold
// pass turns those into constants only after fusion). Null otherwise.
const ir::Tensor* Known(const ir::Value* v) {
  if (v == nullptr) return nullptr;
  if (v->constant) return &*v->constant;
  const ir::Node* p = v->producer;
  if (p == nullptr || p->op != ir::OpType::kConstant || p->num_outputs() != 1) return nullptr;
  const ir::Attribute* a = p->attr("value");
  if (a == nullptr || a->type != ir::Attribute::Type::kTensor || !a->t.defined() ||
      a->t.dtype() != v->dtype) {
    return nullptr;
  }
  return &a->t;
}

class Fuser {
 public:
  Fuser(ir::Graph& g, const precision::Assignment& a, const FusionOptions& o,
        spdlog::logger* logger)
      : g_(g), a_(a), o_(o), logger_(logger), removed_(g.nodes().size(), false) {}

  absl::StatusOr<FusionResult> Run(const std::vector<PatternInstance>& patterns) {
    // Patterns first (they see the graph they were found in), then the linear fusions, which
    // may absorb a fused Gelu or LayerNormalization as their activation or normalisation.
    // Attention first: its Softmax is also an instance of its own.
    for (const PatternInstance& p : patterns) {
      if (p.kind == PatternKind::kAttention) RETURN_IF_ERROR(FuseAttention(p));
    }
    for (const PatternInstance& p : patterns) RETURN_IF_ERROR(FusePattern(p));
    RETURN_IF_ERROR(FuseConvBatchNorm());
    Compact();  // the folded BatchNormalizations gone: their outputs are the convolutions' now
    RETURN_IF_ERROR(FuseScale());
    Compact();
    RETURN_IF_ERROR(FuseLinear());
    Compact();
    return std::move(result_);
  }

 private:
  const precision::NodeAssignment& Assigned(const ir::Node& n) { return a_.nodes[n.sources[0]]; }

  void Compact() {
    g_.RemoveNodes(removed_);
    removed_.assign(g_.nodes().size(), false);
  }

  // The precision `n` computes at before lowering: a fused node's, else its assignment.
  Precision PrecisionOf(const ir::Node& n) {
    auto it = result_.precision.find(&n);
    if (it != result_.precision.end()) return it->second;
    const auto& a = Assigned(n);
    return a.floating ? a.assigned : Precision::kFp32;
  }

  // A source of `n` assigned higher than `t` (which computing at `t` would lower), or -1.
  int LoweredSource(const ir::Node& n, Precision t) {
    for (int s : n.sources) {
      const auto& a = a_.nodes[s];
      if (a.floating && !precision::AtLeast(t, a.assigned)) return s;
    }
    return -1;
  }

  // The only node reading `v` (once), when `v` is not also a graph output.
  ir::Node* SoleConsumer(const ir::Value* v) {
    if (!v || v->is_graph_output || v->consumers.size() != 1) return nullptr;
    ir::Node* c = v->consumers[0];
    int uses = 0;
    for (const ir::Value* in : c->inputs) uses += in == v;
    return uses == 1 && !removed_[c->id] ? c : nullptr;
  }

  // Checks that computing `members` at `t` lowers none of them; logs the refusal otherwise.
  bool Allowed(const char* fusion, const std::vector<ir::Node*>& members, Precision t) {
    for (const ir::Node* m : members) {
      int s = LoweredSource(*m, t);
      if (s < 0) continue;
      Refuse(absl::StrCat(fusion, " of ", Names(members), ": ", m->Label(), " is assigned ",
                          precision::PrecisionName(a_.nodes[s].assigned), " by ", a_.nodes[s].rule,
                          ", and the fused kernel would compute it in ",
                          precision::PrecisionName(t)));
      return false;
    }
    return true;
  }

  // The join of the members' assigned precisions: computing there lowers none of them.
  Precision JoinOf(const std::vector<ir::Node*>& members) {
    Precision t = Precision::kFp32;
    bool first = true;
    for (const ir::Node* m : members) {
      for (int s : m->sources) {
        const auto& na = a_.nodes[s];
        if (!na.floating) continue;
        t = first ? na.assigned : precision::Join(t, na.assigned);
        first = false;
      }
    }
    return t;
  }

  // Replaces `members` by `fused` (already wired), computing at `t`.
  void Commit(ir::Node* fused, const std::vector<ir::Node*>& members, Precision t,
              const std::string& label) {
    fused->fusion = label;
    for (ir::Node* m : members) {
      fused->sources.insert(fused->sources.end(), m->sources.begin(), m->sources.end());
      removed_[m->id] = true;
      for (int s : m->sources) result_.effective.try_emplace(s, t);
    }
    removed_.push_back(false);
    result_.precision[fused] = t;
    result_.applied.push_back(absl::StrCat(label, ": ", members.size(), " nodes (", Names(members),
                                           ") -> one ", ir::OpName(fused->op), " at ",
                                           precision::PrecisionName(t)));
  }

  // Settles which `members` of a pattern instance the fused node replaces, the node reading
  // `inputs` and computing `output`. A member computing one of `inputs` stays a node of its own
  // when it is a Constant (the pattern matcher counts a Constant only the instance reads as a
  // member, so that a `pattern:` rule covers it: gamma, beta or a mask as a Constant node, as
  // Paddle2ONNX writes them); removing it would leave the fused node reading a value nothing
  // computes. Computing members (Constants are moved after them, so the fused node's first
  // source, which names its kernel in an engine blob, is an op of the instance) must have every
  // output but `output` read only by other members; otherwise the fusion would drop a value
  // that is needed, and it is refused (false, logged).
  bool Absorbable(const char* fusion, std::vector<ir::Node*>& members,
                  const std::vector<ir::Value*>& inputs, const ir::Value* output) {
    std::vector<ir::Node*> kept, computing, constants;
    for (ir::Node* m : members) {
      bool feeds = false;
      for (const ir::Value* v : m->outputs) {
        feeds = feeds || (v && std::find(inputs.begin(), inputs.end(), v) != inputs.end());
      }
      if (feeds && m->op == ir::OpType::kConstant) {
        kept.push_back(m);
      } else {
        (m->op == ir::OpType::kConstant ? constants : computing).push_back(m);
      }
    }
    std::vector<ir::Node*> absorbed = computing;
    absorbed.insert(absorbed.end(), constants.begin(), constants.end());
    auto member = [&](const ir::Node* c) {
      return std::find(absorbed.begin(), absorbed.end(), c) != absorbed.end();
    };
    for (const ir::Node* m : absorbed) {
      for (const ir::Value* v : m->outputs) {
        if (!v || v == output) continue;
        // A removed reader was absorbed by an earlier fusion, whose node may read `v` now.
        const bool outside = v->is_graph_output ||
                             std::find(inputs.begin(), inputs.end(), v) != inputs.end() ||
                             std::any_of(v->consumers.begin(), v->consumers.end(),
                                         [&](const ir::Node* c) { return !member(c); });
        if (outside) {
          Refuse(absl::StrCat(fusion, " of ", Names(members), ": ", m->Label(), " output '",
                              v->name, "' is read outside the instance"));
          return false;
        }
      }
    }
    if (computing.empty()) return false;
    if (!kept.empty() && logger_) {
      logger_->debug("{} of {}: {} kept as node(s) of their own (the fused node reads them)",
                     fusion, Names(members), Names(kept));
    }
    members = std::move(absorbed);
    return true;
  }

  absl::Status FuseLinear() {
    if (!o_.enabled) return absl::OkStatus();
    size_t count = g_.nodes().size();
    for (size_t i = 0; i < count; ++i) {
      ir::Node* n = g_.nodes()[i].get();
      if (removed_[n->id]) continue;
      if (n->op == ir::OpType::kMatMul) RETURN_IF_ERROR(FuseMatMulBias(n));
      if (n->op == ir::OpType::kConv) {
        FuseConvActivation(n);
        if (!removed_[n->id]) FuseConvResidual(n);
      }
      if (n->op == ir::OpType::kAdd) FuseAddLayerNorm(n);
    }
    return absl::OkStatus();
  }

  // MatMul -> Add(constant bias [N]) [-> Relu | Sigmoid | Tanh | Gelu] => FusedMatMul.
  absl::Status FuseMatMulBias(ir::Node* mm) {
    ir::Node* add = SoleConsumer(mm->outputs[0]);
    if (!add || add->op != ir::OpType::kAdd || add->num_inputs() != 2) return absl::OkStatus();
    ir::Value* bias = add->inputs[0] == mm->outputs[0] ? add->inputs[1] : add->inputs[0];
    // Exporters that share equal weights pass them through Identity nodes (PyTorch gives every
    // zero bias as Identity(one zero tensor)): the constant behind them is the bias.
    while (bias && !Known(bias) && bias->producer && bias->producer->op == ir::OpType::kIdentity &&
           !removed_[bias->producer->id] && bias->producer->num_inputs() == 1) {
      bias = bias->producer->inputs[0];
    }
    if (!bias || !Known(bias) || Known(bias)->rank() != 1) return absl::OkStatus();
    std::vector<ir::Node*> members = {mm, add};
    ir::Value* out = add->outputs[0];
    std::string act;
    if (ir::Node* a = SoleConsumer(out)) {
      act = ActivationOf(*a);
      if (act != "Relu" && act != "Sigmoid" && act != "Tanh" && act != "Gelu" &&
          act != "GeluTanh") {
        act.clear();
      }
      if (!act.empty()) {
        members.push_back(a);
        out = a->outputs[0];
      }
    }
    std::string label = act.empty() ? "matmul+bias" : absl::StrCat("matmul+bias+", act);
    if (Excluded(members, ir::OpType::kFusedMatMul, "matmul+bias")) return absl::OkStatus();
    Precision t = PrecisionOf(*mm);
    if (!Allowed(label.c_str(), members, t)) return absl::OkStatus();
    ir::Node* fused = g_.AddNode(ir::OpType::kFusedMatMul, absl::StrCat(mm->name, "/fused"));
    fused->since_version = 1;
    fused->inputs = {mm->inputs[0], mm->inputs[1], bias};
    fused->outputs = {out};
    fused->attrs["activation"] = Attribute::String(act);
    Commit(fused, members, t, label);
    return absl::OkStatus();
  }

  // The FusedConv activation of node `a` ("" when it is none FusedConv takes): Relu, LeakyRelu,
  // Clip (constant bounds), HardSwish, Sigmoid.
  static std::string ConvActivationOf(const ir::Node& a) {
    const std::string act = ActivationOf(a);
    if (act == "Clip") {
      // Bounds from attributes (opset < 11) or constant scalar inputs.
      for (int k = 1; k <= 2; ++k) {
        const ir::Value* v = a.input(k);
        if (v && (!Known(v) || Known(v)->num_elements() != 1)) return "";
      }
      return act;
    }
    return act == "Relu" || act == "Sigmoid" || act == "HardSwish" || act == "LeakyRelu" ? act : "";
  }

  // A FusedConv named after `conv`, with its attributes and activation `act` of node `a`.
  ir::Node* NewFusedConv(const ir::Node& conv, const ir::Node* a, const std::string& act) {
    ir::Node* fused = g_.AddNode(ir::OpType::kFusedConv, absl::StrCat(conv.name, "/fused"));
    fused->since_version = 1;
    fused->attrs = conv.attrs;
    fused->attrs["activation"] = Attribute::String(act);
    if (act == "LeakyRelu")
      fused->attrs["activation_alpha"] = Attribute::Float(a->GetFloat("alpha", 0.01f));
    if (act == "Clip") {
      float lo = a->GetFloat("min", -INFINITY), hi = a->GetFloat("max", INFINITY);
      if (const ir::Value* v = a->input(1))
        lo = static_cast<float>(ir::ElementAsDouble(*Known(v), 0));
      if (const ir::Value* v = a->input(2))
        hi = static_cast<float>(ir::ElementAsDouble(*Known(v), 0));
      fused->attrs["activation_min"] = Attribute::Float(lo);
      fused->attrs["activation_max"] = Attribute::Float(hi);
    }
    return fused;
  }

  // SiLU after a Conv: y = Conv(...) read by exactly Sigmoid(y) and Mul(y, Sigmoid(y)) (either
  // operand order), the Sigmoid read by the Mul alone => FusedConv with activation "Swish"
  // (x * Sigmoid(x), the sigmoid kept in fp32). Returns whether it fused.
  bool FuseConvSilu(ir::Node* conv) {
    ir::Value* y = conv->outputs.empty() ? nullptr : conv->outputs[0];
    if (!y || y->is_graph_output || y->consumers.size() != 2) return false;
    ir::Node* sig = nullptr;
    ir::Node* mul = nullptr;
    for (ir::Node* c : y->consumers) {
      if (removed_[c->id]) return false;
      if (c->op == ir::OpType::kSigmoid && c->num_inputs() == 1) sig = c;
      if (c->op == ir::OpType::kMul && c->num_inputs() == 2) mul = c;
    }
    if (!sig || !mul || SoleConsumer(sig->outputs[0]) != mul) return false;
    const bool operands = (mul->inputs[0] == y && mul->inputs[1] == sig->outputs[0]) ||
                          (mul->inputs[1] == y && mul->inputs[0] == sig->outputs[0]);
    if (!operands) return false;
    std::vector<ir::Node*> members = {conv, sig, mul};
    std::string label = absl::StrCat(conv->fusion.empty() ? "conv" : conv->fusion, "+Swish");
    if (Excluded(members, ir::OpType::kFusedConv, "conv+activation")) return false;
    Precision t = PrecisionOf(*conv);
    if (!Allowed(label.c_str(), members, t)) return false;
    ir::Node* fused = NewFusedConv(*conv, sig, "Swish");
    fused->inputs = conv->inputs;
    fused->outputs = {mul->outputs[0]};
    result_.precision.erase(conv);
    Commit(fused, members, t, label);
    return true;
  }

  // The one-element constant `v` holds, if it is one.
  static std::optional<double> Scalar(const ir::Value* v) {
    const ir::Tensor* t = Known(v);
    if (t == nullptr || t->num_elements() != 1 || !IsFloating(t->dtype())) return std::nullopt;
    return ir::ElementAsDouble(*t, 0);
  }

  // `n` is a binary `op` of `x` and a one-element constant (either order for Add and Mul):
  // that constant.
  static std::optional<double> WithScalar(const ir::Node* n, ir::OpType op, const ir::Value* x) {
    if (n == nullptr || n->op != op || n->num_inputs() != 2) return std::nullopt;
    if (n->inputs[0] == x) return Scalar(n->inputs[1]);
    const bool commutes = op == ir::OpType::kAdd || op == ir::OpType::kMul;
    return commutes && n->inputs[1] == x ? Scalar(n->inputs[0]) : std::nullopt;
  }

  // HardSwish written out after a Conv (Paddle2ONNX, and PyTorch models that spell it):
  // y = Conv(...) read by exactly Add(y, 3) -> Clip(., 0, 6) -> Mul(y, .) -> Div(., 6) (or
  // Mul(., 1/6)), or by HardSigmoid(y; alpha 1/6, beta 0.5) -> Mul(y, .) => FusedConv with
  // activation "HardSwish" (x * max(0, min(1, x / 6 + 1/2)) in fp32: the same function, its
  // steps in another order). Returns whether it fused.
  bool FuseConvHardSwishWritten(ir::Node* conv) {
    ir::Value* y = conv->outputs.empty() ? nullptr : conv->outputs[0];
    if (!y || y->is_graph_output || y->consumers.size() != 2) return false;
    auto near = [](std::optional<double> c, double want) {
      return c && std::abs(*c - want) <= 1e-6 * std::abs(want);
    };
    ir::Node* mul = nullptr;
    ir::Node* gate = nullptr;  // the Add or the HardSigmoid
    for (ir::Node* c : y->consumers) {
      if (removed_[c->id]) return false;
      if (c->op == ir::OpType::kMul && c->num_inputs() == 2 && c->inputs[0] != c->inputs[1]) {
        mul = c;
      } else {
        gate = c;
      }
    }
    if (!mul || !gate) return false;
    std::vector<ir::Node*> members = {conv, gate};
    ir::Node* clip = nullptr;
    if (gate->op == ir::OpType::kHardSigmoid) {
      if (!near(gate->GetFloat("alpha", 0.2f), 1.0 / 6) || !near(gate->GetFloat("beta", 0.5f), 0.5))
        return false;
      if (SoleConsumer(gate->outputs[0]) != mul) return false;
    } else {
      if (!near(WithScalar(gate, ir::OpType::kAdd, y), 3.0)) return false;
      clip = SoleConsumer(gate->outputs[0]);
      if (!clip || clip->op != ir::OpType::kClip || clip->input(0) != gate->outputs[0] ||
          ConvActivationOf(*clip) != "Clip" || SoleConsumer(clip->outputs[0]) != mul) {
        return false;
      }
      float lo = clip->GetFloat("min", -INFINITY), hi = clip->GetFloat("max", INFINITY);
      if (auto v = Scalar(clip->input(1))) lo = static_cast<float>(*v);
      if (auto v = Scalar(clip->input(2))) hi = static_cast<float>(*v);
      if (lo != 0.0f || hi != 6.0f) return false;
      members.push_back(clip);
    }
    const ir::Value* gated = members.back()->outputs[0];
    if (!((mul->inputs[0] == y && mul->inputs[1] == gated) ||
          (mul->inputs[1] == y && mul->inputs[0] == gated))) {
      return false;
    }
    members.push_back(mul);
    ir::Value* out = mul->outputs[0];
    if (clip) {  // the division by 6 after the product
      ir::Node* div = SoleConsumer(out);
      if (!div || !(near(WithScalar(div, ir::OpType::kDiv, out), 6.0) ||
                    near(WithScalar(div, ir::OpType::kMul, out), 1.0 / 6))) {
        return false;
      }
      members.push_back(div);
      out = div->outputs[0];
    }
    std::string label = absl::StrCat(conv->fusion.empty() ? "conv" : conv->fusion, "+HardSwish");
    if (Excluded(members, ir::OpType::kFusedConv, "conv+activation")) return false;
    Precision t = PrecisionOf(*conv);
    if (!Allowed(label.c_str(), members, t)) return false;
    ir::Node* fused = NewFusedConv(*conv, nullptr, "HardSwish");
    fused->inputs = conv->inputs;
    fused->outputs = {out};
    result_.precision.erase(conv);
    Commit(fused, members, t, label);
    return true;
  }

  // Conv -> Relu | LeakyRelu | Clip (constant bounds) | HardSwish | Sigmoid => FusedConv.
  void FuseConvActivation(ir::Node* conv) {
    if (FuseConvSilu(conv) || FuseConvHardSwishWritten(conv)) return;
    ir::Node* a = SoleConsumer(conv->outputs.empty() ? nullptr : conv->outputs[0]);
    if (!a) return;
    const std::string act = ConvActivationOf(*a);
    if (act.empty()) return;
    std::vector<ir::Node*> members = {conv, a};
    std::string label = absl::StrCat(conv->fusion.empty() ? "conv" : conv->fusion, "+", act);
    if (Excluded(members, ir::OpType::kFusedConv, "conv+activation")) return;
    Precision t = PrecisionOf(*conv);
    if (!Allowed(label.c_str(), members, t)) return;
    ir::Node* fused = NewFusedConv(*conv, a, act);
    fused->inputs = conv->inputs;
    fused->outputs = {a->outputs[0]};
    // A Conv that already absorbed a BatchNorm keeps its recorded precision and sources.
    result_.precision.erase(conv);
    Commit(fused, members, t, label);
  }

  // Conv -> Add | Sum of it and a residual Z of its shape [-> an activation as above] =>
  // FusedConv with Z as input 3: act(Conv(X, W) + B + Z), the sum in fp32.
  void FuseConvResidual(ir::Node* conv) {
    ir::Value* y = conv->outputs.empty() ? nullptr : conv->outputs[0];
    ir::Node* add = SoleConsumer(y);
    if (!add || (add->op != ir::OpType::kAdd && add->op != ir::OpType::kSum) ||
        add->num_inputs() != 2) {
      return;
    }
    ir::Value* z = add->inputs[0] == y ? add->inputs[1] : add->inputs[0];
    if (!z || z == y || Known(z) || !y->shape.rank_known || !y->shape.is_static() ||
        !z->shape.rank_known || !z->shape.is_static() ||
        y->shape.StaticDims() != z->shape.StaticDims()) {
      return;  // a bias or a broadcast, not a residual
    }
    std::vector<ir::Node*> members = {conv, add};
    ir::Value* out = add->outputs[0];
    ir::Node* a = SoleConsumer(out);
    const std::string act = a ? ConvActivationOf(*a) : "";
    if (!act.empty()) {
      members.push_back(a);
      out = a->outputs[0];
    }
    std::string label = absl::StrCat(conv->fusion.empty() ? "conv" : conv->fusion, "+residual",
                                     act.empty() ? "" : "+", act);
    if (Excluded(members, ir::OpType::kFusedConv, "conv+residual")) return;
    Precision t = PrecisionOf(*conv);
    if (!Allowed(label.c_str(), members, t)) return;
    ir::Node* fused = NewFusedConv(*conv, a, act);
    fused->inputs = {conv->inputs[0], conv->inputs[1],
                     conv->num_inputs() > 2 ? conv->inputs[2] : nullptr, z};
    fused->outputs = {out};
    result_.precision.erase(conv);
    Commit(fused, members, t, label);
  }

  // Add(residual) -> LayerNormalization(last axis) => AddLayerNorm, which also outputs the sum
  // when other nodes read it (the residual stream).
  void FuseAddLayerNorm(ir::Node* add) {
    if (add->num_inputs() != 2 || !add->inputs[0] || !add->inputs[1]) return;
    if (Known(add->inputs[0]) || Known(add->inputs[1])) return;  // a bias, not a residual
    ir::Value* sum = add->outputs[0];
    ir::Node* ln = nullptr;
    for (ir::Node* c : sum->consumers) {
      if (!removed_[c->id] && c->op == ir::OpType::kLayerNormalization && c->input(0) == sum &&
          c->input(1) != sum && c->input(2) != sum) {
        ln = c;
        break;
      }
    }
    if (!ln) return;
    bool stats = false;  // LayerNormalization's Mean/InvStdDev outputs are not produced fused
    for (int k = 1; k < ln->num_outputs(); ++k) stats = stats || ln->outputs[k];
    int64_t axis = ln->GetInt("axis", -1);
    bool last = axis == -1 || (sum->shape.rank_known && axis == sum->shape.rank() - 1);
    if (stats || !last || ln->GetInt("stash_type", 1) != 1) return;
    std::vector<ir::Node*> members = {add, ln};
    if (Excluded(members, ir::OpType::kAddLayerNorm, "add+layernorm")) return;
    Precision t = precision::Join(PrecisionOf(*add), PrecisionOf(*ln));
    bool keep_sum = sum->is_graph_output || sum->consumers.size() > 1;
    ir::Node* fused = g_.AddNode(ir::OpType::kAddLayerNorm, absl::StrCat(ln->name, "/fused_add"));
    fused->since_version = 1;
    fused->inputs = {add->inputs[0], add->inputs[1], ln->inputs[1]};
    if (ln->input(2)) fused->inputs.push_back(ln->inputs[2]);
    fused->outputs = {ln->outputs[0], keep_sum ? sum : nullptr};
    fused->attrs["axis"] = Attribute::Int(-1);
    fused->attrs["epsilon"] = Attribute::Float(ln->GetFloat("epsilon", 1e-5f));
    result_.precision.erase(ln);
    Commit(fused, members, t, "add+layernorm");
  }

  // True when a --no-fuse selector excludes a fusion of `members` producing `op`.
  bool Excluded(const std::vector<ir::Node*>& members, ir::OpType op, const char* pattern) {
    return FusionExcluded(o_, {members.begin(), members.end()}, op, pattern);
  }

  std::string Names(const std::vector<ir::Node*>& members) {
    std::vector<std::string> names;
    for (const ir::Node* n : members) names.push_back(absl::StrCat("'", n->name, "'"));
    return absl::StrJoin(names, ", ");
  }

  void Refuse(std::string why) {
    if (logger_) logger_->warn("fusion refused: {}", why);
    result_.refusals.push_back(std::move(why));
  }

  // A new value `name` holding constant `t`.
  absl::StatusOr<ir::Value*> AddConstant(const std::string& name, ir::Tensor t) {
    ASSIGN_OR_RETURN(ir::Value * v, g_.AddValue(name));
    v->dtype = t.dtype();
    v->shape = ir::Shape::Of(t.dims());
    v->constant = std::move(t);
    return v;
  }

  // A constant float vector of ones with `d` elements (scale of a LayerNorm without gamma).
  absl::StatusOr<ir::Value*> Ones(int64_t d, const std::string& name) {
    ASSIGN_OR_RETURN(ir::Tensor t, ir::Tensor::Allocate(DataType::kF32, {d}));
    for (int64_t i = 0; i < d; ++i) t.data<float>()[i] = 1.0f;
    return AddConstant(name, std::move(t));
  }

  absl::Status FusePattern(const PatternInstance& p) {
    // An instance whose fields the matcher could not pin down (a Reshape target known only at
    // run time) stays for the policy and is not rewritten.
    if (p.is_op || p.kind == PatternKind::kAttention || !o_.enabled || !p.fusable) {
      return absl::OkStatus();
    }
    std::vector<ir::Node*> members;
    for (int id : p.nodes) {
      if (removed_[id]) return absl::OkStatus();  // already absorbed by another fusion
      members.push_back(g_.nodes()[id].get());
    }
    if (members.empty() || !p.output || !p.input) return absl::OkStatus();
    const char* pattern = precision::PatternName(p.kind);
    ir::OpType op;
    int since;
    switch (p.kind) {
      case PatternKind::kLayerNorm:
        op = ir::OpType::kLayerNormalization;
        since = 17;
        break;
      case PatternKind::kRmsNorm:
        op = ir::OpType::kRMSNormalization;
        since = 23;
        break;
      case PatternKind::kGelu:
        op = ir::OpType::kGelu;
        since = 20;
        break;
      case PatternKind::kSoftmax:
        op = ir::OpType::kSoftmax;
        since = 13;
        break;
      default:
        return absl::OkStatus();
    }
    if (Excluded(members, op, pattern)) {
      if (logger_) logger_->info("fusion {} of {} skipped by --no-fuse", pattern, Names(members));
      return absl::OkStatus();
    }
    if (!IsFloating(p.input->dtype) || p.input->dtype != p.output->dtype) return absl::OkStatus();
    // Normalisations fuse into ops that normalise from `axis` to the end: only the last axis.
    const ir::Shape& xs = p.input->shape;
    bool last_axis = p.axis == -1 || (xs.rank_known && p.axis == xs.rank() - 1);
    if ((p.kind == PatternKind::kLayerNorm || p.kind == PatternKind::kRmsNorm) && !last_axis) {
      Refuse(absl::StrCat(pattern, " of ", Names(members), ": normalises axis ", p.axis,
                          ", not the last one"));
      return absl::OkStatus();
    }
    std::vector<ir::Value*> inputs = {const_cast<ir::Value*>(p.input)};
    if (p.kind == PatternKind::kLayerNorm || p.kind == PatternKind::kRmsNorm) {
      ir::Value* scale = const_cast<ir::Value*>(p.scale);
      if (!scale) {
        if (!xs.rank_known || xs.rank() == 0 || !xs.dims.back().is_static()) {
          Refuse(absl::StrCat(pattern, " of ", Names(members),
                              ": no scale and the normalised dim is not static"));
          return absl::OkStatus();
        }
        ASSIGN_OR_RETURN(
            scale, Ones(xs.dims.back().value, absl::StrCat(members.back()->name, "/fused_ones")));
      }
      inputs.push_back(scale);
      if (p.kind == PatternKind::kLayerNorm && p.bias) {
        inputs.push_back(const_cast<ir::Value*>(p.bias));
      }
    }
    // Named after the last member (in execution order: the one computing the output).
    const std::string name = absl::StrCat(members.back()->name, "/fused_", pattern);
    if (!Absorbable(pattern, members, inputs, p.output)) return absl::OkStatus();
    // The fused kernel's precision: the join of its members', so none is computed lower.
    Precision t = JoinOf(members);
    ir::Node* fused = g_.AddNode(op, name);
    removed_.push_back(false);
    fused->since_version = since;
    fused->inputs = inputs;
    fused->outputs = {const_cast<ir::Value*>(p.output)};
    fused->fusion = pattern;
    switch (p.kind) {
      case PatternKind::kLayerNorm:
      case PatternKind::kRmsNorm:
        fused->attrs["axis"] = Attribute::Int(-1);
        fused->attrs["epsilon"] = Attribute::Float(p.epsilon);
        fused->attrs["stash_type"] = Attribute::Int(1);
        break;
      case PatternKind::kGelu:
        fused->attrs["approximate"] = Attribute::String(p.tanh_approximation ? "tanh" : "none");
        break;
      case PatternKind::kSoftmax:
        fused->attrs["axis"] = Attribute::Int(p.axis);
        break;
      default:
        break;
    }
    for (ir::Node* m : members) {
      fused->sources.insert(fused->sources.end(), m->sources.begin(), m->sources.end());
      removed_[m->id] = true;
      // Interior members compute in fp32; the boundary rounds to t.
      bool boundary = m->outputs.size() == 1 && m->outputs[0] == p.output;
      for (const ir::Value* in : m->inputs) {
        boundary = boundary || (in && (in == p.input));
      }
      for (int s : m->sources) result_.effective[s] = boundary ? t : Precision::kFp32;
    }
    result_.precision[fused] = t;
    result_.applied.push_back(absl::StrCat(pattern, ": ", members.size(), " nodes (",
                                           Names(members), ") -> one ", ir::OpName(op), " at ",
                                           precision::PrecisionName(t)));
    return absl::OkStatus();
  }

  // MatMul(Q, Transpose(K)) [-> scale] [-> Add mask] -> Softmax -> MatMul(., V), all 4-D
  // [batch, heads, seq, head_size] => one Attention (opset 23) with its scale and additive mask.
  // The 3-D batched form (Paddle, SVTR: [batch * heads, seq, head_size], K^T by perm [0, 2, 1])
  // is Attention's 3-D form with one head (q_num_heads = kv_num_heads = 1), with no mask or one
  // of rank <= 2 (a 3-D mask would align its first dim to the heads).
  absl::Status FuseAttention(const PatternInstance& p) {
    if (p.is_op || !o_.enabled || !p.fusable || !p.input || !p.key || !p.value || !p.output) {
      return absl::OkStatus();
    }
    std::vector<ir::Node*> members;
    for (int id : p.nodes) {
      if (removed_[id]) return absl::OkStatus();
      members.push_back(g_.nodes()[id].get());
    }
    const int rank = p.input->shape.rank_known ? p.input->shape.rank() : -1;
    auto ranked = [rank](const ir::Value* v) {
      return v->shape.rank_known && v->shape.rank() == rank;
    };
    if (p.mask_is_condition) {
      if (logger_)
        logger_->info("attention of {} not fused: its mask is a masked_fill", Names(members));
      return absl::OkStatus();
    }
    // The Attention op takes K; exporters feed K^T made by a Transpose of the last two dims.
    ir::Node* tr = p.key->producer;
    // K^T = Transpose(X, perm): K itself is Transpose(X, perm with its last two entries
    // swapped), which is X when perm only swaps the last two dims (the Transpose is absorbed);
    // otherwise (PyTorch's [B, S, H, D] -> [B, H, D, S] in one Transpose) the Transpose stays a
    // node of its own and writes K.
    std::vector<int64_t> kperm = tr ? tr->GetInts("perm") : std::vector<int64_t>{};
    const bool perm_ok = static_cast<int>(kperm.size()) == rank && rank >= 3;
    if (perm_ok) std::swap(kperm[rank - 2], kperm[rank - 1]);
    bool k_is_x = perm_ok;
    for (int i = 0; perm_ok && i < rank; ++i) k_is_x = k_is_x && kperm[i] == i;
    const bool mask_ok =
        !p.mask || (IsFloating(p.mask->dtype) &&
                    (rank == 4 || (p.mask->shape.rank_known && p.mask->shape.rank() <= 2)));
    if ((rank != 3 && rank != 4) || !tr || tr->op != ir::OpType::kTranspose || !perm_ok ||
        removed_[tr->id] || p.key->consumers.size() != 1 || p.key->is_graph_output ||
        !ranked(p.value) || !ranked(tr->inputs[0]) || !mask_ok) {
      if (logger_) {
        logger_->info("attention of {} not fused: not in the 4-D or 3-D batched Q, K^T, V form",
                      Names(members));
      }
      return absl::OkStatus();
    }
    if (k_is_x) members.insert(members.begin(), tr);
    if (Excluded(members, ir::OpType::kAttention, "attention")) return absl::OkStatus();
    ir::Value* key = k_is_x ? tr->inputs[0] : const_cast<ir::Value*>(p.key);
    std::vector<ir::Value*> inputs = {const_cast<ir::Value*>(p.input), key,
                                      const_cast<ir::Value*>(p.value)};
    if (p.mask) inputs.push_back(const_cast<ir::Value*>(p.mask));
    const std::string name = absl::StrCat(members.back()->name, "/fused_attention");
    Precision t = JoinOf(members);
    if (t == Precision::kBf16) {
      // The Attention kernel computes in fp32 FMAs on widened operands; at bf16 the two
      // MatMuls run on bf16 dot products (vdpbf16ps, AMX), measured faster on BERT-base (54 vs
      // 57 ms): the nodes stay apart, with the same precision either way.
      if (logger_) {
        logger_->info("attention of {} not fused: at bf16 its MatMuls run faster apart",
                      Names(members));
      }
      return absl::OkStatus();
    }
    if (!Absorbable("attention", members, inputs, p.output)) return absl::OkStatus();
    if (!k_is_x) {
      // The Transpose now writes K into a value of its own (the model's K^T, whose one reader,
      // the scores' MatMul, is fused away, keeps its name and meaning: the accuracy report
      // compares it, and feeds it, as the model's tensor; here it is computed no more, as any
      // value inside a fused kernel).
      const ir::Shape& xs = tr->inputs[0]->shape;
      ir::Shape ks = xs;
      for (int i = 0; i < rank; ++i) ks.dims[i] = xs.dims[kperm[i]];
      ASSIGN_OR_RETURN(ir::Value * k, g_.AddValue(absl::StrCat(key->name, "/as_key")));
      k->dtype = key->dtype;
      k->shape = ks;
      tr->attrs["perm"] = Attribute::Ints(kperm);
      tr->outputs[0] = k;
      tr->fusion = "attention (writes K)";
      inputs[1] = k;
    }
    ir::Node* fused = g_.AddNode(ir::OpType::kAttention, name);
    fused->since_version = 23;
    fused->inputs = std::move(inputs);
    fused->outputs = {const_cast<ir::Value*>(p.output)};
    fused->attrs["scale"] = Attribute::Float(p.attention_scale);
    if (rank == 3) {
      fused->attrs["q_num_heads"] = Attribute::Int(1);
      fused->attrs["kv_num_heads"] = Attribute::Int(1);
    }
    Commit(fused, members, t, "attention");
    return absl::OkStatus();
  }

  absl::Status FuseConvBatchNorm() {
    if (!o_.enabled) return absl::OkStatus();
    size_t count = g_.nodes().size();
    for (size_t i = 0; i < count; ++i) {
      ir::Node* bn = g_.nodes()[i].get();
      if (removed_[bn->id] || bn->op != ir::OpType::kBatchNormalization) continue;
      if (bn->num_outputs() != 1 || bn->GetInt("training_mode", 0) != 0) continue;
      ir::Value* y = bn->inputs.empty() ? nullptr : bn->inputs[0];
      if (!y || !y->producer || y->producer->op != ir::OpType::kConv) continue;
      ir::Node* conv = y->producer;
      if (removed_[conv->id] || y->consumers.size() != 1 || y->is_graph_output) continue;
      const ir::Value* w = conv->input(1);
      const ir::Value* b = conv->input(2);
      bool consts = Known(w) && w->dtype == DataType::kF32 &&
                    (!b || (Known(b) && b->dtype == DataType::kF32));
      for (int k = 1; k <= 4; ++k) {
        const ir::Value* v = bn->input(k);
        consts = consts && Known(v) && v->dtype == DataType::kF32;
      }
      if (!consts) continue;
      std::vector<ir::Node*> members = {conv, bn};
      if (Excluded(members, ir::OpType::kConv, "conv+batchnorm")) continue;
      const auto& ca = Assigned(*conv);
      const auto& ba = Assigned(*bn);
      if (!precision::AtLeast(ca.assigned, ba.assigned)) {
        Refuse(absl::StrCat("conv+batchnorm of ", Names(members), ": ", bn->Label(),
                            " is assigned ", precision::PrecisionName(ba.assigned), " by ", ba.rule,
                            ", and folding it into the weights of ", conv->Label(), " (",
                            precision::PrecisionName(ca.assigned), ") would compute it lower"));
        continue;
      }
      const ir::Tensor& wt = *Known(w);
      int64_t oc = wt.dim(0);
      const ir::Tensor* scale = Known(bn->input(1));
      const ir::Tensor* beta = Known(bn->input(2));
      const ir::Tensor* mean = Known(bn->input(3));
      const ir::Tensor* var = Known(bn->input(4));
      if (scale->num_elements() != oc || beta->num_elements() != oc || mean->num_elements() != oc ||
          var->num_elements() != oc || (b && Known(b)->num_elements() != oc)) {
        continue;
      }
      double eps = bn->GetFloat("epsilon", 1e-5f);
      ASSIGN_OR_RETURN(ir::Tensor nw, ir::Tensor::Allocate(DataType::kF32, wt.dims()));
      ASSIGN_OR_RETURN(ir::Tensor nb, ir::Tensor::Allocate(DataType::kF32, {oc}));
      int64_t per = wt.num_elements() / std::max<int64_t>(oc, 1);
      for (int64_t o = 0; o < oc; ++o) {
        double s =
            scale->data<float>()[o] / std::sqrt(static_cast<double>(var->data<float>()[o]) + eps);
        for (int64_t k = 0; k < per; ++k) {
          nw.data<float>()[o * per + k] = static_cast<float>(wt.data<float>()[o * per + k] * s);
        }
        double bias = b ? Known(b)->data<float>()[o] : 0.0;
        nb.data<float>()[o] =
            static_cast<float>((bias - mean->data<float>()[o]) * s + beta->data<float>()[o]);
      }
      ASSIGN_OR_RETURN(ir::Value * wv,
                       AddConstant(absl::StrCat(w->name, "/folded_", bn->name), std::move(nw)));
      ASSIGN_OR_RETURN(ir::Value * bv,
                       AddConstant(absl::StrCat(bn->name, "/folded_bias"), std::move(nb)));
      conv->inputs = {conv->inputs[0], wv, bv};
      conv->outputs = {bn->outputs[0]};
      conv->sources.insert(conv->sources.end(), bn->sources.begin(), bn->sources.end());
      conv->fusion = "conv+batchnorm";
      removed_[bn->id] = true;
      result_.precision[conv] = ca.assigned;
      for (int s : conv->sources) result_.effective[s] = ca.assigned;
      result_.applied.push_back(absl::StrCat("conv+batchnorm: ", Names(members), " -> one Conv at ",
                                             precision::PrecisionName(ca.assigned)));
    }
    g_.RebuildEdges();
    return absl::OkStatus();
  }

  // The values of `v` when they are known before constant folding: a constant's, or those of
  // the constant an Unsqueeze or Reshape (same values, same order) gives another shape.
  static const ir::Tensor* ConstantValues(const ir::Value* v) {
    if (!v) return nullptr;
    if (const ir::Tensor* t = Known(v)) return t;
    const ir::Node* p = v->producer;
    if (p && (p->op == ir::OpType::kUnsqueeze || p->op == ir::OpType::kReshape) && p->input(0) &&
        Known(p->input(0))) {
      return Known(p->input(0));
    }
    return nullptr;
  }

  // The fp32 values a 2-D convolution's output [N, C, H, W] is multiplied or shifted by, channel
  // by channel, when `v` is such a constant ([C, 1, 1], [1, C, 1, 1] or one value); else null.
  static const ir::Tensor* ChannelConstant(const ir::Value* v, int64_t channels) {
    const ir::Tensor* t = ConstantValues(v);
    if (!t || v->dtype != DataType::kF32 || t->dtype() != DataType::kF32 || !v->shape.is_static()) {
      return nullptr;
    }
    const std::vector<int64_t> d = v->shape.StaticDims();
    if (ir::NumElementsOf(d) != t->num_elements() || d.size() > 4) return nullptr;
    return t->num_elements() == 1 || IsPerChannelDims(d, channels) ? t : nullptr;
  }

  // The output channels of `base` when a per-channel scale and shift can be folded into its
  // constants: a 2-D Conv with fp32 constant W (and B), or a BatchNormalization in inference mode
  // (opset 9 on) with fp32 constant parameters; else 0.
  static int64_t ScalableChannels(const ir::Node& base) {
    if (base.num_outputs() != 1 || !base.outputs[0]) return 0;
    auto fp32_constant = [](const ir::Value* v) {
      return v && Known(v) && v->dtype == DataType::kF32 && Known(v)->dtype() == DataType::kF32;
    };
    if (base.op == ir::OpType::kConv) {
      const ir::Value* w = base.input(1);
      const ir::Value* b = base.input(2);
      if (!fp32_constant(w) || Known(w)->rank() != 4 || (b && !fp32_constant(b))) return 0;
      const int64_t oc = Known(w)->dim(0);
      return !b || Known(b)->num_elements() == oc ? oc : 0;
    }
    if (base.op != ir::OpType::kBatchNormalization || base.num_inputs() != 5 ||
        base.since_version < 9 || base.GetInt("training_mode", 0) != 0 ||
        !base.outputs[0]->shape.rank_known || base.outputs[0]->shape.rank() != 4) {
      return 0;
    }
    const int64_t c = fp32_constant(base.input(1)) ? Known(base.input(1))->num_elements() : 0;
    for (int k = 1; k <= 4; ++k) {
      if (!fp32_constant(base.input(k)) || Known(base.input(k))->num_elements() != c) return 0;
    }
    return c;
  }

  // A Conv or BatchNormalization (ScalableChannels) -> Mul by a per-channel constant s [-> Add of
  // a per-channel constant t] (a scale layer, or a BatchNormalization written as Mul and Add):
  // folded into the convolution's weights and bias (W' = W * s, B' = B * s + t) or the
  // BatchNormalization's scale and bias (scale' = scale * s, B' = B * s + t), per channel, in
  // double and rounded once to fp32, as conv+batchnorm folds.
  absl::Status FuseScale() {
    if (!o_.enabled) return absl::OkStatus();
    size_t count = g_.nodes().size();
    for (size_t i = 0; i < count; ++i) {
      ir::Node* mul = g_.nodes()[i].get();
      if (removed_[mul->id] || mul->op != ir::OpType::kMul || mul->num_inputs() != 2 ||
          mul->num_outputs() != 1 || !mul->outputs[0]) {
        continue;
      }
      int bi = -1;  // the Mul's input a foldable node produces
      int64_t oc = 0;
      for (int k = 0; k < 2 && bi < 0; ++k) {
        const ir::Value* v = mul->inputs[k];
        if (!v || !v->producer || removed_[v->producer->id]) continue;
        oc = ScalableChannels(*v->producer);
        if (oc > 0) bi = k;
      }
      if (bi < 0) continue;
      ir::Value* y = mul->inputs[bi];
      ir::Node* base = y->producer;
      if (y->consumers.size() != 1 || y->is_graph_output) continue;
      const ir::Tensor* sv = ChannelConstant(mul->inputs[1 - bi], oc);
      if (!sv) continue;
      // The Add of a per-channel constant after it, when the Mul's output goes there alone.
      ir::Node* add = nullptr;
      const ir::Tensor* tv = nullptr;
      ir::Value* scaled = mul->outputs[0];
      if (scaled->consumers.size() == 1 && !scaled->is_graph_output) {
        ir::Node* c = scaled->consumers[0];
        if (!removed_[c->id] && c->op == ir::OpType::kAdd && c->num_inputs() == 2 &&
            c->num_outputs() == 1 && c->outputs[0] && c->inputs[0] != c->inputs[1]) {
          const int mi = c->inputs[0] == scaled ? 0 : 1;
          tv = ChannelConstant(c->inputs[1 - mi], oc);
          if (tv) add = c;
        }
      }
      const bool conv = base->op == ir::OpType::kConv;
      const char* pattern = conv ? "conv+scale" : "batchnorm+scale";
      std::vector<ir::Node*> members = {base, mul};
      if (add) members.push_back(add);
      if (Excluded(members, base->op, pattern)) continue;
      const auto& ba = Assigned(*base);
      bool lower = false;
      for (size_t m = 1; m < members.size(); ++m) {
        const auto& ma = Assigned(*members[m]);
        if (precision::AtLeast(ba.assigned, ma.assigned)) continue;
        Refuse(absl::StrCat(pattern, " of ", Names(members), ": ", members[m]->Label(),
                            " is assigned ", precision::PrecisionName(ma.assigned), " by ", ma.rule,
                            ", and folding it into the constants of ", base->Label(), " (",
                            precision::PrecisionName(ba.assigned), ") would compute it lower"));
        lower = true;
        break;
      }
      if (lower) continue;
      auto at = [](const ir::Tensor* t, int64_t o) -> double {
        return t->data<float>()[t->num_elements() == 1 ? 0 : o];
      };
      // The multiplied constant (W, or the BatchNormalization's scale) and the shifted one (the
      // bias, absent from a Conv without one).
      const ir::Value* mv = base->input(1);
      const ir::Value* bv0 = base->input(2);
      const ir::Tensor& mt = *Known(mv);
      ASSIGN_OR_RETURN(ir::Tensor nm, ir::Tensor::Allocate(DataType::kF32, mt.dims()));
      ASSIGN_OR_RETURN(ir::Tensor nb, ir::Tensor::Allocate(DataType::kF32, {oc}));
      const int64_t per = mt.num_elements() / oc;
      for (int64_t o = 0; o < oc; ++o) {
        const double sc = at(sv, o);
        for (int64_t k = 0; k < per; ++k) {
          nm.data<float>()[o * per + k] = static_cast<float>(mt.data<float>()[o * per + k] * sc);
        }
        const double bias = bv0 ? Known(bv0)->data<float>()[o] : 0.0;
        nb.data<float>()[o] = static_cast<float>(bias * sc + (tv ? at(tv, o) : 0.0));
      }
      ASSIGN_OR_RETURN(ir::Value * mnew,
                       AddConstant(absl::StrCat(mv->name, "/scaled_", mul->name), std::move(nm)));
      ASSIGN_OR_RETURN(ir::Value * bnew,
                       AddConstant(absl::StrCat(mul->name, "/scaled_bias"), std::move(nb)));
      if (conv) {
        base->inputs = {base->inputs[0], mnew, bnew};
      } else {
        base->inputs[1] = mnew;
        base->inputs[2] = bnew;
      }
      base->outputs = {members.back()->outputs[0]};
      for (size_t m = 1; m < members.size(); ++m) {
        base->sources.insert(base->sources.end(), members[m]->sources.begin(),
                             members[m]->sources.end());
        removed_[members[m]->id] = true;
      }
      const std::string label = conv ? "conv+scale" : "batchnorm+scale";
      base->fusion = base->fusion.empty() ? label : absl::StrCat(base->fusion, "+scale");
      result_.precision[base] = ba.assigned;
      for (int src : base->sources) result_.effective[src] = ba.assigned;
      result_.applied.push_back(absl::StrCat(label, ": ", Names(members), " -> one ",
                                             ir::OpName(base->op), " at ",
                                             precision::PrecisionName(ba.assigned)));
    }
    g_.RebuildEdges();
    return absl::OkStatus();
  }

  ir::Graph& g_;
  const precision::Assignment& a_;
  const FusionOptions& o_;
  spdlog::logger* logger_;
  std::vector<bool> removed_;
  FusionResult result_;
};

}  // namespace

bool FusionExcluded(const FusionOptions& options, const std::vector<const ir::Node*>& members,
                    ir::OpType op, const char* pattern) {
  for (const std::string& sel : options.no_fuse) {
    auto colon = sel.find(':');
    std::string kind = sel.substr(0, colon), arg = sel.substr(colon + 1);
    if (kind == "pattern" && arg == pattern) return true;
    if (kind == "op" && arg == ir::OpName(op)) return true;
    for (const ir::Node* n : members) {
      if (kind == "op" && arg == ir::OpName(n->op)) return true;
      if (kind == "scope" && absl::StartsWith(n->name, arg)) return true;
    }
  }
  return false;
}

absl::Status ValidateNoFuse(const std::vector<std::string>& selectors) {
  for (const std::string& s : selectors) {
    auto colon = s.find(':');
    std::string kind = colon == std::string::npos ? "" : s.substr(0, colon);
    if ((kind != "op" && kind != "scope" && kind != "pattern") || colon + 1 >= s.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--no-fuse '", s, "': expected op:TYPE, scope:PREFIX or pattern:NAME"));
    }
    std::string name = s.substr(colon + 1);
    bool linear = name == "conv+batchnorm" || name == "conv+scale" || name == "batchnorm+scale" ||
                  name == "conv+activation" || name == "conv+residual" || name == "matmul+bias" ||
                  name == "add+layernorm" || name == "conv-chain" || name == "qdq-matmul" ||
                  name == "qdq-conv" || name == "conv-integer-to-float" ||
                  name == "matmul-integer-to-float";
    if (kind == "pattern" && !precision::PatternFromName(name) && !linear) {
      return absl::InvalidArgumentError(
          absl::StrCat("--no-fuse '", s,
                       "': unknown pattern (layernorm, rmsnorm, gelu, softmax, attention, "
                       "conv+batchnorm, conv+scale, batchnorm+scale, conv+activation, "
                       "conv+residual, matmul+bias, add+layernorm, conv-chain, qdq-matmul, "
                       "qdq-conv, conv-integer-to-float, matmul-integer-to-float)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<FusionResult> Fuse(ir::Graph& graph, const precision::Assignment& assignment,
                                  const std::vector<PatternInstance>& patterns,
                                  const FusionOptions& options, spdlog::logger* logger) {
  RETURN_IF_ERROR(ValidateNoFuse(options.no_fuse));
  graph.RebuildEdges();
  return Fuser(graph, assignment, options, logger).Run(patterns);
}

}  // namespace kiln::passes
