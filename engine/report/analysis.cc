#include "engine/report/analysis.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <tuple>

#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/common/status.h"
#include "engine/kernels/kernel.h"
#include "engine/report/analysis_internal.h"

namespace kiln::report {

using analysis_internal::ChannelsLastValue;
using analysis_internal::Converted;
using analysis_internal::SameBits;

namespace {

DataType DataTypeOfPrecision(const std::string& p) {
  if (p == "fp16") return DataType::kF16;
  if (p == "bf16") return DataType::kBF16;
  return DataType::kF32;
}

// An owned f32 copy of a floating tensor (never sharing the engine's arena).
absl::StatusOr<ir::Tensor> OwnedF32(const ir::Tensor& t) {
  if (t.dtype() == DataType::kF32) return t.Clone();
  return ToF32(t);
}

std::string Sci(double v) { return absl::StrFormat("%.3g", v); }

// The `::` suffixes a pass appends to an ONNX tensor's name: a dtype (precision lowering) or
// the channels-last marker (the layout pass). Calls `f` with each, last first, and returns the
// name without them.
template <typename F>
std::string StripPassSuffixes(const std::string& value_name, F&& f) {
  std::string n = value_name;
  for (;;) {
    size_t p = n.rfind("::");
    if (p == std::string::npos) return n;
    std::string suffix = n.substr(p + 2);
    bool known = suffix == kernels::kChannelsLastSuffix;
    for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kF64}) {
      known |= suffix == DataTypeName(t);
    }
    if (!known) return n;
    f(suffix);
    n.resize(p);
  }
}

// `t`, the tensor of engine value `v`, in its ONNX tensor's layout: itself, or an NCHW copy of a
// channels-last value kept in `keep`.
absl::StatusOr<const ir::Tensor*> InSourceLayout(const ir::Value* v, const ir::Tensor* t,
                                                 std::deque<ir::Tensor>& keep) {
  if (!v || !t || !ChannelsLastValue(v->name)) return t;
  ASSIGN_OR_RETURN(ir::Tensor c, ir::ChannelsLastCopy(*t, /*to_channels_last=*/false));
  keep.push_back(std::move(c));
  return &keep.back();
}

// The tensors of `values` in their ONNX tensors' layout (InSourceLayout of each).
absl::StatusOr<std::vector<const ir::Tensor*>> AllInSourceLayout(
    const std::vector<ir::Value*>& values, const std::vector<const ir::Tensor*>& tensors,
    std::deque<ir::Tensor>& keep) {
  std::vector<const ir::Tensor*> out(tensors.size(), nullptr);
  for (size_t i = 0; i < tensors.size(); ++i) {
    ASSIGN_OR_RETURN(out[i],
                     InSourceLayout(i < values.size() ? values[i] : nullptr, tensors[i], keep));
  }
  return out;
}

}  // namespace

namespace analysis_internal {

// `t` converted to floating `dtype` through f32 (a copy; `t` itself when the dtypes agree).
absl::StatusOr<ir::Tensor> Converted(const ir::Tensor& t, DataType dtype) {
  if (t.dtype() == dtype) return t;
  ASSIGN_OR_RETURN(ir::Tensor f, ToF32(t));
  return FromF32(f, dtype);
}

// Whether engine value `name` holds its ONNX tensor channels-last (NHWC).
bool ChannelsLastValue(const std::string& value_name) {
  bool nhwc = false;
  StripPassSuffixes(value_name,
                    [&](const std::string& s) { nhwc |= s == kernels::kChannelsLastSuffix; });
  return nhwc;
}

// Whether every tensor of `a` is bit for bit the tensor of `b` at its position (same dtype and
// dims, same bytes; both absent counts as equal).
bool SameBits(const std::vector<const ir::Tensor*>& a, const std::vector<const ir::Tensor*>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    if (!a[i] || !b[i] || a[i]->dtype() != b[i]->dtype() || a[i]->dims() != b[i]->dims()) {
      return false;
    }
    if (a[i]->byte_size() > 0 &&
        std::memcmp(a[i]->raw_data(), b[i]->raw_data(), a[i]->byte_size()) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace analysis_internal

std::string SourceTensorName(const std::string& value_name) {
  return StripPassSuffixes(value_name, [](const std::string&) {});
}

absl::StatusOr<const ir::Tensor*> EngineAnalysis::SourceLayout(const ir::Value* v,
                                                               const ir::Tensor* t,
                                                               std::deque<ir::Tensor>& keep) {
  return InSourceLayout(v, t, keep);
}

absl::StatusOr<ir::Tensor> EngineAnalysis::OwnedCopy(const ir::Tensor& t) { return OwnedF32(t); }

absl::StatusOr<std::unique_ptr<EngineAnalysis>> EngineAnalysis::Create(
    std::shared_ptr<const plan::Engine> engine, std::shared_ptr<const plan::Engine> reference,
    Tolerance tolerance) {
  auto a = std::unique_ptr<EngineAnalysis>(new EngineAnalysis());
  a->engine_ = std::move(engine);
  a->reference_ = std::move(reference);
  a->tol_ = tolerance;
  RETURN_IF_ERROR(a->AddRun());
  RETURN_IF_ERROR(a->Index());
  return a;
}

absl::Status EngineAnalysis::AddRun() {
  auto run = std::make_unique<Run>();
  // No arena for the engine either: the observer reads a kernel's inputs after it ran, and an
  // arena slot may hold an output over an input that died there (a FusedConv's Y over its Z,
  // runtime/memory_planner.h). The kernels compute the same numbers in either memory.
  ASSIGN_OR_RETURN(run->engine, runtime::Session::Create(engine_, /*use_arena=*/false));
  // No arena for the reference: its tensors are kept for the sample by sharing, not copying.
  ASSIGN_OR_RETURN(run->reference, runtime::Session::Create(reference_, /*use_arena=*/false));
  // Subgraph sessions follow their parent's (no arena), so the subgraph observers also read
  // intact inputs; they copy what they keep all the same (nested sessions reuse buffers).
  run->engine_side = std::make_unique<SubgraphSide>(*this, *run, /*reference=*/false);
  run->reference_side = std::make_unique<SubgraphSide>(*this, *run, /*reference=*/true);
  if (!subgraphs_.empty()) MapSubgraphs(*run);  // the first run is mapped by Index
  runs_.push_back(std::move(run));
  return absl::OkStatus();
}

void EngineAnalysis::Sums::Merge(const Sums& o) {
  accumulated.Merge(o.accumulated);
  introduced.Merge(o.introduced);
  ref_max = std::max(ref_max, o.ref_max);
  seen |= o.seen;
}

absl::Status EngineAnalysis::Index() {
  const plan::Engine& e = *engine_;
  const plan::Engine& r = *reference_;
  if (e.graph->inputs().size() != r.graph->inputs().size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the engine has ", e.graph->inputs().size(), " inputs but its reference has ",
                     r.graph->inputs().size(), ": not the same model"));
  }
  const int nsrc = std::max(e.metadata.source_node_count(), r.metadata.source_node_count());
  // Source node -> (engine kernel, provenance position).
  std::vector<std::pair<int, int>> kernel_of_source(nsrc, {-1, 0});
  effective_of_source_.assign(nsrc, DataType::kF32);
  for (int k = 0; k < static_cast<int>(e.order.size()); ++k) {
    engine_index_[e.order[k]] = k;
    const auto& kd = e.metadata.kernels(k);
    for (int p = 0; p < kd.nodes_size(); ++p) {
      int s = kd.nodes(p).node_index();
      if (s < 0 || s >= nsrc) continue;
      kernel_of_source[s] = {k, p};
      effective_of_source_[s] = DataTypeOfPrecision(kd.nodes(p).effective_precision());
    }
  }
  // The reference's constants (initializers and folded values), by ONNX name.
  for (const auto& v : r.graph->values()) {
    if (v->constant) reference_constants_[SourceTensorName(v->name)] = *v->constant;
  }
  // Entries: every floating output of a source node, in reference (topological) order.
  std::vector<int> ref_index_of_source(nsrc, -1);
  for (int i = 0; i < static_cast<int>(r.order.size()); ++i) {
    const auto& kd = r.metadata.kernels(i);
    if (kd.nodes_size() != 1 || kd.nodes(0).node_index() < 0) continue;
    int s = kd.nodes(0).node_index();
    if (s >= nsrc) continue;
    ref_index_of_source[s] = i;
    auto [k, p] = kernel_of_source[s];
    if (k < 0) continue;  // folded or removed in the engine: nothing computed
    for (const ir::Value* v : r.order[i]->outputs) {
      if (!v || !IsFloating(v->dtype)) continue;
      Entry en;
      en.name = SourceTensorName(v->name);
      en.source = s;
      en.kernel = k;
      en.provenance = p;
      en.is_output = v->is_graph_output;
      if (entry_of_.contains(en.name)) continue;
      entry_of_[en.name] = static_cast<int>(entries_.size());
      entries_.push_back(std::move(en));
    }
  }
  for (const ir::Value* v : e.graph->outputs()) {
    auto it = entry_of_.find(SourceTensorName(v->name));
    if (it != entry_of_.end()) entries_[it->second].is_output = true;
  }
  // Per engine kernel: materialised outputs, and members when it hides tensors.
  outputs_of_.assign(e.order.size(), {});
  members_of_.assign(e.order.size(), {});
  for (int k = 0; k < static_cast<int>(e.order.size()); ++k) {
    const ir::Node& n = *e.order[k];
    if (e.metadata.kernels(k).nodes_size() == 0 ||
        e.metadata.kernels(k).nodes(0).node_index() < 0) {
      continue;  // a conversion the build inserted: no ONNX tensor of its own
    }
    for (int j = 0; j < n.num_outputs(); ++j) {
      if (!n.outputs[j]) continue;
      auto it = entry_of_.find(SourceTensorName(n.outputs[j]->name));
      if (it != entry_of_.end() && entries_[it->second].kernel == k) {
        outputs_of_[k].push_back({j, it->second});
      }
    }
  }
  entries_of_kernel_.assign(e.order.size(), {});
  for (int i = 0; i < static_cast<int>(entries_.size()); ++i) {
    entries_of_kernel_[entries_[i].kernel].push_back(i);
  }
  for (auto& en : entries_) {
    bool materialised = false;
    for (auto [j, ent] : outputs_of_[en.kernel]) materialised |= &entries_[ent] == &en;
    en.inside = !materialised;
  }
  std::vector<bool> hides(e.order.size(), false);  // kernels keeping a tensor inside
  inside_at_.assign(e.order.size(), {});
  for (int i = 0; i < static_cast<int>(entries_.size()); ++i) {
    const Entry& en = entries_[i];
    if (!en.inside) continue;
    hides[en.kernel] = true;
    std::vector<int>& at = inside_at_[en.kernel];
    if (static_cast<int>(at.size()) <= en.provenance) at.resize(en.provenance + 1, -1);
    if (at[en.provenance] < 0) at[en.provenance] = i;
  }
  for (int k = 0; k < static_cast<int>(e.order.size()); ++k) {
    if (!hides[k]) continue;
    const auto& kd = e.metadata.kernels(k);
    for (const auto& p : kd.nodes()) {
      int s = p.node_index();
      if (s >= 0 && s < nsrc && ref_index_of_source[s] >= 0) {
        members_of_[k].push_back(ref_index_of_source[s]);
      }
    }
    std::sort(members_of_[k].begin(), members_of_[k].end());
    // Members after the last one keeping a tensor inside recompute nothing the report needs.
    while (!members_of_[k].empty()) {
      const ir::Node& last = *r.order[members_of_[k].back()];
      bool keeps = false;
      for (const ir::Value* v : last.outputs) {
        auto it = v ? entry_of_.find(SourceTensorName(v->name)) : entry_of_.end();
        keeps |= it != entry_of_.end() && entries_[it->second].kernel == k &&
                 entries_[it->second].inside;
      }
      if (keeps) break;
      members_of_[k].pop_back();
    }
  }
  // What each engine kernel needs of the reference: the values it reads (step 3 runs it on
  // them) and those of the tensors compared for it. It runs once the reference has computed
  // them all (gate_), and each is dropped after the last kernel needing it.
  absl::flat_hash_map<std::string, int> producer;  // ONNX tensor -> reference order index
  for (int i = 0; i < static_cast<int>(r.order.size()); ++i) {
    const auto& kd = r.metadata.kernels(i);
    if (kd.nodes_size() == 0 || kd.nodes(0).node_index() < 0) continue;
    for (const ir::Value* v : r.order[i]->outputs) {
      if (v) producer[SourceTensorName(v->name)] = i;
    }
  }
  std::vector<std::vector<std::string>> needs(e.order.size());
  for (int k = 0; k < static_cast<int>(e.order.size()); ++k) {
    for (const ir::Value* v : e.order[k]->inputs) {
      if (v && !v->constant) needs[k].push_back(SourceTensorName(v->name));
    }
  }
  for (const Entry& en : entries_) needs[en.kernel].push_back(en.name);
  gate_.assign(e.order.size(), -1);
  last_need_.clear();
  for (int k = 0; k < static_cast<int>(e.order.size()); ++k) {
    for (const std::string& name : needs[k]) {
      auto p = producer.find(name);
      if (p != producer.end()) gate_[k] = std::max(gate_[k], p->second);
      last_need_[name] = k;
    }
  }
  // An If / Loop / Scan kernel runs once the reference has run its node, whatever its outputs'
  // dtypes: the reference's runs of its subgraphs are then in flight for it to compare with.
  for (int k = 0; k < static_cast<int>(e.order.size()); ++k) {
    const ir::Node& n = *e.order[k];
    bool subgraphs = false;
    for (const auto& [name, a] : n.attrs) subgraphs |= a.type == ir::Attribute::Type::kGraph;
    if (!subgraphs) continue;
    for (const ir::Value* v : n.outputs) {
      auto p = v ? producer.find(SourceTensorName(v->name)) : producer.end();
      if (p != producer.end()) gate_[k] = std::max(gate_[k], p->second);
    }
  }
  release_after_.assign(e.order.size(), {});
  for (const auto& [name, k] : last_need_) release_after_[k].push_back(name);
  RETURN_IF_ERROR(IndexSubgraphs());
  if (!subgraphs_.empty()) MapSubgraphs(*runs_[0]);
  return absl::OkStatus();
}

const ir::Tensor* EngineAnalysis::Reference(const Run& run, const std::string& name) const {
  auto it = run.reference_values.find(name);
  if (it != run.reference_values.end()) return &it->second;
  auto c = reference_constants_.find(name);
  return c != reference_constants_.end() ? &c->second : nullptr;
}

absl::Status EngineAnalysis::AddSample(const std::vector<ir::Tensor>& inputs) {
  RETURN_IF_ERROR(RunSample(*runs_[0], inputs));
  MergeRun(*runs_[0]);
  return absl::OkStatus();
}

void EngineAnalysis::MergeRun(Run& run) {
  for (size_t e = 0; e < entries_.size(); ++e) entries_[e].sums.Merge(run.sums[e]);
  for (size_t e = 0; e < sub_entries_.size(); ++e) sub_sums_[e].Merge(run.sub_sums[e]);
  for (size_t g = 0; g < subgraphs_.size(); ++g) sub_runs_[g].Merge(run.sub_runs[g]);
  max_stride_ = std::max(max_stride_, run.stride);
  kernels_without_reference_inputs_ += run.kernels_without_reference_inputs;
  last_outputs_ = std::move(run.outputs);
  ++samples_;
}

absl::Status EngineAnalysis::AddSamples(
    const std::vector<std::vector<ir::Tensor>>& samples,
    const std::function<void(size_t, const SampleStats&)>& on_sample) {
  // One sample per thread, each run's kernels on that thread alone (nested OpenMP regions are
  // inactive): the report spends a fifth of a one-sample-at-a-time run in serial sections.
  const size_t width = std::max<size_t>(
      1, std::min<size_t>(samples.size(), static_cast<size_t>(omp_get_max_threads())));
  while (runs_.size() < width) RETURN_IF_ERROR(AddRun());
  for (size_t base = 0; base < samples.size(); base += width) {
    const int n = static_cast<int>(std::min(width, samples.size() - base));
    std::vector<absl::Status> status(n);
#pragma omp parallel for num_threads(n) schedule(static, 1) if (n > 1)
    for (int i = 0; i < n; ++i) status[i] = RunSample(*runs_[i], samples[base + i]);
    // Merged in sample order: the same numbers however many ran at once.
    for (int i = 0; i < n; ++i) {
      Run& run = *runs_[i];
      if (!status[i].ok()) {
        return absl::Status(status[i].code(),
                            absl::StrCat("sample ", base + i, ": ", status[i].message()));
      }
      MergeRun(run);
      if (on_sample) on_sample(base + i, run.stats);
    }
  }
  return absl::OkStatus();
}

absl::Status EngineAnalysis::RunSample(Run& r, const std::vector<ir::Tensor>& inputs) {
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  auto t0 = Clock::now();
  r.reference_values.clear();
  r.sums.assign(entries_.size(), Sums());
  r.kernels_without_reference_inputs = 0;
  r.stats = SampleStats();
  // Subgraphs: nothing in flight, every tensor's occurrences counted from 0, all kept again.
  r.in_flight.clear();
  r.kept_bytes = 0;
  r.stride = 1;
  r.ordinal.assign(sub_entries_.size(), 0);
  r.sub_sums.assign(sub_entries_.size(), SubSums());
  r.sub_runs.assign(subgraphs_.size(), SubRuns());
  r.sub_failed = absl::OkStatus();
  r.engine_side->Reset();
  r.reference_side->Reset();
  runtime::SubgraphObserver* engine_side = subgraphs_.empty() ? nullptr : r.engine_side.get();
  runtime::SubgraphObserver* reference_side = subgraphs_.empty() ? nullptr : r.reference_side.get();
  ASSIGN_OR_RETURN(std::unique_ptr<runtime::Execution> run, r.engine->Start(inputs));
  const plan::Engine& ref = *reference_;
  for (size_t i = 0; i < inputs.size() && i < ref.graph->inputs().size(); ++i) {
    const ir::Tensor& t = inputs[i];
    std::string name = SourceTensorName(ref.graph->inputs()[i]->name);
    if (!last_need_.contains(name)) continue;
    ASSIGN_OR_RETURN(r.reference_values[name],
                     IsFloating(t.dtype()) ? OwnedF32(t) : absl::StatusOr<ir::Tensor>(t));
  }
  // The engine runs in step with the reference: each engine kernel as soon as the reference
  // has computed every value it is compared with or reads (steps 2 and 3 for it), and each
  // reference value dropped once no engine kernel left needs it. The comparisons then read
  // tensors still in cache, and only the reference values in flight are held.
  absl::Status failed;
  double engine_ms = 0;
  auto observe = [&](const ir::Node& n, const std::vector<const ir::Tensor*>& ins,
                     const std::vector<const ir::Tensor*>& outs) {
    failed = ObserveEngine(r, n, ins, outs);
  };
  auto tap = [this, &r](const ir::Node& n, int member, int64_t count) {
    return Tap(r, n, member, count);
  };
  auto advance = [&](int reference_done) {
    auto s0 = Clock::now();
    while (failed.ok() && !run->done() && gate_[run->next()] <= reference_done) {
      const size_t k = run->next();
      absl::Status st = run->Step(observe, tap, engine_side);
      if (!st.ok()) failed = st;
      if (failed.ok() && !r.sub_failed.ok()) failed = r.sub_failed;
      if (has_subgraphs_[k]) EndSubgraphs(r, engine_->order[k]->name);
      for (const std::string& name : release_after_[k]) r.reference_values.erase(name);
    }
    engine_ms += ms(s0, Clock::now());
  };
  advance(-1);
  int index = 0;
  auto observer = [&](const ir::Node& n, const std::vector<const ir::Tensor*>&,
                      const std::vector<const ir::Tensor*>& outs) {
    const int i = index++;
    const auto& kd = ref.metadata.kernels(i);
    // Only ONNX nodes: an inserted conversion (a graph output cast back to its authored type)
    // would overwrite the f32 value with a rounded one.
    if (!failed.ok() || kd.nodes_size() == 0 || kd.nodes(0).node_index() < 0) return;
    for (int j = 0; j < n.num_outputs(); ++j) {
      if (!n.outputs[j] || !outs[j]) continue;
      std::string name = SourceTensorName(n.outputs[j]->name);
      auto it = entry_of_.find(name);
      const bool needed = last_need_.contains(name);
      if (it == entry_of_.end() && !needed) continue;
      // Without an arena the tensor's buffer is its own: keep it (f32 as is, others converted),
      // in its ONNX layout (`kiln compare` may give a channels-last engine as the reference).
      std::deque<ir::Tensor> nchw;
      auto source = InSourceLayout(n.outputs[j], outs[j], nchw);
      if (!source.ok()) {
        failed = source.status();
        return;
      }
      const ir::Tensor& t = **source;
      auto copy = IsFloating(t.dtype()) ? ToF32(t) : absl::StatusOr<ir::Tensor>(t);
      if (!copy.ok()) {
        failed = copy.status();
        return;
      }
      if (it != entry_of_.end() && copy->dtype() == DataType::kF32) {
        Sums& sums = r.sums[it->second];
        sums.ref_max =
            std::max(sums.ref_max, MaxAbsFinite(copy->data<float>(), copy->num_elements()));
      }
      if (needed) r.reference_values[name] = *std::move(copy);
    }
    advance(i);
  };
  auto out = r.reference->Run(inputs, observer, nullptr, reference_side);
  if (!out.ok()) {
    return absl::Status(out.status().code(),
                        absl::StrCat("reference run: ", out.status().message()));
  }
  advance(std::numeric_limits<int>::max());
  r.reference_values.clear();
  RETURN_IF_ERROR(failed);
  RETURN_IF_ERROR(r.sub_failed);
  // Subgraph runs of nodes the engine does not have (folded): the reference's alone.
  while (!r.in_flight.empty()) EndSubgraphs(r, r.in_flight.begin()->first);
  for (SubRuns& g : r.sub_runs) g.samples_differing = g.engine_only + g.reference_only > 0 ? 1 : 0;
  ASSIGN_OR_RETURN(r.outputs, run->Outputs());
  const double total = ms(t0, Clock::now());
  r.stats.reference_ms = total - engine_ms;
  r.stats.engine_ms = engine_ms;
  return absl::OkStatus();
}

absl::Status EngineAnalysis::Compare(Run& run, int e, const ir::Tensor* accumulated,
                                     const ir::Tensor* introduced) {
  const Entry& en = entries_[e];
  Sums& sums = run.sums[e];
  const ir::Tensor* ref = Reference(run, en.name);
  if (!ref || (!accumulated && !introduced)) return absl::OkStatus();
  for (const ir::Tensor* value : {accumulated, introduced}) {
    if (value && value->num_elements() != ref->num_elements()) {
      return absl::InternalError(
          absl::StrCat("tensor '", en.name, "' has ", ir::DimsToString(value->dims()),
                       " in the engine but ", ir::DimsToString(ref->dims()), " in the reference"));
    }
  }
  if (accumulated && introduced) {
    // One pass over the reference for both.
    RETURN_IF_ERROR(
        sums.accumulated.AddTensorPair(*accumulated, sums.introduced, *introduced, *ref, tol_));
  } else if (accumulated) {
    RETURN_IF_ERROR(sums.accumulated.AddTensor(*accumulated, *ref, tol_));
  } else {
    RETURN_IF_ERROR(sums.introduced.AddTensor(*introduced, *ref, tol_));
  }
  sums.seen = true;
  return absl::OkStatus();
}

absl::Status EngineAnalysis::ObserveEngine(Run& run, const ir::Node& n,
                                           const std::vector<const ir::Tensor*>& ins,
                                           const std::vector<const ir::Tensor*>& outs) {
  const int k = engine_index_.at(&n);
  // Channels-last tensors compared and recomputed from in their ONNX layout (NCHW copies).
  std::deque<ir::Tensor> nchw;
  ASSIGN_OR_RETURN(std::vector<const ir::Tensor*> source_ins,
                   AllInSourceLayout(n.inputs, ins, nchw));
  ASSIGN_OR_RETURN(std::vector<const ir::Tensor*> source_outs,
                   AllInSourceLayout(n.outputs, outs, nchw));
  // What this run offered from inside, taken before the standalone run offers its own.
  Inside tapped;
  tapped.inputs = source_ins;
  if (run.taps_kernel == k) tapped.taps = std::move(run.taps);
  run.taps.clear();
  run.taps_kernel = -1;
  // The same kernel alone on the reference inputs (step 3), in the same pass; the two runs'
  // tensors compared with the reference together.
  return RunIntroduced(run, k, ins, source_outs, tapped);
}

namespace {

// Ranking key of introduced error: non-finite elements that disagree with the reference first,
// then the share of elements out of tolerance, then max_abs relative to the tensor's range.
std::tuple<int64_t, double, double> Badness(const v1::ErrorStats& s, double ref_max, double atol) {
  return {NonFiniteErrors(s), s.fraction_outside(), s.max_abs() / std::max(ref_max, atol)};
}

}  // namespace

std::vector<int> EngineAnalysis::RankedSources() const {
  std::vector<std::pair<std::tuple<int64_t, double, double>, int>> ranked;
  for (int i = 0; i < static_cast<int>(entries_.size()); ++i) {
    const Entry& en = entries_[i];
    if (!en.sums.seen) continue;
    v1::ErrorStats s = en.sums.introduced.Finish();
    // Every node that introduces any error is a candidate: when error builds up over many
    // roundings no single node is out of tolerance, and the ranking still orders them.
    if (NonFiniteErrors(s) == 0 && s.max_abs() == 0) continue;
    ranked.push_back({Badness(s, en.sums.ref_max, tol_.atol), i});
  }
  // Worst first; ties keep topological order so the first node of a chain leads.
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<int> out;
  for (const auto& [key, i] : ranked) {
    int s = entries_[i].source;
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

v1::AccuracyReport EngineAnalysis::Report(int max_offenders,
                                          const std::vector<std::string>& pattern_of_source) const {
  v1::AccuracyReport rep;
  const plan::Engine& e = *engine_;
  rep.set_model_name(e.metadata.model_name());
  rep.set_model_sha256(e.metadata.model_sha256());
  rep.set_policy(e.metadata.policy());
  rep.set_samples(samples_);
  rep.set_atol(tol_.atol);
  rep.set_rtol(tol_.rtol);
  absl::flat_hash_map<int, int> tensor_of_entry;
  // The tensors inside a top-level node's subgraphs, before its outputs (computed first).
  SubReport subs = StartSubReport();
  for (int i = 0; i < static_cast<int>(entries_.size()); ++i) {
    const Entry& en = entries_[i];
    AddSubgraphTensors(en.kernel, subs, rep);
    if (!en.sums.seen) continue;
    const auto& kd = e.metadata.kernels(en.kernel);
    const auto& p = kd.nodes(en.provenance);
    v1::TensorReport* t = rep.add_tensors();
    tensor_of_entry[i] = rep.tensors_size() - 1;
    t->set_tensor(en.name);
    t->set_node_name(p.node_name());
    t->set_op_type(p.op_type());
    t->set_node_index(p.node_index());
    t->set_assigned_precision(p.assigned_precision());
    t->set_effective_precision(p.effective_precision());
    t->set_kernel_id(kd.id());
    t->set_kernel_op(kd.op_type());
    t->set_fusion(p.fusion());
    t->set_rule(p.rule());
    t->set_device(p.device());
    t->set_fallback_reason(p.fallback_reason());
    t->set_inside_fused_kernel(en.inside);
    *t->mutable_accumulated() = en.sums.accumulated.Finish();
    *t->mutable_introduced() = en.sums.introduced.Finish();
    t->set_ref_max_abs(en.sums.ref_max);
    t->set_ref_exceeds_fp16(en.sums.ref_max > 65504.0);
    t->set_is_graph_output(en.is_output);
    if (en.source < static_cast<int>(pattern_of_source.size())) {
      t->set_pattern(pattern_of_source[en.source]);
    }
  }
  for (int k = 0; k < static_cast<int>(e.order.size()); ++k) AddSubgraphTensors(k, subs, rep);
  bool pass = true;
  for (const ir::Value* v : e.graph->outputs()) {
    auto it = entry_of_.find(SourceTensorName(v->name));
    if (it == entry_of_.end() || !entries_[it->second].sums.seen) continue;
    v1::OutputVerdict* o = rep.add_outputs();
    o->set_tensor(v->name);
    *o->mutable_error() = entries_[it->second].sums.accumulated.Finish();
    const auto& s = o->error();
    // NaN/Inf that the reference holds in the same places pass; any other fails.
    o->set_pass(NonFiniteErrors(s) == 0 && s.fraction_outside() == 0);
    pass &= o->pass();
  }
  rep.set_pass(pass);
  // Worst offenders: ranked by introduced error, one row per tensor.
  std::vector<std::pair<std::tuple<int64_t, double, double>, int>> ranked;
  for (const auto& [i, ti] : tensor_of_entry) {
    const auto& s = rep.tensors(ti).introduced();
    if (NonFiniteErrors(s) == 0 && s.max_abs() == 0) continue;
    ranked.push_back({Badness(s, entries_[i].sums.ref_max, tol_.atol), ti});
  }
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  for (int r = 0; r < static_cast<int>(ranked.size()) && r < max_offenders; ++r) {
    const v1::TensorReport& t = rep.tensors(ranked[r].second);
    v1::Offender* o = rep.add_worst_offenders();
    o->set_tensor(t.tensor());
    o->set_node_name(t.node_name());
    o->set_op_type(t.op_type());
    o->set_effective_precision(t.effective_precision());
    o->set_pattern(t.pattern());
    const auto& s = t.introduced();
    std::string why;
    if (s.inf_count() > 0) why = absl::StrCat("introduces ", s.inf_count(), " Inf");
    if (s.nan_count() > 0)
      absl::StrAppend(&why, why.empty() ? "introduces " : ", ", s.nan_count(), " NaN");
    if (s.nonfinite_mismatch_count() > 0) {
      absl::StrAppend(&why, why.empty() ? "" : ", ", s.nonfinite_mismatch_count(), " of the ",
                      s.ref_nan_count() + s.ref_inf_count(), " reference NaN/Inf not reproduced");
    }
    if (why.empty()) {
      why = absl::StrCat("introduces max_abs ", Sci(s.max_abs()), " (",
                         absl::StrFormat("%.1f", 100.0 * s.fraction_outside()),
                         "% outside tolerance)");
    }
    if (t.ref_exceeds_fp16()) {
      absl::StrAppend(&why, "; reference reaches ", Sci(t.ref_max_abs()), " > fp16 max 65504");
    }
    o->set_why(why);
  }
  if (kernels_without_reference_inputs_ > 0) {
    rep.add_notes(absl::StrCat(kernels_without_reference_inputs_,
                               " kernel run(s) had inputs without a reference value: no "
                               "introduced error for them"));
  }
  int not_computed = 0;
  for (const Entry& en : entries_) not_computed += en.sums.seen ? 0 : 1;
  if (not_computed > 0) {
    rep.add_notes(absl::StrCat(not_computed, " tensor(s) had no reference to compare with"));
  }
  AddSubgraphNotes(subs, rep);
  return rep;
}

}  // namespace kiln::report
