#include "engine/import/onnx_importer.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <new>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/import/contrib_ops.h"
#include "engine/import/functions.h"
#include "engine/import/legacy_ops.h"
#include "engine/import/op_schemas.h"
#include "engine/import/shape_inference.h"
#include "engine/import/tensor_proto.h"
#include "google/protobuf/io/coded_stream.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"

namespace kiln::import {
namespace {

std::string NodeLabel(const onnx::NodeProto& n, int index, const std::string& prefix = "") {
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

template <typename F>
absl::Status ForEachTensor(onnx::GraphProto& graph, const std::string& where, F& f);

// Calls `f(tensor, context)` on every TensorProto in the attributes of `nodes`, subgraphs
// included. `where` prefixes the contexts.
template <typename F>
absl::Status ForEachNodeTensor(google::protobuf::RepeatedPtrField<onnx::NodeProto>& nodes,
                               const std::string& where, F& f) {
  for (int n = 0; n < nodes.size(); ++n) {
    onnx::NodeProto& node = nodes[n];
    std::string label = NodeLabel(node, n);
    for (onnx::AttributeProto& a : *node.mutable_attribute()) {
      std::string what = absl::StrCat(where, label, " attribute '", a.name(), "'");
      if (a.has_t()) RETURN_IF_ERROR(f(*a.mutable_t(), what));
      for (onnx::TensorProto& t : *a.mutable_tensors()) RETURN_IF_ERROR(f(t, what));
      if (a.has_sparse_tensor()) {
        RETURN_IF_ERROR(f(*a.mutable_sparse_tensor()->mutable_values(), what));
        RETURN_IF_ERROR(f(*a.mutable_sparse_tensor()->mutable_indices(), what));
      }
      for (onnx::SparseTensorProto& t : *a.mutable_sparse_tensors()) {
        RETURN_IF_ERROR(f(*t.mutable_values(), what));
        RETURN_IF_ERROR(f(*t.mutable_indices(), what));
      }
      if (a.has_g()) RETURN_IF_ERROR(ForEachTensor(*a.mutable_g(), absl::StrCat(what, ": "), f));
      for (onnx::GraphProto& g : *a.mutable_graphs()) {
        RETURN_IF_ERROR(ForEachTensor(g, absl::StrCat(what, ": "), f));
      }
    }
  }
  return absl::OkStatus();
}

// Calls `f(tensor, context)` on every TensorProto of `graph` that the onnx checker looks at:
// initializers, sparse initializers' values and indices, and node attributes.
template <typename F>
absl::Status ForEachTensor(onnx::GraphProto& graph, const std::string& where, F& f) {
  for (int i = 0; i < graph.initializer_size(); ++i) {
    onnx::TensorProto* t = graph.mutable_initializer(i);
    RETURN_IF_ERROR(f(*t, absl::StrCat(where, "initializer #", i, " '", t->name(), "'")));
  }
  for (int i = 0; i < graph.sparse_initializer_size(); ++i) {
    onnx::SparseTensorProto* t = graph.mutable_sparse_initializer(i);
    std::string what =
        absl::StrCat(where, "sparse initializer #", i, " '", t->values().name(), "'");
    RETURN_IF_ERROR(f(*t->mutable_values(), what));
    RETURN_IF_ERROR(f(*t->mutable_indices(), absl::StrCat(what, " indices")));
  }
  return ForEachNodeTensor(*graph.mutable_node(), where, f);
}

// Checks the 'location' of every external-data tensor of the model against the model's folder
// (ResolveExternalLocation) before anything else reads the file system, and points each at the
// path it resolves to, in `original` keeps what it said. The onnx checker stats each location
// relative to the current directory, not the model's folder: given the resolved paths it looks
// only at files already checked to be inside the folder. RestoreLocations undoes it.
absl::Status ResolveExternalLocations(onnx::ModelProto& model, const ExternalDataPolicy& ext,
                                      std::vector<std::pair<std::string*, std::string>>& original) {
  auto resolve = [&](onnx::TensorProto& t, const std::string& what) -> absl::Status {
    if (t.data_location() != onnx::TensorProto::EXTERNAL) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::string location, ExternalLocationOf(t, ext, what));
    ASSIGN_OR_RETURN(std::string path, ResolveExternalLocation(location, ext, what));
    for (auto& kv : *t.mutable_external_data()) {
      if (kv.key() != "location") continue;
      original.emplace_back(kv.mutable_value(), std::move(location));
      *kv.mutable_value() = std::move(path);
      break;
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ForEachTensor(*model.mutable_graph(), "", resolve));
  for (onnx::FunctionProto& fn : *model.mutable_functions()) {
    RETURN_IF_ERROR(ForEachNodeTensor(*fn.mutable_node(),
                                      absl::StrCat("function '", fn.name(), "' "), resolve));
  }
  return absl::OkStatus();
}

void RestoreLocations(std::vector<std::pair<std::string*, std::string>>& original) {
  for (auto& [value, location] : original) *value = std::move(location);
  original.clear();
}

// The onnx checker requires a type with an element type and a shape on every graph input and
// output, and says only "Field 'shape' of 'type' is required but missing": the same check here,
// first, names the value.
absl::Status CheckIoTypesForChecker(const onnx::GraphProto& g) {
  auto check = [](const onnx::ValueInfoProto& vi, const std::string& what) -> absl::Status {
    std::string label = absl::StrCat(what, " '", vi.name(), "'");
    if (!vi.has_type()) {
      return absl::InvalidArgumentError(absl::StrCat(label, " has no type"));
    }
    if (!vi.type().has_tensor_type()) return absl::OkStatus();
    const auto& tt = vi.type().tensor_type();
    if (!tt.has_elem_type()) {
      return absl::InvalidArgumentError(
          absl::StrCat(label, " has a tensor type without an element type ('elem_type')"));
    }
    if (!tt.has_shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          label,
          " has a tensor type without a 'shape' (ONNX requires one on graph inputs and outputs; "
          "write the dims, or dim_param names for dims unknown before run time)"));
    }
    return absl::OkStatus();
  };
  for (int i = 0; i < g.input_size(); ++i) {
    RETURN_IF_ERROR(check(g.input(i), absl::StrCat("graph input #", i)));
  }
  for (int i = 0; i < g.output_size(); ++i) {
    RETURN_IF_ERROR(check(g.output(i), absl::StrCat("graph output #", i)));
  }
  return absl::OkStatus();
}

// Extra check by Debian's onnx 1.12 checker where it is an authority (never the only check).
absl::Status RunOnnxChecker(const onnx::ModelProto& model, int opset) {
  if (model.ir_version() > 8 || opset > 17) return absl::OkStatus();
  RETURN_IF_ERROR(CheckIoTypesForChecker(model.graph()));
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("onnx checker: ", e.what()));
  }
  return absl::OkStatus();
}

class Importer {
 public:
  Importer(onnx::ModelProto& model, const ImportOptions& options)
      : model_(model), options_(options), ext_{options.model_dir} {}

  absl::StatusOr<std::unique_ptr<ir::Graph>> Run() {
    RETURN_IF_ERROR(CheckVersions());
    graph_ = std::make_unique<ir::Graph>();
    graph_->set_opset(opset_);
    graph_->set_ir_version(model_.ir_version());
    graph_->set_name(model_.graph().name());
    RETURN_IF_ERROR(InlineModelFunctions(model_));  // calls become their bodies (functions.h)
    RETURN_IF_ERROR(CheckOps());
    {
      // Locations are checked before the onnx checker looks at them, and restored after.
      std::vector<std::pair<std::string*, std::string>> original;
      absl::Status st = ResolveExternalLocations(model_, ext_, original);
      // ORT's contrib ops of the default domain (contrib_ops.h) are unknown to the checker.
      bool default_contrib = false;
      for (const auto& n : model_.graph().node()) {
        default_contrib |=
            !IsContribDomain(n.domain()) && IsContribNode(n.domain(), n.op_type(), opset_);
      }
      if (st.ok() && options_.use_onnx_checker && !default_contrib && CheckerKnowsDomains()) {
        st = RunOnnxChecker(model_, opset_);
      }
      RestoreLocations(original);
      RETURN_IF_ERROR(st);
    }
    RETURN_IF_ERROR(ImportInitializersAndInputs());
    Scope top{graph_.get(), nullptr, "", 0, {}};
    RETURN_IF_ERROR(ImportNodes(model_.graph().node(), top));
    if (opset_ > 0) {  // without a default-domain import there is no default-domain node
      RETURN_IF_ERROR(AdaptLegacyOps(*graph_, opset_));  // opsets < 7: old op forms rewritten
    }
    RETURN_IF_ERROR(ExpandContribOps(*graph_));  // com.microsoft ops: default-domain nodes
    RETURN_IF_ERROR(ImportOutputs());
    graph_->RebuildEdges();
    ASSIGN_OR_RETURN(auto order, graph_->TopologicalOrder());
    RETURN_IF_ERROR(InferTypesAndShapes(*graph_, order));
    return std::move(graph_);
  }

 private:
  absl::Status CheckVersions() {
    if (!model_.has_ir_version() || model_.ir_version() < kMinIrVersion) {
      return absl::InvalidArgumentError(
          absl::StrCat("model ir_version ", model_.ir_version(), " is outside the supported range ",
                       kMinIrVersion, "..", kMaxIrVersion,
                       model_.has_ir_version() ? "" : " (field missing: is this an ONNX model?)"));
    }
    if (model_.ir_version() > kMaxIrVersion) {
      return absl::UnimplementedError(
          absl::StrCat("unsupported ir_version: model ir_version ", model_.ir_version(),
                       " is newer than the supported range ", kMinIrVersion, "..", kMaxIrVersion));
    }
    if (!model_.has_graph()) return absl::InvalidArgumentError("model has no graph");
    bool found = false;
    for (const auto& imp : model_.opset_import()) {
      if (imp.domain().empty() || imp.domain() == "ai.onnx") {
        if (found) {
          return absl::InvalidArgumentError("opset_import lists the default domain twice");
        }
        found = true;
        if (imp.version() < kMinOpset || imp.version() > kMaxOpset) {
          return absl::UnimplementedError(
              absl::StrCat("unsupported opset: opset_import: default-domain opset ", imp.version(),
                           " is outside the supported range ", kMinOpset, "..", kMaxOpset));
        }
        opset_ = static_cast<int>(imp.version());
      } else {
        if (other_domains_.contains(imp.domain())) {
          return absl::InvalidArgumentError(
              absl::StrCat("opset_import lists domain '", imp.domain(), "' twice"));
        }
        // A domain whose ops Kiln knows (ai.onnx.ml, ...) must name an opset ONNX defines.
        const std::optional<int> newest = MaxDomainOpset(imp.domain());
        if (newest && (imp.version() < 1 || imp.version() > *newest)) {
          return absl::UnimplementedError(
              absl::StrCat("unsupported opset: opset_import: domain '", imp.domain(), "' opset ",
                           imp.version(), " is outside the supported range 1..", *newest));
        }
        other_domains_[imp.domain()] = imp.version();
      }
    }
    if (model_.opset_import_size() == 0) {
      return absl::InvalidArgumentError("model has no opset_import");
    }
    // Without a default-domain import, nodes of the default domain are an error (CheckOps) and
    // nodes of other domains are unsupported.
    return CheckNoMultiDevice();
  }

  // Multi-device configuration (IR 11+) asks for the graph to be sharded across devices; Kiln
  // builds for one CPU and will not silently drop a placement the model asks for. The fields are
  // newer than Debian's onnx 1.12 protobuf, so they arrive as unknown fields with their numbers.
  static constexpr int kModelConfigurationField = 26;        // ModelProto.configuration
  static constexpr int kNodeDeviceConfigurationsField = 10;  // NodeProto.device_configurations

  static bool HasUnknownField(const google::protobuf::Message& m, int number) {
    const auto& fields = m.GetReflection()->GetUnknownFields(m);
    for (int i = 0; i < fields.field_count(); ++i) {
      if (fields.field(i).number() == number) return true;
    }
    return false;
  }

  absl::Status CheckNoMultiDevice() {
    if (HasUnknownField(model_, kModelConfigurationField)) {
      return absl::UnimplementedError(
          "unsupported field: ModelProto.configuration (multi-device configuration, IR 11) is "
          "not supported: Kiln builds for a single CPU device; remove the field");
    }
    return CheckNoNodeDeviceConfigurations(model_.graph(), "", 0);
  }

  absl::Status CheckNoNodeDeviceConfigurations(const onnx::GraphProto& g, const std::string& prefix,
                                               int depth) {
    const auto& nodes = g.node();
    for (int i = 0; i < nodes.size(); ++i) {
      const auto& n = nodes[i];
      if (HasUnknownField(n, kNodeDeviceConfigurationsField)) {
        return absl::UnimplementedError(absl::StrCat(
            NodeLabel(n, i, prefix),
            " unsupported field: NodeProto.device_configurations (multi-device sharding, IR 11) "
            "is not supported: Kiln builds for a single CPU device"));
      }
      if (depth >= ir::kMaxSubgraphDepth) continue;  // the import refuses deeper nesting
      for (const auto& a : n.attribute()) {
        if (a.type() != onnx::AttributeProto::GRAPH || !a.has_g()) continue;
        RETURN_IF_ERROR(CheckNoNodeDeviceConfigurations(
            a.g(), SubgraphPrefix(prefix, NodeName(n, i), a.name()), depth + 1));
      }
    }
    return absl::OkStatus();
  }

  // Adds to `unknown` / `unimplemented` each node of `g` (and of its subgraphs, `prefix` naming
  // where they sit) whose op Kiln cannot run. Subgraphs past ir::kMaxSubgraphDepth are left to the
  // import, which refuses them.
  void CollectUnsupportedOps(const onnx::GraphProto& g, const std::string& prefix, int depth,
                             std::vector<std::string>& unknown,
                             std::vector<std::string>& unimplemented) {
    const auto& nodes = g.node();
    for (int i = 0; i < nodes.size(); ++i) {
      const auto& n = nodes[i];
      std::string label = NodeLabel(n, i, prefix);
      // com.microsoft: the contrib ops Kiln expands at import (contrib_ops.h).
      if (IsContribNode(n.domain(), n.op_type(), opset_) &&
          (!IsContribDomain(n.domain()) || other_domains_.contains(n.domain())) &&
          IsSupportedContribOp(n.op_type())) {
        continue;
      }
      const bool default_domain = ir::CanonicalDomain(n.domain()).empty();
      if (!default_domain &&
          (!MaxDomainOpset(n.domain()) || !other_domains_.contains(n.domain()))) {
        if (other_domains_.contains(n.domain())) {
          unimplemented.push_back(
              absl::StrCat(label, " op ", n.op_type(), " of domain '", n.domain(), "'"));
        } else {
          unknown.push_back(
              absl::StrCat(label, " domain '", n.domain(), "' is not in opset_import"));
        }
        continue;
      }
      if (default_domain && opset_ == 0) {
        unknown.push_back(absl::StrCat(label,
                                       " uses the default domain, which opset_import "
                                       "does not list"));
        continue;
      }
      // Ops of the other domains Kiln knows (ai.onnx.ml, ...) at the opset of their domain.
      const std::string of_domain =
          default_domain ? "" : absl::StrCat(" of domain '", n.domain(), "'");
      const int opset = DomainOpset(n.domain());
      auto op = ir::OpFromName(n.domain(), n.op_type());
      if (!op) {
        if (IsKnownUnsupportedOp(n.domain(), n.op_type())) {
          unimplemented.push_back(absl::StrCat(label, " op ", n.op_type(), of_domain));
        } else {
          unknown.push_back(
              absl::StrCat(label, " op '", n.op_type(), "' is not an ONNX op", of_domain));
        }
        continue;
      }
      if (!ResolveOpVersion(*op, opset)) {
        unknown.push_back(absl::StrCat(label, " op ", n.op_type(), of_domain,
                                       " does not exist at opset ", opset));
      }
      if (depth >= ir::kMaxSubgraphDepth) continue;
      for (const auto& a : n.attribute()) {
        if (a.type() != onnx::AttributeProto::GRAPH || !a.has_g()) continue;
        CollectUnsupportedOps(a.g(), SubgraphPrefix(prefix, NodeName(n, i), a.name()), depth + 1,
                              unknown, unimplemented);
      }
    }
  }

  // Lists every node whose op Kiln cannot run, all at once (subgraphs included).
  absl::Status CheckOps() {
    std::vector<std::string> unknown, unimplemented;
    CollectUnsupportedOps(model_.graph(), "", 0, unknown, unimplemented);
    if (!unknown.empty()) {
      std::vector<std::string> all = unknown;
      all.insert(all.end(), unimplemented.begin(), unimplemented.end());
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported op: ", all.size(),
                       " node(s) use ops Kiln cannot run: ", absl::StrJoin(all, "; ")));
    }
    if (!unimplemented.empty()) {
      return absl::UnimplementedError(absl::StrCat(
          "unsupported op: ", unimplemented.size(),
          " node(s) use ops Kiln does not implement: ", absl::StrJoin(unimplemented, "; ")));
    }
    return absl::OkStatus();
  }

  absl::Status ImportInitializersAndInputs() {
    const auto& g = model_.graph();
    if (g.sparse_initializer_size() > 0) {
      return absl::UnimplementedError("graph.sparse_initializer is not supported");
    }
    for (int i = 0; i < g.initializer_size(); ++i) {
      const auto& t = g.initializer(i);
      std::string what = absl::StrCat("initializer #", i, " '", t.name(), "'");
      if (t.name().empty()) return absl::InvalidArgumentError(absl::StrCat(what, " has no name"));
      auto v = graph_->AddValue(t.name());
      if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": duplicate name"));
      ASSIGN_OR_RETURN(ir::Tensor tensor, TensorFromProto(t, ext_, what));
      // The graph owns the data now: free the proto's copy, so a big model is not held twice.
      std::string().swap(*model_.mutable_graph()->mutable_initializer(i)->mutable_raw_data());
      (*v)->dtype = tensor.dtype();
      (*v)->shape = ir::Shape::Of(tensor.dims());
      (*v)->constant = std::move(tensor);
    }
    for (int i = 0; i < g.input_size(); ++i) {
      const auto& in = g.input(i);
      std::string what = absl::StrCat("graph input #", i);
      if (in.name().empty()) return absl::InvalidArgumentError(absl::StrCat(what, " has no name"));
      if (ir::Value* existing = graph_->FindValue(in.name())) {
        // IR < 4 lists initializers among the inputs; they stay constants (weights).
        if (existing->constant) continue;
        return absl::InvalidArgumentError(absl::StrCat(what, " '", in.name(), "': duplicate name"));
      }
      ASSIGN_OR_RETURN(ir::Value * v, graph_->AddValue(in.name()));
      RETURN_IF_ERROR(ReadValueInfo(in, what, v));
      if (v->dtype == DataType::kUndefined) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " '", in.name(), "' has no tensor element type"));
      }
      graph_->inputs().push_back(v);
    }
    return absl::OkStatus();
  }

  // One graph being imported: the model's graph or a subgraph (an attribute of a node of the
  // graph of `parent`), with the names it takes from enclosing graphs (captures) in first-use
  // order: they become its last graph inputs.
  struct Scope {
    ir::Graph* graph;
    Scope* parent;
    std::string prefix;  // of its node names: "" or "If_0/then_branch/"
    int depth;
    std::vector<std::string> captured;
  };

  // The value `name` seen from `s`: its own, else an enclosing graph's, which becomes a capture
  // of `s` (and of every graph between) or, for a weight, a constant of `s` sharing its bytes.
  // nullptr when no graph in scope defines it.
  ir::Value* Resolve(Scope& s, const std::string& name) {
    if (ir::Value* v = s.graph->FindValue(name)) return v;
    if (s.parent == nullptr) return nullptr;
    ir::Value* outer = Resolve(*s.parent, name);
    if (outer == nullptr) return nullptr;
    ir::Value* v = *s.graph->AddValue(name);  // FindValue said the name is free
    v->dtype = outer->dtype;
    v->kind = outer->kind;
    v->shape = outer->shape;
    if (outer->constant) {
      v->constant = outer->constant;
    } else {
      s.captured.push_back(name);
    }
    return v;
  }

  // Imports subgraph `gp` (attribute `attr` of `node`, in scope `s`): initializers, formal
  // inputs (types optional: the op's shape inference fills them), nodes, outputs. Its captures
  // are left in `sub.captured` for the caller to append.
  absl::StatusOr<std::shared_ptr<ir::Graph>> ImportSubgraph(const onnx::GraphProto& gp,
                                                            const std::string& attr,
                                                            const ir::Node& node, Scope& s,
                                                            Scope& sub) {
    const std::string where = absl::StrCat(node.Label(), " subgraph '", attr, "'");
    if (s.depth + 1 > ir::kMaxSubgraphDepth) {
      return Invalid(where, absl::StrCat("nests subgraphs deeper than ", ir::kMaxSubgraphDepth,
                                         " levels (the limit)"));
    }
    auto g = std::make_shared<ir::Graph>();
    g->set_opset(opset_);
    g->set_ir_version(model_.ir_version());
    g->set_name(absl::StrCat(node.name, "/", attr));
    sub.graph = g.get();
    sub.parent = &s;
    sub.prefix = absl::StrCat(node.name, "/", attr, "/");
    sub.depth = s.depth + 1;
    if (gp.sparse_initializer_size() > 0) {
      return absl::UnimplementedError(
          absl::StrCat(where, ": sparse initializers are not supported"));
    }
    for (int i = 0; i < gp.initializer_size(); ++i) {
      const auto& tp = gp.initializer(i);
      std::string what = absl::StrCat(where, " initializer #", i, " '", tp.name(), "'");
      if (tp.name().empty()) return absl::InvalidArgumentError(absl::StrCat(what, " has no name"));
      auto v = g->AddValue(tp.name());
      if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": duplicate name"));
      ASSIGN_OR_RETURN(ir::Tensor tensor, TensorFromProto(tp, ext_, what));
      (*v)->dtype = tensor.dtype();
      (*v)->shape = ir::Shape::Of(tensor.dims());
      (*v)->constant = std::move(tensor);
    }
    for (int i = 0; i < gp.input_size(); ++i) {
      const auto& in = gp.input(i);
      std::string what = absl::StrCat(where, " input #", i);
      if (in.name().empty()) return absl::InvalidArgumentError(absl::StrCat(what, " has no name"));
      auto v = g->AddValue(in.name());
      if (!v.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(what, " '", in.name(), "': duplicate name"));
      }
      RETURN_IF_ERROR(ReadValueInfo(in, what, *v));
      g->inputs().push_back(*v);
    }
    RETURN_IF_ERROR(ImportNodes(gp.node(), sub));
    if (gp.output_size() == 0) return Invalid(where, "has no outputs");
    for (int i = 0; i < gp.output_size(); ++i) {
      const auto& out = gp.output(i);
      std::string what = absl::StrCat(where, " output #", i);
      ir::Value* v = Resolve(sub, out.name());
      if (v == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " '", out.name(), "' is not defined in scope"));
      }
      ir::Value declared;
      RETURN_IF_ERROR(ReadValueInfo(out, what, &declared));
      if (v->dtype == DataType::kUndefined) {
        v->dtype = declared.dtype;
        v->kind = declared.kind;
      }
      if (!v->shape.rank_known) v->shape = declared.shape;
      bool produced = false;
      for (const auto& n : g->nodes()) {
        for (const ir::Value* o : n->outputs) produced |= o == v;
      }
      const bool repeated =
          std::find(g->outputs().begin(), g->outputs().end(), v) != g->outputs().end();
      if (!produced || repeated) {
        // An output that is an input, a capture, a weight or another output: one node makes
        // each output of a compiled subgraph, as of any engine.
        ASSIGN_OR_RETURN(ir::Value * copy, g->AddValue(absl::StrCat(out.name(), "::output", i)));
        copy->dtype = v->dtype;
        copy->kind = v->kind;
        copy->shape = v->shape;
        ir::Node* id = g->AddNode(ir::OpType::kIdentity, absl::StrCat(sub.prefix, "output", i));
        id->sources = {id->id};
        id->since_version = ResolveOpVersion(ir::OpType::kIdentity, opset_)->since_version;
        id->inputs = {v};
        id->outputs = {copy};
        v = copy;
      }
      g->outputs().push_back(v);
    }
    return g;
  }

  // Imports `nodes` into the graph of scope `s`: outputs, attributes (subgraphs included), then
  // inputs (which may name outer-scope values in a subgraph).
  absl::Status ImportNodes(const google::protobuf::RepeatedPtrField<onnx::NodeProto>& nodes,
                           Scope& s) {
    ir::Graph& graph = *s.graph;
    // Pass 1: every node output becomes a value, so inputs may refer to outputs of nodes that
    // come later in the list (a cycle is then caught by the topological sort).
    std::vector<ir::Node*> made;
    made.reserve(nodes.size());
    for (int i = 0; i < nodes.size(); ++i) {
      const auto& n = nodes[i];
      // com.microsoft nodes become placeholders, expanded by ExpandContribOps (contrib_ops.h).
      const bool contrib = IsContribNode(n.domain(), n.op_type(), opset_);
      ir::OpType op = contrib ? ir::OpType::kIdentity : *ir::OpFromName(n.domain(), n.op_type());
      ir::Node* node = graph.AddNode(op, absl::StrCat(s.prefix, NodeName(n, i)));
      node->sources = {node->id};
      std::string label = node->Label();
      OpVersion ver =
          contrib ? ContribPlaceholderVersion() : *ResolveOpVersion(op, DomainOpset(n.domain()));
      if (contrib) node->attrs[kContribOpAttr] = ir::Attribute::String(n.op_type());
      node->since_version = ver.since_version;
      if (n.input_size() < ver.min_inputs || n.input_size() > ver.max_inputs) {
        return Invalid(label, absl::StrCat("has ", n.input_size(), " inputs; ", n.op_type(), "-",
                                           ver.since_version, " takes ", ver.min_inputs, "..",
                                           ver.max_inputs));
      }
      if (n.output_size() < ver.min_outputs || n.output_size() > ver.max_outputs) {
        return Invalid(label, absl::StrCat("has ", n.output_size(), " outputs; ", n.op_type(), "-",
                                           ver.since_version, " gives ", ver.min_outputs, "..",
                                           ver.max_outputs));
      }
      for (int o = 0; o < n.output_size(); ++o) {
        if (n.output(o).empty()) {
          node->outputs.push_back(nullptr);
          continue;
        }
        auto v = graph.AddValue(n.output(o));
        if (!v.ok()) {
          return Invalid(label, absl::StrCat("output ", o, " '", n.output(o),
                                             "' is already defined (duplicate name)"));
        }
        node->outputs.push_back(*v);
      }
      for (const auto& a : n.attribute()) {
        if (node->attrs.contains(a.name())) {
          return Invalid(label, absl::StrCat("attribute '", a.name(), "' is given twice"));
        }
        if (a.type() == onnx::AttributeProto::GRAPH) continue;  // pass 2, once outputs exist
        ASSIGN_OR_RETURN(node->attrs[a.name()], ConvertAttribute(a, label, ext_));
      }
      made.push_back(node);
    }
    // Pass 2: subgraphs, then inputs; a node's captures (the union over its subgraphs) follow
    // its own inputs and each subgraph's formal inputs.
    for (int i = 0; i < nodes.size(); ++i) {
      const auto& n = nodes[i];
      ir::Node* node = made[i];
      std::vector<std::pair<std::shared_ptr<ir::Graph>, Scope>> subgraphs;
      std::vector<std::string> captured;
      for (const auto& a : n.attribute()) {
        if (a.type() != onnx::AttributeProto::GRAPH) continue;
        const bool expected = (node->op == ir::OpType::kIf &&
                               (a.name() == "then_branch" || a.name() == "else_branch")) ||
                              ((node->op == ir::OpType::kLoop || node->op == ir::OpType::kScan ||
                                node->op == ir::OpType::kSequenceMap) &&
                               a.name() == "body") ||
                              (node->op == ir::OpType::kFlexAttention &&
                               (a.name() == "score_mod" || a.name() == "prob_mod"));
        if (!expected) {
          return Invalid(node->Label(),
                         absl::StrCat("attribute '", a.name(), "' is a subgraph, which ",
                                      n.op_type(), " does not take"));
        }
        if (!a.has_g()) {
          return Invalid(node->Label(), absl::StrCat("attribute '", a.name(), "' has no graph"));
        }
        Scope sub{nullptr, nullptr, "", 0, {}};
        ASSIGN_OR_RETURN(std::shared_ptr<ir::Graph> g,
                         ImportSubgraph(a.g(), a.name(), *node, s, sub));
        for (const std::string& c : sub.captured) {
          if (std::find(captured.begin(), captured.end(), c) == captured.end()) {
            captured.push_back(c);
          }
        }
        node->attrs[a.name()] = ir::Attribute::Subgraph(g);
        subgraphs.emplace_back(std::move(g), std::move(sub));
      }
      for (auto& [g, sub] : subgraphs) {
        for (const std::string& c : captured) {
          ir::Value* v = g->FindValue(c);
          if (v == nullptr) {  // captured by a sibling subgraph only: an input this one ignores
            v = *g->AddValue(c);
          }
          g->inputs().push_back(v);
        }
        g->RebuildEdges();
      }
      for (int k = 0; k < n.input_size(); ++k) {
        if (n.input(k).empty()) {
          node->inputs.push_back(nullptr);
          continue;
        }
        ir::Value* v = Resolve(s, n.input(k));
        if (v == nullptr) {
          return Invalid(node->Label(), absl::StrCat("input ", k, " '", n.input(k),
                                                     "' is not defined by any node, input or "
                                                     "initializer"));
        }
        node->inputs.push_back(v);
      }
      // Trailing omitted inputs carry no information; dropping them keeps num_inputs() honest.
      while (!node->inputs.empty() && node->inputs.back() == nullptr) node->inputs.pop_back();
      if (subgraphs.empty()) continue;
      for (const std::string& c : captured) node->inputs.push_back(Resolve(s, c));
      node->attrs[ir::kCapturedInputsAttr] =
          ir::Attribute::Int(static_cast<int64_t>(captured.size()));
    }
    return absl::OkStatus();
  }

  // A value's declared type (graph output or value_info) and what to call it in a warning.
  struct Declaration {
    ir::Value* value;
    ir::Value declared;
    std::string what;
  };

  // True when a declared shape disagrees with the inferred one: another rank, or a dim static
  // in both with two values (a symbol and a number, or two symbols, may agree at run time).
  static bool ShapesDisagree(const ir::Shape& declared, const ir::Shape& inferred) {
    if (!declared.rank_known || !inferred.rank_known) return false;
    if (declared.rank() != inferred.rank()) return true;
    for (int i = 0; i < declared.rank(); ++i) {
      const ir::Dim& a = declared.dims[i];
      const ir::Dim& b = inferred.dims[i];
      if (a.is_static() && b.is_static() && a.value != b.value) return true;
    }
    return false;
  }

  // Declared shapes as ONNX Runtime treats them: what inference gives wins, and a declaration
  // that disagrees is a warning (Graph::import_warnings) naming the value and both shapes, never
  // an error; where inference gives no shape, the declared one stays as a hint for the values
  // after it. So inference runs here, without the hints and then with them (Run() infers once
  // more, with them: the same shapes), and the declarations are compared with its result.
  absl::Status ApplyDeclaredShapes(std::vector<Declaration>& decls) {
    graph_->RebuildEdges();
    ASSIGN_OR_RETURN(auto order, graph_->TopologicalOrder());
    RETURN_IF_ERROR(InferTypesAndShapes(*graph_, order));
    bool hinted = false;
    for (Declaration& d : decls) {
      if (d.value->shape.rank_known || !d.declared.shape.rank_known) continue;
      d.value->shape = d.declared.shape;
      hinted = true;
    }
    if (hinted) RETURN_IF_ERROR(InferTypesAndShapes(*graph_, order));
    std::vector<std::string> value_infos;
    for (const Declaration& d : decls) {
      if (!ShapesDisagree(d.declared.shape, d.value->shape)) continue;
      std::string msg = absl::StrCat(d.what, " is declared ", d.declared.shape.ToString(),
                                     " but shape inference gives ", d.value->shape.ToString());
      if (d.value->is_graph_output) {
        graph_->import_warnings().push_back(
            absl::StrCat(msg, "; the inferred shape is used (as ONNX Runtime does)"));
      } else {
        value_infos.push_back(std::move(msg));
      }
    }
    if (!value_infos.empty()) {
      size_t shown = std::min<size_t>(value_infos.size(), 8);
      graph_->import_warnings().push_back(
          absl::StrCat(value_infos.size(),
                       " value_info shape(s) disagree with shape inference, which is "
                       "used: ",
                       absl::StrJoin(value_infos.begin(), value_infos.begin() + shown, "; "),
                       value_infos.size() > shown ? "; ..." : ""));
    }
    return absl::OkStatus();
  }

  absl::Status ImportOutputs() {
    const auto& g = model_.graph();
    if (g.output_size() == 0) return absl::InvalidArgumentError("graph has no outputs");
    std::vector<Declaration> decls;
    for (int i = 0; i < g.output_size(); ++i) {
      const auto& out = g.output(i);
      std::string what = absl::StrCat("graph output #", i, " '", out.name(), "'");
      ir::Value* v = graph_->FindValue(out.name());
      if (v == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(what, " is not produced by any node"));
      }
      ir::Value declared;
      RETURN_IF_ERROR(ReadValueInfo(out, "graph output", &declared));
      decls.push_back({v, std::move(declared), std::move(what)});
      graph_->outputs().push_back(v);
    }
    absl::flat_hash_set<const ir::Value*> inputs(graph_->inputs().begin(), graph_->inputs().end());
    for (int i = 0; i < g.value_info_size(); ++i) {
      ir::Value* v = graph_->FindValue(g.value_info(i).name());
      if (v == nullptr || v->constant) continue;
      ir::Value declared;
      RETURN_IF_ERROR(ReadValueInfo(g.value_info(i), "value_info", &declared));
      if (inputs.contains(v)) {
        // A graph input: its own declaration holds; a value_info only fills in a missing shape.
        if (!v->shape.rank_known) v->shape = declared.shape;
        continue;
      }
      decls.push_back(
          {v, std::move(declared), absl::StrCat("value_info '", g.value_info(i).name(), "'")});
    }
    // Declared dtypes first: inference checks the dtype each op produces against them.
    for (Declaration& d : decls) {
      if (d.value->dtype != DataType::kUndefined) continue;
      d.value->dtype = d.declared.dtype;
      d.value->kind = d.declared.kind;
    }
    return ApplyDeclaredShapes(decls);
  }

  onnx::ModelProto& model_;
  const ImportOptions& options_;
  ExternalDataPolicy ext_;
  // Whether Debian's onnx 1.12 checker knows the opsets imported for the other domains Kiln
  // runs (it defines ai.onnx.ml up to 3 and no ai.onnx.preview): else its verdict is no
  // authority (it would reject TreeEnsemble or FlexAttention as unknown ops).
  bool CheckerKnowsDomains() const {
    for (const auto& [domain, version] : other_domains_) {
      if (domain == "ai.onnx.preview" || (domain == "ai.onnx.ml" && version > 3)) return false;
    }
    return true;
  }

  // The opset the model imports for `domain` ("" or "ai.onnx": the default one); 0 if none.
  int DomainOpset(const std::string& domain) const {
    if (ir::CanonicalDomain(domain).empty()) return opset_;
    auto it = other_domains_.find(domain);
    return it == other_domains_.end() ? 0 : static_cast<int>(it->second);
  }

  int opset_ = 0;
  absl::flat_hash_map<std::string, int64_t> other_domains_;
  std::unique_ptr<ir::Graph> graph_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ir::Graph>> ImportModel(absl::string_view bytes,
                                                       const ImportOptions& options,
                                                       std::string* release) {
  if (static_cast<int64_t>(bytes.size()) > options.max_model_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("model is ", bytes.size(), " bytes; the limit is ", options.max_model_bytes));
  }
  if (bytes.empty()) return absl::InvalidArgumentError("model is empty (0 bytes)");
  onnx::ModelProto model;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  in.SetTotalBytesLimit(static_cast<int>(std::min<int64_t>(options.max_model_bytes, INT32_MAX)));
  in.SetRecursionLimit(options.max_recursion_depth);
  if (!model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) {
    return absl::InvalidArgumentError(
        "model is not a valid ONNX ModelProto (protobuf parse failed: truncated, corrupted, not "
        "an ONNX file, or nested deeper than the recursion limit)");
  }
  if (release) std::string().swap(*release);
  return Importer(model, options).Run();
}

absl::StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot open '", path, "': no such file"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  if (st.st_size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is ", st.st_size, " bytes; the limit is ", max_bytes));
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::string data;
  try {
    data.resize(static_cast<size_t>(st.st_size));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of memory reading '", path, "' (", st.st_size, " bytes)"));
  }
  f.read(data.data(), st.st_size);
  if (f.gcount() != st.st_size) {
    return absl::DataLossError(absl::StrCat("short read on '", path, "'"));
  }
  return data;
}

absl::StatusOr<std::unique_ptr<ir::Graph>> ImportModelFile(const std::string& path,
                                                           ImportOptions options) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path, options.max_model_bytes));
  if (options.model_dir.empty()) {
    auto slash = path.rfind('/');
    options.model_dir = slash == std::string::npos ? "." : path.substr(0, slash);
    if (options.model_dir.empty()) options.model_dir = "/";
  }
  return ImportModel(bytes, options);
}

}  // namespace kiln::import
