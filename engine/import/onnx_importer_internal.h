// The importer's internal interface shared by its .cc files, not for other users: the Importer
// class (its steps run by Run() in onnx_importer.cc), the checks of a whole model
// (onnx_importer_checks.cc), the import of graphs, subgraphs and nodes (onnx_importer_graph.cc)
// and the conversion of value types and attributes (onnx_importer_convert.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/import/onnx_importer.h"
#include "engine/import/tensor_proto.h"
#include "engine/ir/graph.h"
#include "onnx/onnx_pb.h"

namespace kiln::import::importer_internal {

// ---- Names, errors, value types and attributes (onnx_importer_convert.cc) ----

/// "[node '<prefix><name>' (<op>) #<index>]", naming node `n` of a graph in errors.
std::string NodeLabel(const onnx::NodeProto& n, int index, const std::string& prefix = "");

/// A node's name in the IR: its own, or "<op>_<index>" when it has none.
std::string NodeName(const onnx::NodeProto& n, int index);

/// Where the nodes of subgraph attribute `attr` of node `node` sit: "<prefix><node>/<attr>/".
std::string SubgraphPrefix(const std::string& prefix, const std::string& node,
                           const std::string& attr);

/// InvalidArgument "<where> <what>".
absl::Status Invalid(const std::string& where, const std::string& what);

/// Reads a ValueInfo's type into the value's kind, dtype and shape; other types are
/// unimplemented.
absl::Status ReadValueInfo(const onnx::ValueInfoProto& vi, const std::string& what, ir::Value* v);

/// Converts attribute `a` of the node labelled `label` (subgraphs excepted: the Importer imports
/// them).
absl::StatusOr<ir::Attribute> ConvertAttribute(const onnx::AttributeProto& a,
                                               const std::string& label,
                                               const ExternalDataPolicy& ext);

// ---- Checks of a whole model (onnx_importer_checks.cc) ----

/// Checks the 'location' of every external-data tensor of the model against the model's folder
/// and points each at the path it resolves to; `original` keeps what it said.
absl::Status ResolveExternalLocations(onnx::ModelProto& model, const ExternalDataPolicy& ext,
                                      std::vector<std::pair<std::string*, std::string>>& original);

/// Undoes ResolveExternalLocations.
void RestoreLocations(std::vector<std::pair<std::string*, std::string>>& original);

/// Extra check by Debian's onnx 1.12 checker where it is an authority (never the only check).
absl::Status RunOnnxChecker(const onnx::ModelProto& model, int opset);

// ---- The import of one model ----

class Importer {
 public:
  Importer(onnx::ModelProto& model, const ImportOptions& options)
      : model_(model), options_(options), ext_{options.model_dir} {}

  /// The whole import (onnx_importer.cc).
  absl::StatusOr<std::unique_ptr<ir::Graph>> Run();

 private:
  // ---- Checks (onnx_importer_checks.cc) ----

  absl::Status CheckVersions();

  // Multi-device configuration (IR 11+) asks for the graph to be sharded across devices; Kiln
  // builds for one CPU and will not silently drop a placement the model asks for. The fields are
  // newer than Debian's onnx 1.12 protobuf, so they arrive as unknown fields with their numbers.
  static constexpr int kModelConfigurationField = 26;        // ModelProto.configuration
  static constexpr int kNodeDeviceConfigurationsField = 10;  // NodeProto.device_configurations

  static bool HasUnknownField(const google::protobuf::Message& m, int number);
  absl::Status CheckNoMultiDevice();
  absl::Status CheckNoNodeDeviceConfigurations(const onnx::GraphProto& g, const std::string& prefix,
                                               int depth);
  void CollectUnsupportedOps(const onnx::GraphProto& g, const std::string& prefix, int depth,
                             std::vector<std::string>& unknown,
                             std::vector<std::string>& unimplemented);
  absl::Status CheckOps();

  // ---- Graph, subgraph and node import (onnx_importer_graph.cc) ----

  absl::Status ImportInitializersAndInputs();

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

  ir::Value* Resolve(Scope& s, const std::string& name);
  absl::StatusOr<std::shared_ptr<ir::Graph>> ImportSubgraph(const onnx::GraphProto& gp,
                                                            const std::string& attr,
                                                            const ir::Node& node, Scope& s,
                                                            Scope& sub);
  absl::Status ImportNodes(const google::protobuf::RepeatedPtrField<onnx::NodeProto>& nodes,
                           Scope& s);

  // A value's declared type (graph output or value_info) and what to call it in a warning.
  struct Declaration {
    ir::Value* value;
    ir::Value declared;
    std::string what;
  };

  static bool ShapesDisagree(const ir::Shape& declared, const ir::Shape& inferred);
  absl::Status ApplyDeclaredShapes(std::vector<Declaration>& decls);
  absl::Status ImportOutputs();

  // ---- State ----

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

}  // namespace kiln::import::importer_internal
