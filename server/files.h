// Small file helpers of kiln-server: streaming SHA-256, atomic writes, folder removal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/common/files.h"

namespace kiln::server {

/// Mode of every file the server writes (uploads, job files, cache entries): the server's own.
inline constexpr mode_t kPrivateFileMode = 0600;

/// Incremental SHA-256 (OpenSSL), for uploads and streamed engines that are never held whole.
class Sha256Stream {
 public:
  Sha256Stream();
  ~Sha256Stream();
  Sha256Stream(const Sha256Stream&) = delete;
  Sha256Stream& operator=(const Sha256Stream&) = delete;
  void Update(absl::string_view bytes);
  /// Lower-case hex of everything passed to Update; the stream must not be used afterwards.
  std::string FinishHex();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// True for 64 lower-case hex digits.
bool IsSha256Hex(absl::string_view s);

/// Size and SHA-256 (hex) of a file, read in 1 MiB blocks.
absl::StatusOr<std::pair<uint64_t, std::string>> FileDigest(const std::string& path);

/// Reads a whole file of at most `max_bytes`.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path, int64_t max_bytes);

/// Removes `path` and everything below it; missing is fine. Never follows symlinks.
void RemoveTree(const std::string& path);

/// Creates a folder (and its parents) with mode 0700.
absl::Status MakeDirs(const std::string& path);

}  // namespace kiln::server
