#include "tools/bench_cmd.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <numeric>
#include <vector>

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

// The median of `v` (sorted in place; 0 when empty).
double Median(std::vector<double>& v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Per-kernel times over `runs` runs: the time from one kernel's end to the next's, taken by the
// run's observer (what a kernel costs, its OpenMP fork and join included). Prints the time per
// op type and kernel, then the kernels taking the most time.
absl::Status Profile(runtime::Session& session, const plan::Engine& engine,
                     const std::vector<ir::Tensor>& inputs, int runs) {
  std::vector<std::vector<double>> per_step;
  std::vector<const ir::Node*> nodes;
  std::vector<double> totals;
  for (int r = 0; r < runs; ++r) {
    size_t step = 0;
    auto last = Clock::now();
    const auto start = last;
    auto observe = [&](const ir::Node& node, const std::vector<const ir::Tensor*>&,
                       const std::vector<const ir::Tensor*>&) {
      const auto now = Clock::now();
      if (step == per_step.size()) {
        per_step.emplace_back();
        nodes.push_back(&node);
      }
      per_step[step++].push_back(std::chrono::duration<double, std::milli>(now - last).count());
      last = now;
    };
    RETURN_IF_ERROR(session.Run(inputs, observe).status());
    totals.push_back(MsSince(start));
  }
  const v1::EngineMetadata& m = engine.metadata;
  const bool recorded = m.kernels_size() == static_cast<int>(per_step.size());
  struct Row {
    std::string id, op, kind, name;
    double ms;
  };
  std::vector<Row> rows;
  double sum = 0.0;
  for (size_t i = 0; i < per_step.size(); ++i) {
    Row row;
    row.ms = Median(per_step[i]);
    sum += row.ms;
    row.id = absl::StrCat("k", i);
    row.op = ir::OpName(nodes[i]->op);
    row.name = nodes[i]->name;
    if (recorded) {
      const auto& k = m.kernels(static_cast<int>(i));
      row.id = k.id();
      row.op = k.op_type();
      row.kind = absl::StrCat(k.backend(), "/", k.isa(), "/", k.dtype());
      if (k.nodes_size() > 0) row.name = k.nodes(0).node_name();
    }
    rows.push_back(std::move(row));
  }
  auto share = [&](double ms) { return sum > 0 ? 100.0 * ms / sum : 0.0; };
  std::cout << absl::StrFormat(
      "profile: %d run(s) with a timestamp after each of %d kernels: median %.3f ms, kernel "
      "medians sum to %.3f ms\n",
      runs, rows.size(), Median(totals), sum);
  std::map<std::string, std::pair<double, int>> by_kind;
  for (const Row& r : rows) {
    auto& e = by_kind[absl::StrCat(r.op, " ", r.kind)];
    e.first += r.ms;
    ++e.second;
  }
  std::vector<std::pair<std::string, std::pair<double, int>>> kinds(by_kind.begin(), by_kind.end());
  std::sort(kinds.begin(), kinds.end(),
            [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  std::cout << absl::StrFormat("  %-40s %9s %6s %7s\n", "op and kernel", "ms", "%", "kernels");
  for (const auto& [kind, e] : kinds) {
    std::cout << absl::StrFormat("  %-40s %9.3f %6.1f %7d\n", kind, e.first, share(e.first),
                                 e.second);
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.ms > b.ms; });
  const size_t shown = std::min<size_t>(rows.size(), 15);
  std::cout << absl::StrFormat("  the %d slowest kernels:\n", shown);
  for (size_t i = 0; i < shown; ++i) {
    const Row& r = rows[i];
    std::cout << absl::StrFormat("  %-6s %-16s %9.3f %6.1f  %s '%s'\n", r.id, r.op, r.ms,
                                 share(r.ms), r.kind, r.name);
  }
  return absl::OkStatus();
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
                       {"--threads", true},
                       {"--profile", false}});
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
  // The first run apart: it also pays what kernels set up once (oneDNN's primitives and its
  // weights laid out for them, weights packed at the first run, memory touched the first time).
  double first_ms = 0;
  for (int i = 0; i < warmup; ++i) {
    auto t = Clock::now();
    RETURN_IF_ERROR(session->Run(inputs).status());
    if (i == 0) first_ms = MsSince(t);
  }
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    auto t = Clock::now();
    RETURN_IF_ERROR(session->Run(inputs).status());
    ms.push_back(MsSince(t));
    if (warmup == 0 && i == 0) first_ms = ms.back();
  }
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(q * (ms.size() - 1) + 0.5))];
  };
  const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / ms.size();
  std::cout << absl::StrFormat(
      "engine %s (policy %s)\n  inputs: %s\n  threads %d (OpenMP wait %s; kernel loops on %s), "
      "%d run(s) after %d warm-up\n"
      "  latency ms: min %.3f  median %.3f  p90 %.3f  mean %.3f  max %.3f\n"
      "  load (open, verify, ready): %.1f ms\n"
      "  first run (with the kernels' one-time setup): %.3f ms\n",
      args.positional[0], engine->metadata.policy().empty() ? "-" : engine->metadata.policy(),
      source, runtime::Threads(), runtime::WaitPolicy(), session->LoopThreads(), runs, warmup,
      ms.front(), at(0.5), at(0.9), mean, ms.back(), load_ms, first_ms);
  if (args.flags.count("--profile")) RETURN_IF_ERROR(Profile(*session, *engine, inputs, runs));
  return absl::OkStatus();
}

}  // namespace kiln::tools
