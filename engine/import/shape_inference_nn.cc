// Shape inference of convolutions, pools, matrix products, reductions and Resize
// (shape_inference_internal.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/import/shape_inference_internal.h"

namespace kiln::import::shape_internal {

namespace {

// Output shape of a convolution-like op along the spatial dims (NCHW...).
Shape ConvLikeShape(const Node& n, const Shape& x, int64_t out_channels,
                    const std::vector<int64_t>& kernel) {
  if (!x.rank_known || x.rank() < 3) return Shape::Unknown();
  int sp = x.rank() - 2;
  Shape out = RankOnly(x.rank());
  out.dims[0] = x.dims[0];
  out.dims[1] = out_channels >= 0 ? Dim::Static(out_channels) : Dim{};
  if (static_cast<int>(kernel.size()) != sp) return out;
  auto strides = n.GetInts("strides", std::vector<int64_t>(sp, 1));
  auto dil = n.GetInts("dilations", std::vector<int64_t>(sp, 1));
  auto pads = n.GetInts("pads", std::vector<int64_t>(2 * sp, 0));
  std::string auto_pad = n.GetString("auto_pad", "NOTSET");
  bool ceil_mode = n.GetInt("ceil_mode", 0) != 0;
  if (static_cast<int>(strides.size()) != sp || static_cast<int>(dil.size()) != sp ||
      static_cast<int>(pads.size()) != 2 * sp) {
    return out;
  }
  for (int i = 0; i < sp; ++i) {
    const Dim& d = x.dims[2 + i];
    if (!d.is_static() || strides[i] <= 0 || dil[i] <= 0) continue;
    // Attributes are untrusted: any overflow leaves the dim unknown (the kernel reports it).
    int64_t eff, span;
    if (kernel[i] < 1 || __builtin_mul_overflow(kernel[i] - 1, dil[i], &eff) ||
        __builtin_add_overflow(eff, 1, &eff) || __builtin_add_overflow(d.value, pads[i], &span) ||
        __builtin_add_overflow(span, pads[i + sp], &span) ||
        __builtin_sub_overflow(span, eff, &span) || strides[i] > (int64_t{1} << 40)) {
      continue;
    }
    int64_t o;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      o = (d.value + strides[i] - 1) / strides[i];
    } else if (auto_pad == "VALID") {
      o = (d.value - eff) / strides[i] + 1;
    } else {
      if (span < 0) continue;
      o = ceil_mode ? (span + strides[i] - 1) / strides[i] + 1 : span / strides[i] + 1;
      if (ceil_mode && (o - 1) * strides[i] >= d.value + pads[i]) --o;
    }
    if (o >= 0) out.dims[2 + i] = Dim::Static(o);
  }
  return out;
}

}  // namespace

// ConvTranspose's Y: X's rank, batch and W's M = W[1] * group (W static); each spatial dim from
// output_shape when given (its last rank - 2 values), else SAME_* padding's in * stride, else
// stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - pads, when X's dim is static.
// Anything else (a symbolic or overflowing dim, malformed attributes) stays unknown: the kernel
// computes the real shape, and reports bad attributes, at run time.
Shape ConvTransposeShape(const Node& n, const Shape& x, const Value* w_value) {
  if (!x.rank_known || x.rank() < 3) return Shape::Unknown();
  const int sp = x.rank() - 2;
  Shape out = RankOnly(x.rank());
  out.dims[0] = x.dims[0];
  const auto w = StaticDimsOf(w_value);
  const int64_t group = n.GetInt("group", 1);
  int64_t m = 0;
  if (w && static_cast<int>(w->size()) == x.rank() && group >= 1 &&
      !__builtin_mul_overflow((*w)[1], group, &m)) {
    out.dims[1] = Dim::Static(m);
  }
  std::vector<int64_t> output_shape = n.GetInts("output_shape");
  if (static_cast<int>(output_shape.size()) == sp + 2) {
    output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
  }
  if (!output_shape.empty()) {
    if (static_cast<int>(output_shape.size()) != sp) return out;
    for (int i = 0; i < sp; ++i) {
      if (output_shape[i] >= 0) out.dims[2 + i] = Dim::Static(output_shape[i]);
    }
    return out;
  }
  std::vector<int64_t> kernel = n.GetInts("kernel_shape");
  if (kernel.empty() && w && static_cast<int>(w->size()) == x.rank()) {
    kernel.assign(w->begin() + 2, w->end());
  }
  const auto strides = n.GetInts("strides", std::vector<int64_t>(sp, 1));
  const auto dil = n.GetInts("dilations", std::vector<int64_t>(sp, 1));
  const auto pads = n.GetInts("pads", std::vector<int64_t>(2 * sp, 0));
  const auto out_pad = n.GetInts("output_padding", std::vector<int64_t>(sp, 0));
  const std::string auto_pad = n.GetString("auto_pad", "NOTSET");
  if (static_cast<int>(kernel.size()) != sp || static_cast<int>(strides.size()) != sp ||
      static_cast<int>(dil.size()) != sp || static_cast<int>(pads.size()) != 2 * sp ||
      static_cast<int>(out_pad.size()) != sp) {
    return out;
  }
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  const bool valid = auto_pad == "VALID";
  for (int i = 0; i < sp; ++i) {
    const Dim& d = x.dims[2 + i];
    if (!d.is_static() || strides[i] <= 0 || dil[i] <= 0 || kernel[i] < 1 || out_pad[i] < 0) {
      continue;
    }
    int64_t o;
    if (same) {
      if (__builtin_mul_overflow(d.value, strides[i], &o)) continue;
    } else {
      // Attributes are untrusted: any overflow leaves the dim unknown (the kernel reports it).
      int64_t eff, span;
      if (__builtin_mul_overflow(kernel[i] - 1, dil[i], &eff) ||
          __builtin_mul_overflow(d.value - 1, strides[i], &span) ||
          __builtin_add_overflow(eff, 1, &eff) || __builtin_add_overflow(span, eff, &o) ||
          __builtin_add_overflow(o, out_pad[i], &o) ||
          (!valid && (__builtin_sub_overflow(o, pads[i], &o) ||
                      __builtin_sub_overflow(o, pads[i + sp], &o)))) {
        continue;
      }
    }
    if (o >= 0) out.dims[2 + i] = Dim::Static(o);
  }
  return out;
}

Shape ResizeShape(const Node& n, int k) {
  const Value* x = In(n, 0);
  // Same rank as x (the kernel computes the resized dims at run time): an axis whose constant
  // scale is exactly 1 keeps its dim, every other axis is unknown. The layout pass needs the
  // rank to keep a Resize between convolutions channels-last.
  if (k != 0 || !x || !x->shape.rank_known) return Shape::Unknown();
  Shape s = x->shape;
  std::optional<std::vector<double>> scales;
  if (n.op == OpType::kResize && n.since_version >= 11) {
    scales = ConstFloats(n, 2);
    if (scales && scales->empty()) scales.reset();
  } else if (n.op == OpType::kResize || n.since_version >= 9) {
    scales = ConstFloats(n, 1);
  }
  const bool all_axes = !n.has_attr("axes");
  for (int d = 0; d < s.rank(); ++d) {
    const bool kept =
        all_axes && scales && static_cast<int>(scales->size()) == s.rank() && (*scales)[d] == 1.0;
    if (!kept) s.dims[d] = Dim{};
  }
  return s;
}

Shape MatMulShape(const Node& n, int k) {
  const Value* x = In(n, 0);
  const Value* b = In(n, n.op == OpType::kQLinearMatMul ? 3 : 1);
  if (!x || !b || !x->shape.rank_known || !b->shape.rank_known) return Shape::Unknown();
  Shape sa = x->shape, sb = b->shape;
  if (sa.rank() == 0 || sb.rank() == 0) return Shape::Unknown();
  bool a1 = sa.rank() == 1, b1 = sb.rank() == 1;
  if (a1) sa.dims.insert(sa.dims.begin(), Dim::Static(1));
  if (b1) sb.dims.push_back(Dim::Static(1));
  Shape ba, bb;
  ba.rank_known = bb.rank_known = true;
  ba.dims.assign(sa.dims.begin(), sa.dims.end() - 2);
  bb.dims.assign(sb.dims.begin(), sb.dims.end() - 2);
  Shape s = Broadcast({&ba, &bb});
  if (!a1) s.dims.push_back(sa.dims[sa.rank() - 2]);
  if (!b1) s.dims.push_back(sb.dims[sb.rank() - 1]);
  return s;
}

Shape GemmShape(const Node& n, int k) {
  const Value* x = In(n, 0);
  const Value* b = In(n, 1);
  if (!x || !b || x->shape.rank() != 2 || b->shape.rank() != 2) return RankOnly(2);
  Shape s = RankOnly(2);
  s.dims[0] = x->shape.dims[n.GetInt("transA", 0) ? 1 : 0];
  s.dims[1] = b->shape.dims[n.GetInt("transB", 0) ? 0 : 1];
  return s;
}

Shape ConvShape(const Node& n, int k) {
  const Value* x = In(n, 0);
  auto w = StaticDimsOf(In(n, n.op == OpType::kQLinearConv ? 3 : 1));
  if (!x || !x->shape.rank_known) return Shape::Unknown();
  std::vector<int64_t> kernel = n.GetInts("kernel_shape");
  int64_t oc = -1;
  if (w && w->size() >= 2) {
    oc = (*w)[0];
    if (kernel.empty()) kernel.assign(w->begin() + 2, w->end());
  }
  return ConvLikeShape(n, x->shape, oc, kernel);
}

Shape PoolShape(const Node& n, int k) {
  const Value* x = In(n, 0);
  if (!x || !x->shape.rank_known || x->shape.rank() < 3) return Shape::Unknown();
  Shape s = ConvLikeShape(n, x->shape, -1, n.GetInts("kernel_shape"));
  if (s.rank_known) s.dims[1] = x->shape.dims[1];
  return s;
}

Shape GlobalPoolShape(const Node& n, int k) {
  const Value* x = In(n, 0);
  if (!x || !x->shape.rank_known || x->shape.rank() < 2) return Shape::Unknown();
  Shape s = x->shape;
  for (int i = 2; i < s.rank(); ++i) s.dims[i] = Dim::Static(1);
  return s;
}

Shape ReduceShape(const Node& n, int k) {
  const Value* x = In(n, 0);
  if (!x || !x->shape.rank_known) return Shape::Unknown();
  int r = x->shape.rank();
  std::optional<std::vector<int64_t>> axes;
  if (n.op == OpType::kArgMax || n.op == OpType::kArgMin) {
    axes = std::vector<int64_t>{n.GetInt("axis", 0)};
  } else {
    axes = AxesOf(n, 1, n.op == OpType::kReduceSum ? 13 : 18);
  }
  if (!axes) return Shape::Unknown();
  bool keep = n.GetInt("keepdims", 1) != 0;
  if (axes->empty()) {
    if (n.GetInt("noop_with_empty_axes", 0) != 0) return x->shape;
    for (int i = 0; i < r; ++i) axes->push_back(i);
  }
  std::vector<bool> red(r, false);
  for (int64_t a : *axes) {
    auto na = NormAxis(a, r);
    if (!na) return Shape::Unknown();
    red[*na] = true;
  }
  Shape s;
  s.rank_known = true;
  for (int i = 0; i < r; ++i) {
    if (!red[i])
      s.dims.push_back(x->shape.dims[i]);
    else if (keep)
      s.dims.push_back(Dim::Static(1));
  }
  return s;
}

}  // namespace kiln::import::shape_internal
