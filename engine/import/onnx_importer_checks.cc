// The checks of a whole model before its graph is imported (onnx_importer_internal.h): external
// data locations, Debian's onnx checker, IR and opset versions, multi-device fields, and the
// ops of every node against what Kiln can run.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/import/contrib_ops.h"
#include "engine/import/onnx_importer_internal.h"
#include "engine/import/op_schemas.h"
#include "engine/import/tensor_proto.h"
#include "onnx/checker.h"
#include "onnx/onnx_pb.h"

namespace kiln::import::importer_internal {
namespace {

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

}  // namespace

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

absl::Status Importer::CheckVersions() {
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

bool Importer::HasUnknownField(const google::protobuf::Message& m, int number) {
  const auto& fields = m.GetReflection()->GetUnknownFields(m);
  for (int i = 0; i < fields.field_count(); ++i) {
    if (fields.field(i).number() == number) return true;
  }
  return false;
}

absl::Status Importer::CheckNoMultiDevice() {
  if (HasUnknownField(model_, kModelConfigurationField)) {
    return absl::UnimplementedError(
        "unsupported field: ModelProto.configuration (multi-device configuration, IR 11) is "
        "not supported: Kiln builds for a single CPU device; remove the field");
  }
  return CheckNoNodeDeviceConfigurations(model_.graph(), "", 0);
}

absl::Status Importer::CheckNoNodeDeviceConfigurations(const onnx::GraphProto& g,
                                                       const std::string& prefix, int depth) {
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
void Importer::CollectUnsupportedOps(const onnx::GraphProto& g, const std::string& prefix,
                                     int depth, std::vector<std::string>& unknown,
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
    if (!default_domain && (!MaxDomainOpset(n.domain()) || !other_domains_.contains(n.domain()))) {
      if (other_domains_.contains(n.domain())) {
        unimplemented.push_back(
            absl::StrCat(label, " op ", n.op_type(), " of domain '", n.domain(), "'"));
      } else {
        unknown.push_back(absl::StrCat(label, " domain '", n.domain(), "' is not in opset_import"));
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
      unknown.push_back(
          absl::StrCat(label, " op ", n.op_type(), of_domain, " does not exist at opset ", opset));
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
absl::Status Importer::CheckOps() {
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

}  // namespace kiln::import::importer_internal
