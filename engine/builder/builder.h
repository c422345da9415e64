// The build function (DESIGN.md §2): model bytes + policy + options -> engine blob + summary.
// The CLI and the server call this same function.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/import/onnx_importer.h"
#include "engine/passes/fusion.h"
#include "engine/plan/engine_blob.h"
#include "engine/precision/assign.h"
#include "kiln/v1/engine.pb.h"
#include "spdlog/logger.h"

namespace kiln::builder {

/// Options of one build.
struct BuildOptions {
  /// `--policy`: a preset name (fp32, fp16, bf16, fp32-layernorm, bf16-layernorm, fp16-safe) or
  /// the path of a policy file. Empty: the implicit default (fp32 for an fp32 model, the
  /// authored types for a model authored in mixed precision).
  std::string policy;
  /// `--rule` flags, applied after the policy's own rules.
  std::vector<std::string> rules;
  precision::Constraints constraints = precision::Constraints::kObey;
  precision::Typing typing = precision::Typing::kAuto;
  /// `--fusion on|off`, `--no-fuse SELECTOR`.
  passes::FusionOptions fusion;
  import::ImportOptions import;
  /// Fold nodes whose inputs are all constant when each folded output is at most this many bytes
  /// (larger constants are cheaper to compute at run time than to store in the blob).
  int64_t max_folded_bytes = 1 << 20;
  /// Called as the build enters each stage ("import", "policy", "fusion", "lowering", "plan")
  /// with the fraction of the build done so far (0..0.8; the engine blob takes the rest). For
  /// progress reporting (the server's Stage events); may be empty.
  std::function<void(const char* stage, double fraction)> on_stage;
  /// Also build the accuracy report's fp32 reference (ReferenceBuildOptions) from the same
  /// import, in memory and sharing the imported weights: BuildResult::reference; and keep the
  /// engine of the blob in memory: BuildResult::engine (the report runs it without loading a
  /// copy of the blob).
  bool keep_reference = false;
  /// No blob: BuildResult::engine is the compiled engine in memory (weights shared with the
  /// import), for builds that are only run (the accuracy report's policy search).
  bool in_memory = false;
  /// Store each constant bf16, fp16 and fp32 GEMM weight packed as the AVX-512 GEMM reads it
  /// (the engine then requires that CPU's features), and, in a blob, each oneDNN convolution's
  /// W also as its kernel lays it out on this machine (oneDNN's layout or the GEMM path's strips:
  /// read where it lies when the running kernel chooses the same; W as authored stays). Off:
  /// weights as authored only (an engine any CPU can run).
  bool pack_weights = true;
  /// With pack_weights, fp32 weights too (packed as the blob is written; never in memory).
  bool pack_f32_weights = true;
  /// Keep activations channels-last (NHWC) between the convolutions the oneDNN kernel runs
  /// (passes/layout.h). The numbers are the same either way; off: every tensor NCHW.
  bool channels_last = true;
  /// `--device`: "cpu", or an OpenCL device "opencl[:PLATFORM[:DEVICE]]" (kernels/device.h)
  /// that the placement pass puts kernels on (builder/placement.h). A device build keeps
  /// tensors NCHW and weights as authored (the device kernels read those).
  std::string device = "cpu";
  /// `--no-fallback`: a node the device cannot run fails the build instead of running on the
  /// CPU.
  bool no_fallback = false;
};

/// What a build did, for logs, `kiln build` and tests.
struct BuildSummary {
  int source_nodes = 0;
  int kernels = 0;
  int folded_nodes = 0;
  int dead_nodes = 0;
  uint64_t arena_bytes = 0;
  uint64_t total_activation_bytes = 0;
  int dynamic_activations = 0;
  uint64_t weight_bytes = 0;
  std::string model_sha256;
  bool strong_typing = false;
  int nodes_fp32 = 0, nodes_fp16 = 0, nodes_bf16 = 0;  // floating source nodes by effective
  int dtype_changes = 0;
  int inserted_conversions = 0;
  int converted_weights = 0;
  int packed_weights = 0;          // GEMM weights stored packed (BuildOptions::pack_weights)
  int prepacked_convolutions = 0;  // convolution weights also laid out for their kernels (idem)
  int layout_convolutions = 0;  // convolutions running channels-last (BuildOptions::channels_last)
  int layout_transposes = 0;    // transposes the layout pass inserted
  std::vector<std::string> warnings;
  int fusions = 0;
  std::vector<std::string> fusion_refusals;
  int subgraphs = 0;         // If / Loop / Scan subgraphs compiled (each its own engine)
  int subgraph_kernels = 0;  // their kernels, all depths
};

struct BuildResult {
  std::string blob;  // empty with BuildOptions::in_memory
  /// With BuildOptions::in_memory or keep_reference: the engine, ready for runtime::Session.
  std::shared_ptr<const plan::Engine> engine;
  BuildSummary summary;
  /// Per source ONNX node (by index): how it was built, as recorded in the blob.
  std::vector<v1::NodeProvenance> nodes;
  /// The same for the nodes of the If / Loop / Scan subgraphs, all depths (names qualified:
  /// "If_0/then_branch/..."; node_index within its subgraph).
  std::vector<v1::NodeProvenance> subgraph_nodes;
  /// The recognised pattern instances: kind ("layernorm", ...) and source node indices.
  struct Pattern {
    std::string kind;
    std::vector<int> nodes;
  };
  std::vector<Pattern> patterns;
  /// With BuildOptions::keep_reference: the fp32 reference engine (not serialized; it runs
  /// without an arena) and the time it took to compile, which belongs to the report.
  std::shared_ptr<const plan::Engine> reference;
  double reference_ms = 0;
  /// With BuildOptions::keep_reference: the graph as imported, before any pass (its constants
  /// shared with the reference), for BuildEngineFromImport.
  std::shared_ptr<const ir::Graph> imported;
};

/// Builds an engine from serialized ONNX. `logger` receives the build log (may be null).
absl::StatusOr<BuildResult> BuildEngine(const std::string& model_bytes, const BuildOptions& options,
                                        std::shared_ptr<spdlog::logger> logger);

/// As above, freeing `model_bytes` as soon as the model is imported (peak memory of a big
/// model: its graph and its blob, not also its bytes).
absl::StatusOr<BuildResult> BuildEngine(std::string&& model_bytes, const BuildOptions& options,
                                        std::shared_ptr<spdlog::logger> logger);

/// Builds an engine from a graph as ImportModel returned it (`BuildResult::imported`; a copy is
/// compiled, the constants shared), without reading or parsing the model again: the accuracy
/// report's policy search. `model_sha256` is the imported model's.
absl::StatusOr<BuildResult> BuildEngineFromImport(const ir::Graph& imported,
                                                  const std::string& model_sha256,
                                                  const BuildOptions& options,
                                                  std::shared_ptr<spdlog::logger> logger);

/// The summary lines `kiln build` prints and the service returns (two-space indented).
std::string SummaryText(const BuildSummary& summary);

/// The options of the accuracy report's reference build for a build with `options`: fp32,
/// unfused, every authored type widened to fp32 (weak typing), same import options.
BuildOptions ReferenceBuildOptions(const BuildOptions& options);

/// The folder whose files a model's external data may name: the model file's own folder.
std::string ModelDirOf(const std::string& model_path);

/// Reads MODEL (external data resolved next to it) and builds it.
absl::StatusOr<BuildResult> BuildEngineFromFile(const std::string& model_path, BuildOptions options,
                                                std::shared_ptr<spdlog::logger> logger);

}  // namespace kiln::builder
