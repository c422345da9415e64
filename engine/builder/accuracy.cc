#include "engine/builder/accuracy.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/builder/quantization_reference.h"
#include "engine/common/cpu_features.h"
#include "engine/common/status.h"
#include "engine/import/onnx_importer.h"
#include "engine/kernels/cpu/avx512/gemm.h"
#include "engine/precision/policy.h"
#include "engine/report/analysis.h"
#include "engine/runtime/session.h"

namespace kiln::builder {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string Sci(double v) { return absl::StrFormat("%.3g", v); }

// How reduced precision executes on this CPU (DESIGN.md §5: the report says which).
std::string Arithmetic() {
  uint64_t f = DetectCpuFeatures();
  std::string bf16 = !(f & kCpuAvx512Bf16)
                         ? "bf16 emulated (fp32 arithmetic on bf16 values)"
                         : (kernels::cpu::avx512::GemmUsesAmx()
                                ? "bf16 dot products native (AMX tiles; vdpbf16ps elsewhere)"
                                : "bf16 dot products native (vdpbf16ps)");
  std::string fp16 = (f & kCpuF16c) ? "fp16 emulated (F16C conversions, fp32 arithmetic)"
                                    : "fp16 emulated (software conversions, fp32 arithmetic)";
  return absl::StrCat(fp16, "; ", bf16, "; sums and dot products accumulate in fp32");
}

// The tensors the engine holds in fp16 or bf16 whose fp32 reference does not fit that format
// (fp16: |x| > 65504; bf16: |x| > 3.39e38, in practice the reference overflowing to Inf
// itself), one line each naming the tensor, its node and the node's assigned precision: they
// overflow to Inf in the engine whatever the kernels do.
std::vector<std::string> RangeWarnings(const v1::AccuracyReport& rep) {
  constexpr double kFp16Max = 65504.0;
  constexpr double kBf16Max = 3.3895313892515355e38;
  std::vector<std::string> out;
  for (const v1::TensorReport& t : rep.tensors()) {
    const std::string& p = t.effective_precision();
    const double max = p == "fp16" ? kFp16Max : p == "bf16" ? kBf16Max : 0;
    const int64_t ref_inf = t.accumulated().ref_inf_count();
    if (max == 0 || !(t.ref_max_abs() > max || ref_inf > 0)) continue;
    std::string why = t.ref_max_abs() > max
                          ? absl::StrCat("its fp32 reference reaches ", Sci(t.ref_max_abs()), " > ",
                                         p, " max ", p == "fp16" ? "65504" : "3.39e+38")
                          : absl::StrCat("its fp32 reference itself holds ", ref_inf, " Inf");
    out.push_back(absl::StrCat("tensor '", t.tensor(), "' of [node '", t.node_name(), "' (",
                               t.op_type(), ") #", t.node_index(), "] assigned ",
                               t.assigned_precision(), ", held ", p, ": ", why));
  }
  return out;
}

// Outputs of one engine on every sample, judged against the reference outputs.
struct OutputCheck {
  bool pass = true;
  double worst_max_abs = 0;
};

// Outputs of an engine per sample (f32 copies; non-floating outputs left undefined).
absl::StatusOr<SampleOutputs> RunOutputs(std::shared_ptr<const plan::Engine> engine,
                                         const std::vector<std::vector<ir::Tensor>>& samples) {
  return RunOutputsF32(std::move(engine), samples);
}

// The quantization summary (quantization_reference.h), detected on the graph as imported: the
// build's when it kept it, else imported here from `model_bytes` or the model's `path`. For a
// QDQ model the reference's outputs are run into `ref_out` (the search reuses them).
absl::StatusOr<v1::QuantizationSummary> Quantization(
    const std::string& model_bytes, const std::string& path, const BuildOptions& options,
    const BuildResult& built, std::shared_ptr<const plan::Engine> reference,
    const std::vector<std::vector<ir::Tensor>>& samples, const report::Tolerance& tolerance,
    std::optional<SampleOutputs>& ref_out) {
  std::shared_ptr<const ir::Graph> imported = built.imported;
  if (!imported) {
    std::string bytes;
    if (model_bytes.empty()) {
      if (path.empty()) {
        return absl::InvalidArgumentError(
            "the accuracy report's quantization summary needs the model (its bytes or path)");
      }
      ASSIGN_OR_RETURN(bytes, import::ReadFile(path, options.import.max_model_bytes));
    }
    ASSIGN_OR_RETURN(
        std::unique_ptr<ir::Graph> g,
        import::ImportModel(model_bytes.empty() ? bytes : model_bytes, options.import, nullptr));
    imported = std::move(g);
  }
  const QuantizationForm form = DetectQuantization(*imported);
  if (form.qdq() && !ref_out) {
    ASSIGN_OR_RETURN(ref_out, RunOutputs(std::move(reference), samples));
  }
  std::vector<std::string> names;
  for (const ir::Value* v : imported->outputs()) names.push_back(v ? v->name : "");
  return SummarizeQuantization(form, *imported, built.summary.model_sha256, options, samples,
                               ref_out ? &*ref_out : nullptr, names, tolerance);
}

OutputCheck Judge(const SampleOutputs& got, const SampleOutputs& ref,
                  const report::Tolerance& tol) {
  OutputCheck c;
  if (got.empty()) return c;
  for (size_t o = 0; o < got[0].size(); ++o) {
    report::ErrorAccumulator acc;
    for (size_t s = 0; s < got.size(); ++s) {
      const ir::Tensor& x = got[s][o];
      const ir::Tensor& r = ref[s][o];
      if (!x.defined() || !r.defined() || x.num_elements() != r.num_elements()) continue;
      acc.Add(x.data<float>(), r.data<float>(), x.num_elements(), tol);
    }
    v1::ErrorStats st = acc.Finish();
    bool ok = report::NonFiniteErrors(st) == 0 && st.fraction_outside() == 0;
    c.pass &= ok;
    double m = report::NonFiniteErrors(st) > 0 ? INFINITY : st.max_abs();
    c.worst_max_abs = std::max(c.worst_max_abs, m);
  }
  return c;
}

// The policy text the user started from: the preset, the policy file, then the --rule flags.
std::string BasePolicyText(const BuildOptions& options) {
  std::string text;
  if (options.policy.empty()) {
    text = "base = fp32\n";
  } else if (precision::Preset(options.policy).ok()) {
    text = absl::StrCat("preset = ", options.policy, "\n");
  } else {
    std::ifstream f(options.policy);
    std::stringstream ss;
    ss << f.rdbuf();
    text = absl::StrCat("# from ", options.policy, "\n", ss.str());
    if (!text.empty() && text.back() != '\n') text += '\n';
  }
  if (!options.rules.empty()) {
    absl::StrAppend(&text, "# --rule flags\n", absl::StrJoin(options.rules, "\n"), "\n");
  }
  return text;
}

// A unit of the search: the ONNX nodes raised together (a whole pattern instance, or one node).
struct Unit {
  std::vector<int> nodes;
  std::string label;
};

std::vector<Unit> Units(const std::vector<int>& ranked, const BuildResult& built) {
  std::vector<Unit> units;
  std::vector<bool> taken(built.nodes.size(), false);
  for (int s : ranked) {
    if (s < 0 || s >= static_cast<int>(built.nodes.size()) || taken[s]) continue;
    const v1::NodeProvenance& p = built.nodes[s];
    if (p.assigned_precision().empty() || p.assigned_precision() == "fp32") continue;
    // The smallest pattern instance holding the node: raise it whole.
    const BuildResult::Pattern* best = nullptr;
    for (const auto& pat : built.patterns) {
      if (std::find(pat.nodes.begin(), pat.nodes.end(), s) == pat.nodes.end()) continue;
      if (!best || pat.nodes.size() < best->nodes.size()) best = &pat;
    }
    Unit u;
    if (best) {
      for (int m : best->nodes) {
        if (m >= 0 && m < static_cast<int>(taken.size()) && !taken[m]) {
          u.nodes.push_back(m);
          taken[m] = true;
        }
      }
      u.label = absl::StrCat(best->kind, " instance ending at '",
                             built.nodes[best->nodes.back()].node_name(), "'");
    } else {
      u.nodes.push_back(s);
      taken[s] = true;
      u.label = absl::StrCat("node '", p.node_name(), "' (", p.op_type(), ")");
    }
    units.push_back(std::move(u));
  }
  return units;
}

// The rule raising source node `s` to fp32.
std::string RaiseRule(const BuildResult& built, int s) {
  return absl::StrCat("name:", ExactGlob(built.nodes[s].node_name()), " = fp32");
}

std::vector<std::string> RulesFor(const std::vector<Unit>& units, size_t k,
                                  const BuildResult& built) {
  std::vector<std::string> rules;
  for (size_t i = 0; i < k && i < units.size(); ++i) {
    for (int s : units[i].nodes) rules.push_back(RaiseRule(built, s));
  }
  return rules;
}

}  // namespace

std::string ExactGlob(const std::string& name) {
  std::string g;
  for (char c : name) {
    if (c == '*' || c == '?' || c == '[') {
      absl::StrAppend(&g, "[", std::string(1, c), "]");
    } else {
      g.push_back(c);
    }
  }
  return g;
}

absl::StatusOr<double> MedianLatencyMs(std::shared_ptr<const plan::Engine> engine,
                                       const std::vector<ir::Tensor>& inputs, int runs) {
  ASSIGN_OR_RETURN(auto session, runtime::Session::Create(std::move(engine)));
  RETURN_IF_ERROR(session->Run(inputs).status());  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    RETURN_IF_ERROR(session->Run(inputs).status());
    ms.push_back(MsSince(t0));
  }
  std::sort(ms.begin(), ms.end());
  return ms.empty() ? 0.0 : ms[ms.size() / 2];
}

absl::StatusOr<std::shared_ptr<const plan::Engine>> TakeKeptEngine(BuildResult& built) {
  std::string().swap(built.blob);
  std::shared_ptr<const plan::Engine> engine = std::move(built.engine);
  if (!engine) return absl::InternalError("the build kept no engine for the report");
  return engine;
}

absl::StatusOr<v1::AccuracyReport> BuildAccuracyReport(
    std::string model_bytes, const BuildOptions& options, const BuildResult& built,
    std::shared_ptr<const plan::Engine> engine, std::shared_ptr<const plan::Engine> reference,
    const std::vector<std::vector<ir::Tensor>>& samples, const ReportOptions& report_options,
    std::shared_ptr<spdlog::logger> logger) {
  auto t0 = Clock::now();
  if (samples.empty()) return absl::InvalidArgumentError("the accuracy report needs samples");
  // The reference: fp32, unfused, every authored type widened to fp32; compiled by the build
  // from the same import when it kept it, else built here.
  const std::string& path = report_options.model_path;
  double reference_ms = built.reference_ms;
  if (!reference) {
    if (logger) logger->info("report: building the fp32 reference (unfused)");
    auto r0 = Clock::now();
    BuildOptions ref_options = ReferenceBuildOptions(options);
    if (model_bytes.empty() && !path.empty()) {
      ASSIGN_OR_RETURN(model_bytes, import::ReadFile(path, options.import.max_model_bytes));
    }
    ASSIGN_OR_RETURN(BuildResult ref_built,
                     path.empty() ? BuildEngine(model_bytes, ref_options, nullptr)
                                  : BuildEngine(std::move(model_bytes), ref_options, nullptr));
    if (!path.empty()) model_bytes.clear();  // moved from: read again from the path
    ASSIGN_OR_RETURN(reference, plan::LoadEngineFromBytes(
                                    std::make_shared<const std::string>(std::move(ref_built.blob)),
                                    /*trusted=*/true));
    reference_ms = MsSince(r0);
  }
  if (logger) logger->info("report: fp32 reference ready ({:.0f} ms)", reference_ms);
  if (report_options.on_reference_loaded) report_options.on_reference_loaded();
  ASSIGN_OR_RETURN(auto analysis,
                   report::EngineAnalysis::Create(engine, reference, report_options.tolerance));
  absl::Status st =
      analysis->AddSamples(samples, [&](size_t i, const report::EngineAnalysis::SampleStats& t) {
        if (!logger) return;
        logger->info(
            "report: sample {}/{}: reference run {:.0f} ms, engine runs (tapped, and {} kernel(s) "
            "alone on reference inputs; {} with inputs equal to them reused) {:.0f} ms",
            i + 1, samples.size(), t.reference_ms, t.kernels_alone, t.kernels_reused, t.engine_ms);
      });
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrCat("accuracy report, ", st.message()));
  }
  std::vector<std::string> pattern_of_source(built.nodes.size());
  for (const auto& p : built.patterns) {
    if (p.nodes.empty()) continue;
    std::string label = absl::StrCat(p.kind, "@", built.nodes[p.nodes.back()].node_name());
    for (int s : p.nodes) {
      if (s >= 0 && s < static_cast<int>(pattern_of_source.size()) &&
          pattern_of_source[s].empty()) {
        pattern_of_source[s] = label;
      }
    }
  }
  v1::AccuracyReport rep = analysis->Report(report_options.max_offenders, pattern_of_source);
  rep.set_sample_source(report_options.sample_source);
  rep.set_arithmetic(Arithmetic());
  for (const auto& n : report_options.notes) rep.add_notes(n);
  // Range: a tensor whose reference exceeds its format is a build warning, in the log and in
  // the report's notes (the per-tensor flags say the same: ref_exceeds_fp16, ref_max_abs).
  std::vector<std::string> range = RangeWarnings(rep);
  for (size_t i = 0; i < range.size(); ++i) {
    if (i < 20) {
      if (logger) logger->warn("range: {}", range[i]);
      rep.add_notes(absl::StrCat("warning: range: ", range[i]));
    } else {
      std::string more = absl::StrCat("warning: range: ", range.size() - 20,
                                      " more tensor(s) whose reference exceeds their format");
      if (logger) logger->warn("{}", more);
      rep.add_notes(more);
      break;
    }
  }
  std::vector<int> ranked = analysis->RankedSources();
  analysis.reset();  // the search needs only the outputs
  // The quantization form, and for a QDQ model the quantization error against its float
  // computation: separate from the policy's error above, whose reference is the model as
  // written.
  std::optional<SampleOutputs> reference_outputs;
  {
    auto status_or = Quantization(model_bytes, path, options, built, reference, samples,
                                  report_options.tolerance, reference_outputs);
    if (!status_or.ok()) {
      return absl::Status(status_or.status().code(),
                          absl::StrCat("accuracy report, ", status_or.status().message()));
    }
    *rep.mutable_quantization() = *std::move(status_or);
  }
  if (logger) {
    const v1::QuantizationSummary& q = rep.quantization();
    std::string measured;
    if (q.error_measured()) {
      double worst = 0;
      for (const auto& o : q.outputs()) {
        const bool nonfinite = report::NonFiniteErrors(o.error()) > 0;
        worst = std::max(worst, nonfinite ? INFINITY : o.error().max_abs());
      }
      measured =
          absl::StrFormat(", worst output max_abs %s against the float computation (%.0f ms)",
                          Sci(worst), q.float_reference_ms());
    }
    logger->info("report: quantization: {}{}: {}", q.form(), measured, q.note());
  }
  if (logger) {
    logger->info("report: {} tensor(s) compared over {} sample(s): {}", rep.tensors_size(),
                 samples.size(), rep.pass() ? "every output passes" : "some output fails");
    // A branch or trip count that came out different is itself an accuracy finding.
    for (const v1::SubgraphRuns& g : rep.subgraphs().runs()) {
      if (g.samples_differing() == 0) continue;
      logger->warn(
          "report: {} {} from the reference in {} sample(s): {} engine run(s) and {} reference "
          "run(s) without a counterpart, not compared",
          g.subgraph(), g.op_type() == "If" ? "branch differs" : "iterations differ",
          g.samples_differing(), g.engine_only_runs(), g.reference_only_runs());
    }
  }

  if (!rep.pass() && report_options.suggest) {
    auto s0 = Clock::now();
    v1::Suggestion* sug = rep.mutable_suggestion();
    sug->set_searched(true);
    if (report_options.on_samples_done) report_options.on_samples_done();
    if (!reference_outputs) {
      ASSIGN_OR_RETURN(reference_outputs, RunOutputs(reference, samples));
    }
    const SampleOutputs ref_out = *std::move(reference_outputs);
    reference.reset();  // the search builds need the memory
    ASSIGN_OR_RETURN(SampleOutputs cur_out, RunOutputs(engine, samples));
    OutputCheck before = Judge(cur_out, ref_out, report_options.tolerance);
    sug->set_output_max_abs_before(before.worst_max_abs);
    std::vector<Unit> units = Units(ranked, built);
    if (built.summary.strong_typing) {
      sug->set_note(
          "the model is authored in mixed precision and runs strongly typed: its precision is "
          "its Casts; change them in the model (or build with --typing weak)");
    } else if (units.empty()) {
      sug->set_note("no node below fp32 introduces any error: nothing to raise");
    } else {
      // The engine's latency now, so that the search builds need not keep it loaded (the
      // caller hands it over for that).
      ASSIGN_OR_RETURN(const double before_ms, MedianLatencyMs(engine, samples[0], 5));
      engine.reset();
      // Trial k: the first k units raised to fp32, built and judged on the samples.
      // The last passing trial, which is always the chosen one (each pass lowers `hi`); its
      // latency is measured while its engine is loaded, so no engine outlives its trial.
      int builds = 0;
      OutputCheck best_check;
      double best_latency_ms = 0;
      auto trial = [&](size_t k) -> absl::StatusOr<bool> {
        BuildOptions o = options;
        o.keep_reference = false;
        o.on_stage = nullptr;  // the report's progress is not a new build's
        for (auto& r : RulesFor(units, k, built)) o.rules.push_back(std::move(r));
        ++builds;
        if (logger) logger->info("report: search build {}: {} unit(s) raised to fp32", builds, k);
        absl::StatusOr<BuildResult> built_trial;
        if (built.imported) {
          o.in_memory = true;  // no blob to write and copy: only run
          built_trial =
              BuildEngineFromImport(*built.imported, built.summary.model_sha256, o, nullptr);
        } else if (path.empty()) {
          built_trial = BuildEngine(model_bytes, o, nullptr);
        } else {
          ASSIGN_OR_RETURN(std::string bytes, import::ReadFile(path, o.import.max_model_bytes));
          built_trial = BuildEngine(std::move(bytes), o, nullptr);
        }
        if (!built_trial.ok()) return built_trial.status();
        BuildResult b = *std::move(built_trial);
        std::shared_ptr<const plan::Engine> e = std::move(b.engine);
        if (!e) {
          ASSIGN_OR_RETURN(
              e, plan::LoadEngineFromBytes(std::make_shared<const std::string>(std::move(b.blob)),
                                           /*trusted=*/true));
        }
        ASSIGN_OR_RETURN(SampleOutputs out, RunOutputs(e, samples));
        OutputCheck c = Judge(out, ref_out, report_options.tolerance);
        if (c.pass) {
          best_check = c;
          ASSIGN_OR_RETURN(best_latency_ms, MedianLatencyMs(e, samples[0], 5));
        }
        return c.pass;
      };
      // Doubling, then bisection between the last failing and the first passing prefix.
      size_t lo = 0, hi = 0;
      for (size_t k = 1;; k = std::min(k * 2, units.size())) {
        if (builds >= report_options.max_search_builds) break;
        ASSIGN_OR_RETURN(bool ok, trial(k));
        if (ok) {
          hi = k;
          break;
        }
        lo = k;
        if (k == units.size()) break;
      }
      if (hi > 0) {
        while (hi - lo > 1 && builds < report_options.max_search_builds) {
          size_t mid = (lo + hi) / 2;
          ASSIGN_OR_RETURN(bool ok, trial(mid));
          if (ok) {
            hi = mid;
          } else {
            lo = mid;
          }
        }
        std::vector<std::string> rules = RulesFor(units, hi, built);
        std::string text =
            absl::StrCat("# Suggested by kiln: raises ", rules.size(), " ONNX node(s) in ", hi,
                         " unit(s) to fp32 so that every output passes (atol ", Sci(rep.atol()),
                         ", rtol ", Sci(rep.rtol()), ", ", samples.size(),
                         " sample(s)).\n# Worst output max_abs ", Sci(before.worst_max_abs), " -> ",
                         Sci(best_check.worst_max_abs), ".\n", BasePolicyText(options));
        for (size_t i = 0; i < hi; ++i) {
          absl::StrAppend(&text, "# ", units[i].label, "\n");
          for (int s : units[i].nodes) {
            absl::StrAppend(&text, RaiseRule(built, s), "\n");
            sug->add_nodes(built.nodes[s].node_name());
          }
        }
        sug->set_found(true);
        sug->set_output_max_abs_after(best_check.worst_max_abs);
        const double after_ms = best_latency_ms;
        sug->set_latency_ms_before(before_ms);
        sug->set_latency_ms_after(after_ms);
        absl::StrAppend(&text, "# Engine latency (median of 5 runs, sample 0): ",
                        absl::StrFormat("%.3f", before_ms), " ms -> ",
                        absl::StrFormat("%.3f", after_ms), " ms.\n");
        sug->set_policy_text(text);
      } else {
        sug->set_note(absl::StrCat(
            "raising the ", lo, " ranked unit(s) tried to fp32 does not make every output pass",
            builds >= report_options.max_search_builds ? " (search stopped at its build limit)"
                                                       : ""));
      }
      sug->set_builds(builds);
    }
    rep.set_search_ms(MsSince(s0));
  }
  rep.set_report_ms(reference_ms + MsSince(t0));
  return rep;
}

}  // namespace kiln::builder
