// Local files of convert-client: the model's digest, the sample sets to upload, and the engine
// written as it streams in (temp file, digest checked, then renamed).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/v1/service.pb.h"

namespace kiln::client {

/// Size and SHA-256 (lowercase hex) of a file, read in one streaming pass.
struct FileDigest {
  uint64_t size = 0;
  std::string sha256;
};

/// Digest of the file at `path`; errors name `field` (the flag that gave the path).
absl::StatusOr<FileDigest> DigestFile(const std::string& path, const std::string& field);

/// SHA-256 of `data`, lowercase hex.
std::string Sha256Hex(absl::string_view data);

/// The sample sets of an --inputs folder, as raw bytes (no parsing: the server parses them):
/// DIR/input_<i>.pb is one set; otherwise each DIR/test_data_set_<N>/ holding input_0.pb is one
/// set, in numeric order of N. Files are input_0.pb, input_1.pb, ... up to the first gap.
/// `max_total_bytes` bounds what is read.
absl::StatusOr<std::vector<v1::SampleSet>> ReadSampleSets(const std::string& dir,
                                                          uint64_t max_total_bytes);

/// Receives an engine in ordered chunks into a temp file next to `path`, hashing as it goes;
/// Commit verifies size and digest and renames it into place. Destroying an uncommitted sink
/// removes the temp file, so a failed build never leaves a partial engine.
class EngineSink {
 public:
  /// Opens the temp file for `path`.
  static absl::StatusOr<std::unique_ptr<EngineSink>> Open(const std::string& path);
  ~EngineSink();
  EngineSink(const EngineSink&) = delete;
  EngineSink& operator=(const EngineSink&) = delete;

  /// Appends a chunk; `offset` must equal the bytes received so far.
  absl::Status Append(uint64_t offset, absl::string_view data);

  /// Checks the bytes received against `size` and `sha256` (lowercase hex) and renames the temp
  /// file to the final path. A mismatch is DATA_LOSS and removes the temp file.
  absl::Status Commit(uint64_t size, const std::string& sha256);

  /// Bytes received so far.
  uint64_t received() const { return received_; }

 private:
  EngineSink(std::string path, std::string tmp, FILE* file, void* md_ctx);
  std::string path_;
  std::string tmp_path_;
  FILE* file_ = nullptr;
  void* md_ctx_ = nullptr;  // EVP_MD_CTX*, kept opaque so callers need no OpenSSL headers
  uint64_t received_ = 0;
  bool committed_ = false;
};

}  // namespace kiln::client
