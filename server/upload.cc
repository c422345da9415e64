#include "server/upload.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/job.h"

namespace kiln::server {

Upload::Upload(std::string build_id, const v1::BuildSpec& spec, std::string job_dir,
               const ServerConfig& config)
    : build_id_(std::move(build_id)),
      job_dir_(std::move(job_dir)),
      declared_(spec.model_size()),
      declared_sha_(spec.model_sha256()),
      max_sample_bytes_(config.max_sample_bytes),
      max_samples_(config.max_samples) {}

Upload::~Upload() {
  if (fd_ >= 0) close(fd_);
}

absl::Status Upload::Error(absl::string_view field, absl::string_view msg) const {
  return absl::InvalidArgumentError(absl::StrCat("build ", build_id_, ": ", field, ": ", msg));
}

absl::Status Upload::Open() {
  std::string path = absl::StrCat(job_dir_, "/", job::kModelFile);
  fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    return absl::InternalError(
        absl::StrCat("build ", build_id_, ": cannot create the staging file: ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status Upload::AddChunk(const std::string& bytes) {
  if (samples_ > 0) return Error("model_chunk", "sent after a sample set");
  if (bytes.size() > static_cast<size_t>(kMaxChunkBytes)) {
    return Error("model_chunk",
                 absl::StrCat(bytes.size(), " bytes exceeds the chunk limit of 1 MiB"));
  }
  if (received_ + bytes.size() > declared_) {
    return Error("model_size",
                 absl::StrCat("the upload exceeds the declared ", declared_, " bytes"));
  }
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n > 0) {
    ssize_t w = write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("build ", build_id_, ": cannot write the staging file: ", strerror(errno)));
    }
    p += w;
    n -= w;
  }
  sha_.Update(bytes);
  received_ += bytes.size();
  return absl::OkStatus();
}

absl::Status Upload::AddSample(const v1::SampleSet& sample) {
  if (!model_complete()) {
    return Error("sample", absl::StrCat("sent before the whole model (", received_, " of ",
                                        declared_, " bytes)"));
  }
  if (samples_ >= max_samples_) {
    return Error("sample",
                 absl::StrCat("more than this server's limit of ", max_samples_, " sample sets"));
  }
  if (static_cast<int64_t>(sample.ByteSizeLong()) > max_sample_bytes_) {
    return Error("sample", absl::StrCat("a sample set larger than ", max_sample_bytes_, " bytes"));
  }
  absl::Status st = WriteFileAtomic(absl::StrCat(job_dir_, "/", job::SampleFile(samples_)),
                                    sample.SerializeAsString(), kPrivateFileMode);
  if (!st.ok()) return st;
  ++samples_;
  return absl::OkStatus();
}

absl::Status Upload::Finish() {
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
  if (received_ != declared_) {
    return Error("model_size",
                 absl::StrCat("declared ", declared_, " bytes, received ", received_));
  }
  std::string got = sha_.FinishHex();
  if (got != declared_sha_) {
    return Error("model_sha256",
                 absl::StrCat("declared ", declared_sha_, ", the upload's digest is ", got));
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
