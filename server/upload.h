// Receiving one build's upload into its job folder: model chunks (at most 1 MiB each, never more
// than the declared size) streamed to model.onnx with a running SHA-256, then sample sets, then
// the size and digest checks. Errors are INVALID_ARGUMENT naming the build and the field.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kiln/v1/service.pb.h"
#include "server/config.h"
#include "server/files.h"

namespace kiln::server {

/// The upload of one build. Used by one reactor (one thread at a time).
class Upload {
 public:
  Upload(std::string build_id, const v1::BuildSpec& spec, std::string job_dir,
         const ServerConfig& config);
  ~Upload();
  Upload(const Upload&) = delete;
  Upload& operator=(const Upload&) = delete;

  /// Creates the staging file.
  absl::Status Open();
  absl::Status AddChunk(const std::string& bytes);
  absl::Status AddSample(const v1::SampleSet& sample);
  /// Checks the declared size and SHA-256 and closes the staging file.
  absl::Status Finish();
  /// All declared model bytes have arrived.
  bool model_complete() const { return received_ == declared_; }
  uint64_t received() const { return received_; }
  uint64_t declared() const { return declared_; }

 private:
  absl::Status Error(absl::string_view field, absl::string_view msg) const;
  std::string build_id_;
  std::string job_dir_;
  uint64_t declared_;
  std::string declared_sha_;
  int64_t max_sample_bytes_;
  int max_samples_;
  int fd_ = -1;
  uint64_t received_ = 0;
  int samples_ = 0;
  Sha256Stream sha_;
};

}  // namespace kiln::server
