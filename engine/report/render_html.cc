// The self-contained HTML page of the accuracy report (DESIGN.md §7). No network: the CSS, the
// chart (inline SVG, render_html_chart.cc) and the small filter script are inline. Every string
// from the report goes through HtmlEscape; every number through FormatNumber.
#include <cmath>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/report/render.h"
#include "engine/report/render_util.h"

namespace kiln::report {
namespace {

constexpr char kPageCss[] = R"css(
*{box-sizing:border-box}
body{margin:0;padding:20px 28px;font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;
  color:#1d1d1f;background:#fff}
h1{font-size:22px;margin:0 0 10px}
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
code,pre,.mono{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace;font-size:12.5px}
pre{background:#f6f8fa;border:1px solid #e1e4e8;border-radius:4px;padding:8px 10px;
  overflow:auto;margin:6px 0}
.badge{display:inline-block;padding:2px 10px;border-radius:4px;font-weight:700;color:#fff;
  font-size:14px;vertical-align:middle}
.badge.pass{background:#2e7d32}.badge.fail{background:#c62828}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:3px 14px;margin:0}
dl.meta dt{color:#555}dl.meta dd{margin:0;word-break:break-all}
dl.meta pre{margin:0}
table.data{border-collapse:collapse;font-size:12.5px}
table.data th,table.data td{border:1px solid #e0e0e0;padding:3px 7px;text-align:left;
  vertical-align:top}
table.data th{background:#f3f4f6;position:sticky;top:0;z-index:1;white-space:nowrap}
table.data thead tr.group th{position:static;text-align:center}
table.data td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap;
  font-family:ui-monospace,Menlo,Consolas,monospace}
table.data td.name{min-width:12em;max-width:28em;overflow-wrap:anywhere}
table.data tbody tr:hover{background:#f5f9ff}
table.data tbody tr:target{background:#fff7cc}
td.nf{color:#c62828;font-weight:700;background:#fdecea}
td.warn{background:#fff4e0}
td.ok{color:#2e7d32;font-weight:700}td.bad{color:#c62828;font-weight:700}
.flag{display:inline-block;margin-left:4px;padding:0 4px;border-radius:3px;background:#c62828;
  color:#fff;font-size:11px;font-weight:700}
.out{display:inline-block;margin-left:4px;padding:0 4px;border-radius:3px;background:#455a64;
  color:#fff;font-size:11px}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px;
  vertical-align:baseline}
.legend{display:flex;flex-wrap:wrap;gap:16px;margin:6px 0 2px;font-size:13px}
.legend span{white-space:nowrap}
.dot{display:inline-block;width:9px;height:9px;border-radius:50%;background:#222;
  margin-right:5px}
.tri{display:inline-block;width:0;height:0;border-left:6px solid transparent;
  border-right:6px solid transparent;border-top:10px solid #d62728;margin-right:5px}
.scroll{overflow:auto;max-height:75vh;border:1px solid #e0e0e0}
.scroll table.data{border:0}
.controls{display:flex;gap:16px;align-items:center;margin:6px 0}
.controls input[type=search]{width:320px;padding:4px 6px;font-size:13px}
.muted{color:#666}
.figures td{padding:2px 14px 2px 0}
)css";

// Filters the per-tensor table by text and by "outside tolerance or non-finite". Guarded so that
// a page without the table (or an old browser) raises nothing.
constexpr char kPageScript[] = R"js(
(function () {
  var box = document.getElementById('filter');
  var bad = document.getElementById('onlybad');
  var body = document.getElementById('tensor-rows');
  var shown = document.getElementById('shown');
  if (!box || !bad || !body) return;
  var rows = body.rows;
  var apply = function () {
    var q = box.value.toLowerCase();
    var n = 0;
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i];
      var ok = (!bad.checked || r.getAttribute('data-bad') === '1') &&
               (q === '' || r.textContent.toLowerCase().indexOf(q) >= 0);
      r.style.display = ok ? '' : 'none';
      if (ok) n++;
    }
    if (shown) shown.textContent = n + ' of ' + rows.length + ' shown';
  };
  box.addEventListener('input', apply);
  bad.addEventListener('change', apply);
  apply();
})();
)js";

std::string Esc(absl::string_view s) { return HtmlEscape(s); }

// A right-aligned number cell; non-finite values are flagged red.
std::string NumCell(double v, const std::string& text) {
  return absl::StrCat("<td class=\"n", std::isfinite(v) ? "" : " nf", "\">", Esc(text), "</td>");
}

std::string NumCell(double v) { return NumCell(v, FormatNumber(v)); }

std::string OutsideCell(double fraction) {
  const char* cls = !std::isfinite(fraction) ? " nf" : (fraction > 0 ? " warn" : "");
  return absl::StrCat("<td class=\"n", cls, "\">", Esc(FormatPercent(fraction)), "</td>");
}

std::string NanInfCell(const v1::ErrorStats& e) {
  const bool bad = e.nan_count() > 0 || e.inf_count() > 0 || e.nonfinite_mismatch_count() > 0;
  return absl::StrCat("<td class=\"n", bad ? " nf" : "", "\">", Esc(FormatNonFinite(e, " / ")),
                      "</td>");
}

std::string PrecisionCell(absl::string_view assigned, absl::string_view effective) {
  const std::string label = PrecisionLabel(effective);
  std::string cell = absl::StrFormat("<td><span class=\"sw\" style=\"background:%s\"></span>",
                                     PrecisionColor(label));
  if (assigned != effective) absl::StrAppend(&cell, Esc(PrecisionLabel(assigned)), " &#8594; ");
  absl::StrAppend(&cell, Esc(label), "</td>");
  return cell;
}

void AppendHeader(const v1::AccuracyReport& r, std::string* out) {
  absl::StrAppend(out, "<h1>Accuracy report: ", Esc(r.model_name()), " <span class=\"badge ",
                  r.pass() ? "pass\">PASS" : "fail\">FAIL", "</span></h1>\n<dl class=\"meta\">\n");
  auto row = [out](absl::string_view key, const std::string& html_value) {
    absl::StrAppend(out, "<dt>", key, "</dt><dd>", html_value, "</dd>\n");
  };
  row("model", Esc(r.model_name()));
  row("sha256", absl::StrCat("<code>", Esc(r.model_sha256()), "</code>"));
  row("policy", absl::StrCat("<pre>", Esc(r.policy()), "</pre>"));
  row("samples", absl::StrCat(r.samples(), r.sample_source().empty() ? "" : " &#8212; ",
                              Esc(r.sample_source())));
  row("tolerance",
      absl::StrCat("atol ", Esc(FormatNumber(r.atol())), ", rtol ", Esc(FormatNumber(r.rtol()))));
  row("arithmetic", Esc(r.arithmetic()));
  int failed = 0;
  for (const v1::OutputVerdict& o : r.outputs()) failed += o.pass() ? 0 : 1;
  row("verdict",
      absl::StrFormat("%s: %d of %d outputs fail, %d tensors compared", r.pass() ? "PASS" : "FAIL",
                      failed, r.outputs_size(), r.tensors_size()));
  absl::StrAppend(out, "</dl>\n");
  if (r.notes_size() > 0) {
    absl::StrAppend(out, "<h2>Notes</h2>\n<ul>\n");
    for (const std::string& note : r.notes()) absl::StrAppend(out, "<li>", Esc(note), "</li>\n");
    absl::StrAppend(out, "</ul>\n");
  }
}

void AppendVerdicts(const v1::AccuracyReport& r, std::string* out) {
  absl::StrAppend(out, "<h2>Outputs</h2>\n");
  if (r.outputs_size() == 0) {
    absl::StrAppend(out, "<p class=\"muted\">No graph outputs compared.</p>\n");
    return;
  }
  absl::StrAppend(out,
                  "<table class=\"data\" id=\"verdicts\"><thead><tr><th>output</th>"
                  "<th>verdict</th><th>max_abs</th><th>mean_abs</th><th>max_rel</th>"
                  "<th>cosine</th><th>snr_db</th><th>NaN / Inf</th><th>outside</th>"
                  "<th>elements</th></tr></thead><tbody>\n");
  for (const v1::OutputVerdict& o : r.outputs()) {
    const v1::ErrorStats& e = o.error();
    absl::StrAppend(out, "<tr><td class=\"name\">", Esc(o.tensor()), "</td>",
                    o.pass() ? "<td class=\"ok\">pass</td>" : "<td class=\"bad\">FAIL</td>",
                    NumCell(e.max_abs()), NumCell(e.mean_abs()), NumCell(e.max_rel()),
                    NumCell(e.cosine(), FormatCosine(e.cosine())), NumCell(e.snr_db()),
                    NanInfCell(e), OutsideCell(e.fraction_outside()));
    absl::StrAppendFormat(out, "<td class=\"n\">%d</td></tr>\n", e.elements());
  }
  absl::StrAppend(out, "</tbody></table>\n");
}

// The quantization form and, for a QDQ model, the quantization error per output; nothing for a
// report without the summary (`kiln compare`).
void AppendQuantization(const v1::AccuracyReport& r, std::string* out) {
  if (!r.has_quantization()) return;
  const v1::QuantizationSummary& q = r.quantization();
  absl::StrAppend(out, "<h2>Quantization</h2>\n<dl class=\"meta\" id=\"quantization\">\n");
  auto row = [out](absl::string_view key, const std::string& html_value) {
    absl::StrAppend(out, "<dt>", key, "</dt><dd>", html_value, "</dd>\n");
  };
  row("form", absl::StrCat("<code>", Esc(q.form().empty() ? "unknown" : q.form()), "</code>"));
  if (q.activation_pairs_bypassed() + q.weight_pairs_bypassed() > 0) {
    row("bypassed", absl::StrFormat("%d activation Q&#8594;DQ pair(s), %d on float weights",
                                    q.activation_pairs_bypassed(), q.weight_pairs_bypassed()));
  }
  if (q.weight_dequantize_kept() > 0) {
    row("quantized weights", absl::StrFormat("%d kept as stored", q.weight_dequantize_kept()));
  }
  if (q.integer_ops_size() > 0) {
    std::string ops;
    for (const v1::OpCount& c : q.integer_ops()) {
      absl::StrAppend(&ops, ops.empty() ? "" : ", ", Esc(c.op_type()), " &#215;", c.count());
    }
    row("integer ops", ops);
  }
  if (!q.note().empty()) row("note", Esc(q.note()));
  absl::StrAppend(out, "</dl>\n");
  if (!q.error_measured()) return;
  absl::StrAppend(out,
                  "<p class=\"muted\">Quantization error: the model at fp32 (the reference) "
                  "against its float computation (the float reference), ",
                  Esc(FormatNumber(q.float_reference_ms())),
                  " ms. Not part of the verdicts, which judge the policy.</p>\n"
                  "<table class=\"data\" id=\"quantization-error\"><thead><tr><th>output</th>"
                  "<th>max_abs</th><th>mean_abs</th><th>max_rel</th><th>cosine</th>"
                  "<th>snr_db</th><th>NaN / Inf</th><th>outside</th><th>elements</th></tr>"
                  "</thead><tbody>\n");
  for (const v1::QuantizationError& o : q.outputs()) {
    const v1::ErrorStats& e = o.error();
    absl::StrAppend(out, "<tr><td class=\"name\">", Esc(o.tensor()), "</td>", NumCell(e.max_abs()),
                    NumCell(e.mean_abs()), NumCell(e.max_rel()),
                    NumCell(e.cosine(), FormatCosine(e.cosine())), NumCell(e.snr_db()),
                    NanInfCell(e), OutsideCell(e.fraction_outside()));
    absl::StrAppendFormat(out, "<td class=\"n\">%d</td></tr>\n", e.elements());
  }
  absl::StrAppend(out, "</tbody></table>\n");
}

// The If / Loop / Scan subgraphs and how their runs compared; nothing for a model without.
void AppendSubgraphs(const v1::AccuracyReport& r, std::string* out) {
  if (r.subgraphs().runs_size() == 0) return;
  absl::StrAppend(out,
                  "<h2>Subgraphs</h2>\n<p class=\"muted\">If branches, Loop and Scan bodies. "
                  "Their tensors are compared occurrence by occurrence (the engine's run of a "
                  "branch or an iteration against the reference's at the same place); runs one "
                  "side made and the other did not are compared nowhere. Introduced error is not "
                  "measured inside subgraphs.</p>\n<table class=\"data\" id=\"subgraphs\">"
                  "<thead><tr><th>subgraph</th><th>op</th><th>engine runs</th>"
                  "<th>reference runs</th><th>engine only</th><th>reference only</th>"
                  "<th>samples differing</th></tr></thead><tbody>\n");
  for (const v1::SubgraphRuns& g : r.subgraphs().runs()) {
    const bool differs = g.samples_differing() > 0;
    absl::StrAppendFormat(
        out,
        "<tr><td class=\"name\">%s</td><td>%s</td><td class=\"n\">%d</td>"
        "<td class=\"n\">%d</td><td class=\"n\">%d</td><td class=\"n\">%d"
        "</td><td class=\"n%s\">%d%s</td></tr>\n",
        Esc(g.subgraph()), Esc(g.op_type()), g.engine_runs(), g.reference_runs(),
        g.engine_only_runs(), g.reference_only_runs(), differs ? " bad" : "", g.samples_differing(),
        differs ? (g.op_type() == "If" ? " (branch differs)" : " (iterations differ)") : "");
  }
  absl::StrAppend(out, "</tbody></table>\n");
}

void AppendChart(const v1::AccuracyReport& r, std::string* out) {
  absl::StrAppend(out,
                  "<h2>Per-layer error</h2>\n<p class=\"muted\">Bars: accumulated max_abs (engine "
                  "end to end); dots: introduced max_abs (the node alone on fp32 reference "
                  "inputs). Hover a column for the tensor; click it to jump to its row.</p>\n"
                  "<div class=\"legend\">");
  for (const char* p : {"fp32", "fp16", "bf16", "none"}) {
    absl::StrAppendFormat(out, "<span><i class=\"sw\" style=\"background:%s\"></i>%s</span>",
                          PrecisionColor(p), p);
  }
  bool other = false;
  for (const v1::TensorReport& t : r.tensors()) {
    const std::string label = PrecisionLabel(t.effective_precision());
    other |= label != "fp32" && label != "fp16" && label != "bf16" && label != "none";
  }
  if (other) {
    absl::StrAppendFormat(out, "<span><i class=\"sw\" style=\"background:%s\"></i>other</span>",
                          PrecisionColor("other"));
  }
  absl::StrAppend(out,
                  "<span><i class=\"dot\"></i>introduced max_abs</span>"
                  "<span><i class=\"tri\"></i>NaN / Inf produced</span></div>\n",
                  RenderErrorChartSvg(r));
}

void AppendOffenders(const v1::AccuracyReport& r,
                     const absl::flat_hash_map<std::string, int>& row_of, std::string* out) {
  absl::StrAppend(out, "<h2>Worst offenders</h2>\n");
  if (r.worst_offenders_size() == 0) {
    absl::StrAppend(out, "<p class=\"muted\">No offenders.</p>\n");
    return;
  }
  absl::StrAppend(out,
                  "<table class=\"data\" id=\"offenders\"><thead><tr><th>#</th><th>tensor</th>"
                  "<th>node</th><th>op</th><th>precision</th><th>pattern</th><th>why</th>"
                  "</tr></thead><tbody>\n");
  int rank = 1;
  for (const v1::Offender& o : r.worst_offenders()) {
    std::string tensor = Esc(o.tensor());
    if (auto it = row_of.find(o.tensor()); it != row_of.end()) {
      tensor = absl::StrFormat("<a href=\"#t%d\">%s</a>", it->second, tensor);
    }
    absl::StrAppend(out, "<tr><td class=\"n\">", rank++, "</td><td class=\"name\">", tensor,
                    "</td><td class=\"name\">", Esc(o.node_name()), "</td><td>", Esc(o.op_type()),
                    "</td>", PrecisionCell(o.effective_precision(), o.effective_precision()),
                    "<td class=\"name\">", Esc(o.pattern()), "</td><td>", Esc(o.why()),
                    "</td></tr>\n");
  }
  absl::StrAppend(out, "</tbody></table>\n");
}

void AppendSuggestion(const v1::AccuracyReport& r, std::string* out) {
  const v1::Suggestion& s = r.suggestion();
  absl::StrAppend(out, "<h2>Suggested policy</h2>\n<div id=\"suggestion\">\n");
  if (!s.searched()) {
    absl::StrAppend(out, "<p class=\"muted\">No search ran",
                    r.pass() ? " (every output passes under this policy)" : "", ".</p>\n");
  } else {
    absl::StrAppendFormat(out, "<p>%s (%d builds).</p>\n",
                          s.found() ? "A passing policy was found and verified with a real build"
                                    : "No passing policy was found",
                          s.builds());
    if (!s.policy_text().empty()) {
      absl::StrAppend(out, "<pre class=\"policy\">", Esc(s.policy_text()), "</pre>\n");
    }
    const double cost = s.latency_ms_after() - s.latency_ms_before();
    std::string cost_text = absl::StrCat(cost >= 0 ? "+" : "", FormatNumber(cost), " ms");
    if (std::isfinite(s.latency_ms_before()) && s.latency_ms_before() > 0) {
      absl::StrAppend(&cost_text, " (", cost >= 0 ? "+" : "",
                      FormatNumber(100.0 * cost / s.latency_ms_before()), "%)");
    }
    if (!s.found()) {  // before/after figures exist only for a verified suggestion
      absl::StrAppend(out, "<table class=\"figures\"><tr><td>worst output max_abs</td>",
                      "<td class=\"mono\">", Esc(FormatNumber(s.output_max_abs_before())),
                      "</td></tr></table>\n");
    } else {
      absl::StrAppend(
          out, "<table class=\"figures\"><tr><td>worst output max_abs</td><td class=\"mono\">",
          Esc(FormatNumber(s.output_max_abs_before())), " &#8594; ",
          Esc(FormatNumber(s.output_max_abs_after())),
          "</td></tr>\n<tr><td>latency (median, sample 0)</td><td class=\"mono\">",
          Esc(FormatNumber(s.latency_ms_before())), " ms &#8594; ",
          Esc(FormatNumber(s.latency_ms_after())), " ms, cost ", Esc(cost_text),
          "</td></tr></table>\n");
    }
    if (s.nodes_size() > 0) {
      absl::StrAppendFormat(out, "<details><summary>%d nodes raised to fp32</summary><ul>\n",
                            s.nodes_size());
      for (const std::string& n : s.nodes())
        absl::StrAppend(out, "<li><code>", Esc(n), "</code></li>\n");
      absl::StrAppend(out, "</ul></details>\n");
    }
    if (!s.note().empty()) absl::StrAppend(out, "<p>", Esc(s.note()), "</p>\n");
  }
  absl::StrAppend(out, "</div>\n");
}

void AppendErrorCells(const v1::ErrorStats& e, std::string* out) {
  absl::StrAppend(out, NumCell(e.max_abs()), NumCell(e.max_rel()),
                  NumCell(e.cosine(), FormatCosine(e.cosine())), NumCell(e.snr_db()), NanInfCell(e),
                  OutsideCell(e.fraction_outside()));
}

void AppendTensorTable(const v1::AccuracyReport& r, std::string* out) {
  absl::StrAppend(out,
                  "<h2>All tensors</h2>\n<div class=\"controls\"><input type=\"search\" "
                  "id=\"filter\" placeholder=\"filter: tensor, node, op, kernel, rule...\">"
                  "<label><input type=\"checkbox\" id=\"onlybad\"> only outside tolerance or "
                  "non-finite</label><span id=\"shown\" class=\"muted\"></span></div>\n"
                  "<div class=\"scroll\"><table class=\"data\" id=\"tensors\"><thead>"
                  "<tr class=\"group\"><th colspan=\"10\"></th><th colspan=\"6\">accumulated"
                  "</th><th colspan=\"6\">introduced</th><th></th></tr>\n<tr><th>#</th>"
                  "<th>tensor</th><th>node</th><th>op</th><th>precision</th><th>kernel</th>"
                  "<th>fusion</th><th>rule</th><th>pattern</th><th>in fused</th>");
  for (int group = 0; group < 2; ++group) {
    absl::StrAppend(out,
                    "<th>max_abs</th><th>max_rel</th><th>cosine</th><th>snr_db</th>"
                    "<th>NaN / Inf</th><th>outside</th>");
  }
  absl::StrAppend(out, "<th>ref max|x|</th></tr></thead><tbody id=\"tensor-rows\">\n");
  for (int i = 0; i < r.tensors_size(); ++i) {
    const v1::TensorReport& t = r.tensors(i);
    const bool bad = HasNonFinite(t) || !(t.accumulated().fraction_outside() <= 0);
    absl::StrAppendFormat(out, "<tr id=\"t%d\" data-bad=\"%d\"><td class=\"n\">%d</td>", i,
                          bad ? 1 : 0, i);
    // A tensor inside a subgraph: which one, and over how many occurrences.
    std::string inside;
    if (t.has_in_subgraph()) {
      const v1::SubgraphTensor& in = t.in_subgraph();
      inside = absl::StrFormat(
          "<span class=\"out\" title=\"in subgraph %s: %d occurrence(s) compared, %d not\">"
          "&#215;%d</span>",
          Esc(in.subgraph()), in.occurrences(), in.occurrences_not_compared(), in.occurrences());
    }
    absl::StrAppend(
        out, "<td class=\"name\">", Esc(t.tensor()),
        t.is_graph_output() ? "<span class=\"out\">output</span>" : "", "</td><td class=\"name\">",
        Esc(t.node_name()), inside, "</td><td>", Esc(t.op_type()), "</td>",
        PrecisionCell(t.assigned_precision(), t.effective_precision()), "<td>", Esc(t.kernel_id()),
        t.kernel_op().empty() ? "" : " ", Esc(t.kernel_op()),
        // A device engine's node kept on the CPU says so, and why (hover).
        t.fallback_reason().empty()
            ? ""
            : absl::StrCat(" <span class=\"out\" title=\"", Esc(t.fallback_reason()),
                           "\">on the CPU</span>"),
        "</td><td>", Esc(t.fusion()), "</td><td>", Esc(t.rule()), "</td><td class=\"name\">",
        Esc(t.pattern()), "</td><td>", t.inside_fused_kernel() ? "yes" : "", "</td>");
    AppendErrorCells(t.accumulated(), out);
    if (t.in_subgraph().introduced_not_measured()) {
      absl::StrAppend(out, "<td colspan=\"6\" class=\"muted\">not measured</td>");
    } else {
      AppendErrorCells(t.introduced(), out);
    }
    const bool over = t.ref_exceeds_fp16() || !(t.ref_max_abs() <= 65504.0);
    absl::StrAppend(out, "<td class=\"n\">", Esc(FormatNumber(t.ref_max_abs())),
                    over ? "<span class=\"flag\" title=\"above the fp16 limit 65504\">"
                           "&gt;fp16</span>"
                         : "",
                    "</td></tr>\n");
  }
  absl::StrAppend(out, "</tbody></table></div>\n");
  if (r.tensors_size() == 0) absl::StrAppend(out, "<p class=\"muted\">No tensors compared.</p>\n");
}

}  // namespace

std::string RenderHtml(const v1::AccuracyReport& report) {
  absl::flat_hash_map<std::string, int> row_of;
  for (int i = 0; i < report.tensors_size(); ++i) row_of.emplace(report.tensors(i).tensor(), i);

  std::string out;
  out.reserve(4096 + 2048 * static_cast<size_t>(report.tensors_size()));
  absl::StrAppend(&out,
                  "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                  "<title>Kiln accuracy report: ",
                  Esc(report.model_name()), "</title>\n<style>", kPageCss, ChartCss(),
                  "</style>\n</head>\n<body>\n");
  AppendHeader(report, &out);
  AppendVerdicts(report, &out);
  AppendQuantization(report, &out);
  AppendSubgraphs(report, &out);
  AppendChart(report, &out);
  AppendOffenders(report, row_of, &out);
  AppendSuggestion(report, &out);
  AppendTensorTable(report, &out);
  absl::StrAppendFormat(&out, "<p class=\"muted\">Report %s ms, search %s ms.</p>\n",
                        FormatNumber(report.report_ms()), FormatNumber(report.search_ms()));
  absl::StrAppend(&out, "<script>", kPageScript, "</script>\n</body>\n</html>\n");
  return out;
}

}  // namespace kiln::report
