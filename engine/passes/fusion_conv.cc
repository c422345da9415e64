// The convolution fusions of the fusion pass (passes/fusion.h): Conv + BatchNormalization and
// Conv / BatchNormalization + per-channel scale folded into the constants, and Conv + activation
// (Relu, LeakyRelu, Clip, HardSwish, Sigmoid, SiLU, HardSwish written out) or + residual
// [+ activation] into FusedConv. Members of the Fuser declared in fusion_internal.h.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/passes/fusion_internal.h"
#include "engine/passes/layout.h"

namespace kiln::passes::fusion_internal {

// The FusedConv activation of node `a` ("" when it is none FusedConv takes): Relu, LeakyRelu,
// Clip (constant bounds), HardSwish, Sigmoid.
std::string Fuser::ConvActivationOf(const ir::Node& a) {
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
ir::Node* Fuser::NewFusedConv(const ir::Node& conv, const ir::Node* a, const std::string& act) {
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
bool Fuser::FuseConvSilu(ir::Node* conv) {
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
std::optional<double> Fuser::Scalar(const ir::Value* v) {
  const ir::Tensor* t = Known(v);
  if (t == nullptr || t->num_elements() != 1 || !IsFloating(t->dtype())) return std::nullopt;
  return ir::ElementAsDouble(*t, 0);
}

// `n` is a binary `op` of `x` and a one-element constant (either order for Add and Mul):
// that constant.
std::optional<double> Fuser::WithScalar(const ir::Node* n, ir::OpType op, const ir::Value* x) {
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
bool Fuser::FuseConvHardSwishWritten(ir::Node* conv) {
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
void Fuser::FuseConvActivation(ir::Node* conv) {
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
void Fuser::FuseConvResidual(ir::Node* conv) {
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

absl::Status Fuser::FuseConvBatchNorm() {
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
    bool consts =
        Known(w) && w->dtype == DataType::kF32 && (!b || (Known(b) && b->dtype == DataType::kF32));
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
      Refuse(absl::StrCat("conv+batchnorm of ", Names(members), ": ", bn->Label(), " is assigned ",
                          precision::PrecisionName(ba.assigned), " by ", ba.rule,
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
const ir::Tensor* Fuser::ConstantValues(const ir::Value* v) {
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
const ir::Tensor* Fuser::ChannelConstant(const ir::Value* v, int64_t channels) {
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
int64_t Fuser::ScalableChannels(const ir::Node& base) {
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
absl::Status Fuser::FuseScale() {
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

}  // namespace kiln::passes::fusion_internal
