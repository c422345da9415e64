#include "server/job.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln::server::job {
namespace {

absl::Status WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return absl::UnavailableError(absl::StrCat("event pipe: ", strerror(errno)));
    p += w;
    n -= w;
  }
  return absl::OkStatus();
}

absl::Status WriteFrame(int fd, FrameKind kind, const std::string& payload) {
  if (payload.size() > kMaxFrameBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("event of ", payload.size(), " bytes exceeds the frame limit"));
  }
  uint32_t n = static_cast<uint32_t>(payload.size());
  char header[5] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                    static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 24) & 0xff),
                    static_cast<char>(kind)};
  // One buffer, one write for small frames: frames from several logging threads never interleave
  // because the worker serialises writes under its sink's mutex anyway.
  std::string frame(header, sizeof(header));
  frame += payload;
  return WriteAll(fd, frame.data(), frame.size());
}

}  // namespace

std::string SampleFile(int index) { return absl::StrCat("sample_", index, ".pb"); }

absl::Status WriteEventFrame(int fd, const v1::BuildEvent& event) {
  return WriteFrame(fd, FrameKind::kEvent, event.SerializeAsString());
}

absl::Status WriteStatusFrame(int fd, const absl::Status& status) {
  uint32_t code = static_cast<uint32_t>(status.code());
  std::string payload = {static_cast<char>(code & 0xff), static_cast<char>((code >> 8) & 0xff),
                         static_cast<char>((code >> 16) & 0xff),
                         static_cast<char>((code >> 24) & 0xff)};
  payload += std::string(status.message());
  return WriteFrame(fd, FrameKind::kStatus, payload);
}

absl::Status WriteDeviceFrame(int fd, const v1::Device& device) {
  return WriteFrame(fd, FrameKind::kDevice, device.SerializeAsString());
}

absl::StatusOr<size_t> FrameReader::ReadFull(char* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd_, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return absl::DataLossError(absl::StrCat("event pipe: ", strerror(errno)));
    if (r == 0) break;
    got += r;
  }
  return got;
}

absl::StatusOr<bool> FrameReader::Next(Frame* frame) {
  unsigned char header[5];
  auto got = ReadFull(reinterpret_cast<char*>(header), sizeof(header));
  if (!got.ok()) return got.status();
  if (*got == 0) return false;
  if (*got < sizeof(header)) return absl::DataLossError("torn frame header on the event pipe");
  uint32_t n = header[0] | (header[1] << 8) | (header[2] << 16) | (uint32_t{header[3]} << 24);
  if (n > kMaxFrameBytes) return absl::DataLossError("oversized frame on the event pipe");
  std::string payload(n, '\0');
  got = ReadFull(payload.data(), n);
  if (!got.ok()) return got.status();
  if (*got < n) return absl::DataLossError("torn frame on the event pipe");
  switch (static_cast<FrameKind>(header[4])) {
    case FrameKind::kEvent:
      frame->kind = FrameKind::kEvent;
      if (!frame->event.ParseFromString(payload)) {
        return absl::DataLossError("malformed event on the event pipe");
      }
      return true;
    case FrameKind::kStatus: {
      if (n < 4) return absl::DataLossError("malformed status on the event pipe");
      auto* u = reinterpret_cast<const unsigned char*>(payload.data());
      uint32_t code = u[0] | (u[1] << 8) | (u[2] << 16) | (uint32_t{u[3]} << 24);
      frame->kind = FrameKind::kStatus;
      frame->status = code > 16
                          ? absl::InternalError(payload.substr(4))
                          : absl::Status(static_cast<absl::StatusCode>(code), payload.substr(4));
      return true;
    }
    case FrameKind::kDevice:
      frame->kind = FrameKind::kDevice;
      if (!frame->device.ParseFromString(payload)) {
        return absl::DataLossError("malformed device on the event pipe");
      }
      return true;
  }
  return absl::DataLossError("unknown frame kind on the event pipe");
}

}  // namespace kiln::server::job
