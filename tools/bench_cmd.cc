#include "tools/bench_cmd.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/common/status.h"
#include "engine/plan/engine_blob.h"
#include "engine/report/sample_inputs.h"
#include "engine/runtime/session.h"
#include "engine/runtime/threads.h"
#include "tools/cli_io.h"
#include "tools/report_cmd.h"

namespace kiln::tools {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

absl::StatusOr<int> Count(const Args& args, const char* flag, int dflt, int lo, int hi) {
  auto it = args.flags.find(flag);
  if (it == args.flags.end()) return dflt;
  int v;
  if (!absl::SimpleAtoi(it->second, &v) || v < lo || v > hi) {
    return UsageError(absl::StrCat(flag, " takes a count from ", lo, " to ", hi));
  }
  return v;
}

}  // namespace

absl::Status ApplyThreads(const Args& args) {
  ASSIGN_OR_RETURN(int threads, Count(args, "--threads", 0, 1, 1024));
  return runtime::SetThreads(threads);
}

absl::Status Bench(int argc, char** argv) {
  auto parsed = Parse(argc, argv, 2,
                      {{"--inputs", true},
                       {"--seed", true},
                       {"--shape", true},
                       {"--input-range", true},
                       {"--runs", true},
                       {"--warmup", true},
                       {"--threads", true}});
  if (!parsed.ok()) return UsageError(std::string(parsed.status().message()));
  const Args& args = *parsed;
  if (args.positional.size() != 1) return UsageError("bench takes exactly one ENGINE");
  ASSIGN_OR_RETURN(int runs, Count(args, "--runs", 20, 1, 100000));
  ASSIGN_OR_RETURN(int warmup, Count(args, "--warmup", 3, 0, 10000));
  RETURN_IF_ERROR(ApplyThreads(args));

  // Load: open + verify + ready to run, what a server or an application pays per engine.
  auto t0 = Clock::now();
  ASSIGN_OR_RETURN(std::shared_ptr<plan::Engine> engine, plan::LoadEngineFile(args.positional[0]));
  ASSIGN_OR_RETURN(auto session, runtime::Session::Create(engine));
  const double load_ms = MsSince(t0);

  ASSIGN_OR_RETURN(report::Samples samples, SamplesFor(args, *engine->graph));
  for (const auto& n : samples.notes) std::cout << "note: " << n << "\n";
  const std::vector<ir::Tensor>& inputs = samples.sets[0];
  const std::string& source = samples.source;
  for (int i = 0; i < warmup; ++i) RETURN_IF_ERROR(session->Run(inputs).status());
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    auto t = Clock::now();
    RETURN_IF_ERROR(session->Run(inputs).status());
    ms.push_back(MsSince(t));
  }
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(q * (ms.size() - 1) + 0.5))];
  };
  const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / ms.size();
  std::cout << absl::StrFormat(
      "engine %s (policy %s)\n  inputs: %s\n  threads %d, %d run(s) after %d warm-up\n"
      "  latency ms: min %.3f  median %.3f  p90 %.3f  mean %.3f  max %.3f\n"
      "  load (open, verify, ready): %.1f ms\n",
      args.positional[0], engine->metadata.policy().empty() ? "-" : engine->metadata.policy(),
      source, runtime::Threads(), runs, warmup, ms.front(), at(0.5), at(0.9), mean, ms.back(),
      load_ms);
  return absl::OkStatus();
}

}  // namespace kiln::tools
