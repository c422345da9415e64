// The accuracy report of a build (DESIGN.md §7): the engine compared tensor by tensor with the
// fp32 reference build of the same model, a verdict per graph output, the worst offenders, and
// a search for a small set of ONNX nodes to raise to fp32 so that every output passes.
//
// The search ranks nodes by the error they *introduce* (fed reference inputs), takes whole
// pattern instances where a node belongs to one, and tries growing prefixes of that ranking
// (1, 2, 4, ... units, then bisection) with real builds, each judged on the same samples. The
// winner is verified by its build, and its latency is measured against the original engine.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/builder/builder.h"
#include "engine/plan/engine_blob.h"
#include "engine/report/metrics.h"
#include "kiln/v1/report.pb.h"
#include "spdlog/logger.h"

namespace kiln::builder {

/// Options of the report.
struct ReportOptions {
  report::Tolerance tolerance;
  /// Search for a passing policy when an output fails.
  bool suggest = true;
  /// At most this many builds for the search.
  int max_search_builds = 16;
  int max_offenders = 10;
  /// Describes the samples in the report ("inputs DIR (2 data sets)").
  std::string sample_source;
  std::vector<std::string> notes;
  /// The model's path: when set, the model bytes are freed once the reference is imported and
  /// read again for each search build (peak memory of a big model), else they are kept.
  std::string model_path;
  /// Called once the reference engine is built and loaded, before the samples run: the point
  /// where a process may switch its allocator from saving memory (builds) to saving time
  /// (many short-lived activation buffers).
  std::function<void()> on_reference_loaded;
  /// Called when the samples are done, before the policy search builds: to switch back.
  std::function<void()> on_samples_done;
};

/// The engine a build with keep_reference kept in memory (the blob's own), taken out of `built`
/// with the blob freed: call once the blob is written.
absl::StatusOr<std::shared_ptr<const plan::Engine>> TakeKeptEngine(BuildResult& built);

/// Builds the report of `engine`, which `BuildEngine(model_bytes, options)` produced as `built`,
/// over `samples` (each in graph-input order). `reference` is the build's kept reference
/// (BuildOptions::keep_reference, moved out of `built` so the search can free it), or null to
/// build it here from `model_bytes`. The report's time includes the reference's. Hand `engine`
/// over too (std::move) and it is freed before the search builds.
absl::StatusOr<v1::AccuracyReport> BuildAccuracyReport(
    std::string model_bytes, const BuildOptions& options, const BuildResult& built,
    std::shared_ptr<const plan::Engine> engine, std::shared_ptr<const plan::Engine> reference,
    const std::vector<std::vector<ir::Tensor>>& samples, const ReportOptions& report_options,
    std::shared_ptr<spdlog::logger> logger);

/// A glob that matches exactly `name` (`*`, `?` and `[` escaped as character classes).
std::string ExactGlob(const std::string& name);

/// Median latency in ms of `runs` runs of `engine` on `inputs` (after one warm-up run).
absl::StatusOr<double> MedianLatencyMs(std::shared_ptr<const plan::Engine> engine,
                                       const std::vector<ir::Tensor>& inputs, int runs);

}  // namespace kiln::builder
