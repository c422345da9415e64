// The real `kiln` binary on hostile files: exit 1 with a clear message on stderr, never a signal
// (crash, core dump) or a hang; usage errors exit 2 and print the usage.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/builder/builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/testing/cli_runner.h"
#include "tests/testing/onnx_models.h"

#ifndef KILN_BIN
#error "KILN_BIN must be the path of the kiln binary"
#endif

namespace kiln {
namespace {

using ::kiln::testing::AddOnnxNode;
using ::kiln::testing::AddReluMulModel;
using ::kiln::testing::AddTensorValueInfo;
using ::kiln::testing::CliResult;
using ::kiln::testing::Describe;
using ::kiln::testing::RunBinary;
using ::kiln::testing::SerializeModel;
using ::kiln::testing::Slurp;
using ::kiln::testing::TempDir;
using ::testing::HasSubstr;

// Runs `timeout 60 kiln ARGS...` with stdout and stderr captured in files of `dir`.
CliResult RunKiln(const TempDir& dir, const std::vector<std::string>& args) {
  return RunBinary(dir, KILN_BIN, args);
}

// Expects a clean error exit (code 1, not a signal, not a timeout) whose stderr names each part.
void ExpectCleanError(const CliResult& r, const std::vector<std::string>& parts) {
  ASSERT_TRUE(r.exited) << "killed by a signal: " << Describe(r);
  ASSERT_NE(r.exit_code, 124) << "timed out: " << Describe(r);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("error")) << Describe(r);
  for (const auto& p : parts) EXPECT_THAT(r.err, HasSubstr(p)) << Describe(r);
}

// Expects a usage error: code 2 and the usage text.
void ExpectUsageError(const CliResult& r, const std::string& part) {
  ASSERT_TRUE(r.exited) << Describe(r);
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_THAT(r.out + r.err, HasSubstr("usage:")) << Describe(r);
  EXPECT_THAT(r.out + r.err, HasSubstr(part)) << Describe(r);
}

// A valid engine blob of y = Relu(x + w) * w from the real builder.
std::string EngineBlob() {
  auto built = builder::BuildEngine(SerializeModel(AddReluMulModel()), {}, nullptr);
  EXPECT_TRUE(built.ok()) << built.status();
  return built.ok() ? built->blob : std::string();
}

class CliErrors : public ::testing::Test {
 protected:
  // `kiln build MODEL -o ENGINE` on `model_bytes` written as model.onnx.
  CliResult BuildModel(const std::string& model_bytes) {
    std::string model = dir_.Write("model.onnx", model_bytes);
    return RunKiln(dir_, {"build", model, "-o", dir_.File("out.engine")});
  }
  CliResult Build(const onnx::ModelProto& m) { return BuildModel(SerializeModel(m)); }

  // `kiln run` and `kiln inspect` on `engine_bytes` written as bad.engine; both must fail
  // cleanly naming each part.
  void ExpectEngineRejected(const std::string& engine_bytes,
                            const std::vector<std::string>& parts) {
    std::string path = dir_.Write("bad.engine", engine_bytes);
    std::vector<std::string> with_path = parts;
    with_path.push_back("bad.engine");
    ASSERT_EQ(mkdir(dir_.File("in").c_str(), 0755) == 0 || errno == EEXIST, true);
    ExpectCleanError(
        RunKiln(dir_, {"run", path, "--inputs", dir_.File("in"), "--outputs", dir_.File("out")}),
        with_path);
    ExpectCleanError(RunKiln(dir_, {"inspect", path}), with_path);
    ExpectCleanError(RunKiln(dir_, {"inspect", path, "--json"}), with_path);
  }

  TempDir dir_;
};

// ---- kiln build on hostile models --------------------------------------------------------

TEST_F(CliErrors, BuildTruncatedModel) {
  std::string bytes = SerializeModel(AddReluMulModel());
  ExpectCleanError(BuildModel(bytes.substr(0, bytes.size() / 2)), {"INVALID_ARGUMENT", "ONNX"});
}

TEST_F(CliErrors, BuildTextFile) {
  ExpectCleanError(BuildModel("ir_version: 8\ngraph { name: \"g\" }\n"), {"ONNX"});
}

TEST_F(CliErrors, BuildEmptyFile) { ExpectCleanError(BuildModel(""), {"empty"}); }

TEST_F(CliErrors, BuildNegativeDims) {
  onnx::ModelProto m = AddReluMulModel();
  m.mutable_graph()->mutable_initializer(0)->set_dims(0, -1);
  ExpectCleanError(Build(m), {"'w'", "negative"});
}

TEST_F(CliErrors, BuildCycle) {
  onnx::ModelProto m = AddReluMulModel();
  onnx::GraphProto* g = m.mutable_graph();
  AddOnnxNode(g, "Relu", {"c2"}, {"c1"}, "cycle_one");
  AddOnnxNode(g, "Relu", {"c1"}, {"c2"}, "cycle_two");
  AddTensorValueInfo(g->mutable_output(), "c1", {2, 3});
  ExpectCleanError(Build(m), {"cycle", "cycle_"});
}

TEST_F(CliErrors, BuildRawDataMismatch) {
  onnx::ModelProto m = AddReluMulModel();
  auto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_float_data();
  w->set_raw_data(std::string(5, '\0'));
  ExpectCleanError(Build(m), {"'w'", "raw_data"});
}

TEST_F(CliErrors, BuildUnknownOps) {
  onnx::ModelProto m = AddReluMulModel();
  AddOnnxNode(m.mutable_graph(), "Frobnicate", {"x"}, {"f"}, "frob");
  AddOnnxNode(m.mutable_graph(), "Teleport", {"f"}, {"t"}, "tele");
  ExpectCleanError(Build(m), {"Frobnicate", "Teleport", "'frob'", "'tele'"});
}

TEST_F(CliErrors, BuildExternalDataEscape) {
  // The model sits in dir/model/, its weights point at dir/w.bin through "..".
  onnx::ModelProto m = AddReluMulModel();
  auto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_float_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* loc = w->add_external_data();
  loc->set_key("location");
  loc->set_value("../w.bin");
  dir_.Write("w.bin", std::string(24, '\0'));
  ASSERT_EQ(mkdir(dir_.File("model").c_str(), 0755), 0);
  std::string model = dir_.Write("model/model.onnx", SerializeModel(m));
  ExpectCleanError(RunKiln(dir_, {"build", model, "-o", dir_.File("out.engine")}),
                   {"'w'", "'../w.bin'"});
  // The same through an absolute path.
  loc->set_value(dir_.File("w.bin"));
  model = dir_.Write("model/model.onnx", SerializeModel(m));
  ExpectCleanError(RunKiln(dir_, {"build", model, "-o", dir_.File("out.engine")}),
                   {"'w'", "relative"});
}

// The IR 8 model of `AddReluMulModel` with its weights in external data at `location`.
onnx::ModelProto ExternalDataModel(const std::string& location) {
  onnx::ModelProto m = AddReluMulModel(8, 17);  // IR 8: Debian's onnx checker runs too
  auto* w = m.mutable_graph()->mutable_initializer(0);
  w->clear_float_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* loc = w->add_external_data();
  loc->set_key("location");
  loc->set_value(location);
  return m;
}

std::string WeightBytes() {
  const auto& w = ::kiln::testing::kAddReluMulWeights;
  return std::string(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float));
}

TEST_F(CliErrors, BuildExternalDataFromAnotherFolder) {
  // model/model.onnx + model/w.bin is valid wherever kiln runs from: its locations are
  // resolved against the model's folder, not the current one.
  ASSERT_EQ(mkdir(dir_.File("model").c_str(), 0755), 0);
  dir_.Write("model/w.bin", WeightBytes());
  std::string model = dir_.Write("model/model.onnx", SerializeModel(ExternalDataModel("w.bin")));
  CliResult abs = RunKiln(dir_, {"build", model, "-o", dir_.File("abs.engine")});
  ASSERT_TRUE(abs.exited) << Describe(abs);
  EXPECT_EQ(abs.exit_code, 0) << Describe(abs);
  // From the model's parent folder, by a relative path.
  CliResult rel = RunBinary(dir_, "bash",
                            {"-c", "cd \"$1\" && exec \"$0\" build model/model.onnx -o rel.engine",
                             KILN_BIN, dir_.path()});
  ASSERT_TRUE(rel.exited) << Describe(rel);
  EXPECT_EQ(rel.exit_code, 0) << Describe(rel);
  struct stat st;
  EXPECT_EQ(stat(dir_.File("rel.engine").c_str(), &st), 0);
}

TEST_F(CliErrors, BuildExternalDataRefusedAlikeWhetherOrNotThePathExists) {
  // One message for every refused location: it must not tell which paths exist on the host.
  ASSERT_EQ(mkdir(dir_.File("model").c_str(), 0755), 0);
  std::string existing = dir_.Write("w.bin", WeightBytes());
  std::vector<std::string> errors;
  for (const std::string& location :
       {existing, dir_.File("missing.bin"), std::string("../w.bin"), std::string("../none.bin")}) {
    std::string model = dir_.Write("model/model.onnx", SerializeModel(ExternalDataModel(location)));
    CliResult r = RunKiln(dir_, {"build", model, "-o", dir_.File("out.engine"), "--quiet"});
    ExpectCleanError(r, {"'w'", "refused", location});
    std::string err = r.err;
    err.replace(err.find(location), location.size(), "LOCATION");
    errors.push_back(err);
  }
  for (const std::string& e : errors) EXPECT_EQ(e, errors[0]);
  // And an empty location is named as such, not as a file that "should be stored in ".
  std::string model = dir_.Write("model/model.onnx", SerializeModel(ExternalDataModel("")));
  ExpectCleanError(RunKiln(dir_, {"build", model, "-o", dir_.File("out.engine")}),
                   {"initializer #0 'w': external_data has an empty 'location'"});
}

TEST_F(CliErrors, BuildNeverReplacesItsInputs) {
  const std::string model_bytes = SerializeModel(AddReluMulModel());
  std::string model = dir_.Write("m.onnx", model_bytes);
  std::string policy = dir_.Write("p.policy", "base = fp32\n");
  ASSERT_EQ(mkdir(dir_.File("in").c_str(), 0755), 0);
  std::string sample = dir_.Write("in/input_0.pb", "sample");
  ASSERT_EQ(link(model.c_str(), dir_.File("hardlink.onnx").c_str()), 0);
  const std::vector<std::string> build = {"build", model, "--quiet"};
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> named;  // both flags
  };
  const std::vector<Case> cases = {
      {{"-o", model}, {"-o", "MODEL"}},
      {{"-o", dir_.File("in/../m.onnx")}, {"-o", "MODEL"}},
      {{"-o", dir_.File("hardlink.onnx")}, {"-o", "MODEL"}},
      {{"-o", dir_.File("e"), "--report", model}, {"--report", "MODEL"}},
      {{"-o", dir_.File("e"), "--html", model}, {"--html", "MODEL"}},
      {{"-o", dir_.File("e"), "--suggest-policy", model}, {"--suggest-policy", "MODEL"}},
      {{"-o", policy, "--policy", policy}, {"-o", "--policy"}},
      {{"-o", dir_.File("e"), "--inputs", dir_.File("in"), "--report", sample},
       {"--report", "--inputs"}},
      {{"-o", dir_.File("e"), "--report", dir_.File("./e")}, {"-o", "--report"}},
      {{"-o", dir_.File("e"), "--report", dir_.File("r"), "--html", dir_.File("r")},
       {"--report", "--html"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = build;
    args.insert(args.end(), c.args.begin(), c.args.end());
    CliResult r = RunKiln(dir_, args);
    ExpectCleanError(r, c.named);
    EXPECT_THAT(r.err, HasSubstr("INVALID_ARGUMENT")) << Describe(r);
    EXPECT_EQ(Slurp(model), model_bytes) << "the model was replaced: " << Describe(r);
    EXPECT_EQ(Slurp(policy), "base = fp32\n");
    EXPECT_EQ(Slurp(sample), "sample");
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("built"))) << "refused only after the build";
  }
  // A preset name is not a file: `--policy fp32 -o fp32` is fine.
  CliResult ok =
      RunBinary(dir_, "bash",
                {"-c", "cd \"$1\" && exec \"$0\" build m.onnx --policy fp32 -o fp32 --quiet",
                 KILN_BIN, dir_.path()});
  EXPECT_EQ(ok.exit_code, 0) << Describe(ok);
}

TEST_F(CliErrors, BuildOutputIsAFolder) {
  std::string model = dir_.Write("m.onnx", SerializeModel(AddReluMulModel()));
  ASSERT_EQ(mkdir(dir_.File("folder").c_str(), 0755), 0);
  for (const char* flag : {"-o", "--report", "--html", "--suggest-policy"}) {
    std::vector<std::string> args = {"build", model, "--quiet"};
    if (std::string(flag) != "-o") args.insert(args.end(), {"-o", dir_.File("e")});
    args.insert(args.end(), {flag, dir_.File("folder")});
    CliResult r = RunKiln(dir_, args);
    ExpectCleanError(
        r, {"INVALID_ARGUMENT", absl::StrCat(flag, " '", dir_.File("folder"), "' is a folder")});
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("built"))) << "refused only after the build";
  }
}

TEST_F(CliErrors, BuildMissingFile) {
  std::string missing = dir_.File("no_such_model.onnx");
  ExpectCleanError(RunKiln(dir_, {"build", missing, "-o", dir_.File("out.engine")}),
                   {"no_such_model.onnx"});
}

TEST_F(CliErrors, BuildDirectory) {
  ExpectCleanError(RunKiln(dir_, {"build", dir_.path(), "-o", dir_.File("out.engine")}),
                   {"not a regular file"});
}

TEST_F(CliErrors, BuildFailureWritesNoEngine) {
  BuildModel("garbage");
  struct stat st;
  EXPECT_NE(stat(dir_.File("out.engine").c_str(), &st), 0) << "a failed build left an engine";
}

// Hostile rules (issue 27): a `re:` rule nested 20,000 groups deep crashed `kiln build --rule`
// (std::regex's recursive compiler), and `re:(a+)+$` against a node named forty a's and a '!'
// hung `kiln build` and `kiln explain`. Clean errors and prompt answers now (RE2).
TEST_F(CliErrors, HostileRegexRules) {
  onnx::ModelProto m = AddReluMulModel();
  m.mutable_graph()->mutable_node(1)->set_name(std::string(40, 'a') + "!");
  std::string model = dir_.Write("model.onnx", SerializeModel(m));
  const std::string deep = "re:" + std::string(20000, '(') + "a" + std::string(20000, ')');
  ExpectCleanError(
      RunKiln(dir_, {"build", model, "--rule", deep + "=fp16", "-o", dir_.File("out.engine")}),
      {"--rule 1:1:1", "is longer than 4096 bytes"});
  const std::string nested = "re:" + std::string(200, '(') + "a" + std::string(200, ')');
  ExpectCleanError(RunKiln(dir_, {"explain", model, "--rule", nested + "=fp16", "--node", "add"}),
                   {"nests deeper than 100 groups"});
  // RunBinary's 60 s timeout is the bound; backtracking would take far longer.
  CliResult built = RunKiln(dir_, {"build", model, "--policy", "fp16", "--rule", "re:(a+)+$=fp32",
                                   "--constraints", "prefer", "-o", dir_.File("out.engine")});
  ASSERT_TRUE(built.exited) << Describe(built);
  EXPECT_EQ(built.exit_code, 0) << Describe(built);
  CliResult explained = RunKiln(dir_, {"explain", model, "--policy", "fp16", "--rule",
                                       "re:(a+)!=fp32", "--node", std::string(40, 'a') + "!"});
  ASSERT_TRUE(explained.exited) << Describe(explained);
  EXPECT_EQ(explained.exit_code, 0) << Describe(explained);
  EXPECT_THAT(explained.out, HasSubstr("fp32")) << Describe(explained);
}

// ---- kiln run with hostile inputs -------------------------------------------------------

// A serialized float TensorProto.
std::string FloatTensor(const std::vector<int64_t>& dims, const std::vector<float>& values) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  for (float v : values) t.add_float_data(v);
  return t.SerializeAsString();
}

class CliRun : public CliErrors {
 protected:
  void SetUp() override {
    engine_ = dir_.Write("good.engine", EngineBlob());
    ASSERT_EQ(mkdir(dir_.File("in").c_str(), 0755), 0);
  }
  CliResult Run() {
    return RunKiln(dir_,
                   {"run", engine_, "--inputs", dir_.File("in"), "--outputs", dir_.File("out")});
  }
  std::string engine_;
};

TEST_F(CliRun, BuildAndRunAValidModel) {
  // The harness itself: the happy path exits 0 and computes y = Relu(x + w) * w.
  CliResult b = BuildModel(SerializeModel(AddReluMulModel()));
  ASSERT_TRUE(b.exited) << Describe(b);
  ASSERT_EQ(b.exit_code, 0) << Describe(b);
  engine_ = dir_.File("out.engine");
  dir_.Write("in/input_0.pb", FloatTensor({2, 3}, {-3, 5, -1, 10, -9, 7}));
  CliResult r = Run();
  ASSERT_TRUE(r.exited) << Describe(r);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  onnx::TensorProto y;
  ASSERT_TRUE(y.ParseFromString(Slurp(dir_.File("out/output_0.pb"))));
  ASSERT_EQ(y.raw_data().size(), 6 * sizeof(float));
  std::vector<float> got(6);
  std::memcpy(got.data(), y.raw_data().data(), y.raw_data().size());
  // By hand: x + w = {-2, 3, 2, 6, -4, 1}; Relu; times w = {1, -2, 3, -4, 5, -6}. Exact.
  EXPECT_EQ(got, (std::vector<float>{0, -6, 6, -24, 0, -6}));
}

TEST_F(CliRun, GarbageInputFile) {
  dir_.Write("in/input_0.pb", "not a tensor at all, just text\n");
  ExpectCleanError(Run(), {"input_0.pb"});
}

TEST_F(CliRun, InputPayloadDisagreesWithDims) {
  dir_.Write("in/input_0.pb", FloatTensor({1000000, 1000000}, {1, 2, 3}));
  ExpectCleanError(Run(), {"input_0.pb", "3 values"});
}

TEST_F(CliRun, InputWithWrongShape) {
  dir_.Write("in/input_0.pb", FloatTensor({3, 2}, {1, 2, 3, 4, 5, 6}));
  ExpectCleanError(Run(), {"input 0 'x'"});
}

TEST_F(CliRun, MissingInput) { ExpectCleanError(Run(), {"1 inputs", "got 0"}); }

TEST_F(CliRun, OutOfMemoryIsAnErrorNotAnAbort) {
  // A 4 GiB input (a sparse file: no disk used) under a 1 GiB address-space limit: reading it
  // cannot get the memory, which must be a RESOURCE_EXHAUSTED error, not an uncaught
  // std::bad_alloc (an abort).
  int fd = open(dir_.File("in/input_0.pb").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, int64_t{4} << 30), 0);
  close(fd);
  CliResult r =
      RunBinary(dir_, "bash",
                {"-c", "ulimit -v 1048576 || exit 99; exec \"$0\" \"$@\"", KILN_BIN, "run", engine_,
                 "--inputs", dir_.File("in"), "--outputs", dir_.File("out")});
  ExpectCleanError(r, {"RESOURCE_EXHAUSTED", "input_0.pb"});
  struct stat st;
  EXPECT_NE(stat(dir_.File("out/output_0.pb").c_str(), &st), 0) << "wrote an output";
}

TEST_F(CliRun, InputsFolderMissing) {
  CliResult r = RunKiln(
      dir_, {"run", engine_, "--inputs", dir_.File("nowhere"), "--outputs", dir_.File("out")});
  ExpectCleanError(r, {"nowhere"});
}

// ---- kiln run / inspect on hostile engines -----------------------------------------------

TEST_F(CliErrors, InspectValidEngine) {
  // The harness itself: a valid engine inspects with exit 0.
  std::string path = dir_.Write("good.engine", EngineBlob());
  CliResult r = RunKiln(dir_, {"inspect", path});
  ASSERT_TRUE(r.exited) << Describe(r);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("Relu")) << Describe(r);
}

TEST_F(CliErrors, TruncatedEngine) {
  std::string blob = EngineBlob();
  ExpectEngineRejected(blob.substr(0, blob.size() - 1), {"truncated"});
  ExpectEngineRejected(blob.substr(0, 100), {"truncated"});
}

TEST_F(CliErrors, CorruptedEngine) {
  std::string blob = EngineBlob();
  blob[blob.size() / 2] ^= 0x40;
  ExpectEngineRejected(blob, {"DATA_LOSS", "corrupted"});
}

TEST_F(CliErrors, CorruptedEngineHeader) {
  std::string blob = EngineBlob();
  blob[20] ^= 0x01;  // required CPU features
  ExpectEngineRejected(blob, {"header digest"});
}

TEST_F(CliErrors, WrongMagic) {
  std::string blob = EngineBlob();
  blob[3] = 'X';
  ExpectEngineRejected(blob, {"magic"});
}

TEST_F(CliErrors, OnnxModelGivenAsEngine) {
  ExpectEngineRejected(SerializeModel(AddReluMulModel()), {"Kiln engine"});
}

TEST_F(CliErrors, EmptyEngine) { ExpectEngineRejected("", {"empty"}); }

TEST_F(CliErrors, MissingEngine) {
  std::string missing = dir_.File("absent.engine");
  ExpectCleanError(RunKiln(dir_, {"inspect", missing}), {"absent.engine"});
  ExpectCleanError(
      RunKiln(dir_, {"run", missing, "--inputs", dir_.path(), "--outputs", dir_.File("o")}),
      {"absent.engine"});
}

TEST_F(CliErrors, EngineIsADirectory) {
  ExpectCleanError(RunKiln(dir_, {"inspect", dir_.path()}), {"not a regular file"});
}

// ---- Usage errors ------------------------------------------------------------------------

TEST_F(CliErrors, NoArguments) { ExpectUsageError(RunKiln(dir_, {}), "kiln build"); }

TEST_F(CliErrors, UnknownCommand) {
  ExpectUsageError(RunKiln(dir_, {"frobnicate"}), "unknown command 'frobnicate'");
}

TEST_F(CliErrors, BuildWithoutOutput) {
  std::string model = dir_.Write("model.onnx", SerializeModel(AddReluMulModel()));
  ExpectUsageError(RunKiln(dir_, {"build", model}), "-o");
}

TEST_F(CliErrors, UnknownFlag) {
  std::string model = dir_.Write("model.onnx", SerializeModel(AddReluMulModel()));
  ExpectUsageError(RunKiln(dir_, {"build", model, "-o", dir_.File("e"), "--frobnicate"}),
                   "unknown option --frobnicate");
  ExpectUsageError(RunKiln(dir_, {"inspect", dir_.File("e"), "--verbose"}),
                   "unknown option --verbose");
}

TEST_F(CliErrors, FlagWithoutValue) {
  std::string model = dir_.Write("model.onnx", SerializeModel(AddReluMulModel()));
  ExpectUsageError(RunKiln(dir_, {"build", model, "-o"}), "-o needs a value");
}

TEST_F(CliErrors, RunWithoutFolders) {
  ExpectUsageError(RunKiln(dir_, {"run", dir_.File("e")}), "--inputs");
}

TEST_F(CliErrors, TwoModels) {
  ExpectUsageError(RunKiln(dir_, {"build", "a.onnx", "b.onnx", "-o", dir_.File("e")}),
                   "exactly one");
}

}  // namespace
}  // namespace kiln
