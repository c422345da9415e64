#include "engine/import/shape_inference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/import/shape_inference_control_flow.h"
#include "engine/import/shape_inference_domains.h"
#include "engine/import/shape_inference_recurrent.h"
#include "engine/import/shape_inference_sequence.h"
#include "engine/import/shape_inference_signal.h"
#include "engine/import/shape_inference_stateful.h"
#include "engine/ir/slice.h"

namespace kiln::import {
namespace {

using ir::Dim;
using ir::Node;
using ir::OpType;
using ir::Shape;
using ir::Value;

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

// An entry of PartialInts that is known only at run time.
constexpr int64_t kUnknownInt = std::numeric_limits<int64_t>::min();

// The integer contents of `v` as far as they are known before run time: a constant's, or those
// of a Concat (through Casts) of constants and of 1-D values of static length (whose entries are
// kUnknownInt). Exporters build Reshape and Expand targets so: Concat(Shape(x)[0], [1], [256]).
// nullopt when not even the length is known.
std::optional<std::vector<int64_t>> PartialInts(const Value* v, int depth = 0) {
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

std::optional<std::vector<int64_t>> StaticDimsOf(const Value* v) {
  if (!v || !v->shape.is_static()) return std::nullopt;
  return v->shape.StaticDims();
}

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

// The dtype attribute `attr` of `n` names (Cast's and BitCast's `to`, EyeLike's `dtype`, ...):
// Unimplemented naming the ONNX type when Kiln has no such type (float8, int4, string, ...).
absl::StatusOr<DataType> AttrDataType(const Node& n, const char* attr, int64_t fallback) {
  const int64_t v = n.GetInt(attr, fallback);
  const DataType t = v < INT32_MIN || v > INT32_MAX ? DataType::kUndefined
                                                    : DataTypeFromOnnx(static_cast<int32_t>(v));
  if (t == DataType::kUndefined || t == DataType::kString) {
    const std::string name = v < INT32_MIN || v > INT32_MAX
                                 ? absl::StrCat("number ", v)
                                 : OnnxDataTypeName(static_cast<int32_t>(v));
    return absl::UnimplementedError(
        absl::StrCat(n.Label(), " unsupported dtype ", name, ": attribute '", attr, "' = ", v));
  }
  return t;
}

// BitCast: `to` is a type Kiln has, of the input's element size (ONNX requires equal widths;
// the shape stays).
absl::StatusOr<DataType> BitCastType(const Node& n) {
  if (!n.has_attr("to")) {
    return absl::InvalidArgumentError(absl::StrCat(n.Label(), " requires attribute 'to'"));
  }
  ASSIGN_OR_RETURN(DataType to, AttrDataType(n, "to", 0));
  const DataType from = InType(n, 0);
  if (from == DataType::kString) {
    return absl::UnimplementedError(absl::StrCat(n.Label(), " unsupported dtype string"));
  }
  if (from != DataType::kUndefined && DataTypeBits(from) != DataTypeBits(to)) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.Label(), " cannot reinterpret ", DataTypeOnnxName(from), " (",
                     DataTypeBits(from), " bits) as ", DataTypeOnnxName(to), " (", DataTypeBits(to),
                     " bits): BitCast requires the same bit width"));
  }
  return to;
}

// Output dtype of output `k` of node `n`.
absl::StatusOr<DataType> OutputType(const Node& n, int k) {
  if (IsSignalOp(n.op)) return SignalOutputType(n, k);  // shape_inference_signal.h
  DataType t0 = InType(n, 0);
  ASSIGN_OR_RETURN(std::optional<DataType> domain_type, DomainOpOutputType(n, k));
  if (domain_type) return *domain_type;  // shape_inference_domains.h
  switch (n.op) {
    case OpType::kEqual:
    case OpType::kGreater:
    case OpType::kGreaterOrEqual:
    case OpType::kLess:
    case OpType::kLessOrEqual:
    case OpType::kAnd:
    case OpType::kOr:
    case OpType::kXor:
    case OpType::kNot:
    case OpType::kIsInf:
    case OpType::kIsNaN:
      return DataType::kBool;
    case OpType::kShape:
    case OpType::kSize:
    case OpType::kArgMax:
    case OpType::kArgMin:
    case OpType::kNonZero:
      return DataType::kI64;
    case OpType::kTopK:
    case OpType::kMaxPool:
      return k == 1 ? DataType::kI64 : t0;
    case OpType::kDropout:  // the mask is T before opset 10, bool from 10
      return k == 1 && n.since_version >= 10 ? DataType::kBool : t0;
    case OpType::kLayerNormalization:
      return k == 0 ? t0 : DataType::kF32;  // Mean/InvStdDev follow stash_type (float)
    case OpType::kCast:
      return AttrDataType(n, "to", 0);
    case OpType::kBitCast:
      return BitCastType(n);
    case OpType::kCastLike:
      return InType(n, 1);
    case OpType::kConstant: {
      const ir::Attribute* a = n.attr("value");
      if (a && a->type == ir::Attribute::Type::kTensor) return a->t.dtype();
      if (n.has_attr("value_float") || n.has_attr("value_floats")) return DataType::kF32;
      if (n.has_attr("value_int") || n.has_attr("value_ints")) return DataType::kI64;
      if (n.has_attr("value_string") || n.has_attr("value_strings")) {
        return absl::UnimplementedError(absl::StrCat(n.Label(), " unsupported dtype string"));
      }
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), " has no value attribute"));
    }
    case OpType::kConstantOfShape: {
      const ir::Attribute* a = n.attr("value");
      return a && a->type == ir::Attribute::Type::kTensor ? a->t.dtype() : DataType::kF32;
    }
    case OpType::kEyeLike: {
      if (n.has_attr("dtype")) return AttrDataType(n, "dtype", 1);
      return t0;
    }
    case OpType::kQuantizeLinear: {
      if (n.input(2)) return InType(n, 2);
      if (n.has_attr("output_dtype") && n.GetInt("output_dtype", 0) != 0) {
        return AttrDataType(n, "output_dtype", 0);
      }
      return DataType::kU8;
    }
    case OpType::kDequantizeLinear:  // output_dtype (opset 23), else x_scale's dtype
      if (n.since_version >= 23 && n.GetInt("output_dtype", 0) != 0) {
        return AttrDataType(n, "output_dtype", 0);
      }
      return n.since_version >= 19 ? InType(n, 1) : DataType::kF32;
    case OpType::kWhere:
      return InType(n, 1);
    case OpType::kDynamicQuantizeLinear:  // y and y_zero_point are uint8, y_scale float
      return k == 1 ? DataType::kF32 : DataType::kU8;
    case OpType::kMatMulInteger:
    case OpType::kConvInteger:
      return DataType::kI32;
    case OpType::kConvIntegerToFloat:  // float(acc + B) * scale (engine/ir/ops.def)
    case OpType::kMatMulIntegerToFloat:
      return DataType::kF32;
    case OpType::kQLinearMatMul:  // y has y_zero_point's dtype (input 7, required)
    case OpType::kQLinearConv:
      return InType(n, 7);
    case OpType::kOneHot:
      return InType(n, 2);
    case OpType::kLSTM:  // checks the node too (shape_inference_recurrent.h)
    case OpType::kLSTMQuantizedR:
    case OpType::kGRU:
    case OpType::kRNN:
      return RecurrentOutputType(n, k);
    case OpType::kLinearAttention:  // checks the node too (shape_inference_stateful.h)
    case OpType::kCausalConvWithState:
    case OpType::kRotaryEmbedding:
      return StatefulOutputType(n, k);
    case OpType::kSequenceEmpty:
      return AttrDataType(n, "dtype", static_cast<int64_t>(DataType::kF32));
    case OpType::kSequenceLength:
      return DataType::kI64;
    case OpType::kOptionalHasElement:
      return DataType::kBool;
    case OpType::kOptional: {
      if (n.input(0)) return t0;
      const std::vector<int64_t> type = n.GetInts("type");  // {ValueKind, dtype} (import)
      if (type.size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat(n.Label(), " has neither an input nor a 'type' attribute"));
      }
      return static_cast<DataType>(type[1]);
    }
    case OpType::kSequenceConstruct:
    case OpType::kSequenceInsert:
      // Every element has the sequence's element type.
      for (int i = 1; i < n.num_inputs() && (n.op == OpType::kSequenceConstruct || i < 2); ++i) {
        if (InType(n, i) != t0) {
          return absl::InvalidArgumentError(
              absl::StrCat(n.Label(), " input ", i, " is ", DataTypeOnnxName(InType(n, i)),
                           " but the sequence holds ", DataTypeOnnxName(t0)));
        }
      }
      return t0;
    default:
      return t0;
  }
}

std::optional<std::vector<double>> ConstFloats(const Node& n, int i);  // below

Shape InferShape(const Node& n, int k) {
  if (IsSignalOp(n.op)) return SignalOutputShape(n, k);
  const Value* x = In(n, 0);
  if (std::optional<Shape> s = DomainOpShape(n, k)) return *s;  // shape_inference_domains.h
  switch (n.op) {
    // Same shape as input 0.
    case OpType::kAbs:
    case OpType::kAcos:
    case OpType::kAcosh:
    case OpType::kAsin:
    case OpType::kAsinh:
    case OpType::kAtan:
    case OpType::kAtanh:
    case OpType::kCeil:
    case OpType::kCos:
    case OpType::kCosh:
    case OpType::kErf:
    case OpType::kExp:
    case OpType::kFloor:
    case OpType::kLog:
    case OpType::kNeg:
    case OpType::kReciprocal:
    case OpType::kRound:
    case OpType::kSign:
    case OpType::kSin:
    case OpType::kSinh:
    case OpType::kSqrt:
    case OpType::kTan:
    case OpType::kTanh:
    case OpType::kNot:
    case OpType::kIsInf:
    case OpType::kIsNaN:
    case OpType::kRelu:
    case OpType::kLeakyRelu:
    case OpType::kElu:
    case OpType::kSelu:
    case OpType::kCelu:
    case OpType::kSigmoid:
    case OpType::kHardSigmoid:
    case OpType::kHardSwish:
    case OpType::kSoftplus:
    case OpType::kSoftsign:
    case OpType::kMish:
    case OpType::kGelu:
    case OpType::kThresholdedRelu:
    case OpType::kShrink:
    case OpType::kClip:
    case OpType::kCast:
    case OpType::kCastLike:
    case OpType::kBitCast:
    case OpType::kTensorScatter:
    case OpType::kIdentity:
    case OpType::kSoftmax:
    case OpType::kLogSoftmax:
    case OpType::kHardmax:
    case OpType::kCumSum:
    case OpType::kCumProd:
    case OpType::kSwish:
    case OpType::kLpNormalization:
    case OpType::kInstanceNormalization:
    case OpType::kGroupNormalization:
    case OpType::kRMSNormalization:
    case OpType::kTrilu:
    case OpType::kQuantizeLinear:
    case OpType::kDequantizeLinear:
    case OpType::kEyeLike:
    case OpType::kScatterElements:
    case OpType::kScatterND:
    case OpType::kPRelu:
    case OpType::kLRN:
      return k == 0 ? SameShape(n, 0) : Shape::Unknown();
    case OpType::kDropout:
    case OpType::kBatchNormalization:
      return k == 0 || n.op == OpType::kDropout ? SameShape(n, 0) : Shape::Unknown();
    case OpType::kDynamicQuantizeLinear:  // y as x; y_scale and y_zero_point are scalars
      return k == 0 ? SameShape(n, 0) : Shape::Of(std::vector<int64_t>{});
    case OpType::kLayerNormalization:
      return k == 0 ? SameShape(n, 0) : Shape::Unknown();
    case OpType::kAddLayerNorm:  // normalised sum and the sum itself
      return SameShape(n, 0);
    case OpType::kAdd:
    case OpType::kSub:
    case OpType::kMul:
    case OpType::kDiv:
    case OpType::kPow:
    case OpType::kMod:
    case OpType::kAnd:
    case OpType::kOr:
    case OpType::kXor:
    case OpType::kEqual:
    case OpType::kGreater:
    case OpType::kGreaterOrEqual:
    case OpType::kLess:
    case OpType::kLessOrEqual:
    case OpType::kMax:
    case OpType::kMin:
    case OpType::kMean:
    case OpType::kSum:
    case OpType::kWhere: {
      std::vector<const Shape*> shapes;
      for (const Value* v : n.inputs) {
        if (!v) return Shape::Unknown();
        shapes.push_back(&v->shape);
      }
      return Broadcast(shapes);
    }
    case OpType::kShape: {
      if (!x || !x->shape.rank_known) return RankOnly(1);
      int r = x->shape.rank();
      int64_t start = n.GetInt("start", 0), end = n.GetInt("end", r);
      start = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r);
      end = std::clamp<int64_t>(end < 0 ? end + r : end, 0, r);
      return Shape::Of({std::max<int64_t>(0, end - start)});
    }
    case OpType::kSize:
      return Shape::Of({});
    case OpType::kConstant: {
      const ir::Attribute* a = n.attr("value");
      if (a && a->type == ir::Attribute::Type::kTensor) return Shape::Of(a->t.dims());
      if (n.has_attr("value_float") || n.has_attr("value_int")) return Shape::Of({});
      if (const ir::Attribute* b = n.attr("value_floats")) {
        return Shape::Of({static_cast<int64_t>(b->floats.size())});
      }
      if (const ir::Attribute* b = n.attr("value_ints")) {
        return Shape::Of({static_cast<int64_t>(b->ints.size())});
      }
      return Shape::Unknown();
    }
    case OpType::kConstantOfShape: {
      auto dims = ConstInts(n, 0);
      return dims ? Shape::Of(*dims) : Shape::Unknown();
    }
    case OpType::kResize:
    case OpType::kUpsample: {
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
        const bool kept = all_axes && scales && static_cast<int>(scales->size()) == s.rank() &&
                          (*scales)[d] == 1.0;
        if (!kept) s.dims[d] = Dim{};
      }
      return s;
    }
    case OpType::kSlice: {
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
    case OpType::kExpand: {
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
    case OpType::kReshape: {
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
    case OpType::kFlatten: {
      if (!x || !x->shape.rank_known) return RankOnly(2);
      int r = x->shape.rank();
      // axis in [-r, r]; a negative one counts from the end of x's r dims (not of r + 1).
      int64_t flat = n.GetInt("axis", 1);
      if (flat < 0) flat += r;
      auto axis =
          flat >= 0 && flat <= r ? std::optional<int>(static_cast<int>(flat)) : std::nullopt;
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
    case OpType::kTranspose: {
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
    case OpType::kSqueeze:
    case OpType::kUnsqueeze: {
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
    case OpType::kConcat: {
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
    case OpType::kGather: {
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
    case OpType::kFusedMatMul:
    case OpType::kMatMulInteger:
    case OpType::kMatMulIntegerToFloat:
    case OpType::kQLinearMatMul:
    case OpType::kMatMul: {
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
    case OpType::kGemm: {
      const Value* b = In(n, 1);
      if (!x || !b || x->shape.rank() != 2 || b->shape.rank() != 2) return RankOnly(2);
      Shape s = RankOnly(2);
      s.dims[0] = x->shape.dims[n.GetInt("transA", 0) ? 1 : 0];
      s.dims[1] = b->shape.dims[n.GetInt("transB", 0) ? 0 : 1];
      return s;
    }
    case OpType::kFusedConv:
    case OpType::kConvInteger:
    case OpType::kConvIntegerToFloat:
    case OpType::kQLinearConv:
    case OpType::kConv: {
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
    case OpType::kConvTranspose:
      if (!x) return Shape::Unknown();
      return ConvTransposeShape(n, x->shape, In(n, 1));
    case OpType::kMaxPool:
    case OpType::kAveragePool: {
      if (!x || !x->shape.rank_known || x->shape.rank() < 3) return Shape::Unknown();
      Shape s = ConvLikeShape(n, x->shape, -1, n.GetInts("kernel_shape"));
      if (s.rank_known) s.dims[1] = x->shape.dims[1];
      return s;
    }
    case OpType::kGlobalAveragePool:
    case OpType::kGlobalMaxPool: {
      if (!x || !x->shape.rank_known || x->shape.rank() < 2) return Shape::Unknown();
      Shape s = x->shape;
      for (int i = 2; i < s.rank(); ++i) s.dims[i] = Dim::Static(1);
      return s;
    }
    case OpType::kReduceL1:
    case OpType::kReduceL2:
    case OpType::kReduceLogSum:
    case OpType::kReduceLogSumExp:
    case OpType::kReduceMax:
    case OpType::kReduceMean:
    case OpType::kReduceMin:
    case OpType::kReduceProd:
    case OpType::kReduceSum:
    case OpType::kReduceSumSquare:
    case OpType::kArgMax:
    case OpType::kArgMin: {
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
    case OpType::kLSTM:
    case OpType::kLSTMQuantizedR:
    case OpType::kGRU:
    case OpType::kRNN:
      return RecurrentOutputShape(n, k);
    case OpType::kLinearAttention:
    case OpType::kCausalConvWithState:
    case OpType::kRotaryEmbedding:
      return StatefulOutputShape(n, k);
    // Sequences: the shape of a sequence value is its elements' (where they agree).
    case OpType::kSequenceLength:
    case OpType::kOptionalHasElement:
      return Shape::Of({});
    case OpType::kSequenceAt:
    case OpType::kSequenceErase:
    case OpType::kOptionalGetElement:
    case OpType::kOptional:
      return x ? x->shape : Shape::Unknown();
    case OpType::kSequenceConstruct:
    case OpType::kSequenceInsert: {
      if (!x || !x->shape.rank_known) return Shape::Unknown();
      Shape s = x->shape;
      const int last = n.op == OpType::kSequenceInsert ? 2 : n.num_inputs();
      for (int i = 1; i < last && i < n.num_inputs(); ++i) {
        const Value* e = In(n, i);
        if (!e || !e->shape.rank_known || e->shape.rank() != s.rank()) return Shape::Unknown();
        for (int d = 0; d < s.rank(); ++d) {
          if (!(s.dims[d] == e->shape.dims[d])) s.dims[d] = Dim{};
        }
      }
      return s;
    }
    default:
      return Shape::Unknown();
  }
}

// The largest tensor a static shape may describe: 2^40 bytes (1 TiB). Tensor::Allocate refuses
// anything larger (ir/tensor.cc), so such a tensor could never run; refusing it here turns a
// run-time failure (or a plan sized in terabytes) into a build error that names the node.
constexpr int64_t kMaxTensorBytes = int64_t{1} << 40;

// Why a tensor of `elements` elements (a count held as a double, so it never overflows; a
// negative one is no count at all) of `dtype` is too large, or an empty string.
std::string TooLarge(double elements, DataType dtype) {
  const double es = std::max<size_t>(DataTypeSize(dtype), 1);
  if (elements >= 0 && elements * es <= static_cast<double>(kMaxTensorBytes)) return "";
  return absl::StrCat(elements < 0 ? std::string("an invalid number of elements")
                                   : absl::StrCat(elements, " elements"),
                      " of ", DataTypeOnnxName(dtype), ", over the ", kMaxTensorBytes,
                      "-byte (1 TiB) limit of one tensor");
}

// Element count of static dims as a double (exact enough to compare with kMaxTensorBytes, and
// never overflowing), or -1 when a dim is negative.
double CountOf(const std::vector<int64_t>& dims) {
  double n = 1;
  for (int64_t d : dims) {
    if (d < 0) return -1;
    n *= static_cast<double>(d);
  }
  return n;
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

absl::Status Invalid(const Node& n, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(n.Label(), " ", why));
}

// Reshape with a constant shape: each dim >= -1, at most one -1, a 0 copies an existing input
// dim, and with a static input the element counts agree (what the kernel would refuse at run
// time, refused at build time instead).
absl::Status CheckReshape(const Node& n) {
  auto target = ConstInts(n, 1);
  if (!target) return absl::OkStatus();
  const Value* x = In(n, 0);
  const bool allowzero = n.GetInt("allowzero", 0) != 0;
  const std::string shape = absl::StrCat("[", absl::StrJoin(*target, ","), "]");
  int infer = -1;
  for (size_t i = 0; i < target->size(); ++i) {
    const int64_t d = (*target)[i];
    if (d < -1) return Invalid(n, absl::StrCat("shape ", shape, " has dim ", d, " (< -1)"));
    if (d == -1) {
      if (infer >= 0) return Invalid(n, absl::StrCat("shape ", shape, " has more than one -1"));
      infer = static_cast<int>(i);
    }
    if (d == 0 && !allowzero && x && x->shape.rank_known &&
        i >= static_cast<size_t>(x->shape.rank())) {
      return Invalid(n, absl::StrCat("shape ", shape, " copies dim ", i, " (0) of a rank-",
                                     x->shape.rank(), " input"));
    }
  }
  auto in = StaticDimsOf(x);
  if (!in) return absl::OkStatus();
  const int64_t total = ir::NumElementsOf(*in);
  int64_t known = 1;
  for (size_t i = 0; i < target->size(); ++i) {
    if (static_cast<int>(i) == infer) continue;
    const int64_t d = (*target)[i] == 0 && !allowzero ? (*in)[i] : (*target)[i];
    known = MulDims(known, d);
  }
  // known < 0: the product of the given dims overflowed, so it is no element count. With a -1,
  // a zero product leaves the -1 undetermined (an empty input): the kernel decides.
  bool fits;
  if (infer < 0) {
    fits = known == total;
  } else if (known > 0) {
    fits = total % known == 0;
  } else {
    fits = known == 0 || total == 0;
  }
  if (total >= 0 && !fits) {
    return Invalid(n, absl::StrCat("cannot reshape ", x->shape.ToString(), " (", total,
                                   " elements) to ", shape));
  }
  return absl::OkStatus();
}

// TopK: k (attribute before opset 10, else a constant input of one element) in [0, size of the
// axis], the axis within the rank.
absl::Status CheckTopK(const Node& n) {
  std::optional<int64_t> k;
  if (n.since_version < 10) {
    if (n.has_attr("k")) k = n.GetInt("k", 0);
  } else if (auto kv = ConstInts(n, 1)) {
    if (kv->size() != 1) {
      return Invalid(n, absl::StrCat("k must hold one value, has ", kv->size()));
    }
    k = (*kv)[0];
  }
  if (k && *k < 0) return Invalid(n, absl::StrCat("k = ", *k, " is negative"));
  const Value* x = In(n, 0);
  if (!x || !x->shape.rank_known) return absl::OkStatus();
  const int64_t axis_attr = n.GetInt("axis", -1);
  auto axis = NormAxis(axis_attr, x->shape.rank());
  if (!axis) {
    return Invalid(n,
                   absl::StrCat("axis ", axis_attr, " is out of range for rank ", x->shape.rank()));
  }
  const Dim& d = x->shape.dims[*axis];
  if (k && d.is_static() && *k > d.value) {
    return Invalid(n, absl::StrCat("k = ", *k, " is larger than axis ", *axis, " of size ", d.value,
                                   " (input ", x->shape.ToString(), ")"));
  }
  return absl::OkStatus();
}

// Resize / Upsample with constant scales or sizes: every scale positive and finite, every size
// >= 0, one per resized axis, and the output within the tensor size limit.
absl::Status CheckResize(const Node& n, DataType out_dtype) {
  const bool legacy = n.op == OpType::kUpsample || n.since_version < 11;
  std::optional<std::vector<double>> scales;
  std::optional<std::vector<int64_t>> sizes;
  if (n.op == OpType::kUpsample && n.since_version < 9) {
    if (n.has_attr("scales")) {
      std::vector<float> f = n.GetFloats("scales");
      scales = std::vector<double>(f.begin(), f.end());
    }
  } else if (legacy) {
    scales = ConstFloats(n, 1);
  } else {
    scales = ConstFloats(n, 2);
    sizes = ConstInts(n, 3);
  }
  if (scales && scales->empty()) scales.reset();  // an empty input means "not given"
  if (sizes && sizes->empty()) sizes.reset();
  if (!scales && !sizes) return absl::OkStatus();
  const Value* x = In(n, 0);
  const bool has_axes = !legacy && n.has_attr("axes");
  const std::vector<int64_t> axes_attr = n.GetInts("axes");
  const int rank = x && x->shape.rank_known ? x->shape.rank() : -1;
  const size_t count = scales ? scales->size() : sizes->size();
  const char* what = scales ? "scales" : "sizes";
  if (has_axes ? count != axes_attr.size() : rank >= 0 && count != static_cast<size_t>(rank)) {
    return Invalid(n,
                   absl::StrCat(what, " has ", count, " values for ",
                                has_axes ? axes_attr.size() : static_cast<size_t>(rank), " axes"));
  }
  for (size_t i = 0; i < count; ++i) {
    if (scales && !((*scales)[i] > 0 && std::isfinite((*scales)[i]))) {
      return Invalid(n, absl::StrCat("scales must be positive and finite, got ", (*scales)[i],
                                     " at index ", i));
    }
    if (sizes && (*sizes)[i] < 0) {
      return Invalid(n, absl::StrCat("sizes must be >= 0, got ", (*sizes)[i], " at index ", i));
    }
  }
  // The output's element count, from the static input dims (the unresized ones stay).
  auto in = StaticDimsOf(x);
  if (!in) return absl::OkStatus();
  std::vector<double> out(in->begin(), in->end());
  for (size_t i = 0; i < count; ++i) {
    auto axis = has_axes ? NormAxis(axes_attr[i], rank) : std::optional<int>(static_cast<int>(i));
    if (!axis) return Invalid(n, absl::StrCat("axis ", axes_attr[i], " is out of range"));
    out[*axis] =
        scales ? std::floor((*in)[*axis] * (*scales)[i]) : static_cast<double>((*sizes)[i]);
  }
  double elements = 1;
  for (double d : out) elements *= d;
  const std::string too_large = TooLarge(elements, out_dtype);
  if (!too_large.empty()) return Invalid(n, absl::StrCat("output would hold ", too_large));
  return absl::OkStatus();
}

// Expand with a constant shape: every dim >= 0, broadcast-compatible with the input's static
// dims, and the output within the tensor size limit.
absl::Status CheckExpand(const Node& n, DataType out_dtype) {
  auto shape = ConstInts(n, 1);
  const Value* x = In(n, 0);
  if (!shape || !x || !x->shape.rank_known) return absl::OkStatus();
  const std::string target = absl::StrCat("[", absl::StrJoin(*shape, ","), "]");
  for (int64_t d : *shape) {
    if (d < 0) return Invalid(n, absl::StrCat("shape ", target, " has a negative dim ", d));
  }
  const size_t rank = std::max(shape->size(), static_cast<size_t>(x->shape.rank()));
  double elements = 1;
  bool exact = true;  // false when an output dim is a symbolic input dim (maybe 0)
  for (size_t i = 0; i < rank; ++i) {
    const size_t si = rank - shape->size(), xi = rank - x->shape.rank();
    const int64_t s = i >= si ? (*shape)[i - si] : 1;
    const Dim xd = i >= xi ? x->shape.dims[i - xi] : Dim::Static(1);
    if (xd.is_static() && s != 1 && xd.value != 1 && s != xd.value) {
      return Invalid(n, absl::StrCat("cannot expand ", x->shape.ToString(), " to ", target));
    }
    // A dim of 1 in the shape takes the input's; any other value is the output's dim (the
    // input's, symbolic or not, must then be 1 or the same).
    if (s == 1 && !xd.is_static()) exact = false;
    elements *= static_cast<double>(s == 1 && xd.is_static() ? xd.value : s);
  }
  if (!exact) return absl::OkStatus();
  const std::string too_large = TooLarge(elements, out_dtype);
  if (!too_large.empty()) return Invalid(n, absl::StrCat("output would hold ", too_large));
  return absl::OkStatus();
}

// TensorScatter: a known mode; an axis within the rank and not 0 (the batch); update of the
// cache's dtype and rank, its dims (where static) equal to the cache's but along the axis, where
// it is at most the cache's; write_indices 1-D of the batch size.
absl::Status CheckTensorScatter(const Node& n) {
  const std::string mode = n.GetString("mode", "linear");
  if (mode != "linear" && mode != "circular") {
    return Invalid(n, absl::StrCat("mode must be 'linear' or 'circular', got '", mode, "'"));
  }
  const Value* past = In(n, 0);
  const Value* update = In(n, 1);
  if (past && update && past->dtype != DataType::kUndefined &&
      update->dtype != DataType::kUndefined && past->dtype != update->dtype) {
    return Invalid(n, absl::StrCat("update is ", DataTypeOnnxName(update->dtype),
                                   " but past_cache is ", DataTypeOnnxName(past->dtype)));
  }
  if (!past || !past->shape.rank_known) return absl::OkStatus();
  const int rank = past->shape.rank();
  const int64_t axis_attr = n.GetInt("axis", -2);
  auto axis = NormAxis(axis_attr, rank);
  if (!axis || *axis == 0) {
    return Invalid(
        n, absl::StrCat("axis ", axis_attr, " is ", axis ? "the batch axis 0" : "out of range",
                        " for past_cache ", past->shape.ToString()));
  }
  if (update && update->shape.rank_known) {
    if (update->shape.rank() != rank) {
      return Invalid(n, absl::StrCat("update ", update->shape.ToString(), " and past_cache ",
                                     past->shape.ToString(), " differ in rank"));
    }
    for (int i = 0; i < rank; ++i) {
      const Dim& p = past->shape.dims[i];
      const Dim& u = update->shape.dims[i];
      if (!p.is_static() || !u.is_static()) continue;
      if (i == *axis ? u.value > p.value : u.value != p.value) {
        return Invalid(n, absl::StrCat("update ", update->shape.ToString(),
                                       " does not fit past_cache ", past->shape.ToString(),
                                       i == *axis ? " along the sequence axis " : " at dim ", i));
      }
    }
  }
  const Value* wi = In(n, 2);
  if (wi && wi->shape.rank_known) {
    const Dim& b = past->shape.dims[0];
    if (wi->shape.rank() != 1 ||
        (b.is_static() && wi->shape.dims[0].is_static() && wi->shape.dims[0].value != b.value)) {
      return Invalid(n, absl::StrCat("write_indices ", wi->shape.ToString(),
                                     " must be 1-D of the batch size (past_cache ",
                                     past->shape.ToString(), ")"));
    }
  }
  return absl::OkStatus();
}

// Operands fixed at build time that make the op fail whatever the inputs: the error the kernel
// would give at run time, given at build time. `out_dtype`: the dtype of output 0.
absl::Status CheckStaticOperands(const Node& n, DataType out_dtype) {
  switch (n.op) {
    case OpType::kReshape:
      return CheckReshape(n);
    case OpType::kTopK:
      return CheckTopK(n);
    case OpType::kResize:
    case OpType::kUpsample:
      return CheckResize(n, out_dtype);
    case OpType::kExpand:
      return CheckExpand(n, out_dtype);
    case OpType::kTensorScatter:
      return CheckTensorScatter(n);
    default:
      return absl::OkStatus();
  }
}

}  // namespace

absl::Status InferTypesAndShapes(ir::Graph& graph, const std::vector<ir::Node*>& order) {
  for (const Value* v : graph.inputs()) {
    if (!v->shape.is_static()) continue;
    const std::string too_large = TooLarge(CountOf(v->shape.StaticDims()), v->dtype);
    if (!too_large.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("graph input '", v->name, "' of shape ",
                                                     v->shape.ToString(), " holds ", too_large));
    }
  }
  for (Node* n : order) {
    RETURN_IF_ERROR(InferFlexAttentionModifiers(*n));  // its subgraphs, if any
    if (IsControlFlow(n->op)) {
      RETURN_IF_ERROR(InferControlFlow(*n));  // the subgraphs, then the outputs
      continue;
    }
    RETURN_IF_ERROR(CheckInputKinds(*n));
    for (int k = 0; k < n->num_outputs(); ++k) {
      Value* out = n->outputs[k];
      if (!out) continue;
      RETURN_IF_ERROR(SetOutputKind(*n, k, OutputKind(*n, k)));
      ASSIGN_OR_RETURN(DataType t, OutputType(*n, k));
      if (t == DataType::kUndefined) {
        return absl::InvalidArgumentError(absl::StrCat(n->Label(), " output ", k, " '", out->name,
                                                       "': dtype cannot be inferred (input ",
                                                       "dtype unknown)"));
      }
      if (out->dtype != DataType::kUndefined && out->dtype != t) {
        return absl::InvalidArgumentError(absl::StrCat(
            n->Label(), " output ", k, " '", out->name, "' is declared ",
            DataTypeOnnxName(out->dtype), " but the op produces ", DataTypeOnnxName(t)));
      }
      out->dtype = t;
      if (k == 0) RETURN_IF_ERROR(CheckStaticOperands(*n, t));
      Shape s = InferShape(*n, k);
      if (s.rank_known || !out->shape.rank_known) out->shape = std::move(s);
      if (out->shape.is_static()) {
        const std::string too_large = TooLarge(CountOf(out->shape.StaticDims()), t);
        if (!too_large.empty()) {
          return absl::InvalidArgumentError(absl::StrCat(n->Label(), " output ", k, " '", out->name,
                                                         "' of shape ", out->shape.ToString(),
                                                         " holds ", too_large));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::import
