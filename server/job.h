// A build's private job folder and the worker protocol.
//
// Job folder (created by the server, mode 0700; the worker runs with it as its working folder):
//   in:  spec.pb (kiln.v1.BuildSpec), model.onnx, policy_text (when the spec has one),
//        sample_<i>.pb (kiln.v1.SampleSet, i = 0, 1, ...)
//   out: engine.kiln (written through a temp file and a rename)
// The staging inputs are removed as soon as the worker has exited; engine.kiln stays while the
// build is kept for WatchBuild.
//
// Worker -> server: a pipe (the worker's fd 3) carrying frames
//   u32 little-endian payload length, u8 kind, payload
// kind 1: a serialized kiln.v1.BuildEvent (log lines, stages, warnings, decisions, the report,
//         and a partial BuildResult with summary, build_ms and accuracy_pass);
// kind 2: the worker's final status: u32 code (absl::StatusCode) then the message;
// kind 3: a serialized kiln.v1.Device (only from `kiln-server --list-devices`, device_probe.h).
// A worker that exits without a status frame, or with a torn frame, has crashed.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/v1/engine.pb.h"
#include "kiln/v1/service.pb.h"

namespace kiln::server::job {

inline constexpr char kSpecFile[] = "spec.pb";
inline constexpr char kModelFile[] = "model.onnx";
/// Named as in error messages ("policy_text:3:1: ..."): the worker opens it by relative path, so
/// rule origins recorded in the engine never contain the job folder.
inline constexpr char kPolicyFile[] = "policy_text";
inline constexpr char kEngineFile[] = "engine.kiln";
/// The worker's end of the event pipe.
inline constexpr int kEventFd = 3;
/// Largest frame accepted (a report of a huge model is the biggest).
inline constexpr uint32_t kMaxFrameBytes = 512u << 20;

/// "sample_<i>.pb".
std::string SampleFile(int index);

enum class FrameKind : uint8_t { kEvent = 1, kStatus = 2, kDevice = 3 };

/// Writes one event frame (blocking; EINTR retried). Errors when the reader is gone.
absl::Status WriteEventFrame(int fd, const v1::BuildEvent& event);

/// Writes the final status frame.
absl::Status WriteStatusFrame(int fd, const absl::Status& status);

/// Writes one device frame.
absl::Status WriteDeviceFrame(int fd, const v1::Device& device);

/// One decoded frame.
struct Frame {
  FrameKind kind = FrameKind::kEvent;
  v1::BuildEvent event;
  absl::Status status;
  v1::Device device;
};

/// Reads frames from a pipe (blocking).
class FrameReader {
 public:
  explicit FrameReader(int fd) : fd_(fd) {}
  /// The next frame; false at a clean end of stream; DataLoss for a torn or malformed frame.
  absl::StatusOr<bool> Next(Frame* frame);

 private:
  // Reads exactly n bytes; returns the count read before EOF.
  absl::StatusOr<size_t> ReadFull(char* p, size_t n);
  int fd_;
};

}  // namespace kiln::server::job
