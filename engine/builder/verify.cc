#include "engine/builder/verify.h"

#include <climits>
#include <deque>
#include <memory>
#include <string>

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

// The probe (CheckOnStaticShapes) runs a kernel only when each tensor it reads or writes holds at
// most this many elements: what it checks does not depend on size, and the bound keeps its cost
// within a few times the build's own passes on the models of tests/models (BERT: see the report
// of issue 28) while every activation of BERT-base or ResNet-50 at batch 1 is under it.
constexpr int64_t kProbeMaxElements = int64_t{1} << 22;

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

// The kernel context of the probe: constant inputs as they are, the others zero-filled at their
// static shapes; outputs freshly allocated.
class ProbeContext final : public kernels::KernelContext {
 public:
  ProbeContext(const ir::Node& n, std::vector<const ir::Tensor*> inputs)
      : node_(n), inputs_(std::move(inputs)), out_(n.num_outputs()) {}
  int num_inputs() const override { return static_cast<int>(inputs_.size()); }
  const ir::Tensor* input(int i) const override {
    return i >= 0 && i < num_inputs() ? inputs_[i] : nullptr;
  }
  int num_outputs() const override { return node_.num_outputs(); }
  bool output_requested(int i) const override {
    return i >= 0 && i < node_.num_outputs() && node_.outputs[i] != nullptr;
  }
  absl::StatusOr<ir::Tensor*> output(int i, DataType dtype, std::vector<int64_t> dims) override {
    if (i < 0 || i >= node_.num_outputs()) {
      return absl::InternalError(
          absl::StrCat(node_.Label(), " kernel asked for output ", i, " of ", node_.num_outputs()));
    }
    const int64_t n = ir::NumElementsOf(dims);
    if (n < 0 || n > kProbeMaxElements * 4) {
      // Never allocate what the probe did not bound: the run would; here it is a wrong shape.
      return absl::InvalidArgumentError(absl::StrCat(node_.Label(), " output ", i, " dims ",
                                                     ir::DimsToString(dims), " are invalid or ",
                                                     "far larger than the graph says"));
    }
    ASSIGN_OR_RETURN(out_[i], ir::Tensor::AllocateUninitialized(dtype, std::move(dims)));
    return &out_[i];
  }
  const std::vector<ir::Tensor>& outputs() const { return out_; }

 private:
  const ir::Node& node_;
  std::vector<const ir::Tensor*> inputs_;
  std::vector<ir::Tensor> out_;
};

bool StaticWithin(const ir::Value& v) {
  if (!v.shape.rank_known || !v.shape.is_static()) return false;
  const int64_t n = ir::NumElementsOf(v.shape.StaticDims());
  return n >= 0 && n <= kProbeMaxElements;
}

// Runs the kernel of `n` once where that checks what the engine's runs will meet: every input a
// constant or a floating value of static shape (zeros stand for it: a floating value's contents
// decide no shape), every output of static shape; integer, boolean and string values that are
// not constants can carry shapes or indices, so a node reading one is not probed. Checks that the
// kernel accepts the inputs and gives each output the dtype and the dims the graph records (the
// memory plan sizes its slots from them; the session refuses another dtype). Returns OK for a
// node it does not probe.
absl::Status CheckOnStaticShapes(const ir::Node& node, const kernels::KernelDef& def) {
  std::deque<ir::Tensor> zeros;
  std::vector<const ir::Tensor*> inputs;
  for (const ir::Value* v : node.inputs) {
    if (v == nullptr) {
      inputs.push_back(nullptr);
    } else if (v->constant && v->constant->defined()) {
      inputs.push_back(&*v->constant);
    } else if (IsFloating(v->dtype) && StaticWithin(*v)) {
      ASSIGN_OR_RETURN(ir::Tensor t, ir::Tensor::Allocate(v->dtype, v->shape.StaticDims()));
      zeros.push_back(std::move(t));
      inputs.push_back(&zeros.back());
    } else {
      return absl::OkStatus();
    }
  }
  for (const ir::Value* v : node.outputs) {
    if (v && !StaticWithin(*v)) return absl::OkStatus();
  }
  // An fp32 GEMM weight is packed only as the blob is written (builder/weights.cc): the graph
  // holds it plain, as the engine's runs in memory read it (with the attribute taken off).
  const ir::Node* probed = &node;
  std::unique_ptr<ir::Node> unpacked;
  const ir::Value* b = node.input(1);
  if (node.has_attr(kernels::kPackedBAttr) && b && b->dtype == DataType::kF32) {
    unpacked = std::make_unique<ir::Node>(node);
    unpacked->attrs.erase(kernels::kPackedBAttr);
    probed = unpacked.get();
  }
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::Kernel> kernel, def.factory(*probed));
  ProbeContext ctx(*probed, std::move(inputs));
  RETURN_IF_ERROR(kernel->Run(ctx));
  for (int k = 0; k < node.num_outputs(); ++k) {
    const ir::Value* v = node.outputs[k];
    if (!v) continue;
    const ir::Tensor& t = ctx.outputs()[k];
    if (!t.defined()) {
      return absl::InternalError(absl::StrCat("output ", k, " '", v->name, "' was not written"));
    }
    if (t.dtype() != v->dtype || t.dims() != v->shape.StaticDims()) {
      return absl::InternalError(absl::StrCat("output ", k, " '", v->name, "' is ",
                                              DataTypeOnnxName(t.dtype()),
                                              ir::DimsToString(t.dims()), " but the graph says ",
                                              DataTypeOnnxName(v->dtype), v->shape.ToString()));
    }
  }
  return absl::OkStatus();
}

// "f32[2,3]" for each static input, "?" for the others.
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
    absl::Status created = def->factory(*n).status();
    if (created.ok()) created = CheckOnStaticShapes(*n, *def);
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
