// One build as the server keeps it: its spec, its event history (what WatchBuild replays), its
// subscribers (stream reactors) and, once done, its final status, engine file and result.
//
// Events are appended by the upload, the scheduler and the worker's pipe reader and never wait
// for a reader: each subscriber holds a cursor into the history and is woken when it grows. The
// history is bounded: a DEBUG/TRACE log line is dropped (and counted) when the slowest
// subscriber is `capacity` events behind or `capacity` log lines are kept; any log line is
// dropped once 4 x `capacity` are kept. Stages, warnings, decisions, the report and the result
// are never dropped. Engine chunks are not kept: each subscriber reads them from the engine file
// after the history, verifying the whole-blob digest as it goes, then gets the BuildResult.
// Once the build is done its history moves to a file in the job folder and is read from there.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kiln/v1/service.pb.h"
#include "server/files.h"

namespace kiln::server {

class WorkerProcess;

/// Where a finished build's engine is.
struct EngineFile {
  std::string path;
  uint64_t size = 0;
  std::string sha256;
};

/// A subscriber's position in a build's events. Used by one thread at a time.
struct Subscription {
  std::atomic<size_t> index{0};
  uint64_t offset = 0;  // engine bytes sent
  bool result_sent = false;
  bool waiting = false;  // guarded by the build's mutex
  int fd = -1;
  std::unique_ptr<Sha256Stream> sha;
  std::function<void()> wake;
  ~Subscription();
};

/// One build. Thread-safe.
class Build {
 public:
  /// What Next() produced.
  enum class Poll { kEvent, kWait, kDone };
  enum class State { kUploading, kQueued, kRunning, kDone };

  Build(std::string id, v1::BuildSpec spec, std::string job_dir, int capacity)
      : id_(std::move(id)),
        spec_(std::move(spec)),
        job_dir_(std::move(job_dir)),
        capacity_(capacity) {}

  /// Removes the job folder: it lives as long as anyone (the manager's list of kept builds, a
  /// stream still sending the engine) holds the build.
  ~Build();

  const std::string& id() const { return id_; }
  const v1::BuildSpec& spec() const { return spec_; }
  const std::string& job_dir() const { return job_dir_; }

  /// Appends an event (subject to the drop policy above) and wakes waiting subscribers.
  void Append(v1::BuildEvent event);

  /// Registers a subscriber starting at the first event; `wake` is called (from any thread,
  /// without the build's lock) when Next() may have something new after it returned kWait.
  std::shared_ptr<Subscription> Subscribe(std::function<void()> wake);
  void Unsubscribe(const std::shared_ptr<Subscription>& sub);

  /// The subscriber's next event (kEvent), nothing yet (kWait: `wake` will be called), or the
  /// end of the stream with its status (kDone).
  Poll Next(Subscription& sub, v1::BuildEvent* out, absl::Status* final_status);

  /// Ends the build: on success `engine` and `result` describe the engine (result's
  /// dropped_log_lines and build_id are filled here).
  void Complete(absl::Status status, EngineFile engine, v1::BuildResult result);

  bool done() const;
  absl::Status status() const;
  uint64_t dropped_log_lines() const;

  // Scheduler bookkeeping, guarded by the BuildManager's mutex (not by this object).
  State state = State::kUploading;
  std::string cache_key;  ///< empty: not cached and not joined by key
  std::string request_id;
  std::string fingerprint;  ///< SpecFingerprint: what request_id stands for
  int owners = 0;  ///< Build calls attached; the build is cancelled when the last one goes away
  absl::Status cancel_reason;
  WorkerProcess* worker = nullptr;
  int last_queue_position = -1;
  std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point queued_at, started_at;
  /// The last upload message (uploading builds; the watchdog fails idle uploads).
  std::chrono::steady_clock::time_point upload_activity = created;

 private:
  // Moves the history of a finished build to job_dir/events.spill (kept in memory on failure).
  void SpillLocked();
  bool ReadSpilledLocked(size_t i, v1::BuildEvent* out) const;

  const std::string id_;
  const v1::BuildSpec spec_;
  const std::string job_dir_;
  const int capacity_;

  mutable std::mutex mu_;
  std::vector<v1::BuildEvent> history_;
  int spill_fd_ = -1;                    // finished builds: the history on disk
  std::vector<uint64_t> spill_offsets_;  // offset of each spilled event
  size_t log_lines_ = 0;
  uint64_t dropped_ = 0;
  std::vector<std::shared_ptr<Subscription>> subs_;
  bool done_ = false;
  absl::Status status_;
  EngineFile engine_;
  v1::BuildEvent result_;
};

}  // namespace kiln::server
