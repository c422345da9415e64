#include "engine/builder/verify.h"

#include <algorithm>
#include <climits>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/import/op_schemas.h"
#include "engine/kernels/kernel.h"

namespace kiln::builder {
namespace {

// The probe (CheckOnStaticShapes) reads no non-constant input larger than this: it stands for
// one by a shared zero-filled buffer, allocated at build time.
constexpr int64_t kProbeMaxBytes = int64_t{1} << 26;

std::string Internal(const ir::Node& n, const std::string& why) {
  return absl::StrCat("kernel graph check: ", n.Label(), " ", why);
}

// A node the build made or changed (a fusion, an inserted conversion or transpose, a weight
// stored for its kernel, a channels-last layout): a failure there is Kiln's, not the model's.
bool MadeByKiln(const ir::Node& n) {
  if (n.sources.size() != 1 || !n.fusion.empty()) return true;
  for (const auto& [key, attr] : n.attrs) {
    if (absl::StartsWith(key, "kiln_")) return true;
  }
  return false;
}

// The input slots `n` cannot run without: the ONNX schema's required inputs (the first
// min_inputs, every input of a variadic op; Loop's M and cond and Scan-8's sequence_lens are
// optional inputs ahead of required ones), and for Kiln's own ops what their kernels read
// unconditionally (engine/kernels/cpu/ref/fused.cc, cpu/avx512/conv_chain_ops.cc).
std::vector<int> RequiredInputs(const ir::Node& n) {
  auto range = [](int from, int to) {
    std::vector<int> r;
    for (int i = from; i < to; ++i) r.push_back(i);
    return r;
  };
  switch (n.op) {
    case ir::OpType::kFusedMatMul:  // A, B [, bias]
    case ir::OpType::kFusedConv:    // X, W [, B, Z]
      return {0, 1};
    case ir::OpType::kAddLayerNorm:  // A, B, scale [, bias]
      return {0, 1, 2};
    case ir::OpType::kFusedConvChain:  // X, the depthwise W1 (its `supports` checks the rest)
      return {0, 3};
    case ir::OpType::kLoop:
      return range(2, n.num_inputs());
    case ir::OpType::kScan:
      return range(n.since_version < 9 ? 1 : 0, n.num_inputs());
    default:
      break;
  }
  const auto ver = import::ResolveOpVersion(n.op, n.since_version);
  if (!ver) return {};
  if (ver->max_inputs == INT_MAX) return range(0, std::max(ver->min_inputs, n.num_inputs()));
  return range(0, ver->min_inputs);
}

// The kernel context of the probe: the inputs it is given; the first output the kernel asks for
// is recorded and refused, which ends the run before the kernel computes anything.
class ProbeContext final : public kernels::KernelContext {
 public:
  ProbeContext(const ir::Node& n, std::vector<const ir::Tensor*> inputs)
      : node_(n), inputs_(std::move(inputs)) {}
  int num_inputs() const override { return static_cast<int>(inputs_.size()); }
  const ir::Tensor* input(int i) const override {
    return i >= 0 && i < num_inputs() ? inputs_[i] : nullptr;
  }
  int num_outputs() const override { return node_.num_outputs(); }
  bool output_requested(int i) const override {
    return i >= 0 && i < node_.num_outputs() && node_.outputs[i] != nullptr;
  }
  absl::StatusOr<ir::Tensor*> output(int i, DataType dtype, std::vector<int64_t> dims) override {
    if (!asked_) {
      asked_ = true;
      index_ = i;
      dtype_ = dtype;
      dims_ = std::move(dims);
    }
    return absl::CancelledError("kernel graph check: the kernel's checks passed");
  }
  /// Whether the kernel asked for an output; which one, with what dtype and dims.
  bool asked() const { return asked_; }
  int index() const { return index_; }
  DataType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }

 private:
  const ir::Node& node_;
  std::vector<const ir::Tensor*> inputs_;
  bool asked_ = false;
  int index_ = -1;
  DataType dtype_ = DataType::kUndefined;
  std::vector<int64_t> dims_;
};

// Zero-filled memory that non-constant inputs of the probe borrow (kernels never write inputs).
class Zeros {
 public:
  absl::StatusOr<const ir::Tensor*> Of(DataType dtype, std::vector<int64_t> dims) {
    const size_t bytes = static_cast<size_t>(ir::NumElementsOf(dims)) * DataTypeSize(dtype);
    if (bytes > buffer_.byte_size()) {
      ASSIGN_OR_RETURN(buffer_, ir::Tensor::Allocate(DataType::kU8, {static_cast<int64_t>(bytes)}));
    }
    views_.push_back(ir::Tensor::Borrow(dtype, std::move(dims), buffer_.data<uint8_t>(), nullptr));
    return &views_.back();
  }
  void Clear() { views_.clear(); }

 private:
  ir::Tensor buffer_;
  std::deque<ir::Tensor> views_;
};

// Floating inputs whose values set an output shape or are checked as parameters, not computed
// on: Resize's roi and scales, Upsample's scales, OneHot's depth, Dropout's ratio, Range's
// operands, the quantization scales. Zeros cannot stand for them.
bool ParameterInput(const ir::Node& n, int i) {
  switch (n.op) {
    case ir::OpType::kResize:
    case ir::OpType::kUpsample:
    case ir::OpType::kOneHot:
    case ir::OpType::kDropout:
    case ir::OpType::kQuantizeLinear:
      return i >= 1;
    case ir::OpType::kRange:
      return true;
    default:
      return false;
  }
}

// Runs the kernel of `node` on the node's static input shapes up to its first output request:
// every check a kernel makes before it allocates an output (shapes, dtypes, attributes against
// the inputs, the output dims it derives) runs as in the engine, and nothing is computed. Then
// checks that the output has the dtype and the dims the graph records (the memory plan sizes its
// slot from them; the session refuses another dtype). A node is probed when each input is a
// constant or a floating value of static shape (zeros stand for it: a floating value's contents
// decide no shape, but for ParameterInput) and each output has a static shape; integer, boolean
// and string values that are not constants can carry shapes or indices, so a node reading one is
// not probed, nor If/Loop/Scan (their bodies are compiled and checked as graphs of their own).
// Checks made after a kernel's first output request (few: on values, as Gather's index bounds)
// are left to the run. Returns OK for a node it does not probe.
absl::Status CheckOnStaticShapes(const ir::Node& node, const kernels::KernelDef& def,
                                 kernels::Kernel& created, Zeros& zeros) {
  if (ir::HasSubgraphs(node.op) || node.TouchesContainers()) return absl::OkStatus();
  for (const ir::Value* v : node.outputs) {
    if (v && (!v->shape.rank_known || !v->shape.is_static())) return absl::OkStatus();
  }
  zeros.Clear();
  std::vector<const ir::Tensor*> inputs;
  for (int i = 0; i < node.num_inputs(); ++i) {
    const ir::Value* v = node.inputs[i];
    if (v == nullptr) {
      inputs.push_back(nullptr);
      continue;
    }
    if (v->constant && v->constant->defined()) {
      inputs.push_back(&*v->constant);
      continue;
    }
    if (!IsFloating(v->dtype) || ParameterInput(node, i) || !v->shape.rank_known ||
        !v->shape.is_static()) {
      return absl::OkStatus();
    }
    const int64_t n = ir::NumElementsOf(v->shape.StaticDims());
    if (n < 0 || n > kProbeMaxBytes / static_cast<int64_t>(DataTypeSize(v->dtype))) {
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(const ir::Tensor* t, zeros.Of(v->dtype, v->shape.StaticDims()));
    inputs.push_back(t);
  }
  // An fp32 GEMM weight is packed only as the blob is written (builder/weights.cc): the graph
  // holds it plain, as the engine's runs in memory read it (with the attribute taken off).
  const ir::Node* probed = &node;
  kernels::Kernel* kernel = &created;
  std::unique_ptr<ir::Node> unpacked;
  std::unique_ptr<kernels::Kernel> unpacked_kernel;
  const ir::Value* b = node.input(1);
  if (node.has_attr(kernels::kPackedBAttr) && b && b->dtype == DataType::kF32) {
    unpacked = std::make_unique<ir::Node>(node);
    unpacked->attrs.erase(kernels::kPackedBAttr);
    probed = unpacked.get();
    ASSIGN_OR_RETURN(unpacked_kernel, def.factory(*probed));
    kernel = unpacked_kernel.get();
  }
  ProbeContext ctx(*probed, std::move(inputs));
  absl::Status run = kernel->Run(ctx);
  if (!ctx.asked()) {
    RETURN_IF_ERROR(run);
    for (int k = 0; k < node.num_outputs(); ++k) {
      if (node.outputs[k] != nullptr) {
        return absl::InternalError(absl::StrCat("output ", k, " '", node.outputs[k]->name,
                                                "' was not written (the kernel asked for none)"));
      }
    }
    return absl::OkStatus();
  }
  const int k = ctx.index();
  const ir::Value* v = k >= 0 && k < node.num_outputs() ? node.outputs[k] : nullptr;
  if (k < 0 || k >= node.num_outputs()) {
    return absl::InternalError(
        absl::StrCat("the kernel asked for output ", k, " of ", node.num_outputs()));
  }
  if (v != nullptr && (ctx.dtype() != v->dtype || ctx.dims() != v->shape.StaticDims())) {
    return absl::InternalError(absl::StrCat("output ", k, " '", v->name, "' is ",
                                            DataTypeOnnxName(ctx.dtype()),
                                            ir::DimsToString(ctx.dims()), " but the graph says ",
                                            DataTypeOnnxName(v->dtype), v->shape.ToString()));
  }
  return absl::OkStatus();
}

// "(float[2,3], -, float16[?,4])": each input's dtype and shape, "-" for an omitted one.
std::string InputShapes(const ir::Node& n) {
  std::vector<std::string> s;
  for (const ir::Value* v : n.inputs) {
    s.push_back(v ? absl::StrCat(DataTypeOnnxName(v->dtype), v->shape.ToString()) : "-");
  }
  return absl::StrCat("(", absl::StrJoin(s, ", "), ")");
}

}  // namespace

absl::Status VerifyKernelGraph(const ir::Graph& graph, const std::vector<ir::Node*>& live,
                               const std::vector<const kernels::KernelDef*>& defs) {
  Zeros zeros;
  absl::flat_hash_set<const ir::Node*> in_graph;
  for (const auto& n : graph.nodes()) in_graph.insert(n.get());
  absl::flat_hash_set<const ir::Value*> graph_inputs(graph.inputs().begin(), graph.inputs().end());
  // Values computed so far, by the live node computing each; and every live node's position.
  absl::flat_hash_map<const ir::Value*, const ir::Node*> computed;
  absl::flat_hash_map<const ir::Node*, int> position;
  for (int i = 0; i < static_cast<int>(live.size()); ++i) {
    if (live[i] == nullptr || !in_graph.contains(live[i])) {
      return absl::InternalError(
          absl::StrCat("kernel graph check: kernel ", i, " is not a node of the graph"));
    }
    if (!position.emplace(live[i], i).second) {
      return absl::InternalError(Internal(*live[i], "is in the kernel list twice"));
    }
  }
  auto available = [&](const ir::Value* v) {
    return graph_inputs.contains(v) || (v->constant && v->constant->defined()) ||
           computed.contains(v);
  };
  for (const ir::Node* n : live) {
    // Inputs: the required ones present, each one computable when the node runs.
    for (int k : RequiredInputs(*n)) {
      if (n->input(k) != nullptr) continue;
      if (!MadeByKiln(*n)) {
        return absl::InvalidArgumentError(absl::StrCat(n->Label(), " input ", k, " is required by ",
                                                       ir::OpName(n->op), "-", n->since_version,
                                                       " but the model leaves it out"));
      }
      return absl::InternalError(
          Internal(*n, absl::StrCat("input ", k, " is required but missing")));
    }
    for (int k = 0; k < n->num_inputs(); ++k) {
      const ir::Value* v = n->inputs[k];
      if (v == nullptr || available(v)) continue;
      std::string why;
      const ir::Node* p = v->producer;
      if (p != nullptr && in_graph.contains(p) && position.contains(p)) {
        why = absl::StrCat("is computed later, by ", p->Label());
      } else if (p != nullptr && in_graph.contains(p)) {
        why = absl::StrCat("is computed by ", p->Label(),
                           ", which is not in the engine (removed or folded without leaving a "
                           "constant)");
      } else {
        why = "is no graph input, no constant and computed by no node of the engine";
      }
      return absl::InternalError(Internal(*n, absl::StrCat("input ", k, " '", v->name, "' ", why)));
    }
    // The kernel: chosen, for this op and dtype, and created from the node as it is now.
    const kernels::KernelDef* def =
        n->id >= 0 && n->id < static_cast<int>(defs.size()) ? defs[n->id] : nullptr;
    if (def == nullptr) return absl::InternalError(Internal(*n, "has no kernel"));
    const DataType key = kernels::KernelKeyType(*n, def->type_source);
    if (def->op != n->op ||
        std::find(def->dtypes.begin(), def->dtypes.end(), key) == def->dtypes.end()) {
      std::vector<std::string> takes;
      for (DataType t : def->dtypes) takes.push_back(DataTypeOnnxName(t));
      return absl::InternalError(Internal(
          *n, absl::StrCat("has the ", kernels::IsaName(def->isa), " kernel of ",
                           ir::OpName(def->op), " for ", absl::StrJoin(takes, ", "),
                           ", but its dtype is ", DataTypeOnnxName(key), " (no kernel for it)")));
    }
    if (def->supports != nullptr && !def->supports(*n)) {
      return absl::InternalError(
          Internal(*n, absl::StrCat("has the ", kernels::IsaName(def->isa),
                                    " kernel, which does not support it as it is now")));
    }
    auto kernel = def->factory(*n);
    absl::Status created = kernel.status();
    if (created.ok()) created = CheckOnStaticShapes(*n, *def, **kernel, zeros);
    if (!created.ok()) {
      std::string msg(created.message());
      if (!absl::StartsWith(msg, "[node")) msg = absl::StrCat(n->Label(), " ", msg);
      msg = absl::StrCat("kernel graph check: ", msg, " (inputs ", InputShapes(*n), ")");
      return absl::Status(MadeByKiln(*n) ? absl::StatusCode::kInternal : created.code(), msg);
    }
    // Outputs: each computed once.
    for (const ir::Value* v : n->outputs) {
      if (v == nullptr) continue;
      auto [it, fresh] = computed.emplace(v, n);
      if (!fresh) {
        return absl::InternalError(
            Internal(*n, absl::StrCat("computes '", v->name, "', which ", it->second->Label(),
                                      " computes too")));
      }
      if (graph_inputs.contains(v) || (v->constant && v->constant->defined())) {
        return absl::InternalError(
            Internal(*n, absl::StrCat("computes '", v->name, "', which is a ",
                                      graph_inputs.contains(v) ? "graph input" : "constant")));
      }
    }
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const ir::Value* v = graph.outputs()[i];
    if (v == nullptr || !available(v)) {
      return absl::InternalError(absl::StrCat("kernel graph check: graph output #", i, " '",
                                              v ? v->name : "", "' is computed by no ",
                                              "kernel and is no graph input or constant"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::builder
