#include "engine/builder/builder.h"

#include <chrono>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/builder/compile.h"
#include "engine/common/sha256.h"
#include "engine/common/status.h"
#include "engine/kernels/kernel.h"
#include "engine/plan/engine_blob.h"
#include "engine/precision/policy.h"
#include "spdlog/sinks/null_sink.h"

namespace kiln::builder {
namespace {

// The engine of a compiled graph, in memory (no blob), its weights the graph's constants.
// Session reads memory plan slots as value ids of the engine's graph: here the graph's own.
std::shared_ptr<const plan::Engine> InMemoryEngine(std::unique_ptr<ir::Graph> graph, Compiled c) {
  auto e = std::make_shared<plan::Engine>();
  e->metadata = std::move(c.meta);
  v1::MemoryPlan* mp = e->metadata.mutable_memory_plan();
  mp->clear_slots();
  for (const auto& s : c.memory.slots) {
    v1::MemoryPlan::Slot* slot = mp->add_slots();
    slot->set_tensor(s.value_id);
    slot->set_offset(s.offset);
    slot->set_bytes(s.bytes);
  }
  for (size_t k = 0; k < c.live.size(); ++k) {
    const ir::Node* n = c.live[k];
    const plan::KernelChoice& choice = c.choices[n->id];
    v1::Kernel* kd = e->metadata.add_kernels();
    kd->set_id(absl::StrCat("k", k));
    kd->set_op_type(ir::OpName(n->op));
    kd->set_since_version(n->since_version);
    kd->set_backend(choice.backend);
    kd->set_isa(choice.isa);
    kd->set_dtype(choice.dtype);
    for (const auto& p : choice.provenance) *kd->add_nodes() = p;
  }
  e->order = std::move(c.live);
  e->graph = std::move(graph);
  return e;
}

// The policy of `options` (the preset or file, then the --rule flags).
absl::StatusOr<precision::Policy> PolicyOf(const BuildOptions& options) {
  ASSIGN_OR_RETURN(precision::Policy policy,
                   precision::LoadPolicy(options.policy.empty() ? "fp32" : options.policy));
  policy.implicit = options.policy.empty();
  RETURN_IF_ERROR(precision::AddRuleFlags(policy, options.rules));
  return policy;
}

std::shared_ptr<spdlog::logger> OrNullLogger(std::shared_ptr<spdlog::logger> logger) {
  if (logger) return logger;
  return std::make_shared<spdlog::logger>("kiln", std::make_shared<spdlog::sinks::null_sink_mt>());
}

// Everything after the import: the engine blob, and with keep_reference the pristine import and
// the reference compiled from it. `result.summary.model_sha256` is set.
absl::StatusOr<BuildResult> BuildImported(std::unique_ptr<ir::Graph> graph,
                                          const precision::Policy& policy,
                                          const BuildOptions& options, BuildResult result,
                                          spdlog::logger& logger) {
  ir::Graph& g = *graph;
  BuildSummary& sum = result.summary;
  // Both share the imported weights; the engine's passes replace its constants, never write
  // into them.
  std::unique_ptr<ir::Graph> reference_graph;
  if (options.keep_reference) {
    result.imported = g.Clone();
    reference_graph = g.Clone();
  }
  ASSIGN_OR_RETURN(Compiled c, Compile(g, policy, options, result, logger, options.on_stage));
  if (options.in_memory) {
    result.engine = InMemoryEngine(std::move(graph), std::move(c));
    return result;
  }
  // For the report: the engine of the blob in memory too (its weights the graph's), so that it
  // needs no copy of the blob loaded.
  std::optional<v1::EngineMetadata> meta;
  if (options.keep_reference) meta = c.meta;
  ASSIGN_OR_RETURN(result.blob, plan::WriteEngine(g, c.live, c.choices, std::move(c.meta),
                                                  c.required_features, c.encodings));
  logger.info("engine: {} kernels, {} bytes of weights, blob {} bytes", sum.kernels,
              sum.weight_bytes, result.blob.size());
  if (meta) {
    // The weights packed into the blob alone run plain in memory: the same numbers (the fp32
    // kernels read packed and plain B alike), no second copy of them.
    for (ir::Node* n : c.packed_at_write) n->attrs.erase(kernels::kPackedBAttr);
    c.meta = *std::move(meta);
    result.engine = InMemoryEngine(std::move(graph), std::move(c));
  }
  if (reference_graph) {
    auto t0 = std::chrono::steady_clock::now();
    BuildOptions ro = ReferenceBuildOptions(options);
    ASSIGN_OR_RETURN(precision::Policy ref_policy, precision::LoadPolicy(ro.policy));
    BuildResult ref_result;
    ref_result.summary.model_sha256 = sum.model_sha256;
    spdlog::logger quiet("kiln", std::make_shared<spdlog::sinks::null_sink_mt>());
    auto ref_compiled = Compile(*reference_graph, ref_policy, ro, ref_result, quiet, {});
    if (!ref_compiled.ok()) {
      return absl::Status(ref_compiled.status().code(),
                          absl::StrCat("the fp32 reference of the accuracy report: ",
                                       ref_compiled.status().message()));
    }
    result.reference = InMemoryEngine(std::move(reference_graph), *std::move(ref_compiled));
    result.reference_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  return result;
}

// The build; `release`, when set, points at the model bytes, freed once imported (the graph
// holds the weights from then on, so a big model is not held twice while its blob is written).
absl::StatusOr<BuildResult> Build(const std::string& model_bytes, std::string* release,
                                  const BuildOptions& options,
                                  std::shared_ptr<spdlog::logger> logger) {
  logger = OrNullLogger(std::move(logger));
  ASSIGN_OR_RETURN(precision::Policy policy, PolicyOf(options));
  BuildResult result;
  result.summary.model_sha256 = DigestHex(Sha256(model_bytes));
  if (options.on_stage) options.on_stage("import", 0.05);
  logger->info("import: {} bytes, sha256 {}", model_bytes.size(), result.summary.model_sha256);
  ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> graph,
                   import::ImportModel(model_bytes, options.import, release));
  logger->info("import: {} nodes, {} values, opset {}, ir_version {}", graph->nodes().size(),
               graph->values().size(), graph->opset(), graph->ir_version());
  return BuildImported(std::move(graph), policy, options, std::move(result), *logger);
}

}  // namespace

absl::StatusOr<BuildResult> BuildEngine(const std::string& model_bytes, const BuildOptions& options,
                                        std::shared_ptr<spdlog::logger> logger) {
  return Build(model_bytes, nullptr, options, std::move(logger));
}

absl::StatusOr<BuildResult> BuildEngine(std::string&& model_bytes, const BuildOptions& options,
                                        std::shared_ptr<spdlog::logger> logger) {
  std::string bytes = std::move(model_bytes);
  return Build(bytes, &bytes, options, std::move(logger));
}

absl::StatusOr<BuildResult> BuildEngineFromImport(const ir::Graph& imported,
                                                  const std::string& model_sha256,
                                                  const BuildOptions& options,
                                                  std::shared_ptr<spdlog::logger> logger) {
  logger = OrNullLogger(std::move(logger));
  ASSIGN_OR_RETURN(precision::Policy policy, PolicyOf(options));
  BuildResult result;
  result.summary.model_sha256 = model_sha256;
  return BuildImported(imported.Clone(), policy, options, std::move(result), *logger);
}

absl::StatusOr<BuildResult> BuildEngineFromFile(const std::string& model_path, BuildOptions options,
                                                std::shared_ptr<spdlog::logger> logger) {
  ASSIGN_OR_RETURN(std::string bytes, import::ReadFile(model_path, options.import.max_model_bytes));
  if (options.import.model_dir.empty()) options.import.model_dir = ModelDirOf(model_path);
  return BuildEngine(std::move(bytes), options, std::move(logger));
}

std::string SummaryText(const BuildSummary& s) {
  std::string out = absl::StrFormat(
      "  %d source nodes -> %d kernels (%d folded, %d dead)\n"
      "  weights %d bytes%s%s; activation arena %d bytes for %d bytes of activations%s\n"
      "  precision (%s typing): %d floating nodes fp32, %d fp16, %d bf16; %d dtype change(s), "
      "%d conversion(s) inserted, %d weight(s) converted\n"
      "  fusion: %d group(s) fused, %d refused\n",
      s.source_nodes, s.kernels, s.folded_nodes, s.dead_nodes, s.weight_bytes,
      s.packed_weights ? absl::StrCat(" (", s.packed_weights, " packed for the GEMM)") : "",
      s.prepacked_convolutions ? absl::StrCat(" (", s.prepacked_convolutions,
                                              " convolution(s) also laid out for their kernels)")
                               : "",
      s.arena_bytes, s.total_activation_bytes,
      s.dynamic_activations ? absl::StrCat(" (+", s.dynamic_activations, " sized at run time)")
                            : "",
      s.strong_typing ? "strong" : "weak", s.nodes_fp32, s.nodes_fp16, s.nodes_bf16,
      s.dtype_changes, s.inserted_conversions, s.converted_weights, s.fusions,
      s.fusion_refusals.size());
  if (s.subgraphs > 0) {
    absl::StrAppend(&out, "  subgraphs: ", s.subgraphs, " (If / Loop / Scan) compiled, ",
                    s.subgraph_kernels, " kernel(s) in them\n");
  }
  if (s.layout_convolutions > 0) {
    absl::StrAppend(&out, "  layout: ", s.layout_convolutions,
                    " convolution(s) channels-last (NHWC), ", s.layout_transposes,
                    " transpose(s) inserted\n");
  }
  for (const std::string& w : s.warnings) absl::StrAppend(&out, "  warning: ", w, "\n");
  for (const std::string& r : s.fusion_refusals) {
    absl::StrAppend(&out, "  fusion refused: ", r, "\n");
  }
  return out;
}

BuildOptions ReferenceBuildOptions(const BuildOptions& options) {
  BuildOptions r;
  r.policy = "fp32";
  r.typing = precision::Typing::kWeak;
  r.constraints = precision::Constraints::kPrefer;
  r.fusion.enabled = false;
  r.channels_last = false;  // node by node on the ONNX tensors themselves
  // The reference shares its weights with the import (Graph::Clone): packed copies would hold a
  // second fp32 copy of every GEMM weight for the whole report.
  r.pack_f32_weights = false;
  r.import = options.import;
  r.max_folded_bytes = options.max_folded_bytes;
  return r;
}

std::string ModelDirOf(const std::string& model_path) {
  const size_t slash = model_path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : model_path.substr(0, slash);
}

}  // namespace kiln::builder
