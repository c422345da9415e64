// FuseIntegerToFloat (qdq_integer.h), the second half of QdqToInteger: integer GEMM chains
// ConvInteger / MatMulInteger [+ Add(int32 B)] + Cast(to fp32) + Mul(fp32 scale) onto one
// ConvIntegerToFloat / MatMulIntegerToFloat whose output stage computes the Add, the Cast and the
// Mul with the separate nodes' bits (engine/ir/ops.def).
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/ref/quant_integer.h"
#include "engine/passes/qdq_integer.h"

namespace kiln::passes {
namespace {

using precision::Precision;

bool IsConstant(const ir::Value* v) {
  return v != nullptr && v->constant.has_value() && !v->is_graph_input;
}

// One kind of chain: the integer op, the fused op, and the axis its B and scale run along.
struct ChainKind {
  ir::OpType fused_op;
  const char* pattern;  // the --no-fuse pattern name and the authored chain's fusion label
  const char* per;      // "channel", "column" (the axis of the stage)
};

constexpr ChainKind kConvChain = {ir::OpType::kConvIntegerToFloat, "conv-integer-to-float",
                                  "channel"};
constexpr ChainKind kMatMulChain = {ir::OpType::kMatMulIntegerToFloat, "matmul-integer-to-float",
                                    "column"};

// The label the qdq-integer rewrite gives its MatMulInteger, Cast and Mul (qdq_integer.cc).
constexpr char kQdqMatMul[] = "qdq-matmul";

class IntegerToFloatFuser {
 public:
  IntegerToFloatFuser(ir::Graph& g, const FusionOptions& o, FusionResult& f,
                      const std::function<bool(const ir::Node&)>& fast_kernel,
                      const std::function<bool(const ir::Node&, const ir::Node&)>& fuse_qdq)
      : g_(g), o_(o), f_(f), fast_kernel_(fast_kernel), fuse_qdq_(fuse_qdq) {}

  absl::StatusOr<int> Run() {
    if (!o_.enabled) return 0;
    g_.RebuildEdges();
    removed_.assign(g_.nodes().size(), false);
    const size_t count = g_.nodes().size();
    int fused = 0;
    for (size_t i = 0; i < count; ++i) {
      ir::Node* n = g_.nodes()[i].get();
      if (removed_[n->id]) continue;
      if (n->op == ir::OpType::kConvInteger) fused += Fuse(n, kConvChain) ? 1 : 0;
      if (n->op == ir::OpType::kMatMulInteger) fused += Fuse(n, kMatMulChain) ? 1 : 0;
    }
    if (fused > 0) g_.RemoveNodes(removed_);
    return fused;
  }

 private:
  // The one consumer of `n`'s only output, of fusion label `label`, when that output is no
  // graph output.
  static ir::Node* SoleConsumer(const ir::Node* n, const std::string& label) {
    if (n->num_outputs() != 1 || n->outputs[0] == nullptr) return nullptr;
    const ir::Value* v = n->outputs[0];
    if (v->is_graph_output || v->consumers.size() != 1) return nullptr;
    ir::Node* c = v->consumers[0];
    return c->fusion == label ? c : nullptr;
  }

  // The other operand of binary `n` reading `v` once, when it has `dtype` and static dims that
  // `is_vector` accepts (one value, or one per index of the stage's axis).
  template <typename IsVector>
  static ir::Value* StageOperand(const ir::Node* n, const ir::Value* v, DataType dtype,
                                 const IsVector& is_vector) {
    if (n->num_inputs() != 2 || n->num_outputs() != 1) return nullptr;
    if ((n->inputs[0] == v) == (n->inputs[1] == v)) return nullptr;
    ir::Value* other = n->inputs[0] == v ? n->inputs[1] : n->inputs[0];
    if (other == nullptr || other->dtype != dtype || !other->shape.is_static() ||
        !is_vector(other->shape.StaticDims())) {
      return nullptr;
    }
    return other;
  }

  // The size of the stage's axis for `integer`'s output of `rank`: a ConvInteger's output
  // channels (W a constant of rank >= 3), a MatMulInteger's columns (B's static last dim, 1 for a
  // 1-D B); -1 for any other form.
  static int64_t StageCount(const ir::Node* integer, const ChainKind& kind, int rank) {
    const ir::Value* w = integer->inputs[1];
    if (w == nullptr) return -1;
    if (&kind == &kConvChain) {
      if (rank < 3 || !IsConstant(w) || w->constant->rank() < 3) return -1;
      return w->constant->dim(0);
    }
    if (!w->shape.rank_known || w->shape.rank() < 1) return -1;
    if (w->shape.rank() == 1) return 1;
    const ir::Dim& last = w->shape.dims.back();
    return last.is_static() ? last.value : -1;
  }

  bool Fuse(ir::Node* integer, const ChainKind& kind) {
    // An authored chain (every node unfused), or the MatMul chain the qdq-integer rewrite made
    // (MatMulInteger, Cast, Mul labelled qdq-matmul) where fuse_qdq_ allows it.
    const std::string label = integer->fusion;
    const bool qdq = &kind == &kMatMulChain && label == kQdqMatMul;
    if ((!label.empty() && !qdq) || integer->num_inputs() < 2 || integer->num_inputs() > 4) {
      return false;
    }
    const ir::Value* acc = integer->outputs.empty() ? nullptr : integer->outputs[0];
    if (acc == nullptr || acc->dtype != DataType::kI32 || !acc->shape.rank_known) return false;
    const int rank = acc->shape.rank();
    const int64_t count = StageCount(integer, kind, rank);
    if (count < 0) return false;
    auto is_vector = [&](const std::vector<int64_t>& dims) {
      return &kind == &kConvChain ? kernels::cpu::ref::IsChannelVector(dims, count, rank)
                                  : kernels::cpu::ref::IsColumnVector(dims, count, rank);
    };
    ir::Node* next = SoleConsumer(integer, label);
    if (next == nullptr) return false;
    ir::Node* add = nullptr;
    ir::Value* bias = nullptr;
    if (next->op == ir::OpType::kAdd) {
      add = next;
      bias = StageOperand(add, acc, DataType::kI32, is_vector);
      if (bias == nullptr || add->outputs[0] == nullptr ||
          add->outputs[0]->dtype != DataType::kI32) {
        return false;
      }
      next = SoleConsumer(add, label);
      if (next == nullptr) return false;
    }
    ir::Node* cast = next;
    if (cast->op != ir::OpType::kCast || cast->num_inputs() != 1 || cast->outputs.empty() ||
        cast->outputs[0] == nullptr || cast->outputs[0]->dtype != DataType::kF32) {
      return false;
    }
    ir::Node* mul = SoleConsumer(cast, label);
    if (mul == nullptr || mul->op != ir::OpType::kMul || mul->outputs[0] == nullptr ||
        mul->outputs[0]->dtype != DataType::kF32) {
      return false;
    }
    ir::Value* scale = StageOperand(mul, cast->outputs[0], DataType::kF32, is_vector);
    if (scale == nullptr || (qdq && !fuse_qdq_(*integer, *mul))) return false;
    std::vector<ir::Node*> members = {integer};
    if (add != nullptr) members.push_back(add);
    members.push_back(cast);
    members.push_back(mul);
    if (FusionExcluded(o_, {members.begin(), members.end()}, kind.fused_op, kind.pattern)) {
      return false;
    }
    ir::Node probe;
    probe.op = kind.fused_op;
    probe.since_version = 1;
    probe.inputs = integer->inputs;
    probe.inputs.resize(4, nullptr);
    probe.inputs.push_back(bias);
    probe.inputs.push_back(scale);
    probe.attrs = integer->attrs;
    if (!fast_kernel_(probe)) return false;  // the separate kernels are as fast

    ir::Node* fused =
        g_.AddNode(kind.fused_op,
                   absl::StrCat(integer->name.empty() ? acc->name : integer->name, "/to_float"));
    removed_.push_back(false);
    fused->since_version = 1;
    fused->inputs = probe.inputs;
    fused->attrs = integer->attrs;
    fused->outputs = {mul->outputs[0]};
    // A qdq-integer MatMul keeps its label: the fused node is that rewrite, its stage inside.
    fused->fusion = qdq ? kQdqMatMul : kind.pattern;
    for (ir::Node* n : members) {
      for (int src : n->sources) {
        if (std::find(fused->sources.begin(), fused->sources.end(), src) == fused->sources.end()) {
          fused->sources.push_back(src);
        }
      }
      removed_[n->id] = true;
      f_.precision.erase(n);  // the qdq-integer rewrite's nodes had one; they go
    }
    // The Cast and the Mul compute in fp32 inside (an fp16 Cast of an int32 sum could overflow):
    // their effective precision is fp32 >= assigned; the integer nodes have none.
    f_.precision[fused] = Precision::kFp32;
    for (const ir::Node* n : {cast, mul}) {
      for (int src : n->sources) f_.effective[src] = Precision::kFp32;
    }
    std::vector<std::string> names;
    for (const ir::Node* n : members) names.push_back(absl::StrCat("'", n->name, "'"));
    f_.applied.push_back(absl::StrCat(
        kind.pattern, ": ", members.size(), " nodes (", absl::StrJoin(names, ", "), ") -> ",
        ir::OpName(kind.fused_op), add != nullptr ? " (+ int32 B)" : "", " at fp32 (integer sum)"));
    return true;
  }

  ir::Graph& g_;
  const FusionOptions& o_;
  FusionResult& f_;
  const std::function<bool(const ir::Node&)>& fast_kernel_;
  const std::function<bool(const ir::Node&, const ir::Node&)>& fuse_qdq_;
  std::vector<bool> removed_;
};

}  // namespace

absl::StatusOr<int> FuseIntegerToFloat(
    ir::Graph& graph, const FusionOptions& options, FusionResult& fusion,
    const std::function<bool(const ir::Node&)>& fast_kernel,
    const std::function<bool(const ir::Node&, const ir::Node&)>& fuse_qdq) {
  return IntegerToFloatFuser(graph, options, fusion, fast_kernel, fuse_qdq).Run();
}

}  // namespace kiln::passes
