#include "engine/common/sample_sets.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

bool HoldsSet(const std::string& folder) {
  struct stat st;
  return stat(absl::StrCat(folder, "/input_0.pb").c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> SampleSetFolders(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat("--inputs '", dir, "' is not a folder"));
  }
  if (HoldsSet(dir)) return std::vector<std::string>{dir};
  std::vector<std::pair<uint64_t, std::string>> numbered;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat("--inputs: cannot list '", dir, "'"));
  }
  constexpr absl::string_view kPrefix = "test_data_set_";
  while (const dirent* e = readdir(d)) {
    absl::string_view name = e->d_name;
    if (!absl::StartsWith(name, kPrefix)) continue;
    absl::string_view digits = name.substr(kPrefix.size());
    uint64_t n;
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit) ||
        !absl::SimpleAtoi(digits, &n)) {
      continue;
    }
    numbered.push_back({n, std::string(name)});
  }
  closedir(d);
  std::sort(numbered.begin(), numbered.end());
  std::vector<std::string> folders;
  for (const auto& [n, name] : numbered) {
    std::string folder = absl::StrCat(dir, "/", name);
    if (HoldsSet(folder)) folders.push_back(std::move(folder));
  }
  if (folders.empty()) {
    return absl::NotFoundError(absl::StrCat("--inputs '", dir,
                                            "' holds neither input_0.pb nor "
                                            "test_data_set_<N>/input_0.pb"));
  }
  return folders;
}

}  // namespace kiln
