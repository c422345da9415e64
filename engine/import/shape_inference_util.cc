// Helpers the shape inference files share (shape_inference_internal.h): constant and
// partially known integer contents of values, axes, and shape algebra (broadcast, rank-only
// shapes, overflow-checked dim products).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/import/shape_inference_internal.h"

namespace kiln::import::shape_internal {

const Value* In(const Node& n, int i) { return n.input(i); }

DataType InType(const Node& n, int i) {
  const Value* v = n.input(i);
  return v ? v->dtype : DataType::kUndefined;
}

// The integer contents of `v` when it is a constant: an initializer (or a folded value), or the
// output of a Constant node (`value` tensor, `value_int`, `value_ints`), which the fold pass
// turns into one only after the patterns have been matched (Paddle2ONNX writes its Reshape
// targets and Slice bounds as Constant nodes). nullopt for anything else; `max_rank` bounds the
// tensor's rank.
std::optional<std::vector<int64_t>> ConstantInts(const Value* v, int max_rank) {
  if (v == nullptr) return std::nullopt;
  const ir::Tensor* t = v->constant ? &*v->constant : nullptr;
  if (t == nullptr && v->producer != nullptr && v->producer->op == OpType::kConstant) {
    const Node& c = *v->producer;
    if (const ir::Attribute* a = c.attr("value_ints")) return a->ints;
    if (const ir::Attribute* a = c.attr("value_int")) return std::vector<int64_t>{a->i};
    const ir::Attribute* a = c.attr("value");
    if (a != nullptr && a->type == ir::Attribute::Type::kTensor) t = &a->t;
  }
  if (t == nullptr || (t->dtype() != DataType::kI64 && t->dtype() != DataType::kI32) ||
      t->rank() > max_rank) {
    return std::nullopt;
  }
  std::vector<int64_t> out(t->num_elements());
  for (int64_t k = 0; k < t->num_elements(); ++k) out[k] = ir::ElementAsInt64(*t, k);
  return out;
}

// The constant integer contents of input `i`, if it is a small constant.
std::optional<std::vector<int64_t>> ConstInts(const Node& n, int i) {
  return ConstantInts(n.input(i), std::numeric_limits<int>::max());
}

// The integer contents of constant `v` (int32 / int64, at most 1-D), nullopt otherwise.
std::optional<std::vector<int64_t>> ConstIntsOf(const Value* v) { return ConstantInts(v, 1); }

// The integer contents of `v` as far as they are known before run time: a constant's, or those
// of a Concat (through Casts) of constants and of 1-D values of static length (whose entries are
// kUnknownInt). Exporters build Reshape and Expand targets so: Concat(Shape(x)[0], [1], [256]).
// nullopt when not even the length is known.
std::optional<std::vector<int64_t>> PartialInts(const Value* v, int depth) {
  if (v == nullptr || depth > 8) return std::nullopt;
  if (v->constant || (v->producer != nullptr && v->producer->op == OpType::kConstant)) {
    return ConstIntsOf(v);
  }
  const Node* p = v->producer;
  if (p != nullptr && p->op == OpType::kCast && IsInteger(v->dtype) &&
      IsInteger(p->input(0) ? p->input(0)->dtype : DataType::kUndefined)) {
    return PartialInts(p->input(0), depth + 1);
  }
  // Shape(x): x's dims, static or not (Shape-15's start and end taken as written).
  if (p != nullptr && p->op == OpType::kShape && p->input(0) && p->input(0)->shape.rank_known) {
    const Shape& s = p->input(0)->shape;
    const int64_t r = s.rank();
    int64_t start = p->GetInt("start", 0), end = p->GetInt("end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = std::clamp<int64_t>(start, 0, r);
    end = std::clamp<int64_t>(end, start, r);
    std::vector<int64_t> out;
    for (int64_t i = start; i < end; ++i) {
      out.push_back(s.dims[i].is_static() ? s.dims[i].value : kUnknownInt);
    }
    return out;
  }
  // Unsqueeze / Squeeze of a scalar or a 1-D value keep its entries.
  if (p != nullptr && (p->op == OpType::kUnsqueeze || p->op == OpType::kSqueeze) &&
      v->shape.rank_known && v->shape.rank() <= 1) {
    auto in = PartialInts(p->input(0), depth + 1);
    if (in && (in->size() == 1 || p->op == OpType::kSqueeze)) return in;
  }
  // Gather(axis 0) of constant indices, and Slice(step 1, axis 0) of constant starts and ends,
  // from a 1-D value whose entries are partly known.
  if (p != nullptr && (p->op == OpType::kGather || p->op == OpType::kSlice) &&
      p->input(0) != nullptr) {
    auto in = PartialInts(p->input(0), depth + 1);
    if (in) {
      const int64_t r = static_cast<int64_t>(in->size());
      if (p->op == OpType::kGather && p->GetInt("axis", 0) == 0) {
        auto idx = ConstIntsOf(p->input(1));
        if (idx) {
          std::vector<int64_t> out;
          for (int64_t k : *idx) {
            if (k < 0) k += r;
            if (k < 0 || k >= r) return std::nullopt;
            out.push_back((*in)[k]);
          }
          return out;
        }
      }
      if (p->op == OpType::kSlice && p->since_version >= 10) {
        auto starts = ConstIntsOf(p->input(1));
        auto ends = ConstIntsOf(p->input(2));
        auto axes = p->input(3) ? ConstIntsOf(p->input(3)) : std::vector<int64_t>{0};
        auto steps = p->input(4) ? ConstIntsOf(p->input(4)) : std::vector<int64_t>{1};
        if (starts && ends && axes && steps && starts->size() == 1 && ends->size() == 1 &&
            axes->size() == 1 && ((*axes)[0] == 0 || (*axes)[0] == -1) && steps->size() == 1 &&
            (*steps)[0] == 1) {
          int64_t s = (*starts)[0], e = (*ends)[0];
          if (s < 0) s += r;
          if (e < 0) e += r;
          s = std::clamp<int64_t>(s, 0, r);
          e = std::clamp<int64_t>(e, s, r);
          return std::vector<int64_t>(in->begin() + s, in->begin() + e);
        }
      }
    }
  }
  if (p != nullptr && p->op == OpType::kConcat && (!v->shape.rank_known || v->shape.rank() == 1)) {
    std::vector<int64_t> out;
    for (const Value* in : p->inputs) {
      auto part = PartialInts(in, depth + 1);
      if (!part) return std::nullopt;
      out.insert(out.end(), part->begin(), part->end());
    }
    return out;
  }
  if (v->shape.rank_known && v->shape.rank() == 1 && v->shape.dims[0].is_static() &&
      v->shape.dims[0].value <= 64) {
    return std::vector<int64_t>(v->shape.dims[0].value, kUnknownInt);
  }
  return std::nullopt;
}

// Axes from the attribute (older versions) or the constant input `input_index` (newer ones).
std::optional<std::vector<int64_t>> AxesOf(const Node& n, int input_index, int since_input) {
  if (n.since_version >= since_input) {
    if (!n.input(input_index)) return std::vector<int64_t>{};
    return ConstInts(n, input_index);
  }
  return n.GetInts("axes");
}

Shape SameShape(const Node& n, int i) {
  const Value* v = n.input(i);
  return v ? v->shape : Shape::Unknown();
}

// Numpy broadcast of known-rank shapes; a dim is unknown unless it follows from the inputs.
Shape Broadcast(const std::vector<const Shape*>& shapes) {
  Shape out;
  size_t rank = 0;
  for (const Shape* s : shapes) {
    if (!s->rank_known) return Shape::Unknown();
    rank = std::max(rank, s->dims.size());
  }
  out.rank_known = true;
  out.dims.assign(rank, Dim::Static(1));
  for (size_t i = 0; i < rank; ++i) {
    std::optional<Dim> d;
    bool unknown = false;
    for (const Shape* s : shapes) {
      size_t off = rank - s->dims.size();
      if (i < off) continue;
      const Dim& x = s->dims[i - off];
      if (x.is_static() && x.value == 1) continue;
      if (!d) {
        d = x;
      } else if (!(*d == x)) {
        if (d->is_static() && x.is_static())
          unknown = true;  // a real mismatch: kernel reports it
        else if (!d->is_static() && x.is_static())
          d = x;  // the symbol must equal the number
        else if (!d->is_static() && !x.is_static())
          unknown = true;
      }
    }
    out.dims[i] = unknown ? Dim{} : (d ? *d : Dim::Static(1));
  }
  return out;
}

Shape RankOnly(int rank) {
  Shape s;
  s.rank_known = true;
  s.dims.assign(rank, Dim{});
  return s;
}

// a * b for non-negative dims, or -1 (unknown) when either is unknown or the product overflows.
int64_t MulDims(int64_t a, int64_t b) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r)) return -1;
  return r;
}

std::optional<int> NormAxis(int64_t axis, int rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) return std::nullopt;
  return static_cast<int>(a);
}
std::optional<std::vector<int64_t>> StaticDimsOf(const Value* v) {
  if (!v || !v->shape.is_static()) return std::nullopt;
  return v->shape.StaticDims();
}

// The constant floating contents of input `i`, if it is a constant.
std::optional<std::vector<double>> ConstFloats(const Node& n, int i) {
  const Value* v = n.input(i);
  if (!v || !v->constant || !IsFloating(v->constant->dtype())) return std::nullopt;
  const ir::Tensor& t = *v->constant;
  std::vector<double> out(t.num_elements());
  for (int64_t k = 0; k < t.num_elements(); ++k) out[k] = ir::ElementAsDouble(t, k);
  return out;
}

}  // namespace kiln::import::shape_internal
