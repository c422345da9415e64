// The kernel interface. A kernel is created once per node (attributes parsed and checked then)
// and run many times. It computes its output shapes from the actual inputs and asks the context
// for output buffers, so the same kernel serves static and symbolic shapes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/common/status.h"
#include "engine/ir/graph.h"
#include "engine/ir/tensor.h"

namespace kiln::kernels {

/// A compiled subgraph of the node (If's branches, Loop's and Scan's body), ready to run; the
/// runtime makes one per subgraph attribute of each node and keeps it between runs.
class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  /// Runs the subgraph on `inputs` (its graph inputs in order: formal ones, then captured
  /// ones); returns its outputs in order. The tensors returned own (share) their buffers and
  /// stay valid when the subgraph runs again, so a loop may feed them to its next iteration.
  virtual absl::StatusOr<std::vector<ir::Tensor>> Run(
      const std::vector<const ir::Tensor*>& inputs) = 0;
};

/// What a kernel run sees: its input tensors and a way to get its output tensors.
class KernelContext {
 public:
  virtual ~KernelContext() = default;
  virtual int num_inputs() const = 0;
  /// Input `i`, or nullptr if the optional input is omitted or `i` is past the end.
  virtual const ir::Tensor* input(int i) const = 0;
  virtual int num_outputs() const = 0;
  /// Returns output `i` with the given dtype and dims; the buffer holds whatever it held before
  /// (an arena slot, fresh memory): kernels must write every element. A FusedConv's Y may be
  /// its residual Z's bytes (runtime/memory_planner.h): its kernels read every Z element before
  /// they write the Y element over it.
  virtual absl::StatusOr<ir::Tensor*> output(int i, DataType dtype, std::vector<int64_t> dims) = 0;
  /// False when output `i` is omitted in the graph (optional output nobody asked for).
  virtual bool output_requested(int i) const = 0;
  /// Makes output `i` `value` itself, sharing its storage: a sequence, an empty optional, or
  /// (for an optional or sequence output's element) a dense tensor that owns its storage —
  /// never one over an arena slot or an input's buffer, which later nodes reuse. Its kind must
  /// fit the output's (ir::ValueKind) and its dtype the output's. Contexts that cannot hold
  /// such values (build-time folding, probes) refuse.
  virtual absl::Status set_output(int i, ir::Tensor value) {
    (void)i;
    (void)value;
    return absl::UnimplementedError("sequences and optionals are not run here");
  }
  /// Interior taps, for the accuracy report (DESIGN.md §7): a fused kernel may offer the value
  /// of a tensor it keeps inside, the output of its member at position `member` of the node's
  /// `sources`, as `n` floats. Returns where to write them, or nullptr when nobody asked (plain
  /// runs). A kernel fills the buffer from what it computes anyway and never changes its own
  /// numbers for it.
  virtual float* interior(int member, int64_t n) {
    (void)member;
    (void)n;
    return nullptr;
  }
  /// The runner of the node's subgraph attribute `attr`, or nullptr where subgraphs cannot run
  /// (constant folding).
  virtual SubgraphRunner* subgraph(const std::string& attr) {
    (void)attr;
    return nullptr;
  }
};

/// A context that passes its inputs and outputs on to another: a kernel's view of its own
/// context with some of them replaced (what a subclass overrides).
class ForwardingContext : public KernelContext {
 public:
  explicit ForwardingContext(KernelContext& inner) : inner_(inner) {}
  int num_inputs() const override { return inner_.num_inputs(); }
  const ir::Tensor* input(int i) const override { return inner_.input(i); }
  int num_outputs() const override { return inner_.num_outputs(); }
  absl::StatusOr<ir::Tensor*> output(int i, DataType dtype, std::vector<int64_t> dims) override {
    return inner_.output(i, dtype, std::move(dims));
  }
  bool output_requested(int i) const override { return inner_.output_requested(i); }

 protected:
  KernelContext& inner() const { return inner_; }

 private:
  KernelContext& inner_;
};

/// The attribute of a MatMul / FusedMatMul node whose constant bf16 or fp32 B the build stored
/// packed for the AVX-512 GEMM (cpu/avx512/gemm.h, PackBBf16 / PackBF32): B's logical dims
/// [K, N]. Only the
/// AVX-512 kernels read such a node; the engine then requires their CPU features.
inline constexpr char kPackedBAttr[] = "kiln_packed_b";

/// The attribute of a node that reads X and writes Y channels-last: X is [N, H, W, C] and Y
/// [N, OH, OW, M] (the NCHW tensors transposed; passes/layout.h), and so is a FusedConv's
/// residual Z; W and B are as in ONNX. Conv / FusedConv (the oneDNN kernel), MaxPool and
/// GlobalAveragePool (the AVX-512 kernels) take it; the reference kernels refuse it.
inline constexpr char kChannelsLastAttr[] = "kiln_channels_last";
/// The name suffix of a value holding its ONNX tensor channels-last: `<ONNX name>::nhwc`.
inline constexpr char kChannelsLastSuffix[] = "nhwc";

/// A compiled node.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual absl::Status Run(KernelContext& ctx) = 0;
};

/// Signature of a kernel factory: checks the node's attributes and builds the kernel.
using KernelFactory = absl::StatusOr<std::unique_ptr<Kernel>> (*)(const ir::Node& node);

/// A kernel that is a plain function of the node and the context: for ops whose attributes are
/// cheap to read on each run. `Fn` is `absl::Status(const ir::Node&, KernelContext&)`.
template <absl::Status (*Fn)(const ir::Node&, KernelContext&)>
class FunctionKernel final : public Kernel {
 public:
  explicit FunctionKernel(const ir::Node& node) : node_(node) {}
  absl::Status Run(KernelContext& ctx) override { return Fn(node_, ctx); }
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    return std::unique_ptr<Kernel>(new FunctionKernel(node));
  }

 private:
  const ir::Node& node_;
};

/// A factory for a `FunctionKernel<Fn>` that validates the node's attributes with `Check` first,
/// so bad attributes fail at build time rather than on the first run.
template <absl::Status (*Check)(const ir::Node&),
          absl::Status (*Fn)(const ir::Node&, KernelContext&)>
absl::StatusOr<std::unique_ptr<Kernel>> CheckedFactory(const ir::Node& node) {
  RETURN_IF_ERROR(Check(node));
  return FunctionKernel<Fn>::Create(node);
}

}  // namespace kiln::kernels
