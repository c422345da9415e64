#include "engine/builder/compile.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/builder/placement.h"
#include "engine/builder/verify.h"
#include "engine/builder/weights.h"
#include "engine/common/status.h"
#include "engine/import/shape_inference.h"
#include "engine/import/shape_inference_control_flow.h"
#include "engine/kernels/registry.h"
#include "engine/passes/conv_chain.h"
#include "engine/passes/layout.h"
#include "engine/passes/precision_lowering.h"
#include "engine/passes/qdq_integer.h"
#include "engine/plan/arena_rules.h"
#include "engine/precision/patterns.h"

namespace kiln::builder {
namespace {

// The kernel context of constant folding: inputs are the nodes' constant values, outputs are
// freshly allocated tensors that become constants.
class FoldContext final : public kernels::KernelContext {
 public:
  explicit FoldContext(const ir::Node& n) : node_(n), out_(n.num_outputs()) {}
  int num_inputs() const override { return node_.num_inputs(); }
  const ir::Tensor* input(int i) const override {
    const ir::Value* v = node_.input(i);
    return v && v->constant ? &*v->constant : nullptr;
  }
  int num_outputs() const override { return node_.num_outputs(); }
  bool output_requested(int i) const override { return node_.outputs[i] != nullptr; }
  absl::StatusOr<ir::Tensor*> output(int i, DataType dtype, std::vector<int64_t> dims) override {
    ASSIGN_OR_RETURN(out_[i], ir::Tensor::Allocate(dtype, std::move(dims)));
    return &out_[i];
  }
  std::vector<ir::Tensor>& outputs() { return out_; }

 private:
  const ir::Node& node_;
  std::vector<ir::Tensor> out_;
};

bool AllInputsConstant(const ir::Node& n) {
  for (const ir::Value* v : n.inputs) {
    if (v && !v->constant) return false;
  }
  return true;
}

// A weight computed from a weight: dequantized, transposed or reshaped. Folded at any size up
// to kWeightGrowth times its inputs' bytes: the fp32 weight is what every run computes anyway,
// and a kernel given it as a constant prepacks it once (a oneDNN convolution takes only constant
// weights; a QDQ model's Conv on a run-time DequantizeLinear output ran the reference kernel).
bool IsWeightTransform(ir::OpType op) {
  switch (op) {
    case ir::OpType::kDequantizeLinear:
    case ir::OpType::kTranspose:
    case ir::OpType::kReshape:
    case ir::OpType::kSqueeze:
    case ir::OpType::kUnsqueeze:
    case ir::OpType::kFlatten:
      return true;
    default:
      return false;
  }
}
constexpr int64_t kWeightGrowth = 4;  // int8 -> fp32

int64_t ConstantInputBytes(const ir::Node& n) {
  int64_t bytes = 0;
  for (const ir::Value* v : n.inputs) {
    if (v && v->constant) bytes += v->constant->num_elements() * DataTypeSize(v->constant->dtype());
  }
  return bytes;
}

// Upper bound of the output bytes of a foldable node, from inferred shapes (unknown = too big).
bool SmallEnough(const ir::Node& n, int64_t limit) {
  if (IsWeightTransform(n.op)) limit = std::max(limit, kWeightGrowth * ConstantInputBytes(n));
  for (const ir::Value* v : n.outputs) {
    if (!v) continue;
    if (!v->shape.is_static()) return false;
    int64_t e = ir::NumElementsOf(v->shape.StaticDims());
    if (e < 0 || e * static_cast<int64_t>(DataTypeSize(v->dtype)) > limit) return false;
  }
  return true;
}

// The source ONNX nodes, as imported (fusion and lowering rewrite the graph).
struct SourceNode {
  std::string name;
  ir::OpType op;
};

// Provenance of every source node a node of the built graph implements; nodes the build
// inserted (conversions) get one entry saying so. `how` overrides the fusion field (folded,
// removed).
std::vector<v1::NodeProvenance> Provenance(const ir::Node& n,
                                           const std::vector<SourceNode>& sources,
                                           const precision::Assignment& assignment,
                                           const passes::LoweringResult& lowering,
                                           const std::string& how) {
  std::vector<v1::NodeProvenance> out;
  if (n.sources.empty()) {
    v1::NodeProvenance p;
    p.set_node_name(n.name);
    p.set_op_type(ir::OpName(n.op));
    p.set_node_index(-1);
    const ir::Value* v = n.outputs.empty() ? nullptr : n.outputs[0];
    auto prec = v ? precision::PrecisionOfDataType(v->dtype) : std::nullopt;
    if (prec) p.set_effective_precision(precision::PrecisionName(*prec));
    p.set_rule(n.op == ir::OpType::kTranspose
                   ? "inserted by the layout pass (into or out of channels-last, NHWC)"
                   : "inserted by precision lowering (conversion at a precision boundary)");
    p.set_fusion(how);
    out.push_back(std::move(p));
    return out;
  }
  for (int s : n.sources) {
    const precision::NodeAssignment& a = assignment.nodes[s];
    v1::NodeProvenance p;
    p.set_node_name(sources[s].name);
    p.set_op_type(ir::OpName(sources[s].op));
    p.set_node_index(s);
    if (a.floating) {
      p.set_assigned_precision(precision::PrecisionName(a.assigned));
      p.set_effective_precision(precision::PrecisionName(lowering.effective[s]));
    }
    std::string rule = a.rule;
    if (!lowering.fallback_reason[s].empty()) {
      rule = absl::StrCat(rule, "; runs higher: ", lowering.fallback_reason[s]);
    }
    p.set_rule(rule);
    p.set_fusion(!how.empty() ? how : n.fusion);
    for (const std::string& m : a.matched) p.add_matched_rules(m);
    out.push_back(std::move(p));
  }
  return out;
}

// What the passes share: the inputs of the compilation, then each pass's result, in pass order.
struct CompileState {
  CompileState(ir::Graph& graph, const precision::Policy& p, const BuildOptions& o, BuildResult& r,
               spdlog::logger& l, kernels::DeviceDescription d)
      : g(graph), policy(p), options(o), result(r), sum(r.summary), log(l), device(std::move(d)) {}

  ir::Graph& g;
  const precision::Policy& policy;
  const BuildOptions& options;
  BuildResult& result;
  BuildSummary& sum;
  spdlog::logger& log;
  const kernels::Registry& reg = kernels::Registry::Default();
  const kernels::DeviceDescription device;  // the build's target

  std::vector<SourceNode> sources;                   // patterns: the nodes as imported
  std::vector<precision::PatternInstance> patterns;  // patterns
  precision::Assignment assignment;                  // assign
  passes::FusionResult fusion;                       // fuse
  passes::LoweringResult lowering;                   // lower
  std::vector<const kernels::KernelDef*> defs;       // select (then layout, chain), by node id
  std::vector<ir::Node*> order;                      // fold: topological order
  std::vector<bool> removed;                         // fold, dce: by node id
  std::vector<v1::NodeProvenance> removed_prov;      // fold, dce
  std::vector<ir::Node*> live;                       // dce (then layout, chain): what runs
  bool channels_last = false;                        // layout: some convolutions run NHWC
  uint64_t required_features = 0;                    // layout, chain, pack
  std::map<int, plan::WeightEncoding> encodings;     // pack
  std::vector<ir::Node*> packed_at_write;            // pack
  Placement placement;                               // place
  Placement subgraph_placement;                      // subgraphs: their device counts
  runtime::MemoryPlan memory;                        // memory
  std::vector<plan::KernelChoice> choices;           // metadata, by node id
  v1::EngineMetadata meta;                           // metadata
};

// The live nodes again after a pass added or removed nodes: the topological order less those
// removed; `defs` and `removed` grow to the new node count.
absl::Status RefreshLive(CompileState& s) {
  s.defs.resize(s.g.nodes().size(), nullptr);
  s.removed.resize(s.g.nodes().size(), false);
  ASSIGN_OR_RETURN(s.order, s.g.TopologicalOrder());
  s.live.clear();
  for (ir::Node* n : s.order) {
    if (!s.removed[n->id]) s.live.push_back(n);
  }
  return absl::OkStatus();
}

// patterns: the recognised pattern instances (LayerNorm, GELU, ...) of the imported graph, which
// policies select and fusion rewrites.
absl::Status FindPatternsPass(CompileState& s) {
  s.sum.source_nodes = static_cast<int>(s.g.nodes().size());
  for (const auto& n : s.g.nodes()) s.sources.push_back({n->name, n->op});
  s.patterns = precision::FindPatterns(s.g);
  for (const auto& p : s.patterns) {
    s.result.patterns.push_back({precision::PatternName(p.kind), p.nodes});
  }
  return absl::OkStatus();
}

// assign: every node's assigned precision from the policy's rules (DESIGN.md §5, §6).
absl::Status AssignPass(CompileState& s) {
  ASSIGN_OR_RETURN(s.assignment,
                   precision::AssignPrecision(s.g, s.policy, s.patterns, s.options.constraints,
                                              s.options.typing, &s.log));
  s.sum.strong_typing = s.assignment.strong_typing;
  s.sum.warnings = s.assignment.warnings;
  s.log.info(
      "policy: {} (base {}, {} rule(s)), constraints {}, typing {}; {} pattern "
      "instance(s)",
      s.policy.name, precision::PrecisionName(s.policy.base), s.policy.rules.size(),
      precision::ConstraintsName(s.options.constraints),
      s.assignment.strong_typing ? "strong (authored mixed precision)" : "weak", s.patterns.size());
  return absl::OkStatus();
}

// fuse: pattern instances and op chains into fused kernels, under the precision guarantee.
absl::Status FusePass(CompileState& s) {
  ASSIGN_OR_RETURN(s.fusion, passes::Fuse(s.g, s.assignment, s.patterns, s.options.fusion, &s.log));
  for (const std::string& f : s.fusion.applied) s.log.info("fusion {}", f);
  s.sum.fusions = static_cast<int>(s.fusion.applied.size());
  s.sum.fusion_refusals = s.fusion.refusals;
  return absl::OkStatus();
}

// Whether the kernel `n` would get is faster than the reference backend's.
bool HasFastKernel(const kernels::Registry& reg, const ir::Node& n) {
  auto def = reg.Find(n);
  return def.ok() && (*def)->isa != kernels::Isa::kRef;
}

// qdq-integer: QDQ MatMul / Conv on the integer GEMM (passes/qdq_integer.h), before folding turns
// their dequantized weights into fp32 constants.
absl::Status QdqIntegerPass(CompileState& s) {
  auto fast_kernel = [&](const ir::Node& n) { return HasFastKernel(s.reg, n); };
  ASSIGN_OR_RETURN(int rewrites, passes::QdqToInteger(s.g, s.options.fusion, s.fusion, fast_kernel,
                                                      &s.log, &s.assignment));
  s.sum.fusions += rewrites;
  return absl::OkStatus();
}

// lower: values retyped to their precision, weights stored in it, conversions at boundaries.
absl::Status LowerPass(CompileState& s) {
  ASSIGN_OR_RETURN(s.lowering, passes::LowerPrecision(s.g, s.assignment, s.fusion,
                                                      s.options.constraints, s.reg, &s.log));
  BuildSummary& sum = s.sum;
  sum.dtype_changes = static_cast<int>(s.lowering.changes.size());
  sum.inserted_conversions = s.lowering.inserted_conversions;
  sum.converted_weights = s.lowering.converted_weights;
  for (const std::string& w : s.lowering.warnings) sum.warnings.push_back(w);
  for (int id = 0; id < sum.source_nodes; ++id) {
    if (!s.assignment.nodes[id].floating) continue;
    switch (s.lowering.effective[id]) {
      case precision::Precision::kFp32:
        ++sum.nodes_fp32;
        break;
      case precision::Precision::kFp16:
        ++sum.nodes_fp16;
        break;
      case precision::Precision::kBf16:
        ++sum.nodes_bf16;
        break;
    }
  }
  if (s.lowering.changes.empty()) return absl::OkStatus();
  s.log.info(
      "precision: {} floating node(s) fp32, {} fp16, {} bf16; {} dtype change(s), "
      "{} conversion(s) inserted, {} weight(s) converted",
      sum.nodes_fp32, sum.nodes_fp16, sum.nodes_bf16, sum.dtype_changes, sum.inserted_conversions,
      sum.converted_weights);
  ASSIGN_OR_RETURN(auto lowered_order, s.g.TopologicalOrder());
  return import::InferTypesAndShapes(s.g, lowered_order);
}

// A control-flow node's captured inputs that are constants by now (outer weights written as
// Constant nodes, folded after the import made them captures) become constants of each of its
// subgraphs, sharing their bytes, and leave the node's inputs: a kernel inside then sees a
// weight it may prepare once (an LSTM packs a constant R once, not at every call).
void InlineConstantCaptures(ir::Node& n) {
  const int captured = static_cast<int>(n.GetInt(ir::kCapturedInputsAttr, 0));
  const int own = n.num_inputs() - captured;
  if (captured <= 0 || own < 0) return;
  std::vector<bool> inline_it(captured, false);
  int kept = 0;
  for (int j = 0; j < captured; ++j) {
    const ir::Value* v = n.inputs[own + j];
    inline_it[j] = v != nullptr && v->constant.has_value();
    kept += inline_it[j] ? 0 : 1;
  }
  if (kept == captured) return;
  for (auto& [key, a] : n.attrs) {
    if (a.type != ir::Attribute::Type::kGraph || a.g == nullptr) continue;
    ir::Graph& sub = *a.g;
    const int formal = static_cast<int>(sub.inputs().size()) - captured;
    std::vector<ir::Value*> inputs(sub.inputs().begin(), sub.inputs().begin() + formal);
    for (int j = 0; j < captured; ++j) {
      ir::Value* in = sub.inputs()[formal + j];
      if (!inline_it[j]) {
        inputs.push_back(in);
        continue;
      }
      const ir::Value* outer = n.inputs[own + j];
      in->constant = outer->constant;
      in->dtype = outer->dtype;
      in->shape = outer->shape;
    }
    sub.inputs() = std::move(inputs);
    sub.RebuildEdges();
  }
  std::vector<ir::Value*> inputs(n.inputs.begin(), n.inputs.begin() + own);
  for (int j = 0; j < captured; ++j) {
    if (!inline_it[j]) inputs.push_back(n.inputs[own + j]);
  }
  n.inputs = std::move(inputs);
  n.attrs[ir::kCapturedInputsAttr] = ir::Attribute::Int(kept);
}

// subgraphs: each subgraph of an If / Loop / Scan node is compiled by this same pipeline (its
// nodes assigned by the same policy, their names qualified by the import: "If_0/then_branch/..."),
// then written as an engine blob the node carries (ir::Attribute::s) and the runtime runs in a
// session of its own. A rule only subgraph nodes match has matched (AssignPrecision looks into
// subgraphs), so no subgraph fails on a rule that matches elsewhere.
absl::Status SubgraphsPass(CompileState& s) {
  precision::Policy policy = s.policy;
  for (precision::Rule& r : policy.rules) r.must_match = false;
  BuildOptions options = s.options;
  options.on_stage = nullptr;
  options.keep_reference = false;
  options.in_memory = false;
  // The model's typing decides: a subgraph of an authored mixed-precision model keeps its types.
  options.typing =
      s.assignment.strong_typing ? precision::Typing::kStrong : precision::Typing::kWeak;
  for (ir::Node* n : s.live) {
    InlineConstantCaptures(*n);
    for (auto& [name, a] : n->attrs) {
      if (a.type != ir::Attribute::Type::kGraph || a.g == nullptr) continue;
      const std::string where = absl::StrCat(n->Label(), " subgraph '", name, "'");
      ir::Graph& sub = *a.g;
      BuildResult r;
      r.summary.model_sha256 = s.sum.model_sha256;
      auto c = Compile(sub, policy, options, r, s.log, nullptr);
      if (!c.ok()) {
        return absl::Status(c.status().code(), absl::StrCat(where, ": ", c.status().message()));
      }
      // Its placement counts in the engine's (before its metadata moves into its blob).
      if (const v1::Device& d = c->meta.device(); d.kind() == "opencl") {
        Placement& in = s.subgraph_placement;
        in.device_kernels += d.device_kernels();
        in.cpu_kernels += d.cpu_kernels();
        in.transfers += d.transfers();
        in.flops += d.flops();
        in.device_flops += d.device_flops();
        in.subgraphs += 1;
      }
      auto blob = plan::WriteEngine(sub, c->live, c->choices, std::move(c->meta),
                                    c->required_features, c->encodings);
      if (!blob.ok()) {
        return absl::Status(blob.status().code(),
                            absl::StrCat(where, ": ", blob.status().message()));
      }
      s.log.info("subgraph {}: {} source node(s) -> {} kernel(s), engine {} bytes", sub.name(),
                 r.summary.source_nodes, r.summary.kernels, blob->size());
      a.s = *std::move(blob);
      a.g.reset();  // compiled: the engine is all that is left to run
      s.required_features |= c->required_features;
      s.sum.subgraphs += 1 + r.summary.subgraphs;
      s.sum.subgraph_kernels += r.summary.kernels + r.summary.subgraph_kernels;
      for (std::string& w : r.summary.warnings) s.sum.warnings.push_back(std::move(w));
      for (auto* from : {&r.nodes, &r.subgraph_nodes}) {
        for (v1::NodeProvenance& p : *from) s.result.subgraph_nodes.push_back(std::move(p));
      }
    }
  }
  if (s.sum.subgraphs > 0) s.g.RebuildEdges();  // captures inlined as constants left the nodes
  return absl::OkStatus();
}

// select: a kernel for every node, all missing ones reported at once. Creating each kernel also
// checks its attributes now, so a bad attribute fails the build rather than the first run.
absl::Status SelectKernelsPass(CompileState& s) {
  s.defs.assign(s.g.nodes().size(), nullptr);
  std::vector<std::string> missing;
  bool any_op_missing = false;
  for (const auto& n : s.g.nodes()) {
    auto def = s.reg.Find(*n);
    if (!def.ok()) {
      missing.emplace_back(def.status().message());
      any_op_missing |= absl::StrContains(def.status().message(), "unsupported op");
      continue;
    }
    s.defs[n->id] = *def;
    auto kernel = (*def)->factory(*n);
    if (!kernel.ok()) return kernel.status();
  }
  if (missing.empty()) return absl::OkStatus();
  // Import only lets through ops of the op list, and every one of them must have a kernel: a
  // missing one is a bug, not an unsupported op.
  if (any_op_missing) {
    return absl::InternalError(
        absl::StrCat("ops of the op list without a kernel: ", absl::StrJoin(missing, "; ")));
  }
  return absl::UnimplementedError(
      absl::StrCat("unsupported dtype: ", missing.size(),
                   " node(s) have no kernel for their dtypes: ", absl::StrJoin(missing, "; ")));
}

// fold: nodes whose inputs are all constant become constants (in topological order, so chains
// fold completely), when their outputs are small enough to store.
absl::Status FoldPass(CompileState& s) {
  ASSIGN_OR_RETURN(s.order, s.g.TopologicalOrder());
  s.removed.assign(s.g.nodes().size(), false);
  std::vector<bool> folded(s.g.values().size(), false);  // by value id: made constant here
  for (ir::Node* n : s.order) {
    // A control-flow node's subgraphs run in sessions only.
    // Sequences and optionals are never constants (an engine stores tensors only).
    if (!AllInputsConstant(*n) || n->HasSubgraphAttributes() || n->TouchesContainers()) continue;
    if (!SmallEnough(*n, s.options.max_folded_bytes)) {
      // Inputs folded just before (a Slice of a weight by Constant nodes' starts and ends) may
      // give the node the static shape inference could not see at import.
      RETURN_IF_ERROR(import::InferTypesAndShapes(s.g, {n}));
      if (!SmallEnough(*n, s.options.max_folded_bytes)) continue;
    }
    bool feeds_output = false;
    for (const ir::Value* v : n->outputs) feeds_output |= v && v->is_graph_output;
    if (feeds_output) continue;  // keep graph outputs computed by a kernel
    ASSIGN_OR_RETURN(auto kernel, s.defs[n->id]->factory(*n));
    FoldContext ctx(*n);
    absl::Status st = kernel->Run(ctx);
    if (!st.ok()) {
      std::string msg(st.message());
      if (msg.rfind("[node", 0) != 0) msg = absl::StrCat(n->Label(), " ", msg);
      return absl::Status(st.code(), absl::StrCat("constant folding: ", msg));
    }
    for (int k = 0; k < n->num_outputs(); ++k) {
      if (ir::Value* v = n->outputs[k]) {
        v->constant = std::move(ctx.outputs()[k]);
        v->shape = ir::Shape::Of(v->constant->dims());
        v->producer = nullptr;
        folded[v->id] = true;
      }
    }
    s.removed[n->id] = true;
    for (auto& p : Provenance(*n, s.sources, s.assignment, s.lowering, "constant-folded")) {
      s.removed_prov.push_back(std::move(p));
    }
    ++s.sum.folded_nodes;
  }
  // A kernel may take only constant inputs (kernels/cpu/dnnl: a convolution's W), which select,
  // run before folding, did not see in values computed by the nodes folded here (a Constant
  // node's W, as in If branches): their readers choose again, as the session does when it loads
  // the engine, so that the build records (and prepacks for) the kernel that runs.
  for (ir::Node* n : s.order) {
    if (s.removed[n->id]) continue;
    bool reads_folded = false;
    for (const ir::Value* v : n->inputs) reads_folded |= v && folded[v->id];
    if (!reads_folded) continue;
    ASSIGN_OR_RETURN(const kernels::KernelDef* def, s.reg.Find(*n));
    if (def == s.defs[n->id]) continue;
    RETURN_IF_ERROR(def->factory(*n).status());
    s.defs[n->id] = def;
  }
  return absl::OkStatus();
}

// dce: nodes none of whose outputs reach a graph output are removed; what is left is the kernel
// graph (`live`), whose shapes are inferred again (folded constants sharpen them downstream:
// Reshape targets, Shape outputs).
absl::Status DeadCodePass(CompileState& s) {
  std::vector<int> uses(s.g.values().size(), 0);
  for (ir::Node* n : s.order) {
    if (s.removed[n->id]) continue;
    for (const ir::Value* v : n->inputs) {
      if (v) ++uses[v->id];
    }
  }
  for (auto it = s.order.rbegin(); it != s.order.rend(); ++it) {
    ir::Node* n = *it;
    if (s.removed[n->id]) continue;
    bool live = false;
    for (const ir::Value* v : n->outputs) live |= v && (v->is_graph_output || uses[v->id] > 0);
    if (live) continue;
    s.removed[n->id] = true;
    for (auto& p : Provenance(*n, s.sources, s.assignment, s.lowering, "removed: output unused")) {
      s.removed_prov.push_back(std::move(p));
    }
    ++s.sum.dead_nodes;
    for (const ir::Value* v : n->inputs) {
      if (v) --uses[v->id];
    }
  }
  s.live.clear();
  for (ir::Node* n : s.order) {
    if (!s.removed[n->id]) s.live.push_back(n);
  }
  if (s.sum.folded_nodes + s.sum.dead_nodes == 0) return absl::OkStatus();
  s.log.info("passes: {} node(s) folded to constants, {} dead node(s) removed", s.sum.folded_nodes,
             s.sum.dead_nodes);
  return import::InferTypesAndShapes(s.g, s.live);
}

// layout: convolutions (and the pools between them) keep their activations channels-last (NHWC)
// where a kernel takes them so (BuildOptions::channels_last); an engine so built needs that
// kernel (the reference ones are NCHW only).
absl::Status LayoutPass(CompileState& s) {
  if (!s.options.channels_last) return absl::OkStatus();
  auto channels_last_kernel = [&](const ir::Node& n) {
    ir::Node copy = n;
    copy.attrs[kernels::kChannelsLastAttr] = ir::Attribute::Int(1);
    return HasFastKernel(s.reg, copy);
  };
  ASSIGN_OR_RETURN(passes::LayoutResult layout,
                   passes::KeepChannelsLast(s.g, s.live, channels_last_kernel, &s.log));
  if (layout.convolutions == 0) return absl::OkStatus();
  s.channels_last = true;
  RETURN_IF_ERROR(RefreshLive(s));
  // The kernels of the inserted transposes and of the channels-last nodes (chosen again: the
  // attribute is what the channels-last kernels take).
  for (ir::Node* n : s.live) {
    const bool channels_last = n->GetInt(kernels::kChannelsLastAttr, 0) != 0;
    if (s.defs[n->id] != nullptr && !channels_last) continue;
    ASSIGN_OR_RETURN(s.defs[n->id], s.reg.Find(*n));
    if (channels_last) {
      s.required_features |=
          kernels::IsaCpuFeatures(s.defs[n->id]->isa) | s.defs[n->id]->cpu_features;
    }
  }
  s.sum.layout_convolutions = layout.convolutions;
  s.sum.layout_transposes = layout.transposes;
  return absl::OkStatus();
}

// chain: inverted-residual blocks of channels-last convolutions as one kernel each (fp32 or fp16
// convolutions: after lowering).
absl::Status ChainPass(CompileState& s) {
  if (!s.channels_last) return absl::OkStatus();
  auto fast_kernel = [&](const ir::Node& n) { return HasFastKernel(s.reg, n); };
  ASSIGN_OR_RETURN(passes::ChainResult chains,
                   passes::ChainConvolutions(s.g, s.live, fast_kernel, s.options.fusion, &s.log));
  if (chains.added.empty()) return absl::OkStatus();
  s.removed.resize(s.g.nodes().size(), false);
  for (const ir::Node* n : chains.removed) s.removed[n->id] = true;
  RETURN_IF_ERROR(RefreshLive(s));
  for (ir::Node* n : chains.added) {
    ASSIGN_OR_RETURN(s.defs[n->id], s.reg.Find(*n));
    s.required_features |=
        kernels::IsaCpuFeatures(s.defs[n->id]->isa) | s.defs[n->id]->cpu_features;
  }
  for (const std::string& f : chains.applied) s.log.info("fusion {}", f);
  s.sum.fusions += static_cast<int>(chains.applied.size());
  // An fp16 chain's interior stays fp32: those members run higher than assigned.
  for (int src : chains.fp32_interior) {
    if (s.lowering.effective[src] == precision::Precision::kFp16) {
      s.lowering.effective[src] = precision::Precision::kFp32;
      --s.sum.nodes_fp16;
      ++s.sum.nodes_fp32;
    }
  }
  return absl::OkStatus();
}

// pack: weights stored as their kernels read them (BuildOptions::pack_weights; weights.h).
absl::Status PackPass(CompileState& s) {
  if (!s.options.pack_weights) return absl::OkStatus();
  // No blob in memory: nothing to pack an fp32 weight into.
  ASSIGN_OR_RETURN(const uint64_t packed_features,
                   PackWeights(s.live, s.defs, s.options.pack_f32_weights && !s.options.in_memory,
                               s.encodings, s.packed_at_write, s.sum, s.log));
  s.required_features |= packed_features;
  if (!s.options.in_memory) {
    ASSIGN_OR_RETURN(s.sum.prepacked_convolutions, PrepackConvolutions(s.g, s.live, s.defs, s.log));
  }
  return absl::OkStatus();
}

// verify: the kernel graph as it will be written runs (verify.h).
absl::Status VerifyPass(CompileState& s) { return VerifyKernelGraph(s.g, s.live, s.defs); }

// memory: the activation arena (liveness reuse) of the kernel graph.
absl::Status MemoryPass(CompileState& s) {
  s.memory = runtime::PlanMemory(s.g, s.live);
  const runtime::MemoryPlan& mp = s.memory;
  if (mp.arena_bytes > plan::kMaxArenaBytes) {
    // Every tensor passed shape inference's size limit, but together they would need an arena
    // no engine loader accepts (plan/arena_rules.h): refuse the build rather than its runs.
    return absl::ResourceExhaustedError(absl::StrCat(
        "the activation arena would need ", mp.arena_bytes, " bytes, over the limit of ",
        plan::kMaxArenaBytes, " (1 TiB): check the model's static shapes"));
  }
  s.sum.kernels = static_cast<int>(s.live.size());
  s.sum.arena_bytes = mp.arena_bytes;
  s.sum.total_activation_bytes = mp.total_activation_bytes;
  s.sum.dynamic_activations = mp.dynamic_values;
  s.log.info("memory plan: arena {} bytes for {} bytes of activations ({} sized at run time)",
             mp.arena_bytes, mp.total_activation_bytes, mp.dynamic_values);
  return absl::OkStatus();
}

// place: each kernel on the build's device or the CPU (placement.h).
absl::Status PlacePass(CompileState& s) {
  ASSIGN_OR_RETURN(s.placement, PlaceKernels(s.g, s.live, s.defs, s.device, s.options.no_fallback,
                                             s.subgraph_placement, s.log));
  return absl::OkStatus();
}

// metadata: each kernel's choice and provenance, and the engine metadata (policy, dtype changes,
// removed nodes, memory plan) the blob and `kiln inspect` carry.
absl::Status MetadataPass(CompileState& s) {
  BuildSummary& sum = s.sum;
  s.choices.resize(s.g.nodes().size());
  for (ir::Node* n : s.live) {
    const kernels::KernelDef* def = s.defs[n->id];
    plan::KernelChoice& c = s.choices[n->id];
    c.backend = kernels::BackendName(def->backend);
    c.isa = kernels::IsaName(def->isa);
    c.dtype = DataTypeName(kernels::KernelKeyType(*n, def->type_source));
    c.provenance = Provenance(*n, s.sources, s.assignment, s.lowering, "");
    if (s.device.opencl) {
      for (v1::NodeProvenance& p : c.provenance) {
        p.set_device(c.backend);
        p.set_fallback_reason(s.placement.fallback[n->id]);
      }
    }
  }
  v1::EngineMetadata& meta = s.meta;
  meta.set_builder_version(KILN_VERSION);
  meta.set_model_sha256(sum.model_sha256);
  meta.set_model_name(s.g.name());
  meta.set_opset(s.g.opset());
  meta.set_ir_version(s.g.ir_version());
  meta.set_policy(s.policy.Canonical());
  meta.set_constraints(precision::ConstraintsName(s.options.constraints));
  meta.set_typing(s.assignment.strong_typing ? "strong" : "weak");
  if (s.device.opencl) FillDevice(s.placement, *meta.mutable_device());
  for (const std::string& w : s.assignment.warnings) meta.add_warnings(w);
  for (const auto& c : s.lowering.changes) {
    v1::DtypeChange* dc = meta.add_dtype_changes();
    dc->set_value(c.value);
    dc->set_from_dtype(static_cast<int32_t>(c.from));
    dc->set_to_dtype(static_cast<int32_t>(c.to));
    dc->set_reason(c.reason);
  }
  meta.set_source_node_count(sum.source_nodes);
  s.result.nodes.resize(sum.source_nodes);
  for (ir::Node* n : s.live) {
    for (const auto& p : s.choices[n->id].provenance) {
      if (p.node_index() >= 0) s.result.nodes[p.node_index()] = p;
    }
  }
  for (const auto& p : s.removed_prov) {
    if (p.node_index() >= 0) s.result.nodes[p.node_index()] = p;
  }
  for (auto& p : s.removed_prov) *meta.add_removed_nodes() = std::move(p);
  std::vector<int> index = plan::TensorIndexOfValues(s.g, s.live);
  auto* mpp = meta.mutable_memory_plan();
  mpp->set_arena_bytes(s.memory.arena_bytes);
  mpp->set_total_activation_bytes(s.memory.total_activation_bytes);
  mpp->set_dynamic_tensors(s.memory.dynamic_values);
  for (const auto& slot : s.memory.slots) {
    if (index[slot.value_id] < 0) continue;
    auto* out = mpp->add_slots();
    out->set_tensor(index[slot.value_id]);
    out->set_offset(slot.offset);
    out->set_bytes(slot.bytes);
  }
  for (const auto& v : s.g.values()) {
    if (v->constant && index[v->id] >= 0) sum.weight_bytes += v->constant->byte_size();
  }
  return absl::OkStatus();
}

// One pass of the pipeline: its name, the build stage it belongs to (the progress the server
// streams) with the fraction of the build done when that stage starts, and its function.
struct CompilePass {
  const char* name;
  const char* stage;
  double fraction;
  absl::Status (*run)(CompileState&);
};

// The pipeline, in order. Each pass's result is the CompileState member of its name.
constexpr CompilePass kPasses[] = {
    {"patterns", "policy", 0.30, FindPatternsPass},
    {"assign", "policy", 0.30, AssignPass},
    {"fuse", "fusion", 0.45, FusePass},
    {"qdq-integer", "fusion", 0.45, QdqIntegerPass},
    {"lower", "lowering", 0.55, LowerPass},
    {"select", "lowering", 0.55, SelectKernelsPass},
    {"fold", "plan", 0.65, FoldPass},
    {"dce", "plan", 0.65, DeadCodePass},
    {"subgraphs", "plan", 0.65, SubgraphsPass},
    {"layout", "plan", 0.65, LayoutPass},
    {"chain", "plan", 0.65, ChainPass},
    {"pack", "plan", 0.65, PackPass},
    {"place", "plan", 0.65, PlacePass},
    {"verify", "plan", 0.65, VerifyPass},
    {"memory", "plan", 0.65, MemoryPass},
    {"metadata", "plan", 0.65, MetadataPass},
};

}  // namespace

absl::StatusOr<Compiled> Compile(ir::Graph& g, const precision::Policy& policy,
                                 const BuildOptions& options, BuildResult& result,
                                 spdlog::logger& log,
                                 const std::function<void(const char*, double)>& on_stage) {
  // A device build: the target resolved on this machine (clear errors for a missing OpenCL, an
  // absent index), tensors NCHW and weights as authored, which the device kernels read.
  ASSIGN_OR_RETURN(kernels::DeviceDescription device, kernels::DescribeDevice(options.device));
  BuildOptions o = options;
  if (device.opencl) {
    o.channels_last = false;
    o.pack_weights = false;
    log.info("device: {} ({}), capabilities: {}", device.Describe(), device.Spec(),
             device.capabilities.empty() ? "none" : absl::StrJoin(device.capabilities, " "));
  }
  CompileState s(g, policy, o, result, log, std::move(device));
  const char* stage = nullptr;
  for (const CompilePass& pass : kPasses) {
    if (on_stage && (stage == nullptr || std::string_view(stage) != pass.stage)) {
      on_stage(pass.stage, pass.fraction);
    }
    stage = pass.stage;
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(pass.run(s));
    log.debug(
        "pass {}/{}: {:.2f} ms", pass.stage, pass.name,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  Compiled c;
  c.live = std::move(s.live);
  c.choices = std::move(s.choices);
  c.meta = std::move(s.meta);
  c.memory = std::move(s.memory);
  c.required_features = s.required_features;
  c.encodings = std::move(s.encodings);
  c.packed_at_write = std::move(s.packed_at_write);
  return c;
}

std::vector<std::string> CompilePassNames() {
  std::vector<std::string> out;
  for (const CompilePass& pass : kPasses) out.push_back(absl::StrCat(pass.stage, "/", pass.name));
  return out;
}

}  // namespace kiln::builder
