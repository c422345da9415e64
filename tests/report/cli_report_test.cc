// The accuracy report through the real `kiln` binary: `kiln build` with sample inputs writes the
// JSON report, the HTML page and the suggested policy; `kiln compare` compares two engines;
// bad report flags are usage errors that cost no build.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "kiln/v1/report.pb.h"
#include "tests/testing/cli_runner.h"
#include "tests/testing/onnx_models.h"

namespace kiln {
namespace {

using ::kiln::testing::CliResult;
using ::kiln::testing::Describe;
using ::kiln::testing::RunBinary;
using ::kiln::testing::Slurp;
using ::kiln::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

std::string ModelDir(const std::string& name) {
  return absl::StrCat(KILN_SOURCE_DIR, "/tests/models/", name);
}

CliResult Kiln(const TempDir& dir, const std::vector<std::string>& args) {
  return RunBinary(dir, KILN_BIN, args, 120);
}

class CliReport : public ::testing::Test {
 protected:
  TempDir dir_;
};

TEST_F(CliReport, BuildWritesTheReportTheHtmlAndTheSuggestedPolicy) {
  std::string m = ModelDir("ln_overflow_classifier");
  CliResult r = Kiln(
      dir_, {"build", m + "/model.onnx", "--policy", "fp16", "--fusion", "off", "--inputs",
             m + "/test_data_set_0", "-o", dir_.File("e.kiln"), "--report", dir_.File("r.json"),
             "--html", dir_.File("r.html"), "--suggest-policy", dir_.File("s.policy"), "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("FAIL"));
  EXPECT_THAT(r.out, HasSubstr("/Pow"));
  // The JSON is the documented message (proto3 JSON mapping): it parses back.
  v1::AccuracyReport rep;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(Slurp(dir_.File("r.json")), &rep).ok());
  EXPECT_FALSE(rep.pass());
  EXPECT_GT(rep.tensors_size(), 50);
  EXPECT_EQ(rep.worst_offenders(0).op_type(), "Pow");
  EXPECT_THAT(Slurp(dir_.File("r.html")), HasSubstr("<svg"));
  std::string policy = Slurp(dir_.File("s.policy"));
  EXPECT_THAT(policy, HasSubstr("preset = fp16"));
  EXPECT_THAT(policy, HasSubstr("/Pow = fp32"));

  // The suggested policy, built, passes.
  CliResult again =
      Kiln(dir_, {"build", m + "/model.onnx", "--policy", dir_.File("s.policy"), "--fusion", "off",
                  "--inputs", m + "/test_data_set_0", "-o", dir_.File("s.kiln"), "--quiet"});
  ASSERT_EQ(again.exit_code, 0) << Describe(again);
  EXPECT_THAT(again.out, HasSubstr("PASS"));
  EXPECT_THAT(again.out, Not(HasSubstr("FAIL")));
}

TEST_F(CliReport, GeneratedSamplesAndNoSuggestionWhenEverythingPasses) {
  CliResult r =
      Kiln(dir_, {"build", ModelDir("gpt2_causal") + "/model.onnx", "--policy", "fp32-layernorm",
                  "--seed", "3", "--samples", "2", "-o", dir_.File("e.kiln"), "--suggest-policy",
                  dir_.File("s.policy"), "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("PASS"));
  EXPECT_THAT(r.out, HasSubstr("generated (seed 3"));
  EXPECT_THAT(r.out, HasSubstr("no policy suggested"));
  EXPECT_EQ(Slurp(dir_.File("s.policy")), "");  // not written
}

TEST_F(CliReport, CompareFusedAgainstUnfused) {
  std::string m = ModelDir("bert_layernorm_decomposed");
  for (const char* f : {"on", "off"}) {
    CliResult b = Kiln(dir_, {"build", m + "/model.onnx", "--policy", "fp16", "--fusion", f, "-o",
                              dir_.File(absl::StrCat(f, ".kiln")), "--quiet"});
    ASSERT_EQ(b.exit_code, 0) << Describe(b);
  }
  CliResult r = Kiln(dir_, {"compare", dir_.File("on.kiln"), dir_.File("off.kiln"), "--inputs",
                            m + "/test_data_set_0", "--report", dir_.File("c.json")});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("tensor (A vs B)"));
  v1::AccuracyReport rep;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(Slurp(dir_.File("c.json")), &rep).ok());
  EXPECT_GT(rep.tensors_size(), 10);
  ASSERT_EQ(rep.outputs_size(), 1);
  // Fused and unfused fp16 engines differ only by rounding (the fused kernels keep fp32
  // inside), so their outputs agree well inside the fp16 report tolerance.
  EXPECT_TRUE(rep.outputs(0).pass()) << rep.outputs(0).DebugString();
}

TEST_F(CliReport, CompareRefusesEnginesOfDifferentModels) {
  for (const char* m : {"mobilenet_tiny", "squeezenet_tiny"}) {
    CliResult b = Kiln(dir_, {"build", ModelDir(m) + "/model.onnx", "-o",
                              dir_.File(absl::StrCat(m, ".kiln")), "--quiet"});
    ASSERT_EQ(b.exit_code, 0) << Describe(b);
  }
  CliResult r = Kiln(dir_, {"compare", dir_.File("mobilenet_tiny.kiln"),
                            dir_.File("squeezenet_tiny.kiln"), "--seed", "0"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("different models"));
}

TEST_F(CliReport, BadReportFlagsAreUsageErrors) {
  std::string model = ModelDir("mobilenet_tiny") + "/model.onnx";
  struct Case {
    std::vector<std::string> flags;
    std::string says;
  } cases[] = {
      {{"--seed", "x"}, "--seed"},
      {{"--seed", "1", "--samples", "0"}, "--samples"},
      {{"--seed", "1", "--atol", "-1"}, "--atol"},
      {{"--seed", "1", "--input-range", "image=1"}, "--input-range"},
      {{"--seed", "1", "--shape", "image=1xa"}, "--shape"},
      {{"--rtol", "0.1"}, "applies to the accuracy report"},
      {{"--inputs", ModelDir("mobilenet_tiny") + "/test_data_set_0", "--seed", "1"},
       "cannot go with --inputs"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"build", model, "-o", dir_.File("e.kiln")};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    CliResult r = Kiln(dir_, args);
    EXPECT_EQ(r.exit_code, 2) << Describe(r);
    EXPECT_THAT(r.err, HasSubstr(c.says)) << Describe(r);
  }
}

TEST_F(CliReport, UnknownInputInAShapeFlagNamesTheInputs) {
  CliResult r = Kiln(dir_, {"build", ModelDir("mobilenet_tiny") + "/model.onnx", "-o",
                            dir_.File("e.kiln"), "--seed", "1", "--shape", "nope=1x3"});
  EXPECT_NE(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("nope"));
  EXPECT_THAT(r.err, HasSubstr("image"));
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(CliBench, PrintsLatencyWithTheThreadCount) {
  TempDir dir;
  CliResult b = Kiln(dir, {"build", ModelDir("mobilenet_tiny") + "/model.onnx", "-o",
                           dir.File("e.kiln"), "--quiet"});
  ASSERT_EQ(b.exit_code, 0) << Describe(b);
  CliResult r = Kiln(dir, {"bench", dir.File("e.kiln"), "--runs", "3", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("threads 1 (OpenMP wait "));  // cli_threads_test checks which
  EXPECT_THAT(r.out, HasSubstr("), 3 run(s)"));
  EXPECT_THAT(r.out, HasSubstr("median"));
  EXPECT_THAT(r.out, HasSubstr("load (open, verify, ready)"));
  EXPECT_THAT(r.out, HasSubstr("first run (with the kernels' one-time setup)"));
  // --profile: every kernel timed, by op and kernel kind, the slowest named.
  CliResult p = Kiln(dir, {"bench", dir.File("e.kiln"), "--runs", "2", "--profile"});
  ASSERT_EQ(p.exit_code, 0) << Describe(p);
  EXPECT_THAT(p.out, HasSubstr("profile: 2 run(s) with a timestamp after each of"));
  EXPECT_THAT(p.out, HasSubstr("op and kernel"));
  EXPECT_THAT(p.out, HasSubstr("slowest kernels"));
  EXPECT_THAT(p.out, ::testing::ContainsRegex("Conv +cpu/"));
  CliResult bad = Kiln(dir, {"bench", dir.File("e.kiln"), "--runs", "0"});
  EXPECT_EQ(bad.exit_code, 2) << Describe(bad);
  CliResult bad_threads = Kiln(dir, {"run", dir.File("e.kiln"), "--inputs", dir.path(), "--outputs",
                                     dir.path(), "--threads", "-2"});
  EXPECT_EQ(bad_threads.exit_code, 2) << Describe(bad_threads);
}

}  // namespace
}  // namespace kiln
