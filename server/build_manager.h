// Builds, the scheduler and the worker lifecycle of kiln-server.
//
// A spec is admitted when fewer than --workers + --queue builds are queued or running and fewer
// than --max-uploads are uploading (else RESOURCE_EXHAUSTED before any upload); a finished
// upload is queued when a queue place is free (else RESOURCE_EXHAUSTED). An upload that sends
// nothing for --upload-idle-seconds, or lasts past --upload-seconds, fails with
// DEADLINE_EXCEEDED (a watchdog thread checks every second), so idle streams cannot hold the
// service. A spec may instead join an existing build: the same request_id with the same spec
// (SpecFingerprint; the same id with another spec is ALREADY_EXISTS, so an id never returns
// another model's engine), or (for builds without a report) the same cache key while that build
// is in flight. A cached engine answers the spec at once. After the upload, the build waits in a
// FIFO queue (QueuePosition events) for one of --workers worker processes; a monitor thread per
// running build forwards the worker's events and ends the build when the worker exits. Cancelling
// (CancelBuild, the last attached Build call going away, draining) kills the worker's process
// group. A build is "live" from admission until its worker is reaped and its staging files are
// removed.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/kernels/device.h"
#include "kiln/v1/service.pb.h"
#include "server/build.h"
#include "server/cache.h"
#include "server/config.h"
#include "server/worker_process.h"
#include "spdlog/logger.h"

namespace kiln::server {

/// Owns every build of one server.
class BuildManager {
 public:
  BuildManager(ServerConfig config, std::shared_ptr<spdlog::logger> log);
  /// Cancels everything, waits for the monitor threads, removes the temp work folder.
  ~BuildManager();

  /// Creates the work and cache folders.
  absl::Status Init();

  /// The OpenCL devices this server builds for (listed by Init in a child process).
  const kernels::MachineDevices& devices() const { return devices_; }

  /// The outcome of a spec: the build to follow and whether this caller uploads its model.
  struct Opened {
    std::shared_ptr<Build> build;
    bool upload = false;
  };
  /// Validates and admits a spec (see the file comment). The caller becomes an owner.
  absl::StatusOr<Opened> Open(const v1::BuildSpec& spec);

  /// A message of `build`'s upload arrived (resets its idle time).
  void UploadActivity(const std::shared_ptr<Build>& build);
  /// The upload of `build` is complete and verified: queue it (or fail it when the queue is
  /// full).
  void UploadDone(const std::shared_ptr<Build>& build);
  /// Ends a build that has not started running with `status` (upload errors).
  void Fail(const std::shared_ptr<Build>& build, absl::Status status);
  /// An owner (Build call) went away; the last one cancels an unfinished build.
  void ReleaseOwner(const std::shared_ptr<Build>& build);

  /// A known build (running or kept after it finished), or null.
  std::shared_ptr<Build> Find(const std::string& id);
  /// CancelBuild: NOT_FOUND for an unknown id; false when the build had already finished.
  absl::StatusOr<bool> Cancel(const std::string& id);

  /// Builds admitted and not yet fully released (uploading, queued, running, being cleaned up).
  int LiveBuilds();
  /// Refuse new specs with UNAVAILABLE from now on.
  void SetDraining();
  bool draining();
  /// Waits until no build is live or `deadline` passes; true when idle.
  bool WaitIdle(absl::Time deadline);
  /// Cancels every unfinished build with `why`.
  void CancelAll(const absl::Status& why);

 private:
  kernels::MachineDevices devices_;
  // Ends `b` with `why` (kills its worker when running); a no-op once it is done.
  void CancelBuild(const std::shared_ptr<Build>& b, absl::Status why);
  void Dispatch();                     // requires mu_
  void UpdateQueuePositions();         // requires mu_
  void Run(std::shared_ptr<Build> b);  // monitor thread
  // Ends `b` (any state): removes staging, updates the scheduler, completes the build.
  void Finish(const std::shared_ptr<Build>& b, absl::Status status, EngineFile engine,
              v1::BuildResult result);
  std::shared_ptr<Build> CacheHit(const v1::BuildSpec& spec, const CacheEntry& e,
                                  const std::string& fingerprint);  // requires mu_
  absl::Status QueueFull();  // RESOURCE_EXHAUSTED when no queue place is free; requires mu_
  void Keep(const std::shared_ptr<Build>& b);  // requires mu_
  std::string NewId();
  void Watchdog();  // fails idle and overlong uploads until the manager is destroyed

  const ServerConfig config_;
  const WorkerLimits limits_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<EngineCache> cache_;
  std::string work_dir_;
  bool own_work_dir_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  bool draining_ = false;
  int live_ = 0;
  int running_ = 0;
  int uploading_ = 0;
  bool stopping_ = false;
  std::condition_variable watchdog_cv_;
  std::thread watchdog_;
  int monitors_ = 0;
  std::map<std::string, std::shared_ptr<Build>> builds_;
  std::map<std::string, std::shared_ptr<Build>> by_request_;
  std::map<std::string, std::shared_ptr<Build>> in_flight_by_key_;
  std::deque<std::shared_ptr<Build>> queue_;
  std::deque<std::shared_ptr<Build>> finished_;
};

}  // namespace kiln::server
