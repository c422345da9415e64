#include "tools/cli_io.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/import/onnx_importer.h"
#include "engine/import/tensor_proto.h"

namespace kiln::tools {

absl::StatusOr<std::vector<ir::Tensor>> ReadTensorDir(const std::string& dir,
                                                      const std::string& prefix) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat("'", dir, "' is not a folder"));
  }
  std::vector<ir::Tensor> out;
  for (int i = 0;; ++i) {
    std::string path = absl::StrCat(dir, "/", prefix, "_", i, ".pb");
    if (stat(path.c_str(), &st) != 0) break;
    ASSIGN_OR_RETURN(std::string bytes, import::ReadFile(path, int64_t{1} << 34));
    ASSIGN_OR_RETURN(ir::Tensor t, import::ParseTensorProto(bytes, path));
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<std::vector<std::vector<ir::Tensor>>> ReadSampleSets(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat("--inputs '", dir, "' is not a folder"));
  }
  auto holds_set = [&st](const std::string& folder) {
    return stat(absl::StrCat(folder, "/input_0.pb").c_str(), &st) == 0 && S_ISREG(st.st_mode);
  };
  std::vector<std::vector<ir::Tensor>> sets;
  if (holds_set(dir)) {
    ASSIGN_OR_RETURN(std::vector<ir::Tensor> set, ReadTensorDir(dir, "input"));
    sets.push_back(std::move(set));
    return sets;
  }
  // (N, name): numeric order, so test_data_set_10 comes after test_data_set_9.
  std::vector<std::pair<uint64_t, std::string>> folders;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat("cannot list folder '", dir, "'"));
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
    folders.push_back({n, std::string(name)});
  }
  closedir(d);
  std::sort(folders.begin(), folders.end());
  for (const auto& [n, name] : folders) {
    std::string folder = absl::StrCat(dir, "/", name);
    if (!holds_set(folder)) continue;
    ASSIGN_OR_RETURN(std::vector<ir::Tensor> set, ReadTensorDir(folder, "input"));
    sets.push_back(std::move(set));
  }
  if (sets.empty()) {
    return absl::NotFoundError(absl::StrCat("--inputs '", dir,
                                            "' holds neither input_0.pb nor "
                                            "test_data_set_<N>/input_0.pb"));
  }
  return sets;
}

absl::Status WriteFileAtomic(const std::string& path, const std::string& data) {
  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "'"));
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      return absl::DataLossError(absl::StrCat("short write to '", path, "' (disk full?)"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::PermissionDeniedError(absl::StrCat("cannot rename into '", path, "'"));
  }
  return absl::OkStatus();
}

absl::Status WriteTensorDir(const std::string& dir, const std::string& prefix,
                            const std::vector<ir::Tensor>& tensors,
                            const std::vector<std::string>& names) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    if (mkdir(dir.c_str(), 0755) != 0) {
      return absl::PermissionDeniedError(absl::StrCat("cannot create folder '", dir, "'"));
    }
  } else if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("'", dir, "' exists and is not a folder"));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    RETURN_IF_ERROR(WriteFileAtomic(absl::StrCat(dir, "/", prefix, "_", i, ".pb"),
                                    import::SerializeTensorProto(tensors[i], names[i])));
  }
  return absl::OkStatus();
}

}  // namespace kiln::tools
