// The HTML and terminal renderers of the accuracy report (DESIGN.md §7): escaping, no network
// references, a chart that stays valid and bounded with non-finite figures and thousands of
// tensors, and the terminal table's verdicts, offenders and suggestion.
#include "engine/report/render.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <regex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/report/render_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::report {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

// The <svg id="chart"> element of a page, or "" when absent.
std::string ChartOf(const std::string& html) {
  const size_t begin = html.find("<svg id=\"chart\"");
  if (begin == std::string::npos) return "";
  const size_t end = html.find("</svg>", begin);
  if (end == std::string::npos) return "";
  return html.substr(begin, end + 6 - begin);
}

v1::ErrorStats Stats(double max_abs, double fraction_outside = 0, int64_t nan = 0,
                     int64_t inf = 0) {
  v1::ErrorStats e;
  e.set_max_abs(max_abs);
  e.set_mean_abs(std::isfinite(max_abs) ? max_abs / 8 : max_abs);
  e.set_max_rel(std::isfinite(max_abs) ? max_abs * 3 : max_abs);
  e.set_cosine(max_abs == 0 ? 1.0 : 0.9999);
  e.set_snr_db(max_abs == 0 ? kInf : 61.5);
  e.set_nan_count(nan);
  e.set_inf_count(inf);
  e.set_fraction_outside(fraction_outside);
  e.set_elements(4096);
  return e;
}

v1::TensorReport* AddTensor(v1::AccuracyReport* r, const std::string& name, const std::string& node,
                            const std::string& op, const std::string& precision,
                            const v1::ErrorStats& acc, const v1::ErrorStats& intro) {
  v1::TensorReport* t = r->add_tensors();
  t->set_tensor(name);
  t->set_node_name(node);
  t->set_op_type(op);
  t->set_node_index(r->tensors_size() - 1);
  t->set_assigned_precision(precision);
  t->set_effective_precision(precision);
  t->set_kernel_id(absl::StrFormat("k%d", r->tensors_size() - 1));
  t->set_kernel_op(op);
  *t->mutable_accumulated() = acc;
  *t->mutable_introduced() = intro;
  t->set_ref_max_abs(12.5);
  return t;
}

// `layers` synthetic transformer-like layers (fp16 MatMul/Add, fp32 LayerNorm, bf16 FFN,
// integer Shape), errors growing with depth; deterministic.
void AddSyntheticLayers(v1::AccuracyReport* r, int layers) {
  uint32_t seed = 12345;
  auto jitter = [&seed] {
    seed = seed * 1664525u + 1013904223u;
    return 0.5 + (seed >> 8) / static_cast<double>(1 << 24);  // [0.5, 1.5)
  };
  for (int l = 0; l < layers; ++l) {
    const std::string scope = absl::StrFormat("/encoder/layer.%d", l);
    const double depth = 1.0 + 0.15 * l;
    struct Op {
      const char* name;
      const char* op;
      const char* precision;
      double scale;
    };
    for (const Op& op : {Op{"attention/MatMul", "MatMul", "fp16", 4e-4},
                         Op{"attention/Softmax", "Softmax", "fp16", 1e-4},
                         Op{"attention/Add", "Add", "fp16", 6e-4},
                         Op{"LayerNorm/LayerNormalization", "LayerNormalization", "fp32", 2e-5},
                         Op{"ffn/MatMul", "MatMul", "bf16", 3e-3},
                         Op{"ffn/Gelu", "Gelu", "bf16", 2e-3}, Op{"Shape", "Shape", "", 0}}) {
      const double acc = op.scale * depth * jitter();
      const double intro = op.scale * 0.3 * jitter();
      v1::TensorReport* t = AddTensor(
          r, absl::StrCat(scope, "/", op.name, "_output_0"), absl::StrCat(scope, "/", op.name),
          op.op, op.precision, Stats(acc), Stats(std::string(op.precision) == "fp32" ? 0 : intro));
      if (std::string(op.op) == "LayerNormalization") t->set_rule("pattern:layernorm = fp32");
    }
  }
}

// A report with every awkward case: markup in names, NaN and Inf, a failing output, a value
// above the fp16 range, a fused kernel, and a verified suggestion. `layers` synthetic layers
// come first.
v1::AccuracyReport MakeSampleReport(int layers = 0) {
  v1::AccuracyReport r;
  r.set_model_name("bert<tiny>&co.onnx");
  r.set_model_sha256("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
  r.set_policy("base fp16\npattern:layernorm = fp32");
  r.set_samples(4);
  r.set_sample_source("generated (seed 0)");
  r.set_atol(1e-5);
  r.set_rtol(1e-3);
  r.set_arithmetic("fp16: emulated (F16C conversions), bf16: emulated");
  AddSyntheticLayers(&r, layers);

  AddTensor(&r, "input_proj", "/embed/MatMul", "MatMul", "fp32", Stats(0), Stats(0));
  v1::TensorReport* script = AddTensor(&r, "<script>alert(1)</script>", "/enc/a&b/<Add>", "Add",
                                       "fp16", Stats(2e-3, 0.01), Stats(1e-3, 0.005));
  script->set_fusion("MatMulAdd");
  script->set_inside_fused_kernel(true);
  script->set_kernel_op("FusedMatMul");
  script->set_pattern("attention@/enc/a&b");
  AddTensor(&r, "/enc/ln/out", "/enc/ln/LayerNormalization", "LayerNormalization", "bf16",
            Stats(kNaN, 0.02, 5, 0), Stats(1e-2));
  v1::TensorReport* softmax = AddTensor(&r, "/enc/softmax/out", "/enc/softmax", "Softmax", "fp16",
                                        Stats(0.5, 0.125, 0, 4096), Stats(0.4, 0.1, 0, 4096));
  softmax->set_ref_max_abs(70000);
  softmax->set_ref_exceeds_fp16(true);
  softmax->set_assigned_precision("fp16");
  AddTensor(&r, "shape_out", "/enc/Shape", "Shape", "", Stats(0), Stats(0));
  v1::TensorReport* logits =
      AddTensor(&r, "logits", "/head/MatMul", "MatMul", "fp16", Stats(0.3, 0.25), Stats(1e-3));
  logits->set_is_graph_output(true);

  v1::OutputVerdict* out = r.add_outputs();
  out->set_tensor("logits");
  out->set_pass(false);
  *out->mutable_error() = Stats(0.3, 0.25);
  v1::OutputVerdict* probs = r.add_outputs();
  probs->set_tensor("probs&<b>");
  probs->set_pass(true);
  *probs->mutable_error() = Stats(1e-6);
  r.set_pass(false);

  const char* offenders[][4] = {
      {"/enc/softmax/out", "/enc/softmax", "Softmax", "introduces 4096 Inf"},
      {"/enc/ln/out", "/enc/ln/LayerNormalization", "LayerNormalization", "introduces 5 NaN"},
      {"<script>alert(1)</script>", "/enc/a&b/<Add>", "Add", "introduces max_abs 1e-03"}};
  for (const auto& o : offenders) {
    v1::Offender* off = r.add_worst_offenders();
    off->set_tensor(o[0]);
    off->set_node_name(o[1]);
    off->set_op_type(o[2]);
    off->set_effective_precision("fp16");
    off->set_why(o[3]);
  }

  v1::Suggestion* s = r.mutable_suggestion();
  s->set_searched(true);
  s->set_found(true);
  s->set_policy_text("base fp16\npattern:layernorm = fp32\nnode:/enc/softmax = fp32\n");
  s->add_nodes("/enc/softmax");
  s->add_nodes("/enc/a&b/<Add>");
  s->set_output_max_abs_before(0.3);
  s->set_output_max_abs_after(2e-4);
  s->set_latency_ms_before(1.25);
  s->set_latency_ms_after(1.5);
  s->set_builds(7);
  r.set_report_ms(812);
  r.set_search_ms(640);
  r.add_notes("symbolic dim 'batch' bound to 1");
  return r;
}

TEST(FormatNumberTest, NonFiniteAreWords) {
  EXPECT_EQ(FormatNumber(kInf), "inf");
  EXPECT_EQ(FormatNumber(-kInf), "-inf");
  EXPECT_EQ(FormatNumber(kNaN), "nan");
  EXPECT_EQ(FormatNumber(-kNaN), "nan");  // printf would say "-nan"
  EXPECT_EQ(FormatNumber(2e-4), "0.0002");
  EXPECT_EQ(FormatNumber(1.23456), "1.23");
  EXPECT_EQ(FormatPercent(0.125), "12.5%");
  EXPECT_EQ(FormatCosine(0.9999), "0.9999");  // not "1"
  EXPECT_EQ(FormatCosine(kNaN), "nan");
}

TEST(RenderHtmlTest, EscapesEveryReportString) {
  const std::string html = RenderHtml(MakeSampleReport());
  EXPECT_THAT(html, Not(HasSubstr("<script>alert")));
  EXPECT_THAT(html, Not(HasSubstr("<Add>")));
  EXPECT_THAT(html, Not(HasSubstr("a&b")));
  EXPECT_THAT(html, Not(HasSubstr("<tiny>")));
  EXPECT_THAT(html, Not(HasSubstr("<b>")));
  EXPECT_THAT(html, HasSubstr("&lt;script&gt;alert(1)&lt;/script&gt;"));
  EXPECT_THAT(html, HasSubstr("/enc/a&amp;b/&lt;Add&gt;"));
  EXPECT_THAT(html, HasSubstr("bert&lt;tiny&gt;&amp;co.onnx"));
  // The page's own filter script is the only <script> element.
  EXPECT_EQ(Count(html, "<script"), 1u);
}

TEST(RenderHtmlTest, IsSelfContained) {
  const std::string html = RenderHtml(MakeSampleReport(3));
  EXPECT_THAT(html, Not(HasSubstr("http://")));
  EXPECT_THAT(html, Not(HasSubstr("https://")));
  EXPECT_THAT(html, Not(HasSubstr("<link")));
  EXPECT_THAT(html, Not(HasSubstr("@import")));
  EXPECT_THAT(html, Not(HasSubstr("url(")));
  EXPECT_THAT(html, Not(HasSubstr(" src=")));
  EXPECT_THAT(html, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(html, HasSubstr("</html>"));
}

TEST(RenderHtmlTest, ChartHasOneColumnPerTensorAndValidCoordinates) {
  const v1::AccuracyReport report = MakeSampleReport();
  const std::string svg = ChartOf(RenderHtml(report));
  ASSERT_FALSE(svg.empty());
  EXPECT_EQ(Count(svg, "<g class=\"col\">"), static_cast<size_t>(report.tensors_size()));
  EXPECT_EQ(Count(svg, "<title>"), static_cast<size_t>(report.tensors_size()));
  // Two tensors produce NaN or Inf: one red marker each.
  EXPECT_EQ(Count(svg, "class=\"nf\""), 2u);
  // Bars coloured by effective precision.
  EXPECT_THAT(svg, HasSubstr(absl::StrFormat("fill=\"%s\"", PrecisionColor("fp16"))));
  EXPECT_THAT(svg, HasSubstr(absl::StrFormat("fill=\"%s\"", PrecisionColor("bf16"))));
  EXPECT_THAT(svg, HasSubstr(absl::StrFormat("fill=\"%s\"", PrecisionColor("none"))));
  // Tooltips name tensor, node and op, escaped.
  EXPECT_THAT(svg, HasSubstr("/enc/softmax/out\nnode /enc/softmax (Softmax)"));
  EXPECT_THAT(svg, HasSubstr("node /enc/a&amp;b/&lt;Add&gt; (Add)"));
  // Every geometric attribute is a finite number.
  const std::regex attr(R"re(\s(x|y|x1|y1|x2|y2|cx|cy|r|width|height)="([^"]*)")re");
  int checked = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), attr); it != std::sregex_iterator();
       ++it) {
    const std::string value = (*it)[2];
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    EXPECT_TRUE(end != value.c_str() && *end == '\0' && std::isfinite(v))
        << (*it)[1] << "=\"" << value << "\"";
    ++checked;
  }
  EXPECT_GT(checked, 6 * report.tensors_size());
  const std::regex path(R"re(\sd="([^"]*)")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), path); it != std::sregex_iterator();
       ++it) {
    EXPECT_TRUE(std::regex_match((*it)[1].str(), std::regex(R"([-0-9. MLZ]+)"))) << (*it)[1];
  }
}

TEST(RenderHtmlTest, TablesShowEveryFigure) {
  const std::string html = RenderHtml(MakeSampleReport());
  for (int i = 0; i < 6; ++i) EXPECT_THAT(html, HasSubstr(absl::StrFormat("<tr id=\"t%d\"", i)));
  EXPECT_THAT(html, HasSubstr("id=\"verdicts\""));
  EXPECT_THAT(html, HasSubstr("<td class=\"bad\">FAIL</td>"));
  EXPECT_THAT(html, HasSubstr("<td class=\"ok\">pass</td>"));
  EXPECT_THAT(html, HasSubstr("badge fail\">FAIL"));
  EXPECT_THAT(html, HasSubstr("id=\"offenders\""));
  EXPECT_THAT(html, HasSubstr("introduces 4096 Inf"));
  EXPECT_THAT(html, HasSubstr("k1 FusedMatMul"));
  EXPECT_THAT(html, HasSubstr("MatMulAdd"));
  EXPECT_THAT(html, HasSubstr("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"));
  EXPECT_THAT(html, HasSubstr("generated (seed 0)"));
  EXPECT_THAT(html, HasSubstr("fp16: emulated (F16C conversions)"));
  EXPECT_THAT(html, HasSubstr("atol 1e-05, rtol 0.001"));
  EXPECT_THAT(html, HasSubstr("symbolic dim &#39;batch&#39; bound to 1"));
  // Non-finite figures as words: NaN max_abs, +Inf snr_db of an exact tensor, Inf counts.
  EXPECT_THAT(html, HasSubstr("<td class=\"n nf\">nan</td>"));
  EXPECT_THAT(html, HasSubstr("<td class=\"n nf\">inf</td>"));
  EXPECT_THAT(html, HasSubstr("<td class=\"n nf\">0 / 4096</td>"));
  EXPECT_THAT(html, HasSubstr("<td class=\"n nf\">5 / 0</td>"));
  EXPECT_THAT(html, Not(HasSubstr("-nan")));
  // Reference range above fp16, flagged once (only the softmax).
  EXPECT_THAT(html, HasSubstr("7e+04<span class=\"flag\""));
  EXPECT_EQ(Count(html, "<span class=\"flag\""), 1u);
  EXPECT_EQ(Count(html, "<span class=\"out\">output</span>"), 1u);
  // Suggestion: policy text, before/after and latency cost.
  EXPECT_THAT(html, HasSubstr("<pre class=\"policy\">base fp16\npattern:layernorm = fp32\n"
                              "node:/enc/softmax = fp32\n</pre>"));
  EXPECT_THAT(html, HasSubstr("0.3 &#8594; 0.0002"));
  EXPECT_THAT(html, HasSubstr("1.25 ms &#8594; 1.5 ms, cost +0.25 ms (+20%)"));
  EXPECT_THAT(html, HasSubstr("(7 builds)"));
}

TEST(RenderHtmlTest, EmptyReportRenders) {
  const std::string html = RenderHtml(v1::AccuracyReport());
  EXPECT_THAT(html, HasSubstr("</html>"));
  EXPECT_THAT(ChartOf(html), HasSubstr("no tensors"));
  EXPECT_THAT(html, HasSubstr("No tensors compared."));
  EXPECT_THAT(html, HasSubstr("No graph outputs compared."));
  EXPECT_THAT(html, HasSubstr("No search ran"));
  EXPECT_THAT(html, Not(HasSubstr("nan")));
}

TEST(RenderHtmlTest, LargeReportKeepsTheChartBounded) {
  v1::AccuracyReport report = MakeSampleReport(430);  // 3016 tensors
  ASSERT_GT(report.tensors_size(), 3000);
  const std::string html = RenderHtml(report);
  const std::string svg = ChartOf(html);
  ASSERT_FALSE(svg.empty());
  const size_t columns = Count(svg, "<g class=\"col\">");
  EXPECT_LE(columns, static_cast<size_t>(kMaxChartColumns));
  EXPECT_GE(columns, static_cast<size_t>(kMaxChartColumns / 2));
  // Aggregated columns still flag the non-finite tensors at the end of the report.
  EXPECT_GE(Count(svg, "class=\"nf\""), 1u);
  EXPECT_THAT(svg, HasSubstr("(maximum shown)"));
  // ~1.5 KB per column at most; the table carries the per-tensor detail.
  EXPECT_LT(svg.size(), 1'000'000u);
  EXPECT_THAT(html, HasSubstr(absl::StrFormat("<tr id=\"t%d\"", report.tensors_size() - 1)));
}

TEST(RenderTableTest, ShowsVerdictsOffendersAndSuggestion) {
  const std::string text = RenderTable(MakeSampleReport(), 10);
  EXPECT_THAT(text, HasSubstr("FAIL  bert<tiny>&co.onnx: 1 of 2 outputs fail"));
  EXPECT_THAT(text, HasSubstr("samples 4 (generated (seed 0))"));
  EXPECT_THAT(text, HasSubstr("atol 1e-05 rtol 0.001"));
  EXPECT_TRUE(std::regex_search(text, std::regex(R"(logits +0\.3 +0\.9 +0\.9999 +25% +0/0 +FAIL)")))
      << text;
  EXPECT_TRUE(std::regex_search(text, std::regex(R"(probs&<b> +1e-06 .* pass)"))) << text;
  EXPECT_THAT(text, HasSubstr("Worst offenders (3 of 3)"));
  EXPECT_TRUE(
      std::regex_search(text, std::regex(R"(1 +/enc/softmax +Softmax +fp16 +introduces 4096 Inf)")))
      << text;
  EXPECT_THAT(text, HasSubstr("/enc/a&b/<Add>"));
  EXPECT_THAT(text, HasSubstr("Suggestion: passing policy found and verified (7 builds)"));
  EXPECT_THAT(text, HasSubstr("worst output max_abs 0.3 -> 0.0002"));
  EXPECT_THAT(text, HasSubstr("latency 1.25 ms -> 1.5 ms (+0.25 ms)"));
  EXPECT_THAT(text, HasSubstr("    node:/enc/softmax = fp32\n"));
}

TEST(RenderTableTest, RespectsMaxRowsAndNonFinite) {
  v1::AccuracyReport report = MakeSampleReport();
  report.mutable_outputs(0)->mutable_error()->set_max_abs(kNaN);
  report.mutable_outputs(0)->mutable_error()->set_max_rel(kInf);
  const std::string text = RenderTable(report, 1);
  EXPECT_THAT(text, HasSubstr("Worst offenders (1 of 3)"));
  EXPECT_THAT(text, HasSubstr("/enc/softmax"));
  EXPECT_THAT(text, Not(HasSubstr("/enc/ln/LayerNormalization")));
  EXPECT_THAT(text, Not(HasSubstr("introduces 5 NaN")));
  EXPECT_THAT(text, HasSubstr("... 2 more"));
  EXPECT_TRUE(std::regex_search(text, std::regex(R"(logits +nan +inf )"))) << text;
  EXPECT_THAT(text, Not(HasSubstr("-nan")));
  EXPECT_THAT(RenderTable(report, 0), HasSubstr("Worst offenders (0 of 3)"));
}

TEST(RenderTableTest, PassingReportWithoutSearch) {
  v1::AccuracyReport report;
  report.set_pass(true);
  report.set_samples(1);
  report.set_atol(1e-3);
  const std::string text = RenderTable(report, 5);
  EXPECT_THAT(text, HasSubstr("PASS  model: 0 of 0 outputs fail  samples 1  atol 0.001 rtol 0"));
  EXPECT_THAT(text, Not(HasSubstr("Suggestion")));
  EXPECT_THAT(text, HasSubstr("Worst offenders: none"));
}

// Writes the sample page for tests/report/html_screenshot_test.py (headless Chromium) to
// $KILN_HTML_OUT, and a 3016-tensor page to $KILN_HTML_OUT_LARGE when that is set.
TEST(RenderHtmlTest, WriteSampleHtml) {
  const char* path = std::getenv("KILN_HTML_OUT");
  if (path == nullptr || *path == '\0') GTEST_SKIP() << "KILN_HTML_OUT not set";
  const std::pair<const char*, int> pages[] = {{path, 18},
                                               {std::getenv("KILN_HTML_OUT_LARGE"), 430}};
  for (const auto& [file, layers] : pages) {
    if (file == nullptr || *file == '\0') continue;
    std::ofstream out(file, std::ios::binary);
    ASSERT_TRUE(out) << file;
    out << RenderHtml(MakeSampleReport(layers));
    out.close();
    ASSERT_TRUE(out.good()) << file;
  }
}

}  // namespace
}  // namespace kiln::report
