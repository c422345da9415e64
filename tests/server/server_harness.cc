#include "tests/server/server_harness.h"

#include <fstream>
#include <sstream>
#include <thread>

#include "engine/common/sha256.h"

namespace kiln::server::testing {

std::string ReadRepoFile(const std::string& rel) {
  std::ifstream in(std::string(KILN_SOURCE_DIR) + "/" + rel, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Sha256Hex(const std::string& bytes) { return DigestHex(Sha256(bytes)); }

v1::BuildSpec SpecFor(const std::string& model, const std::string& name,
                      const std::string& policy) {
  v1::BuildSpec s;
  s.set_model_name(name);
  s.set_model_size(model.size());
  s.set_model_sha256(Sha256Hex(model));
  s.set_policy(policy);
  return s;
}

int BuildOutcome::Count(v1::BuildEvent::EventCase c) const {
  int n = 0;
  for (const auto& e : events) n += e.event_case() == c;
  return n;
}

namespace {

void Collect(v1::BuildEvent& e, BuildOutcome& out) {
  switch (e.event_case()) {
    case v1::BuildEvent::kEngineChunk:
      out.chunks_in_order &= e.engine_chunk().offset() == out.engine.size();
      out.engine += e.engine_chunk().data();
      return;
    case v1::BuildEvent::kAccepted:
      out.build_id = e.accepted().build_id();
      out.cache_hit = e.accepted().cache_hit();
      break;
    case v1::BuildEvent::kResult:
      out.result = e.result();
      break;
    default:
      break;
  }
  out.events.push_back(std::move(e));
}

void SetDeadline(grpc::ClientContext& ctx, std::chrono::milliseconds d) {
  ctx.set_deadline(std::chrono::system_clock::now() +
                   (d.count() > 0 ? d : std::chrono::milliseconds(60000)));
}

}  // namespace

BuildOutcome RunBuild(const std::shared_ptr<grpc::Channel>& channel, const BuildCall& call) {
  auto stub = v1::Converter::NewStub(channel);
  grpc::ClientContext ctx;
  SetDeadline(ctx, call.deadline);
  if (!call.token.empty()) ctx.AddMetadata("authorization", "Bearer " + call.token);
  auto stream = stub->Build(&ctx);
  BuildOutcome out;
  v1::BuildRequest req;
  *req.mutable_spec() = call.spec;
  bool ok = stream->Write(req);
  bool cancelled = false, hold = false;
  if (ok && call.upload) {
    size_t limit = call.stop_after >= 0 ? static_cast<size_t>(call.stop_after) : call.model.size();
    for (size_t off = 0; ok && off < limit; off += call.chunk_bytes) {
      req.Clear();
      req.set_model_chunk(call.model.substr(off, std::min(call.chunk_bytes, limit - off)));
      ok = stream->Write(req);
    }
    if (call.stop_after >= 0 && call.after_stop == BuildCall::AfterStop::kCancel) {
      ctx.TryCancel();
      cancelled = true;
    }
    if (call.stop_after >= 0 && call.after_stop == BuildCall::AfterStop::kHold) hold = true;
    for (size_t i = 0; ok && !cancelled && !hold && i < call.samples.size(); ++i) {
      req.Clear();
      *req.mutable_sample() = call.samples[i];
      ok = stream->Write(req);
    }
    if (ok && !cancelled && !hold) {
      req.Clear();
      req.set_end_of_upload(true);
      ok = stream->Write(req);
    }
  }
  if (!cancelled && !hold && call.upload) stream->WritesDone();
  v1::BuildEvent e;
  while (stream->Read(&e)) {
    if (call.on_event) call.on_event(e, ctx);
    Collect(e, out);
  }
  out.status = stream->Finish();
  return out;
}

BuildOutcome Watch(const std::shared_ptr<grpc::Channel>& channel, const std::string& id,
                   const std::string& token) {
  auto stub = v1::Converter::NewStub(channel);
  grpc::ClientContext ctx;
  SetDeadline(ctx, std::chrono::milliseconds(0));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  v1::WatchBuildRequest req;
  req.set_build_id(id);
  auto reader = stub->WatchBuild(&ctx, req);
  BuildOutcome out;
  v1::BuildEvent e;
  while (reader->Read(&e)) Collect(e, out);
  out.status = reader->Finish();
  return out;
}

grpc::Status ListPresets(const std::shared_ptr<grpc::Channel>& channel, const std::string& token,
                         v1::ListPresetsResponse* out) {
  auto stub = v1::Converter::NewStub(channel);
  grpc::ClientContext ctx;
  SetDeadline(ctx, std::chrono::milliseconds(10000));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  v1::ListPresetsResponse resp;
  grpc::Status st = stub->ListPresets(&ctx, v1::ListPresetsRequest(), &resp);
  if (out) *out = resp;
  return st;
}

bool WaitFor(const std::function<bool()>& pred, double seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

}  // namespace kiln::server::testing
