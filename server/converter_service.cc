#include "server/converter_service.h"

#include <malloc.h>

#include <map>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kernels/device.h"
#include "engine/precision/policy.h"
#include "server/auth.h"
#include "server/status.h"
#include "server/trim.h"
#include "server/upload.h"

namespace kiln::server {
namespace {

// Streams one build's events into a reactor (Base: ServerBidiReactor or ServerWriteReactor).
// One write is in flight at a time; when the build has nothing new the reactor idles until the
// build wakes it. A build never calls into a reactor that is gone: it holds a WakeTarget that
// OnDone clears (under the target's mutex, so a wake-up in progress finishes first).
template <class Base>
class PumpingReactor : public Base {
 public:
  explicit PumpingReactor(std::atomic<int>* open_streams) : open_streams_(open_streams) {
    open_streams_->fetch_add(1);
  }

  struct WakeTarget {
    std::mutex mu;
    PumpingReactor* reactor = nullptr;
    void Wake() {
      std::lock_guard<std::mutex> l(mu);
      if (reactor) reactor->Pump();
    }
  };

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      writing_ = false;
      if (!ok && !finish_requested_) {
        finish_requested_ = true;
        finish_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "the stream broke");
      }
    }
    Pump();
  }

  void OnDone() override {
    if (target_) {
      std::lock_guard<std::mutex> l(target_->mu);
      target_->reactor = nullptr;
    }
    if (build_ && sub_) build_->Unsubscribe(sub_);
    Done();
    // A burst of builds leaves freed memory in the malloc arenas of many gRPC threads: when the
    // last stream closes, the server hands it back so its RSS returns to the idle level.
    if (open_streams_->fetch_sub(1) == 1) TrimMalloc();
    delete this;
  }

 protected:
  /// Called from OnDone, before the reactor is deleted.
  virtual void Done() {}

  /// Starts following `b` from its first event.
  void Attach(std::shared_ptr<Build> b) {
    target_ = std::make_shared<WakeTarget>();
    target_->reactor = this;
    auto sub = b->Subscribe([t = target_] { t->Wake(); });
    {
      std::lock_guard<std::mutex> l(mu_);
      build_ = std::move(b);
      sub_ = std::move(sub);
    }
    Pump();
  }

  /// Ends the call with `s` as soon as no write is in flight (the first request wins).
  void RequestFinish(grpc::Status s) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (finish_requested_ || finished_) return;
      finish_requested_ = true;
      finish_status_ = std::move(s);
    }
    Pump();
  }

  bool finishing() {
    std::lock_guard<std::mutex> l(mu_);
    return finish_requested_ || finished_;
  }

  void Pump() {
    enum { kNothing, kWrite, kFinish } act = kNothing;
    grpc::Status fin;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (finished_ || writing_) return;
      if (finish_requested_) {
        finished_ = true;
        fin = finish_status_;
        act = kFinish;
      } else if (build_) {
        absl::Status final_status;
        switch (build_->Next(*sub_, &event_, &final_status)) {
          case Build::Poll::kEvent:
            writing_ = true;
            act = kWrite;
            break;
          case Build::Poll::kWait:
            break;
          case Build::Poll::kDone:
            finished_ = true;
            fin = ToGrpcStatus(final_status);
            act = kFinish;
            break;
        }
      }
    }
    // Outside the lock: gRPC may run reactions inline.
    if (act == kWrite) this->StartWrite(&event_);
    if (act == kFinish) this->Finish(fin);
  }

  std::shared_ptr<Build> build_;

 private:
  std::mutex mu_;
  bool writing_ = false;
  bool finish_requested_ = false;
  bool finished_ = false;
  grpc::Status finish_status_;
  v1::BuildEvent event_;
  std::shared_ptr<Subscription> sub_;
  std::shared_ptr<WakeTarget> target_;
  std::atomic<int>* open_streams_;
};

// Build: the upload in (reads), the build's events out (writes), concurrently.
class BuildReactor final
    : public PumpingReactor<grpc::ServerBidiReactor<v1::BuildRequest, v1::BuildEvent>> {
 public:
  BuildReactor(BuildManager* manager, const ServerConfig& config,
               grpc::CallbackServerContext* context, std::atomic<int>* open_streams)
      : PumpingReactor(open_streams), manager_(manager), config_(config) {
    absl::Status st = CheckBearerToken(*context, config.token);
    if (st.ok() && manager->draining()) {
      st = absl::UnavailableError("the server is draining; retry elsewhere");
    }
    if (!st.ok()) {
      RequestFinish(ToGrpcStatus(st));
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      HalfClosed();
      return;
    }
    if (!own_) {
      if (!Spec()) return;
    } else {
      UploadMessage();
    }
    if (!finishing()) StartRead(&request_);
  }

  void OnCancel() override {
    RequestFinish(grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled"));
  }

 private:
  void Done() override {
    // The last Build call attached to an unfinished build cancels it (disconnect, client
    // cancellation, deadline).
    if (own_) manager_->ReleaseOwner(own_);
  }

  // The first message. False when the call is over.
  bool Spec() {
    if (!request_.has_spec()) {
      RequestFinish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "the first message of a Build stream must be a spec"));
      return false;
    }
    auto opened = manager_->Open(request_.spec());
    if (!opened.ok()) {
      RequestFinish(ToGrpcStatus(opened.status()));
      return false;
    }
    own_ = opened->build;
    if (opened->upload) {
      upload_ = std::make_unique<Upload>(own_->id(), request_.spec(), own_->job_dir(), config_);
      if (absl::Status st = upload_->Open(); !st.ok()) {
        upload_done_ = true;
        manager_->Fail(own_, st);
      }
    }
    Attach(own_);
    return true;
  }

  void UploadMessage() {
    // Joined, cached or finished builds: the rest of the upload is read and dropped.
    if (!upload_ || upload_done_ || own_->done()) return;
    manager_->UploadActivity(own_);
    absl::Status st;
    switch (request_.msg_case()) {
      case v1::BuildRequest::kModelChunk:
        st = upload_->AddChunk(request_.model_chunk());
        break;
      case v1::BuildRequest::kSample:
        st = upload_->AddSample(request_.sample());
        break;
      case v1::BuildRequest::kEndOfUpload:
        CompleteUpload();
        return;
      case v1::BuildRequest::kSpec:
        st = absl::InvalidArgumentError(absl::StrCat("build ", own_->id(), ": spec: sent twice"));
        break;
      default:
        st = absl::InvalidArgumentError(absl::StrCat("build ", own_->id(), ": empty BuildRequest"));
    }
    if (!st.ok()) {
      upload_done_ = true;
      manager_->Fail(own_, st);
    }
  }

  void CompleteUpload() {
    upload_done_ = true;
    absl::Status st = upload_->Finish();
    if (st.ok()) {
      manager_->UploadDone(own_);
    } else {
      manager_->Fail(own_, st);
    }
  }

  // The client half-closed (or the call broke).
  void HalfClosed() {
    if (!own_) {
      RequestFinish(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the Build stream ended before a spec"));
      return;
    }
    if (!upload_ || upload_done_) return;
    if (upload_->model_complete()) {
      CompleteUpload();  // a half-close after the whole model counts as end_of_upload
      return;
    }
    upload_done_ = true;
    manager_->Fail(own_, absl::CancelledError(absl::StrCat(
                             "build ", own_->id(), ": the client closed the upload after ",
                             upload_->received(), " of ", upload_->declared(), " bytes")));
  }

  BuildManager* manager_;
  const ServerConfig& config_;
  v1::BuildRequest request_;
  std::shared_ptr<Build> own_;
  std::unique_ptr<Upload> upload_;
  bool upload_done_ = false;
};

// WatchBuild: replays a build's events, then follows it. Leaving does not cancel the build.
class WatchReactor final : public PumpingReactor<grpc::ServerWriteReactor<v1::BuildEvent>> {
 public:
  WatchReactor(BuildManager* manager, const ServerConfig& config,
               grpc::CallbackServerContext* context, const std::string& id,
               std::atomic<int>* open_streams)
      : PumpingReactor(open_streams) {
    absl::Status st = CheckBearerToken(*context, config.token);
    std::shared_ptr<Build> b;
    if (st.ok()) {
      b = manager->Find(id);
      if (!b) st = absl::NotFoundError(absl::StrCat("build ", Excerpt(id), ": no such build"));
    }
    if (!st.ok()) {
      RequestFinish(ToGrpcStatus(st));
      return;
    }
    Attach(std::move(b));
  }

  void OnCancel() override {
    RequestFinish(grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled"));
  }
};

const std::map<std::string, std::string>& PresetDescriptions() {
  static const auto* d = new std::map<std::string, std::string>{
      {"fp32", "everything fp32"},
      {"fp16", "everything fp16"},
      {"bf16", "everything bf16"},
      {"fp32-layernorm",
       "fp16 everywhere except LayerNorm (the op and decomposed patterns) in fp32"},
      {"bf16-layernorm",
       "bf16 everywhere except LayerNorm (the op and decomposed patterns) in fp32"},
      {"fp16-safe",
       "fp16 except LayerNorm, RMSNorm, Softmax, reductions, Pow, Exp and Log in fp32"},
  };
  return *d;
}

}  // namespace

grpc::ServerBidiReactor<v1::BuildRequest, v1::BuildEvent>* ConverterService::Build(
    grpc::CallbackServerContext* context) {
  return new BuildReactor(manager_, config_, context, &open_streams_);
}

grpc::ServerWriteReactor<v1::BuildEvent>* ConverterService::WatchBuild(
    grpc::CallbackServerContext* context, const v1::WatchBuildRequest* request) {
  return new WatchReactor(manager_, config_, context, request->build_id(), &open_streams_);
}

grpc::ServerUnaryReactor* ConverterService::CancelBuild(grpc::CallbackServerContext* context,
                                                        const v1::CancelBuildRequest* request,
                                                        v1::CancelBuildResponse* response) {
  grpc::ServerUnaryReactor* r = context->DefaultReactor();
  absl::Status st = CheckBearerToken(*context, config_.token);
  if (st.ok()) {
    auto cancelled = manager_->Cancel(request->build_id());
    if (cancelled.ok()) {
      response->set_cancelled(*cancelled);
    } else {
      st = cancelled.status();
    }
  }
  r->Finish(ToGrpcStatus(st));
  return r;
}

grpc::ServerUnaryReactor* ConverterService::ListPresets(grpc::CallbackServerContext* context,
                                                        const v1::ListPresetsRequest* request,
                                                        v1::ListPresetsResponse* response) {
  grpc::ServerUnaryReactor* r = context->DefaultReactor();
  absl::Status st = CheckBearerToken(*context, config_.token);
  if (st.ok()) {
    for (const std::string& name : precision::PresetNames()) {
      auto p = precision::Preset(name);
      if (!p.ok()) continue;
      v1::Preset* out = response->add_presets();
      out->set_name(name);
      auto d = PresetDescriptions().find(name);
      if (d != PresetDescriptions().end()) out->set_description(d->second);
      out->set_policy_text(p->Canonical());
    }
    v1::DeviceTarget* cpu = response->add_devices();
    cpu->set_name("cpu");
    cpu->set_description("the server's CPU");
    // The OpenCL devices it has (none where OpenCL is missing or not built), as listed at start.
    for (const kernels::DeviceDescription& d : manager_->devices().opencl) {
      v1::DeviceTarget* out = response->add_devices();
      out->set_name(d.Spec());
      out->set_description(d.Describe());
      for (const std::string& c : d.capabilities) out->add_capabilities(c);
    }
  }
  r->Finish(ToGrpcStatus(st));
  return r;
}

}  // namespace kiln::server
