// Spawning, watching and killing one build's worker process: fork + exec of the worker binary
// (`kiln-server --worker JOBDIR`) in its own process group, with RLIMIT_AS, RLIMIT_CPU and no core
// dumps, its event pipe on fd 3 and nothing else inherited.
#pragma once

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::server {

/// Resource limits of one worker.
struct WorkerLimits {
  int64_t memory_mb = 4096;   ///< RLIMIT_AS
  int64_t cpu_seconds = 600;  ///< RLIMIT_CPU (soft; the hard limit is 2 s more)
};

/// How a worker ended.
struct WorkerExit {
  bool signaled = false;
  int code = 0;            ///< exit code, or the signal number when `signaled`
  double cpu_seconds = 0;  ///< user + system CPU time of the worker
};

/// One running worker process. Thread-safe: Kill() may be called from any thread while another
/// thread is in Wait().
class WorkerProcess {
 public:
  /// Starts `binary --worker job_dir [--enable-test-hooks]`.
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Spawn(const std::string& binary,
                                                              const std::string& job_dir,
                                                              const WorkerLimits& limits,
                                                              bool test_hooks);
  /// Starts `binary args...` the same way (the device probe: `--list-devices`).
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Start(const std::string& binary,
                                                              std::vector<std::string> args,
                                                              const WorkerLimits& limits);
  /// Kills and reaps a worker that is still running.
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  /// The read end of the event pipe (owned by this object).
  int event_fd() const { return event_fd_; }
  pid_t pid() const { return pid_; }

  /// SIGKILL to the worker's whole process group; a no-op once it has been reaped.
  void Kill();

  /// Blocks until the worker exits, reaps it and says how it ended. Call once.
  WorkerExit Wait();

  /// The status of a worker that ended without sending its own: RESOURCE_EXHAUSTED for the CPU
  /// limit, INTERNAL for a crash (naming the signal) or an exit without a result.
  static absl::Status ExitStatus(const WorkerExit& exit, const WorkerLimits& limits);

 private:
  WorkerProcess(pid_t pid, int event_fd) : pid_(pid), event_fd_(event_fd) {}
  pid_t pid_;
  int event_fd_;
  std::mutex mu_;
  bool reaped_ = false;
};

}  // namespace kiln::server
