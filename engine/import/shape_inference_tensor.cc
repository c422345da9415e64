// Shape inference of the data movement ops: Slice, Expand, Reshape, Flatten, Transpose,
// Squeeze / Unsqueeze, Concat and Gather (shape_inference_internal.h).
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/import/shape_inference_internal.h"
#include "engine/ir/slice.h"

namespace kiln::import::shape_internal {

Shape SliceShape(const Node& n, int k) {
  const Value* x = In(n, 0);
  // Same rank as x; a sliced axis of static length with constant starts, ends (and steps)
  // has the length ONNX's clamping rules give, an axis not sliced keeps its dim.
  if (k != 0 || !x || !x->shape.rank_known) return Shape::Unknown();
  const int r = x->shape.rank();
  Shape out = RankOnly(r);
  std::optional<std::vector<int64_t>> starts, ends, axes, steps;
  if (n.since_version < 10) {
    starts = n.GetInts("starts");
    ends = n.GetInts("ends");
    axes = n.GetInts("axes");
  } else {
    starts = ConstInts(n, 1);
    ends = ConstInts(n, 2);
    axes = n.input(3) ? ConstInts(n, 3) : std::vector<int64_t>{};
    steps = n.input(4) ? ConstInts(n, 4) : std::vector<int64_t>{};
  }
  const bool steps_known = n.since_version < 10 || steps.has_value();
  if (!starts || !ends || !axes || !steps_known || starts->size() != ends->size()) {
    return out;
  }
  if (axes->empty()) {
    for (size_t i = 0; i < starts->size(); ++i) axes->push_back(static_cast<int64_t>(i));
  }
  if (axes->size() != starts->size() ||
      (steps && !steps->empty() && steps->size() != starts->size())) {
    return out;
  }
  std::vector<bool> sliced(r, false);
  for (size_t i = 0; i < axes->size(); ++i) {
    int64_t a = (*axes)[i] < 0 ? (*axes)[i] + r : (*axes)[i];
    if (a < 0 || a >= r || sliced[a]) return out;  // the kernel reports it
    sliced[a] = true;
    const Dim& d = x->shape.dims[a];
    const int64_t step = steps && !steps->empty() ? (*steps)[i] : 1;
    if (!d.is_static() || step == 0) continue;
    out.dims[a] = Dim::Static(ir::SliceRange((*starts)[i], (*ends)[i], step, d.value).length);
  }
  for (int a = 0; a < r; ++a) {
    if (!sliced[a]) out.dims[a] = x->shape.dims[a];
  }
  return out;
}

Shape ExpandShape(const Node& n, int k) {
  const Value* x = In(n, 0);
  // x broadcast against the target shape (CheckExpand has checked a constant one fits);
  // entries known only at run time are unknown dims.
  auto target = PartialInts(n.input(1));
  if (!target || !x || !x->shape.rank_known) return Shape::Unknown();
  Shape t = RankOnly(static_cast<int>(target->size()));
  for (size_t i = 0; i < target->size(); ++i) {
    if ((*target)[i] != kUnknownInt) t.dims[i] = Dim::Static((*target)[i]);
  }
  return Broadcast({&x->shape, &t});
}

Shape ReshapeShape(const Node& n, int k) {
  const Value* x = In(n, 0);
  auto target = PartialInts(n.input(1));
  auto in = StaticDimsOf(x);
  if (!target) return Shape::Unknown();
  bool allowzero = n.GetInt("allowzero", 0) != 0;
  Shape out = RankOnly(static_cast<int>(target->size()));
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < target->size(); ++i) {
    int64_t d = (*target)[i];
    if (d == 0 && !allowzero) {
      if (x && x->shape.rank_known && i < x->shape.dims.size()) out.dims[i] = x->shape.dims[i];
    } else if (d == -1) {
      infer = static_cast<int>(i);
      continue;
    } else if (d == kUnknownInt) {
      // known at run time only: unknown here
    } else if (d >= 0) {
      out.dims[i] = Dim::Static(d);
    }
    known = out.dims[i].is_static() ? MulDims(known, out.dims[i].value) : -1;
  }
  if (infer >= 0 && in && known > 0) {
    int64_t total = ir::NumElementsOf(*in);
    if (total >= 0 && total % known == 0) out.dims[infer] = Dim::Static(total / known);
  }
  return out;
}

Shape FlattenShape(const Node& n, int k) {
  const Value* x = In(n, 0);
  if (!x || !x->shape.rank_known) return RankOnly(2);
  int r = x->shape.rank();
  // axis in [-r, r]; a negative one counts from the end of x's r dims (not of r + 1).
  int64_t flat = n.GetInt("axis", 1);
  if (flat < 0) flat += r;
  auto axis = flat >= 0 && flat <= r ? std::optional<int>(static_cast<int>(flat)) : std::nullopt;
  if (!axis) return RankOnly(2);
  int64_t a = 1, b = 1;
  for (int i = 0; i < r; ++i) {
    int64_t& p = i < *axis ? a : b;
    p = MulDims(p, x->shape.dims[i].value);  // -1 for symbolic dims (value < 0)
  }
  Shape s = RankOnly(2);
  if (a >= 0) s.dims[0] = Dim::Static(a);
  if (b >= 0) s.dims[1] = Dim::Static(b);
  return s;
}

Shape TransposeShape(const Node& n, int k) {
  const Value* x = In(n, 0);
  if (!x || !x->shape.rank_known) return Shape::Unknown();
  int r = x->shape.rank();
  std::vector<int64_t> perm = n.GetInts("perm");
  if (perm.empty()) {
    for (int i = r - 1; i >= 0; --i) perm.push_back(i);
  }
  if (static_cast<int>(perm.size()) != r) return Shape::Unknown();
  Shape s = RankOnly(r);
  for (int i = 0; i < r; ++i) {
    auto a = NormAxis(perm[i], r);
    if (!a) return Shape::Unknown();
    s.dims[i] = x->shape.dims[*a];
  }
  return s;
}

Shape SqueezeShape(const Node& n, int k) {
  const Value* x = In(n, 0);
  if (!x || !x->shape.rank_known) return Shape::Unknown();
  auto axes = AxesOf(n, 1, 13);
  if (!axes) return Shape::Unknown();
  int r = x->shape.rank();
  if (n.op == OpType::kSqueeze) {
    Shape s;
    s.rank_known = true;
    for (int i = 0; i < r; ++i) {
      bool drop = false;
      if (axes->empty()) {
        if (!x->shape.dims[i].is_static()) return Shape::Unknown();
        drop = x->shape.dims[i].value == 1;
      } else {
        for (int64_t a : *axes) drop |= NormAxis(a, r) == i;
      }
      if (!drop) s.dims.push_back(x->shape.dims[i]);
    }
    return s;
  }
  int out_rank = r + static_cast<int>(axes->size());
  std::vector<bool> inserted(out_rank, false);
  for (int64_t a : *axes) {
    auto na = NormAxis(a, out_rank);
    if (!na) return Shape::Unknown();
    inserted[*na] = true;
  }
  Shape s;
  s.rank_known = true;
  int j = 0;
  for (int i = 0; i < out_rank; ++i) {
    if (inserted[i])
      s.dims.push_back(Dim::Static(1));
    else if (j < r)
      s.dims.push_back(x->shape.dims[j++]);
    else
      return Shape::Unknown();
  }
  return s;
}

Shape ConcatShape(const Node& n, int k) {
  const Value* x = In(n, 0);
  if (!x || !x->shape.rank_known) return Shape::Unknown();
  int r = x->shape.rank();
  auto axis = NormAxis(n.GetInt("axis", 0), r);
  if (!axis) return Shape::Unknown();
  Shape s = x->shape;
  int64_t total = 0;
  for (const Value* v : n.inputs) {
    if (!v || !v->shape.rank_known || v->shape.rank() != r) return RankOnly(r);
    const Dim& d = v->shape.dims[*axis];
    total = (total >= 0 && d.is_static()) ? total + d.value : -1;
    for (int i = 0; i < r; ++i) {
      if (i != *axis && !s.dims[i].is_static() && v->shape.dims[i].is_static()) {
        s.dims[i] = v->shape.dims[i];
      }
    }
  }
  s.dims[*axis] = total >= 0 ? Dim::Static(total) : Dim{};
  return s;
}

Shape GatherShape(const Node& n, int k) {
  const Value* x = In(n, 0);
  const Value* idx = In(n, 1);
  if (!x || !idx || !x->shape.rank_known || !idx->shape.rank_known) return Shape::Unknown();
  int r = x->shape.rank();
  auto axis = NormAxis(n.GetInt("axis", 0), r);
  if (!axis) return Shape::Unknown();
  Shape s;
  s.rank_known = true;
  for (int i = 0; i < *axis; ++i) s.dims.push_back(x->shape.dims[i]);
  for (const Dim& d : idx->shape.dims) s.dims.push_back(d);
  for (int i = *axis + 1; i < r; ++i) s.dims.push_back(x->shape.dims[i]);
  return s;
}

}  // namespace kiln::import::shape_internal
