// Per-tensor accuracy of an engine against the fp32 reference engine of the same model
// (DESIGN.md §7).
//
// The reference is the model built at fp32, unfused (one reference kernel per ONNX node). For
// each sample:
//   1. the reference runs and keeps the ONNX tensors the engine's kernels need (one copy, as
//      f32), each only until the last kernel needing it has run;
//   2. the engine runs with taps, in step with the reference (runtime::Execution): each kernel
//      as soon as the reference has computed what it needs, so comparisons read tensors still
//      in cache. Each kernel's outputs are compared as they are produced and
//      dropped, so the engine's activations are never held twice. Tensors inside a fused kernel,
//      which the kernel never materialises, are taken from the kernel when it offers them
//      (KernelContext::interior: FusedMatMul's fp32 dot products and bias sum) and otherwise
//      recomputed in side buffers from the kernel's actual inputs (and what it offered) by the
//      reference kernels of its member nodes; each is rounded to its node's effective
//      precision. Taps only read: a tapped run is bit-identical to an untapped one;
//   3. every kernel runs once more alone, fed the reference inputs (converted to its input
//      dtypes): the error it *introduces*, apart from the error it *inherits*. This run follows
//      the kernel's tapped run at once (from the observer): one pass over the kernels. When the
//      tapped run's inputs are bit for bit those reference inputs (no error inherited, as in
//      much of an fp32 engine), the standalone run would repeat the tapped one (kernels are
//      deterministic, and both runs have the same threads): its results are the tapped run's.
// Errors accumulate over samples element by element (ErrorAccumulator).
//
// Inside If / Loop / Scan subgraphs (every depth), each floating tensor a subgraph kernel
// materialises is compared too (runtime::SubgraphObserver), occurrence by occurrence: the
// engine's run of a branch or body at a place (which node, which attribute, which iteration at
// every level) against the reference's run at the same place. The reference's top-level If /
// Loop / Scan node runs before the engine's (its gate), keeping an f32 copy of each occurrence;
// the engine's node then compares its occurrences as they come and drops the copies, and what is
// left (runs only the reference made) is dropped after it. At most `subgraph_budget_bytes` of
// such copies are held per sample in flight: past it, only every 2nd, then 4th, ... occurrence
// of each tensor is kept (the others dropped), so a long loop is compared at evenly spread
// iterations (besides the copies, a short key per subgraph run is held: a loop of millions of
// iterations holds megabytes of them). Runs one side made and the other did not (a condition or
// trip count that came out different) are compared nowhere and counted per subgraph. Subgraph
// tensors have no introduced error (not measured), and tensors kept inside fused subgraph kernels
// are not compared.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/kernels/kernel.h"
#include "engine/plan/engine_blob.h"
#include "engine/report/metrics.h"
#include "engine/runtime/session.h"
#include "kiln/v1/report.pb.h"

namespace kiln::report {

/// The ONNX tensor name of an engine value: its name without the `::f16`-style suffixes that
/// precision lowering gives retyped and converted values, and the `::nhwc` of a value the layout
/// pass keeps channels-last (the report compares such a value transposed back to NCHW).
std::string SourceTensorName(const std::string& value_name);

/// The default bound on the reference occurrences of subgraph tensors held per sample in flight.
inline constexpr int64_t kSubgraphBudgetBytes = int64_t{256} << 20;

/// Compares one engine with the fp32 reference engine of the same model, sample by sample.
class EngineAnalysis {
 public:
  /// `engine` and `reference` must come from the same ONNX model (same graph inputs).
  static absl::StatusOr<std::unique_ptr<EngineAnalysis>> Create(
      std::shared_ptr<const plan::Engine> engine, std::shared_ptr<const plan::Engine> reference,
      Tolerance tolerance);

  /// Wall time of a sample's reference run (step 1) and engine runs (steps 2 and 3), and how
  /// many kernels step 3 ran alone and how many it took from the tapped run (inputs equal).
  struct SampleStats {
    double reference_ms = 0, engine_ms = 0;
    int kernels_alone = 0, kernels_reused = 0;
  };

  /// Adds one sample (tensors in the engine's graph-input order).
  absl::Status AddSample(const std::vector<ir::Tensor>& inputs);

  /// Adds samples, as many at a time as there are threads (each sample's kernels on one
  /// thread), their results merged in sample order: the same report however many run at once.
  /// `on_sample(i, stats)`, when set, is called in sample order as each is merged. An error
  /// names the sample ("sample i: ...").
  absl::Status AddSamples(const std::vector<std::vector<ir::Tensor>>& samples,
                          const std::function<void(size_t, const SampleStats&)>& on_sample = {});

  /// The engine's outputs for the last sample (from the tapped run).
  const std::vector<ir::Tensor>& last_outputs() const { return last_outputs_; }

  /// The per-tensor report so far: tensors in topological order, a verdict per graph output,
  /// the overall verdict and up to `max_offenders` worst offenders ranked by introduced error.
  /// `pattern_of_source[i]`, when given, labels source node i with its pattern instance.
  v1::AccuracyReport Report(int max_offenders = 10,
                            const std::vector<std::string>& pattern_of_source = {}) const;

  /// Source node indices (of tensors that introduce error) worst first: the ranking behind
  /// the offenders and the policy search.
  std::vector<int> RankedSources() const;

  int samples() const { return samples_; }

  /// Whether step 3 takes a kernel's results from the tapped run when its inputs there are the
  /// reference inputs (default). Off, every kernel runs alone: the same report, slower (tests).
  void set_reuse_tapped_runs(bool reuse) { reuse_tapped_runs_ = reuse; }

  /// The most bytes of reference occurrences of subgraph tensors held per sample in flight
  /// (kSubgraphBudgetBytes by default); set before adding samples.
  void set_subgraph_budget_bytes(int64_t bytes) { subgraph_budget_bytes_ = bytes; }

 private:
  // What the comparisons of one tensor gathered: over one sample (Run::sums) or all (Entry).
  struct Sums {
    ErrorAccumulator accumulated, introduced;
    double ref_max = 0;
    bool seen = false;  // compared at least once
    void Merge(const Sums& other);
  };
  // One floating ONNX tensor the engine computes.
  struct Entry {
    std::string name;
    int source = -1;     // source ONNX node index
    int kernel = -1;     // engine kernel (order index) implementing that node
    int provenance = 0;  // index of the node in that kernel's provenance list
    bool inside = false;
    bool is_output = false;
    Sums sums;
  };
  // One floating ONNX tensor a kernel of a subgraph (any depth) materialises.
  struct SubEntry {
    std::string name;
    int subgraph = -1;  // innermost subgraph (index in subgraphs_)
    int top = -1;       // top-level engine kernel (order index) whose subgraphs compute it
    v1::NodeProvenance node;
    std::string kernel_id, kernel_op;
  };
  // What the comparisons of one subgraph tensor gathered (one sample or all).
  struct SubSums {
    ErrorAccumulator accumulated;
    double ref_max = 0;
    int64_t compared = 0, not_compared = 0;
    void Merge(const SubSums& other);
  };
  // One subgraph (If branch, Loop / Scan body) at any depth.
  struct Subgraph {
    std::string label;  // "If_0/then_branch"
    std::string node_name, op_type, attr;
  };
  // How a subgraph's runs compared (one sample or all).
  struct SubRuns {
    int64_t engine = 0, reference = 0, engine_only = 0, reference_only = 0;
    int samples_differing = 0;
    void Merge(const SubRuns& other);
  };
  // One reference run of a subgraph, at one place: the f32 copies kept of its tensors'
  // occurrences (by sub entry, with the occurrence's ordinal), until the engine's run at that
  // place compares them.
  struct Kept {
    ir::Tensor value;
    int64_t ordinal = 0;
  };
  struct RefRun {
    int subgraph = -1;
    bool met = false;  // the engine ran it at the same place
    absl::flat_hash_map<int, Kept> values;
  };
  struct Run;
  // Sees the subgraph runs of one side (engine or reference) of a sample in flight.
  class SubgraphSide final : public runtime::SubgraphObserver {
   public:
    SubgraphSide(EngineAnalysis& a, Run& run, bool reference)
        : a_(a), run_(run), reference_(reference) {}
    void RunStarts(const runtime::SubgraphPath& path) override;
    void NodeRan(const runtime::SubgraphPath& path, const ir::Node& node,
                 const std::vector<const ir::Tensor*>& inputs,
                 const std::vector<const ir::Tensor*>& outputs) override;
    // Forgets the runs in flight (a new sample).
    void Reset() {
      keys_.assign(1, std::string());
      current_.assign(1, nullptr);
    }

   private:
    absl::Status Ran(const runtime::SubgraphPath& path, const ir::Node& node,
                     const std::vector<const ir::Tensor*>& outputs);
    EngineAnalysis& a_;
    Run& run_;
    const bool reference_;
    // Per depth: the key of the place of the run in progress ("|If_0.then_branch#0|..."), and
    // its reference run (null: none there).
    std::vector<std::string> keys_ = {std::string()};
    std::vector<RefRun*> current_ = {nullptr};
  };
  // One sample in flight: its own sessions (kernels keep state between runs), the reference
  // values it holds, the taps of its running kernel, and what its comparisons gathered.
  struct Run {
    std::unique_ptr<runtime::Session> engine, reference;
    absl::flat_hash_map<std::string, ir::Tensor> reference_values;
    absl::flat_hash_map<int, ir::Tensor> taps;  // offered by kernel taps_kernel, by member
    int taps_kernel = -1;
    std::vector<Sums> sums;  // per entry
    std::vector<ir::Tensor> outputs;
    int kernels_without_reference_inputs = 0;
    SampleStats stats;
    // Subgraphs: per nested node of this run's sessions, the (output slot, sub entry) pairs it
    // computes; the observers of both sides; the reference runs in flight by place key, per
    // top-level node name (node-based: RefRun pointers stay valid); the bytes they keep, the
    // keeping stride, and per sub entry the reference occurrences so far; what was gathered.
    absl::flat_hash_map<const ir::Node*, std::vector<std::pair<int, int>>> sub_engine_outputs,
        sub_reference_outputs;
    std::unique_ptr<SubgraphSide> engine_side, reference_side;
    absl::flat_hash_map<std::string, absl::node_hash_map<std::string, RefRun>> in_flight;
    int64_t kept_bytes = 0, stride = 1;
    std::vector<int64_t> ordinal;
    std::vector<SubSums> sub_sums;
    std::vector<SubRuns> sub_runs;
    absl::Status sub_failed;  // the first error of a subgraph observer (observers return none)
  };
  // Inputs and outputs of one standalone kernel run.
  struct Io {
    std::vector<const ir::Tensor*> inputs;
    std::vector<ir::Tensor> outputs;
  };

  EngineAnalysis() = default;
  absl::Status AddRun();
  absl::Status Index();
  // Steps 1 to 3 for one sample, into `run`; then what it gathered added to the entries.
  absl::Status RunSample(Run& run, const std::vector<ir::Tensor>& inputs);
  void MergeRun(Run& run);
  // Steps 2 and 3 for the engine kernel of `n`, just run with `ins` and `outs`.
  absl::Status ObserveEngine(Run& run, const ir::Node& n, const std::vector<const ir::Tensor*>& ins,
                             const std::vector<const ir::Tensor*>& outs);
  // One of the two runs of a fused kernel whose inside tensors are compared: the tapped run (the
  // engine's own inputs) or the standalone one (the reference inputs). What the kernel offered
  // (taps), the kernel's inputs by ONNX name (given) and the members recomputed so far (local).
  struct Inside {
    std::vector<const ir::Tensor*> inputs;
    absl::flat_hash_map<int, ir::Tensor> taps;
    absl::node_hash_map<std::string, ir::Tensor> local;  // node-based: pointers stay valid
    absl::flat_hash_map<std::string, const ir::Tensor*> given;
    std::deque<ir::Tensor> converted;
    bool stopped = false;  // a member needs an input from outside the kernel
  };
  // Step 3 for engine kernel k; its outputs compared together with `outs`, the kernel's outputs
  // in the tapped run, and its inside tensors together with those of `tapped`.
  absl::Status RunIntroduced(Run& run, int k, const std::vector<const ir::Tensor*>& ins,
                             const std::vector<const ir::Tensor*>& outs, Inside& tapped);
  // The reference value of ONNX tensor `name` (this sample's run, or a reference constant).
  const ir::Tensor* Reference(const Run& run, const std::string& name) const;
  // Compares the tapped (`accumulated`) and/or standalone (`introduced`) value of entry `e`
  // (any floating dtype; either may be null) with its reference.
  absl::Status Compare(Run& run, int e, const ir::Tensor* accumulated,
                       const ir::Tensor* introduced);
  // The tensors inside fused kernel `k`, offered by it or recomputed from its inputs by the
  // reference kernels of its members, in the terms of either run (either may be null), each
  // rounded to its node's effective precision and compared with the reference, both together.
  absl::Status CompareInside(Run& run, int k, Inside* tapped, Inside* alone);
  // Runs `kernel` for `node` alone; `subgraph` gives an If / Loop / Scan kernel the runners of
  // its subgraphs (unobserved), by attribute. A kernel of a device (`device` set) gets its
  // inputs uploaded and its outputs on the device, copied back to the host after the run.
  using SubgraphOf = std::function<kernels::SubgraphRunner*(const std::string& attr)>;
  static absl::Status RunAlone(kernels::Kernel& kernel, const ir::Node& node, Io& io,
                               const runtime::InteriorTap& tap,
                               const SubgraphOf& subgraph = nullptr,
                               kernels::DeviceRuntime* device = nullptr);
  // The interior tap of both engine runs: a buffer for a tensor kernel `n` keeps inside, when
  // it is one the report compares (kept in Run::taps until CompareInside takes it).
  float* Tap(Run& run, const ir::Node& n, int member, int64_t count);
  // `t`, the tensor of engine value `v`, in its ONNX tensor's layout (an NCHW copy of a
  // channels-last value, kept in `keep`); an owned f32 copy of a floating tensor.
  static absl::StatusOr<const ir::Tensor*> SourceLayout(const ir::Value* v, const ir::Tensor* t,
                                                        std::deque<ir::Tensor>& keep);
  static absl::StatusOr<ir::Tensor> OwnedCopy(const ir::Tensor& t);
  // Subgraphs (analysis_subgraphs.cc): their tensors and the subgraphs themselves, from the
  // first run's sessions;
  // then, per run, which nested node computes which of them.
  absl::Status IndexSubgraphs();
  void MapSubgraphs(Run& run) const;
  int SubgraphIndex(const ir::Node& node, const std::string& attr) const;
  // Keeps every 2nd, 4th, ... reference occurrence until the kept copies fit the budget.
  void Thin(Run& run) const;
  // After the engine's top-level node `name` ran: the reference runs of its subgraphs the
  // engine did not make, counted, and their copies dropped.
  void EndSubgraphs(Run& run, const std::string& name) const;
  // Report's subgraph part: the tensors of each top-level kernel's subgraphs still to add
  // (those never compared are left out, and counted), added before that kernel's own; then the
  // subgraphs' runs, with notes on what was not compared.
  struct SubReport {
    std::vector<std::vector<int>> pending;  // per top-level kernel: sub entries
    int reported = 0, never_compared = 0;
  };
  SubReport StartSubReport() const;
  void AddSubgraphTensors(int kernel, SubReport& s, v1::AccuracyReport& rep) const;
  void AddSubgraphNotes(const SubReport& s, v1::AccuracyReport& rep) const;

  std::shared_ptr<const plan::Engine> engine_, reference_;
  Tolerance tol_;
  std::vector<std::unique_ptr<Run>> runs_;
  absl::flat_hash_map<const ir::Node*, int> engine_index_;
  // Per engine kernel: (output slot, entry) of materialised outputs; member reference nodes
  // (reference order indices) when it hides tensors inside.
  std::vector<std::vector<std::pair<int, int>>> outputs_of_;
  std::vector<std::vector<int>> members_of_;
  // Per engine kernel: the entries it computes (materialised and inside).
  std::vector<std::vector<int>> entries_of_kernel_;
  // Per engine kernel: entry of the tensor kept inside at each member position, or -1.
  std::vector<std::vector<int>> inside_at_;
  std::vector<Entry> entries_;
  absl::flat_hash_map<std::string, int> entry_of_;
  std::vector<DataType> effective_of_source_;  // per source node, kF32 when unknown
  absl::flat_hash_map<std::string, ir::Tensor> reference_constants_;
  // Per engine kernel: the last reference kernel (order index) whose values it needs; the
  // reference values no later kernel needs. Per ONNX tensor: the last kernel needing it.
  std::vector<int> gate_;
  std::vector<std::vector<std::string>> release_after_;
  absl::flat_hash_map<std::string, int> last_need_;
  std::vector<ir::Tensor> last_outputs_;
  int samples_ = 0;
  int kernels_without_reference_inputs_ = 0;
  bool reuse_tapped_runs_ = true;
  // Subgraphs (empty for a model without If / Loop / Scan).
  std::vector<SubEntry> sub_entries_;
  absl::flat_hash_map<std::string, int> sub_entry_of_;  // ONNX tensor -> sub entry
  std::vector<SubSums> sub_sums_;
  std::vector<Subgraph> subgraphs_;
  absl::flat_hash_map<std::string, int> subgraph_of_;  // label -> subgraph
  std::vector<SubRuns> sub_runs_;
  std::vector<bool> has_subgraphs_;  // per top-level engine kernel
  int sub_inside_fused_ = 0;         // floating subgraph tensors kept inside fused kernels
  int64_t subgraph_budget_bytes_ = kSubgraphBudgetBytes;
  int64_t max_stride_ = 1;  // the largest keeping stride a sample needed
};

}  // namespace kiln::report
