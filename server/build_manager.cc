#include "server/build_manager.h"

#include <malloc.h>
#include <stdlib.h>
#include <unistd.h>

#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "server/device_probe.h"
#include "server/job.h"
#include "server/spec.h"
#include "server/trim.h"

namespace kiln::server {
namespace {

v1::BuildEvent StageEvent(const char* name, double progress) {
  v1::BuildEvent e;
  e.mutable_stage()->set_name(name);
  e.mutable_stage()->set_progress(progress);
  return e;
}

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// Prefixes a worker's message with the build id unless it already names it.
absl::Status NameBuild(const std::string& id, const absl::Status& st) {
  if (st.ok() || absl::StrContains(st.message(), id)) return st;
  return absl::Status(st.code(), absl::StrCat("build ", id, ": ", st.message()));
}

}  // namespace

BuildManager::BuildManager(ServerConfig config, std::shared_ptr<spdlog::logger> log)
    : config_(std::move(config)),
      limits_{config_.worker_memory_mb, config_.worker_cpu_seconds},
      log_(std::move(log)) {}

BuildManager::~BuildManager() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  watchdog_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  SetDraining();
  CancelAll(absl::UnavailableError("the server is shutting down"));
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return monitors_ == 0 && live_ == 0; });
  }
  if (own_work_dir_) RemoveTree(work_dir_);
}

absl::Status BuildManager::Init() {
  if (config_.work_dir.empty()) {
    char tmpl[] = "/tmp/kiln-server-XXXXXX";
    if (!mkdtemp(tmpl)) return absl::InternalError("cannot create a work folder under /tmp");
    work_dir_ = tmpl;
    own_work_dir_ = true;
  } else {
    work_dir_ = config_.work_dir;
    if (absl::Status st = MakeDirs(work_dir_); !st.ok()) return st;
  }
  if (!config_.cache_dir.empty()) {
    cache_ = std::make_unique<EngineCache>(config_.cache_dir, log_);
    if (absl::Status st = cache_->Init(); !st.ok()) return st;
  }
  log_->info("work folder {}, cache {}", work_dir_,
             config_.cache_dir.empty() ? "off" : config_.cache_dir);
  devices_ = ProbeDevices(config_.worker_binary, absl::Seconds(30));
  if (!devices_.status.ok()) {
    log_->info("devices: the CPU (no OpenCL device: {})", std::string(devices_.status.message()));
  } else {
    std::vector<std::string> names;
    for (const kernels::DeviceDescription& d : devices_.opencl) {
      names.push_back(absl::StrCat(d.Spec(), " ", d.Describe()));
    }
    log_->info("devices: the CPU{}{}", names.empty() ? "" : "; ", absl::StrJoin(names, "; "));
  }
  watchdog_ = std::thread(&BuildManager::Watchdog, this);
  return absl::OkStatus();
}

void BuildManager::Watchdog() {
  const auto idle = std::chrono::seconds(config_.upload_idle_seconds);
  const auto total = std::chrono::seconds(config_.upload_seconds);
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    watchdog_cv_.wait_for(l, std::chrono::seconds(1));
    if (stopping_) break;
    auto now = std::chrono::steady_clock::now();
    std::vector<std::pair<std::shared_ptr<Build>, absl::Status>> expired;
    for (const auto& [id, b] : builds_) {
      if (b->state != Build::State::kUploading || !b->cancel_reason.ok()) continue;
      if (now - b->upload_activity >= idle) {
        expired.emplace_back(
            b, absl::DeadlineExceededError(absl::StrCat(
                   "build ", id, ": the upload sent nothing for ", config_.upload_idle_seconds,
                   " s (--upload-idle-seconds); send the model without pauses")));
      } else if (now - b->created >= total) {
        expired.emplace_back(b, absl::DeadlineExceededError(
                                    absl::StrCat("build ", id, ": the upload took longer than ",
                                                 config_.upload_seconds, " s (--upload-seconds)")));
      }
    }
    if (expired.empty()) continue;
    l.unlock();
    for (auto& [b, why] : expired) {
      {
        // The upload may have completed since the scan: only a build still uploading expires.
        std::lock_guard<std::mutex> g(mu_);
        if (b->state != Build::State::kUploading || !b->cancel_reason.ok()) continue;
        b->cancel_reason = why;
      }
      log_->warn("build {}: {}", b->id(), std::string(why.message()));
      Finish(b, std::move(why), {}, {});
    }
    l.lock();
  }
}

std::string BuildManager::NewId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("b-%016x", rng());
}

absl::StatusOr<BuildManager::Opened> BuildManager::Open(const v1::BuildSpec& spec) {
  if (draining()) return absl::UnavailableError("the server is draining; retry elsewhere");
  auto checked = CheckSpec(spec, config_.max_model_bytes, &devices_);
  if (!checked.ok()) return checked.status();
  // A build with a report is never joined by key nor cached: its samples arrive after the spec.
  std::string key = checked->report ? "" : CacheKey(spec, *checked);
  const std::string fingerprint = spec.request_id().empty() ? "" : SpecFingerprint(spec);
  // The build to join, or null; ALREADY_EXISTS when the request id names another spec's build.
  auto join = [&]() -> absl::StatusOr<std::shared_ptr<Build>> {
    if (!spec.request_id().empty()) {
      auto it = by_request_.find(spec.request_id());
      if (it != by_request_.end() &&
          (it->second->state != Build::State::kDone || it->second->status().ok())) {
        if (it->second->fingerprint != fingerprint) {
          // Never another build's engine for a reused id: ids may be predictable (CI job
          // names), and the engine belongs to whoever sent that model.
          return absl::AlreadyExistsError(absl::StrCat(
              "request_id '", Excerpt(spec.request_id(), 64),
              "' is already used by a build of another model, policy or options; give each "
              "build its own request id (a retry of the same build may reuse it)"));
        }
        return it->second;
      }
    }
    if (!key.empty()) {
      auto it = in_flight_by_key_.find(key);
      if (it != in_flight_by_key_.end()) return it->second;
    }
    return nullptr;
  };
  {
    std::lock_guard<std::mutex> l(mu_);
    auto b = join();
    if (!b.ok()) return b.status();
    if (*b) {
      ++(*b)->owners;
      log_->info("build {}: joined by an identical request", (*b)->id());
      return Opened{*b, false};
    }
  }
  std::optional<CacheEntry> hit;
  if (cache_ && !key.empty()) hit = cache_->Lookup(key);
  std::lock_guard<std::mutex> l(mu_);
  {
    auto b = join();
    if (!b.ok()) return b.status();
    if (*b) {
      ++(*b)->owners;
      return Opened{*b, false};
    }
  }
  if (hit) return Opened{CacheHit(spec, *hit, fingerprint), false};
  if (absl::Status full = QueueFull(); !full.ok()) return full;
  if (uploading_ >= config_.max_uploads) {
    return absl::ResourceExhaustedError(absl::StrCat("too many uploads in progress: ", uploading_,
                                                     " (--max-uploads ", config_.max_uploads,
                                                     "); retry later"));
  }
  std::string id = NewId();
  std::string dir = absl::StrCat(work_dir_, "/", id);
  if (absl::Status st = MakeDirs(dir); !st.ok()) return st;
  absl::Status st = WriteFileAtomic(absl::StrCat(dir, "/", job::kSpecFile),
                                    spec.SerializeAsString(), kPrivateFileMode);
  if (st.ok() && !spec.policy_text().empty()) {
    st = WriteFileAtomic(absl::StrCat(dir, "/", job::kPolicyFile), spec.policy_text(),
                         kPrivateFileMode);
  }
  if (!st.ok()) {
    RemoveTree(dir);
    return st;
  }
  auto b = std::make_shared<Build>(id, spec, dir, config_.event_buffer);
  b->cache_key = key;
  b->request_id = spec.request_id();
  b->fingerprint = fingerprint;
  b->owners = 1;
  ++live_;
  ++uploading_;
  builds_[id] = b;
  if (!b->request_id.empty()) by_request_[b->request_id] = b;
  if (!key.empty()) in_flight_by_key_[key] = b;
  int busy = running_ + static_cast<int>(queue_.size());
  v1::BuildEvent acc;
  acc.mutable_accepted()->set_build_id(id);
  acc.mutable_accepted()->set_queue_position(busy >= config_.workers ? queue_.size() + 1 : 0);
  b->Append(std::move(acc));
  b->Append(StageEvent("upload", 0));
  log_->info("build {}: accepted '{}' ({} bytes, policy '{}')", id, spec.model_name(),
             spec.model_size(), spec.policy_text().empty() ? spec.policy() : "policy_text");
  return Opened{b, true};
}

std::shared_ptr<Build> BuildManager::CacheHit(const v1::BuildSpec& spec, const CacheEntry& e,
                                              const std::string& fingerprint) {
  auto b = std::make_shared<Build>(NewId(), spec, "", config_.event_buffer);
  b->state = Build::State::kDone;
  b->request_id = spec.request_id();
  b->fingerprint = fingerprint;
  v1::BuildEvent acc;
  acc.mutable_accepted()->set_build_id(b->id());
  acc.mutable_accepted()->set_cache_hit(true);
  b->Append(std::move(acc));
  b->Append(StageEvent("done", 1.0));
  v1::BuildResult r;
  r.set_engine_size(e.size);
  r.set_engine_sha256(e.sha256);
  r.set_model_sha256(spec.model_sha256());
  r.set_cache_hit(true);
  r.set_accuracy_pass(true);
  r.set_summary("  served from the engine cache\n");
  b->Complete(absl::OkStatus(), EngineFile{e.path, e.size, e.sha256}, std::move(r));
  builds_[b->id()] = b;
  if (!b->request_id.empty()) by_request_[b->request_id] = b;
  Keep(b);
  log_->info("build {}: cache hit for '{}'", b->id(), spec.model_name());
  return b;
}

absl::Status BuildManager::QueueFull() {
  int capacity = config_.workers + config_.queue;
  int waiting = static_cast<int>(queue_.size());
  if (running_ + waiting < capacity) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("the build queue is full: ", running_, " running, ", waiting,
                   " waiting (--workers ", config_.workers, ", --queue ", config_.queue, ")"));
}

void BuildManager::UploadActivity(const std::shared_ptr<Build>& b) {
  std::lock_guard<std::mutex> l(mu_);
  b->upload_activity = std::chrono::steady_clock::now();
}

void BuildManager::UploadDone(const std::shared_ptr<Build>& b) {
  std::unique_lock<std::mutex> l(mu_);
  if (b->state != Build::State::kUploading) return;
  if (absl::Status full = QueueFull(); !full.ok()) {
    l.unlock();
    CancelBuild(b, absl::Status(full.code(), absl::StrCat("build ", b->id(), ": ", full.message(),
                                                          " when its upload completed")));
    return;
  }
  --uploading_;
  b->state = Build::State::kQueued;
  b->queued_at = std::chrono::steady_clock::now();
  queue_.push_back(b);
  b->Append(StageEvent("queued", 0.02));
  Dispatch();
  UpdateQueuePositions();
}

void BuildManager::Fail(const std::shared_ptr<Build>& b, absl::Status status) {
  CancelBuild(b, std::move(status));
}

void BuildManager::CancelBuild(const std::shared_ptr<Build>& b, absl::Status why) {
  std::unique_lock<std::mutex> l(mu_);
  if (b->state == Build::State::kDone) return;
  if (b->cancel_reason.ok()) b->cancel_reason = std::move(why);
  if (b->state == Build::State::kRunning) {
    // The monitor thread sees the pipe close, reaps the worker and ends the build.
    if (b->worker) b->worker->Kill();
    return;
  }
  absl::Status reason = b->cancel_reason;
  l.unlock();
  Finish(b, reason, {}, {});
}

void BuildManager::ReleaseOwner(const std::shared_ptr<Build>& b) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (--b->owners > 0 || b->state == Build::State::kDone) return;
  }
  CancelBuild(b, absl::CancelledError(absl::StrCat("build ", b->id(),
                                                   ": cancelled: the client went away (disconnect, "
                                                   "cancellation or deadline)")));
}

std::shared_ptr<Build> BuildManager::Find(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = builds_.find(id);
  return it == builds_.end() ? nullptr : it->second;
}

absl::StatusOr<bool> BuildManager::Cancel(const std::string& id) {
  std::shared_ptr<Build> b = Find(id);
  if (!b) return absl::NotFoundError(absl::StrCat("build ", Excerpt(id), ": no such build"));
  {
    std::lock_guard<std::mutex> l(mu_);
    if (b->state == Build::State::kDone) return false;
  }
  CancelBuild(b, absl::CancelledError(absl::StrCat("build ", id, ": cancelled by CancelBuild")));
  return true;
}

int BuildManager::LiveBuilds() {
  std::lock_guard<std::mutex> l(mu_);
  return live_;
}

void BuildManager::SetDraining() {
  std::lock_guard<std::mutex> l(mu_);
  draining_ = true;
}

bool BuildManager::draining() {
  std::lock_guard<std::mutex> l(mu_);
  return draining_;
}

bool BuildManager::WaitIdle(absl::Time deadline) {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_until(l, absl::ToChronoTime(deadline), [&] { return live_ == 0; });
}

void BuildManager::CancelAll(const absl::Status& why) {
  std::vector<std::shared_ptr<Build>> open;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [id, b] : builds_) {
      if (b->state != Build::State::kDone) open.push_back(b);
    }
  }
  for (const auto& b : open) CancelBuild(b, NameBuild(b->id(), why));
}

void BuildManager::Dispatch() {
  while (running_ < config_.workers && !queue_.empty()) {
    std::shared_ptr<Build> b = queue_.front();
    queue_.pop_front();
    b->state = Build::State::kRunning;
    b->started_at = std::chrono::steady_clock::now();
    ++running_;
    ++monitors_;
    std::thread(&BuildManager::Run, this, b).detach();
  }
}

void BuildManager::UpdateQueuePositions() {
  int pos = 0;
  for (const auto& b : queue_) {
    ++pos;
    if (b->last_queue_position == pos) continue;
    b->last_queue_position = pos;
    v1::BuildEvent e;
    e.mutable_queue_position()->set_position(pos);
    b->Append(std::move(e));
  }
}

void BuildManager::Run(std::shared_ptr<Build> b) {
  auto spawned =
      WorkerProcess::Spawn(config_.worker_binary, b->job_dir(), limits_, config_.enable_test_hooks);
  absl::Status status;
  EngineFile engine;
  v1::BuildResult result;
  if (!spawned.ok()) {
    status = NameBuild(b->id(), spawned.status());
  } else {
    std::unique_ptr<WorkerProcess> worker = *std::move(spawned);
    {
      std::lock_guard<std::mutex> l(mu_);
      b->worker = worker.get();
      if (!b->cancel_reason.ok()) worker->Kill();
    }
    log_->info("build {}: worker pid {} started", b->id(), worker->pid());
    job::FrameReader reader(worker->event_fd());
    std::optional<absl::Status> reported;
    bool report_built = false;
    job::Frame frame;
    for (;;) {
      auto more = reader.Next(&frame);
      if (!more.ok() || !*more) break;
      if (frame.kind == job::FrameKind::kStatus) {
        reported = frame.status;
      } else if (frame.event.has_result()) {
        result = frame.event.result();
      } else {
        report_built |= frame.event.has_report();
        b->Append(std::move(frame.event));
      }
    }
    WorkerExit exit = worker->Wait();
    absl::Status cancel;
    {
      std::lock_guard<std::mutex> l(mu_);
      b->worker = nullptr;
      cancel = b->cancel_reason;
    }
    if (reported && reported->ok()) {
      status = absl::OkStatus();  // finished before the cancel took effect
    } else if (!cancel.ok()) {
      status = cancel;
    } else {
      status = NameBuild(b->id(), reported ? *reported : WorkerProcess::ExitStatus(exit, limits_));
    }
    log_->info("build {}: worker pid {} ended ({} {}, {:.2f} s CPU): {}", b->id(), worker->pid(),
               exit.signaled ? "signal" : "exit code", exit.code, exit.cpu_seconds,
               status.ok() ? "OK" : status.ToString());
    if (status.ok()) {
      engine.path = absl::StrCat(b->job_dir(), "/", job::kEngineFile);
      auto digest = FileDigest(engine.path);
      if (!digest.ok()) {
        status = NameBuild(b->id(), absl::InternalError(digest.status().message()));
      } else {
        engine.size = digest->first;
        engine.sha256 = digest->second;
        result.set_engine_size(engine.size);
        result.set_engine_sha256(engine.sha256);
        result.set_queue_ms(Ms(b->started_at - b->queued_at));
        if (cache_ && !b->cache_key.empty() && !report_built) {
          absl::Status st = cache_->Store(b->cache_key, engine.path, engine.size, engine.sha256);
          if (!st.ok()) log_->warn("build {}: not cached: {}", b->id(), std::string(st.message()));
        }
      }
    }
  }
  Finish(b, status, std::move(engine), std::move(result));
  std::lock_guard<std::mutex> l(mu_);
  --monitors_;
  cv_.notify_all();
}

void BuildManager::Finish(const std::shared_ptr<Build>& b, absl::Status status, EngineFile engine,
                          v1::BuildResult result) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (b->state == Build::State::kDone) return;
    if (b->state == Build::State::kRunning) --running_;
    if (b->state == Build::State::kUploading) --uploading_;
    if (b->state == Build::State::kQueued) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), b));
    }
    b->state = Build::State::kDone;
    auto it = in_flight_by_key_.find(b->cache_key);
    if (it != in_flight_by_key_.end() && it->second == b) in_flight_by_key_.erase(it);
    Dispatch();
    UpdateQueuePositions();
  }
  // Staging is released before the build counts as finished: a client that saw the end of its
  // stream and then counts live builds sees everything released.
  if (status.ok()) {
    for (const char* f : {job::kSpecFile, job::kModelFile, job::kPolicyFile}) {
      unlink(absl::StrCat(b->job_dir(), "/", f).c_str());
    }
    for (int i = 0; unlink(absl::StrCat(b->job_dir(), "/", job::SampleFile(i)).c_str()) == 0; ++i) {
    }
  } else {
    RemoveTree(b->job_dir());
    log_->info("build {}: {}", b->id(), status.ToString());
  }
  b->Complete(std::move(status), std::move(engine), std::move(result));
  bool idle = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    --live_;
    idle = live_ == 0;
    Keep(b);
    cv_.notify_all();
  }
  // The last build of a burst is done: give the memory its workers' pipes, events and uploads
  // used back to the system (the streams trim again when the last one closes).
  if (idle) TrimMalloc();
}

void BuildManager::Keep(const std::shared_ptr<Build>& b) {
  finished_.push_back(b);
  while (static_cast<int>(finished_.size()) > config_.keep_builds) {
    std::shared_ptr<Build> old = finished_.front();
    finished_.pop_front();
    auto it = builds_.find(old->id());
    if (it != builds_.end() && it->second == old) builds_.erase(it);
    auto r = by_request_.find(old->request_id);
    if (r != by_request_.end() && r->second == old) by_request_.erase(r);
    // Its job folder goes when the last holder lets go (Build::~Build).
  }
}

}  // namespace kiln::server
