// Type rules of the ops of the other ONNX domains (and Unique, TfIdfVectorizer) whose outputs
// are not typed like input 0, and FlexAttention's subgraph inference.
#include "engine/import/shape_inference_domains.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/import/shape_inference.h"

namespace kiln::import {
namespace {

DataType InType(const ir::Node& n, int i) {
  const ir::Value* v = n.input(i);
  return v ? v->dtype : DataType::kUndefined;
}

absl::Status NoStrings(const ir::Node& n, const char* attr) {
  if (!n.has_attr(attr)) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(n.Label(), " unsupported dtype string: attribute '",
                                               attr,
                                               "' holds strings, and Kiln has no string "
                                               "tensors"));
}

// LabelEncoder's Y has its values' dtype: values_tensor's, float for values_floats, int64 for
// values_int64s; string values (and version 1, which maps strings) are not supported.
absl::StatusOr<DataType> LabelEncoderType(const ir::Node& n) {
  if (n.since_version < 2) {
    return absl::UnimplementedError(
        absl::StrCat(n.Label(),
                     " unsupported dtype string: LabelEncoder-1 maps strings to int64 or back, "
                     "and Kiln has no string tensors"));
  }
  RETURN_IF_ERROR(NoStrings(n, "keys_strings"));
  RETURN_IF_ERROR(NoStrings(n, "values_strings"));
  if (const ir::Attribute* a = n.attr("values_tensor")) {
    if (a->type != ir::Attribute::Type::kTensor) {
      return absl::InvalidArgumentError(
          absl::StrCat(n.Label(), " attribute 'values_tensor' must be a tensor"));
    }
    return a->t.dtype();
  }
  if (n.has_attr("values_floats")) return DataType::kF32;
  if (n.has_attr("values_int64s")) return DataType::kI64;
  return absl::InvalidArgumentError(absl::StrCat(
      n.Label(), " has no values attribute (values_int64s, values_floats or values_tensor)"));
}

// A float32 output of the op's definition, or the floating dtype a reduced-precision build
// gave the value (precision lowering retypes a node's floating outputs; the kernels write the
// dtype the graph gives them).
DataType FloatOutput(const ir::Node& n, int k) {
  const ir::Value* v = k < n.num_outputs() ? n.outputs[k] : nullptr;
  return v != nullptr && IsFloating(v->dtype) ? v->dtype : DataType::kF32;
}

}  // namespace

absl::StatusOr<std::optional<DataType>> DomainOpOutputType(const ir::Node& n, int k) {
  switch (n.op) {
    case ir::OpType::kUnique:  // indices, inverse_indices and counts are int64
      return k == 0 ? InType(n, 0) : DataType::kI64;
    case ir::OpType::kTfIdfVectorizer:
      RETURN_IF_ERROR(NoStrings(n, "pool_strings"));
      return FloatOutput(n, k);
    case ir::OpType::kLabelEncoder: {
      ASSIGN_OR_RETURN(DataType t, LabelEncoderType(n));
      return t == DataType::kF32 ? FloatOutput(n, k) : t;
    }
    case ir::OpType::kAdagrad:  // every output is typed as the tensors updated (T3)
    case ir::OpType::kAdam:
    case ir::OpType::kMomentum:
      return InType(n, 2);
    default:
      return std::nullopt;
  }
}

std::optional<ir::Shape> DomainOpShape(const ir::Node& n, int k) {
  if (n.op != ir::OpType::kUnique) return std::nullopt;
  const ir::Value* x = n.input(0);
  if (x == nullptr || !x->shape.rank_known) return ir::Shape::Unknown();
  ir::Shape s;
  s.rank_known = true;
  const ir::Attribute* axis_attr = n.attr("axis");
  int axis = -1;  // none: the elements of X, flattened
  if (axis_attr != nullptr) {
    const int64_t a = axis_attr->i < 0 ? axis_attr->i + x->shape.rank() : axis_attr->i;
    if (a < 0 || a >= x->shape.rank()) return ir::Shape::Unknown();  // the kernel reports it
    axis = static_cast<int>(a);
  }
  if (k == 0) {  // Y: X's shape with the unique count on the axis, or [count]
    if (axis < 0) {
      s.dims = {ir::Dim{}};
    } else {
      s.dims = x->shape.dims;
      s.dims[axis] = ir::Dim{};
    }
  } else if (k == 2) {  // inverse_indices: one per element, or per slice along the axis
    if (axis >= 0) {
      s.dims = {x->shape.dims[axis]};
    } else if (x->shape.is_static()) {
      int64_t count = 1;
      for (int64_t d : x->shape.StaticDims()) count *= d;
      s.dims = {ir::Dim::Static(count)};
    } else {
      s.dims = {ir::Dim{}};
    }
  } else {  // indices, counts: one per unique value
    s.dims = {ir::Dim{}};
  }
  return s;
}

absl::Status InferFlexAttentionModifiers(ir::Node& n) {
  if (n.op != ir::OpType::kFlexAttention) return absl::OkStatus();
  const ir::Value* q = n.input(0);
  const ir::Value* k = n.input(1);
  if (q == nullptr || k == nullptr) return absl::OkStatus();  // the arity check reports it
  DataType soft = q->dtype == DataType::kF64 ? DataType::kF64 : DataType::kF32;
  if (const ir::Attribute* a = n.attr("softmax_precision")) {
    soft = a->type == ir::Attribute::Type::kInt && a->i >= 0 && a->i <= INT32_MAX
               ? DataTypeFromOnnx(static_cast<int32_t>(a->i))
               : DataType::kUndefined;
    if (!IsFloating(soft)) {
      return absl::InvalidArgumentError(
          absl::StrCat(n.Label(), " softmax_precision must name a floating dtype, got ", a->i));
    }
  }
  // [B, Hq, L, S] from Q [B, Hq, L, E] and K [B, Hkv, S, E], where their ranks are known.
  ir::Shape shape = ir::Shape::Unknown();
  if (q->shape.rank_known && q->shape.rank() == 4 && k->shape.rank_known && k->shape.rank() == 4) {
    shape.rank_known = true;
    shape.dims = {q->shape.dims[0], q->shape.dims[1], q->shape.dims[2], k->shape.dims[2]};
  }
  const int captured = static_cast<int>(n.GetInt(ir::kCapturedInputsAttr, 0));
  for (const char* attr : {"score_mod", "prob_mod"}) {
    const ir::Attribute* a = n.attr(attr);
    if (a == nullptr || a->type != ir::Attribute::Type::kGraph || a->g == nullptr) continue;
    ir::Graph& g = *a->g;
    const std::string where = absl::StrCat(n.Label(), " subgraph '", attr, "'");
    if (static_cast<int>(g.inputs().size()) != 1 + captured || g.outputs().size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " must take one input and give one output (it takes ",
          static_cast<int>(g.inputs().size()) - captured, " and gives ", g.outputs().size(), ")"));
    }
    ir::Value* in = g.inputs()[0];
    if (in->dtype != DataType::kUndefined && in->dtype != soft) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " input '", in->name, "' is declared ", DataTypeOnnxName(in->dtype),
                       " but the softmax precision is ", DataTypeOnnxName(soft)));
    }
    in->dtype = soft;
    if (shape.rank_known || !in->shape.rank_known) in->shape = shape;
    for (int j = 0; j < captured; ++j) {
      const ir::Value* outer = n.input(n.num_inputs() - captured + j);
      ir::Value* inner = g.inputs()[1 + j];
      if (outer == nullptr) continue;
      inner->dtype = outer->dtype;
      inner->shape = outer->shape;
    }
    g.RebuildEdges();
    auto order = g.TopologicalOrder();
    if (!order.ok()) {
      return absl::Status(order.status().code(),
                          absl::StrCat(where, ": ", order.status().message()));
    }
    absl::Status st = InferTypesAndShapes(g, *order);
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat(where, ": ", st.message()));
    if (g.outputs()[0]->dtype != soft) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " gives ", DataTypeOnnxName(g.outputs()[0]->dtype), "; it must give ",
                       DataTypeOnnxName(soft), " (the softmax precision)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::import
