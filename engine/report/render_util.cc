#include "engine/report/render_util.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace kiln::report {

std::string HtmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string FormatNumber(double value) {
  // printf spells these "-nan" or "nan" depending on the sign bit; the report wants one word.
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return absl::StrFormat("%.3g", value);
}

std::string FormatCosine(double cosine) {
  if (!std::isfinite(cosine)) return FormatNumber(cosine);
  return absl::StrFormat("%.6g", cosine);
}

std::string FormatPercent(double fraction) {
  if (!std::isfinite(fraction)) return FormatNumber(fraction);
  return absl::StrFormat("%.3g%%", fraction * 100.0);
}

bool HasNonFinite(const v1::TensorReport& tensor) {
  const v1::ErrorStats& acc = tensor.accumulated();
  const v1::ErrorStats& intro = tensor.introduced();
  return acc.nan_count() > 0 || acc.inf_count() > 0 || acc.nonfinite_mismatch_count() > 0 ||
         intro.nan_count() > 0 || intro.inf_count() > 0 || intro.nonfinite_mismatch_count() > 0 ||
         !std::isfinite(acc.max_abs()) || !std::isfinite(intro.max_abs());
}

std::string FormatNonFinite(const v1::ErrorStats& e, absl::string_view slash) {
  std::string out = absl::StrFormat("%d%s%d", e.nan_count(), slash, e.inf_count());
  if (e.ref_nan_count() > 0 || e.ref_inf_count() > 0) {
    absl::StrAppendFormat(&out, " ref %d%s%d", e.ref_nan_count(), slash, e.ref_inf_count());
    if (e.nonfinite_mismatch_count() > 0) {
      absl::StrAppendFormat(&out, ", %d differ", e.nonfinite_mismatch_count());
    }
  }
  return out;
}

std::string PrecisionLabel(absl::string_view precision) {
  if (precision.empty()) return "none";
  return std::string(precision);
}

const char* PrecisionColor(absl::string_view label) {
  // Colour-blind-safe hues (Tableau 10), distinct from the red of the non-finite markers.
  if (label == "fp32") return "#4c78a8";
  if (label == "fp16") return "#f58518";
  if (label == "bf16") return "#54a24b";
  if (label == "none") return "#9d9d9d";
  return "#b279a2";
}

}  // namespace kiln::report
