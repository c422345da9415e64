// ONNX ModelProto -> IR (onnx_importer.h): parsing with limits, the order of the import's steps
// (Importer::Run), and reading model files. The steps live in onnx_importer_checks.cc (model
// checks), onnx_importer_graph.cc (graph, subgraph and node import) and onnx_importer_convert.cc
// (value types and attributes).
#include "engine/import/onnx_importer.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/import/contrib_ops.h"
#include "engine/import/functions.h"
#include "engine/import/legacy_ops.h"
#include "engine/import/onnx_importer_internal.h"
#include "engine/import/shape_inference.h"
#include "google/protobuf/io/coded_stream.h"
#include "onnx/onnx_pb.h"

namespace kiln::import {
namespace importer_internal {

absl::StatusOr<std::unique_ptr<ir::Graph>> Importer::Run() {
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

}  // namespace importer_internal

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
  return importer_internal::Importer(model, options).Run();
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
