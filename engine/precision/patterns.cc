// Pattern recognition: the driver (Matcher::Run), the bookkeeping every instance goes through,
// the op forms and attention. Each decomposed form is matched from one anchor op (Sqrt or
// Pow(., +-0.5) and BatchNormalization for the norms: patterns_norm.cc; Erf/Tanh for GELU and
// Exp for Softmax: patterns_activation.cc; a Softmax instance for attention: here) by walking a
// bounded number of edges (pattern_forms.h), so the whole search is linear in the graph size.
//
// Rules every decomposed instance obeys:
//  - Interior values (every node output but the instance output) are consumed only inside the
//    instance and are not graph outputs. If another node reads one, rewriting the instance into
//    one kernel would remove a value that node needs, and a precision rule for the pattern would
//    silently change what that outside node sees; so such a subgraph is not an instance.
//  - A Constant node whose output only the instance reads (eps, 0.5, the exponent 2, ReduceMean
//    axes) belongs to the instance: a `pattern:` rule then covers the constant too, so eps is not
//    rounded to fp16 before an fp32 LayerNorm reads it. Shared Constant nodes and initializers
//    are inputs, not members.
//  - Instances do not overlap: a node belongs to at most one instance, except that an attention
//    instance contains the Softmax instance inside it.
#include "engine/precision/patterns.h"

#include <algorithm>
#include <cmath>

#include "engine/precision/pattern_forms.h"
#include "engine/precision/pattern_matcher.h"

namespace kiln::precision {

const char* PatternName(PatternKind k) {
  switch (k) {
    case PatternKind::kLayerNorm:
      return "layernorm";
    case PatternKind::kRmsNorm:
      return "rmsnorm";
    case PatternKind::kGelu:
      return "gelu";
    case PatternKind::kSoftmax:
      return "softmax";
    case PatternKind::kAttention:
      return "attention";
  }
  return "?";
}

std::optional<PatternKind> PatternFromName(absl::string_view name) {
  for (PatternKind k : {PatternKind::kLayerNorm, PatternKind::kRmsNorm, PatternKind::kGelu,
                        PatternKind::kSoftmax, PatternKind::kAttention}) {
    if (name == PatternName(k)) return k;
  }
  return std::nullopt;
}

namespace internal {
namespace {

size_t NumInputs(const std::vector<const Node*>& nodes) {
  size_t k = 0;
  for (const Node* n : nodes) k += n->inputs.size();
  return k;
}

bool Contains(const std::vector<const Node*>& nodes, const Node* n) {
  return std::find(nodes.begin(), nodes.end(), n) != nodes.end();
}

// `v` = MatMul(Q, K^T) [/ c | * c]: the MatMul, the scale in `inst`, the nodes in `nodes`.
const Node* Scores(const Value* v, PatternInstance* inst, std::vector<const Node*>* nodes) {
  if (v == nullptr || v->producer == nullptr) return nullptr;
  const Node* n = v->producer;
  if (n->op == OpType::kDiv) {
    auto c = ScalarConst(n->input(1));
    if (!c || *c == 0) return nullptr;
    inst->attention_scale = static_cast<float>(1.0 / *c);
    nodes->push_back(n);
    v = n->input(0);
  } else if (n->op == OpType::kMul && n->num_inputs() == 2) {
    int side = ScalarConst(n->input(1)) ? 1 : ScalarConst(n->input(0)) ? 0 : -1;
    if (side < 0) return nullptr;
    inst->attention_scale = static_cast<float>(*ScalarConst(n->input(side)));
    nodes->push_back(n);
    v = n->input(1 - side);
  }
  const Node* qk = Prod(v, OpType::kMatMul);
  if (qk != nullptr) nodes->push_back(qk);
  return qk;
}

}  // namespace

Matcher::Matcher(const ir::Graph& graph) : graph_(graph) {
  const auto& nodes = graph.nodes();
  pos_.assign(nodes.size(), 0);
  claimed_.assign(nodes.size(), false);
  auto order = graph.TopologicalOrder();
  if (order.ok()) {
    for (size_t i = 0; i < order->size(); ++i) {
      order_.push_back((*order)[i]);
      pos_[(*order)[i]->id] = static_cast<int>(i);
    }
  } else {
    // An imported graph is acyclic; keep ONNX order rather than fail for a hand-built one.
    for (const auto& n : nodes) {
      pos_[n->id] = n->id;
      order_.push_back(n.get());
    }
  }
}

std::vector<PatternInstance> Matcher::Run() {
  for (const Node* n : order_) MatchOp(*n);
  for (const Node* n : order_) {
    if (n->op == OpType::kSqrt || n->op == OpType::kPow) MatchNorm(*n);
    if (n->op == OpType::kBatchNormalization) MatchBatchNormLayerNorm(*n);
  }
  for (const Node* n : order_) {
    if (n->op == OpType::kErf) MatchGeluErf(*n);
    if (n->op == OpType::kTanh) MatchGeluTanh(*n);
    if (n->op == OpType::kExp) MatchSoftmax(*n);
  }
  // Attention anchors on Softmax instances, found above.
  size_t num = out_.size();
  for (size_t i = 0; i < num; ++i) {
    // A copy: committing an attention instance grows out_.
    if (out_[i].inst.kind == PatternKind::kSoftmax) MatchAttention(PatternInstance(out_[i].inst));
  }
  // Report in execution order (an attention after the Softmax it contains).
  std::stable_sort(out_.begin(), out_.end(), [](const Found& a, const Found& b) {
    return a.order_key != b.order_key ? a.order_key < b.order_key : a.inst.kind < b.inst.kind;
  });
  std::vector<PatternInstance> result;
  result.reserve(out_.size());
  for (auto& i : out_) result.push_back(std::move(i.inst));
  return result;
}

bool Matcher::Free(const std::vector<const Node*>& nodes) const {
  return std::none_of(nodes.begin(), nodes.end(), [&](const Node* n) { return claimed_[n->id]; });
}

// True when every output of `nodes` except `output` is read only inside `nodes` and is not a
// graph output (see the file comment for why).
bool Matcher::Closed(const std::vector<const Node*>& nodes, const Value* output) {
  size_t inputs = NumInputs(nodes);
  for (const Node* n : nodes) {
    for (const Value* v : n->outputs) {
      if (v == nullptr || v == output) continue;
      // More readers than the instance has inputs: some are outside (and no long scan).
      if (v->is_graph_output || v->consumers.size() > inputs) return false;
      for (const Node* c : v->consumers) {
        if (!Contains(nodes, c)) return false;
      }
    }
  }
  return true;
}

// Adds the Constant nodes only `nodes` read. A Constant shared by many nodes is skipped by its
// consumer count, so instances reading one shared constant cost no more than their own size.
void Matcher::AddOwnConstants(std::vector<const Node*>* nodes) const {
  size_t n = nodes->size();
  size_t inputs = NumInputs(*nodes);
  for (size_t i = 0; i < n; ++i) {
    for (const Value* in : (*nodes)[i]->inputs) {
      const Node* p = Prod(in, OpType::kConstant);
      if (p == nullptr || claimed_[p->id] || in->is_graph_output || in->consumers.size() > inputs ||
          Contains(*nodes, p)) {
        continue;
      }
      bool own = std::all_of(in->consumers.begin(), in->consumers.end(),
                             [&](const Node* c) { return Contains(*nodes, c); });
      if (own) nodes->push_back(p);
    }
  }
}

void Matcher::Commit(PatternInstance inst, std::vector<const Node*> nodes) {
  if (!inst.is_op) AddOwnConstants(&nodes);
  std::sort(nodes.begin(), nodes.end(),
            [&](const Node* a, const Node* b) { return pos_[a->id] < pos_[b->id]; });
  inst.nodes.clear();
  for (const Node* n : nodes) {
    inst.nodes.push_back(n->id);
    claimed_[n->id] = true;
  }
  int key = pos_[nodes.back()->id];
  out_.push_back(Found{std::move(inst), key});
}

// ---------------------------------------------------------------------------- op forms
void Matcher::MatchOp(const Node& n) {
  PatternInstance inst;
  inst.is_op = true;
  inst.input = n.input(0);
  inst.output = Out(&n);
  switch (n.op) {
    case OpType::kLayerNormalization:
      inst.kind = PatternKind::kLayerNorm;
      inst.scale = n.input(1);
      inst.bias = n.input(2);
      inst.epsilon = n.GetFloat("epsilon", 1e-5f);
      inst.axis = n.GetInt("axis", -1);
      break;
    case OpType::kRMSNormalization:
      inst.kind = PatternKind::kRmsNorm;
      inst.scale = n.input(1);
      inst.epsilon = n.GetFloat("epsilon", 1e-5f);
      inst.axis = n.GetInt("axis", -1);
      break;
    case OpType::kGelu:
      inst.kind = PatternKind::kGelu;
      inst.tanh_approximation = n.GetString("approximate", "none") == "tanh";
      break;
    case OpType::kSoftmax:
      inst.kind = PatternKind::kSoftmax;
      // Before opset 13 the default axis is 1 (and the input is coerced to 2-D).
      inst.axis = n.GetInt("axis", n.since_version >= 13 ? -1 : 1);
      break;
    case OpType::kAttention: {
      inst.kind = PatternKind::kAttention;
      // The op takes K itself (it transposes internally), not K^T; fusion uses the op's own
      // attributes (is_causal, softcap, head counts) anyway.
      inst.key = n.input(1);
      inst.value = n.input(2);
      inst.mask = n.input(3);
      if (n.has_attr("scale")) {
        inst.attention_scale = n.GetFloat("scale", 1);
      } else if (const Value* q = n.input(0); q && q->shape.rank_known && q->shape.rank() > 0 &&
                                              q->shape.dims.back().is_static()) {
        // Default 1/sqrt(head_size); a 3-D Q packs q_num_heads heads in its last dim.
        int64_t head = q->shape.dims.back().value;
        if (q->shape.rank() == 3) head /= std::max<int64_t>(1, n.GetInt("q_num_heads", 1));
        if (head > 0) inst.attention_scale = 1.0f / std::sqrt(static_cast<float>(head));
      }
      break;
    }
    default:
      return;
  }
  Commit(std::move(inst), {&n});
}

// ---------------------------------------------------------------------------- Attention
// MatMul(Q, K^T) [/ c | * c] [+ mask | Where(cond, fill, .)] -> Softmax -> MatMul(., V).
void Matcher::MatchAttention(const PatternInstance& sm) {
  // Scores are normalised along their last axis.
  int rank = RankOf(sm.input);
  if (!(sm.axis == -1 || (rank > 0 && sm.axis == rank - 1))) return;
  const Node* pv = OnlyConsumer(sm.output, OpType::kMatMul);
  if (pv == nullptr || pv->input(0) != sm.output) return;

  PatternInstance inst;
  inst.kind = PatternKind::kAttention;
  inst.fusable = sm.fusable;  // an unproven Softmax leaves the attention unproven too
  inst.value = pv->input(1);
  inst.output = Out(pv);
  std::vector<const Node*> own = {pv};
  const Value* s = sm.input;
  const Node* qk = nullptr;
  if (const Node* add = Prod(s, OpType::kAdd); add && add->num_inputs() == 2) {
    for (int i = 0; i < 2 && qk == nullptr; ++i) {
      std::vector<const Node*> chain = {add};
      inst.attention_scale = 1;  // a failed try on the other side may have set it
      qk = Scores(add->input(i), &inst, &chain);
      if (qk != nullptr) {
        inst.mask = add->input(1 - i);
        own.insert(own.end(), chain.begin(), chain.end());
      }
    }
  } else if (const Node* where = Prod(s, OpType::kWhere)) {
    // PyTorch's masked_fill: Where(cond, -inf, scores). Recognised when the fill is a
    // constant that masks (<= -1e4, i.e. -inf, finfo.min, -1e9 or -1e4); the condition is an
    // input of the instance like K and V, whatever computes it (in gpt2_causal a Trilu of a
    // ConstantOfShape sized by the sequence length, which stays outside the instance).
    auto fill = ScalarConst(where->input(1));
    if (fill && *fill <= -1e4) {
      own.push_back(where);
      qk = Scores(where->input(2), &inst, &own);
      inst.mask = where->input(0);
      inst.mask_is_condition = true;
      inst.mask_fill = static_cast<float>(*fill);
    }
  } else {
    qk = Scores(s, &inst, &own);
  }
  if (qk == nullptr) return;
  inst.input = qk->input(0);
  inst.key = qk->input(1);

  // The Softmax nodes belong to their own instance too; only the rest must be free.
  std::vector<const Node*> all = own;
  for (int id : sm.nodes) all.push_back(graph_.nodes()[id].get());
  if (!Free(own) || !Closed(all, inst.output)) return;
  Commit(std::move(inst), std::move(all));
}

}  // namespace internal

std::vector<PatternInstance> FindPatterns(const ir::Graph& graph) {
  return internal::Matcher(graph).Run();
}

}  // namespace kiln::precision
