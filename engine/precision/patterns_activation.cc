// GELU (erf and tanh forms) and Softmax in the forms exporters write (pattern_matcher.h).
#include <algorithm>
#include <array>
#include <cmath>

#include "engine/precision/pattern_forms.h"
#include "engine/precision/pattern_matcher.h"

namespace kiln::precision::internal {
namespace {

// ------------------------------------------------------------------------------- GELU
// 0.5 * x * (1 + f(x)) with f = erf(x / sqrt(2)) or tanh(sqrt(2/pi) * (x + 0.044715 x^3)), in
// the forms exporters write: 1 + f as Add(f, 1), or 1 - f' with f' = f(-x) (erfc); 0.5 + 0.5 f;
// and the product with x and 0.5 in any order and association, 0.5 also as a division by 2:
// (x * p) * 0.5, (x * 0.5) * p, x * (p * 0.5), 0.5 * (x * p), (x * p) / 2.

// p = alpha + beta * f, f the anchor's output: f [* b] then + a, a - f or f - a.
struct Affine {
  const Value* p = nullptr;
  double alpha = 0, beta = 1;
};

std::optional<Affine> AffineOf(const Value* f, std::vector<const Node*>* nodes) {
  Affine r;
  const Value* cur = f;
  auto only = [](const Value* v) -> const Node* {
    return v == nullptr || v->is_graph_output || v->consumers.size() != 1 ? nullptr
                                                                          : v->consumers[0];
  };
  const Node* c = only(cur);
  if (c != nullptr && c->op == OpType::kMul && Other(c, cur) != cur) {
    auto b = ScalarConst(Other(c, cur));
    if (!b) return std::nullopt;
    r.beta = *b;
    nodes->push_back(c);
    cur = Out(c);
    c = only(cur);
  }
  if (c == nullptr || c->num_inputs() != 2 || c->input(0) == c->input(1)) return std::nullopt;
  auto a = ScalarConst(Other(c, cur));
  if (!a) return std::nullopt;
  if (c->op == OpType::kAdd) {
    r.alpha = *a;
  } else if (c->op == OpType::kSub && c->input(1) == cur) {
    r.alpha = *a;
    r.beta = -r.beta;
  } else if (c->op == OpType::kSub) {
    r.alpha = -*a;
  } else {
    return std::nullopt;
  }
  nodes->push_back(c);
  r.p = Out(c);
  return r;
}

// k /= the scalar constant `v`; false when `v` is not one (or is 0).
bool DivideBy(const Value* v, double* k) {
  auto c = ScalarConst(v);
  if (!c || *c == 0) return false;
  *k /= *c;
  return true;
}

// For a binary Mul with a scalar constant on one side: the other side, the constant folded
// into *k.
const Value* SideOtherThanConstValue(const Node* n, double* k) {
  for (int i = 0; i < 2; ++i) {
    if (auto c = ScalarConst(n->input(i))) {
      *k *= *c;
      return n->input(1 - i);
    }
  }
  return nullptr;
}

// out = p * x * k: one multiplication by x (or by x * c, x / c computed apart) and any by
// scalar constants, or divisions by them, each value read once. Stops at the first value
// where x is in and `done(k)` holds.
template <typename Done>
const Value* ProductTail(const Value* x, const Value* p, const Done& done,
                         std::vector<const Node*>* nodes) {
  double k = 1;
  bool seen_x = false;
  const Value* cur = p;
  for (int step = 0; step < 4; ++step) {
    if (cur == nullptr || cur->is_graph_output || cur->consumers.size() != 1) return nullptr;
    const Node* c = cur->consumers[0];
    if (c->op == OpType::kMul && c->num_inputs() == 2 && c->input(0) != c->input(1)) {
      const Value* o = Other(c, cur);
      const Node* h = o != nullptr ? o->producer : nullptr;
      if (!seen_x && o == x) {
        seen_x = true;
      } else if (auto v = ScalarConst(o)) {
        k *= *v;
      } else if (!seen_x && h != nullptr && o->consumers.size() == 1 && !o->is_graph_output &&
                 h->num_inputs() == 2 &&
                 ((h->op == OpType::kMul && SideOtherThanConstValue(h, &k) == x) ||
                  (h->op == OpType::kDiv && h->input(0) == x && DivideBy(h->input(1), &k)))) {
        seen_x = true;
        nodes->push_back(h);
      } else {
        return nullptr;
      }
    } else if (c->op == OpType::kDiv && c->input(0) == cur && c->input(1) != cur) {
      if (!DivideBy(c->input(1), &k)) return nullptr;
    } else {
      return nullptr;
    }
    nodes->push_back(c);
    cur = Out(c);
    if (seen_x && done(k)) return cur;
  }
  return nullptr;
}

// Coefficients of 1, x, x^2, x^3.
using Poly = std::array<double, 4>;

bool PolyMul(const Poly& a, const Poly& b, Poly* out) {
  Poly r{};
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      if (a[i] == 0 || b[j] == 0) continue;
      if (i + j > 3) return false;
      r[i + j] += a[i] * b[j];
    }
  }
  *out = r;
  return true;
}

// `v` as a polynomial of degree <= 3 in one value *x (found on the way): Add, Sub, Mul, Neg,
// division by a constant and Pow by 1, 2 or 3, each node read once, at most `budget` nodes.
bool PolyOf(const Value* v, const Value** x, Poly* out, std::vector<const Node*>* nodes,
            int* budget) {
  if (v == nullptr || --*budget < 0) return false;
  *out = Poly{};
  if (auto c = ScalarConst(v)) {
    (*out)[0] = *c;
    return true;
  }
  const Node* p = v->producer;
  bool interior = v != *x && p != nullptr && !v->is_graph_output && v->consumers.size() == 1 &&
                  (p->op == OpType::kAdd || p->op == OpType::kSub || p->op == OpType::kMul ||
                   p->op == OpType::kDiv || p->op == OpType::kPow || p->op == OpType::kNeg);
  if (!interior) {
    if (*x == nullptr) *x = v;
    if (v != *x) return false;
    (*out)[1] = 1;
    return true;
  }
  Poly a, b;
  if (!PolyOf(p->input(0), x, &a, nodes, budget)) return false;
  if (p->op == OpType::kNeg) {
    for (int i = 0; i < 4; ++i) (*out)[i] = -a[i];
  } else if (p->op == OpType::kPow || p->op == OpType::kDiv) {
    auto c = ScalarConst(p->input(1));
    if (!c) return false;
    if (p->op == OpType::kDiv) {
      if (*c == 0) return false;
      for (int i = 0; i < 4; ++i) (*out)[i] = a[i] / *c;
    } else {
      if (*c != 1 && *c != 2 && *c != 3) return false;
      *out = a;
      for (int e = 1; e < static_cast<int>(*c); ++e) {
        if (!PolyMul(*out, a, out)) return false;
      }
    }
  } else {
    if (!PolyOf(p->input(1), x, &b, nodes, budget)) return false;
    if (p->op == OpType::kMul) {
      if (!PolyMul(a, b, out)) return false;
    } else {
      double sign = p->op == OpType::kSub ? -1 : 1;
      for (int i = 0; i < 4; ++i) (*out)[i] = a[i] + sign * b[i];
    }
  }
  nodes->push_back(p);
  return true;
}

}  // namespace

// erf(s * x), s = +-1/sqrt(2): x / c, x * c or c * x, negated before or after (jax's erfc form
// is erf(-x * c)).
void Matcher::MatchGeluErf(const Node& erf) {
  std::vector<const Node*> nodes = {&erf};
  double sign = 1;
  const Value* u = erf.input(0);
  if (const Node* neg = Prod(u, OpType::kNeg)) {
    sign = -sign;
    nodes.push_back(neg);
    u = neg->input(0);
  }
  const Node* pre = u != nullptr ? u->producer : nullptr;
  if (pre == nullptr || pre->num_inputs() != 2) return;
  double s = 1;
  const Value* x = nullptr;
  const Value* c = nullptr;
  if (pre->op == OpType::kDiv && ScalarConst(pre->input(1))) {
    c = pre->input(1);
    x = pre->input(0);
    if (!DivideBy(c, &s)) return;
  } else if (pre->op == OpType::kMul) {
    c = ScalarConst(pre->input(1)) ? pre->input(1) : pre->input(0);
    x = SideOtherThanConstValue(pre, &s);
  }
  if (x == nullptr || !Near(std::abs(s), 1 / std::sqrt(2.0), DtypeTolerance(c, 1e-4))) return;
  nodes.push_back(pre);
  if (s < 0) sign = -sign;
  if (const Node* neg = Prod(x, OpType::kNeg); neg && x->consumers.size() == 1) {
    // -x * c (jax's erfc form): the Neg is read only here, so x * ... below is the Neg's
    // input; a GELU of some -y (the Neg read by the tail too) keeps -y as its input.
    sign = -sign;
    nodes.push_back(neg);
    x = neg->input(0);
  }
  CommitGelu(x, erf, sign, std::move(nodes), false);
}

// tanh(a * x + b * x^3), a = sqrt(2/pi), b = 0.044715 a, whatever the association:
// sqrt(2/pi) * (x + 0.044715 * Pow(x, 3)), x * x * x, jax2tf's ((0.044715 * x) * x) * x, ...
void Matcher::MatchGeluTanh(const Node& tanh) {
  std::vector<const Node*> nodes = {&tanh};
  const Value* x = nullptr;
  Poly poly;
  int budget = 12;
  if (!PolyOf(tanh.input(0), &x, &poly, &nodes, &budget) || x == nullptr) return;
  const double tol = DtypeTolerance(x, 1e-4);
  double a = poly[1], b = poly[3];
  if (std::abs(poly[0]) > 0 || std::abs(poly[2]) > 0 || !Near(std::abs(a), kSqrt2OverPi, tol) ||
      !Near(b / a, 0.044715, 10 * tol)) {
    return;
  }
  CommitGelu(x, tanh, a < 0 ? -1 : 1, std::move(nodes), true);
}

// f = the anchor's output = sign * f(|s| x): p = alpha + beta f, out = p x k with
// alpha k = 0.5 and beta sign k = 0.5.
void Matcher::CommitGelu(const Value* x, const Node& anchor, double sign,
                         std::vector<const Node*> nodes, bool tanh) {
  auto affine = AffineOf(Out(&anchor), &nodes);
  if (!affine) return;
  const double alpha = affine->alpha, beta = affine->beta * sign;
  auto done = [&](double k) {
    // 1e-3: a product of two or three constants, each rounded to its own precision.
    return Near(alpha * k, 0.5, 1e-3) && Near(beta * k, 0.5, 1e-3);
  };
  const Value* out = ProductTail(x, affine->p, done, &nodes);
  if (out == nullptr || !Free(nodes) || !Closed(nodes, out)) return;
  PatternInstance inst;
  inst.kind = PatternKind::kGelu;
  inst.input = x;
  inst.output = out;
  inst.tanh_approximation = tanh;
  Commit(std::move(inst), std::move(nodes));
}

// ---------------------------------------------------------------------------- Softmax
// e = Exp(x - max(x)) or Exp(x); e / sum(e) or e * Reciprocal(sum(e)), both reductions over
// one axis, each as ReductionAt reads it (kept dims, or restored by Reshape/Expand: jax2tf
// writes max as GlobalMaxPool, Squeeze, Max(., -inf), Reshape, Expand).
void Matcher::MatchSoftmax(const Node& exp) {
  std::vector<const Node*> nodes = {&exp};
  const Value* x = exp.input(0);
  bool verified = true;
  std::optional<std::vector<int64_t>> max_axes;
  if (const Node* sub = Prod(x, OpType::kSub); sub && sub->num_inputs() == 2) {
    auto max = ReductionAt(sub->input(1), ReduceKind::kMax);
    if (max && max->in == sub->input(0)) {
      x = sub->input(0);
      max_axes = max->axes;
      verified = max->verified;
      nodes.push_back(sub);
      AddAll(&nodes, max->nodes);
    }
  }
  const Value* e = Out(&exp);
  if (e == nullptr || e->consumers.size() != 2) return;
  std::optional<Reduction> sum;
  const Node* last = nullptr;
  for (const Node* c : e->consumers) {
    if (c->op == OpType::kDiv && c->input(0) == e && c->input(1) != e) {
      sum = ReductionAt(c->input(1), ReduceKind::kSum);
    } else if (c->op == OpType::kMul && Other(c, e) != e && Other(c, e) != nullptr) {
      if (const Node* r = Prod(Other(c, e), OpType::kReciprocal)) {
        sum = ReductionAt(r->input(0), ReduceKind::kSum);
        if (sum) nodes.push_back(r);
      }
    }
    if (sum) {
      last = c;
      break;
    }
  }
  if (!sum || sum->in != e || sum->axes.size() != 1) return;
  if (max_axes && *max_axes != sum->axes) return;
  AddAll(&nodes, sum->nodes);
  nodes.push_back(last);
  if (!Free(nodes) || !Closed(nodes, Out(last))) return;
  PatternInstance inst;
  inst.kind = PatternKind::kSoftmax;
  inst.input = x;
  inst.output = Out(last);
  inst.axis = sum->axes[0];
  inst.fusable = verified && sum->verified;
  Commit(std::move(inst), std::move(nodes));
}

}  // namespace kiln::precision::internal
