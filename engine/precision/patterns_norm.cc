// LayerNorm and RMSNorm in the forms exporters write (pattern_matcher.h): anchored on the
// square root of var + eps, or on the BatchNormalization Keras's fused LayerNormalization
// becomes. pattern_forms.h parses the statistics.
#include <algorithm>
#include <cmath>

#include "engine/precision/pattern_forms.h"
#include "engine/precision/pattern_matcher.h"

namespace kiln::precision::internal {
namespace {

// TF's batch_normalization: g (1 / std, maybe times gamma) read twice, as x * g and mean * g
// (or (-mean) * g), combined as x * g + (beta - mean * g), x * g - mean * g,
// x * g + (-mean) * g or x * g + ((-mean) * g + beta). Returns the output (setting the bias when
// there is one), or nullptr.
template <typename Fits>
const Value* BatchNormForm(const Value* g, const NormStats& s, PatternInstance* inst,
                           std::vector<const Node*>* nodes, bool* verified, const Fits& fits) {
  const Node* xg = nullptr;  // x * g
  const Node* mg = nullptr;  // mean * g, or (-mean) * g
  bool negated = false;
  std::vector<const Node*> more;
  for (const Node* c : g->consumers) {
    if (c->op != OpType::kMul || Other(c, g) == nullptr || Other(c, g) == g) return nullptr;
    const Value* o = Other(c, g);
    if (o == s.x && xg == nullptr) {
      xg = c;
      continue;
    }
    if (mg != nullptr) return nullptr;
    mg = c;
    if (auto m = MeanValue(o, s, verified)) {
      more = *m;
    } else if (const Node* neg = Prod(o, OpType::kNeg); neg && o->consumers.size() == 1) {
      auto m2 = MeanValue(neg->input(0), s, verified);
      if (!m2) return nullptr;
      more = *m2;
      more.push_back(neg);
      negated = true;
    } else {
      return nullptr;
    }
  }
  if (xg == nullptr || mg == nullptr) return nullptr;
  const Value* a = Out(xg);
  const Value* b = Out(mg);
  const Node* sum = nullptr;      // the node that combines a and b's term
  const Node* between = nullptr;  // the node between b and `sum`, if any
  const Value* bias = nullptr;
  if (a == nullptr || a->is_graph_output || a->consumers.size() != 1 || b == nullptr ||
      b->is_graph_output || b->consumers.size() != 1) {
    return nullptr;
  }
  sum = a->consumers[0];
  const Node* bc = b->consumers[0];
  if (!negated && bc == sum && sum->op == OpType::kSub && sum->input(0) == a) {
    // x * g - mean * g
  } else if (negated && bc == sum && sum->op == OpType::kAdd) {
    // x * g + (-mean) * g
  } else if (sum->op == OpType::kAdd && Other(sum, a) == Out(bc) && Out(bc) != nullptr &&
             Out(bc)->consumers.size() == 1 && !Out(bc)->is_graph_output) {
    between = bc;
    if (!negated && bc->op == OpType::kSub && bc->input(1) == b && fits(bc->input(0))) {
      bias = bc->input(0);  // beta - mean * g
    } else if (!negated && bc->op == OpType::kNeg) {
      // -(mean * g)
    } else if (negated && bc->op == OpType::kAdd && fits(Other(bc, b))) {
      bias = Other(bc, b);  // (-mean) * g + beta
    } else {
      return nullptr;
    }
  } else {
    return nullptr;
  }
  AddAll(nodes, more);
  AddAll(nodes, {xg, mg, sum});
  if (between != nullptr) AddUnique(nodes, between);
  inst->bias = bias;
  return Out(sum);
}

// `v` is the number of elements per row of `big_x` ([1, rows, d, 1]): the constant d, or
// Cast(ReduceProd(Gather(Shape(big_x), [0, 2, 3]))) (whose nodes join `nodes`).
bool RowCount(const Value* v, const Value* big_x, int64_t d, std::vector<const Node*>* nodes) {
  if (auto c = ScalarConst(v)) return *c == static_cast<double>(d);
  const Node* cast = Prod(v, OpType::kCast);
  const Node* prod = cast != nullptr ? Prod(cast->input(0), OpType::kReduceProd) : nullptr;
  const Node* gather = prod != nullptr ? Prod(prod->input(0), OpType::kGather) : nullptr;
  const Node* shape = gather != nullptr ? Prod(gather->input(0), OpType::kShape) : nullptr;
  if (shape == nullptr || shape->input(0) != big_x || gather->GetInt("axis", 0) != 0) {
    return false;
  }
  auto idx = ConstInts(gather->input(1));
  if (!idx) return false;
  std::vector<int64_t> sorted = *idx;
  for (int64_t& i : sorted) i = i < 0 ? i + 4 : i;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != std::vector<int64_t>{0, 2, 3}) return false;
  if (prod->has_attr("axes") && prod->GetInts("axes") != std::vector<int64_t>{0}) return false;
  nodes->insert(nodes->end(), {cast, prod, gather, shape});
  return true;
}

// `v` holds `value` in every element: a constant (any size) or Expand(scalar constant, shape).
bool FilledWith(const Value* v, double value) {
  if (const Node* e = Prod(v, OpType::kExpand)) v = e->input(0);
  const ir::Tensor* t = nullptr;
  if (v != nullptr && v->constant) {
    t = &*v->constant;
  } else if (const Node* c = Prod(v, OpType::kConstant)) {
    const ir::Attribute* a = c->attr("value");
    if (a != nullptr && a->type == ir::Attribute::Type::kTensor) t = &a->t;
  }
  if (t == nullptr || !t->defined() || t->raw_data() == nullptr || t->num_elements() == 0 ||
      !IsFloating(t->dtype())) {
    return false;
  }
  for (int64_t i = 0; i < t->num_elements(); ++i) {
    if (ir::ElementAsDouble(*t, i) != value) return false;
  }
  return true;
}

// `v` is x's shape: Shape(x) through Casts, or a constant equal to x's static shape.
bool IsShapeOf(const Value* v, const Value* x) {
  if (auto c = ConstInts(v)) {
    if (!x->shape.is_static()) return false;
    return *c == x->shape.StaticDims();
  }
  for (int depth = 0; depth < 3 && v != nullptr; ++depth) {
    const Node* p = v->producer;
    if (p == nullptr) return false;
    if (p->op == OpType::kShape) {
      return p->input(0) == x && !p->has_attr("start") && !p->has_attr("end");
    }
    if (p->op != OpType::kCast) return false;
    v = p->input(0);
  }
  return false;
}

}  // namespace

// ------------------------------------------------------------------- LayerNorm / RMSNorm
// Anchored on the square root of var + eps: Sqrt(v) or Pow(v, 0.5) (a standard deviation), or
// Pow(v, -0.5) (its inverse). var is what StatsAt parses. Then, for n the centred value
// (x - mean, or x for an RMSNorm):
//   n / std;
//   n * inv, inv = Reciprocal(std), Div(1, std) or Pow(v, -0.5) (jax2tf and tf2onnx write
//   Rsqrt as Sqrt + Reciprocal), inv optionally times gamma first (Flax, Keras);
//   x * inv + (beta - mean * inv), x * inv - mean * inv, x * inv + (-mean) * inv [+ beta]
//   (TF's batch_normalization, which Keras's LayerNormalization calls, and Keras 3);
// then optionally * gamma and + beta (beta only for a LayerNorm).
void Matcher::MatchNorm(const Node& anchor) {
  bool inverse;  // the anchor computes 1 / std
  if (anchor.op == OpType::kSqrt) {
    inverse = false;
  } else if (anchor.op == OpType::kPow && IsConst(anchor.input(1), 0.5)) {
    inverse = false;
  } else if (anchor.op == OpType::kPow && IsConst(anchor.input(1), -0.5)) {
    inverse = true;
  } else {
    return;
  }
  const Node* add_eps = Prod(anchor.input(0), OpType::kAdd);
  if (add_eps == nullptr || add_eps->num_inputs() != 2) return;
  std::optional<NormStats> s;
  std::optional<double> eps;
  for (int i = 0; i < 2 && !s; ++i) {
    eps = ScalarConst(add_eps->input(1 - i));
    if (eps) s = StatsAt(add_eps->input(i));
  }
  if (!s || !eps || !(*eps >= 0)) return;
  auto axis = TrailingFirst(s->axes);
  // Normalised over axes that are not the trailing ones (Flax's LayerNorm over the features of
  // [N, C, L], axis -2 as magika writes it): the same numerics for the policy, but no
  // LayerNormalization kernel computes it, so fusion leaves the instance alone.
  // Axes of a value of unknown rank stay non-negative: taken as they are, unfused.
  const bool trailing = axis.has_value();
  if (!trailing) {
    if (s->axes.empty()) return;
    axis = s->axes.front();
  }

  PatternInstance inst;
  inst.kind = s->centred ? PatternKind::kLayerNorm : PatternKind::kRmsNorm;
  inst.input = s->x;
  inst.epsilon = static_cast<float>(*eps);
  inst.axis = *axis;
  bool verified = s->verified;
  std::vector<const Node*> nodes = s->nodes;
  AddAll(&nodes, {add_eps, &anchor});
  // A parameter broadcasts over the normalised axes only: its other dims are 1 (jax2tf writes
  // gamma as [1, 1, C]; Flax over axis -2 as [1, C, 1]).
  auto fits = [&](const Value* p) {
    if (!IsParamLike(p)) return false;
    const int r = RankOf(p);
    if (r < 0) return true;
    // Axes counted from the front (x's rank unknown) are read against the parameter's rank,
    // which exporters write in full ([1, C, 1]).
    std::vector<int64_t> axes = s->axes;
    for (int64_t& a : axes) a = a >= 0 ? a - r : a;
    for (int i = 0; i < r; ++i) {
      if (std::find(axes.begin(), axes.end(), i - r) != axes.end()) continue;
      if (!p->shape.dims[i].is_static() || p->shape.dims[i].value != 1) return false;
    }
    return true;
  };
  auto readers = [](const Value* v) -> const std::vector<Node*>* {
    return v == nullptr || v->is_graph_output ? nullptr : &v->consumers;
  };
  auto centred = [&](const Value* num) { return CentredValue(num, *s, &verified); };

  const Value* out = Out(&anchor);
  const Value* inv = inverse ? out : nullptr;
  const Value* normed = nullptr;
  if (!inverse) {
    const auto* users = readers(out);
    if (users == nullptr || users->size() != 1) return;
    const Node* user = (*users)[0];
    if (user->op == OpType::kDiv && user->input(1) == out && IsConst(user->input(0), 1.0)) {
      inv = Out(user);
    } else if (user->op == OpType::kDiv && user->input(1) == out) {
      auto more = centred(user->input(0));
      if (!more) return;
      AddAll(&nodes, *more);
      normed = Out(user);
    } else if (user->op == OpType::kReciprocal) {
      inv = Out(user);
    } else {
      return;
    }
    AddUnique(&nodes, user);
  }
  const Value* output = nullptr;
  if (normed == nullptr) {
    const Value* g = inv;
    // inv * gamma first (Flax, Keras), unless that Mul is the numerator's.
    if (const Node* m = OnlyConsumer(g, OpType::kMul); m != nullptr && Other(m, g) != g) {
      const Value* o = Other(m, g);
      if (!CentredValue(o, *s, &verified) && fits(o)) {
        inst.scale = o;
        AddUnique(&nodes, m);
        g = Out(m);
      }
    }
    const auto* users = readers(g);
    if (users == nullptr) return;
    if (users->size() == 1) {
      const Node* m = (*users)[0];
      if (m->op != OpType::kMul || Other(m, g) == g) return;
      auto more = centred(Other(m, g));
      if (!more) return;
      AddAll(&nodes, *more);
      AddUnique(&nodes, m);
      normed = Out(m);
    } else if (users->size() == 2 && s->centred) {
      output = BatchNormForm(g, *s, &inst, &nodes, &verified, fits);
      if (output == nullptr) return;
    } else {
      return;
    }
  }
  if (output == nullptr) {
    output = normed;
    if (inst.scale == nullptr) {
      if (const Node* mul = OnlyConsumer(output, OpType::kMul); mul && fits(Other(mul, output))) {
        inst.scale = Other(mul, output);
        nodes.push_back(mul);
        output = Out(mul);
      }
    }
  }
  if (inst.kind == PatternKind::kLayerNorm && inst.bias == nullptr) {
    if (const Node* add = OnlyConsumer(output, OpType::kAdd); add && fits(Other(add, output))) {
      inst.bias = Other(add, output);
      nodes.push_back(add);
      output = Out(add);
    }
  }
  inst.output = output;
  inst.fusable = verified && trailing;
  if (!Free(nodes) || !Closed(nodes, output)) return;
  Commit(std::move(inst), std::move(nodes));
}

// ------------------------------------------------------- LayerNorm as a BatchNormalization
// Keras's LayerNormalization with epsilon >= 1.001e-5 (its default, 1e-3) calls TF's fused
// batch norm in training mode, which tf2onnx writes as
//   X = Reshape(x, [1, -1, D, 1]); m = ReduceMean(X, [0, 2, 3]);
//   v = ReduceSumSquare(X - m, [0, 2, 3]) / count (count: a constant D, or
//       Cast(ReduceProd(Gather(Shape(X), [0, 2, 3]))));
//   BatchNormalization(X, ones, zeros, Squeeze(m), v, eps); Reshape back to x's shape;
//   then * gamma + beta.
// Each row of X is normalised over its D elements: a LayerNorm of x over the trailing axes
// whose sizes multiply to D.
void Matcher::MatchBatchNormLayerNorm(const Node& bn) {
  if (bn.num_inputs() != 5 || bn.num_outputs() != 1 || bn.GetInt("training_mode", 0) != 0) {
    return;
  }
  const Node* reshape_in = Prod(bn.input(0), OpType::kReshape);
  if (reshape_in == nullptr) return;
  const Value* x = reshape_in->input(0);
  const Value* big_x = bn.input(0);
  auto target = ConstInts(reshape_in->input(1));
  if (!target || target->size() != 4 || (*target)[0] != 1 || (*target)[3] != 1 ||
      (*target)[2] <= 0 || (*target)[1] == 0 || (*target)[1] < -1) {
    return;
  }
  // The normalised axes: the trailing dims of x whose product is D.
  const int64_t d = (*target)[2];
  const int rank = RankOf(x);
  int64_t axis = 0, prod = 1;
  for (int i = rank - 1; i >= 0 && prod < d; --i) {
    if (!x->shape.dims[i].is_static()) return;
    prod *= x->shape.dims[i].value;
    axis = i - rank;
  }
  if (rank < 1 || prod != d || axis == 0) return;
  // Per-row statistics of X over axes 0, 2, 3.
  const std::vector<int64_t> row_axes = {-4, -2, -1};
  std::vector<const Node*> nodes = {reshape_in, &bn};
  const Value* m = bn.input(3);
  if (const Node* sq = m->producer;
      sq != nullptr && (sq->op == OpType::kSqueeze || sq->op == OpType::kReshape)) {
    nodes.push_back(sq);
    m = sq->input(0);
  }
  const Node* mean = Prod(m, OpType::kReduceMean);
  if (mean == nullptr || mean->input(0) != big_x || !KeepDims(*mean) ||
      AxesOf(*mean, 4) != std::optional<std::vector<int64_t>>(row_axes)) {
    return;
  }
  nodes.push_back(mean);
  const Node* div = Prod(bn.input(4), OpType::kDiv);
  if (div == nullptr) return;
  const Value* ss = div->input(0);
  if (const Node* sq = ss != nullptr ? ss->producer : nullptr;
      sq != nullptr && (sq->op == OpType::kSqueeze || sq->op == OpType::kReshape)) {
    nodes.push_back(sq);
    ss = sq->input(0);
  }
  const Node* sumsq = Prod(ss, OpType::kReduceSumSquare);
  const Node* sub = sumsq != nullptr ? Prod(sumsq->input(0), OpType::kSub) : nullptr;
  if (sub == nullptr || sub->input(0) != big_x || sub->input(1) != m ||
      AxesOf(*sumsq, 4) != std::optional<std::vector<int64_t>>(row_axes) ||
      !RowCount(div->input(1), big_x, d, &nodes)) {
    return;
  }
  nodes.insert(nodes.end(), {div, sumsq, sub});
  // scale 1 and bias 0: the affine part comes after, as gamma and beta.
  auto eps = bn.GetFloat("epsilon", 1e-5f);
  if (!FilledWith(bn.input(1), 1.0) || !FilledWith(bn.input(2), 0.0) || !(eps >= 0)) return;
  // Back to x's shape.
  const Value* y = Out(&bn);
  const Node* reshape_out = OnlyConsumer(y, OpType::kReshape);
  if (reshape_out == nullptr || reshape_out->input(0) != y ||
      !IsShapeOf(reshape_out->input(1), x)) {
    return;
  }
  nodes.push_back(reshape_out);
  PatternInstance inst;
  inst.kind = PatternKind::kLayerNorm;
  inst.input = x;
  inst.epsilon = eps;
  inst.axis = axis;
  auto fits = [&](const Value* p) {
    if (!IsParamLike(p)) return false;
    int r = RankOf(p);
    if (r < 0 || r <= -axis) return true;
    for (int i = 0; i < r + static_cast<int>(axis); ++i) {
      if (!p->shape.dims[i].is_static() || p->shape.dims[i].value != 1) return false;
    }
    return true;
  };
  const Value* output = Out(reshape_out);
  if (const Node* mul = OnlyConsumer(output, OpType::kMul); mul && fits(Other(mul, output))) {
    inst.scale = Other(mul, output);
    nodes.push_back(mul);
    output = Out(mul);
  }
  if (const Node* add = OnlyConsumer(output, OpType::kAdd); add && fits(Other(add, output))) {
    inst.bias = Other(add, output);
    nodes.push_back(add);
    output = Out(add);
  }
  inst.output = output;
  if (!Free(nodes) || !Closed(nodes, output)) return;
  Commit(std::move(inst), std::move(nodes));
}

}  // namespace kiln::precision::internal
