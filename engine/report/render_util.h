// Helpers shared by the HTML and terminal renderers of the accuracy report (render_html.cc,
// render_html_chart.cc, render_text.cc). Internal to engine/report: not part of the public API.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "kiln/v1/report.pb.h"

namespace kiln::report {

/// `text` with & < > " ' replaced by character references: safe in HTML text, in attribute
/// values (quoted) and in inline SVG.
std::string HtmlEscape(absl::string_view text);

/// A double as "%.3g", with non-finite values spelled "inf", "-inf" and "nan" (never "-nan").
std::string FormatNumber(double value);

/// A cosine similarity as "%.6g" (non-finite as FormatNumber): at three digits every cosine
/// above 0.9995 would read "1", hiding the difference between 0.9999 and 0.999999.
std::string FormatCosine(double cosine);

/// A fraction in [0, 1] as a percentage with three significant digits ("12.5%"); non-finite as
/// FormatNumber does.
std::string FormatPercent(double fraction);

/// True when the tensor's engine output has non-finite values the reference does not have, or
/// misses some the reference has, or its accumulated or introduced max_abs is itself non-finite.
bool HasNonFinite(const v1::TensorReport& tensor);

/// The NaN/Inf cell of an ErrorStats: the engine's new NaN/Inf ("0/3"), then, when the
/// reference itself holds NaN/Inf, its counts and how many of them the engine did not
/// reproduce ("0/0 ref 2/1, 1 differ"); `slash` separates each NaN count from its Inf count.
std::string FormatNonFinite(const v1::ErrorStats& e, absl::string_view slash = "/");

/// The display name of an effective precision: "fp32", "fp16", "bf16", "none" for integer/bool
/// computation (empty string), or the string itself for anything else.
std::string PrecisionLabel(absl::string_view precision);

/// The chart colour ("#rrggbb") of a precision label from PrecisionLabel.
const char* PrecisionColor(absl::string_view label);

/// The per-layer error chart as an inline <svg> element (no external references): x = tensors
/// in report order, y = log10 of accumulated max_abs (bars coloured by effective precision) and
/// of introduced max_abs (points); non-finite tensors marked in red; a <title> tooltip per
/// column. At most kMaxChartColumns columns: larger reports are aggregated (max per column).
std::string RenderErrorChartSvg(const v1::AccuracyReport& report);

/// The CSS rules of the chart, for the page's <style> element.
std::string ChartCss();

/// Colour of the non-finite markers, in the chart and its legend.
inline constexpr char kNonFiniteColor[] = "#d62728";

/// Column budget of the chart; keeps the SVG size bounded for reports of thousands of tensors.
inline constexpr int kMaxChartColumns = 600;

}  // namespace kiln::report
