// The vocabulary of exporter forms (pattern_forms.h): constants, reductions, normalisation
// statistics. Each function walks a bounded number of nodes.
#include "engine/precision/pattern_forms.h"

#include <algorithm>
#include <cmath>

namespace kiln::precision::internal {
namespace {

// Constants larger than this are not pattern parameters (eps, 0.5, axes); not reading them keeps
// the search linear even when a big weight sits where a scalar is expected.
constexpr int64_t kMaxConstElements = 64;

// The base of a square: Pow(b, 2) or Mul(b, b); nullptr otherwise.
const Value* SquareBase(const Node* n) {
  if (n == nullptr || n->num_inputs() != 2) return nullptr;
  if (n->op == OpType::kPow && IsConst(n->inputs[1], 2.0)) return n->inputs[0];
  if (n->op == OpType::kMul && n->inputs[0] == n->inputs[1]) return n->inputs[0];
  return nullptr;
}

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

bool IsReduceOp(OpType op) {
  switch (op) {
    case OpType::kReduceMean:
    case OpType::kReduceSum:
    case OpType::kReduceSumSquare:
    case OpType::kReduceMax:
    case OpType::kGlobalAveragePool:
    case OpType::kGlobalMaxPool:
      return true;
    default:
      return false;
  }
}

// The shape of `v`, or, where import could not infer it, the shape it must have as an
// elementwise function of a value whose shape is known: d = x - m with m a reduction of x that
// keeps (or restores) the reduced axes, d * d, Pow(d, c), Exp(d). Import infers no shape past a
// Reshape whose target is computed at run time (jax2tf with a symbolic batch) or a ReduceMean
// whose axes come from a Constant node (opset 18), so d's shape may be unknown where x's is known.
const ir::Shape* ShapeThrough(const Value* v) {
  for (int depth = 0; depth < 4 && v != nullptr; ++depth) {
    if (v->shape.rank_known) return &v->shape;
    const Node* p = v->producer;
    if (p == nullptr) return nullptr;
    if (p->op == OpType::kExp || (p->op == OpType::kPow && ScalarConst(p->input(1))) ||
        (p->op == OpType::kMul && p->num_inputs() == 2 && p->input(0) == p->input(1))) {
      v = p->input(0);
      continue;
    }
    if (p->op != OpType::kSub || p->num_inputs() != 2) return nullptr;
    // x - m: m must come from a reduction of x through shape-only and scaling nodes.
    const Value* m = p->input(1);
    bool reduction_of_x = false;
    for (int step = 0; step < 8 && m != nullptr && m->producer != nullptr; ++step) {
      const Node* q = m->producer;
      if (IsReduceOp(q->op)) {
        reduction_of_x = q->input(0) == p->input(0);
        break;
      }
      if (!IsReshapeLike(q->op) && q->op != OpType::kMul && q->op != OpType::kDiv &&
          q->op != OpType::kMax) {
        break;
      }
      m = q->input(0) != nullptr && !ScalarConst(q->input(0)) ? q->input(0) : q->input(1);
    }
    if (!reduction_of_x) return nullptr;
    v = p->input(0);
  }
  return nullptr;
}

// Axes of Unsqueeze/Squeeze: the attribute (before opset 13) or the constant input.
std::optional<std::vector<int64_t>> UnsqueezeAxes(const Node& n) {
  if (n.has_attr("axes")) return n.GetInts("axes");
  if (n.input(1) == nullptr) return std::vector<int64_t>{};
  return ConstInts(n.input(1));
}

// The shape of `reduce`'s result (over `axes`, negative, of a value of shape `in`) after the
// shape-only and scaling nodes of `chain` (from the reduction outwards), computed from their
// constant operands rather than taken from import (which infers no Expand); nullopt when an
// operand is not constant or the shapes do not fit.
std::optional<ir::Shape> ChainShape(const Node& reduce, const ir::Shape& in,
                                    const std::vector<int64_t>& axes,
                                    const std::vector<const Node*>& chain) {
  const int rank = in.rank();
  auto reduced = [&](int i) { return std::find(axes.begin(), axes.end(), i - rank) != axes.end(); };
  bool keep = reduce.op == OpType::kGlobalAveragePool || reduce.op == OpType::kGlobalMaxPool ||
              KeepDims(reduce);
  std::vector<ir::Dim> s;
  for (int i = 0; i < rank; ++i) {
    if (!reduced(i)) {
      s.push_back(in.dims[i]);
    } else if (keep) {
      s.push_back(ir::Dim::Static(1));
    }
  }
  for (const Node* n : chain) {
    switch (n->op) {
      case OpType::kReshape: {
        auto t = ConstInts(n->input(1));
        if (!t) return std::nullopt;
        std::vector<ir::Dim> out;
        int infer = -1;
        for (size_t i = 0; i < t->size(); ++i) {
          int64_t d = (*t)[i];
          if (d == 0 && n->GetInt("allowzero", 0) == 0) {
            if (i >= s.size()) return std::nullopt;
            out.push_back(s[i]);
          } else if (d == -1 && infer < 0) {
            infer = static_cast<int>(i);
            out.push_back(ir::Dim{});
          } else if (d >= 0) {
            out.push_back(ir::Dim::Static(d));
          } else {
            return std::nullopt;
          }
        }
        if (infer >= 0) {
          int64_t total = 1, known = 1;
          for (const ir::Dim& d : s) {
            if (!d.is_static()) return std::nullopt;
            total *= d.value;
          }
          for (const ir::Dim& d : out) {
            if (d.is_static()) known *= d.value;
          }
          if (known == 0 || total % known != 0) return std::nullopt;
          out[infer] = ir::Dim::Static(total / known);
        }
        s = std::move(out);
        break;
      }
      case OpType::kExpand: {
        auto t = ConstInts(n->input(1));
        if (!t) return std::nullopt;
        size_t r = std::max(s.size(), t->size());
        std::vector<ir::Dim> out(r);
        for (size_t i = 0; i < r; ++i) {
          ir::Dim a = i + s.size() >= r ? s[i + s.size() - r] : ir::Dim::Static(1);
          int64_t b = i + t->size() >= r ? (*t)[i + t->size() - r] : 1;
          if (b == 1) {
            out[i] = a;
          } else if (!a.is_static() || a.value == 1 || a.value == b) {
            out[i] = ir::Dim::Static(b);
          } else {
            return std::nullopt;
          }
        }
        s = std::move(out);
        break;
      }
      case OpType::kUnsqueeze: {
        auto ax = UnsqueezeAxes(*n);
        if (!ax) return std::nullopt;
        int r = static_cast<int>(s.size() + ax->size());
        std::vector<bool> one(r, false);
        for (int64_t a : *ax) {
          if (a < 0) a += r;
          if (a < 0 || a >= r || one[a]) return std::nullopt;
          one[a] = true;
        }
        std::vector<ir::Dim> out;
        size_t k = 0;
        for (int i = 0; i < r; ++i) out.push_back(one[i] ? ir::Dim::Static(1) : s[k++]);
        s = std::move(out);
        break;
      }
      case OpType::kSqueeze: {
        auto ax = UnsqueezeAxes(*n);
        if (!ax) return std::nullopt;
        int r = static_cast<int>(s.size());
        std::vector<bool> drop(r, false);
        for (int64_t a : *ax) {
          if (a < 0) a += r;
          if (a < 0 || a >= r) return std::nullopt;
          drop[a] = true;
        }
        if (ax->empty()) {
          for (int i = 0; i < r; ++i) {
            if (!s[i].is_static()) return std::nullopt;
            drop[i] = s[i].value == 1;
          }
        }
        std::vector<ir::Dim> out;
        for (int i = 0; i < r; ++i) {
          if (drop[i] && s[i].is_static() && s[i].value != 1) return std::nullopt;
          if (!drop[i]) out.push_back(s[i]);
        }
        s = std::move(out);
        break;
      }
      default:  // scaling by a scalar constant, Max(., -inf): the shape stays
        break;
    }
  }
  ir::Shape out;
  out.rank_known = true;
  out.dims = std::move(s);
  return out;
}

// True when `out` broadcasts against `in` as the kept-dims reduction over `axes` (negative)
// does: `in`'s shape with each reduced axis 1 (or expanded back to `in`'s size).
bool RestoresReducedAxes(const ir::Shape& out, const ir::Shape& in,
                         const std::vector<int64_t>& axes) {
  if (!in.rank_known || !out.rank_known || out.rank() != in.rank()) return false;
  const int rank = in.rank();
  for (int i = 0; i < rank; ++i) {
    const ir::Dim& o = out.dims[i];
    const ir::Dim& d = in.dims[i];
    bool same = o.is_static() ? d.is_static() && d.value == o.value : !o.symbol.empty() && o == d;
    bool reduced = std::find(axes.begin(), axes.end(), i - rank) != axes.end();
    if (!same && !(reduced && o.is_static() && o.value == 1)) return false;
  }
  return true;
}

// `v` = x - mean(x), the mean over `axes` as ReductionAt reads it: x and the reduction.
std::optional<std::pair<const Node*, Reduction>> CentredAt(const Value* v) {
  const Node* sub = Prod(v, OpType::kSub);
  if (sub == nullptr || sub->num_inputs() != 2) return std::nullopt;
  auto m = ReductionAt(sub->input(1), ReduceKind::kMean);
  if (!m || m->squares || m->in != sub->input(0)) return std::nullopt;
  return std::make_pair(sub, std::move(*m));
}

}  // namespace

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

// The relative error of a constant rounded to `v`'s dtype, at least `floor`: an fp16 model's
// 1/sqrt(2) is 1.1e-4 off, a bf16 model's sqrt(2/pi) 1.3e-3 (twice the half-ulp of each).
double DtypeTolerance(const Value* v, double floor) {
  DataType t = v != nullptr ? v->dtype : DataType::kF32;
  if (t == DataType::kF16) return std::max(floor, 1e-3);
  if (t == DataType::kBF16) return std::max(floor, 8e-3);
  return floor;
}

bool Near(double value, double expected, double rel) {
  return std::abs(value - expected) <= rel * std::abs(expected);
}

// Exporters write these constants as float32 (or fp16/bf16 in half models): 1e-4 relative
// covers fp32 rounding of 1/sqrt(2), sqrt(2/pi) and 0.044715 (and 7-digit decimals of them) and
// still tells 2 from 3 or 0.5 from 0.7; half constants get their own rounding.
bool IsConst(const Value* v, double expected) {
  auto c = ScalarConst(v);
  return c && Near(*c, expected, DtypeTolerance(v, 1e-4));
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

int RankOf(const Value* v) { return v != nullptr && v->shape.rank_known ? v->shape.rank() : -1; }

bool KeepDims(const Node& n) { return n.GetInt("keepdims", 1) != 0; }

// Shape-only nodes exporters put between a reduction and the node that broadcasts its result:
// jax2tf/tf2onnx reduce without keepdims and put the axes back with Reshape and Expand.
bool IsReshapeLike(OpType op) {
  return op == OpType::kReshape || op == OpType::kExpand || op == OpType::kUnsqueeze ||
         op == OpType::kSqueeze;
}

// The reduced axes of `n` (a Reduce* op, or a global pool: axes 2 .. rank-1), negative and
// sorted when `rank` is known; as written (sorted) when it is not.
std::optional<std::vector<int64_t>> AxesOf(const Node& n, int rank) {
  std::vector<int64_t> raw;
  if (n.op == OpType::kGlobalAveragePool || n.op == OpType::kGlobalMaxPool) {
    if (rank < 3) return std::nullopt;
    for (int64_t a = 2; a < rank; ++a) raw.push_back(a);
  } else {
    auto axes = ReduceAxes(n);
    if (!axes) return std::nullopt;
    raw = *axes;
  }
  if (rank < 0) {
    std::sort(raw.begin(), raw.end());
    return raw;
  }
  return NegativeAxes(raw, rank);
}

// The first axis of `axes` (negative, sorted) when they are the trailing axes of their value.
std::optional<int64_t> TrailingFirst(const std::vector<int64_t>& axes) {
  if (axes.empty() || axes.back() != -1) return std::nullopt;
  for (size_t i = 1; i < axes.size(); ++i) {
    if (axes[i] != axes[i - 1] + 1) return std::nullopt;
  }
  return axes.front();
}

// Constant integer operands (Reshape targets, Expand shapes, axes), nullopt when not constant.
std::optional<std::vector<int64_t>> ConstInts(const Value* v) {
  auto vals = ConstValues(v);
  if (!vals) return std::nullopt;
  std::vector<int64_t> out;
  for (double x : *vals) out.push_back(static_cast<int64_t>(x));
  return out;
}

// `v` as a reduction of some value over some axes, with the reduced axes kept (so it broadcasts
// against that value): the Reduce* op with keepdims or a global pool; or one without keepdims
// and the Reshape/Expand/Unsqueeze/Squeeze nodes that put the axes back (jax2tf). For kMean,
// ReduceMean, GlobalAveragePool, or a ReduceSum (ReduceSumSquare: `squares`) times 1/n or divided
// by n, n the number of elements reduced (jax2tf writes means so). For kMax also Max(., -inf)
// (jax's initial value of a max). Bounded: at most 8 nodes are walked.
std::optional<Reduction> ReductionAt(const Value* v, ReduceKind kind, bool restored_outside) {
  Reduction r;
  bool reshaped = false;
  std::optional<double> scale;  // the factor a sum is multiplied by
  const Value* scale_const = nullptr;
  const Value* cur = v;
  const Node* reduce = nullptr;
  for (int step = 0; step < 8 && reduce == nullptr; ++step) {
    const Node* p = cur != nullptr ? cur->producer : nullptr;
    if (p == nullptr) return std::nullopt;
    if (IsReshapeLike(p->op)) {
      reshaped = true;
      r.nodes.push_back(p);
      cur = p->input(0);
    } else if (kind == ReduceKind::kMean && !scale && p->op == OpType::kMul &&
               p->num_inputs() == 2) {
      int side = ScalarConst(p->input(1)) ? 1 : ScalarConst(p->input(0)) ? 0 : -1;
      if (side < 0) return std::nullopt;
      scale = ScalarConst(p->input(side));
      scale_const = p->input(side);
      r.nodes.push_back(p);
      cur = p->input(1 - side);
    } else if (kind == ReduceKind::kMean && !scale && p->op == OpType::kDiv) {
      auto c = ScalarConst(p->input(1));
      if (!c || *c == 0) return std::nullopt;
      scale = 1.0 / *c;
      scale_const = p->input(1);
      r.nodes.push_back(p);
      cur = p->input(0);
    } else if (kind == ReduceKind::kMax && p->op == OpType::kMax && p->num_inputs() == 2) {
      int side = ScalarConst(p->input(1)) ? 1 : ScalarConst(p->input(0)) ? 0 : -1;
      if (side < 0 || !(*ScalarConst(p->input(side)) <= -1e30)) return std::nullopt;
      r.nodes.push_back(p);
      cur = p->input(1 - side);
    } else if (IsReduceOp(p->op)) {
      reduce = p;
    } else {
      return std::nullopt;
    }
  }
  if (reduce == nullptr) return std::nullopt;
  switch (reduce->op) {
    case OpType::kReduceMean:
    case OpType::kGlobalAveragePool:
      if (kind != ReduceKind::kMean || scale) return std::nullopt;
      break;
    case OpType::kReduceSum:
      if (kind == ReduceKind::kMax || (kind == ReduceKind::kMean) != scale.has_value()) {
        return std::nullopt;
      }
      break;
    case OpType::kReduceSumSquare:
      if (kind != ReduceKind::kMean || !scale) return std::nullopt;
      r.squares = true;
      break;
    default:  // ReduceMax, GlobalMaxPool
      if (kind != ReduceKind::kMax) return std::nullopt;
      break;
  }
  r.in = reduce->input(0);
  const ir::Shape* in_shape = ShapeThrough(r.in);
  const int rank = in_shape != nullptr ? in_shape->rank() : -1;
  auto axes = AxesOf(*reduce, rank);
  if (!axes) return std::nullopt;
  r.axes = std::move(*axes);
  r.nodes.push_back(reduce);
  if (scale && rank < 0) {
    // The reduced dims are unknown before run time (jax2tf with a symbolic batch, its shapes
    // computed by Shape/Slice/Concat): n cannot be checked. Only when shape-only nodes restore
    // the reduced axes, as jax2tf's means are written, is the sum taken for a mean, unverified
    // (a policy may select it; fusion leaves it alone).
    if (!reshaped && !restored_outside) return std::nullopt;
    r.verified = false;
  } else if (scale) {
    // A mean is the sum times 1/n, n the elements reduced: every reduced dim must be static.
    // Compared at the constant's own precision, so a fp32 1/768 tells 768 from 769.
    double n = 1;
    for (int64_t a : r.axes) {
      const ir::Dim& d = in_shape->dims[rank + a];
      if (!d.is_static()) return std::nullopt;
      n *= static_cast<double>(d.value);
    }
    if (!(n > 0) || !Near(*scale * n, 1.0, DtypeTolerance(scale_const, 1e-6))) {
      return std::nullopt;
    }
  }
  if (!reshaped && restored_outside) {
    r.verified = false;  // the reader's restore is not checked against the reduction
  } else if (!reshaped) {
    // Without kept dims the result would not broadcast against what was reduced.
    bool keeps = reduce->op == OpType::kGlobalAveragePool || reduce->op == OpType::kGlobalMaxPool ||
                 KeepDims(*reduce);
    if (!keeps) return std::nullopt;
  } else {
    // A target computed at run time leaves the restore unproven (see Reduction::verified).
    std::vector<const Node*> chain(r.nodes.rbegin() + 1, r.nodes.rend());
    auto shape = in_shape != nullptr ? ChainShape(*reduce, *in_shape, r.axes, chain) : std::nullopt;
    r.verified = shape && RestoresReducedAxes(*shape, *in_shape, r.axes);
  }
  return r;
}

void AddUnique(std::vector<const Node*>* nodes, const Node* n) {
  if (std::find(nodes->begin(), nodes->end(), n) == nodes->end()) nodes->push_back(n);
}

void AddAll(std::vector<const Node*>* nodes, const std::vector<const Node*>& more) {
  for (const Node* n : more) AddUnique(nodes, n);
}

// The variance (or mean square) `var` of a normalisation, in the forms exporters write:
//   mean(d^2) (d^2 as Pow(d, 2) or d * d; ReduceSumSquare(d) / n), d = x - mean(x) (LayerNorm)
//   or d = x (RMSNorm);
//   mean(x^2) - mean(x)^2 (LayerNorm; Keras 3 and Flax's fast variance);
// each optionally clamped at zero: Max(var, 0) or Relu(var).
namespace {

// StatsAt, with `peel_restore`: shape-only nodes right before the reader are taken as the
// restore of the whole statistic (then checked no further).
std::optional<NormStats> StatsAtImpl(const Value* var, bool peel_restore) {
  NormStats s;
  // The statistics may be computed without kept dims and then restored as a whole, after the
  // clamp (Flax's fast variance through jax2tf: Max(0, E[x^2] - E[x]^2) -> Reshape -> Expand).
  bool restored = false;
  for (int depth = 0; peel_restore && depth < 4 && var != nullptr && var->producer != nullptr &&
                      IsReshapeLike(var->producer->op);
       ++depth) {
    s.nodes.push_back(var->producer);
    var = var->producer->input(0);
    restored = true;
  }
  if (peel_restore && !restored) return std::nullopt;
  if (const Node* p = var != nullptr ? var->producer : nullptr) {
    if (p->op == OpType::kRelu) {
      s.nodes.push_back(p);
      var = p->input(0);
    } else if (p->op == OpType::kMax && p->num_inputs() == 2) {
      int side = IsConst(p->input(1), 0) ? 1 : IsConst(p->input(0), 0) ? 0 : -1;
      if (side >= 0) {
        s.nodes.push_back(p);
        var = p->input(1 - side);
      }
    }
  }
  auto squared = [](const Reduction& m) -> const Value* {
    if (m.squares) return m.in;
    return SquareBase(m.in != nullptr ? m.in->producer : nullptr);
  };
  if (auto m2 = ReductionAt(var, ReduceKind::kMean, restored)) {
    const Value* d = squared(*m2);
    if (d == nullptr) return std::nullopt;
    s.d = d;
    s.axes = m2->axes;
    s.verified = m2->verified;
    AddAll(&s.nodes, m2->nodes);
    if (!m2->squares) AddUnique(&s.nodes, m2->in->producer);
    auto c = CentredAt(d);
    if (c && c->second.axes == s.axes) {
      s.centred = true;
      s.x = c->first->input(0);
      s.mean = c->first->input(1);
      s.verified = s.verified && c->second.verified;
      AddUnique(&s.nodes, c->first);
      AddAll(&s.nodes, c->second.nodes);
    } else {
      s.x = d;
    }
    return s;
  }
  const Node* sub = Prod(var, OpType::kSub);
  if (sub == nullptr || sub->num_inputs() != 2) return std::nullopt;
  auto m2 = ReductionAt(sub->input(0), ReduceKind::kMean, restored);
  const Node* sq = sub->input(1) != nullptr ? sub->input(1)->producer : nullptr;
  const Value* mean = SquareBase(sq);
  if (!m2 || mean == nullptr) return std::nullopt;
  const Value* x = squared(*m2);
  auto m1 = ReductionAt(mean, ReduceKind::kMean, restored);
  if (x == nullptr || !m1 || m1->squares || m1->in != x || m1->axes != m2->axes) {
    return std::nullopt;
  }
  s.centred = true;
  s.x = x;
  s.mean = mean;
  s.axes = m2->axes;
  s.verified = m2->verified && m1->verified;
  AddAll(&s.nodes, {sub, sq});
  AddAll(&s.nodes, m2->nodes);
  if (!m2->squares) AddUnique(&s.nodes, m2->in->producer);
  AddAll(&s.nodes, m1->nodes);
  return s;
}

}  // namespace

std::optional<NormStats> StatsAt(const Value* var) {
  // Restores read with the reductions they follow first (checked where their targets are
  // constant), then as one restore of the whole statistic.
  if (auto s = StatsAtImpl(var, false)) return s;
  return StatsAtImpl(var, true);
}

// The nodes that make `num` the centred value of `s` (none when it is s.d itself): exporters
// that do not share subexpressions compute x - mean again for the numerator (PyTorch's var).
// nullopt when `num` is not that value.
std::optional<std::vector<const Node*>> CentredValue(const Value* num, const NormStats& s,
                                                     bool* verified) {
  if (num == nullptr) return std::nullopt;
  if (num == s.d || (!s.centred && num == s.x)) return std::vector<const Node*>{};
  if (!s.centred) return std::nullopt;
  const Node* sub = Prod(num, OpType::kSub);
  if (sub == nullptr || sub->num_inputs() != 2 || sub->input(0) != s.x) return std::nullopt;
  if (sub->input(1) == s.mean) return std::vector<const Node*>{sub};
  auto m = ReductionAt(sub->input(1), ReduceKind::kMean);
  if (!m || m->squares || m->in != s.x || m->axes != s.axes) return std::nullopt;
  *verified = *verified && m->verified;
  std::vector<const Node*> out = {sub};
  out.insert(out.end(), m->nodes.begin(), m->nodes.end());
  return out;
}

// The nodes that make `v` the mean of `s` (none when it is s.mean itself).
std::optional<std::vector<const Node*>> MeanValue(const Value* v, const NormStats& s,
                                                  bool* verified) {
  if (v == nullptr || !s.centred) return std::nullopt;
  if (v == s.mean) return std::vector<const Node*>{};
  auto m = ReductionAt(v, ReduceKind::kMean);
  if (!m || m->squares || m->in != s.x || m->axes != s.axes) return std::nullopt;
  *verified = *verified && m->verified;
  return m->nodes;
}

// A value made only from parameters (initializers, Constant nodes, graph inputs) by shape-only
// nodes: Paddle reshapes LayerNorm's scale to the normalised shape at run time.
bool IsParamLike(const Value* v) {
  for (int depth = 0; depth < 4 && v != nullptr; ++depth) {
    if (IsParam(v)) return true;
    const Node* p = v->producer;
    if (p == nullptr || !(IsReshapeLike(p->op) || p->op == OpType::kCast ||
                          p->op == OpType::kIdentity || p->op == OpType::kFlatten)) {
      return false;
    }
    v = p->input(0);
  }
  return false;
}

}  // namespace kiln::precision::internal
