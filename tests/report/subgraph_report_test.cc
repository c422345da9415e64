// The accuracy report inside If / Loop / Scan subgraphs (issue 28): tensors computed in the
// branch taken and in loop bodies (at every depth) are reported with their qualified node names,
// their accumulated error over every occurrence (iterations, samples) and the number of
// occurrences compared; a branch the engine took where the reference did not is counted and
// compared nowhere; the kept reference occurrences are bounded; models without subgraphs keep
// their reports as they were.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/builder/accuracy.h"
#include "engine/builder/builder.h"
#include "engine/import/onnx_importer.h"
#include "engine/import/tensor_proto.h"
#include "engine/report/analysis.h"
#include "engine/report/render.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"

namespace kiln {
namespace {

using testing::AddFloatInitializer;
using testing::AddOnnxNode;
using testing::AddSubgraph;
using testing::AddTensorValueInfo;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kN = 16;          // elements of x, y and every tensor in the subgraphs
constexpr int kOuterTrips = 3;  // Loop_0's iterations
constexpr int kInnerTrips = 2;  // Loop_1's iterations (inside If_0's then branch)

// A scalar int64 initializer (a Loop's trip count).
void AddScalarInt64(onnx::GraphProto* g, const std::string& name, int64_t v) {
  onnx::TensorProto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_int64_data(v);
}

// A Loop body v -> v * s (+ x when `add_x`), carried through `trips` iterations; its tensors are
// named after `prefix` (ONNX tensor names are unique in a model).
void FillBody(onnx::GraphProto* body, const std::string& prefix, bool add_x) {
  AddTensorValueInfo(body->mutable_input(), prefix + "_i", {}, onnx::TensorProto::INT64);
  AddTensorValueInfo(body->mutable_input(), prefix + "_c", {}, onnx::TensorProto::BOOL);
  AddTensorValueInfo(body->mutable_input(), prefix + "_v", {kN});
  AddOnnxNode(body, "Identity", {prefix + "_c"}, {prefix + "_c_out"}, "id");
  const std::string m = prefix + "_m";
  AddOnnxNode(body, "Mul", {prefix + "_v", "s"}, {m}, add_x ? "mul" : "inner_mul");
  std::string out = m;
  if (add_x) {
    out = prefix + "_next";
    AddOnnxNode(body, "Add", {m, "x"}, {out}, "add");
  }
  AddTensorValueInfo(body->mutable_output(), prefix + "_c_out", {}, onnx::TensorProto::BOOL);
  AddTensorValueInfo(body->mutable_output(), out, {kN});
}

// z, x, y -> out:
//   c = (z + 0) > 1.0001           (in fp16, z = 1.0002 rounds to 1: the condition flips)
//   h = x * w
//   y1 = If_0(c) then: a = x + y; t = a * h; u = Loop_1(2 trips){ u * s }  -> u
//                else: e = x - h                                          -> e
//   out = Loop_0(3 trips){ v * s + x }(y1)
onnx::ModelProto Model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* imp = m.add_opset_import();
  imp->set_domain("");
  imp->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("subgraph_report");
  AddTensorValueInfo(g->mutable_input(), "z", {});
  AddTensorValueInfo(g->mutable_input(), "x", {kN});
  AddTensorValueInfo(g->mutable_input(), "y", {kN});
  AddFloatInitializer(g, "zero", {}, {0.0f});
  AddFloatInitializer(g, "thr", {}, {1.0001f});
  std::vector<float> w(kN);
  for (int i = 0; i < kN; ++i) w[i] = 0.3137f + 0.0731f * i;
  AddFloatInitializer(g, "w", {kN}, w);
  AddFloatInitializer(g, "s", {}, {1.0123f});
  AddScalarInt64(g, "M0", kOuterTrips);
  AddScalarInt64(g, "M1", kInnerTrips);
  AddOnnxNode(g, "Add", {"z", "zero"}, {"zr"}, "round_z");
  AddOnnxNode(g, "Greater", {"zr", "thr"}, {"c"}, "gt");
  AddOnnxNode(g, "Mul", {"x", "w"}, {"h"}, "scale");
  onnx::NodeProto* iff = AddOnnxNode(g, "If", {"c"}, {"y1"}, "If_0");
  onnx::GraphProto* then_g = AddSubgraph(iff, "then_branch");
  AddOnnxNode(then_g, "Add", {"x", "y"}, {"a"}, "add");
  AddOnnxNode(then_g, "Mul", {"a", "h"}, {"t"}, "mul");
  onnx::NodeProto* inner = AddOnnxNode(then_g, "Loop", {"M1", "", "t"}, {"u"}, "Loop_1");
  FillBody(AddSubgraph(inner, "body"), "l1", /*add_x=*/false);
  AddTensorValueInfo(then_g->mutable_output(), "u", {kN});
  onnx::GraphProto* else_g = AddSubgraph(iff, "else_branch");
  AddOnnxNode(else_g, "Sub", {"x", "h"}, {"e"}, "sub");
  AddTensorValueInfo(else_g->mutable_output(), "e", {kN});
  onnx::NodeProto* loop = AddOnnxNode(g, "Loop", {"M0", "", "y1"}, {"out"}, "Loop_0");
  FillBody(AddSubgraph(loop, "body"), "l0", /*add_x=*/true);
  AddTensorValueInfo(g->mutable_output(), "out", {kN});
  return m;
}

ir::Tensor Floats(std::vector<int64_t> dims, const std::vector<float>& v) {
  ir::Tensor t = *ir::Tensor::Allocate(DataType::kF32, std::move(dims));
  std::memcpy(t.raw_data(), v.data(), v.size() * sizeof(float));
  return t;
}

// One sample: z, and x, y with values that fp16 does not hold exactly.
std::vector<ir::Tensor> Sample(float z, int seed) {
  std::vector<float> x(kN), y(kN);
  for (int i = 0; i < kN; ++i) {
    x[i] = std::sin(0.37f * (i + 1) + seed) * 0.987654f;
    y[i] = std::cos(0.53f * (i + 1) + 2 * seed) * 1.234567f;
  }
  return {Floats({}, {z}), Floats({kN}, x), Floats({kN}, y)};
}

struct Reported {
  builder::BuildResult built;
  v1::AccuracyReport report;
};

absl::StatusOr<Reported> BuildWithReport(builder::BuildOptions opts,
                                         const std::vector<std::vector<ir::Tensor>>& samples) {
  Reported r;
  const std::string bytes = testing::SerializeModel(Model());
  opts.keep_reference = true;
  ASSIGN_OR_RETURN(r.built, builder::BuildEngine(bytes, opts, nullptr));
  builder::ReportOptions ro;
  ro.suggest = false;  // the search is not what these tests look at
  ASSIGN_OR_RETURN(
      r.report, builder::BuildAccuracyReport(bytes, opts, r.built, r.built.engine,
                                             std::move(r.built.reference), samples, ro, nullptr));
  return r;
}

builder::BuildOptions Fp16(std::vector<std::string> rules = {}) {
  builder::BuildOptions o;
  o.policy = "fp16";
  o.rules = std::move(rules);
  return o;
}

const v1::TensorReport* FindNode(const v1::AccuracyReport& rep, const std::string& node) {
  for (const auto& t : rep.tensors()) {
    if (t.node_name() == node) return &t;
  }
  return nullptr;
}

const v1::SubgraphRuns* FindSubgraph(const v1::AccuracyReport& rep, const std::string& label) {
  for (const auto& g : rep.subgraphs().runs()) {
    if (g.subgraph() == label) return &g;
  }
  return nullptr;
}

// Both samples take the then branch (z = 2 > 1.0001 in fp16 too).
std::vector<std::vector<ir::Tensor>> TwoThenSamples() { return {Sample(2, 0), Sample(2, 1)}; }

TEST(SubgraphReportTest, ReportsTheBranchTakenAndLoopBodiesPerOccurrence) {
  auto r = BuildWithReport(Fp16(), TwoThenSamples());
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::AccuracyReport& rep = r->report;
  const int samples = 2;
  struct Expect {
    const char* node;
    const char* subgraph;
    const char* op;
    int occurrences;
  };
  const Expect expected[] = {
      {"If_0/then_branch/add", "If_0/then_branch", "Add", samples},
      {"If_0/then_branch/mul", "If_0/then_branch", "Mul", samples},
      {"If_0/then_branch/Loop_1", "If_0/then_branch", "Loop", samples},
      {"If_0/then_branch/Loop_1/body/inner_mul", "If_0/then_branch/Loop_1/body", "Mul",
       kInnerTrips * samples},
      {"Loop_0/body/mul", "Loop_0/body", "Mul", kOuterTrips * samples},
      {"Loop_0/body/add", "Loop_0/body", "Add", kOuterTrips * samples},
  };
  for (const Expect& x : expected) {
    SCOPED_TRACE(x.node);
    const v1::TensorReport* t = FindNode(rep, x.node);
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(t->has_in_subgraph());
    EXPECT_EQ(t->in_subgraph().subgraph(), x.subgraph);
    EXPECT_EQ(t->op_type(), x.op);
    EXPECT_EQ(t->in_subgraph().occurrences(), x.occurrences);
    EXPECT_EQ(t->in_subgraph().occurrences_not_compared(), 0);
    // Control flow is not a floating computation: no precision of its own.
    EXPECT_EQ(t->assigned_precision(), std::string(x.op) == "Loop" ? "" : "fp16");
    EXPECT_EQ(t->accumulated().elements(), int64_t{kN} * x.occurrences);
    // fp16 rounds these values (none is a short binary fraction): some error, and a small one
    // (a handful of fp16 roundings of values below ~10: far below 0.1).
    EXPECT_GT(t->accumulated().max_abs(), 0);
    EXPECT_LT(t->accumulated().max_abs(), 0.1);
    EXPECT_GT(t->ref_max_abs(), 0);
    EXPECT_TRUE(t->in_subgraph().introduced_not_measured());
    EXPECT_FALSE(t->has_introduced());
  }
  // The branch not taken ran nowhere: no entry, and no runs.
  EXPECT_EQ(FindNode(rep, "If_0/else_branch/sub"), nullptr);
  EXPECT_EQ(FindSubgraph(rep, "If_0/else_branch"), nullptr);
  const v1::SubgraphRuns* body = FindSubgraph(rep, "Loop_0/body");
  ASSERT_NE(body, nullptr);
  EXPECT_EQ(body->op_type(), "Loop");
  EXPECT_EQ(body->engine_runs(), kOuterTrips * samples);
  EXPECT_EQ(body->reference_runs(), kOuterTrips * samples);
  EXPECT_EQ(body->samples_differing(), 0);
  const v1::SubgraphRuns* inner = FindSubgraph(rep, "If_0/then_branch/Loop_1/body");
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(inner->engine_runs(), kInnerTrips * samples);
  // Top-level tensors keep their measured introduced error.
  const v1::TensorReport* top = FindNode(rep, "scale");
  ASSERT_NE(top, nullptr);
  EXPECT_FALSE(top->has_in_subgraph());
  EXPECT_TRUE(top->has_introduced());
  // Subgraph tensors come before the outputs of the top-level node that computes them.
  int if_out = -1, then_add = -1;
  for (int i = 0; i < rep.tensors_size(); ++i) {
    if (rep.tensors(i).tensor() == "y1") if_out = i;
    if (rep.tensors(i).node_name() == "If_0/then_branch/add") then_add = i;
  }
  ASSERT_GE(if_out, 0);
  EXPECT_LT(then_add, if_out);
}

TEST(SubgraphReportTest, AnFp32PinnedSubgraphNodeHasNoError) {
  // `add` reads two graph inputs (fp32): pinned to fp32 it computes exactly what the reference
  // does, in every occurrence. `mul` reads h, computed in fp16 outside the branch: it inherits
  // error even at fp32.
  auto r = BuildWithReport(Fp16({"name:If_0/then_branch/* = fp32"}), TwoThenSamples());
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::TensorReport* add = FindNode(r->report, "If_0/then_branch/add");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->assigned_precision(), "fp32");
  EXPECT_EQ(add->effective_precision(), "fp32");
  EXPECT_EQ(add->in_subgraph().occurrences(), 2);
  EXPECT_EQ(add->accumulated().max_abs(), 0);
  EXPECT_EQ(add->accumulated().fraction_outside(), 0);
  const v1::TensorReport* mul = FindNode(r->report, "If_0/then_branch/mul");
  ASSERT_NE(mul, nullptr);
  EXPECT_EQ(mul->assigned_precision(), "fp32");
  EXPECT_GT(mul->accumulated().max_abs(), 0);
  // The rule reaches the inner loop's body too; the outer loop stays fp16.
  const v1::TensorReport* inner = FindNode(r->report, "If_0/then_branch/Loop_1/body/inner_mul");
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(inner->assigned_precision(), "fp32");
  const v1::TensorReport* outer = FindNode(r->report, "Loop_0/body/mul");
  ASSERT_NE(outer, nullptr);
  EXPECT_EQ(outer->assigned_precision(), "fp16");
}

TEST(SubgraphReportTest, ABranchThatDiffersIsCountedAndNotCompared) {
  // Sample 1: z = 1.0002 > 1.0001 in fp32 (reference: then), but 1.0002 rounds to 1 in fp16
  // (engine: else).
  auto r = BuildWithReport(Fp16(), {Sample(2, 0), Sample(1.0002f, 1)});
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::AccuracyReport& rep = r->report;
  const v1::SubgraphRuns* then_g = FindSubgraph(rep, "If_0/then_branch");
  const v1::SubgraphRuns* else_g = FindSubgraph(rep, "If_0/else_branch");
  ASSERT_NE(then_g, nullptr);
  ASSERT_NE(else_g, nullptr);
  EXPECT_EQ(then_g->engine_runs(), 1);
  EXPECT_EQ(then_g->reference_runs(), 2);
  EXPECT_EQ(then_g->reference_only_runs(), 1);
  EXPECT_EQ(then_g->samples_differing(), 1);
  EXPECT_EQ(else_g->engine_runs(), 1);
  EXPECT_EQ(else_g->reference_runs(), 0);
  EXPECT_EQ(else_g->engine_only_runs(), 1);
  EXPECT_EQ(else_g->samples_differing(), 1);
  // The inner loop ran only in the reference in sample 1.
  const v1::SubgraphRuns* inner = FindSubgraph(rep, "If_0/then_branch/Loop_1/body");
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(inner->reference_only_runs(), kInnerTrips);
  // The then branch's tensors: sample 0 alone; the else branch's: the engine's run in sample 1
  // had no reference to compare with, so no entry.
  const v1::TensorReport* add = FindNode(rep, "If_0/then_branch/add");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->in_subgraph().occurrences(), 1);
  EXPECT_EQ(FindNode(rep, "If_0/else_branch/sub"), nullptr);
  // Both loops ran alike.
  const v1::TensorReport* body = FindNode(rep, "Loop_0/body/mul");
  ASSERT_NE(body, nullptr);
  EXPECT_EQ(body->in_subgraph().occurrences(), 2 * kOuterTrips);
  bool warned = false;
  for (const std::string& n : rep.notes()) {
    warned |= absl::StrContains(n,
                                "If_0/else_branch: branch differs from the reference in 1 "
                                "sample(s)");
  }
  EXPECT_TRUE(warned) << absl::StrJoin(rep.notes(), "\n");
  // The renderers show it.
  EXPECT_THAT(report::RenderTable(rep), HasSubstr("BRANCH DIFFERS in 1 sample(s)"));
  EXPECT_THAT(report::RenderHtml(rep), HasSubstr("(branch differs)"));
}

TEST(SubgraphReportTest, KeptReferenceOccurrencesAreBounded) {
  // A budget below one tensor: only the first occurrence of each tensor in a sample is kept
  // (stride 2, then 4, ...), the others are counted as not compared.
  const std::string bytes = testing::SerializeModel(Model());
  builder::BuildOptions opts = Fp16();
  opts.keep_reference = true;
  auto built = builder::BuildEngine(bytes, opts, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  auto a = report::EngineAnalysis::Create(built->engine, built->reference, report::Tolerance{});
  ASSERT_TRUE(a.ok()) << a.status();
  (*a)->set_subgraph_budget_bytes(1);
  ASSERT_TRUE((*a)->AddSamples(TwoThenSamples()).ok());
  const v1::AccuracyReport rep = (*a)->Report();
  const v1::TensorReport* body = FindNode(rep, "Loop_0/body/mul");
  ASSERT_NE(body, nullptr);
  EXPECT_EQ(body->in_subgraph().occurrences() + body->in_subgraph().occurrences_not_compared(),
            2 * kOuterTrips);
  EXPECT_EQ(body->in_subgraph().occurrences(), 2);  // occurrence 0 of each sample
  bool noted = false;
  for (const std::string& n : rep.notes()) noted |= absl::StrContains(n, "only one occurrence in");
  EXPECT_TRUE(noted) << absl::StrJoin(rep.notes(), "\n");
  // The default budget keeps them all.
  auto all = report::EngineAnalysis::Create(built->engine, built->reference, report::Tolerance{});
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_TRUE((*all)->AddSamples(TwoThenSamples()).ok());
  const v1::TensorReport* full = FindNode((*all)->Report(), "Loop_0/body/mul");
  ASSERT_NE(full, nullptr);
  EXPECT_EQ(full->in_subgraph().occurrences(), 2 * kOuterTrips);
}

TEST(SubgraphReportTest, IfAndLoopRunAloneOnReferenceInputsAndSamplesMergeInOrder) {
  // Every kernel run alone (no reuse of the tapped run): the top-level If and Loop run their
  // subgraphs' sessions, unobserved, for their introduced error. Samples side by side (as many
  // as there are threads) give the report of samples one by one.
  const std::string bytes = testing::SerializeModel(Model());
  builder::BuildOptions opts = Fp16();
  opts.keep_reference = true;
  auto built = builder::BuildEngine(bytes, opts, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  const std::vector<std::vector<ir::Tensor>> samples = {Sample(2, 0), Sample(1.0002f, 1),
                                                        Sample(3, 2), Sample(2, 3)};
  auto together = report::EngineAnalysis::Create(built->engine, built->reference, {});
  ASSERT_TRUE(together.ok()) << together.status();
  (*together)->set_reuse_tapped_runs(false);
  int alone = 0;
  absl::Status st = (*together)->AddSamples(
      samples,
      [&](size_t, const report::EngineAnalysis::SampleStats& s) { alone += s.kernels_alone; });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_GT(alone, 0);
  auto one_by_one = report::EngineAnalysis::Create(built->engine, built->reference, {});
  ASSERT_TRUE(one_by_one.ok()) << one_by_one.status();
  (*one_by_one)->set_reuse_tapped_runs(false);
  for (const auto& sample : samples) ASSERT_TRUE((*one_by_one)->AddSample(sample).ok());
  const v1::AccuracyReport a = (*together)->Report(), b = (*one_by_one)->Report();
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
  for (const char* node : {"If_0", "Loop_0"}) {
    const v1::TensorReport* t = FindNode(a, node);
    ASSERT_NE(t, nullptr) << node;
    EXPECT_TRUE(t->has_introduced()) << node;
    EXPECT_EQ(t->introduced().elements(), int64_t{kN} * 4) << node;
  }
  const v1::SubgraphRuns* else_g = FindSubgraph(a, "If_0/else_branch");
  ASSERT_NE(else_g, nullptr);
  EXPECT_EQ(else_g->samples_differing(), 1);
}

TEST(SubgraphReportTest, ObservedRunsComputeWhatUnobservedRunsDo) {
  // The report's engine outputs (a run observed inside its subgraphs) are bit for bit those of
  // a plain run.
  const std::string bytes = testing::SerializeModel(Model());
  builder::BuildOptions opts = Fp16();
  opts.keep_reference = true;
  auto built = builder::BuildEngine(bytes, opts, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  auto a = report::EngineAnalysis::Create(built->engine, built->reference, report::Tolerance{});
  ASSERT_TRUE(a.ok()) << a.status();
  const std::vector<ir::Tensor> sample = Sample(2, 3);
  ASSERT_TRUE((*a)->AddSample(sample).ok());
  auto session = runtime::Session::Create(built->engine);
  ASSERT_TRUE(session.ok()) << session.status();
  auto plain = (*session)->Run(sample);
  ASSERT_TRUE(plain.ok()) << plain.status();
  const ir::Tensor& observed = (*a)->last_outputs()[0];
  ASSERT_EQ(observed.byte_size(), (*plain)[0].byte_size());
  EXPECT_EQ(std::memcmp(observed.raw_data(), (*plain)[0].raw_data(), observed.byte_size()), 0);
}

TEST(SubgraphReportTest, JsonCarriesTheNewFieldsAndNoIntroducedForSubgraphTensors) {
  auto r = BuildWithReport(Fp16(), TwoThenSamples());
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string json = report::RenderJson(r->report);
  EXPECT_THAT(json, HasSubstr("\"inSubgraph\": {"));
  EXPECT_THAT(json, HasSubstr("\"subgraph\": \"Loop_0/body\""));
  EXPECT_THAT(json, HasSubstr("\"occurrences\": \"6\""));
  EXPECT_THAT(json, HasSubstr("\"introducedNotMeasured\": true"));
  EXPECT_THAT(json, HasSubstr("\"subgraphs\": {"));
  const std::string text = report::RenderTable(r->report);
  EXPECT_THAT(text, HasSubstr("Tensors inside subgraphs"));
  EXPECT_THAT(text, HasSubstr("Loop_0/body/mul"));
  const std::string html = report::RenderHtml(r->report);
  EXPECT_THAT(html, HasSubstr("<h2>Subgraphs</h2>"));
  EXPECT_THAT(html, HasSubstr("not measured"));
}

TEST(SubgraphReportTest, ReportsWithoutSubgraphsHaveNoneOfIt) {
  const std::string path =
      absl::StrCat(KILN_SOURCE_DIR, "/tests/models/bert_layernorm_op/model.onnx");
  auto bytes = import::ReadFile(path, int64_t{1} << 30);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::string input =
      absl::StrCat(KILN_SOURCE_DIR, "/tests/models/bert_layernorm_op/test_data_set_0/input_0.pb");
  auto in_bytes = import::ReadFile(input, int64_t{1} << 30);
  ASSERT_TRUE(in_bytes.ok()) << in_bytes.status();
  auto t = import::ParseTensorProto(*in_bytes, input);
  ASSERT_TRUE(t.ok()) << t.status();
  builder::BuildOptions opts = Fp16();
  opts.keep_reference = true;
  auto built = builder::BuildEngine(*bytes, opts, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  builder::ReportOptions ro;
  ro.suggest = false;
  auto rep = builder::BuildAccuracyReport(*bytes, opts, *built, built->engine,
                                          std::move(built->reference), {{*t}}, ro, nullptr);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_GT(rep->tensors_size(), 0);
  EXPECT_FALSE(rep->has_subgraphs());
  for (const auto& tr : rep->tensors()) EXPECT_FALSE(tr.has_in_subgraph());
  // The JSON has no new key at all (always_print_primitive_fields prints every default value of
  // a message that is there; the new fields live in messages left unset).
  const std::string json = report::RenderJson(*rep);
  EXPECT_THAT(json, Not(HasSubstr("ubgraph")));
  EXPECT_THAT(json, Not(HasSubstr("ccurrences")));
  EXPECT_THAT(report::RenderTable(*rep), Not(HasSubstr("Subgraphs")));
  EXPECT_THAT(report::RenderHtml(*rep), Not(HasSubstr("not measured")));
}

}  // namespace
}  // namespace kiln
