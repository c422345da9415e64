#include "server/build.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/config.h"

namespace kiln::server {

Subscription::~Subscription() {
  if (fd >= 0) close(fd);
}

Build::~Build() {
  if (spill_fd_ >= 0) close(spill_fd_);
  if (!job_dir_.empty()) RemoveTree(job_dir_);
}

void Build::SpillLocked() {
  if (job_dir_.empty() || history_.empty()) return;
  const std::string path = job_dir_ + "/events.spill";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;  // keep the history in memory
  std::vector<uint64_t> offsets;
  uint64_t off = 0;
  std::string buf;
  for (const auto& e : history_) {
    std::string bytes;
    e.SerializeToString(&bytes);
    const uint32_t len = static_cast<uint32_t>(bytes.size());
    offsets.push_back(off);
    buf.append(reinterpret_cast<const char*>(&len), sizeof len);
    buf.append(bytes);
    off += sizeof len + bytes.size();
  }
  for (size_t done = 0; done < buf.size();) {
    ssize_t n = write(fd, buf.data() + done, buf.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return;
    }
    done += static_cast<size_t>(n);
  }
  spill_fd_ = fd;
  spill_offsets_ = std::move(offsets);
  std::vector<v1::BuildEvent>().swap(history_);
}

bool Build::ReadSpilledLocked(size_t i, v1::BuildEvent* out) const {
  uint32_t len = 0;
  if (pread(spill_fd_, &len, sizeof len, static_cast<off_t>(spill_offsets_[i])) !=
      static_cast<ssize_t>(sizeof len)) {
    return false;
  }
  std::string bytes(len, '\0');
  if (pread(spill_fd_, bytes.data(), len, static_cast<off_t>(spill_offsets_[i] + sizeof len)) !=
      static_cast<ssize_t>(len)) {
    return false;
  }
  return out->ParseFromString(bytes);
}

void Build::Append(v1::BuildEvent event) {
  std::vector<std::function<void()>> wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (done_) return;
    if (event.has_log()) {
      const std::string& level = event.log().level();
      bool low = level == "debug" || level == "trace";
      size_t backlog = 0;
      if (!subs_.empty()) {
        size_t slowest = history_.size();
        for (const auto& s : subs_) slowest = std::min(slowest, s->index.load());
        backlog = history_.size() - slowest;
      }
      size_t cap = static_cast<size_t>(capacity_);
      if ((low && (backlog >= cap || log_lines_ >= cap)) || log_lines_ >= 4 * cap) {
        ++dropped_;
        return;
      }
      ++log_lines_;
    }
    history_.push_back(std::move(event));
    for (const auto& s : subs_) {
      if (s->waiting) {
        s->waiting = false;
        wake.push_back(s->wake);
      }
    }
  }
  for (auto& w : wake) w();
}

std::shared_ptr<Subscription> Build::Subscribe(std::function<void()> wake) {
  auto s = std::make_shared<Subscription>();
  s->wake = std::move(wake);
  std::lock_guard<std::mutex> l(mu_);
  subs_.push_back(s);
  return s;
}

void Build::Unsubscribe(const std::shared_ptr<Subscription>& sub) {
  std::lock_guard<std::mutex> l(mu_);
  subs_.erase(std::remove(subs_.begin(), subs_.end(), sub), subs_.end());
}

Build::Poll Build::Next(Subscription& sub, v1::BuildEvent* out, absl::Status* final_status) {
  EngineFile engine;
  {
    std::lock_guard<std::mutex> l(mu_);
    size_t i = sub.index.load();
    if (i < history_.size()) {
      *out = history_[i];
      sub.index.store(i + 1);
      return Poll::kEvent;
    }
    if (i < spill_offsets_.size()) {
      if (!ReadSpilledLocked(i, out)) {
        *final_status = absl::DataLossError(
            absl::StrCat("build ", id_, ": cannot read back event ", i, " of its history"));
        return Poll::kDone;
      }
      sub.index.store(i + 1);
      return Poll::kEvent;
    }
    if (!done_) {
      sub.waiting = true;
      return Poll::kWait;
    }
    if (!status_.ok()) {
      *final_status = status_;
      return Poll::kDone;
    }
    engine = engine_;
    if (sub.offset >= engine.size && sub.result_sent) {
      *final_status = absl::OkStatus();
      return Poll::kDone;
    }
    if (sub.offset >= engine.size) {
      // Chunks are verified as they leave: a blob that changed on disk since the build (or since
      // the cache verified it) ends the stream with DATA_LOSS instead of a bad engine.
      std::string got = sub.sha ? sub.sha->FinishHex() : "";
      sub.sha.reset();
      if (got != engine.sha256) {
        *final_status = absl::DataLossError(
            absl::StrCat("build ", id_, ": the engine file changed on disk (sha256 ", got,
                         ", expected ", engine.sha256, ")"));
        return Poll::kDone;
      }
      *out = result_;
      sub.result_sent = true;
      return Poll::kEvent;
    }
  }
  if (sub.fd < 0) {
    sub.fd = open(engine.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (sub.fd < 0) {
      *final_status = absl::DataLossError(absl::StrCat("build ", id_, ": cannot open the engine ",
                                                       engine.path, ": ", strerror(errno)));
      return Poll::kDone;
    }
    sub.sha = std::make_unique<Sha256Stream>();
  }
  uint64_t want = std::min<uint64_t>(kMaxChunkBytes, engine.size - sub.offset);
  std::string data(want, '\0');
  ssize_t n;
  do {
    n = pread(sub.fd, data.data(), want, static_cast<off_t>(sub.offset));
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    *final_status = absl::DataLossError(absl::StrCat(
        "build ", id_, ": the engine file is shorter than its ", engine.size, " bytes"));
    return Poll::kDone;
  }
  data.resize(n);
  sub.sha->Update(data);
  out->Clear();
  v1::EngineChunk* c = out->mutable_engine_chunk();
  c->set_offset(sub.offset);
  c->set_data(std::move(data));
  sub.offset += n;
  return Poll::kEvent;
}

void Build::Complete(absl::Status status, EngineFile engine, v1::BuildResult result) {
  std::vector<std::function<void()>> wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (done_) return;
    done_ = true;
    status_ = std::move(status);
    engine_ = std::move(engine);
    result.set_build_id(id_);
    result.set_dropped_log_lines(dropped_);
    *result_.mutable_result() = std::move(result);
    // A finished build is kept for WatchBuild (--keep-builds): its events move to the job folder,
    // so the server's memory does not grow with the builds it remembers.
    SpillLocked();
    for (const auto& s : subs_) {
      if (s->waiting) {
        s->waiting = false;
        wake.push_back(s->wake);
      }
    }
  }
  for (auto& w : wake) w();
}

bool Build::done() const {
  std::lock_guard<std::mutex> l(mu_);
  return done_;
}

absl::Status Build::status() const {
  std::lock_guard<std::mutex> l(mu_);
  return status_;
}

uint64_t Build::dropped_log_lines() const {
  std::lock_guard<std::mutex> l(mu_);
  return dropped_;
}

}  // namespace kiln::server
