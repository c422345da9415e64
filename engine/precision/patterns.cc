// Pattern recognition. Each decomposed form is matched from one anchor op (Sqrt for the norms,
// Erf/Tanh for GELU, Exp for Softmax, a Softmax instance for attention) by walking a bounded
// number of edges, so the whole search is linear in the graph size.
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

#include "absl/container/flat_hash_map.h"

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

namespace {

using ir::Node;
using ir::OpType;
using ir::Value;

// Constants larger than this are not pattern parameters (eps, 0.5, axes); not reading them keeps
// the search linear even when a big weight sits where a scalar is expected.
constexpr int64_t kMaxConstElements = 64;
constexpr double kSqrt2OverPi = 0.7978845608028654;

// The elements of `v` when it is an initializer or the output of a Constant node.
std::optional<std::vector<double>> ConstValues(const Value* v) {
  if (v == nullptr) return std::nullopt;
  const ir::Tensor* t = nullptr;
  if (v->constant) {
    t = &*v->constant;
  } else if (v->producer != nullptr && v->producer->op == OpType::kConstant) {
    const Node& n = *v->producer;
    if (const ir::Attribute* a = n.attr("value"); a && a->type == ir::Attribute::Type::kTensor) {
      t = &a->t;
    } else if (const ir::Attribute* a = n.attr("value_float")) {
      return std::vector<double>{a->f};
    } else if (const ir::Attribute* a = n.attr("value_floats")) {
      return std::vector<double>(a->floats.begin(), a->floats.end());
    } else if (const ir::Attribute* a = n.attr("value_int")) {
      return std::vector<double>{static_cast<double>(a->i)};
    } else if (const ir::Attribute* a = n.attr("value_ints")) {
      std::vector<double> out;
      for (int64_t x : a->ints) out.push_back(static_cast<double>(x));
      return out;
    }
  }
  if (t == nullptr || !t->defined() || t->dtype() == DataType::kString ||
      t->num_elements() > kMaxConstElements || t->raw_data() == nullptr) {
    return std::nullopt;
  }
  std::vector<double> out(t->num_elements());
  for (int64_t i = 0; i < t->num_elements(); ++i) out[i] = ir::ElementAsDouble(*t, i);
  return out;
}

// The value of a one-element constant.
std::optional<double> ScalarConst(const Value* v) {
  auto vals = ConstValues(v);
  if (!vals || vals->size() != 1) return std::nullopt;
  return (*vals)[0];
}

// Exporters write these constants as float32 (or fp16 in half models): 1e-4 relative covers
// fp32 rounding of 1/sqrt(2), sqrt(2/pi) and 0.044715 and still tells 2 from 3 or 0.5 from 0.7.
bool IsConst(const Value* v, double expected) {
  auto c = ScalarConst(v);
  return c && std::abs(*c - expected) <= 1e-4 * std::abs(expected);
}

bool IsParam(const Value* v) {
  return v != nullptr && (v->constant || v->is_graph_input ||
                          (v->producer != nullptr && v->producer->op == OpType::kConstant));
}

const Value* Out(const Node* n) {
  return n != nullptr && n->num_outputs() > 0 ? n->outputs[0] : nullptr;
}

// The producer of `v` when it is an `op` node.
const Node* Prod(const Value* v, OpType op) {
  return v != nullptr && v->producer != nullptr && v->producer->op == op ? v->producer : nullptr;
}

// The one consumer of `v` when it has exactly one, of type `op`, and `v` is not a graph output.
const Node* OnlyConsumer(const Value* v, OpType op) {
  if (v == nullptr || v->is_graph_output || v->consumers.size() != 1) return nullptr;
  return v->consumers[0]->op == op ? v->consumers[0] : nullptr;
}

// For a binary node with `a` as one input, the other input.
const Value* Other(const Node* n, const Value* a) {
  if (n == nullptr || n->num_inputs() != 2) return nullptr;
  if (n->inputs[0] == a) return n->inputs[1];
  if (n->inputs[1] == a) return n->inputs[0];
  return nullptr;
}

// For a commutative binary node with a scalar constant ~`c` on one side, the other side.
const Value* SideOtherThanConst(const Node* n, double c) {
  if (n == nullptr || n->num_inputs() != 2) return nullptr;
  if (IsConst(n->inputs[1], c)) return n->inputs[0];
  if (IsConst(n->inputs[0], c)) return n->inputs[1];
  return nullptr;
}

// The base of a square: Pow(b, 2) or Mul(b, b); nullptr otherwise.
const Value* SquareBase(const Node* n) {
  if (n == nullptr || n->num_inputs() != 2) return nullptr;
  if (n->op == OpType::kPow && IsConst(n->inputs[1], 2.0)) return n->inputs[0];
  if (n->op == OpType::kMul && n->inputs[0] == n->inputs[1]) return n->inputs[0];
  return nullptr;
}

int RankOf(const Value* v) { return v != nullptr && v->shape.rank_known ? v->shape.rank() : -1; }

// Axes of a Reduce* node, from the attribute (before opset 18 for ReduceMean/Max, 13 for
// ReduceSum) or the constant second input (after). nullopt when unknown or reducing everything.
std::optional<std::vector<int64_t>> ReduceAxes(const Node& n) {
  std::vector<int64_t> axes;
  if (n.has_attr("axes")) {
    axes = n.GetInts("axes");
  } else if (const Value* a = n.input(1)) {
    auto vals = ConstValues(a);
    if (!vals) return std::nullopt;
    for (double x : *vals) axes.push_back(static_cast<int64_t>(x));
  }
  if (axes.empty()) return std::nullopt;
  return axes;
}

bool KeepDims(const Node& n) { return n.GetInt("keepdims", 1) != 0; }

// Axes made negative (counted from the end); nullopt when that cannot be known.
std::optional<std::vector<int64_t>> NegativeAxes(std::vector<int64_t> axes, int rank) {
  for (int64_t& a : axes) {
    if (a >= 0) {
      if (rank < 0 || a >= rank) return std::nullopt;
      a -= rank;
    } else if (rank >= 0 && a < -rank) {
      return std::nullopt;
    }
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

// The first normalised axis (negative) when `n` reduces the trailing axes of its rank-`rank`
// input (-1: unknown), keeping dims.
std::optional<int64_t> TrailingReduceAxis(const Node& n, int rank) {
  if (!KeepDims(n)) return std::nullopt;
  auto raw = ReduceAxes(n);
  if (!raw) return std::nullopt;
  auto axes = NegativeAxes(*raw, rank);
  if (!axes || axes->back() != -1) return std::nullopt;
  for (size_t i = 1; i < axes->size(); ++i) {
    if ((*axes)[i] != (*axes)[i - 1] + 1) return std::nullopt;
  }
  return axes->front();
}

// The single axis (negative when the rank is known) `n` reduces, keeping dims.
std::optional<int64_t> SingleReduceAxis(const Node& n, const Value* x) {
  if (!KeepDims(n)) return std::nullopt;
  auto raw = ReduceAxes(n);
  if (!raw || raw->size() != 1) return std::nullopt;
  int rank = RankOf(x);
  int64_t a = (*raw)[0];
  if (rank >= 0) {
    if (a >= rank || a < -rank) return std::nullopt;
    if (a >= 0) a -= rank;
  }
  return a;
}

class Matcher {
 public:
  explicit Matcher(const ir::Graph& graph) : graph_(graph) {
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

  std::vector<PatternInstance> Run() {
    for (const Node* n : order_) MatchOp(*n);
    for (const Node* n : order_) {
      if (n->op == OpType::kSqrt) MatchNorm(*n);
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

 private:
  struct Found {
    PatternInstance inst;
    int order_key;  // topological position of the instance's last node
  };

  static size_t NumInputs(const std::vector<const Node*>& nodes) {
    size_t k = 0;
    for (const Node* n : nodes) k += n->inputs.size();
    return k;
  }

  static bool Contains(const std::vector<const Node*>& nodes, const Node* n) {
    return std::find(nodes.begin(), nodes.end(), n) != nodes.end();
  }

  bool Free(const std::vector<const Node*>& nodes) const {
    return std::none_of(nodes.begin(), nodes.end(), [&](const Node* n) { return claimed_[n->id]; });
  }

  // True when every output of `nodes` except `output` is read only inside `nodes` and is not a
  // graph output (see the file comment for why).
  static bool Closed(const std::vector<const Node*>& nodes, const Value* output) {
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
  void AddOwnConstants(std::vector<const Node*>* nodes) const {
    size_t n = nodes->size();
    size_t inputs = NumInputs(*nodes);
    for (size_t i = 0; i < n; ++i) {
      for (const Value* in : (*nodes)[i]->inputs) {
        const Node* p = Prod(in, OpType::kConstant);
        if (p == nullptr || claimed_[p->id] || in->is_graph_output ||
            in->consumers.size() > inputs || Contains(*nodes, p)) {
          continue;
        }
        bool own = std::all_of(in->consumers.begin(), in->consumers.end(),
                               [&](const Node* c) { return Contains(*nodes, c); });
        if (own) nodes->push_back(p);
      }
    }
  }

  void Commit(PatternInstance inst, std::vector<const Node*> nodes) {
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
  void MatchOp(const Node& n) {
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

  // ------------------------------------------------------------------- LayerNorm / RMSNorm
  // Sqrt(Add(ReduceMean(Square(d)), eps)) then d / that (Div, or Reciprocal / Div(1, .) and Mul).
  // d = Sub(x, ReduceMean(x)) makes a LayerNorm; otherwise d = x makes an RMSNorm.
  void MatchNorm(const Node& sqrt) {
    std::vector<const Node*> nodes = {&sqrt};
    const Node* add_eps = Prod(sqrt.input(0), OpType::kAdd);
    if (add_eps == nullptr) return;
    const Node* reduce_var = nullptr;
    const Value* eps = nullptr;
    for (int i = 0; i < 2 && reduce_var == nullptr; ++i) {
      reduce_var = Prod(add_eps->input(i), OpType::kReduceMean);
      eps = add_eps->input(1 - i);
    }
    auto eps_value = ScalarConst(eps);
    if (reduce_var == nullptr || !eps_value || !(*eps_value >= 0)) return;
    const Node* square = reduce_var->input(0) ? reduce_var->input(0)->producer : nullptr;
    const Value* d = SquareBase(square);
    if (d == nullptr) return;
    nodes.insert(nodes.end(), {add_eps, reduce_var, square});
    const Node* sub = Prod(d, OpType::kSub);
    const Node* reduce_mean = sub ? Prod(sub->input(1), OpType::kReduceMean) : nullptr;
    bool same_x = reduce_mean != nullptr && reduce_mean->input(0) == sub->input(0);
    // x - mean(x, keepdims) has x's rank. Import infers no shape after a ReduceMean whose axes
    // come from a Constant node (opset 18), so d's rank may be unknown where x's is known.
    int rank = RankOf(d) >= 0 || !same_x ? RankOf(d) : RankOf(sub->input(0));
    auto axis = TrailingReduceAxis(*reduce_var, rank);
    if (!axis) return;

    PatternInstance inst;
    inst.epsilon = static_cast<float>(*eps_value);
    inst.axis = *axis;
    // A LayerNorm subtracts the mean of the same x over the same axes as the variance.
    bool centred = same_x && TrailingReduceAxis(*reduce_mean, RankOf(sub->input(0))) == axis;
    if (centred) {
      inst.kind = PatternKind::kLayerNorm;
      inst.input = sub->input(0);
      nodes.insert(nodes.end(), {sub, reduce_mean});
    } else {
      // Whatever computes d (even x - mean(y) with another y), this is exactly an RMSNorm of d.
      inst.kind = PatternKind::kRmsNorm;
      inst.input = d;
    }

    // The normalised value: d / std, or d * (1 / std).
    const Value* std_dev = Out(&sqrt);
    const Value* normed = nullptr;
    if (std_dev == nullptr || std_dev->is_graph_output || std_dev->consumers.size() != 1) return;
    const Node* user = std_dev->consumers[0];
    if (user->op == OpType::kDiv && user->input(1) == std_dev && user->input(0) == d) {
      nodes.push_back(user);
      normed = Out(user);
    } else if ((user->op == OpType::kReciprocal && user->input(0) == std_dev) ||
               (user->op == OpType::kDiv && user->input(1) == std_dev &&
                IsConst(user->input(0), 1.0))) {
      const Node* mul = OnlyConsumer(Out(user), OpType::kMul);
      if (mul == nullptr || Other(mul, Out(user)) != d) return;
      nodes.insert(nodes.end(), {user, mul});
      normed = Out(mul);
    } else {
      return;
    }

    // Optional affine: * gamma [+ beta] (beta only for LayerNorm). A parameter must broadcast
    // over the normalised axes only.
    auto fits = [&](const Value* p) {
      int r = RankOf(p);
      return IsParam(p) && (r < 0 || r <= -inst.axis);
    };
    const Value* output = normed;
    if (const Node* mul = OnlyConsumer(output, OpType::kMul); mul && fits(Other(mul, output))) {
      inst.scale = Other(mul, output);
      nodes.push_back(mul);
      output = Out(mul);
    }
    if (inst.kind == PatternKind::kLayerNorm) {
      if (const Node* add = OnlyConsumer(output, OpType::kAdd); add && fits(Other(add, output))) {
        inst.bias = Other(add, output);
        nodes.push_back(add);
        output = Out(add);
      }
    }
    inst.output = output;
    if (!Free(nodes) || !Closed(nodes, output)) return;
    Commit(std::move(inst), std::move(nodes));
  }

  // ------------------------------------------------------------------------------- GELU
  // The shared tail: p = 1 + erf(..) or 1 + tanh(..); out = x * p * 0.5 in any of the orders
  // exporters write: (x * p) * 0.5, (x * 0.5) * p, x * (p * 0.5).
  const Value* GeluTail(const Value* x, const Value* p, std::vector<const Node*>* nodes) {
    const Node* m1 = OnlyConsumer(p, OpType::kMul);
    const Value* o = Other(m1, p);
    if (o == nullptr) return nullptr;
    if (o == x) {
      const Node* m2 = OnlyConsumer(Out(m1), OpType::kMul);
      if (m2 == nullptr || !IsConst(Other(m2, Out(m1)), 0.5)) return nullptr;
      nodes->insert(nodes->end(), {m1, m2});
      return Out(m2);
    }
    if (IsConst(o, 0.5)) {
      const Node* m2 = OnlyConsumer(Out(m1), OpType::kMul);
      if (m2 == nullptr || Other(m2, Out(m1)) != x) return nullptr;
      nodes->insert(nodes->end(), {m1, m2});
      return Out(m2);
    }
    const Node* half = Prod(o, OpType::kMul);
    if (half == nullptr || !IsConst(Other(half, x), 0.5)) return nullptr;
    nodes->insert(nodes->end(), {half, m1});
    return Out(m1);
  }

  // 1 + f where f is `v`: the Add and its output.
  static const Node* AddOne(const Value* v) {
    const Node* add = OnlyConsumer(v, OpType::kAdd);
    return add != nullptr && IsConst(Other(add, v), 1.0) ? add : nullptr;
  }

  // x * 0.5 * (1 + Erf(x / sqrt(2)))  (or Erf(x * (1 / sqrt(2)))).
  void MatchGeluErf(const Node& erf) {
    const Value* u = erf.input(0);
    const Node* pre = u ? u->producer : nullptr;
    if (pre == nullptr) return;
    const Value* x = nullptr;
    if (pre->op == OpType::kDiv && IsConst(pre->input(1), std::sqrt(2.0))) {
      x = pre->input(0);
    } else if (pre->op == OpType::kMul) {
      x = SideOtherThanConst(pre, 1.0 / std::sqrt(2.0));
    }
    const Node* add = AddOne(Out(&erf));
    if (x == nullptr || add == nullptr) return;
    std::vector<const Node*> nodes = {pre, &erf, add};
    CommitGelu(x, Out(add), std::move(nodes), false);
  }

  // 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), x^3 as Pow(x, 3) or x * x * x.
  void MatchGeluTanh(const Node& tanh) {
    const Node* scale = Prod(tanh.input(0), OpType::kMul);
    const Value* inner = SideOtherThanConst(scale, kSqrt2OverPi);
    const Node* sum = Prod(inner, OpType::kAdd);
    if (sum == nullptr || sum->num_inputs() != 2) return;
    for (int i = 0; i < 2; ++i) {
      const Value* x = sum->input(i);
      const Node* coef = Prod(sum->input(1 - i), OpType::kMul);
      const Value* cube = SideOtherThanConst(coef, 0.044715);
      std::vector<const Node*> nodes = {scale, &tanh, sum, coef};
      if (!CubeOf(cube, x, &nodes)) continue;
      const Node* add = AddOne(Out(&tanh));
      if (add == nullptr) return;
      nodes.push_back(add);
      CommitGelu(x, Out(add), std::move(nodes), true);
      return;
    }
  }

  // `cube` = x^3 as Pow(x, 3), Mul(Mul(x, x), x) or Mul(x, Mul(x, x)); adds its nodes.
  static bool CubeOf(const Value* cube, const Value* x, std::vector<const Node*>* nodes) {
    if (cube == nullptr || x == nullptr || cube->producer == nullptr) return false;
    const Node* n = cube->producer;
    if (n->op == OpType::kPow) {
      if (n->input(0) != x || !IsConst(n->input(1), 3.0)) return false;
      nodes->push_back(n);
      return true;
    }
    if (n->op != OpType::kMul) return false;
    const Node* sq = Prod(Other(n, x), OpType::kMul);
    if (sq == nullptr || sq->input(0) != x || sq->input(1) != x) return false;
    nodes->insert(nodes->end(), {sq, n});
    return true;
  }

  void CommitGelu(const Value* x, const Value* p, std::vector<const Node*> nodes, bool tanh) {
    const Value* out = GeluTail(x, p, &nodes);
    if (out == nullptr || !Free(nodes) || !Closed(nodes, out)) return;
    PatternInstance inst;
    inst.kind = PatternKind::kGelu;
    inst.input = x;
    inst.output = out;
    inst.tanh_approximation = tanh;
    Commit(std::move(inst), std::move(nodes));
  }

  // ---------------------------------------------------------------------------- Softmax
  // e = Exp(x - ReduceMax(x)) or Exp(x); e / ReduceSum(e), both reductions over one axis.
  void MatchSoftmax(const Node& exp) {
    std::vector<const Node*> nodes = {&exp};
    const Value* x = exp.input(0);
    std::optional<int64_t> max_axis;
    if (const Node* sub = Prod(x, OpType::kSub)) {
      const Node* max = Prod(sub->input(1), OpType::kReduceMax);
      if (max != nullptr && max->input(0) == sub->input(0)) {
        x = sub->input(0);
        max_axis = SingleReduceAxis(*max, x);
        if (!max_axis) return;
        nodes.insert(nodes.end(), {sub, max});
      }
    }
    const Value* e = Out(&exp);
    if (e == nullptr || e->consumers.size() != 2) return;
    const Node* sum = nullptr;
    const Node* div = nullptr;
    for (const Node* c : e->consumers) {
      if (c->op == OpType::kReduceSum && c->input(0) == e) sum = c;
    }
    for (const Node* c : e->consumers) {
      if (sum && c->op == OpType::kDiv && c->input(0) == e && c->input(1) == Out(sum)) div = c;
    }
    if (sum == nullptr || div == nullptr) return;
    auto axis = SingleReduceAxis(*sum, x);
    if (!axis || (max_axis && *max_axis != *axis)) return;
    nodes.insert(nodes.end(), {sum, div});
    if (!Free(nodes) || !Closed(nodes, Out(div))) return;
    PatternInstance inst;
    inst.kind = PatternKind::kSoftmax;
    inst.input = x;
    inst.output = Out(div);
    inst.axis = *axis;
    Commit(std::move(inst), std::move(nodes));
  }

  // ---------------------------------------------------------------------------- Attention
  // MatMul(Q, K^T) [/ c | * c] [+ mask | Where(cond, fill, .)] -> Softmax -> MatMul(., V).
  void MatchAttention(const PatternInstance& sm) {
    // Scores are normalised along their last axis.
    int rank = RankOf(sm.input);
    if (!(sm.axis == -1 || (rank > 0 && sm.axis == rank - 1))) return;
    const Node* pv = OnlyConsumer(sm.output, OpType::kMatMul);
    if (pv == nullptr || pv->input(0) != sm.output) return;

    PatternInstance inst;
    inst.kind = PatternKind::kAttention;
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

  // `v` = MatMul(Q, K^T) [/ c | * c]: the MatMul, the scale in `inst`, the nodes in `nodes`.
  static const Node* Scores(const Value* v, PatternInstance* inst,
                            std::vector<const Node*>* nodes) {
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

  const ir::Graph& graph_;
  std::vector<const Node*> order_;
  std::vector<int> pos_;
  std::vector<bool> claimed_;
  std::vector<Found> out_;
};

}  // namespace

std::vector<PatternInstance> FindPatterns(const ir::Graph& graph) { return Matcher(graph).Run(); }

}  // namespace kiln::precision
