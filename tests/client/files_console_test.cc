// convert-client's local side: the engine sink (digest checked, atomic), the --inputs layouts,
// the progress bar and the report summary.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/console.h"
#include "client/convert.h"
#include "client/files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

/// A fresh folder under $TMPDIR, removed with its contents at the end of the test.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = absl::StrCat(base ? base : "/tmp", "/kiln_client_test.XXXXXX");
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { std::system(absl::StrCat("rm -rf '", path_, "'").c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(DigestFileTest, MatchesInMemoryDigest) {
  TempDir dir;
  std::string data(3 << 20, 'k');  // several read buffers
  data[12345] = 'x';
  WriteFile(dir.path() + "/m.onnx", data);
  auto d = DigestFile(dir.path() + "/m.onnx", "--model");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size, data.size());
  EXPECT_EQ(d->sha256, Sha256Hex(data));
  auto missing = DigestFile(dir.path() + "/nope.onnx", "--model");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("--model"));
  EXPECT_FALSE(DigestFile(dir.path(), "--model").ok());  // a folder
}

TEST(EngineSinkTest, CommitsVerifiedBytesAtomically) {
  TempDir dir;
  const std::string out = dir.path() + "/e.kiln";
  WriteFile(out, "old engine");
  auto sink = EngineSink::Open(out);
  ASSERT_TRUE(sink.ok()) << sink.status();
  ASSERT_TRUE((*sink)->Append(0, "hello ").ok());
  EXPECT_EQ(ReadFile(out), "old engine");  // untouched until Commit
  ASSERT_TRUE((*sink)->Append(6, "engine").ok());
  ASSERT_TRUE((*sink)->Commit(12, Sha256Hex("hello engine")).ok());
  EXPECT_EQ(ReadFile(out), "hello engine");
  sink->reset();
  EXPECT_FALSE(Exists(absl::StrCat(out, ".tmp.", getpid())));
}

TEST(EngineSinkTest, DigestOrSizeMismatchKeepsTheOldFile) {
  TempDir dir;
  const std::string out = dir.path() + "/e.kiln";
  WriteFile(out, "old engine");
  {
    auto sink = EngineSink::Open(out);
    ASSERT_TRUE(sink.ok());
    ASSERT_TRUE((*sink)->Append(0, "tampered").ok());
    absl::Status s = (*sink)->Commit(8, Sha256Hex("original"));
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.message()), HasSubstr("engine_sha256"));
  }
  {
    auto sink = EngineSink::Open(out);
    ASSERT_TRUE(sink.ok());
    ASSERT_TRUE((*sink)->Append(0, "short").ok());
    absl::Status s = (*sink)->Commit(9, Sha256Hex("short"));
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(s.message()), HasSubstr("engine_size"));
  }
  {
    auto sink = EngineSink::Open(out);
    ASSERT_TRUE(sink.ok());
    ASSERT_TRUE((*sink)->Append(0, "abc").ok());
    EXPECT_EQ((*sink)->Append(5, "def").code(), absl::StatusCode::kDataLoss);  // a gap
  }
  EXPECT_EQ(ReadFile(out), "old engine");
  EXPECT_FALSE(Exists(absl::StrCat(out, ".tmp.", getpid())));
}

TEST(ReadSampleSetsTest, FlatFolderIsOneSet) {
  TempDir dir;
  WriteFile(dir.path() + "/input_0.pb", "a");
  WriteFile(dir.path() + "/input_1.pb", "bb");
  WriteFile(dir.path() + "/input_3.pb", "after a gap: ignored");
  WriteFile(dir.path() + "/output_0.pb", "not an input");
  auto sets = ReadSampleSets(dir.path(), 1 << 20);
  ASSERT_TRUE(sets.ok()) << sets.status();
  ASSERT_EQ(sets->size(), 1u);
  ASSERT_EQ((*sets)[0].inputs_size(), 2);
  EXPECT_EQ((*sets)[0].inputs(0), "a");
  EXPECT_EQ((*sets)[0].inputs(1), "bb");
}

TEST(ReadSampleSetsTest, DataSetFoldersInNumericOrder) {
  TempDir dir;
  for (int n : {10, 2, 9}) {
    std::string folder = absl::StrCat(dir.path(), "/test_data_set_", n);
    mkdir(folder.c_str(), 0755);
    WriteFile(folder + "/input_0.pb", absl::StrCat("set", n));
  }
  mkdir((dir.path() + "/test_data_set_x").c_str(), 0755);
  auto sets = ReadSampleSets(dir.path(), 1 << 20);
  ASSERT_TRUE(sets.ok()) << sets.status();
  ASSERT_EQ(sets->size(), 3u);
  EXPECT_EQ((*sets)[0].inputs(0), "set2");
  EXPECT_EQ((*sets)[1].inputs(0), "set9");
  EXPECT_EQ((*sets)[2].inputs(0), "set10");
}

TEST(ReadSampleSetsTest, ErrorsNameInputs) {
  TempDir dir;
  auto empty = ReadSampleSets(dir.path(), 1 << 20);
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("--inputs"));
  auto missing = ReadSampleSets(dir.path() + "/nope", 1 << 20);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("--inputs"));
  WriteFile(dir.path() + "/input_0.pb", std::string(100, 'x'));
  EXPECT_EQ(ReadSampleSets(dir.path(), 10).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(FormatBarTest, FitsTheWidthAndShowsProgress) {
  std::string bar = FormatBar("lowering", 0.5, "", absl::Seconds(3), 80);
  EXPECT_LE(bar.size(), 79u);
  EXPECT_THAT(bar, HasSubstr(" 50% lowering"));
  EXPECT_THAT(bar, HasSubstr("3.0s"));
  EXPECT_THAT(bar, HasSubstr("#"));
  EXPECT_THAT(bar, HasSubstr("."));
  // Out-of-range progress from a server is clamped, never overflows the bar.
  EXPECT_THAT(FormatBar("x", 7.0, "", absl::ZeroDuration(), 40), HasSubstr("100%"));
  EXPECT_THAT(FormatBar("x", -1.0, "", absl::ZeroDuration(), 40), HasSubstr("  0%"));
  EXPECT_LE(FormatBar(std::string(300, 's'), 0.1, "d", absl::ZeroDuration(), 40).size(), 39u);
}

TEST(FormatLogLineTest, LevelAndText) {
  v1::LogLine line;
  line.set_level("warn");
  line.set_timestamp_us(1700000000123456);
  line.set_text("node 'ln' (LayerNormalization) kept at fp32");
  std::string s = FormatLogLine(line);
  EXPECT_THAT(s, HasSubstr(".123] warn  node 'ln'"));
}

TEST(ReportSummaryTest, VerdictOutputsOffendersSuggestion) {
  v1::AccuracyReport r;
  r.set_model_name("bert");
  r.set_pass(false);
  r.set_samples(2);
  r.set_sample_source("inputs DIR (2 data sets)");
  r.set_atol(0.01);
  r.set_rtol(0.01);
  auto* out = r.add_outputs();
  out->set_tensor("logits");
  out->set_pass(false);
  out->mutable_error()->set_max_abs(3.5);
  out->mutable_error()->set_inf_count(4);
  out->mutable_error()->set_fraction_outside(0.125);
  auto* ok = r.add_outputs();
  ok->set_tensor("pooled");
  ok->set_pass(true);
  ok->mutable_error()->set_cosine(0.99999);
  for (int i = 0; i < 7; ++i) {
    auto* w = r.add_worst_offenders();
    w->set_node_name(absl::StrCat("/encoder/ln", i));
    w->set_op_type("ReduceMean");
    w->set_effective_precision("fp16");
    w->set_why("introduces 4096 Inf");
  }
  r.mutable_suggestion()->set_searched(true);
  r.mutable_suggestion()->set_found(true);
  r.mutable_suggestion()->add_nodes("/encoder/ln0");
  r.mutable_suggestion()->set_policy_text("default fp16\nname:/encoder/ln0 = fp32\n");
  std::string s = ReportSummary(r, 5);
  EXPECT_THAT(s, HasSubstr("accuracy report: FAIL  (bert; 2 sample(s)"));
  EXPECT_THAT(s, HasSubstr("logits"));
  EXPECT_THAT(s, HasSubstr("FAIL"));
  EXPECT_THAT(s, HasSubstr("12.5%"));
  EXPECT_THAT(s, HasSubstr("(0 NaN, 4 Inf)"));
  EXPECT_THAT(s, HasSubstr("0.99999"));
  EXPECT_THAT(s, HasSubstr("/encoder/ln4"));
  EXPECT_THAT(s, Not(HasSubstr("/encoder/ln5")));
  EXPECT_THAT(s, HasSubstr("... 2 more"));
  EXPECT_THAT(s, HasSubstr("raise 1 node(s) to fp32"));
  EXPECT_THAT(s, HasSubstr("| name:/encoder/ln0 = fp32"));
}

TEST(StatusCodeNameTest, Names) {
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::UNAUTHENTICATED), "UNAUTHENTICATED");
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::INVALID_ARGUMENT), "INVALID_ARGUMENT");
}

}  // namespace
}  // namespace kiln::client
