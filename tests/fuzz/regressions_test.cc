// Replays every input under tests/fuzz/regressions/<harness>/ (crashes the fuzzers found, kept
// once fixed, and hand-written hostile inputs) through the harness's entry point: no crash, and
// an OK result or a clean error. Built by GCC in the normal test suite and, in build-asan, under
// ASan and UBSan.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/fuzz/harnesses.h"

namespace kiln::fuzz {

// Test names and ctest show the harness by name, not as bytes (found by ADL, so not in the
// anonymous namespace).
void PrintTo(const Harness& h, std::ostream* os) { *os << h.name; }

namespace {

namespace fs = std::filesystem;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class FuzzRegressions : public ::testing::TestWithParam<Harness> {};

TEST_P(FuzzRegressions, EveryInputGivesOkOrACleanError) {
  fs::path dir = fs::path(KILN_FUZZ_REGRESSIONS_DIR) / GetParam().name;
  std::vector<fs::path> files;
  if (fs::is_directory(dir)) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_regular_file() && e.path().filename().string()[0] != '.' &&
          e.path().extension() != ".md") {
        files.push_back(e.path());
      }
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    std::string bytes = ReadAll(f);
    absl::Status verdict = GetParam().one_input(bytes);
    EXPECT_TRUE(verdict.ok()) << verdict;
  }
  // The seed inputs are known to reach the code; an empty harness folder is fine (no findings).
  RecordProperty("inputs", static_cast<int>(files.size()));
}

TEST(FuzzRegressionsLayout, EveryFolderNamesAHarness) {
  // A reproducer filed under a misspelt folder would never run.
  fs::path root(KILN_FUZZ_REGRESSIONS_DIR);
  if (!fs::is_directory(root)) GTEST_SKIP() << "no regressions folder";
  for (const auto& e : fs::directory_iterator(root)) {
    if (!e.is_directory()) continue;
    std::string name = e.path().filename().string();
    bool known = std::any_of(AllHarnesses().begin(), AllHarnesses().end(),
                             [&](const Harness& h) { return name == h.name; });
    EXPECT_TRUE(known) << "tests/fuzz/regressions/" << name << " is not a harness";
  }
}

INSTANTIATE_TEST_SUITE_P(Harnesses, FuzzRegressions, ::testing::ValuesIn(AllHarnesses()),
                         [](const ::testing::TestParamInfo<Harness>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace kiln::fuzz
