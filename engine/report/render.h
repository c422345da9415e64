// Renderers of the accuracy report (DESIGN.md §7): JSON (the proto3 JSON mapping of
// kiln.v1.AccuracyReport), a self-contained HTML page, and a terminal table.
#pragma once

#include <string>

#include "kiln/v1/report.pb.h"

namespace kiln::report {

/// The report as JSON (proto3 JSON mapping, field names lowerCamelCase, indented).
std::string RenderJson(const v1::AccuracyReport& report);

/// A self-contained HTML page (no network: inline CSS, SVG and JS): summary and verdicts, a
/// per-layer error chart in topological order coloured by effective precision, the offenders
/// table, the per-tensor table and the suggested policy.
std::string RenderHtml(const v1::AccuracyReport& report);

/// A terminal table: verdicts per output, the worst offenders, and the suggestion. At most
/// `max_rows` rows of offenders.
std::string RenderTable(const v1::AccuracyReport& report, int max_rows = 10);

}  // namespace kiln::report
