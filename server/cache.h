// The content-addressed engine cache (--cache-dir): DIR/<key>.kiln holds the engine blob and
// DIR/<key>.sha256 its size and whole-blob SHA-256. Both are written to a temp file and renamed
// (blob first, so a present digest file always describes a complete blob). Every lookup
// verifies the whole-blob digest and loads the blob with the engine reader (section digests,
// format version, CPU features); a corrupt entry is logged and evicted, so the build runs again.
// Keys come from CacheKey (spec.h). The cache may be shared by several servers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "spdlog/logger.h"

namespace kiln::server {

/// A verified cache entry.
struct CacheEntry {
  std::string path;
  uint64_t size = 0;
  std::string sha256;
};

/// The engine cache. Thread-safe (all state is in the file system).
class EngineCache {
 public:
  EngineCache(std::string dir, std::shared_ptr<spdlog::logger> log)
      : dir_(std::move(dir)), log_(std::move(log)) {}

  /// Creates the folder.
  absl::Status Init();

  /// The verified entry of `key`, or nullopt when missing or corrupt (then evicted).
  std::optional<CacheEntry> Lookup(const std::string& key);

  /// Stores the engine at `engine_path` (whose digest the caller computed) under `key`.
  absl::Status Store(const std::string& key, const std::string& engine_path, uint64_t size,
                     const std::string& sha256);

  /// Removes an entry (after a read found it corrupt).
  void Evict(const std::string& key, const std::string& why);

  std::string BlobPath(const std::string& key) const { return dir_ + "/" + key + ".kiln"; }
  std::string DigestPath(const std::string& key) const { return dir_ + "/" + key + ".sha256"; }

 private:
  std::string dir_;
  std::shared_ptr<spdlog::logger> log_;
};

}  // namespace kiln::server
