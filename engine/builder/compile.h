// The build pipeline after import, as a list of named passes (compile.cc, kPasses): each pass
// reads the results of the passes before it and leaves its own in the CompileState, and belongs
// to a stage of the build's progress ("policy", "fusion", "lowering", "plan"). Internal to the
// builder; the builder runs it on a model's graph and again on the graph of its fp32 reference.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/builder/builder.h"
#include "engine/ir/graph.h"
#include "engine/plan/engine_blob.h"
#include "engine/precision/policy.h"
#include "engine/runtime/memory_planner.h"
#include "kiln/v1/engine.pb.h"
#include "spdlog/logger.h"

namespace kiln::builder {

/// A compiled graph: its live nodes in execution order, the kernel chosen for each, and the
/// engine metadata but for what the blob writer fills (tensors, kernels, inputs, outputs).
struct Compiled {
  std::vector<ir::Node*> live;
  std::vector<plan::KernelChoice> choices;
  v1::EngineMetadata meta;
  runtime::MemoryPlan memory;      // by value id (the metadata's slots use blob tensor indices)
  uint64_t required_features = 0;  // CPU features the engine cannot run without
  /// fp32 GEMM weights packed only as the blob is written (PackWeights), by value id; and their
  /// nodes, which run the plain weight in memory.
  std::map<int, plan::WeightEncoding> encodings;
  std::vector<ir::Node*> packed_at_write;
};

/// Runs every pass of the pipeline on `g` (an imported graph, rewritten in place). Fills
/// `result` but for the blob (summary, provenance, patterns); `on_stage` (may be empty) hears
/// each stage as the first of its passes starts, with the fraction of the build done.
absl::StatusOr<Compiled> Compile(ir::Graph& g, const precision::Policy& policy,
                                 const BuildOptions& options, BuildResult& result,
                                 spdlog::logger& log,
                                 const std::function<void(const char*, double)>& on_stage);

/// The pipeline's passes in order, as "stage/pass" (for `kiln build --verbose` and tests).
std::vector<std::string> CompilePassNames();

}  // namespace kiln::builder
