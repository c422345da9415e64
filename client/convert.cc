#include "client/convert.h"

#include <openssl/rand.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/console.h"
#include "client/files.h"
#include "engine/common/files.h"
#include "engine/report/render.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "kiln/v1/service.grpc.pb.h"

namespace kiln::client {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;          // the proto's chunk limit
constexpr uint64_t kMaxSampleBytes = uint64_t{1} << 30;  // --inputs read at most 1 GiB
constexpr int kMaxReceiveBytes = 64 << 20;               // reports of large models
constexpr absl::Duration kFirstBackoff = absl::Milliseconds(250);

/// What every attempt sends: the spec, then the model file, then the samples.
struct Upload {
  v1::BuildSpec spec;
  std::vector<v1::SampleSet> samples;
  std::string model_path;
};

/// How one Build call ended.
struct Attempt {
  grpc::Status status;
  bool any_event = false;  // the server answered: retrying could run a build twice
  std::string build_id;
  std::optional<v1::BuildResult> result;
  std::optional<v1::AccuracyReport> report;
  std::unique_ptr<EngineSink> sink;  // the engine received so far
  absl::Status local_error;          // the client aborted the call (bad chunk, I/O error)
};

std::string NewRequestId() {
  unsigned char bytes[12];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    // No entropy source: pid and time still make a collision between retries of two
    // different client runs unlikely.
    return absl::StrFormat("cc-%d-%d", getpid(), absl::ToUnixMicros(absl::Now()));
  }
  std::string hex;
  for (unsigned char b : bytes) absl::StrAppendFormat(&hex, "%02x", b);
  return absl::StrCat("cc-", hex);
}

absl::StatusOr<std::string> ReadText(const std::string& path, const std::string& field) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat(field, " '", path, "': ", std::strerror(errno)));
  }
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    out.append(buf, n);
    if (out.size() > (size_t{1} << 24)) {
      std::fclose(f);
      return absl::InvalidArgumentError(absl::StrCat(field, " '", path, "' is over 16 MiB"));
    }
  }
  std::fclose(f);
  return out;
}

absl::StatusOr<Upload> Prepare(const ClientOptions& o) {
  Upload u;
  u.model_path = o.model_path;
  auto digest = DigestFile(o.model_path, "--model");
  if (!digest.ok()) return digest.status();
  v1::BuildSpec& s = u.spec;
  std::string name = o.model_path.substr(o.model_path.find_last_of('/') + 1);
  s.set_model_name(name);
  s.set_model_size(digest->size);
  s.set_model_sha256(digest->sha256);
  s.set_policy(o.policy);
  if (!o.policy_file.empty()) {
    auto text = ReadText(o.policy_file, "--policy-file");
    if (!text.ok()) return text.status();
    s.set_policy_text(*text);
  }
  for (const std::string& r : o.rules) s.add_rules(r);
  s.set_constraints(o.constraints);
  s.set_fusion(o.fusion);
  s.set_device(o.device);
  s.set_no_fallback(o.no_fallback);
  s.set_report(o.WantsReport());
  if (o.seed) s.set_seed(*o.seed);
  s.set_samples(o.samples);
  s.set_atol(o.atol);
  s.set_rtol(o.rtol);
  s.set_request_id(o.request_id.empty() ? NewRequestId() : o.request_id);
  if (!o.inputs_dir.empty()) {
    auto sets = ReadSampleSets(o.inputs_dir, kMaxSampleBytes);
    if (!sets.ok()) return sets.status();
    u.samples = std::move(*sets);
  }
  return u;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& o,
                                                           const std::string& target) {
  grpc::ChannelArguments args;
  if (WantsRoundRobin(o.servers)) args.SetLoadBalancingPolicyName("round_robin");
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  args.SetString(GRPC_ARG_PRIMARY_USER_AGENT_STRING, "convert-client/" KILN_VERSION);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!o.tls_ca.empty()) {
    auto ca = ReadText(o.tls_ca, "--tls-ca");
    if (!ca.ok()) return ca.status();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = *ca;
    creds = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(target, creds, args);
}

using BuildStream = grpc::ClientReaderWriter<v1::BuildRequest, v1::BuildEvent>;

// Sends the upload on `stream`: spec, model chunks, samples, end_of_upload, then half-closes.
// Stops early when `stop` is set (a cache hit: the server needs no upload) or a write fails (the
// call ended; the reader sees why). A local read error cancels the call and lands in `error`.
void SendUpload(BuildStream* stream, const Upload& up, const std::atomic<bool>* stop,
                Console* console, grpc::ClientContext* ctx, absl::Status* error) {
  v1::BuildRequest req;
  *req.mutable_spec() = up.spec;
  if (!stream->Write(req)) return;
  FILE* f = std::fopen(up.model_path.c_str(), "rb");
  if (f == nullptr) {
    *error =
        absl::NotFoundError(absl::StrCat("--model '", up.model_path, "': ", std::strerror(errno)));
    ctx->TryCancel();
    return;
  }
  const uint64_t total = up.spec.model_size();
  uint64_t sent = 0;
  console->OnUpload(0, total);
  std::string buf(kChunkBytes, '\0');
  bool alive = true;
  while (alive && !stop->load()) {
    size_t n = std::fread(buf.data(), 1, buf.size(), f);
    if (n == 0) break;
    req.Clear();
    req.set_model_chunk(buf.data(), n);
    alive = stream->Write(req);
    sent += n;
    console->OnUpload(sent, total);
  }
  bool read_failed = std::ferror(f) != 0;
  std::fclose(f);
  if (read_failed) {
    // Aborted, not DataLoss: DataLoss means the server's engine failed its digest (exit 3).
    *error = absl::AbortedError(
        absl::StrCat("--model '", up.model_path, "': read error during the upload"));
    ctx->TryCancel();
    return;
  }
  if (!alive) return;
  if (!stop->load()) {
    for (const v1::SampleSet& set : up.samples) {
      req.Clear();
      *req.mutable_sample() = set;
      if (!stream->Write(req)) return;
    }
    req.Clear();
    req.set_end_of_upload(true);
    if (!stream->Write(req)) return;
  }
  stream->WritesDone();
}

// One Build call: the upload on a second thread, the events read and rendered here.
Attempt RunAttempt(v1::Converter::Stub* stub, const ClientOptions& o, const Upload& up,
                   absl::Time deadline, Console* console) {
  Attempt a;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  if (!o.token.empty()) ctx.AddMetadata("authorization", absl::StrCat("Bearer ", o.token));
  ctx.AddMetadata("x-request-id", up.spec.request_id());
  std::unique_ptr<BuildStream> stream = stub->Build(&ctx);
  std::atomic<bool> stop{false};
  absl::Status upload_error;
  std::thread writer(SendUpload, stream.get(), std::cref(up), &stop, console, &ctx, &upload_error);
  v1::BuildEvent ev;
  while (stream->Read(&ev)) {
    a.any_event = true;
    if (!a.local_error.ok()) continue;  // cancelled: drain until the call ends
    switch (ev.event_case()) {
      case v1::BuildEvent::kAccepted:
        a.build_id = ev.accepted().build_id();
        if (ev.accepted().cache_hit()) stop.store(true);
        break;
      case v1::BuildEvent::kEngineChunk: {
        if (a.sink == nullptr) {
          auto sink = EngineSink::Open(o.output_path);
          if (!sink.ok()) {
            a.local_error = sink.status();
            ctx.TryCancel();
            continue;
          }
          a.sink = std::move(*sink);
        }
        absl::Status s = a.sink->Append(ev.engine_chunk().offset(), ev.engine_chunk().data());
        if (!s.ok()) {
          a.local_error = s;
          ctx.TryCancel();
          continue;
        }
        break;
      }
      case v1::BuildEvent::kReport:
        a.report = ev.report();
        break;
      case v1::BuildEvent::kResult:
        a.result = ev.result();
        if (a.build_id.empty()) a.build_id = ev.result().build_id();
        break;
      default:
        break;
    }
    console->OnEvent(ev);
  }
  // The call is over: a writer blocked in Write returns false now.
  stop.store(true);
  writer.join();
  a.status = stream->Finish();
  if (a.local_error.ok() && !upload_error.ok()) a.local_error = upload_error;
  return a;
}

std::string BuildLabel(const std::string& build_id) {
  return build_id.empty() ? "build" : absl::StrCat("build ", build_id);
}

// Writes --report and --html; the engine is already in place.
absl::Status WriteReports(const ClientOptions& o, const v1::AccuracyReport& report) {
  if (!o.report_path.empty()) {
    google::protobuf::util::JsonPrintOptions opts;
    opts.add_whitespace = true;
    opts.always_print_primitive_fields = true;
    std::string json;
    auto st = google::protobuf::util::MessageToJsonString(report, &json, opts);
    if (!st.ok()) return absl::InternalError(absl::StrCat("--report: ", st.ToString()));
    if (auto s = WriteFileAtomic(o.report_path, json); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--report: ", s.message()));
    }
  }
  if (!o.html_path.empty()) {
    if (auto s = WriteFileAtomic(o.html_path, report::RenderHtml(report)); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--html: ", s.message()));
    }
  }
  return absl::OkStatus();
}

void PrintSummary(const ClientOptions& o, const v1::BuildResult& r, const Console& console) {
  if (!r.summary().empty()) {
    std::cout << r.summary();
    if (r.summary().back() != '\n') std::cout << "\n";
  }
  std::cout << absl::StrFormat("engine: %s (%d bytes, sha256 %s, verified)\n", o.output_path,
                               r.engine_size(), r.engine_sha256());
  std::cout << absl::StrFormat("  build %s: %s; queued %.0f ms, built in %.0f ms\n", r.build_id(),
                               r.cache_hit() ? "from the cache" : "built", r.queue_ms(),
                               r.build_ms());
  std::map<std::string, int> d = console.decisions();
  if (!d.empty()) {
    std::vector<std::string> parts;
    for (const auto& [p, n] : d) parts.push_back(absl::StrCat(n, " ", p));
    std::cout << "  precision decisions: " << absl::StrJoin(parts, ", ") << "\n";
  }
  if (r.dropped_log_lines() > 0) {
    std::cout << "  " << r.dropped_log_lines() << " debug log line(s) dropped by the server\n";
  }
}

}  // namespace

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN_CODE";
  }
}

int RunConvert(const ClientOptions& o) {
  auto upload = Prepare(o);
  if (!upload.ok()) {
    // The model, the policy file or the sample inputs could not be read: a local file error.
    std::cerr << "convert-client: error: " << upload.status().message() << "\n";
    return kExitLocalError;
  }
  auto target = ChannelTarget(o.servers);
  if (!target.ok()) {
    std::cerr << "convert-client: " << target.status().message() << "\n";
    return kExitUsage;
  }
  auto channel = MakeChannel(o, *target);
  if (!channel.ok()) {
    // Only reading the --tls-ca file fails here: a local file error.
    std::cerr << "convert-client: error: " << channel.status().message() << "\n";
    return kExitLocalError;
  }
  std::unique_ptr<v1::Converter::Stub> stub = v1::Converter::NewStub(*channel);
  Console console(stderr, isatty(fileno(stderr)) == 1, o.quiet);
  const absl::Time deadline = absl::Now() + o.timeout;

  Attempt a;
  absl::Duration backoff = kFirstBackoff;
  for (int attempt = 1;; ++attempt) {
    a = RunAttempt(stub.get(), o, *upload, deadline, &console);
    // Only a call that never got an event is retried: the replica never accepted it. A replica
    // that did may be building, and the same request id lets a replica that knows it rejoin.
    bool retry = a.status.error_code() == grpc::StatusCode::UNAVAILABLE && !a.any_event &&
                 a.local_error.ok() && attempt < o.max_attempts && absl::Now() + backoff < deadline;
    if (!retry) break;
    console.Note(absl::StrFormat(
        "convert-client: UNAVAILABLE: %s; retrying in %d ms (attempt %d of %d, request id %s)",
        a.status.error_message(), absl::ToInt64Milliseconds(backoff), attempt + 1, o.max_attempts,
        upload->spec.request_id()));
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(4));
  }
  console.Finish();

  if (!a.local_error.ok()) {
    std::cerr << "convert-client: " << BuildLabel(a.build_id) << ": " << a.local_error.message()
              << "\n";
    return a.local_error.code() == absl::StatusCode::kDataLoss ? kExitBuildFailed : kExitLocalError;
  }
  if (!a.status.ok()) {
    const char* code = StatusCodeName(a.status.error_code());
    if (a.status.error_code() == grpc::StatusCode::UNAVAILABLE && !a.any_event) {
      std::cerr << "convert-client: server unreachable (" << *target << "): " << code << ": "
                << a.status.error_message() << "\n";
      return kExitUnreachable;
    }
    std::cerr << "convert-client: " << BuildLabel(a.build_id) << " failed: " << code << ": "
              << a.status.error_message() << "\n";
    return kExitBuildFailed;
  }
  if (!a.result) {
    std::cerr << "convert-client: " << BuildLabel(a.build_id)
              << ": the stream ended without a result\n";
    return kExitBuildFailed;
  }
  // The engine must be the one built from the model this client uploaded: a server that
  // matched a reused request id to another build would otherwise hand over another model's
  // engine, and this client would write it as its own.
  if (a.result->model_sha256() != upload->spec.model_sha256()) {
    std::cerr << "convert-client: " << BuildLabel(a.build_id)
              << ": the server returned an engine built from another model (model sha256 '"
              << a.result->model_sha256().substr(0, 64) << "', uploaded "
              << upload->spec.model_sha256() << "); nothing was written\n";
    return kExitBuildFailed;
  }
  if (a.sink == nullptr) {
    auto sink = EngineSink::Open(o.output_path);
    if (!sink.ok()) {
      std::cerr << "convert-client: " << sink.status().message() << "\n";
      return kExitLocalError;
    }
    a.sink = std::move(*sink);
  }
  if (absl::Status s = a.sink->Commit(a.result->engine_size(), a.result->engine_sha256());
      !s.ok()) {
    std::cerr << "convert-client: " << BuildLabel(a.build_id) << ": " << s.message() << "\n";
    return s.code() == absl::StatusCode::kDataLoss ? kExitBuildFailed : kExitLocalError;
  }
  PrintSummary(o, *a.result, console);
  if (a.report) {
    std::cout << ReportSummary(*a.report);
    if (absl::Status s = WriteReports(o, *a.report); !s.ok()) {
      std::cerr << "convert-client: " << s.message() << "\n";
      return kExitLocalError;
    }
  } else if (!o.report_path.empty() || !o.html_path.empty()) {
    std::cerr << "convert-client: " << BuildLabel(a.build_id)
              << ": --report/--html: the server sent no accuracy report\n";
    return kExitBuildFailed;
  }
  std::cout.flush();
  bool pass = a.result->accuracy_pass() && (!a.report || a.report->pass());
  if (o.fail_on_accuracy && !pass) {
    std::cerr << "convert-client: " << BuildLabel(a.build_id)
              << ": accuracy gate failed (--fail-on-accuracy): an output is out of tolerance\n";
    return kExitAccuracyGate;
  }
  return kExitOk;
}

}  // namespace kiln::client
