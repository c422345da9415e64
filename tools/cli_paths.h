// Checks of the files a kiln command names, before it runs: an output must not be a folder, must
// not be one of the command's inputs (a build must never replace its own model), and two outputs
// must not name the same file.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kiln::tools {

/// A file or folder on the command line and how the user named it ("-o", "--report", "MODEL").
struct NamedPath {
  std::string flag;
  std::string path;
};

/// True when `a` and `b` name the same file: the same st_dev/st_ino where both exist (hard links
/// and symlinks included), else the same normalized absolute path (its folder's real path and
/// its name, or the path with '.' and '..' resolved by text when its folder does not exist).
bool SameFile(const std::string& a, const std::string& b);

/// True when `path` (existing or not) is a file `--inputs dir` reads: `input_<N>.pb` in one of
/// its sample-set folders (SampleSetFolders).
bool IsSampleInput(const std::string& path, const std::string& dir);

/// InvalidArgument naming the flags involved when an output is an existing folder, is the same
/// file as one of `inputs`, is a sample input of one of `input_dirs` (IsSampleInput), or names the
/// same file as another output. Inputs that do not exist are skipped (the command reports them
/// itself).
absl::Status CheckOutputPaths(const std::vector<NamedPath>& inputs,
                              const std::vector<NamedPath>& input_dirs,
                              const std::vector<NamedPath>& outputs);

}  // namespace kiln::tools
