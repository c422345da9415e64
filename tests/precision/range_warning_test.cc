// Issue 28: with sample inputs, `kiln build` warns about every tensor held in fp16/bf16 whose
// fp32 reference exceeds that format, naming its node and the node's assigned precision, in
// the build log and in the report (`--report`, notes). ln_overflow_classifier's decomposed
// LayerNorms square hidden states ~300: (x - mean)^2 reaches 1.8e6 > 65504.
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
using ::testing::AllOf;
using ::testing::HasSubstr;

struct Built {
  CliResult cli;
  v1::AccuracyReport report;
  std::vector<std::string> range_notes;
};

Built Build(const TempDir& dir, const std::string& policy) {
  std::string m = absl::StrCat(KILN_SOURCE_DIR, "/tests/models/ln_overflow_classifier");
  Built b;
  b.cli = RunBinary(dir, KILN_BIN,
                    {"build", m + "/model.onnx", "--policy", policy, "--fusion", "off", "--inputs",
                     m + "/test_data_set_0", "-o", dir.File("e.kiln"), "--report",
                     dir.File("r.json"), "--no-suggest"},
                    120);
  EXPECT_EQ(b.cli.exit_code, 0) << Describe(b.cli);
  EXPECT_TRUE(
      google::protobuf::util::JsonStringToMessage(Slurp(dir.File("r.json")), &b.report).ok());
  for (const std::string& n : b.report.notes()) {
    if (n.find("warning: range:") == 0) b.range_notes.push_back(n);
  }
  return b;
}

TEST(RangeWarning, Fp16TensorsBeyond65504AreNamedInTheLogAndTheReport) {
  TempDir dir;
  Built b = Build(dir, "fp16");
  // The first LayerNorm's square: named with its node, assigned precision and the range.
  const std::string pow =
      "tensor '/blocks.0/ln1/Pow_output_0' of [node '/blocks.0/ln1/Pow' "
      "(Pow) #4] assigned fp16, held fp16: its fp32 reference reaches ";
  EXPECT_THAT(b.cli.out + b.cli.err,
              AllOf(HasSubstr("warning range: " + pow), HasSubstr("> fp16 max 65504")));
  ASSERT_FALSE(b.range_notes.empty());
  EXPECT_THAT(b.range_notes[0], HasSubstr(pow));
  // Exactly the tensors the report flags, fp16-held, are warned about.
  int flagged = 0;
  for (const auto& t : b.report.tensors()) {
    flagged += t.effective_precision() == "fp16" && t.ref_exceeds_fp16();
  }
  EXPECT_GT(flagged, 0);
  EXPECT_EQ(static_cast<int>(b.range_notes.size()), std::min(flagged, 20) + (flagged > 20));
}

TEST(RangeWarning, NoneWhenTheLayerNormsAreFp32) {
  // fp32-layernorm holds those tensors in fp32: nothing in reduced precision exceeds its range
  // (the flags on the fp32 tensors stay, as telemetry).
  TempDir dir;
  Built b = Build(dir, "fp32-layernorm");
  EXPECT_TRUE(b.range_notes.empty()) << b.range_notes[0];
  EXPECT_THAT(b.cli.out + b.cli.err, ::testing::Not(HasSubstr("warning range:")));
  bool telemetry = false;
  for (const auto& t : b.report.tensors()) telemetry |= t.ref_exceeds_fp16();
  EXPECT_TRUE(telemetry);
}

}  // namespace
}  // namespace kiln
