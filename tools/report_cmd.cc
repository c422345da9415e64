#include "tools/report_cmd.h"

#include <malloc.h>

#include <cmath>
#include <iostream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/builder/accuracy.h"
#include "engine/common/status.h"
#include "engine/import/onnx_importer.h"
#include "engine/plan/engine_blob.h"
#include "engine/report/analysis.h"
#include "engine/report/render.h"
#include "engine/report/sample_inputs.h"
#include "tools/bench_cmd.h"
#include "tools/cli_io.h"
#include "tools/cli_paths.h"

namespace kiln::tools {
namespace {

// Flags that shape the samples (shared by build and compare).
const char* kSampleFlags[] = {"--inputs", "--seed", "--samples", "--input-range", "--shape"};
// Flags of the report itself.
const char* kReportValueFlags[] = {"--report", "--html", "--suggest-policy", "--atol", "--rtol"};

absl::StatusOr<double> Tolerance(const Args& args, const char* flag, double dflt) {
  auto it = args.flags.find(flag);
  if (it == args.flags.end()) return dflt;
  double v;
  if (!absl::SimpleAtod(it->second, &v) || !std::isfinite(v) || v < 0) {
    return UsageError(absl::StrCat(flag, " takes a non-negative number, got '", it->second, "'"));
  }
  return v;
}

absl::StatusOr<report::Tolerance> TolerancesFrom(const Args& args) {
  report::Tolerance t;
  ASSIGN_OR_RETURN(t.atol, Tolerance(args, "--atol", t.atol));
  ASSIGN_OR_RETURN(t.rtol, Tolerance(args, "--rtol", t.rtol));
  return t;
}

absl::StatusOr<report::SampleOptions> SampleOptionsFrom(const Args& args) {
  report::SampleOptions o;
  if (args.flags.count("--seed") && !absl::SimpleAtoi(args.flags.at("--seed"), &o.seed)) {
    return UsageError(
        absl::StrCat("--seed takes a non-negative integer, got '", args.flags.at("--seed"), "'"));
  }
  if (args.flags.count("--samples") &&
      (!absl::SimpleAtoi(args.flags.at("--samples"), &o.count) || o.count < 1 || o.count > 1000)) {
    return UsageError("--samples takes a count from 1 to 1000");
  }
  if (args.all.count("--input-range")) {
    for (const auto& v : args.all.at("--input-range")) {
      absl::Status st = report::ParseInputRange(v, o);
      if (!st.ok()) return UsageError(std::string(st.message()));
    }
  }
  if (args.all.count("--shape")) {
    for (const auto& v : args.all.at("--shape")) {
      absl::Status st = report::ParseShape(v, o);
      if (!st.ok()) return UsageError(std::string(st.message()));
    }
  }
  return o;
}

absl::Status WriteOutputs(const Args& args, const v1::AccuracyReport& rep) {
  if (args.flags.count("--report")) {
    RETURN_IF_ERROR(WriteFileAtomic(args.flags.at("--report"), report::RenderJson(rep)));
    std::cout << "report: wrote " << args.flags.at("--report") << "\n";
  }
  if (args.flags.count("--html")) {
    RETURN_IF_ERROR(WriteFileAtomic(args.flags.at("--html"), report::RenderHtml(rep)));
    std::cout << "report: wrote " << args.flags.at("--html") << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<report::Samples> SamplesFor(const Args& args, const ir::Graph& graph) {
  if (args.flags.count("--inputs")) {
    for (const char* f : {"--seed", "--samples", "--input-range", "--shape"}) {
      if (args.flags.count(f)) {
        return UsageError(absl::StrCat(f, " shapes generated samples; it cannot go with --inputs"));
      }
    }
    const std::string& dir = args.flags.at("--inputs");
    report::Samples s;
    ASSIGN_OR_RETURN(s.sets, ReadSampleSets(dir, &graph.inputs()));
    s.source = absl::StrCat("inputs ", dir, " (", s.sets.size(), " data set(s))");
    return s;
  }
  ASSIGN_OR_RETURN(report::SampleOptions o, SampleOptionsFrom(args));
  return report::GenerateSamples(graph, o);
}

void AddReportFlags(std::map<std::string, bool>& known) {
  for (const char* f : kSampleFlags) known[f] = true;
  for (const char* f : kReportValueFlags) known[f] = true;
  known["--no-suggest"] = false;
}

bool WantsReport(const Args& args) {
  for (const char* f : {"--inputs", "--seed", "--samples", "--input-range", "--shape", "--report",
                        "--html", "--suggest-policy"}) {
    if (args.flags.count(f)) return true;
  }
  return false;
}

absl::Status CheckReportFlags(const Args& args) {
  RETURN_IF_ERROR(TolerancesFrom(args).status());
  RETURN_IF_ERROR(SampleOptionsFrom(args).status());
  if (!WantsReport(args)) {
    for (const char* f : {"--atol", "--rtol", "--no-suggest"}) {
      if (args.flags.count(f)) {
        return UsageError(absl::StrCat(
            f, " applies to the accuracy report: add --inputs DIR, --seed N or --report FILE"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RunReport(const Args& args, const std::string& model_path,
                       const builder::BuildOptions& options, builder::BuildResult& built,
                       std::shared_ptr<spdlog::logger> logger) {
  ASSIGN_OR_RETURN(std::shared_ptr<const plan::Engine> engine, builder::TakeKeptEngine(built));
  std::shared_ptr<const plan::Engine> reference = std::move(built.reference);
  ASSIGN_OR_RETURN(report::Samples samples, SamplesFor(args, *engine->graph));
  builder::ReportOptions ro;
  ASSIGN_OR_RETURN(ro.tolerance, TolerancesFrom(args));
  ro.suggest = !args.flags.count("--no-suggest");
  ro.sample_source = samples.source;
  ro.notes = samples.notes;
  ro.model_path = model_path;
  // Builds free big weight buffers that must go back to the system (kiln_main.cc sets a fixed
  // 1 MiB mmap threshold); the sample runs allocate and free activations of a few MB per kernel,
  // which are cheaper reused from the heap than mapped and faulted in again each time. The
  // search builds go back to the build setting (128 KiB is glibc's default trim threshold).
  ro.on_reference_loaded = [] {
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
  };
  ro.on_samples_done = [] {
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    mallopt(M_TRIM_THRESHOLD, 128 << 10);
#if !defined(__SANITIZE_ADDRESS__)  // ASan's allocator replaces glibc's (server/trim.h)
    malloc_trim(0);
#endif
  };
  builder::BuildOptions opts = options;
  if (opts.import.model_dir.empty()) opts.import.model_dir = builder::ModelDirOf(model_path);
  // The search builds read the model again from its path: no bytes to keep here.
  ASSIGN_OR_RETURN(v1::AccuracyReport rep,
                   builder::BuildAccuracyReport("", opts, built, std::move(engine),
                                                std::move(reference), samples.sets, ro, logger));
  std::cout << "\n" << report::RenderTable(rep, 10);
  RETURN_IF_ERROR(WriteOutputs(args, rep));
  if (args.flags.count("--suggest-policy")) {
    const std::string& out = args.flags.at("--suggest-policy");
    if (rep.suggestion().found()) {
      RETURN_IF_ERROR(WriteFileAtomic(out, rep.suggestion().policy_text()));
      std::cout << "report: wrote the suggested policy to " << out << "\n";
    } else if (rep.pass()) {
      std::cout << "report: every output passes; no policy suggested (" << out << " not written)\n";
    } else {
      std::cout << "report: no passing policy found (" << out
                << " not written): " << rep.suggestion().note() << "\n";
    }
  }
  return absl::OkStatus();
}

absl::Status Compare(int argc, char** argv) {
  std::map<std::string, bool> known;
  for (const char* f : kSampleFlags) known[f] = true;
  for (const char* f : {"--report", "--html", "--atol", "--rtol", "--threads"}) known[f] = true;
  auto parsed = Parse(argc, argv, 2, known);
  if (!parsed.ok()) return UsageError(std::string(parsed.status().message()));
  Args args = *std::move(parsed);
  if (args.positional.size() != 2) return UsageError("compare takes ENGINE_A and ENGINE_B");
  {
    std::vector<NamedPath> inputs = {{"ENGINE_A", args.positional[0]},
                                     {"ENGINE_B", args.positional[1]}};
    std::vector<NamedPath> input_dirs;
    if (args.flags.count("--inputs")) input_dirs.push_back({"--inputs", args.flags["--inputs"]});
    std::vector<NamedPath> outputs;
    for (const char* flag : {"--report", "--html"}) {
      if (args.flags.count(flag)) outputs.push_back({flag, args.flags[flag]});
    }
    RETURN_IF_ERROR(CheckOutputPaths(inputs, input_dirs, outputs));
  }
  RETURN_IF_ERROR(ApplyThreads(args));
  ASSIGN_OR_RETURN(report::Tolerance tol, TolerancesFrom(args));
  ASSIGN_OR_RETURN(std::shared_ptr<const plan::Engine> a, plan::LoadEngineFile(args.positional[0]));
  ASSIGN_OR_RETURN(std::shared_ptr<const plan::Engine> b, plan::LoadEngineFile(args.positional[1]));
  if (a->metadata.model_sha256() != b->metadata.model_sha256()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the engines come from different models (sha256 ", a->metadata.model_sha256(), " vs ",
        b->metadata.model_sha256(), "): compare needs two engines of the same model"));
  }
  ASSIGN_OR_RETURN(report::Samples samples, SamplesFor(args, *a->graph));
  ASSIGN_OR_RETURN(auto analysis, report::EngineAnalysis::Create(a, b, tol));
  RETURN_IF_ERROR(analysis->AddSamples(samples.sets));
  v1::AccuracyReport rep = analysis->Report(10);
  rep.set_sample_source(samples.source);
  for (const auto& n : samples.notes) rep.add_notes(n);
  rep.add_notes(absl::StrCat("compare: A = ", args.positional[0], " (policy ", a->metadata.policy(),
                             "), B = ", args.positional[1], " (policy ", b->metadata.policy(),
                             ") as the reference; tensors that B keeps inside a fused kernel are "
                             "not compared"));
  std::cout << absl::StrFormat("compare %s (A) against %s (B): %d tensor(s), %d sample(s)\n",
                               args.positional[0], args.positional[1], rep.tensors_size(),
                               samples.sets.size());
  std::cout << absl::StrFormat("%-48s %-6s %10s %10s %10s %7s\n", "tensor (A vs B)", "A prec",
                               "max_abs", "max_rel", "cosine", "nonfin");
  for (const auto& t : rep.tensors()) {
    const auto& s = t.accumulated();
    std::string name =
        t.tensor().size() > 48 ? "..." + t.tensor().substr(t.tensor().size() - 45) : t.tensor();
    std::cout << absl::StrFormat("%-48s %-6s %10.3g %10.3g %10.6f %7d\n", name,
                                 t.effective_precision().empty() ? "-" : t.effective_precision(),
                                 s.max_abs(), s.max_rel(), s.cosine(),
                                 s.nan_count() + s.inf_count());
  }
  std::cout << "\n" << report::RenderTable(rep, 10);
  return WriteOutputs(args, rep);
}

}  // namespace kiln::tools
