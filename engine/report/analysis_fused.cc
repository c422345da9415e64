// The accuracy report's runs of a kernel alone (analysis.h): a fused kernel's members compared
// from inside (what the kernel offered, and the same kernel run alone on the reference's
// inputs), and the error each kernel introduces on the reference inputs.
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kernels/kernel.h"
#include "engine/report/analysis.h"
#include "engine/report/analysis_internal.h"

namespace kiln::report {

using analysis_internal::ChannelsLastValue;
using analysis_internal::Converted;
using analysis_internal::SameBits;

namespace {

// The context of a kernel run outside the engine: inputs given, outputs freshly allocated, the
// subgraphs of an If / Loop / Scan run by the runners `subgraph` gives.
class AloneContext final : public kernels::KernelContext {
 public:
  using SubgraphOf = std::function<kernels::SubgraphRunner*(const std::string& attr)>;
  AloneContext(const ir::Node& n, const std::vector<const ir::Tensor*>& inputs,
               std::vector<ir::Tensor>& outputs, const runtime::InteriorTap& tap,
               const SubgraphOf& subgraph, kernels::DeviceRuntime* device)
      : node_(n),
        inputs_(inputs),
        outputs_(outputs),
        tap_(tap),
        subgraph_(subgraph),
        device_(device) {
    outputs_.assign(n.num_outputs(), ir::Tensor());
  }
  float* interior(int member, int64_t n) override {
    return tap_ ? tap_(node_, member, n) : nullptr;
  }
  kernels::SubgraphRunner* subgraph(const std::string& attr) override {
    return subgraph_ ? subgraph_(attr) : nullptr;
  }
  int num_inputs() const override { return static_cast<int>(inputs_.size()); }
  const ir::Tensor* input(int i) const override {
    return i < static_cast<int>(inputs_.size()) ? inputs_[i] : nullptr;
  }
  int num_outputs() const override { return node_.num_outputs(); }
  bool output_requested(int i) const override {
    return i < node_.num_outputs() && node_.outputs[i] != nullptr;
  }
  absl::Status set_output(int i, ir::Tensor value) override {
    if (i < 0 || i >= node_.num_outputs()) {
      return absl::InternalError(absl::StrCat(node_.Label(), " set output ", i));
    }
    outputs_[i] = std::move(value);  // a sequence or an optional: shared, never written to
    return absl::OkStatus();
  }
  absl::StatusOr<ir::Tensor*> output(int i, DataType dtype, std::vector<int64_t> dims) override {
    if (i < 0 || i >= node_.num_outputs()) {
      return absl::InternalError(absl::StrCat(node_.Label(), " asked for output ", i));
    }
    // Kernels write every element of their outputs (kernel.h): no zero fill needed.
    if (device_ != nullptr) {
      ASSIGN_OR_RETURN(outputs_[i], device_->Allocate(dtype, std::move(dims)));
    } else {
      ASSIGN_OR_RETURN(outputs_[i], ir::Tensor::AllocateUninitialized(dtype, std::move(dims)));
    }
    return &outputs_[i];
  }

 private:
  const ir::Node& node_;
  const std::vector<const ir::Tensor*>& inputs_;
  std::vector<ir::Tensor>& outputs_;
  const runtime::InteriorTap& tap_;
  const SubgraphOf& subgraph_;
  kernels::DeviceRuntime* device_;
};

}  // namespace

float* EngineAnalysis::Tap(Run& run, const ir::Node& n, int member, int64_t count) {
  auto k = engine_index_.find(&n);
  if (k == engine_index_.end()) return nullptr;
  const std::vector<int>& at = inside_at_[k->second];
  if (member < 0 || member >= static_cast<int>(at.size()) || at[member] < 0) return nullptr;
  if (run.taps_kernel != k->second) {
    run.taps.clear();
    run.taps_kernel = k->second;
  }
  // Shaped as the reference tensor, so members recomputed downstream read it as they would.
  const ir::Tensor* ref = Reference(run, entries_[at[member]].name);
  std::vector<int64_t> dims = {count};
  if (ref && ref->num_elements() == count) dims = ref->dims();
  auto t = ir::Tensor::AllocateUninitialized(DataType::kF32, std::move(dims));
  if (!t.ok()) return nullptr;  // not offered: the tensor is recomputed instead
  ir::Tensor& slot = run.taps[member];
  slot = *std::move(t);
  return slot.data<float>();
}

absl::Status EngineAnalysis::RunAlone(kernels::Kernel& kernel, const ir::Node& node, Io& io,
                                      const runtime::InteriorTap& tap, const SubgraphOf& subgraph,
                                      kernels::DeviceRuntime* device) {
  const auto named = [&](const absl::Status& st) {
    std::string msg(st.message());
    if (!absl::StartsWith(msg, "[node")) msg = absl::StrCat(node.Label(), " ", msg);
    return absl::Status(st.code(), msg);
  };
  std::vector<const ir::Tensor*> inputs = io.inputs;
  std::deque<ir::Tensor> uploaded;
  for (const ir::Tensor*& t : inputs) {
    if (device == nullptr || t == nullptr || t->kind() != ir::TensorKind::kDense) continue;
    absl::StatusOr<ir::Tensor> up = device->Upload(*t);
    if (!up.ok()) return named(up.status());
    t = &uploaded.emplace_back(*std::move(up));
  }
  AloneContext ctx(node, inputs, io.outputs, tap, subgraph, device);
  absl::Status st = kernel.Run(ctx);
  if (!st.ok()) return named(st);
  for (ir::Tensor& out : io.outputs) {
    if (!out.on_device()) continue;
    absl::StatusOr<ir::Tensor> host = ir::Tensor::AllocateUninitialized(out.dtype(), out.dims());
    if (!host.ok()) return named(host.status());
    RETURN_IF_ERROR(device->Download(out, *host));
    out = *std::move(host);
  }
  return absl::OkStatus();
}

absl::Status EngineAnalysis::CompareInside(Run& run, int k, Inside* tapped, Inside* alone) {
  if (members_of_[k].empty()) return absl::OkStatus();
  const plan::Engine& r = *reference_;
  const ir::Node& fused = *engine_->order[k];
  Inside* paths[2] = {tapped, alone};
  // What the kernel offered from inside, each rounded to its node's effective precision.
  std::vector<int> offered;
  for (Inside* in : paths) {
    if (!in) continue;
    for (const auto& [member, value] : in->taps) {
      if (std::find(offered.begin(), offered.end(), member) == offered.end()) {
        offered.push_back(member);
      }
    }
  }
  std::sort(offered.begin(), offered.end());
  for (int member : offered) {
    const int e = inside_at_[k][member];
    const ir::Tensor* v[2] = {nullptr, nullptr};
    for (int p = 0; p < 2; ++p) {
      if (!paths[p]) continue;
      auto it = paths[p]->taps.find(member);
      if (it == paths[p]->taps.end()) continue;
      ir::Tensor t = std::move(it->second);
      RETURN_IF_ERROR(RoundF32InPlace(t, effective_of_source_[entries_[e].source]));
      v[p] = &(paths[p]->local[entries_[e].name] = std::move(t));
    }
    RETURN_IF_ERROR(Compare(run, e, v[0], v[1]));
  }
  for (Inside* in : paths) {
    if (!in) continue;
    // The kernel's own inputs by ONNX name, taken as f32 when a member reads them (a weight
    // only the offered MatMul reads is never converted).
    for (int i = 0; i < fused.num_inputs() && i < static_cast<int>(in->inputs.size()); ++i) {
      if (fused.inputs[i] && in->inputs[i]) {
        in->given[SourceTensorName(fused.inputs[i]->name)] = in->inputs[i];
      }
    }
  }
  // Every member recomputed by its reference kernel in each run's terms, the two results
  // compared with the reference together.
  for (int m : members_of_[k]) {
    const ir::Node& n = *r.order[m];
    Io io[2];
    bool ran[2] = {false, false};
    for (int p = 0; p < 2; ++p) {
      Inside* in = paths[p];
      if (!in || in->stopped) continue;
      bool taken = true;  // every output already taken from the kernel
      for (const ir::Value* v : n.outputs) {
        taken &= !v || in->local.contains(SourceTensorName(v->name));
      }
      if (taken) continue;
      for (const ir::Value* u : n.inputs) {
        if (!u) {
          io[p].inputs.push_back(nullptr);
          continue;
        }
        const ir::Tensor* t = nullptr;
        const std::string name = SourceTensorName(u->name);
        auto it = in->local.find(name);
        if (it == in->local.end()) {
          auto g = in->given.find(name);
          if (g != in->given.end()) {
            const ir::Tensor& gt = *g->second;
            ASSIGN_OR_RETURN(ir::Tensor f,
                             IsFloating(gt.dtype()) ? ToF32(gt) : absl::StatusOr<ir::Tensor>(gt));
            it = in->local.emplace(name, std::move(f)).first;
          }
        }
        if (it != in->local.end()) {
          t = &it->second;
        } else if (u->constant) {
          t = &*u->constant;
        } else {
          in->stopped = true;  // an input from outside the kernel: nothing more to recompute
          break;
        }
        if (IsFloating(u->dtype) && t->dtype() != u->dtype) {
          ASSIGN_OR_RETURN(ir::Tensor c, Converted(*t, u->dtype));
          in->converted.push_back(std::move(c));
          t = &in->converted.back();
        }
        io[p].inputs.push_back(t);
      }
      if (in->stopped) continue;
      RETURN_IF_ERROR(RunAlone(run.reference->kernel(m), n, io[p], nullptr));
      ran[p] = true;
    }
    if (!ran[0] && !ran[1]) continue;
    const int s = r.metadata.kernels(m).nodes(0).node_index();
    for (int j = 0; j < n.num_outputs(); ++j) {
      if (!n.outputs[j]) continue;
      const std::string name = SourceTensorName(n.outputs[j]->name);
      const ir::Tensor* v[2] = {nullptr, nullptr};
      bool floating = false;
      for (int p = 0; p < 2; ++p) {
        if (!ran[p] || !io[p].outputs[j].defined()) continue;
        ir::Tensor value = std::move(io[p].outputs[j]);  // the kernel's own fresh buffer
        if (IsFloating(value.dtype())) {
          floating = true;
          if (value.dtype() == DataType::kF32) {
            RETURN_IF_ERROR(RoundF32InPlace(value, effective_of_source_[s]));
          } else {
            ASSIGN_OR_RETURN(value, RoundedF32(value, effective_of_source_[s]));
          }
        }
        v[p] = &(paths[p]->local[name] = std::move(value));
      }
      auto e = entry_of_.find(name);
      if (floating && e != entry_of_.end() && entries_[e->second].kernel == k &&
          entries_[e->second].inside) {
        RETURN_IF_ERROR(Compare(run, e->second, v[0], v[1]));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status EngineAnalysis::RunIntroduced(Run& run, int k,
                                           const std::vector<const ir::Tensor*>& ins,
                                           const std::vector<const ir::Tensor*>& outs,
                                           Inside& tapped) {
  const plan::Engine& e = *engine_;
  if (outputs_of_[k].empty() && members_of_[k].empty()) return absl::OkStatus();
  // Without a standalone run: the tapped run's tensors alone.
  auto compare_tapped = [&]() -> absl::Status {
    for (auto [j, ent] : outputs_of_[k]) {
      if (outs[j]) RETURN_IF_ERROR(Compare(run, ent, outs[j], nullptr));
    }
    return CompareInside(run, k, &tapped, nullptr);
  };
  const ir::Node& n = *e.order[k];
  Io io;
  std::deque<ir::Tensor> converted;
  // The inputs in their ONNX layout, which the members are recomputed from (io.inputs holds a
  // channels-last input as the kernel reads it).
  std::vector<const ir::Tensor*> source_inputs;
  for (const ir::Value* v : n.inputs) {
    if (!v) {
      io.inputs.push_back(nullptr);
      source_inputs.push_back(nullptr);
      continue;
    }
    if (v->constant) {
      io.inputs.push_back(&*v->constant);
      source_inputs.push_back(&*v->constant);
      continue;
    }
    const ir::Tensor* ref = Reference(run, SourceTensorName(v->name));
    if (ref && IsFloating(v->dtype) && ref->dtype() != v->dtype) {
      ASSIGN_OR_RETURN(ir::Tensor c, Converted(*ref, v->dtype));
      converted.push_back(std::move(c));
      ref = &converted.back();
    } else if (ref && v->dtype != DataType::kUndefined && ref->dtype() != v->dtype) {
      ref = nullptr;
    }
    if (!ref) {
      ++run.kernels_without_reference_inputs;
      return compare_tapped();
    }
    source_inputs.push_back(ref);
    if (ChannelsLastValue(v->name)) {
      ASSIGN_OR_RETURN(ir::Tensor c, ir::ChannelsLastCopy(*ref, /*to_channels_last=*/true));
      converted.push_back(std::move(c));
      ref = &converted.back();
    }
    io.inputs.push_back(ref);
  }
  if (reuse_tapped_runs_ && SameBits(io.inputs, ins)) {
    // The standalone run would compute what the tapped run did: its error is the tapped run's.
    RETURN_IF_ERROR(compare_tapped());
    for (int ent : entries_of_kernel_[k]) run.sums[ent].introduced = run.sums[ent].accumulated;
    ++run.stats.kernels_reused;
    return absl::OkStatus();
  }
  auto tap = [this, &run](const ir::Node& node, int member, int64_t count) {
    return Tap(run, node, member, count);
  };
  // An If / Loop / Scan runs its subgraphs' sessions, unobserved: only its outputs are compared.
  RETURN_IF_ERROR(RunAlone(
      run.engine->kernel(k), n, io, tap,
      [&run, k](const std::string& a) { return run.engine->subgraph_runner(k, a); },
      run.engine->on_device(k) ? run.engine->device() : nullptr));
  ++run.stats.kernels_alone;
  for (auto [j, ent] : outputs_of_[k]) {
    ASSIGN_OR_RETURN(
        const ir::Tensor* alone_out,
        SourceLayout(n.outputs[j], io.outputs[j].defined() ? &io.outputs[j] : nullptr, converted));
    RETURN_IF_ERROR(Compare(run, ent, outs[j], alone_out));
  }
  Inside alone;
  alone.inputs = source_inputs;
  if (run.taps_kernel == k) alone.taps = std::move(run.taps);
  run.taps.clear();
  run.taps_kernel = -1;
  return CompareInside(run, k, &tapped, &alone);
}

}  // namespace kiln::report
