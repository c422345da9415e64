// The terminal rendering of the accuracy report: plain text, no colours, columns padded to the
// widest cell. Long ONNX names are shortened from the left, where they repeat the scope prefix.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/report/render.h"
#include "engine/report/render_util.h"

namespace kiln::report {
namespace {

constexpr size_t kMaxNameWidth = 60;

// The tail of a long name, which carries the distinguishing part of an ONNX scope path.
std::string Shorten(const std::string& name) {
  if (name.size() <= kMaxNameWidth) return name;
  return absl::StrCat("...", name.substr(name.size() - (kMaxNameWidth - 3)));
}

// Rows of cells printed as aligned columns, two spaces of indent and between columns; `right[i]`
// right-aligns column i. The last column is never padded (it may be long free text).
std::string FormatTable(const std::vector<std::vector<std::string>>& rows,
                        const std::vector<bool>& right) {
  std::vector<size_t> width(right.size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      const bool last = i + 1 == row.size();
      const int w = last && !right[i] ? 0 : static_cast<int>(width[i]);
      absl::StrAppend(&line, " ", i > 0 ? " " : "",
                      absl::StrFormat(right[i] ? "%*s" : "%-*s", w, row[i]));
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

void AppendVerdicts(const v1::AccuracyReport& r, std::string* out) {
  absl::StrAppend(out, "\nOutputs\n");
  if (r.outputs_size() == 0) {
    absl::StrAppend(out, "  (none compared)\n");
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"tensor", "max_abs", "max_rel", "cosine", "outside", "NaN/Inf", "verdict"}};
  for (const v1::OutputVerdict& o : r.outputs()) {
    const v1::ErrorStats& e = o.error();
    rows.push_back({Shorten(o.tensor()), FormatNumber(e.max_abs()), FormatNumber(e.max_rel()),
                    FormatCosine(e.cosine()), FormatPercent(e.fraction_outside()),
                    FormatNonFinite(e), o.pass() ? "pass" : "FAIL"});
  }
  absl::StrAppend(out, FormatTable(rows, {false, true, true, true, true, true, false}));
}

// The quantization form and, for a QDQ model, its quantization error per output (the model at
// fp32 against its float computation): apart from the verdicts, which judge the policy alone.
// Nothing for a report without the summary (`kiln compare`).
void AppendQuantization(const v1::AccuracyReport& r, std::string* out) {
  if (!r.has_quantization()) return;
  const v1::QuantizationSummary& q = r.quantization();
  absl::StrAppend(out, "\nQuantization: ", q.form().empty() ? "unknown" : q.form(), "\n");
  std::vector<std::string> counts;
  if (q.activation_pairs_bypassed() + q.weight_pairs_bypassed() > 0) {
    counts.push_back(
        absl::StrCat(q.activation_pairs_bypassed(), " activation Q->DQ pair(s)",
                     q.weight_pairs_bypassed() > 0
                         ? absl::StrCat(" and ", q.weight_pairs_bypassed(), " on float weights")
                         : "",
                     " bypassed in the float reference"));
  }
  if (q.weight_dequantize_kept() > 0) {
    counts.push_back(absl::StrCat(q.weight_dequantize_kept(), " quantized weight(s) kept"));
  }
  if (!counts.empty()) absl::StrAppend(out, "  ", absl::StrJoin(counts, "; "), "\n");
  if (q.integer_ops_size() > 0) {
    std::string ops;
    for (const v1::OpCount& c : q.integer_ops()) {
      absl::StrAppend(&ops, ops.empty() ? "" : ", ", c.op_type(), " x", c.count());
    }
    absl::StrAppend(out, "  integer ops: ", ops, "\n");
  }
  if (!q.note().empty()) absl::StrAppend(out, "  note: ", q.note(), "\n");
  if (!q.error_measured()) return;
  absl::StrAppend(out,
                  "  Quantization error per output (the model at fp32 against its float "
                  "computation; not part of the verdict):\n");
  std::vector<std::vector<std::string>> rows = {
      {"tensor", "max_abs", "max_rel", "cosine", "snr_db", "outside", "NaN/Inf"}};
  for (const v1::QuantizationError& o : q.outputs()) {
    const v1::ErrorStats& e = o.error();
    rows.push_back({Shorten(o.tensor()), FormatNumber(e.max_abs()), FormatNumber(e.max_rel()),
                    FormatCosine(e.cosine()), FormatNumber(e.snr_db()),
                    FormatPercent(e.fraction_outside()), FormatNonFinite(e)});
  }
  absl::StrAppend(out, FormatTable(rows, {false, true, true, true, true, true, false}));
}

void AppendOffenders(const v1::AccuracyReport& r, int max_rows, std::string* out) {
  const int total = r.worst_offenders_size();
  const int shown = std::clamp(max_rows, 0, total);
  if (total == 0) {
    absl::StrAppend(out, "\nWorst offenders: none\n");
    return;
  }
  absl::StrAppendFormat(out, "\nWorst offenders (%d of %d)\n", shown, total);
  std::vector<std::vector<std::string>> rows = {{"#", "node", "op", "precision", "why"}};
  for (int i = 0; i < shown; ++i) {
    const v1::Offender& o = r.worst_offenders(i);
    rows.push_back({absl::StrCat(i + 1), Shorten(o.node_name()), o.op_type(),
                    PrecisionLabel(o.effective_precision()), o.why()});
  }
  absl::StrAppend(out, FormatTable(rows, {true, false, false, false, false}));
  if (shown < total) absl::StrAppendFormat(out, "  ... %d more\n", total - shown);
}

// The If / Loop / Scan subgraphs: their runs in the engine and the reference, and the subgraph
// tensors with the largest accumulated error (at most `max_rows`). Nothing for a model without
// subgraphs.
void AppendSubgraphs(const v1::AccuracyReport& r, int max_rows, std::string* out) {
  if (r.subgraphs().runs_size() == 0) return;
  absl::StrAppendFormat(out, "\nSubgraphs (%d ran)\n", r.subgraphs().runs_size());
  std::vector<std::vector<std::string>> rows = {
      {"subgraph", "op", "engine runs", "reference runs", "not alike"}};
  for (const v1::SubgraphRuns& g : r.subgraphs().runs()) {
    std::string alike = "-";
    if (g.samples_differing() > 0) {
      alike = absl::StrFormat("%s in %d sample(s): %d engine-only, %d reference-only run(s)",
                              g.op_type() == "If" ? "BRANCH DIFFERS" : "ITERATIONS DIFFER",
                              g.samples_differing(), g.engine_only_runs(), g.reference_only_runs());
    }
    rows.push_back({Shorten(g.subgraph()), g.op_type(), absl::StrCat(g.engine_runs()),
                    absl::StrCat(g.reference_runs()), alike});
  }
  absl::StrAppend(out, FormatTable(rows, {false, false, true, true, false}));
  std::vector<int> inside;
  for (int i = 0; i < r.tensors_size(); ++i) {
    if (r.tensors(i).has_in_subgraph()) inside.push_back(i);
  }
  if (inside.empty()) return;
  // Worst first: non-finite errors, then max_abs (NaN counts as worst).
  auto key = [&](int i) {
    const v1::ErrorStats& e = r.tensors(i).accumulated();
    const double m = std::isnan(e.max_abs()) ? INFINITY : e.max_abs();
    return std::make_pair(e.nan_count() + e.inf_count() + e.nonfinite_mismatch_count(), m);
  };
  std::stable_sort(inside.begin(), inside.end(), [&](int a, int b) { return key(a) > key(b); });
  const int total = static_cast<int>(inside.size());
  const int shown = std::clamp(max_rows, 0, total);
  absl::StrAppendFormat(out,
                        "\nTensors inside subgraphs (%d of %d, largest accumulated error first; "
                        "introduced error not measured)\n",
                        shown, total);
  rows = {{"node", "op", "precision", "occurrences", "max_abs", "max_rel", "outside", "NaN/Inf"}};
  for (int j = 0; j < shown; ++j) {
    const v1::TensorReport& t = r.tensors(inside[j]);
    const v1::ErrorStats& e = t.accumulated();
    const v1::SubgraphTensor& in = t.in_subgraph();
    std::string occurrences = absl::StrCat(in.occurrences());
    if (in.occurrences_not_compared() > 0) {
      absl::StrAppend(&occurrences, " (+", in.occurrences_not_compared(), " not compared)");
    }
    rows.push_back({Shorten(t.node_name()), t.op_type(), PrecisionLabel(t.effective_precision()),
                    occurrences, FormatNumber(e.max_abs()), FormatNumber(e.max_rel()),
                    FormatPercent(e.fraction_outside()), FormatNonFinite(e)});
  }
  absl::StrAppend(out, FormatTable(rows, {false, false, false, true, true, true, true, true}));
  if (shown < total) absl::StrAppendFormat(out, "  ... %d more\n", total - shown);
}

void AppendSuggestion(const v1::AccuracyReport& r, std::string* out) {
  const v1::Suggestion& s = r.suggestion();
  if (!s.searched()) return;
  absl::StrAppendFormat(out, "\nSuggestion: %s (%d builds)\n",
                        s.found() ? "passing policy found and verified" : "no passing policy found",
                        s.builds());
  if (s.found()) {  // before/after figures exist only for a verified suggestion
    absl::StrAppendFormat(out, "  worst output max_abs %s -> %s\n",
                          FormatNumber(s.output_max_abs_before()),
                          FormatNumber(s.output_max_abs_after()));
    absl::StrAppendFormat(out, "  latency %s ms -> %s ms (%s%s ms)\n",
                          FormatNumber(s.latency_ms_before()), FormatNumber(s.latency_ms_after()),
                          s.latency_ms_after() >= s.latency_ms_before() ? "+" : "",
                          FormatNumber(s.latency_ms_after() - s.latency_ms_before()));
  } else {
    absl::StrAppendFormat(out, "  worst output max_abs %s\n",
                          FormatNumber(s.output_max_abs_before()));
  }
  if (!s.note().empty()) absl::StrAppend(out, "  note: ", s.note(), "\n");
  if (!s.policy_text().empty()) {
    absl::StrAppend(out, "  policy:\n");
    size_t start = 0;
    const std::string& text = s.policy_text();
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      absl::StrAppend(out, "    ", text.substr(start, end - start), "\n");
      start = end + 1;
    }
  }
}

}  // namespace

std::string RenderTable(const v1::AccuracyReport& report, int max_rows) {
  int failed = 0;
  for (const v1::OutputVerdict& o : report.outputs()) failed += o.pass() ? 0 : 1;
  std::string out = absl::StrFormat(
      "%s  %s: %d of %d outputs fail  samples %d%s  atol %s rtol %s\n",
      report.pass() ? "PASS" : "FAIL", report.model_name().empty() ? "model" : report.model_name(),
      failed, report.outputs_size(), report.samples(),
      report.sample_source().empty() ? "" : absl::StrCat(" (", report.sample_source(), ")"),
      FormatNumber(report.atol()), FormatNumber(report.rtol()));
  AppendVerdicts(report, &out);
  AppendQuantization(report, &out);
  AppendOffenders(report, max_rows, &out);
  AppendSubgraphs(report, max_rows, &out);
  AppendSuggestion(report, &out);
  return out;
}

}  // namespace kiln::report
