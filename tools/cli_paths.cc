#include "tools/cli_paths.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/common/sample_sets.h"

namespace kiln::tools {
namespace {

// `path` made absolute and with '.', '..' and repeated slashes resolved by text alone.
std::string LexicallyNormal(const std::string& path) {
  std::string abs = path;
  if (abs.empty() || abs[0] != '/') {
    char cwd[PATH_MAX];
    abs = absl::StrCat(getcwd(cwd, sizeof(cwd)) ? cwd : ".", "/", path);
  }
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(abs, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  return absl::StrCat("/", absl::StrJoin(parts, "/"));
}

// The real path of `path`'s folder joined with its last component; the lexical normal form when
// the folder does not exist.
std::string Normalized(const std::string& path) {
  std::string lexical = LexicallyNormal(path);
  size_t slash = lexical.rfind('/');
  std::string dir = slash == 0 ? "/" : lexical.substr(0, slash);
  std::string name = lexical.substr(slash + 1);
  std::unique_ptr<char, decltype(&free)> real(realpath(dir.c_str(), nullptr), &free);
  if (!real) return lexical;
  std::string r = real.get();
  return r == "/" ? absl::StrCat("/", name) : absl::StrCat(r, "/", name);
}

bool IsFolder(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  bool a_exists = stat(a.c_str(), &sa) == 0, b_exists = stat(b.c_str(), &sb) == 0;
  if (a_exists && b_exists) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (a_exists != b_exists) return false;
  return Normalized(a) == Normalized(b);
}

bool IsSampleInput(const std::string& path, const std::string& dir) {
  std::string normal = Normalized(path);
  absl::string_view name = normal;
  name.remove_prefix(normal.rfind('/') + 1);
  int index;
  if (!absl::ConsumePrefix(&name, "input_") || !absl::ConsumeSuffix(&name, ".pb") ||
      !absl::SimpleAtoi(name, &index) || index < 0) {
    return false;
  }
  auto folders = SampleSetFolders(dir);
  if (!folders.ok()) return false;
  std::string parent = normal.substr(0, std::max<size_t>(1, normal.rfind('/')));
  struct stat p;
  if (stat(parent.c_str(), &p) != 0) return false;
  for (const std::string& folder : *folders) {
    struct stat f;
    if (stat(folder.c_str(), &f) == 0 && f.st_dev == p.st_dev && f.st_ino == p.st_ino) return true;
  }
  return false;
}

absl::Status CheckOutputPaths(const std::vector<NamedPath>& inputs,
                              const std::vector<NamedPath>& input_dirs,
                              const std::vector<NamedPath>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& out = outputs[i];
    if (IsFolder(out.path)) {
      return absl::InvalidArgumentError(
          absl::StrCat(out.flag, " '", out.path, "' is a folder; give the path of a file"));
    }
    for (const NamedPath& in : inputs) {
      struct stat st;
      if (stat(in.path.c_str(), &st) != 0) continue;  // not a file (a preset name) or missing
      if (SameFile(out.path, in.path)) {
        return absl::InvalidArgumentError(
            absl::StrCat(out.flag, " '", out.path, "' and ", in.flag, " '", in.path,
                         "' are the same file: writing the output would destroy the input"));
      }
    }
    for (const NamedPath& dir : input_dirs) {
      if (IsSampleInput(out.path, dir.path)) {
        return absl::InvalidArgumentError(
            absl::StrCat(out.flag, " '", out.path, "' is a sample input of ", dir.flag, " '",
                         dir.path, "': writing the output would destroy the input"));
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (SameFile(out.path, outputs[j].path)) {
        return absl::InvalidArgumentError(absl::StrCat(outputs[j].flag, " '", outputs[j].path,
                                                       "' and ", out.flag, " '", out.path,
                                                       "' are the same file"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::tools
