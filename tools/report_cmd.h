// The accuracy report on the kiln command line: the report flags of `kiln build` and the
// `kiln compare` command (DESIGN.md §7, §10).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "engine/builder/builder.h"
#include "engine/report/sample_inputs.h"
#include "spdlog/logger.h"
#include "tools/cli_args.h"

namespace kiln::tools {

/// Sample inputs from `--inputs DIR` (every data set), or generated for `graph` from `--seed`,
/// `--samples`, `--input-range` and `--shape`; usage errors for bad or conflicting flags.
absl::StatusOr<report::Samples> SamplesFor(const Args& args, const ir::Graph& graph);

/// Adds the report flags of `kiln build` to `known`.
void AddReportFlags(std::map<std::string, bool>& known);

/// True when the flags ask for a report: sample inputs (--inputs, --seed) or a report output.
bool WantsReport(const Args& args);

/// Checks the report flags before the build starts (so a typo does not cost a build).
absl::Status CheckReportFlags(const Args& args);

/// Builds the accuracy report of a finished build of `model_path`, prints its terminal table
/// and writes --report / --html / --suggest-policy. Takes the blob (the engine just written) and
/// the kept reference out of `built` (the build ran with keep_reference).
absl::Status RunReport(const Args& args, const std::string& model_path,
                       const builder::BuildOptions& options, builder::BuildResult& built,
                       std::shared_ptr<spdlog::logger> logger);

/// `kiln compare ENGINE_A ENGINE_B --inputs DIR | --seed N ...`: every tensor both engines
/// compute, A against B.
absl::Status Compare(int argc, char** argv);

}  // namespace kiln::tools
