#include "client/files.h"

#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/common/sample_sets.h"

namespace kiln::client {
namespace {

std::string Hex(const unsigned char* bytes, unsigned int n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (unsigned int i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}

std::string Finish(EVP_MD_CTX* ctx) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx, md, &n);
  return Hex(md, n);
}

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open '", path, "': ", std::strerror(errno)));
  }
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    out.append(buf, n);
    if (out.size() > max_bytes) {
      std::fclose(f);
      return absl::ResourceExhaustedError(
          absl::StrCat("'", path, "': sample inputs exceed ", max_bytes, " bytes"));
    }
  }
  bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::DataLossError(absl::StrCat("read error on '", path, "'"));
  return out;
}

// DIR/input_0.pb, DIR/input_1.pb, ... up to the first missing index.
absl::Status ReadInputFiles(const std::string& dir, uint64_t max_total_bytes, uint64_t* total,
                            v1::SampleSet* set) {
  for (int i = 0;; ++i) {
    std::string path = absl::StrCat(dir, "/input_", i, ".pb");
    if (!IsFile(path)) break;
    auto bytes = ReadSmallFile(path, max_total_bytes - *total);
    if (!bytes.ok()) return bytes.status();
    *total += bytes->size();
    set->add_inputs(std::move(*bytes));
  }
  return absl::OkStatus();
}

}  // namespace

std::string Sha256Hex(absl::string_view data) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  EVP_DigestUpdate(ctx, data.data(), data.size());
  std::string hex = Finish(ctx);
  EVP_MD_CTX_free(ctx);
  return hex;
}

absl::StatusOr<FileDigest> DigestFile(const std::string& path, const std::string& field) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(field, " '", path, "': ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " '", path, "' is not a file"));
  }
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(field, " '", path, "': ", std::strerror(errno)));
  }
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  FileDigest d;
  std::string buf(1 << 20, '\0');
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    EVP_DigestUpdate(ctx, buf.data(), n);
    d.size += n;
  }
  bool failed = std::ferror(f) != 0;
  std::fclose(f);
  d.sha256 = Finish(ctx);
  EVP_MD_CTX_free(ctx);
  if (failed) return absl::DataLossError(absl::StrCat(field, " '", path, "': read error"));
  return d;
}

absl::StatusOr<std::vector<v1::SampleSet>> ReadSampleSets(const std::string& dir,
                                                          uint64_t max_total_bytes) {
  absl::StatusOr<std::vector<std::string>> folders = SampleSetFolders(dir);
  if (!folders.ok()) return folders.status();
  std::vector<v1::SampleSet> sets;
  uint64_t total = 0;
  for (const std::string& folder : *folders) {
    v1::SampleSet set;
    if (auto s = ReadInputFiles(folder, max_total_bytes, &total, &set); !s.ok()) return s;
    sets.push_back(std::move(set));
  }
  return sets;
}

EngineSink::EngineSink(std::string path, std::string tmp, FILE* file, void* md_ctx)
    : path_(std::move(path)), tmp_path_(std::move(tmp)), file_(file), md_ctx_(md_ctx) {}

absl::StatusOr<std::unique_ptr<EngineSink>> EngineSink::Open(const std::string& path) {
  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("-o '", path, "': cannot write: ", std::strerror(errno)));
  }
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  return std::unique_ptr<EngineSink>(new EngineSink(path, std::move(tmp), f, ctx));
}

EngineSink::~EngineSink() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) std::remove(tmp_path_.c_str());
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(md_ctx_));
}

absl::Status EngineSink::Append(uint64_t offset, absl::string_view data) {
  if (offset != received_) {
    return absl::DataLossError(absl::StrCat("engine chunk at offset ", offset, ", expected ",
                                            received_, " (chunks out of order)"));
  }
  if (std::fwrite(data.data(), 1, data.size(), file_) != data.size()) {
    return absl::DataLossError(absl::StrCat("short write to '", tmp_path_, "' (disk full?)"));
  }
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(md_ctx_), data.data(), data.size());
  received_ += data.size();
  return absl::OkStatus();
}

absl::Status EngineSink::Commit(uint64_t size, const std::string& sha256) {
  bool ok = std::fflush(file_) == 0;
  ok = fsync(fileno(file_)) == 0 && ok;
  ok = std::fclose(file_) == 0 && ok;
  file_ = nullptr;
  if (!ok) return absl::DataLossError(absl::StrCat("short write to '", tmp_path_, "'"));
  if (received_ != size) {
    return absl::DataLossError(
        absl::StrCat("engine_size: the server announced ", size, " bytes, received ", received_));
  }
  std::string got = Finish(static_cast<EVP_MD_CTX*>(md_ctx_));
  if (got != absl::AsciiStrToLower(sha256)) {
    return absl::DataLossError(absl::StrCat("engine_sha256: the server announced ", sha256,
                                            ", the received bytes hash to ", got));
  }
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("-o '", path_, "': cannot rename into place: ", std::strerror(errno)));
  }
  committed_ = true;
  return absl::OkStatus();
}

}  // namespace kiln::client
