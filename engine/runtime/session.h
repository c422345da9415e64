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
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
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

class Session;

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
  /// Runs the next kernel, then calls `observer` (may be empty) as Session::Run does.
  absl::Status Step(const NodeObserver& observer = nullptr, const InteriorTap& tap = nullptr);
  /// The outputs in graph-output order, once done.
  absl::StatusOr<std::vector<ir::Tensor>> Outputs() const;

 private:
  friend class Session;
  explicit Execution(Session& session) : session_(session) {}
  Session& session_;
  std::vector<ir::Tensor> values_;  // per value id
  size_t next_ = 0;
  std::vector<const ir::Tensor*> ins_, outs_;
};

/// A ready-to-run engine. Not thread-safe: one Run at a time.
class Session {
 public:
  /// Creates kernels for every node (fails naming the node if one has no kernel). With
  /// `use_arena` false every activation gets its own buffer instead of a planned arena slot, so
  /// an observer may keep (share) any tensor it sees beyond the call, and the inputs it sees are
  /// intact (in the arena an output may lie over an input that died at its node).
  static absl::StatusOr<std::unique_ptr<Session>> Create(std::shared_ptr<const plan::Engine> engine,
                                                         bool use_arena = true);

  /// Runs with `inputs` in graph-input order; returns outputs in graph-output order.
  absl::StatusOr<std::vector<ir::Tensor>> Run(const std::vector<ir::Tensor>& inputs,
                                              const NodeObserver& observer = nullptr,
                                              const InteriorTap& tap = nullptr);
  /// Starts a run with `inputs` (checked as Run checks them), to be advanced kernel by kernel.
  absl::StatusOr<std::unique_ptr<Execution>> Start(const std::vector<ir::Tensor>& inputs);

  const plan::Engine& engine() const { return *engine_; }
  /// The kernel of the node at `index` in execution order, for running that node alone: between
  /// runs, or from an observer once Run has passed that node (never while it runs).
  kernels::Kernel& kernel(size_t index) { return *kernels_[index]; }
  uint64_t arena_bytes() const { return arena_bytes_; }
  /// The buffers kept for tensors outside the arena.
  const BufferPool& pool() const { return pool_; }

 private:
  friend class Execution;
  Session() = default;
  absl::Status CheckInputs(const std::vector<ir::Tensor>& inputs) const;

  std::shared_ptr<const plan::Engine> engine_;
  std::vector<std::unique_ptr<kernels::Kernel>> kernels_;
  std::vector<int> last_use_;         // per value id: index in order of its last consumer
  std::vector<int64_t> slot_offset_;  // per value id: arena offset or -1
  std::vector<uint64_t> slot_bytes_;
  uint64_t arena_bytes_ = 0;
  std::shared_ptr<void> arena_;
  BufferPool pool_;
};

}  // namespace kiln::runtime
