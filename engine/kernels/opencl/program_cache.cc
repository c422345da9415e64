#include "engine/kernels/opencl/program_cache.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/common/files.h"
#include "engine/common/sha256.h"
#include "engine/common/status.h"

namespace kiln::kernels::opencl {
namespace {

// Entry: magic (8), payload size (u64 little-endian), SHA-256 of the payload (32), payload.
constexpr char kEntryMagic[8] = {'K', 'I', 'L', 'N', 'C', 'L', 'P', '1'};
constexpr size_t kHeaderBytes = 8 + 8 + 32;

// mkdir -p.
absl::Status MakeDirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string part = dir.substr(0, i);
    if (mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) {
      return absl::UnavailableError(absl::StrCat("cannot create the OpenCL program cache folder '",
                                                 part, "': ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

std::string DefaultDir() {
  const char* env = std::getenv("KILN_OPENCL_CACHE");
  if (env != nullptr && *env != '\0') return std::string(env) == "off" ? "" : env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return absl::StrCat(xdg, "/kiln/opencl");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return absl::StrCat(home, "/.cache/kiln/opencl");
  }
  return "";
}

}  // namespace

ProgramCache& ProgramCache::Default() {
  static ProgramCache cache(DefaultDir());
  return cache;
}

std::string ProgramCache::Key(const std::string& source, const std::string& options,
                              const DeviceInfo& device) {
  // Length-prefixed fields: no two different tuples give the same bytes.
  std::string id;
  for (const std::string* f :
       {&source, &options, &device.name, &device.vendor, &device.version, &device.driver_version,
        &device.platform_name, &device.platform_version}) {
    absl::StrAppend(&id, f->size(), ":", *f, ";");
  }
  return DigestHex(Sha256(id));
}

std::string ProgramCache::PathOf(const std::string& key) const {
  return absl::StrCat(dir_, "/", key, ".clbin");
}

absl::StatusOr<std::string> ProgramCache::Load(const std::string& key) const {
  if (dir_.empty()) return absl::NotFoundError("no OpenCL program cache");
  const std::string path = PathOf(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("no cache entry ", path));
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string bytes = buf.str();
  const auto corrupt = [&](const char* why) {
    return absl::DataLossError(absl::StrCat("OpenCL program cache entry '", path, "' ", why));
  };
  if (bytes.size() < kHeaderBytes) return corrupt("is truncated");
  if (std::memcmp(bytes.data(), kEntryMagic, 8) != 0) return corrupt("is not a Kiln entry");
  uint64_t size = 0;
  for (int i = 7; i >= 0; --i) size = size << 8 | static_cast<uint8_t>(bytes[8 + i]);
  if (size != bytes.size() - kHeaderBytes) return corrupt("has the wrong size");
  std::string payload = bytes.substr(kHeaderBytes);
  const Sha256Digest digest = Sha256(payload);
  if (std::memcmp(digest.data(), bytes.data() + 16, 32) != 0) {
    return corrupt("fails its digest");
  }
  return payload;
}

absl::Status ProgramCache::Store(const std::string& key, const std::string& binary) const {
  if (dir_.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(MakeDirs(dir_));
  std::string header(kEntryMagic, 8);
  for (int i = 0; i < 8; ++i) header.push_back(static_cast<char>(binary.size() >> (8 * i)));
  const Sha256Digest digest = Sha256(binary);
  header.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  const absl::string_view parts[] = {header, binary};
  return WriteFilePartsAtomic(PathOf(key), parts);
}

}  // namespace kiln::kernels::opencl
