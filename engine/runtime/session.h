// Executes a loaded engine: one kernel per node in execution order, activations in a planned
// arena (liveness reuse) or, for sizes known only at run time (and graph outputs), in buffers
// taken from the session's pool when a tensor is made and given back once nothing holds them,
// so that runs of the same shapes allocate nothing after the first. Inputs with symbolic dims
// are bound per run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/kernels/device.h"
#include "engine/kernels/kernel.h"
#include "engine/plan/engine_blob.h"

namespace kiln::runtime {

/// Called after each node with the node, its input tensors and its output tensors (nullptr for
/// an omitted one; all valid only during the call; an input's bytes may hold an output by then
/// when the session uses its arena). Observers read; they never change what the engine computes.
using NodeObserver =
    std::function<void(const ir::Node&, const std::vector<const ir::Tensor*>& inputs,
                       const std::vector<const ir::Tensor*>& outputs)>;

/// Asked during a node's run for a buffer of `n` floats to receive the output of the node's
/// member at position `member` of its `sources`, a tensor a fused kernel keeps inside
/// (KernelContext::interior); returns nullptr when that tensor is not wanted. The buffer must
/// stay valid until the observer has seen the node.
using InteriorTap = std::function<float*(const ir::Node&, int member, int64_t n)>;

/// One level of subgraph nesting: the If / Loop / Scan `node` (of the enclosing session's
/// engine) whose subgraph attribute `attr` runs, and `occurrence`, how many runs of that
/// subgraph this run of the node made before (0 for an If's branch; the iteration of a Loop;
/// the step of a Scan, counted on over a Scan-8's batch elements).
struct SubgraphFrame {
  const ir::Node* node = nullptr;
  const std::string* attr = nullptr;
  int64_t occurrence = 0;
};

/// Where a subgraph run happens: its frames from the outermost (a node of the top-level engine)
/// to its own (the last).
using SubgraphPath = std::vector<SubgraphFrame>;

/// Sees what runs inside subgraphs (If branches, Loop and Scan bodies), at every depth, for
/// tools that compare runs (the accuracy report pairs an engine's k-th run of a body with its
/// reference's). Like NodeObserver it only reads: an observed run computes the same numbers as
/// an unobserved one. Tensors are valid only during the call (nested sessions reuse their
/// buffers from run to run): copy what is kept.
class SubgraphObserver {
 public:
  virtual ~SubgraphObserver() = default;
  /// A run of the subgraph at `path` starts (before its first node; also for a subgraph with
  /// no node).
  virtual void RunStarts(const SubgraphPath& path) = 0;
  /// After each node of the run at `path`, as NodeObserver.
  virtual void NodeRan(const SubgraphPath& path, const ir::Node& node,
                       const std::vector<const ir::Tensor*>& inputs,
                       const std::vector<const ir::Tensor*>& outputs) = 0;
};

class Session;
class SessionRunner;

/// The buffers of a session's tensors outside the arena, kept from run to run. A buffer is free
/// again when no tensor holds it (a graph output the caller keeps stays taken); a run takes the
/// smallest free one that fits without wasting more than half of it, else a new one. A buffer no
/// run has taken for two runs is freed (the shapes changed).
class BufferPool {
 public:
  /// 64-byte-aligned storage of at least `bytes`; ResourceExhausted when it cannot be had.
  absl::StatusOr<std::shared_ptr<void>> Take(size_t bytes);
  /// Marks the start of a run, freeing the buffers untaken since two runs.
  void NextRun();
  /// Buffers kept and their bytes (for tests).
  size_t buffers() const { return blocks_.size(); }
  size_t bytes() const;

 private:
  struct Block {
    std::shared_ptr<void> p;
    size_t bytes;
    uint64_t run;  // the last run that took it
  };
  std::vector<Block> blocks_;
  uint64_t run_ = 0;
};

/// One run of a Session in progress, kernel by kernel (Session::Start): for callers that
/// interleave the run with other work, such as the accuracy report running the engine in
/// step with its reference. Valid while its Session lives; one at a time per Session.
class Execution {
 public:
  /// Index in execution order of the next kernel to run; engine().order.size() when done.
  size_t next() const { return next_; }
  bool done() const;
  /// Runs the next kernel, then calls `observer` (may be empty) as Session::Run does; the
  /// subgraphs it runs are observed by `subgraphs` (may be null).
  absl::Status Step(const NodeObserver& observer = nullptr, const InteriorTap& tap = nullptr,
                    SubgraphObserver* subgraphs = nullptr);
  /// The outputs in graph-output order, once done.
  absl::StatusOr<std::vector<ir::Tensor>> Outputs() const;

 private:
  friend class Session;
  friend class SessionRunner;
  explicit Execution(Session& session) : session_(session) {}
  /// A host copy of device tensor `device` (a buffer of the session's pool).
  absl::StatusOr<ir::Tensor> HostCopy(const ir::Tensor& device) const;
  Session& session_;
  SubgraphPath path_;               // where this run happens: empty at the top level
  std::vector<ir::Tensor> values_;  // per value id
  /// Per value id: its copy in the other memory this run (the host copy of a device tensor a
  /// CPU kernel reads, or the device copy of a host tensor an OpenCL kernel reads).
  std::vector<ir::Tensor> copies_;
  size_t next_ = 0;
  std::vector<const ir::Tensor*> ins_, outs_;
  std::vector<const ir::Tensor*> kernel_ins_;  // the running kernel's inputs, in its memory
};

/// A ready-to-run engine. Not thread-safe: one Run at a time.
class Session {
 public:
  /// Creates kernels for every node (fails naming the node if one has no kernel). With
  /// `use_arena` false every activation gets its own buffer instead of a planned arena slot, so
  /// an observer may keep (share) any tensor it sees beyond the call, and the inputs it sees are
  /// intact (in the arena an output may lie over an input that died at its node).
  /// Subgraphs (If, Loop, Scan) run in sessions of their own, loaded from their engine blobs
  /// and nested at most ir::kMaxSubgraphDepth deep (`depth`: this session's).
  static absl::StatusOr<std::unique_ptr<Session>> Create(std::shared_ptr<const plan::Engine> engine,
                                                         bool use_arena = true, int depth = 0);
  ~Session();

  /// Runs with `inputs` in graph-input order; returns outputs in graph-output order.
  /// `observer` sees this session's nodes, `subgraphs` (may be null) the nodes of the
  /// subgraphs they run, at every depth.
  absl::StatusOr<std::vector<ir::Tensor>> Run(const std::vector<ir::Tensor>& inputs,
                                              const NodeObserver& observer = nullptr,
                                              const InteriorTap& tap = nullptr,
                                              SubgraphObserver* subgraphs = nullptr);
  /// Starts a run with `inputs` (checked as Run checks them), to be advanced kernel by kernel.
  absl::StatusOr<std::unique_ptr<Execution>> Start(const std::vector<ir::Tensor>& inputs);

  const plan::Engine& engine() const { return *engine_; }
  /// The kernel of the node at `index` in execution order, for running that node alone: between
  /// runs, or from an observer once Run has passed that node (never while it runs).
  kernels::Kernel& kernel(size_t index) { return *kernels_[index]; }
  uint64_t arena_bytes() const { return arena_bytes_; }
  /// The sessions that run the subgraphs of the node at `index` in execution order, with their
  /// attribute names, by name (empty for a node without subgraphs): to look inside them.
  std::vector<std::pair<std::string, const Session*>> subgraph_sessions(size_t index) const;
  /// The runner of subgraph attribute `attr` of the node at `index`, unobserved, or nullptr:
  /// for running that node alone (as kernel(index)), between runs or from an observer.
  kernels::SubgraphRunner* subgraph_runner(size_t index, const std::string& attr);
  /// The buffers kept for tensors outside the arena.
  const BufferPool& pool() const { return pool_; }
  /// Where the kernels' own loops run: "the thread pool", or OpenMP's threads and why.
  std::string LoopThreads() const;
  /// The device the engine's OpenCL kernels run on (null for a CPU engine), and whether the
  /// kernel at `index` in execution order runs there (for running that node alone: its inputs
  /// uploaded, its outputs on the device).
  kernels::DeviceRuntime* device() const { return device_.get(); }
  bool on_device(size_t index) const { return index < on_device_.size() && on_device_[index]; }

 private:
  friend class Execution;
  Session() = default;
  absl::Status CheckInputs(const std::vector<ir::Tensor>& inputs) const;
  /// Opens the device of an engine with OpenCL kernels (fills device_ and on_device_).
  absl::Status OpenDevice();

  std::shared_ptr<const plan::Engine> engine_;
  std::vector<std::unique_ptr<kernels::Kernel>> kernels_;
  /// Per kernel (execution order): the runners of its subgraph attributes, by attribute name.
  std::vector<std::vector<std::pair<std::string, std::unique_ptr<SessionRunner>>>> subgraphs_;
  std::vector<int> last_use_;         // per value id: index in order of its last consumer
  std::vector<int64_t> slot_offset_;  // per value id: arena offset or -1
  std::vector<uint64_t> slot_bytes_;
  uint64_t arena_bytes_ = 0;
  std::shared_ptr<void> arena_;
  BufferPool pool_;
  /// Whether the kernels' loops run on OpenMP teams (kernels::cpu::ScopedOpenMpLoops): some
  /// kernel opens OpenMP regions, and waiting OpenMP threads spin.
  bool openmp_loops_ = false;
  /// An OpenCL engine's device, which kernels run there (by execution index), and the device
  /// copies of the constants they read (by value id; uploaded at their first use, then kept).
  std::shared_ptr<kernels::DeviceRuntime> device_;
  std::vector<bool> on_device_;
  std::vector<ir::Tensor> device_constants_;
};

}  // namespace kiln::runtime
