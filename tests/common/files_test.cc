#include "engine/common/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace kiln {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Files in `dir` other than `keep`: a temp file left behind would show up here.
int OtherFiles(const std::filesystem::path& dir, const std::string& keep) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.path().filename() != keep;
  return n;
}

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("kiln_files_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(FilesTest, WriteReplacesTheWholeFileWithItsMode) {
  const std::string path = (dir_ / "out.bin").string();
  ASSERT_TRUE(WriteFileAtomic(path, std::string(3 << 20, 'a')).ok());
  ASSERT_TRUE(WriteFileAtomic(path, "short", 0600).ok());
  EXPECT_EQ(Slurp(path), "short");
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(OtherFiles(dir_, "out.bin"), 0);
}

TEST_F(FilesTest, FailureNamesTheFileAndLeavesNothing) {
  const std::string path = (dir_ / "missing" / "out.bin").string();
  absl::Status st = WriteFileAtomic(path, "x");
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_NE(st.message().find("missing/out.bin"), std::string::npos) << st;
  // Renaming over a folder fails after the temp file was written: it is removed.
  std::filesystem::create_directories(dir_ / "taken");
  st = WriteFileAtomic((dir_ / "taken").string(), "x");
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(OtherFiles(dir_, "taken"), 0);
}

TEST_F(FilesTest, CopyIsByteForByte) {
  std::string big(5 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  const std::string from = (dir_ / "from").string(), to = (dir_ / "to").string();
  ASSERT_TRUE(WriteFileAtomic(from, big).ok());
  ASSERT_TRUE(CopyFileAtomic(from, to).ok());
  EXPECT_EQ(Slurp(to), big);
  EXPECT_EQ(CopyFileAtomic((dir_ / "nope").string(), to).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kiln
