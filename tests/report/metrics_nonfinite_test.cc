// Non-finite reference values in the accuracy report (hardening issue, defect 8): a NaN or Inf
// that the fp32 reference itself produces is compared, not skipped. The engine matches it only
// with the same value in the same place (NaN for NaN, an Inf of the same sign); anything else
// is a non-finite mismatch that counts as outside tolerance and fails the verdict. The counts
// reach the report fields, the JSON and the terminal table.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/builder/accuracy.h"
#include "engine/builder/builder.h"
#include "engine/common/status.h"
#include "engine/report/metrics.h"
#include "engine/report/render.h"
#include "engine/runtime/threads.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(NonFiniteReferenceTest, SameNonFiniteValuesInTheSamePlacesMatch) {
  const float ref[] = {kNaN, kInf, -kInf, 1, -kNaN};
  const float x[] = {kNaN, kInf, -kInf, 1, kNaN};  // NaN sign and payload do not matter
  report::ErrorAccumulator acc;
  acc.Add(x, ref, 5, report::Tolerance{});
  v1::ErrorStats s = acc.Finish();
  EXPECT_EQ(s.elements(), 5);
  EXPECT_EQ(s.ref_nan_count(), 2);
  EXPECT_EQ(s.ref_inf_count(), 2);
  EXPECT_EQ(s.nonfinite_mismatch_count(), 0);
  EXPECT_EQ(s.nan_count(), 0);  // nothing the engine broke
  EXPECT_EQ(s.inf_count(), 0);
  EXPECT_EQ(s.fraction_outside(), 0);
  EXPECT_EQ(report::NonFiniteErrors(s), 0);
  EXPECT_EQ(s.max_abs(), 0);  // the finite pair is exact
}

TEST(NonFiniteReferenceTest, ANonFiniteReferenceWithAnyOtherValueIsAMismatch) {
  // NaN vs finite, +Inf vs finite, -Inf vs +Inf, NaN vs Inf, +Inf vs NaN; then one exact pair.
  const float ref[] = {kNaN, kInf, -kInf, kNaN, kInf, 2};
  const float x[] = {0, 65504, kInf, kInf, kNaN, 2};
  report::ErrorAccumulator acc;
  acc.Add(x, ref, 6, report::Tolerance{});
  v1::ErrorStats s = acc.Finish();
  EXPECT_EQ(s.elements(), 6);
  EXPECT_EQ(s.ref_nan_count(), 2);
  EXPECT_EQ(s.ref_inf_count(), 3);
  EXPECT_EQ(s.nonfinite_mismatch_count(), 5);
  EXPECT_NEAR(s.fraction_outside(), 5.0 / 6.0, 1e-12);
  EXPECT_EQ(report::NonFiniteErrors(s), 5);
  // The mismatches do not enter the finite sums: the one finite pair is exact.
  EXPECT_EQ(s.max_abs(), 0);
  EXPECT_EQ(s.mean_abs(), 0);
}

TEST(NonFiniteReferenceTest, AFiniteReferenceWithANonFiniteValueIsOutside) {
  const float ref[] = {1, 2, 3, 4};
  const float x[] = {kNaN, kInf, -kInf, 4};
  report::ErrorAccumulator acc;
  acc.Add(x, ref, 4, report::Tolerance{});
  v1::ErrorStats s = acc.Finish();
  EXPECT_EQ(s.nan_count(), 1);
  EXPECT_EQ(s.inf_count(), 2);
  EXPECT_EQ(s.ref_nan_count() + s.ref_inf_count(), 0);
  EXPECT_EQ(s.nonfinite_mismatch_count(), 0);
  EXPECT_NEAR(s.fraction_outside(), 0.75, 1e-12);
  EXPECT_EQ(report::NonFiniteErrors(s), 3);
}

// Large tensors go through the vectorized block sums, which hand any block holding a NaN or an
// Inf to the element-by-element path: the counts must come out the same on any thread count,
// whether the tensor is compared alone or paired, and merged accumulators add them.
TEST(NonFiniteReferenceTest, BlockPathsAndMergeCountTheReferenceNonFinites) {
  const int64_t n = 100003;
  auto ref = ir::Tensor::Allocate(DataType::kF32, {n});
  auto x = ir::Tensor::Allocate(DataType::kF32, {n});
  ASSERT_TRUE(ref.ok() && x.ok());
  for (int64_t i = 0; i < n; ++i) {
    ref->data<float>()[i] = std::cos(0.01f * i) * 30;
    x->data<float>()[i] = ref->data<float>()[i];
  }
  ref->data<float>()[10] = x->data<float>()[10] = kNaN;         // match
  ref->data<float>()[50000] = x->data<float>()[50000] = -kInf;  // match
  ref->data<float>()[90000] = kInf;                             // x finite: mismatch
  const int before = runtime::Threads();
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    ASSERT_TRUE(runtime::SetThreads(threads).ok());
    report::ErrorAccumulator a, b, c;
    ASSERT_TRUE(a.AddTensor(*x, *ref, report::Tolerance{}).ok());
    ASSERT_TRUE(b.AddTensorPair(*x, c, *ref, *ref, report::Tolerance{}).ok());
    for (const v1::ErrorStats& s : {a.Finish(), b.Finish()}) {
      EXPECT_EQ(s.elements(), n);
      EXPECT_EQ(s.ref_nan_count(), 1);
      EXPECT_EQ(s.ref_inf_count(), 2);
      EXPECT_EQ(s.nonfinite_mismatch_count(), 1);
      EXPECT_NEAR(s.fraction_outside(), 1.0 / n, 1e-15);
    }
    // The reference against itself: every non-finite element matches.
    EXPECT_EQ(report::NonFiniteErrors(c.Finish()), 0);
    EXPECT_EQ(c.Finish().ref_inf_count(), 2);
    a.Merge(b);
    EXPECT_EQ(a.Finish().nonfinite_mismatch_count(), 2);
    EXPECT_EQ(a.Finish().ref_nan_count(), 2);
  }
  ASSERT_TRUE(runtime::SetThreads(before).ok());
}

// y = x / w with zeros in w: the fp32 reference itself holds +Inf, -Inf and NaN.
std::string DivByZeroModel() {
  onnx::ModelProto m;
  m.set_ir_version(10);
  m.set_producer_name("kiln-tests");
  auto* imp = m.add_opset_import();
  imp->set_domain("");
  imp->set_version(21);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("div_by_zero");
  testing::AddTensorValueInfo(g->mutable_input(), "x", {2, 3});
  testing::AddFloatInitializer(g, "w", {2, 3}, {0, 0, 0, 4, 0, 1});
  testing::AddOnnxNode(g, "Div", {"x", "w"}, {"y"}, "div");
  testing::AddTensorValueInfo(g->mutable_output(), "y", {2, 3});
  return testing::SerializeModel(m);
}

absl::StatusOr<v1::AccuracyReport> ReportOf(const std::string& policy) {
  const std::string bytes = DivByZeroModel();
  builder::BuildOptions opts;
  opts.policy = policy;
  opts.keep_reference = true;
  ASSIGN_OR_RETURN(builder::BuildResult built, builder::BuildEngine(bytes, opts, nullptr));
  std::shared_ptr<const plan::Engine> engine = built.engine;
  if (!engine) return absl::InternalError("keep_reference kept no engine");
  // x / w: 1e-30 / 0 = +Inf, 1 / 0 = +Inf, -1 / 0 = -Inf, 2 / 4, 0 / 0 = NaN, 3 / 1. In fp16
  // 1e-30 rounds to 0 (below the smallest fp16 subnormal, 6e-8), so that element is 0 / 0 = NaN
  // where the reference has +Inf; the others are exact in fp16.
  ASSIGN_OR_RETURN(ir::Tensor x, ir::Tensor::Allocate(DataType::kF32, {2, 3}));
  const float xs[] = {1e-30f, 1, -1, 2, 0, 3};
  for (int i = 0; i < 6; ++i) x.data<float>()[i] = xs[i];
  builder::ReportOptions ro;
  ro.suggest = false;  // the verdict is what is tested, not the search
  return builder::BuildAccuracyReport(bytes, opts, built, engine, std::move(built.reference), {{x}},
                                      ro, nullptr);
}

TEST(NonFiniteReferenceTest, OutputWithTheReferencesNaNAndInfPassesAndShowsTheCounts) {
  auto rep = ReportOf("fp32");
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->outputs_size(), 1);
  const v1::ErrorStats& e = rep->outputs(0).error();
  EXPECT_EQ(e.elements(), 6);
  EXPECT_EQ(e.ref_nan_count(), 1);
  EXPECT_EQ(e.ref_inf_count(), 3);
  EXPECT_EQ(e.nonfinite_mismatch_count(), 0);
  EXPECT_TRUE(rep->outputs(0).pass());
  EXPECT_TRUE(rep->pass());
  EXPECT_THAT(report::RenderTable(*rep, 10), HasSubstr("0/0 ref 1/3"));
  const std::string json = report::RenderJson(*rep);
  EXPECT_THAT(json, HasSubstr("\"refNanCount\": \"1\""));
  EXPECT_THAT(json, HasSubstr("\"refInfCount\": \"3\""));
  EXPECT_THAT(json, HasSubstr("\"nonfiniteMismatchCount\": \"0\""));
}

TEST(NonFiniteReferenceTest, OutputMissingAReferenceInfFails) {
  auto rep = ReportOf("fp16");
  ASSERT_TRUE(rep.ok()) << rep.status();
  ASSERT_EQ(rep->outputs_size(), 1);
  const v1::ErrorStats& e = rep->outputs(0).error();
  EXPECT_EQ(e.ref_nan_count(), 1);
  EXPECT_EQ(e.ref_inf_count(), 3);
  EXPECT_EQ(e.nonfinite_mismatch_count(), 1);  // NaN where the reference has +Inf
  EXPECT_NEAR(e.fraction_outside(), 1.0 / 6.0, 1e-12);
  EXPECT_FALSE(rep->outputs(0).pass());
  EXPECT_FALSE(rep->pass());
  const std::string table = report::RenderTable(*rep, 10);
  EXPECT_THAT(table, HasSubstr("0/0 ref 1/3, 1 differ"));
  EXPECT_THAT(table, HasSubstr("FAIL"));
  EXPECT_THAT(report::RenderJson(*rep), HasSubstr("\"nonfiniteMismatchCount\": \"1\""));
  // The node that produced it leads the worst offenders, saying why.
  ASSERT_GT(rep->worst_offenders_size(), 0);
  EXPECT_EQ(rep->worst_offenders(0).node_name(), "div");
  EXPECT_THAT(rep->worst_offenders(0).why(), HasSubstr("1 of the 4 reference NaN/Inf"));
}

}  // namespace
}  // namespace kiln
