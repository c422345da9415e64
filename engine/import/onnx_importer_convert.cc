// The ONNX protos the importer reads, converted into IR pieces (onnx_importer_internal.h): node
// labels and names, declared dims, the types of ValueInfos and attributes.
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/import/onnx_importer_internal.h"
#include "engine/import/tensor_proto.h"
#include "onnx/onnx_pb.h"

namespace kiln::import::importer_internal {

std::string NodeLabel(const onnx::NodeProto& n, int index, const std::string& prefix) {
  return absl::StrCat("[node '", prefix, n.name(), "' (", n.op_type(), ") #", index, "]");
}

// A node's name in the IR: its own, or "<op>_<index>" when it has none.
std::string NodeName(const onnx::NodeProto& n, int index) {
  return n.name().empty() ? absl::StrCat(n.op_type(), "_", index) : n.name();
}

// Where the nodes of subgraph attribute `attr` of node `node` sit: "<node>/<attr>/" after the
// prefix of the node's own graph, so that their names are unique in the model and rules can
// select them ("If_0/then_branch/...").
std::string SubgraphPrefix(const std::string& prefix, const std::string& node,
                           const std::string& attr) {
  return absl::StrCat(prefix, node, "/", attr, "/");
}

absl::Status Invalid(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, " ", what));
}

namespace {

// One declared dim as ONNX Runtime reads it: dim_value >= 0 is static; -1, a dim with neither
// value nor param, an empty dim_param and "?" are unknown, each its own (Paddle names every
// unknown dim "?": two such dims need not be equal, so they are no shared symbol); any other
// dim_param is a symbol, equal wherever it appears. Other negative values are an error.
absl::StatusOr<ir::Dim> DeclaredDim(const onnx::TensorShapeProto::Dimension& d,
                                    const std::string& what, const std::string& name, int i) {
  if (d.has_dim_value()) {
    if (d.dim_value() >= 0) return ir::Dim::Static(d.dim_value());
    if (d.dim_value() == -1) return ir::Dim{};
    return absl::InvalidArgumentError(absl::StrCat(what, " '", name, "' dim ", i, " is negative (",
                                                   d.dim_value(), "; -1 means unknown)"));
  }
  if (d.has_dim_param() && !d.dim_param().empty() && d.dim_param() != "?") {
    return ir::Dim::Symbol(d.dim_param());
  }
  return ir::Dim{};
}

// The kind of value `tp` describes and its tensor type (the tensor's, or the sequence
// elements'): a tensor, seq(tensor), optional(tensor) or optional(seq(tensor)). Maps, sparse
// tensors and deeper nestings (seq(seq(...))) are Unimplemented, naming `what`.
absl::StatusOr<std::pair<ir::ValueKind, const onnx::TypeProto::Tensor*>> ValueTypeOf(
    const onnx::TypeProto& tp, const std::string& what) {
  auto unsupported = [&](const char* why) {
    return absl::UnimplementedError(absl::StrCat(what, ": unsupported type (", why,
                                                 "): Kiln runs tensors, sequences of tensors "
                                                 "and optional tensors or sequences"));
  };
  const onnx::TypeProto* t = &tp;
  bool optional = false;
  if (t->has_optional_type()) {
    if (!t->optional_type().has_elem_type()) return unsupported("an optional without elem_type");
    optional = true;
    t = &t->optional_type().elem_type();
  }
  bool sequence = false;
  if (t->has_sequence_type()) {
    if (!t->sequence_type().has_elem_type()) return unsupported("a sequence without elem_type");
    sequence = true;
    t = &t->sequence_type().elem_type();
  }
  if (t->has_sequence_type() || t->has_optional_type()) return unsupported("nested containers");
  if (t->has_map_type()) return unsupported("a map");
  if (t->has_sparse_tensor_type()) return unsupported("a sparse tensor");
  if (!t->has_tensor_type()) return unsupported("not a tensor");
  ir::ValueKind kind =
      sequence ? (optional ? ir::ValueKind::kOptionalSequence : ir::ValueKind::kSequence)
               : (optional ? ir::ValueKind::kOptionalTensor : ir::ValueKind::kTensor);
  return std::make_pair(kind, &t->tensor_type());
}

}  // namespace

// Reads a ValueInfo's type into the value's kind, dtype and shape; other types are
// unimplemented.
absl::Status ReadValueInfo(const onnx::ValueInfoProto& vi, const std::string& what, ir::Value* v) {
  // No type, or a type with nothing set (subgraph outputs often): unknown until inferred.
  if (!vi.has_type() || vi.type().value_case() == onnx::TypeProto::VALUE_NOT_SET) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(auto type, ValueTypeOf(vi.type(), absl::StrCat(what, " '", vi.name(), "'")));
  v->kind = type.first;
  const onnx::TypeProto::Tensor& tt = *type.second;
  if (tt.has_elem_type()) {
    DataType dt = DataTypeFromOnnx(tt.elem_type());
    if (dt == DataType::kUndefined || dt == DataType::kString) {
      return absl::UnimplementedError(absl::StrCat(
          what, " '", vi.name(), "' has unsupported dtype ", OnnxDataTypeName(tt.elem_type())));
    }
    v->dtype = dt;
  }
  if (tt.has_shape()) {
    ir::Shape s;
    s.rank_known = true;
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      ASSIGN_OR_RETURN(ir::Dim d, DeclaredDim(tt.shape().dim(i), what, vi.name(), i));
      s.dims.push_back(std::move(d));
    }
    if (s.is_static() && ir::NumElementsOf(s.StaticDims()) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", vi.name(), "' dims ", s.ToString(), " overflow int64 elements"));
    }
    v->shape = std::move(s);
  }
  return absl::OkStatus();
}

absl::StatusOr<ir::Attribute> ConvertAttribute(const onnx::AttributeProto& a,
                                               const std::string& label,
                                               const ExternalDataPolicy& ext) {
  ir::Attribute out;
  std::string where = absl::StrCat(label, " attribute '", a.name(), "'");
  if (!a.ref_attr_name().empty()) {
    return Invalid(where, "refers to a function attribute outside a function");
  }
  switch (a.type()) {
    case onnx::AttributeProto::FLOAT:
      out.type = ir::Attribute::Type::kFloat;
      out.f = a.f();
      break;
    case onnx::AttributeProto::INT:
      out.type = ir::Attribute::Type::kInt;
      out.i = a.i();
      break;
    case onnx::AttributeProto::STRING:
      out.type = ir::Attribute::Type::kString;
      out.s = a.s();
      break;
    case onnx::AttributeProto::TENSOR: {
      out.type = ir::Attribute::Type::kTensor;
      ASSIGN_OR_RETURN(out.t, TensorFromProto(a.t(), ext, where));
      break;
    }
    case onnx::AttributeProto::FLOATS:
      out.type = ir::Attribute::Type::kFloats;
      out.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case onnx::AttributeProto::INTS:
      out.type = ir::Attribute::Type::kInts;
      out.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case onnx::AttributeProto::STRINGS:
      out.type = ir::Attribute::Type::kStrings;
      out.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case onnx::AttributeProto::GRAPH:  // imported by the Importer, which knows the scopes
    case onnx::AttributeProto::GRAPHS:
      return absl::UnimplementedError(
          absl::StrCat(where, " is a list of subgraphs; not supported"));
    case onnx::AttributeProto::SPARSE_TENSOR:
    case onnx::AttributeProto::SPARSE_TENSORS:
      return absl::UnimplementedError(absl::StrCat(where, " is a sparse tensor; not supported"));
    case onnx::AttributeProto::TYPE_PROTO: {
      // Optional's `type`: kept as ints {ir::ValueKind, element dtype}, which the shape
      // inference and the kernel read (shape_inference_sequence.cc, cpu/ref/sequence.cc).
      ASSIGN_OR_RETURN(auto type, ValueTypeOf(a.tp(), where));
      const DataType dt = type.second->has_elem_type() ? DataTypeFromOnnx(type.second->elem_type())
                                                       : DataType::kUndefined;
      if (dt == DataType::kUndefined || dt == DataType::kString) {
        return absl::UnimplementedError(absl::StrCat(where, " has unsupported dtype ",
                                                     OnnxDataTypeName(type.second->elem_type())));
      }
      out.type = ir::Attribute::Type::kInts;
      out.ints = {static_cast<int64_t>(type.first), static_cast<int64_t>(dt)};
      break;
    }
    default:
      // Older writers leave `type` unset; infer it from the one populated field.
      if (a.has_f()) {
        out.type = ir::Attribute::Type::kFloat;
        out.f = a.f();
      } else if (a.has_i()) {
        out.type = ir::Attribute::Type::kInt;
        out.i = a.i();
      } else if (a.has_s()) {
        out.type = ir::Attribute::Type::kString;
        out.s = a.s();
      } else if (a.ints_size() > 0) {
        out.type = ir::Attribute::Type::kInts;
        out.ints.assign(a.ints().begin(), a.ints().end());
      } else if (a.floats_size() > 0) {
        out.type = ir::Attribute::Type::kFloats;
        out.floats.assign(a.floats().begin(), a.floats().end());
      } else {
        return Invalid(where, absl::StrCat("has unknown type ", static_cast<int>(a.type())));
      }
  }
  return out;
}

}  // namespace kiln::import::importer_internal
