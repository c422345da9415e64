// Compiled OpenCL program binaries on disk, keyed by everything that makes them differ: the
// source, the build options, the device, its driver and its platform's version. An entry is
// written to a temp file and renamed; one that fails its checks (truncated, foreign, digest
// mismatch) reads as DataLoss, and the caller rebuilds the program and writes the entry again.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/kernels/opencl/device.h"

namespace kiln::kernels::opencl {

class ProgramCache {
 public:
  /// A cache in `dir` (created when first written); an empty `dir` caches nothing.
  explicit ProgramCache(std::string dir) : dir_(std::move(dir)) {}
  /// The process's cache: $KILN_OPENCL_CACHE ("off": none), else $XDG_CACHE_HOME/kiln/opencl,
  /// else $HOME/.cache/kiln/opencl, else none.
  static ProgramCache& Default();

  /// The entry's key: hex SHA-256 over the source, options and the device's identity.
  static std::string Key(const std::string& source, const std::string& options,
                         const DeviceInfo& device);
  /// The binary stored under `key`: NotFound without an entry (or without a cache), DataLoss for
  /// an entry that fails its checks.
  absl::StatusOr<std::string> Load(const std::string& key) const;
  /// Stores `binary` under `key` (atomically); an error names the file.
  absl::Status Store(const std::string& key, const std::string& binary) const;
  /// The entry's file.
  std::string PathOf(const std::string& key) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace kiln::kernels::opencl
