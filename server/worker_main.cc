#include "server/worker_main.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine/builder/accuracy.h"
#include "engine/builder/builder.h"
#include "engine/common/status.h"
#include "engine/import/tensor_proto.h"
#include "engine/plan/engine_blob.h"
#include "engine/report/sample_inputs.h"
#include "server/files.h"
#include "server/job.h"
#include "server/spec.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

const char* LevelName(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    default:
      return "error";
  }
}

void Send(const v1::BuildEvent& e) {
  // A failed write means the server is gone; the build result would be lost anyway, and the
  // server kills the whole process group on every path where it stops reading.
  (void)job::WriteEventFrame(job::kEventFd, e);
}

void SendStage(const char* name, double progress) {
  v1::BuildEvent e;
  e.mutable_stage()->set_name(name);
  e.mutable_stage()->set_progress(progress);
  Send(e);
}

// The build's spdlog sink: each line becomes a LogLine event on the pipe.
class EventSink : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    absl::string_view text(msg.payload.data(), msg.payload.size());
    v1::BuildEvent e;
    v1::LogLine* l = e.mutable_log();
    l->set_level(LevelName(msg.level));
    l->set_timestamp_us(
        std::chrono::duration_cast<std::chrono::microseconds>(msg.time.time_since_epoch()).count());
    l->set_text(std::string(text));
    Send(e);
  }
  void flush_() override {}
};

// The test hooks of worker_main.h.
void RunTestHook(const std::string& name, spdlog::logger& log) {
  if (name == "__kiln_test_crash__") {
    log.warn("test hook: crashing the worker");
    std::abort();
  }
  if (absl::StartsWith(name, "__kiln_test_slow")) {
    int64_t ms = 60000;
    absl::string_view rest = name;
    if (absl::ConsumePrefix(&rest, "__kiln_test_slow_") && absl::ConsumeSuffix(&rest, "__")) {
      if (!absl::SimpleAtoi(rest, &ms)) ms = 60000;
    }
    log.info("test hook: sleeping {} ms before the build", ms);
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(ms, 1000)));
      log.debug("test hook: still sleeping");
    }
  }
  if (name == "__kiln_test_memory__") {
    log.info("test hook: allocating until the memory limit");
    std::vector<char*> blocks;
    for (;;) {
      char* p = new char[64 << 20];
      std::memset(p, 1, 64 << 20);
      blocks.push_back(p);
    }
  }
  if (name == "__kiln_test_spin__") {
    log.info("test hook: spinning until the CPU limit");
    volatile uint64_t x = 0;
    for (;;) x = x + 1;
  }
  if (name == "__kiln_test_chatty__") {
    for (int i = 0; i < 20000; ++i) log.debug("test hook: chatty line {}", i);
  }
}

absl::StatusOr<report::Samples> LoadSamples(const v1::BuildSpec& spec, const plan::Engine& engine) {
  report::Samples s;
  for (int i = 0;; ++i) {
    if (access(job::SampleFile(i).c_str(), F_OK) != 0) break;
    ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(job::SampleFile(i), int64_t{1} << 31));
    v1::SampleSet set;
    if (!set.ParseFromString(bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("sample ", i, ": not a SampleSet"));
    }
    std::vector<ir::Tensor> tensors;
    for (int j = 0; j < set.inputs_size(); ++j) {
      ASSIGN_OR_RETURN(ir::Tensor t, import::ParseTensorProto(
                                         set.inputs(j), absl::StrCat("sample ", i, " input ", j)));
      tensors.push_back(std::move(t));
    }
    s.sets.push_back(std::move(tensors));
  }
  if (!s.sets.empty()) {
    s.source = absl::StrCat("uploaded (", s.sets.size(), " data set(s))");
    return s;
  }
  report::SampleOptions o;
  o.seed = spec.seed();
  o.count = spec.samples() > 0 ? spec.samples() : 1;
  return report::GenerateSamples(*engine.graph, o);
}

absl::Status Work(const v1::BuildSpec& spec, bool test_hooks, spdlog::logger& log_ref,
                  std::shared_ptr<spdlog::logger> log) {
  auto t0 = std::chrono::steady_clock::now();
  if (test_hooks) RunTestHook(spec.model_name(), log_ref);
  ASSIGN_OR_RETURN(CheckedSpec checked,
                   CheckSpec(spec, int64_t{2} * 1024 * 1024 * 1024 - 1, nullptr));
  builder::BuildOptions& options = checked.options;
  options.on_stage = [](const char* stage, double fraction) { SendStage(stage, fraction); };
  ASSIGN_OR_RETURN(std::string model,
                   ReadWholeFile(job::kModelFile, options.import.max_model_bytes));
  const bool want_report = checked.report || access(job::SampleFile(0).c_str(), F_OK) == 0;
  options.keep_reference = want_report;
  ASSIGN_OR_RETURN(builder::BuildResult built,
                   builder::BuildEngine(std::move(model), options, log));
  for (const std::string& w : built.summary.warnings) {
    v1::BuildEvent e;
    e.mutable_warning()->set_text(w);
    Send(e);
  }
  for (const std::string& r : built.summary.fusion_refusals) {
    v1::BuildEvent e;
    e.mutable_warning()->set_text(absl::StrCat("fusion refused: ", r));
    Send(e);
  }
  for (const v1::NodeProvenance& p : built.nodes) {
    if (p.assigned_precision().empty()) continue;
    v1::BuildEvent e;
    v1::Decision* d = e.mutable_decision();
    d->set_node_name(p.node_name());
    d->set_op_type(p.op_type());
    d->set_assigned_precision(p.assigned_precision());
    d->set_effective_precision(p.effective_precision());
    d->set_rule(p.rule());
    d->set_fusion(p.fusion());
    Send(e);
  }
  RETURN_IF_ERROR(WriteFileAtomic(job::kEngineFile, built.blob, kPrivateFileMode));
  SendStage("plan", 0.80);
  bool accuracy_pass = true;
  if (want_report) {
    SendStage("report", 0.85);
    ASSIGN_OR_RETURN(std::shared_ptr<const plan::Engine> engine, builder::TakeKeptEngine(built));
    ASSIGN_OR_RETURN(report::Samples samples, LoadSamples(spec, *engine));
    builder::ReportOptions ro;
    if (spec.atol() > 0) ro.tolerance.atol = spec.atol();
    if (spec.rtol() > 0) ro.tolerance.rtol = spec.rtol();
    ro.sample_source = samples.source;
    ro.notes = samples.notes;
    ro.model_path = job::kModelFile;  // the search builds read it again
    ASSIGN_OR_RETURN(
        v1::AccuracyReport rep,
        builder::BuildAccuracyReport("", options, built, std::move(engine),
                                     std::move(built.reference), samples.sets, ro, log));
    accuracy_pass = rep.pass();
    v1::BuildEvent e;
    *e.mutable_report() = std::move(rep);
    Send(e);
  }
  v1::BuildEvent done;
  v1::BuildResult* r = done.mutable_result();
  r->set_summary(builder::SummaryText(built.summary));
  r->set_model_sha256(built.summary.model_sha256);
  r->set_accuracy_pass(accuracy_pass);
  r->set_build_ms(
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  Send(done);
  SendStage("done", 1.0);
  return absl::OkStatus();
}

}  // namespace

int WorkerMain(const std::string& job_dir, bool test_hooks) {
  if (chdir(job_dir.c_str()) != 0) {
    (void)job::WriteStatusFrame(
        job::kEventFd, absl::InternalError(absl::StrCat("worker: cannot enter ", job_dir)));
    return 1;
  }
  auto logger = std::make_shared<spdlog::logger>("build", std::make_shared<EventSink>());
  logger->set_level(spdlog::level::debug);
  absl::Status st;
  try {
    auto bytes = ReadWholeFile(job::kSpecFile, 1 << 24);
    v1::BuildSpec spec;
    if (!bytes.ok()) {
      st = bytes.status();
    } else if (!spec.ParseFromString(*bytes)) {
      st = absl::InternalError("worker: unreadable spec.pb");
    } else {
      st = Work(spec, test_hooks, *logger, logger);
    }
  } catch (const std::bad_alloc&) {
    // RLIMIT_AS turned an allocation into bad_alloc: the build needs more than --worker-memory-mb.
    st = absl::ResourceExhaustedError("the build exceeded the worker memory limit");
  }
  (void)job::WriteStatusFrame(job::kEventFd, st);
  return st.ok() ? 0 : 1;
}

}  // namespace kiln::server
