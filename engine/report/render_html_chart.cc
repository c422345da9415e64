// The per-layer error chart of the HTML report: one inline <svg>, no script, no external
// references. Every coordinate is computed from finite, clamped values so that NaN or Inf in the
// report can never produce an invalid attribute.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/report/render_util.h"

namespace kiln::report {
namespace {

// Geometry of the chart in viewBox units; the page scales the SVG to its width.
constexpr double kWidth = 1200;
constexpr double kHeight = 380;
constexpr double kLeft = 64;
constexpr double kRight = 1136;  // the atol label sits right of the plot
constexpr double kTop = 34;      // plot top; the non-finite markers sit in the strip above
constexpr double kBottom = 326;  // plot baseline
constexpr double kMarkerY = 16;  // centre of the non-finite markers
constexpr int kMaxDecades = 16;  // errors below max/1e16 are drawn on the baseline

// One chart column: one tensor, or a run of consecutive tensors when the report is larger than
// the column budget.
struct Column {
  int first = 0;
  int last = 0;          // inclusive
  int worst_acc = -1;    // tensor with the largest finite accumulated max_abs
  int worst_intro = -1;  // tensor with the largest finite introduced max_abs
  double acc = 0;        // those maxima (0 when no finite value)
  double intro = 0;
  int non_finite = 0;  // tensors in the column with HasNonFinite
};

bool Positive(double v) { return std::isfinite(v) && v > 0; }

std::vector<Column> BuildColumns(const v1::AccuracyReport& report) {
  const int n = report.tensors_size();
  std::vector<Column> columns;
  if (n == 0) return columns;
  const int per_column = (n + kMaxChartColumns - 1) / kMaxChartColumns;
  for (int first = 0; first < n; first += per_column) {
    Column c;
    c.first = first;
    c.last = std::min(n, first + per_column) - 1;
    for (int i = c.first; i <= c.last; ++i) {
      const v1::TensorReport& t = report.tensors(i);
      const double acc = t.accumulated().max_abs();
      const double intro = t.introduced().max_abs();
      if (std::isfinite(acc) && (c.worst_acc < 0 || acc > c.acc)) {
        c.worst_acc = i;
        c.acc = acc;
      }
      if (std::isfinite(intro) && (c.worst_intro < 0 || intro > c.intro)) {
        c.worst_intro = i;
        c.intro = intro;
      }
      if (HasNonFinite(t)) ++c.non_finite;
    }
    columns.push_back(c);
  }
  return columns;
}

// The log10 range of the y axis, in whole decades.
struct YRange {
  int lo = -8;
  int hi = 0;
};

YRange ComputeYRange(const v1::AccuracyReport& report) {
  double min_v = 0, max_v = 0;
  bool any = false;
  auto take = [&](double v) {
    if (!Positive(v)) return;
    if (!any || v < min_v) min_v = v;
    if (!any || v > max_v) max_v = v;
    any = true;
  };
  for (const v1::TensorReport& t : report.tensors()) {
    take(t.accumulated().max_abs());
    take(t.introduced().max_abs());
  }
  take(report.atol());
  YRange r;
  if (!any) return r;
  r.lo = static_cast<int>(std::floor(std::log10(min_v)));
  r.hi = static_cast<int>(std::ceil(std::log10(max_v)));
  if (r.hi <= r.lo) r.hi = r.lo + 1;
  r.lo = std::max(r.lo, r.hi - kMaxDecades);
  return r;
}

// The y coordinate of an error value; zero, negative and non-finite values sit on the baseline.
double YOf(double v, const YRange& r) {
  if (!Positive(v)) return kBottom;
  const double lv = std::clamp(std::log10(v), static_cast<double>(r.lo), static_cast<double>(r.hi));
  return kBottom - (lv - r.lo) / (r.hi - r.lo) * (kBottom - kTop);
}

std::string DecadeLabel(int d) {
  if (d == 0) return "1";
  if (d == 1) return "10";
  return absl::StrFormat("1e%d", d);
}

// 1, 2 or 5 times a power of ten, at least `v`.
int NiceStep(double v) {
  int step = 1;
  while (true) {
    for (int m : {1, 2, 5}) {
      if (step * m >= v) return step * m;
    }
    step *= 10;
  }
}

std::string DescribeTensor(const v1::AccuracyReport& report, int i) {
  const v1::TensorReport& t = report.tensors(i);
  std::string s =
      absl::StrFormat("#%d %s\nnode %s (%s)\nprecision %s", i, t.tensor(), t.node_name(),
                      t.op_type(), PrecisionLabel(t.effective_precision()));
  if (!t.kernel_id().empty()) absl::StrAppend(&s, ", kernel ", t.kernel_id(), " ", t.kernel_op());
  if (t.inside_fused_kernel()) absl::StrAppend(&s, " (inside fused kernel)");
  if (t.has_in_subgraph()) {
    absl::StrAppend(&s, "\nin subgraph ", t.in_subgraph().subgraph(), ", ",
                    t.in_subgraph().occurrences(), " occurrence(s)");
  }
  absl::StrAppend(&s, "\naccumulated max_abs ", FormatNumber(t.accumulated().max_abs()),
                  ", introduced max_abs ",
                  t.in_subgraph().introduced_not_measured()
                      ? std::string("not measured")
                      : FormatNumber(t.introduced().max_abs()));
  const int64_t nan = t.accumulated().nan_count(), inf = t.accumulated().inf_count();
  if (nan > 0 || inf > 0) absl::StrAppend(&s, absl::StrFormat("\nNaN %d, Inf %d", nan, inf));
  const v1::ErrorStats& acc = t.accumulated();
  if (acc.ref_nan_count() > 0 || acc.ref_inf_count() > 0) {
    absl::StrAppend(
        &s, absl::StrFormat("\nreference NaN %d, Inf %d (%d not reproduced)", acc.ref_nan_count(),
                            acc.ref_inf_count(), acc.nonfinite_mismatch_count()));
  }
  if (t.is_graph_output()) absl::StrAppend(&s, "\ngraph output");
  return s;
}

std::string ColumnTitle(const v1::AccuracyReport& report, const Column& c) {
  if (c.first == c.last) return DescribeTensor(report, c.first);
  std::string s =
      absl::StrFormat("tensors #%d-#%d (%d, maximum shown)", c.first, c.last, c.last - c.first + 1);
  if (c.worst_acc >= 0) {
    absl::StrAppend(&s, "\n\nworst accumulated:\n", DescribeTensor(report, c.worst_acc));
  }
  if (c.worst_intro >= 0 && c.worst_intro != c.worst_acc) {
    absl::StrAppend(&s, "\n\nworst introduced:\n", DescribeTensor(report, c.worst_intro));
  }
  if (c.non_finite > 0) absl::StrAppend(&s, "\n\nnon-finite values in ", c.non_finite, " tensors");
  return s;
}

void AppendAxes(const YRange& r, int n, int per_column, int columns, double step,
                std::string* out) {
  const int decades = r.hi - r.lo;
  const int every = decades > 12 ? 2 : 1;
  for (int d = r.lo; d <= r.hi; d += every) {
    const double y = YOf(std::pow(10.0, d), r);
    absl::StrAppendFormat(out,
                          "<line class=\"grid\" x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\"/>"
                          "<text class=\"ylab\" x=\"%.1f\" y=\"%.2f\">%s</text>\n",
                          kLeft, y, kRight, y, kLeft - 6, y + 4, DecadeLabel(d));
  }
  absl::StrAppendFormat(out,
                        "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                        "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n",
                        kLeft, kTop, kLeft, kBottom, kLeft, kBottom, kRight, kBottom);
  // About ten tensor-index ticks, at round indices.
  const int tick = NiceStep(std::max(1.0, n / 10.0));
  for (int t = 0; t < n; t += tick) {
    const double x = kLeft + (t / per_column + 0.5) * step;
    absl::StrAppendFormat(out,
                          "<line class=\"axis\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\"/>"
                          "<text class=\"xlab\" x=\"%.2f\" y=\"%.1f\">%d</text>\n",
                          x, kBottom, x, kBottom + 4, x, kBottom + 16, t);
  }
  std::string x_title = absl::StrFormat("tensors in topological order (%d)", n);
  if (per_column > 1) {
    absl::StrAppendFormat(&x_title, ", %d columns of up to %d tensors (maximum shown)", columns,
                          per_column);
  }
  absl::StrAppendFormat(out,
                        "<text class=\"xtitle\" x=\"%.1f\" y=\"%.1f\">%s</text>\n"
                        "<text class=\"ytitle\" transform=\"translate(14 %.1f) rotate(-90)\">"
                        "max |x &#8722; ref| (log scale)</text>\n",
                        (kLeft + kRight) / 2, kHeight - 8, HtmlEscape(x_title),
                        (kTop + kBottom) / 2);
}

}  // namespace

std::string RenderErrorChartSvg(const v1::AccuracyReport& report) {
  std::string out = absl::StrFormat(
      "<svg id=\"chart\" viewBox=\"0 0 %.0f %.0f\" "
      "role=\"img\" aria-label=\"per-layer error chart\">\n",
      kWidth, kHeight);
  const std::vector<Column> columns = BuildColumns(report);
  if (columns.empty()) {
    absl::StrAppendFormat(&out, "<text class=\"empty\" x=\"%.1f\" y=\"%.1f\">no tensors</text>\n",
                          kWidth / 2, kHeight / 2);
    absl::StrAppend(&out, "</svg>\n");
    return out;
  }
  const YRange range = ComputeYRange(report);
  const int n = report.tensors_size();
  const int per_column = columns.front().last - columns.front().first + 1;
  const double step = (kRight - kLeft) / columns.size();
  const double bar_w = std::clamp(step * 0.8, 0.5, 28.0);
  const double dot_r = std::clamp(step * 0.3, 1.2, 4.0);
  AppendAxes(range, n, per_column, static_cast<int>(columns.size()), step, &out);

  if (Positive(report.atol())) {
    const double y = YOf(report.atol(), range);
    absl::StrAppendFormat(&out,
                          "<line class=\"atol\" x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\"/>"
                          "<text class=\"atollab\" x=\"%.1f\" y=\"%.2f\">atol %s</text>\n",
                          kLeft, y, kRight, y, kRight + 4, y + 4,
                          HtmlEscape(FormatNumber(report.atol())));
  }

  for (size_t ci = 0; ci < columns.size(); ++ci) {
    const Column& c = columns[ci];
    const double cx = kLeft + (ci + 0.5) * step;
    const int rep = c.worst_acc >= 0 ? c.worst_acc : c.first;
    const std::string label = PrecisionLabel(report.tensors(rep).effective_precision());
    // Each column links to the row of its worst tensor; <title> is the hover tooltip.
    absl::StrAppendFormat(&out, "<a href=\"#t%d\"><g class=\"col\"><title>%s</title>", rep,
                          HtmlEscape(ColumnTitle(report, c)));
    absl::StrAppendFormat(&out,
                          "<rect class=\"hit\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
                          "height=\"%.1f\"/>",
                          cx - step / 2, kMarkerY - 10, step, kBottom - kMarkerY + 10);
    if (c.non_finite > 0) {
      absl::StrAppendFormat(&out,
                            "<rect class=\"nfband\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
                            "height=\"%.1f\"/>",
                            cx - bar_w / 2, kTop, bar_w, kBottom - kTop);
    }
    // The bar always keeps a 2-unit stub so that its precision colour stays visible.
    const double y_acc = std::min(YOf(c.acc, range), kBottom - 2);
    absl::StrAppendFormat(&out,
                          "<rect class=\"bar\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                          "height=\"%.2f\" fill=\"%s\"/>",
                          cx - bar_w / 2, y_acc, bar_w, kBottom - y_acc, PrecisionColor(label));
    if (Positive(c.intro)) {
      absl::StrAppendFormat(&out, "<circle class=\"intro\" cx=\"%.2f\" cy=\"%.2f\" r=\"%.2f\"/>",
                            cx, YOf(c.intro, range), dot_r);
    }
    if (c.non_finite > 0) {
      const double h = std::clamp(step * 0.45, 3.0, 7.0);
      absl::StrAppendFormat(&out, "<path class=\"nf\" d=\"M%.2f %.2fL%.2f %.2fL%.2f %.2fZ\"/>",
                            cx - h, kMarkerY - h, cx + h, kMarkerY - h, cx, kMarkerY + h);
    }
    absl::StrAppend(&out, "</g></a>\n");
  }
  absl::StrAppend(&out, "</svg>\n");
  return out;
}

std::string ChartCss() {
  return absl::StrFormat(
      "#chart{width:100%%;height:auto;display:block;font:11px system-ui,sans-serif}\n"
      "#chart .grid{stroke:#e3e3e3;stroke-width:1}\n"
      "#chart .axis{stroke:#555;stroke-width:1}\n"
      "#chart .ylab{text-anchor:end;fill:#444}\n"
      "#chart .xlab{text-anchor:middle;fill:#444}\n"
      "#chart .xtitle,#chart .ytitle{text-anchor:middle;fill:#222;font-size:12px}\n"
      "#chart .empty{text-anchor:middle;fill:#888;font-size:16px}\n"
      "#chart .atol{stroke:#333;stroke-width:1;stroke-dasharray:6 4}\n"
      "#chart .atollab{text-anchor:start;fill:#333}\n"
      "#chart .hit{fill:transparent}\n"
      "#chart .col:hover .hit{fill:rgba(0,0,0,0.06)}\n"
      "#chart .nfband{fill:%s;fill-opacity:0.14}\n"
      "#chart .intro{fill:#222;stroke:#fff;stroke-width:0.6}\n"
      "#chart .nf{fill:%s}\n",
      kNonFiniteColor, kNonFiniteColor);
}

}  // namespace kiln::report
