// The accuracy report end to end (issue "Per-layer accuracy report"): the fp16 report of a
// decomposed LayerNorm beyond the fp16 range names the LayerNorm nodes with their Inf counts,
// the suggested policy passes when built, fp32-layernorm passes, a model without a precision
// problem passes with no suggestion, taps do not change the engine's numerics, and tensors
// inside fused kernels are reported.
#include "engine/builder/accuracy.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/builder/builder.h"
#include "engine/common/cpu_features.h"
#include "engine/import/onnx_importer.h"
#include "engine/import/tensor_proto.h"
#include "engine/kernels/registry.h"
#include "engine/plan/engine_blob.h"
#include "engine/report/analysis.h"
#include "engine/report/metrics.h"
#include "engine/report/metrics_block.h"
#include "engine/report/sample_inputs.h"
#include "engine/runtime/session.h"
#include "engine/runtime/threads.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

using ::testing::HasSubstr;

std::string ModelPath(const std::string& name) {
  return absl::StrCat(KILN_SOURCE_DIR, "/tests/models/", name, "/model.onnx");
}

std::vector<ir::Tensor> SampleOf(const std::string& name) {
  std::string path =
      absl::StrCat(KILN_SOURCE_DIR, "/tests/models/", name, "/test_data_set_0/input_0.pb");
  auto bytes = import::ReadFile(path, int64_t{1} << 30);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  auto t = import::ParseTensorProto(*bytes, path);
  EXPECT_TRUE(t.ok()) << t.status();
  return {*t};
}

struct Reported {
  builder::BuildResult built;
  std::shared_ptr<const plan::Engine> engine;
  v1::AccuracyReport report;
};

// As `kiln build --report` does: the build keeps the reference and the engine in memory
// (`keep_reference`); else the report builds the reference from the model bytes and runs the
// engine loaded from the blob.
absl::StatusOr<Reported> BuildWithReport(const std::string& model, builder::BuildOptions opts,
                                         builder::ReportOptions ro = {},
                                         bool keep_reference = true) {
  Reported r;
  ASSIGN_OR_RETURN(std::string bytes, import::ReadFile(ModelPath(model), int64_t{1} << 30));
  opts.keep_reference = keep_reference;
  ASSIGN_OR_RETURN(r.built, builder::BuildEngine(bytes, opts, nullptr));
  if (keep_reference) {
    r.engine = r.built.engine;
    if (!r.engine) return absl::InternalError("keep_reference kept no engine");
  } else {
    ASSIGN_OR_RETURN(r.engine,
                     plan::LoadEngineFromBytes(std::make_shared<const std::string>(r.built.blob)));
  }
  ASSIGN_OR_RETURN(r.report, builder::BuildAccuracyReport(bytes, opts, r.built, r.engine,
                                                          std::move(r.built.reference),
                                                          {SampleOf(model)}, ro, nullptr));
  return r;
}

builder::BuildOptions Policy(const std::string& p, bool fusion = true) {
  builder::BuildOptions o;
  o.policy = p;
  o.fusion.enabled = fusion;
  return o;
}

const v1::TensorReport* FindTensor(const v1::AccuracyReport& rep, const std::string& node) {
  for (const auto& t : rep.tensors()) {
    if (t.node_name() == node) return &t;
  }
  return nullptr;
}

TEST(ErrorAccumulatorTest, MetricsOfKnownPairs) {
  report::Tolerance tol{0.1, 0.0};
  report::ErrorAccumulator acc;
  const float ref[] = {1, 2, 4, -8, NAN};
  const float x[] = {1, 2.5f, INFINITY, -8.05f, 3};
  acc.Add(x, ref, 5, tol);
  v1::ErrorStats s = acc.Finish();
  EXPECT_EQ(s.elements(), 5);  // the NaN reference is compared too
  EXPECT_EQ(s.inf_count(), 1);
  EXPECT_EQ(s.nan_count(), 0);
  EXPECT_EQ(s.ref_nan_count(), 1);
  EXPECT_EQ(s.nonfinite_mismatch_count(), 1);  // 3 where the reference is NaN
  EXPECT_NEAR(s.max_abs(), 0.5, 1e-6);
  EXPECT_NEAR(s.mean_abs(), (0 + 0.5 + 0.05) / 3, 1e-6);
  EXPECT_NEAR(s.max_rel(), 0.25, 1e-6);
  // Outside: 2.5 vs 2 (0.5 > 0.1), the Inf and the 3 for a NaN; -8.05 vs -8 is inside.
  EXPECT_NEAR(s.fraction_outside(), 0.6, 1e-12);
  double dot = 1 * 1 + 2.5 * 2 + 8.05 * 8, xx = 1 + 6.25 + 8.05 * 8.05, rr = 1 + 4 + 64;
  EXPECT_NEAR(s.cosine(), dot / std::sqrt(xx * rr), 1e-6);
  EXPECT_NEAR(s.snr_db(), 10 * std::log10(rr / (0.25 + 0.0025)), 1e-3);
}

TEST(ErrorAccumulatorTest, IdenticalTensorsHaveInfiniteSnrAndUnitCosine) {
  report::ErrorAccumulator acc;
  const float v[] = {0.5f, -3, 7};
  acc.Add(v, v, 3, report::Tolerance{});
  v1::ErrorStats s = acc.Finish();
  EXPECT_EQ(s.max_abs(), 0);
  EXPECT_TRUE(std::isinf(s.snr_db()));
  EXPECT_NEAR(s.cosine(), 1, 1e-12);
  EXPECT_EQ(s.fraction_outside(), 0);
}

// Large tensors are split over the threads; the stats must not depend on how many there are,
// nor on the dtype the engine value is stored in beyond its rounding.
TEST(ErrorAccumulatorTest, LargeTensorsGiveTheSameStatsOnAnyThreadCount) {
  const int64_t n = 300001;  // many blocks and a partial one
  auto ref = ir::Tensor::Allocate(DataType::kF32, {n});
  auto x = ir::Tensor::Allocate(DataType::kF32, {n});
  ASSERT_TRUE(ref.ok() && x.ok());
  for (int64_t i = 0; i < n; ++i) {
    ref->data<float>()[i] = std::sin(0.001f * i) * 100;
    x->data<float>()[i] = ref->data<float>()[i] * (1 + 1e-3f * std::cos(0.37f * i));
  }
  x->data<float>()[123456] = INFINITY;
  x->data<float>()[200000] = NAN;
  auto bf16 = report::FromF32(*x, DataType::kBF16);
  ASSERT_TRUE(bf16.ok());
  const int before = runtime::Threads();
  std::string stats[2][2];
  for (int threads : {1, 2}) {
    ASSERT_TRUE(runtime::SetThreads(threads).ok());
    const ir::Tensor* values[2] = {&*x, &*bf16};
    for (int d = 0; d < 2; ++d) {
      report::ErrorAccumulator acc;
      ASSERT_TRUE(acc.AddTensor(*values[d], *ref, report::Tolerance{}).ok());
      v1::ErrorStats s = acc.Finish();
      EXPECT_EQ(s.inf_count(), 1);
      EXPECT_EQ(s.nan_count(), 1);
      EXPECT_EQ(s.elements(), n);
      stats[threads - 1][d] = s.SerializeAsString();
    }
  }
  ASSERT_TRUE(runtime::SetThreads(before).ok());
  EXPECT_EQ(stats[0][0], stats[1][0]);
  EXPECT_EQ(stats[0][1], stats[1][1]);
  // The bf16 values compared as the f32 values they round to give the same stats.
  auto rounded = report::RoundedF32(*x, DataType::kBF16);
  ASSERT_TRUE(rounded.ok());
  report::ErrorAccumulator acc;
  ASSERT_TRUE(acc.AddTensor(*rounded, *ref, report::Tolerance{}).ok());
  EXPECT_EQ(acc.Finish().SerializeAsString(), stats[0][1]);
}

// Two tensors compared in one pass over the reference give the stats of two separate passes.
TEST(ErrorAccumulatorTest, PairedPassMatchesTwoPasses) {
  const int64_t n = 100003;  // parallel blocks and a partial one
  auto ref = ir::Tensor::Allocate(DataType::kF32, {n});
  auto x = ir::Tensor::Allocate(DataType::kF32, {n});
  ASSERT_TRUE(ref.ok() && x.ok());
  for (int64_t i = 0; i < n; ++i) {
    ref->data<float>()[i] = std::cos(0.01f * i) * 30;
    x->data<float>()[i] = ref->data<float>()[i] + 1e-2f * std::sin(0.7f * i);
  }
  x->data<float>()[777] = NAN;  // one block the slow way
  auto y = report::FromF32(*ref, DataType::kBF16);
  ASSERT_TRUE(y.ok());
  report::ErrorAccumulator a1, b1, a2, b2;
  ASSERT_TRUE(a1.AddTensor(*x, *ref, report::Tolerance{}).ok());
  ASSERT_TRUE(b1.AddTensor(*y, *ref, report::Tolerance{}).ok());
  ASSERT_TRUE(a2.AddTensorPair(*x, b2, *y, *ref, report::Tolerance{}).ok());
  EXPECT_EQ(a1.Finish().SerializeAsString(), a2.Finish().SerializeAsString());
  EXPECT_EQ(b1.Finish().SerializeAsString(), b2.Finish().SerializeAsString());
  EXPECT_EQ(a2.Finish().nan_count(), 1);
  auto short_x = ir::Tensor::Allocate(DataType::kF32, {n - 1});
  ASSERT_TRUE(short_x.ok());
  EXPECT_FALSE(a2.AddTensorPair(*x, b2, *short_x, *ref, report::Tolerance{}).ok());
}

// The AVX-512 block sums against the portable loop: maxima and the count outside tolerance
// exactly (max_rel from the candidates it divides must be the max of every quotient). Its sums of
// nonnegative terms go through fp32 runs of at most 16 terms per lane (relative error at most
// 15 * 2^-24 < 1e-6, then double), so within 1e-6 of the portable double sums; values whose
// squares fp32 cannot hold (beyond 1e18, or all below 1e-12) take the portable loop: equal sums.
TEST(ErrorAccumulatorTest, VectorBlockSumsMatchThePortableLoop) {
  const uint64_t avx512 = kernels::IsaCpuFeatures(kernels::Isa::kAvx512);
  if ((DetectCpuFeatures() & avx512) != avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::vector<float> ref(4096), x(4096), x2(4096);
  uint32_t state = 12345;
  auto next = [&state]() {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / 16777216.0f;  // [0, 1)
  };
  for (int i = 0; i < 4096; ++i) {
    ref[i] = (next() - 0.5f) * 20;
    x[i] = ref[i] + (next() - 0.5f) * 0.05f;
    x2[i] = ref[i] * (1 + (next() - 0.5f) * 1e-3f);
  }
  // Exact zeros, values near zero (d = 1e-6) and subnormals.
  ref[3] = 0, x[3] = 0;
  ref[5] = 0, x[5] = 1e-7f;
  ref[7] = 1e-39f, x[7] = 3e-39f;
  x2[3] = ref[3], x2[5] = ref[5], x2[7] = ref[7];
  // x2's largest quotient comes late and only 0.5% above an early one: a lane must not skip it.
  ref[1000] = ref[3500] = 1;
  x2[1000] = 1 + 1e-3f;
  x2[3500] = 1 + 1.005e-3f;
  for (int64_t n : {int64_t{4096}, int64_t{4095}, int64_t{17}, int64_t{1}}) {
    // 0: as above; 1: a huge value (its quotient by 1e-6 overflows to Inf); 2: everything tiny.
    for (int variant = 0; variant < 3; ++variant) {
      SCOPED_TRACE(absl::StrCat("n ", n, " variant ", variant));
      std::vector<float> xv = x, x2v = x2, rv = ref;
      if (variant == 1) xv[0] = 3e38f, rv[0] = 1e-30f;
      if (variant == 2) {
        for (int i = 0; i < 4096; ++i) xv[i] *= 1e-20f, x2v[i] *= 1e-20f, rv[i] *= 1e-20f;
      }
      report::internal::BlockSums a1, a2, v[2];
      const bool f1 = report::internal::AddFiniteBlock(xv.data(), rv.data(), n, 1e-3f, 1e-2f, a1);
      const bool f2 = report::internal::AddFiniteBlock(x2v.data(), rv.data(), n, 1e-3f, 1e-2f, a2);
      const float* xs[2] = {xv.data(), x2v.data()};
      bool fin[2];
      report::internal::AddFiniteBlocksAvx512(xs, 2, rv.data(), n, 1e-3f, 1e-2f, v, fin);
      ASSERT_TRUE(f1 && f2 && fin[0] && fin[1]);
      const report::internal::BlockSums* portable[2] = {&a1, &a2};
      for (int w = 0; w < 2; ++w) {
        const auto& p = *portable[w];
        EXPECT_EQ(v[w].max_abs, p.max_abs);
        EXPECT_EQ(v[w].max_rel, p.max_rel);
        EXPECT_EQ(v[w].outside, p.outside);
        const bool exact = variant == 2 || (variant == 1 && w == 0);  // the portable loop
        const double rel = exact ? 0 : 1e-6;
        EXPECT_NEAR(v[w].sum_abs, p.sum_abs, rel * p.sum_abs);
        EXPECT_NEAR(v[w].xx, p.xx, rel * p.xx);
        EXPECT_NEAR(v[w].rr, p.rr, rel * p.rr);
        EXPECT_NEAR(v[w].ee, p.ee, rel * p.ee);
      }
    }
  }
  // A non-finite element fails its way only; the other way's sums are still added.
  x[100] = NAN;
  const float* xs[2] = {x.data(), x2.data()};
  report::internal::BlockSums v[2];
  bool fin[2];
  report::internal::AddFiniteBlocksAvx512(xs, 2, ref.data(), 4096, 1e-3f, 1e-2f, v, fin);
  EXPECT_FALSE(fin[0]);
  EXPECT_TRUE(fin[1]);
  EXPECT_EQ(v[0].sum_abs, 0);
  EXPECT_GT(v[1].sum_abs, 0);
  ref[200] = INFINITY;
  report::internal::AddFiniteBlocksAvx512(xs, 2, ref.data(), 4096, 1e-3f, 1e-2f, v, fin);
  EXPECT_FALSE(fin[0] || fin[1]);
}

TEST(SourceTensorNameTest, StripsOnlyDtypeAndLayoutSuffixes) {
  EXPECT_EQ(report::SourceTensorName("x::f16"), "x");
  EXPECT_EQ(report::SourceTensorName("x::nhwc"), "x");
  EXPECT_EQ(report::SourceTensorName("x::bf16::nhwc"), "x");
  EXPECT_EQ(report::SourceTensorName("x::nchw"), "x::nchw");
  EXPECT_EQ(report::SourceTensorName("x::bf16::f32"), "x");
  EXPECT_EQ(report::SourceTensorName("onnx::Conv_78"), "onnx::Conv_78");
  EXPECT_EQ(report::SourceTensorName("onnx::Conv_78::f16"), "onnx::Conv_78");
}

TEST(ExactGlobTest, EscapesGlobCharacters) {
  EXPECT_EQ(builder::ExactGlob("/a/b"), "/a/b");
  EXPECT_EQ(builder::ExactGlob("a*b?[c]"), "a[*]b[?][[]c]");
}

// Issue done-means: the fp16 report (per-node rounding, fusion off) names the LayerNorm nodes,
// the Pow output first, with Inf counts; the suggested policy raises them and passes when built.
TEST(AccuracyReportTest, Fp16OverflowNamesTheLayerNormAndTheSuggestionPasses) {
  auto r = BuildWithReport("ln_overflow_classifier", Policy("fp16", /*fusion=*/false));
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::AccuracyReport& rep = r->report;
  EXPECT_FALSE(rep.pass());
  ASSERT_EQ(rep.outputs_size(), 1);
  EXPECT_FALSE(rep.outputs(0).pass());
  ASSERT_GT(rep.worst_offenders_size(), 0);
  const v1::Offender& first = rep.worst_offenders(0);
  EXPECT_EQ(first.op_type(), "Pow") << first.node_name();
  EXPECT_THAT(first.why(), HasSubstr("Inf"));
  EXPECT_THAT(first.pattern(), HasSubstr("layernorm@"));
  const v1::TensorReport* pow = FindTensor(rep, first.node_name());
  ASSERT_NE(pow, nullptr);
  EXPECT_GT(pow->introduced().inf_count(), 0);
  EXPECT_TRUE(pow->ref_exceeds_fp16());
  EXPECT_GT(pow->ref_max_abs(), 65504);
  // Every offender sits in a LayerNorm instance.
  for (const auto& o : rep.worst_offenders()) EXPECT_THAT(o.pattern(), HasSubstr("layernorm@"));

  const v1::Suggestion& sug = rep.suggestion();
  ASSERT_TRUE(sug.searched());
  ASSERT_TRUE(sug.found()) << sug.note();
  EXPECT_THAT(sug.policy_text(), HasSubstr("preset = fp16"));
  EXPECT_THAT(sug.policy_text(), HasSubstr(absl::StrCat("name:", first.node_name(), " = fp32")));
  EXPECT_LT(sug.output_max_abs_after(), sug.output_max_abs_before());
  EXPECT_GT(sug.latency_ms_before(), 0);
  EXPECT_GT(sug.latency_ms_after(), 0);

  // Built independently from the policy file text, the suggestion passes.
  std::string file = ::testing::TempDir() + "/suggested.policy";
  std::ofstream(file) << sug.policy_text();
  builder::ReportOptions no_search;
  no_search.suggest = false;
  auto again = BuildWithReport("ln_overflow_classifier", Policy(file, false), no_search);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->report.pass());
}

// The reference the build compiles from its own import (sharing its weights, never
// serialized) with the engine it keeps in memory, and the reference built from the model bytes
// with the engine loaded from the blob, give the same report, number for number.
TEST(AccuracyReportTest, KeptReferenceGivesTheSameReportAsABuiltOne) {
  builder::ReportOptions no_search;
  no_search.suggest = false;
  for (const char* policy : {"fp16", "bf16-layernorm"}) {
    auto kept = BuildWithReport("ln_overflow_classifier", Policy(policy), no_search, true);
    auto built = BuildWithReport("ln_overflow_classifier", Policy(policy), no_search, false);
    ASSERT_TRUE(kept.ok()) << kept.status();
    ASSERT_TRUE(built.ok()) << built.status();
    v1::AccuracyReport a = kept->report, b = built->report;
    ASSERT_GT(a.tensors_size(), 10);
    a.clear_report_ms();
    b.clear_report_ms();
    EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString()) << policy;
  }
}

TEST(AccuracyReportTest, Fp32LayerNormPasses) {
  auto r = BuildWithReport("ln_overflow_classifier", Policy("fp32-layernorm"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->report.pass());
  EXPECT_FALSE(r->report.suggestion().searched());
}

TEST(AccuracyReportTest, ModelWithoutAPrecisionProblemPassesAndSuggestsNothing) {
  auto r = BuildWithReport("mobilenet_tiny", Policy("fp16"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->report.pass());
  EXPECT_FALSE(r->report.suggestion().searched());
  EXPECT_TRUE(r->report.suggestion().policy_text().empty());
  EXPECT_GT(r->report.tensors_size(), 10);
  // fp16, but inside the convolution chains, whose interior (convolutions and their Clips) stays
  // fp32 (passes/conv_chain.h).
  int interior = 0;
  for (const auto& t : r->report.tensors()) {
    if (t.effective_precision() == "fp32") {
      EXPECT_TRUE(t.inside_fused_kernel()) << t.tensor();
      EXPECT_TRUE(t.op_type() == "Conv" || t.op_type() == "Clip") << t.tensor();
      ++interior;
    } else {
      EXPECT_EQ(t.effective_precision(), "fp16") << t.tensor();
    }
  }
  EXPECT_GT(interior, 0);
}

// Taps only read: the outputs of a tapped run are bit-identical to those of a plain run.
TEST(AccuracyReportTest, TappedRunIsBitIdenticalToAnUntappedRun) {
  for (const char* policy : {"fp16", "bf16", "fp32-layernorm"}) {
    builder::BuildOptions opts = Policy(policy);
    auto built = builder::BuildEngineFromFile(ModelPath("ln_overflow_classifier"), opts, nullptr);
    ASSERT_TRUE(built.ok()) << built.status();
    auto engine = plan::LoadEngineFromBytes(std::make_shared<const std::string>(built->blob));
    ASSERT_TRUE(engine.ok());
    std::shared_ptr<const plan::Engine> e = *std::move(engine);
    builder::BuildOptions ref_opts = Policy("fp32", false);
    auto ref_built =
        builder::BuildEngineFromFile(ModelPath("ln_overflow_classifier"), ref_opts, nullptr);
    ASSERT_TRUE(ref_built.ok());
    auto ref = plan::LoadEngineFromBytes(std::make_shared<const std::string>(ref_built->blob));
    ASSERT_TRUE(ref.ok());
    auto analysis = report::EngineAnalysis::Create(e, *std::move(ref), report::Tolerance{});
    ASSERT_TRUE(analysis.ok()) << analysis.status();
    auto sample = SampleOf("ln_overflow_classifier");
    ASSERT_TRUE((*analysis)->AddSample(sample).ok());
    auto session = runtime::Session::Create(e);
    ASSERT_TRUE(session.ok());
    auto plain = (*session)->Run(sample);
    ASSERT_TRUE(plain.ok());
    const auto& tapped = (*analysis)->last_outputs();
    ASSERT_EQ(tapped.size(), plain->size());
    for (size_t i = 0; i < tapped.size(); ++i) {
      ASSERT_EQ(tapped[i].byte_size(), (*plain)[i].byte_size());
      EXPECT_EQ(std::memcmp(tapped[i].raw_data(), (*plain)[i].raw_data(), tapped[i].byte_size()), 0)
          << policy << " output " << i;
    }
  }
}

// Samples run side by side (one per thread) give the report of samples added one by one, to
// the bit: each sample's sums are merged in sample order whatever ran at once.
TEST(AccuracyReportTest, SamplesSideBySideGiveTheReportOfOneByOne) {
  auto built = builder::BuildEngineFromFile(ModelPath("ln_overflow_classifier"),
                                            Policy("bf16-layernorm"), nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  auto engine = plan::LoadEngineFromBytes(std::make_shared<const std::string>(built->blob));
  ASSERT_TRUE(engine.ok());
  std::shared_ptr<const plan::Engine> e = *std::move(engine);
  auto ref_built = builder::BuildEngineFromFile(ModelPath("ln_overflow_classifier"),
                                                Policy("fp32", false), nullptr);
  ASSERT_TRUE(ref_built.ok());
  auto loaded = plan::LoadEngineFromBytes(std::make_shared<const std::string>(ref_built->blob));
  ASSERT_TRUE(loaded.ok());
  std::shared_ptr<const plan::Engine> ref = *std::move(loaded);
  report::SampleOptions so;
  so.seed = 3;
  so.count = 5;  // two rounds of two and one alone on two threads
  auto samples = report::GenerateSamples(*e->graph, so);
  ASSERT_TRUE(samples.ok()) << samples.status();
  const int before = runtime::Threads();
  ASSERT_TRUE(runtime::SetThreads(2).ok());
  auto together = report::EngineAnalysis::Create(e, ref, report::Tolerance{});
  auto alone = report::EngineAnalysis::Create(e, ref, report::Tolerance{});
  ASSERT_TRUE(together.ok() && alone.ok());
  std::vector<size_t> order;
  ASSERT_TRUE((*together)
                  ->AddSamples(samples->sets, [&](size_t i, const auto&) { order.push_back(i); })
                  .ok());
  for (const auto& s : samples->sets) ASSERT_TRUE((*alone)->AddSample(s).ok());
  ASSERT_TRUE(runtime::SetThreads(before).ok());
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3, 4}));
  v1::AccuracyReport a = (*together)->Report(), b = (*alone)->Report();
  EXPECT_EQ(a.samples(), 5);
  ASSERT_GT(a.tensors_size(), 10);
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
}

// A kernel whose inputs in the tapped run are the reference inputs bit for bit is not run again
// alone (its results are the tapped run's): at fp32 some kernels are, at fp16 almost none, and
// either way the report is the one of running every kernel alone.
TEST(AccuracyReportTest, KernelsFedTheReferenceInputsReuseTheTappedRun) {
  auto ref_built = builder::BuildEngineFromFile(ModelPath("ln_overflow_classifier"),
                                                Policy("fp32", false), nullptr);
  ASSERT_TRUE(ref_built.ok()) << ref_built.status();
  auto loaded = plan::LoadEngineFromBytes(std::make_shared<const std::string>(ref_built->blob));
  ASSERT_TRUE(loaded.ok());
  std::shared_ptr<const plan::Engine> ref = *std::move(loaded);
  report::SampleOptions so;
  so.seed = 5;
  so.count = 2;
  auto samples = report::GenerateSamples(*ref->graph, so);
  ASSERT_TRUE(samples.ok()) << samples.status();
  for (const std::string policy : {"fp32", "fp16"}) {
    SCOPED_TRACE(policy);
    auto built =
        builder::BuildEngineFromFile(ModelPath("ln_overflow_classifier"), Policy(policy), nullptr);
    ASSERT_TRUE(built.ok()) << built.status();
    auto engine = plan::LoadEngineFromBytes(std::make_shared<const std::string>(built->blob));
    ASSERT_TRUE(engine.ok());
    std::shared_ptr<const plan::Engine> e = *std::move(engine);
    auto reusing = report::EngineAnalysis::Create(e, ref, report::Tolerance{});
    auto running = report::EngineAnalysis::Create(e, ref, report::Tolerance{});
    ASSERT_TRUE(reusing.ok() && running.ok());
    (*running)->set_reuse_tapped_runs(false);
    int reused = 0, alone = 0, alone_without_reuse = 0;
    ASSERT_TRUE((*reusing)
                    ->AddSamples(samples->sets,
                                 [&](size_t, const report::EngineAnalysis::SampleStats& s) {
                                   reused += s.kernels_reused;
                                   alone += s.kernels_alone;
                                 })
                    .ok());
    ASSERT_TRUE((*running)
                    ->AddSamples(samples->sets,
                                 [&](size_t, const report::EngineAnalysis::SampleStats& s) {
                                   EXPECT_EQ(s.kernels_reused, 0);
                                   alone_without_reuse += s.kernels_alone;
                                 })
                    .ok());
    EXPECT_EQ(reused + alone, alone_without_reuse);
    if (policy == "fp32") {
      EXPECT_GT(reused, 0);  // those before the first fused kernel that sums in its own order
    } else {
      EXPECT_GT(alone, reused);
    }
    v1::AccuracyReport a = (*reusing)->Report(), b = (*running)->Report();
    ASSERT_GT(a.tensors_size(), 10);
    EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
  }
}

// Tensors inside fused kernels are reported, offered by the kernel (FusedMatMul's dot products)
// or recomputed from the kernel's inputs: at fp32 they match the reference closely, because the
// fused kernel and the reference both compute in fp32 and differ only in summation order (relative
// error of order n * 2^-24 for n-term sums).
TEST(AccuracyReportTest, TensorsInsideFusedKernelsAreReported) {
  auto r = BuildWithReport("ln_overflow_classifier", Policy("fp32"));
  ASSERT_TRUE(r.ok()) << r.status();
  int inside = 0;
  for (const auto& t : r->report.tensors()) {
    if (!t.inside_fused_kernel()) continue;
    ++inside;
    EXPECT_FALSE(t.fusion().empty()) << t.tensor();
    EXPECT_GT(t.accumulated().elements(), 0) << t.tensor();
    EXPECT_LE(t.accumulated().max_abs(), 1e-4 * std::max(1.0, t.ref_max_abs())) << t.tensor();
  }
  EXPECT_GT(inside, 0);
  EXPECT_TRUE(r->report.pass());
  // The MatMul a FusedMatMul keeps inside (its dot products, offered by the GEMM epilogue).
  const v1::TensorReport* mm = FindTensor(r->report, "/blocks.0/qkv/MatMul");
  ASSERT_NE(mm, nullptr);
  EXPECT_TRUE(mm->inside_fused_kernel());
  EXPECT_EQ(mm->kernel_op(), "FusedMatMul");
  // Every tensor of a decomposed LayerNorm appears, the Pow among them.
  const v1::TensorReport* pow = FindTensor(r->report, "/blocks.0/ln1/Pow");
  ASSERT_NE(pow, nullptr);
  EXPECT_TRUE(pow->inside_fused_kernel());
}

// Introduced and accumulated error are told apart: with fp16 everywhere, nodes
// downstream of a rounding inherit error they do not introduce.
TEST(AccuracyReportTest, SomeTensorsInheritMoreErrorThanTheyIntroduce) {
  auto r = BuildWithReport("bert_layernorm_op", Policy("fp16"));
  ASSERT_TRUE(r.ok()) << r.status();
  int inherits = 0;
  for (const auto& t : r->report.tensors()) {
    if (t.accumulated().max_abs() > 2 * t.introduced().max_abs()) ++inherits;
  }
  EXPECT_GT(inherits, 0);
}

}  // namespace
}  // namespace kiln
