#include "server/cache.h"

#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/plan/engine_blob.h"
#include "server/files.h"

namespace kiln::server {

absl::Status EngineCache::Init() { return MakeDirs(dir_); }

void EngineCache::Evict(const std::string& key, const std::string& why) {
  log_->warn("cache: evicting corrupt entry {}: {}", key, why);
  unlink(DigestPath(key).c_str());
  unlink(BlobPath(key).c_str());
}

std::optional<CacheEntry> EngineCache::Lookup(const std::string& key) {
  auto digest = ReadWholeFile(DigestPath(key), 4096);
  if (!digest.ok()) {
    if (access(BlobPath(key).c_str(), F_OK) == 0) Evict(key, "blob without a digest file");
    return std::nullopt;
  }
  std::vector<std::string> parts =
      absl::StrSplit(absl::StripAsciiWhitespace(*digest), ' ', absl::SkipEmpty());
  CacheEntry e;
  e.path = BlobPath(key);
  if (parts.size() != 2 || !IsSha256Hex(parts[0]) || !absl::SimpleAtoi(parts[1], &e.size)) {
    Evict(key, "malformed digest file");
    return std::nullopt;
  }
  e.sha256 = parts[0];
  auto actual = FileDigest(e.path);
  if (!actual.ok()) {
    Evict(key, std::string(actual.status().message()));
    return std::nullopt;
  }
  if (actual->first != e.size || actual->second != e.sha256) {
    Evict(key,
          absl::StrCat("blob digest ", actual->second, " (", actual->first,
                       " bytes) does not match the recorded ", e.sha256, " (", e.size, " bytes)"));
    return std::nullopt;
  }
  // The engine reader checks what the whole-blob digest cannot: format version, section digests
  // (against a blob written by a buggy builder) and the CPU features this machine has.
  auto engine = plan::LoadEngineFile(e.path);
  if (!engine.ok()) {
    Evict(key, std::string(engine.status().message()));
    return std::nullopt;
  }
  return e;
}

absl::Status EngineCache::Store(const std::string& key, const std::string& engine_path,
                                uint64_t size, const std::string& sha256) {
  if (absl::Status st = CopyFileAtomic(engine_path, BlobPath(key), kPrivateFileMode); !st.ok())
    return st;
  return WriteFileAtomic(DigestPath(key), absl::StrCat(sha256, " ", size, "\n"), kPrivateFileMode);
}

}  // namespace kiln::server
