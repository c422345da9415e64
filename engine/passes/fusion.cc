// The fusion pass (passes/fusion.h): the Fuser's driver (Run, Compact) and shared helpers, the
// pattern fusions (LayerNorm, RMSNorm, GELU, Softmax), attention, MatMul + bias [+ activation],
// residual Add + LayerNorm, and the public functions (Fuse, FusionExcluded, ValidateNoFuse). The
// convolution fusions are in fusion_conv.cc; the Fuser class is in fusion_internal.h.
#include "engine/passes/fusion.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/passes/fusion_internal.h"

namespace kiln::passes {
namespace fusion_internal {

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

absl::StatusOr<FusionResult> Fuser::Run(const std::vector<PatternInstance>& patterns) {
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

const precision::NodeAssignment& Fuser::Assigned(const ir::Node& n) {
  return a_.nodes[n.sources[0]];
}

void Fuser::Compact() {
  g_.RemoveNodes(removed_);
  removed_.assign(g_.nodes().size(), false);
}

// The precision `n` computes at before lowering: a fused node's, else its assignment.
Precision Fuser::PrecisionOf(const ir::Node& n) {
  auto it = result_.precision.find(&n);
  if (it != result_.precision.end()) return it->second;
  const auto& a = Assigned(n);
  return a.floating ? a.assigned : Precision::kFp32;
}

// A source of `n` assigned higher than `t` (which computing at `t` would lower), or -1.
int Fuser::LoweredSource(const ir::Node& n, Precision t) {
  for (int s : n.sources) {
    const auto& a = a_.nodes[s];
    if (a.floating && !precision::AtLeast(t, a.assigned)) return s;
  }
  return -1;
}

// The only node reading `v` (once), when `v` is not also a graph output.
ir::Node* Fuser::SoleConsumer(const ir::Value* v) {
  if (!v || v->is_graph_output || v->consumers.size() != 1) return nullptr;
  ir::Node* c = v->consumers[0];
  int uses = 0;
  for (const ir::Value* in : c->inputs) uses += in == v;
  return uses == 1 && !removed_[c->id] ? c : nullptr;
}

// Checks that computing `members` at `t` lowers none of them; logs the refusal otherwise.
bool Fuser::Allowed(const char* fusion, const std::vector<ir::Node*>& members, Precision t) {
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
Precision Fuser::JoinOf(const std::vector<ir::Node*>& members) {
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
void Fuser::Commit(ir::Node* fused, const std::vector<ir::Node*>& members, Precision t,
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
bool Fuser::Absorbable(const char* fusion, std::vector<ir::Node*>& members,
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
        Refuse(absl::StrCat(fusion, " of ", Names(members), ": ", m->Label(), " output '", v->name,
                            "' is read outside the instance"));
        return false;
      }
    }
  }
  if (computing.empty()) return false;
  if (!kept.empty() && logger_) {
    logger_->debug("{} of {}: {} kept as node(s) of their own (the fused node reads them)", fusion,
                   Names(members), Names(kept));
  }
  members = std::move(absorbed);
  return true;
}

absl::Status Fuser::FuseLinear() {
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
absl::Status Fuser::FuseMatMulBias(ir::Node* mm) {
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
    if (act != "Relu" && act != "Sigmoid" && act != "Tanh" && act != "Gelu" && act != "GeluTanh") {
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

// Add(residual) -> LayerNormalization(last axis) => AddLayerNorm, which also outputs the sum
// when other nodes read it (the residual stream).
void Fuser::FuseAddLayerNorm(ir::Node* add) {
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
bool Fuser::Excluded(const std::vector<ir::Node*>& members, ir::OpType op, const char* pattern) {
  return FusionExcluded(o_, {members.begin(), members.end()}, op, pattern);
}

std::string Fuser::Names(const std::vector<ir::Node*>& members) {
  std::vector<std::string> names;
  for (const ir::Node* n : members) names.push_back(absl::StrCat("'", n->name, "'"));
  return absl::StrJoin(names, ", ");
}

void Fuser::Refuse(std::string why) {
  if (logger_) logger_->warn("fusion refused: {}", why);
  result_.refusals.push_back(std::move(why));
}

// A new value `name` holding constant `t`.
absl::StatusOr<ir::Value*> Fuser::AddConstant(const std::string& name, ir::Tensor t) {
  ASSIGN_OR_RETURN(ir::Value * v, g_.AddValue(name));
  v->dtype = t.dtype();
  v->shape = ir::Shape::Of(t.dims());
  v->constant = std::move(t);
  return v;
}

// A constant float vector of ones with `d` elements (scale of a LayerNorm without gamma).
absl::StatusOr<ir::Value*> Fuser::Ones(int64_t d, const std::string& name) {
  ASSIGN_OR_RETURN(ir::Tensor t, ir::Tensor::Allocate(DataType::kF32, {d}));
  for (int64_t i = 0; i < d; ++i) t.data<float>()[i] = 1.0f;
  return AddConstant(name, std::move(t));
}

absl::Status Fuser::FusePattern(const PatternInstance& p) {
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
  result_.applied.push_back(absl::StrCat(pattern, ": ", members.size(), " nodes (", Names(members),
                                         ") -> one ", ir::OpName(op), " at ",
                                         precision::PrecisionName(t)));
  return absl::OkStatus();
}

// MatMul(Q, Transpose(K)) [-> scale] [-> Add mask] -> Softmax -> MatMul(., V), all 4-D
// [batch, heads, seq, head_size] => one Attention (opset 23) with its scale and additive mask.
// The 3-D batched form (Paddle, SVTR: [batch * heads, seq, head_size], K^T by perm [0, 2, 1])
// is Attention's 3-D form with one head (q_num_heads = kv_num_heads = 1), with no mask or one
// of rank <= 2 (a 3-D mask would align its first dim to the heads).
absl::Status Fuser::FuseAttention(const PatternInstance& p) {
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

}  // namespace fusion_internal

using fusion_internal::Fuser;
using precision::PatternInstance;

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
