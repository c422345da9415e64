// The accuracy report inside If / Loop / Scan subgraphs (analysis.h): which tensors the
// subgraphs' kernels materialise, the observers that pair the engine's occurrences with the
// reference's at the same place, the bound on the reference occurrences kept, and the notes.
#include <algorithm>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/ir/op_type.h"
#include "engine/report/analysis.h"

namespace kiln::report {

void EngineAnalysis::SubSums::Merge(const SubSums& o) {
  accumulated.Merge(o.accumulated);
  ref_max = std::max(ref_max, o.ref_max);
  compared += o.compared;
  not_compared += o.not_compared;
}

void EngineAnalysis::SubRuns::Merge(const SubRuns& o) {
  engine += o.engine;
  reference += o.reference;
  engine_only += o.engine_only;
  reference_only += o.reference_only;
  samples_differing += o.samples_differing;
}

int EngineAnalysis::SubgraphIndex(const ir::Node& node, const std::string& attr) const {
  auto it = subgraph_of_.find(absl::StrCat(node.name, "/", attr));
  return it == subgraph_of_.end() ? -1 : it->second;
}

absl::Status EngineAnalysis::IndexSubgraphs() {
  const runtime::Session& engine = *runs_[0]->engine;
  const runtime::Session& reference = *runs_[0]->reference;
  has_subgraphs_.assign(engine.engine().order.size(), false);
  auto add_subgraph = [this](const ir::Node& n, const std::string& attr) {
    const std::string label = absl::StrCat(n.name, "/", attr);
    auto [it, added] = subgraph_of_.emplace(label, static_cast<int>(subgraphs_.size()));
    if (added) subgraphs_.push_back({label, n.name, ir::OpName(n.op), attr});
    return it->second;
  };
  // The reference's subgraph tensors (one kernel per ONNX node): ONNX tensor -> its node.
  absl::flat_hash_map<std::string, std::string> producer;
  std::function<void(const runtime::Session&)> walk_reference = [&](const runtime::Session& s) {
    const plan::Engine& e = s.engine();
    for (size_t k = 0; k < e.order.size(); ++k) {
      for (const auto& [attr, sub] : s.subgraph_sessions(k)) {
        const plan::Engine& se = sub->engine();
        for (size_t j = 0; j < se.order.size(); ++j) {
          const auto& kd = se.metadata.kernels(j);
          if (kd.nodes_size() != 1 || kd.nodes(0).node_index() < 0) continue;
          for (const ir::Value* v : se.order[j]->outputs) {
            if (v && IsFloating(v->dtype)) {
              producer.emplace(SourceTensorName(v->name), kd.nodes(0).node_name());
            }
          }
        }
        walk_reference(*sub);
      }
    }
  };
  walk_reference(reference);
  // The engine's subgraphs, outermost first, and the tensors their kernels materialise, each
  // after those of the subgraphs its kernel runs (computed before its outputs).
  absl::flat_hash_set<std::string> in_engine;  // subgraph nodes the engine's kernels run
  std::function<void(const runtime::Session&, int, int)> walk = [&](const runtime::Session& s,
                                                                    int top, int sg) {
    const plan::Engine& e = s.engine();
    for (int k = 0; k < static_cast<int>(e.order.size()); ++k) {
      const ir::Node& n = *e.order[k];
      for (const auto& [attr, sub] : s.subgraph_sessions(k)) {
        if (top < 0) has_subgraphs_[k] = true;
        const int g = add_subgraph(n, attr);
        walk(*sub, top < 0 ? k : top, g);
      }
      if (sg < 0) continue;  // a top-level kernel: its tensors are Index's entries
      const auto& kd = e.metadata.kernels(k);
      if (kd.nodes_size() == 0 || kd.nodes(0).node_index() < 0) continue;  // a conversion
      for (const auto& p : kd.nodes()) in_engine.insert(p.node_name());
      for (const ir::Value* v : n.outputs) {
        if (!v || !IsFloating(v->dtype)) continue;
        const std::string name = SourceTensorName(v->name);
        auto pr = producer.find(name);
        if (pr == producer.end() || sub_entry_of_.contains(name)) continue;
        for (const auto& p : kd.nodes()) {
          if (p.node_name() != pr->second) continue;
          sub_entry_of_[name] = static_cast<int>(sub_entries_.size());
          sub_entries_.push_back({name, sg, top, p, kd.id(), kd.op_type()});
          break;
        }
      }
    }
  };
  walk(engine, -1, -1);
  // Subgraphs only the reference has (the engine folded their node) still count their runs.
  std::function<void(const runtime::Session&)> walk_labels = [&](const runtime::Session& s) {
    const plan::Engine& e = s.engine();
    for (size_t k = 0; k < e.order.size(); ++k) {
      for (const auto& [attr, sub] : s.subgraph_sessions(k)) {
        add_subgraph(*e.order[k], attr);
        walk_labels(*sub);
      }
    }
  };
  walk_labels(reference);
  // Floating tensors of subgraph nodes the engine runs whose kernel keeps them inside.
  for (const auto& [name, node] : producer) {
    if (in_engine.contains(node) && !sub_entry_of_.contains(name)) ++sub_inside_fused_;
  }
  sub_sums_.assign(sub_entries_.size(), SubSums());
  sub_runs_.assign(subgraphs_.size(), SubRuns());
  return absl::OkStatus();
}

void EngineAnalysis::MapSubgraphs(Run& run) const {
  run.sub_engine_outputs.clear();
  run.sub_reference_outputs.clear();
  // The engine side: the kernel (by id, in its subgraph) that materialises each sub entry.
  std::function<void(const runtime::Session&, int, bool)> walk = [&](const runtime::Session& s,
                                                                     int sg, bool reference) {
    const plan::Engine& e = s.engine();
    for (int k = 0; k < static_cast<int>(e.order.size()); ++k) {
      const ir::Node& n = *e.order[k];
      for (const auto& [attr, sub] : s.subgraph_sessions(k)) {
        walk(*sub, SubgraphIndex(n, attr), reference);
      }
      if (sg < 0) continue;
      const auto& kd = e.metadata.kernels(k);
      if (kd.nodes_size() == 0 || kd.nodes(0).node_index() < 0) continue;
      for (int j = 0; j < n.num_outputs(); ++j) {
        if (!n.outputs[j]) continue;
        auto it = sub_entry_of_.find(SourceTensorName(n.outputs[j]->name));
        if (it == sub_entry_of_.end()) continue;
        const SubEntry& en = sub_entries_[it->second];
        const bool computes =
            reference ? kd.nodes_size() == 1 && kd.nodes(0).node_name() == en.node.node_name()
                      : sg == en.subgraph && kd.id() == en.kernel_id;
        if (!computes) continue;
        (reference ? run.sub_reference_outputs : run.sub_engine_outputs)[&n].push_back(
            {j, it->second});
      }
    }
  };
  walk(*run.engine, -1, false);
  walk(*run.reference, -1, true);
}

void EngineAnalysis::SubgraphSide::RunStarts(const runtime::SubgraphPath& path) {
  const size_t d = path.size();
  if (d == 0) return;
  if (keys_.size() <= d) {
    keys_.resize(d + 1);
    current_.resize(d + 1, nullptr);
  }
  const runtime::SubgraphFrame& f = path.back();
  // The place: every level's node, attribute and occurrence (names as the engine and its
  // reference both have them: the import's qualified names).
  keys_[d] = absl::StrCat(keys_[d - 1], "|", f.node->name, ".", *f.attr, "#", f.occurrence);
  const int g = a_.SubgraphIndex(*f.node, *f.attr);
  auto& flight = run_.in_flight[path.front().node->name];
  if (reference_) {
    RefRun& r = flight[keys_[d]];
    r.subgraph = g;
    current_[d] = &r;
    if (g >= 0) ++run_.sub_runs[g].reference;
    return;
  }
  if (g >= 0) ++run_.sub_runs[g].engine;
  auto it = flight.find(keys_[d]);
  if (it == flight.end() || it->second.met) {
    current_[d] = nullptr;  // the reference did not run it here: nothing to compare with
    if (g >= 0) ++run_.sub_runs[g].engine_only;
    return;
  }
  it->second.met = true;
  current_[d] = &it->second;
}

void EngineAnalysis::SubgraphSide::NodeRan(const runtime::SubgraphPath& path, const ir::Node& node,
                                           const std::vector<const ir::Tensor*>& inputs,
                                           const std::vector<const ir::Tensor*>& outputs) {
  (void)inputs;
  if (!run_.sub_failed.ok()) return;
  run_.sub_failed = Ran(path, node, outputs);
}

absl::Status EngineAnalysis::SubgraphSide::Ran(const runtime::SubgraphPath& path,
                                               const ir::Node& node,
                                               const std::vector<const ir::Tensor*>& outputs) {
  const auto& computes = reference_ ? run_.sub_reference_outputs : run_.sub_engine_outputs;
  auto it = computes.find(&node);
  if (it == computes.end()) return absl::OkStatus();
  const size_t d = path.size();
  RefRun* r = d < current_.size() ? current_[d] : nullptr;
  for (auto [j, e] : it->second) {
    const ir::Tensor* t = j < static_cast<int>(outputs.size()) ? outputs[j] : nullptr;
    if (!t || !IsFloating(t->dtype())) continue;
    std::deque<ir::Tensor> nchw;
    ASSIGN_OR_RETURN(const ir::Tensor* x, a_.SourceLayout(node.outputs[j], t, nchw));
    SubSums& sums = run_.sub_sums[e];
    if (reference_) {
      // A copy: the subgraph's session reuses its buffers in its next run.
      ASSIGN_OR_RETURN(ir::Tensor copy, a_.OwnedCopy(*x));
      sums.ref_max = std::max(sums.ref_max, MaxAbsFinite(copy.data<float>(), copy.num_elements()));
      const int64_t ordinal = run_.ordinal[e]++;
      if (r == nullptr || ordinal % run_.stride != 0) continue;
      Kept& k = r->values[e];
      run_.kept_bytes += static_cast<int64_t>(copy.byte_size()) -
                         (k.value.defined() ? static_cast<int64_t>(k.value.byte_size()) : 0);
      k = Kept{std::move(copy), ordinal};
      if (run_.kept_bytes > a_.subgraph_budget_bytes_) a_.Thin(run_);
      continue;
    }
    auto kept = r ? r->values.find(e) : absl::flat_hash_map<int, Kept>::iterator();
    if (r == nullptr || kept == r->values.end()) {
      ++sums.not_compared;  // no reference run here, or its value was not kept
      continue;
    }
    const ir::Tensor& ref = kept->second.value;
    if (ref.num_elements() != x->num_elements()) {
      return absl::InternalError(absl::StrCat(node.Label(), " tensor '", a_.sub_entries_[e].name,
                                              "' has ", ir::DimsToString(x->dims()),
                                              " in the engine but ", ir::DimsToString(ref.dims()),
                                              " in the reference (", keys_[d], ")"));
    }
    RETURN_IF_ERROR(sums.accumulated.AddTensor(*x, ref, a_.tol_));
    ++sums.compared;
    run_.kept_bytes -= static_cast<int64_t>(ref.byte_size());
    r->values.erase(kept);
  }
  return absl::OkStatus();
}

void EngineAnalysis::Thin(Run& run) const {
  int64_t occurrences = 0;
  for (int64_t o : run.ordinal) occurrences = std::max(occurrences, o);
  while (run.kept_bytes > subgraph_budget_bytes_ && run.stride < occurrences) {
    run.stride *= 2;
    for (auto& [top, flight] : run.in_flight) {
      for (auto& [key, r] : flight) {
        for (auto it = r.values.begin(); it != r.values.end();) {
          if (it->second.ordinal % run.stride == 0) {
            ++it;
            continue;
          }
          run.kept_bytes -= static_cast<int64_t>(it->second.value.byte_size());
          r.values.erase(it++);
        }
      }
    }
  }
}

void EngineAnalysis::EndSubgraphs(Run& run, const std::string& name) const {
  auto it = run.in_flight.find(name);
  if (it == run.in_flight.end()) return;
  for (const auto& [key, r] : it->second) {
    for (const auto& [e, k] : r.values) run.kept_bytes -= static_cast<int64_t>(k.value.byte_size());
    if (!r.met && r.subgraph >= 0) ++run.sub_runs[r.subgraph].reference_only;
  }
  run.in_flight.erase(it);
}

EngineAnalysis::SubReport EngineAnalysis::StartSubReport() const {
  SubReport s;
  s.pending.assign(engine_->order.size(), {});
  for (int i = 0; i < static_cast<int>(sub_entries_.size()); ++i) {
    s.pending[sub_entries_[i].top].push_back(i);
  }
  return s;
}

void EngineAnalysis::AddSubgraphTensors(int kernel, SubReport& s, v1::AccuracyReport& rep) const {
  for (int i : s.pending[kernel]) {
    const SubEntry& en = sub_entries_[i];
    const SubSums& sums = sub_sums_[i];
    if (sums.compared == 0) {  // a branch no sample took, say
      ++s.never_compared;
      continue;
    }
    ++s.reported;
    v1::TensorReport* t = rep.add_tensors();
    t->set_tensor(en.name);
    t->set_node_name(en.node.node_name());
    t->set_op_type(en.node.op_type());
    t->set_node_index(en.node.node_index());
    t->set_assigned_precision(en.node.assigned_precision());
    t->set_effective_precision(en.node.effective_precision());
    t->set_kernel_id(en.kernel_id);
    t->set_kernel_op(en.kernel_op);
    t->set_fusion(en.node.fusion());
    t->set_rule(en.node.rule());
    *t->mutable_accumulated() = sums.accumulated.Finish();
    // `introduced` stays unset: not measured.
    t->set_ref_max_abs(sums.ref_max);
    t->set_ref_exceeds_fp16(sums.ref_max > 65504.0);
    v1::SubgraphTensor* in = t->mutable_in_subgraph();
    in->set_subgraph(subgraphs_[en.subgraph].label);
    in->set_occurrences(sums.compared);
    in->set_occurrences_not_compared(sums.not_compared);
    in->set_introduced_not_measured(true);
  }
  s.pending[kernel].clear();
}

void EngineAnalysis::AddSubgraphNotes(const SubReport& s, v1::AccuracyReport& rep) const {
  const int reported = s.reported, never_compared = s.never_compared;
  for (size_t g = 0; g < subgraphs_.size(); ++g) {
    const Subgraph& sg = subgraphs_[g];
    const SubRuns& runs = sub_runs_[g];
    if (runs.engine == 0 && runs.reference == 0) continue;
    v1::SubgraphRuns* o = rep.mutable_subgraphs()->add_runs();
    o->set_subgraph(sg.label);
    o->set_node_name(sg.node_name);
    o->set_op_type(sg.op_type);
    o->set_attribute(sg.attr);
    o->set_engine_runs(runs.engine);
    o->set_reference_runs(runs.reference);
    o->set_engine_only_runs(runs.engine_only);
    o->set_reference_only_runs(runs.reference_only);
    o->set_samples_differing(runs.samples_differing);
    if (runs.samples_differing == 0) continue;
    const bool branch = sg.op_type == "If";
    rep.add_notes(absl::StrCat(
        sg.label, ": ", branch ? "branch" : "iterations", " differ", branch ? "s" : "",
        " from the reference in ", runs.samples_differing, " sample(s) (",
        branch ? "its condition came out different"
               : "its trip count, condition or length came out different",
        "): the engine ran it ", runs.engine_only, " time(s) where the reference did not, the ",
        "reference ", runs.reference_only,
        " time(s) where the engine did not; nothing is "
        "compared in those runs"));
  }
  if (reported > 0) {
    rep.add_notes(absl::StrCat(
        reported,
        " tensor(s) inside If / Loop / Scan subgraphs compared occurrence by "
        "occurrence (accumulated error only: their introduced error is not measured)"));
  }
  if (max_stride_ > 1) {
    const int64_t mib = subgraph_budget_bytes_ >> 20;
    rep.add_notes(absl::StrCat(
        "subgraph tensors: the reference occurrences held for comparison passed ",
        mib > 0 ? absl::StrCat(mib, " MiB") : absl::StrCat(subgraph_budget_bytes_, " bytes"),
        " in a sample, so only one occurrence in ", max_stride_,
        " of each (evenly spread) was kept and compared (occurrences_not_compared "
        "counts the others)"));
  }
  if (never_compared > 0) {
    rep.add_notes(absl::StrCat(never_compared,
                               " tensor(s) inside subgraphs never compared (their subgraph did "
                               "not run, or ran only where the reference did not)"));
  }
  if (sub_inside_fused_ > 0) {
    rep.add_notes(absl::StrCat(sub_inside_fused_,
                               " tensor(s) kept inside fused kernels of subgraphs are not "
                               "compared"));
  }
}

}  // namespace kiln::report
