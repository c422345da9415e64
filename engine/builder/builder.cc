#include "engine/builder/builder.h"

#include <chrono>
#include <map>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/common/sha256.h"
#include "engine/common/status.h"
#include "engine/import/shape_inference.h"
#include "engine/kernels/cpu/avx512/gemm.h"
#include "engine/kernels/cpu/dnnl/register.h"
#include "engine/kernels/registry.h"
#include "engine/passes/conv_chain.h"
#include "engine/passes/layout.h"
#include "engine/passes/precision_lowering.h"
#include "engine/plan/arena_rules.h"
#include "engine/plan/engine_blob.h"
#include "engine/precision/patterns.h"
#include "engine/precision/policy.h"
#include "engine/runtime/memory_planner.h"
#include "spdlog/sinks/null_sink.h"

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

// Upper bound of the output bytes of a foldable node, from inferred shapes (unknown = too big).
bool SmallEnough(const ir::Node& n, int64_t limit) {
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

// A compiled graph: its live nodes in execution order, the kernel chosen for each, and the
// engine metadata but for what the blob writer fills (tensors, kernels, inputs, outputs).
struct Compiled {
  std::vector<ir::Node*> live;
  std::vector<plan::KernelChoice> choices;
  v1::EngineMetadata meta;
  runtime::MemoryPlan memory;      // by value id (the metadata's slots use blob tensor indices)
  uint64_t required_features = 0;  // CPU features the engine cannot run without
  // fp32 GEMM weights packed only as the blob is written (PackWeights), by value id; and their
  // nodes, which run the plain weight in memory.
  std::map<int, plan::WeightEncoding> encodings;
  std::vector<ir::Node*> packed_at_write;
};

// Stores the constant bf16, fp16 or fp32 B of each MatMul / FusedMatMul / Gemm (B as Gemm reads
// it, transB applied) that runs on the AVX-512 GEMM packed as that GEMM reads it (kernel.h,
// kPackedBAttr), so no run gathers a weight's column strips out of row-major memory again: that was
// ~16% of a BERT-base bf16 run and ~20% of an fp32 GEMM at its shapes (an fp16 strip is still
// widened to fp32 per run, but from contiguous memory). Only a B read by that node alone; a bf16
// one only when free of subnormal values (it then always takes the dot-product path, whose numbers
// packing does not change; fp32 and fp16 B feed the fp32 kernels, packed or not, the same values).
// An fp32 weight, shared with the import (and so with the report's reference), is packed only as
// the blob is written (`encodings`): the graph keeps it plain, and the node's kPackedBAttr is
// taken off again for runs in memory. Returns the CPU features the packed engine requires.
absl::StatusOr<uint64_t> PackWeights(const std::vector<ir::Node*>& live,
                                     const std::vector<const kernels::KernelDef*>& defs, bool f32,
                                     std::map<int, plan::WeightEncoding>& encodings,
                                     std::vector<ir::Node*>& packed_at_write, BuildSummary& sum,
                                     spdlog::logger& logger) {
  uint64_t required = 0;
  int fp32 = 0, fp16 = 0;
  for (ir::Node* n : live) {
    if (n->op != ir::OpType::kMatMul && n->op != ir::OpType::kFusedMatMul &&
        n->op != ir::OpType::kGemm) {
      continue;
    }
    const kernels::KernelDef* def = defs[n->id];
    ir::Value* b = n->inputs.size() > 1 ? n->inputs[1] : nullptr;
    const DataType t = b ? b->dtype : DataType::kUndefined;
    if (!def || def->isa != kernels::Isa::kAvx512 || !b || !b->constant ||
        (t != DataType::kBF16 && t != DataType::kF32 && t != DataType::kF16) ||
        n->inputs[0] == nullptr || n->inputs[0]->dtype != t || b->constant->rank() != 2 ||
        b->consumers.size() != 1 || b->is_graph_output || b->is_graph_input ||
        (t == DataType::kF32 && !f32)) {
      continue;
    }
    const ir::Tensor& w = *b->constant;
    if (t == DataType::kBF16 &&
        !kernels::cpu::avx512::Bf16DotPathAllowed(w.data<uint16_t>(), w.num_elements())) {
      continue;
    }
    // Gemm's transB reads B [N, K]: element (i, j) of the logical [K, N] at j * K + i.
    const bool trans = n->op == ir::OpType::kGemm && n->GetInt("transB", 0) != 0;
    const int64_t k = trans ? w.dim(1) : w.dim(0), nn = trans ? w.dim(0) : w.dim(1);
    const int64_t rs = trans ? 1 : nn, cs = trans ? k : 1;
    const int64_t strips = (nn + 63) / 64;
    if (t == DataType::kF32) {
      const int64_t strip = kernels::cpu::avx512::PackedBStripElemsF32(k);
      plan::WeightEncoding e;
      e.dims = {strips, strip};
      e.bytes = static_cast<uint64_t>(strips * strip) * sizeof(float);
      e.write = [w, k, nn, rs, cs](char* dst) {
        kernels::cpu::avx512::PackBF32Strided(w.data<float>(), k, nn, rs, cs,
                                              reinterpret_cast<float*>(dst));
      };
      encodings[b->id] = std::move(e);
      packed_at_write.push_back(n);
      ++fp32;
    } else {
      const bool half = t == DataType::kF16;
      const int64_t strip = half ? kernels::cpu::avx512::PackedBStripElemsF32(k)
                                 : kernels::cpu::avx512::PackedBStripElems(k);
      ASSIGN_OR_RETURN(ir::Tensor packed, ir::Tensor::AllocateUninitialized(t, {strips, strip}));
      if (half) {
        kernels::cpu::avx512::PackBHalfStrided(w.data<uint16_t>(), k, nn, rs, cs,
                                               packed.data<uint16_t>());
        ++fp16;
      } else {
        kernels::cpu::avx512::PackBBf16Strided(w.data<uint16_t>(), k, nn, rs, cs,
                                               packed.data<uint16_t>());
      }
      b->constant = std::move(packed);
      b->shape = ir::Shape::Of({strips, strip});
    }
    n->attrs[kernels::kPackedBAttr] = ir::Attribute::Ints({k, nn});
    required |= kernels::IsaCpuFeatures(def->isa) | def->cpu_features;
    ++sum.packed_weights;
  }
  if (sum.packed_weights > 0) {
    logger.info(
        "weights: {} GEMM weight(s) stored packed for the AVX-512 GEMM ({} bf16, {} fp16, {} fp32)",
        sum.packed_weights, sum.packed_weights - fp32 - fp16, fp16, fp32);
  }
  return required;
}

// Stores the W of each convolution the oneDNN kernel runs also in the layout its kernel chooses
// on this machine (kernels/cpu/dnnl/register.h, PrepackConvWeights: oneDNN's blocked layout, or
// the GEMM path's strips), as a constant the node reads beside W: a run whose kernel chooses that
// layout reads it from the blob instead of laying W out in memory of its own at its first run
// (ResNet-50 fp32: first run 164 -> 77 ms; 70 with its Gemm packed by PackWeights). W itself stays
// (the reference kernel reads it, and runs on another CPU lay it out as before). Returns how many
// were stored.
absl::StatusOr<int> PrepackConvolutions(ir::Graph& g, const std::vector<ir::Node*>& live,
                                        const std::vector<const kernels::KernelDef*>& defs,
                                        spdlog::logger& logger) {
  int count = 0;
  uint64_t bytes = 0;
  for (ir::Node* n : live) {
    const kernels::KernelDef* def = defs[n->id];
    if ((n->op != ir::OpType::kConv && n->op != ir::OpType::kFusedConv) || !def ||
        def->isa != kernels::Isa::kDnnl) {
      continue;
    }
    ASSIGN_OR_RETURN(std::optional<kernels::cpu::dnnl::PrepackedConvWeights> pre,
                     kernels::cpu::dnnl::PrepackConvWeights(*n, *def));
    if (!pre) continue;
    ASSIGN_OR_RETURN(ir::Value * v,
                     g.AddValue(absl::StrCat(n->name, "/W laid out for its kernel")));
    v->dtype = DataType::kU8;
    v->shape = ir::Shape::Of(pre->bytes.dims());
    bytes += pre->bytes.byte_size();
    v->constant = std::move(pre->bytes);
    n->inputs.resize(kernels::cpu::dnnl::kPrepackedWeightsInput, nullptr);
    n->inputs.push_back(v);
    n->attrs[kernels::cpu::dnnl::kPrepackedWeightsAttr] = ir::Attribute::Ints(std::move(pre->desc));
    ++count;
  }
  if (count > 0) {
    g.RebuildEdges();
    logger.info(
        "weights: {} convolution weight(s) also stored as their kernels lay them out ({} bytes)",
        count, bytes);
  }
  return count;
}

// Precision, fusion, lowering, kernel choice, constant folding, dead code and the memory plan
// on an imported graph. Fills `result` but for the blob; `stage` reports progress.
absl::StatusOr<Compiled> Compile(ir::Graph& g, const precision::Policy& policy,
                                 const BuildOptions& options, BuildResult& result,
                                 spdlog::logger& log,
                                 const std::function<void(const char*, double)>& on_stage) {
  spdlog::logger* logger = &log;
  uint64_t c_required_features = 0;
  std::map<int, plan::WeightEncoding> encodings;
  std::vector<ir::Node*> packed_at_write;
  auto stage = [&](const char* name, double fraction) {
    if (on_stage) on_stage(name, fraction);
  };
  BuildSummary& sum = result.summary;
  sum.source_nodes = static_cast<int>(g.nodes().size());
  // Precision: patterns -> assignment -> lowering (retyping, weights in their precision,
  // conversions at boundaries).
  stage("policy", 0.30);
  std::vector<SourceNode> sources;
  for (const auto& n : g.nodes()) sources.push_back({n->name, n->op});
  std::vector<precision::PatternInstance> patterns = precision::FindPatterns(g);
  for (const auto& p : patterns) {
    result.patterns.push_back({precision::PatternName(p.kind), p.nodes});
  }
  ASSIGN_OR_RETURN(
      precision::Assignment assignment,
      precision::AssignPrecision(g, policy, patterns, options.constraints, options.typing, logger));
  sum.strong_typing = assignment.strong_typing;
  sum.warnings = assignment.warnings;
  logger->info(
      "policy: {} (base {}, {} rule(s)), constraints {}, typing {}; {} pattern "
      "instance(s)",
      policy.name, precision::PrecisionName(policy.base), policy.rules.size(),
      precision::ConstraintsName(options.constraints),
      assignment.strong_typing ? "strong (authored mixed precision)" : "weak", patterns.size());
  const kernels::Registry& reg = kernels::Registry::Default();
  stage("fusion", 0.45);
  ASSIGN_OR_RETURN(passes::FusionResult fusion,
                   passes::Fuse(g, assignment, patterns, options.fusion, logger));
  for (const std::string& f : fusion.applied) logger->info("fusion {}", f);
  sum.fusions = static_cast<int>(fusion.applied.size());
  sum.fusion_refusals = fusion.refusals;
  stage("lowering", 0.55);
  ASSIGN_OR_RETURN(passes::LoweringResult lowering,
                   passes::LowerPrecision(g, assignment, fusion, options.constraints, reg, logger));
  sum.dtype_changes = static_cast<int>(lowering.changes.size());
  sum.inserted_conversions = lowering.inserted_conversions;
  sum.converted_weights = lowering.converted_weights;
  for (int id = 0; id < sum.source_nodes; ++id) {
    if (!assignment.nodes[id].floating) continue;
    switch (lowering.effective[id]) {
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
  if (!lowering.changes.empty()) {
    logger->info(
        "precision: {} floating node(s) fp32, {} fp16, {} bf16; {} dtype change(s), "
        "{} conversion(s) inserted, {} weight(s) converted",
        sum.nodes_fp32, sum.nodes_fp16, sum.nodes_bf16, sum.dtype_changes, sum.inserted_conversions,
        sum.converted_weights);
    ASSIGN_OR_RETURN(auto lowered_order, g.TopologicalOrder());
    RETURN_IF_ERROR(import::InferTypesAndShapes(g, lowered_order));
  }

  // Every node needs a kernel: report all that have none at once. Creating each kernel also
  // checks its attributes now, so a bad attribute fails the build rather than the first run.
  std::vector<const kernels::KernelDef*> defs(g.nodes().size(), nullptr);
  std::vector<std::string> missing;
  bool any_op_missing = false;
  for (const auto& n : g.nodes()) {
    auto def = reg.Find(*n);
    if (!def.ok()) {
      missing.emplace_back(def.status().message());
      any_op_missing |= absl::StrContains(def.status().message(), "unsupported op");
      continue;
    }
    defs[n->id] = *def;
    auto kernel = (*def)->factory(*n);
    if (!kernel.ok()) return kernel.status();
  }
  if (!missing.empty()) {
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

  // Constant folding, in topological order so chains fold completely.
  stage("plan", 0.65);
  ASSIGN_OR_RETURN(std::vector<ir::Node*> order, g.TopologicalOrder());
  std::vector<bool> removed(g.nodes().size(), false);
  std::vector<v1::NodeProvenance> removed_prov;
  for (ir::Node* n : order) {
    if (!AllInputsConstant(*n) || !SmallEnough(*n, options.max_folded_bytes)) continue;
    bool feeds_output = false;
    for (const ir::Value* v : n->outputs) feeds_output |= v && v->is_graph_output;
    if (feeds_output) continue;  // keep graph outputs computed by a kernel
    ASSIGN_OR_RETURN(auto kernel, defs[n->id]->factory(*n));
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
      }
    }
    removed[n->id] = true;
    for (auto& p : Provenance(*n, sources, assignment, lowering, "constant-folded")) {
      removed_prov.push_back(std::move(p));
    }
    ++sum.folded_nodes;
  }
  // Dead code: nodes none of whose outputs reach a graph output.
  std::vector<int> uses(g.values().size(), 0);
  for (ir::Node* n : order) {
    if (removed[n->id]) continue;
    for (const ir::Value* v : n->inputs) {
      if (v) ++uses[v->id];
    }
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    ir::Node* n = *it;
    if (removed[n->id]) continue;
    bool live = false;
    for (const ir::Value* v : n->outputs) live |= v && (v->is_graph_output || uses[v->id] > 0);
    if (live) continue;
    removed[n->id] = true;
    for (auto& p : Provenance(*n, sources, assignment, lowering, "removed: output unused")) {
      removed_prov.push_back(std::move(p));
    }
    ++sum.dead_nodes;
    for (const ir::Value* v : n->inputs) {
      if (v) --uses[v->id];
    }
  }
  std::vector<ir::Node*> live;
  for (ir::Node* n : order) {
    if (!removed[n->id]) live.push_back(n);
  }
  if (sum.folded_nodes + sum.dead_nodes > 0) {
    logger->info("passes: {} node(s) folded to constants, {} dead node(s) removed",
                 sum.folded_nodes, sum.dead_nodes);
    // Folded constants sharpen shapes downstream (Reshape targets, Shape outputs).
    RETURN_IF_ERROR(import::InferTypesAndShapes(g, live));
  }

  if (options.channels_last) {
    // Convolutions (and the pools between them) keep their activations NHWC where a kernel
    // takes them so; an engine so built needs that kernel (the reference ones are NCHW only).
    auto fast_kernel = [&](const ir::Node& n) {
      auto def = reg.Find(n);
      return def.ok() && (*def)->isa != kernels::Isa::kRef;
    };
    auto channels_last_kernel = [&](const ir::Node& n) {
      ir::Node copy = n;
      copy.attrs[kernels::kChannelsLastAttr] = ir::Attribute::Int(1);
      return fast_kernel(copy);
    };
    ASSIGN_OR_RETURN(passes::LayoutResult layout,
                     passes::KeepChannelsLast(g, live, channels_last_kernel, logger));
    if (layout.convolutions > 0) {
      defs.resize(g.nodes().size(), nullptr);
      removed.resize(g.nodes().size(), false);
      ASSIGN_OR_RETURN(order, g.TopologicalOrder());
      live.clear();
      for (ir::Node* n : order) {
        if (!removed[n->id]) live.push_back(n);
      }
      // The kernels of the inserted transposes and of the channels-last nodes (chosen again:
      // the attribute is what the channels-last kernels take).
      for (ir::Node* n : live) {
        const bool channels_last = n->GetInt(kernels::kChannelsLastAttr, 0) != 0;
        if (defs[n->id] != nullptr && !channels_last) continue;
        ASSIGN_OR_RETURN(defs[n->id], reg.Find(*n));
        if (channels_last) {
          c_required_features |=
              kernels::IsaCpuFeatures(defs[n->id]->isa) | defs[n->id]->cpu_features;
        }
      }
      sum.layout_convolutions = layout.convolutions;
      sum.layout_transposes = layout.transposes;
      // Inverted-residual blocks as one kernel each (fp32 or fp16 convolutions: after lowering).
      ASSIGN_OR_RETURN(passes::ChainResult chains,
                       passes::ChainConvolutions(g, live, fast_kernel, options.fusion, logger));
      if (!chains.added.empty()) {
        defs.resize(g.nodes().size(), nullptr);
        removed.resize(g.nodes().size(), false);
        for (const ir::Node* n : chains.removed) removed[n->id] = true;
        ASSIGN_OR_RETURN(order, g.TopologicalOrder());
        live.clear();
        for (ir::Node* n : order) {
          if (!removed[n->id]) live.push_back(n);
        }
        for (ir::Node* n : chains.added) {
          ASSIGN_OR_RETURN(defs[n->id], reg.Find(*n));
          c_required_features |=
              kernels::IsaCpuFeatures(defs[n->id]->isa) | defs[n->id]->cpu_features;
        }
        for (const std::string& f : chains.applied) logger->info("fusion {}", f);
        sum.fusions += static_cast<int>(chains.applied.size());
      }
    }
  }

  if (options.pack_weights) {
    // No blob in memory: nothing to pack an fp32 weight into.
    ASSIGN_OR_RETURN(const uint64_t packed_features,
                     PackWeights(live, defs, options.pack_f32_weights && !options.in_memory,
                                 encodings, packed_at_write, sum, *logger));
    c_required_features |= packed_features;
    if (!options.in_memory) {
      ASSIGN_OR_RETURN(sum.prepacked_convolutions, PrepackConvolutions(g, live, defs, *logger));
    }
  }

  runtime::MemoryPlan mp = runtime::PlanMemory(g, live);
  if (mp.arena_bytes > plan::kMaxArenaBytes) {
    // Every tensor passed shape inference's size limit, but together they would need an arena
    // no engine loader accepts (plan/arena_rules.h): refuse the build rather than its runs.
    return absl::ResourceExhaustedError(absl::StrCat(
        "the activation arena would need ", mp.arena_bytes, " bytes, over the limit of ",
        plan::kMaxArenaBytes, " (1 TiB): check the model's static shapes"));
  }
  sum.kernels = static_cast<int>(live.size());
  sum.arena_bytes = mp.arena_bytes;
  sum.total_activation_bytes = mp.total_activation_bytes;
  sum.dynamic_activations = mp.dynamic_values;
  logger->info("memory plan: arena {} bytes for {} bytes of activations ({} sized at run time)",
               mp.arena_bytes, mp.total_activation_bytes, mp.dynamic_values);

  std::vector<plan::KernelChoice> choices(g.nodes().size());
  for (ir::Node* n : live) {
    const kernels::KernelDef* def = defs[n->id];
    plan::KernelChoice& c = choices[n->id];
    c.backend = kernels::BackendName(def->backend);
    c.isa = kernels::IsaName(def->isa);
    c.dtype = DataTypeName(kernels::KernelKeyType(*n, def->type_source));
    c.provenance = Provenance(*n, sources, assignment, lowering, "");
  }
  v1::EngineMetadata meta;
  meta.set_builder_version(KILN_VERSION);
  meta.set_model_sha256(sum.model_sha256);
  meta.set_model_name(g.name());
  meta.set_opset(g.opset());
  meta.set_ir_version(g.ir_version());
  meta.set_policy(policy.Canonical());
  meta.set_constraints(precision::ConstraintsName(options.constraints));
  meta.set_typing(assignment.strong_typing ? "strong" : "weak");
  for (const std::string& w : assignment.warnings) meta.add_warnings(w);
  for (const auto& c : lowering.changes) {
    v1::DtypeChange* dc = meta.add_dtype_changes();
    dc->set_value(c.value);
    dc->set_from_dtype(static_cast<int32_t>(c.from));
    dc->set_to_dtype(static_cast<int32_t>(c.to));
    dc->set_reason(c.reason);
  }
  meta.set_source_node_count(sum.source_nodes);
  result.nodes.resize(sum.source_nodes);
  for (ir::Node* n : live) {
    for (const auto& p : choices[n->id].provenance) {
      if (p.node_index() >= 0) result.nodes[p.node_index()] = p;
    }
  }
  for (const auto& p : removed_prov) {
    if (p.node_index() >= 0) result.nodes[p.node_index()] = p;
  }
  for (auto& p : removed_prov) *meta.add_removed_nodes() = std::move(p);
  std::vector<int> index = plan::TensorIndexOfValues(g, live);
  auto* mpp = meta.mutable_memory_plan();
  mpp->set_arena_bytes(mp.arena_bytes);
  mpp->set_total_activation_bytes(mp.total_activation_bytes);
  mpp->set_dynamic_tensors(mp.dynamic_values);
  for (const auto& s : mp.slots) {
    if (index[s.value_id] < 0) continue;
    auto* slot = mpp->add_slots();
    slot->set_tensor(index[s.value_id]);
    slot->set_offset(s.offset);
    slot->set_bytes(s.bytes);
  }
  for (const auto& v : g.values()) {
    if (v->constant && index[v->id] >= 0) sum.weight_bytes += v->constant->byte_size();
  }
  Compiled c;
  c.live = std::move(live);
  c.choices = std::move(choices);
  c.meta = std::move(meta);
  c.memory = std::move(mp);
  c.required_features = c_required_features;
  c.encodings = std::move(encodings);
  c.packed_at_write = std::move(packed_at_write);
  return c;
}

// The engine of a compiled graph, in memory (no blob), its weights the graph's constants.
// Session reads memory plan slots as value ids of the engine's graph: here the graph's own.
std::shared_ptr<const plan::Engine> InMemoryEngine(std::unique_ptr<ir::Graph> graph, Compiled c) {
  auto e = std::make_shared<plan::Engine>();
  e->metadata = std::move(c.meta);
  v1::MemoryPlan* mp = e->metadata.mutable_memory_plan();
  mp->clear_slots();
  for (const auto& s : c.memory.slots) {
    v1::MemoryPlan::Slot* slot = mp->add_slots();
    slot->set_tensor(s.value_id);
    slot->set_offset(s.offset);
    slot->set_bytes(s.bytes);
  }
  for (size_t k = 0; k < c.live.size(); ++k) {
    const ir::Node* n = c.live[k];
    const plan::KernelChoice& choice = c.choices[n->id];
    v1::Kernel* kd = e->metadata.add_kernels();
    kd->set_id(absl::StrCat("k", k));
    kd->set_op_type(ir::OpName(n->op));
    kd->set_since_version(n->since_version);
    kd->set_backend(choice.backend);
    kd->set_isa(choice.isa);
    kd->set_dtype(choice.dtype);
    for (const auto& p : choice.provenance) *kd->add_nodes() = p;
  }
  e->order = std::move(c.live);
  e->graph = std::move(graph);
  return e;
}

// The policy of `options` (the preset or file, then the --rule flags).
absl::StatusOr<precision::Policy> PolicyOf(const BuildOptions& options) {
  ASSIGN_OR_RETURN(precision::Policy policy,
                   precision::LoadPolicy(options.policy.empty() ? "fp32" : options.policy));
  policy.implicit = options.policy.empty();
  RETURN_IF_ERROR(precision::AddRuleFlags(policy, options.rules));
  return policy;
}

std::shared_ptr<spdlog::logger> OrNullLogger(std::shared_ptr<spdlog::logger> logger) {
  if (logger) return logger;
  return std::make_shared<spdlog::logger>("kiln", std::make_shared<spdlog::sinks::null_sink_mt>());
}

// Everything after the import: the engine blob, and with keep_reference the pristine import and
// the reference compiled from it. `result.summary.model_sha256` is set.
absl::StatusOr<BuildResult> BuildImported(std::unique_ptr<ir::Graph> graph,
                                          const precision::Policy& policy,
                                          const BuildOptions& options, BuildResult result,
                                          spdlog::logger& logger) {
  ir::Graph& g = *graph;
  BuildSummary& sum = result.summary;
  // Both share the imported weights; the engine's passes replace its constants, never write
  // into them.
  std::unique_ptr<ir::Graph> reference_graph;
  if (options.keep_reference) {
    result.imported = g.Clone();
    reference_graph = g.Clone();
  }
  ASSIGN_OR_RETURN(Compiled c, Compile(g, policy, options, result, logger, options.on_stage));
  if (options.in_memory) {
    result.engine = InMemoryEngine(std::move(graph), std::move(c));
    return result;
  }
  // For the report: the engine of the blob in memory too (its weights the graph's), so that it
  // needs no copy of the blob loaded.
  std::optional<v1::EngineMetadata> meta;
  if (options.keep_reference) meta = c.meta;
  ASSIGN_OR_RETURN(result.blob, plan::WriteEngine(g, c.live, c.choices, std::move(c.meta),
                                                  c.required_features, c.encodings));
  logger.info("engine: {} kernels, {} bytes of weights, blob {} bytes", sum.kernels,
              sum.weight_bytes, result.blob.size());
  if (meta) {
    // The weights packed into the blob alone run plain in memory: the same numbers (the fp32
    // kernels read packed and plain B alike), no second copy of them.
    for (ir::Node* n : c.packed_at_write) n->attrs.erase(kernels::kPackedBAttr);
    c.meta = *std::move(meta);
    result.engine = InMemoryEngine(std::move(graph), std::move(c));
  }
  if (reference_graph) {
    auto t0 = std::chrono::steady_clock::now();
    BuildOptions ro = ReferenceBuildOptions(options);
    ASSIGN_OR_RETURN(precision::Policy ref_policy, precision::LoadPolicy(ro.policy));
    BuildResult ref_result;
    ref_result.summary.model_sha256 = sum.model_sha256;
    spdlog::logger quiet("kiln", std::make_shared<spdlog::sinks::null_sink_mt>());
    auto ref_compiled = Compile(*reference_graph, ref_policy, ro, ref_result, quiet, {});
    if (!ref_compiled.ok()) {
      return absl::Status(ref_compiled.status().code(),
                          absl::StrCat("the fp32 reference of the accuracy report: ",
                                       ref_compiled.status().message()));
    }
    result.reference = InMemoryEngine(std::move(reference_graph), *std::move(ref_compiled));
    result.reference_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  return result;
}

// The build; `release`, when set, points at the model bytes, freed once imported (the graph
// holds the weights from then on, so a big model is not held twice while its blob is written).
absl::StatusOr<BuildResult> Build(const std::string& model_bytes, std::string* release,
                                  const BuildOptions& options,
                                  std::shared_ptr<spdlog::logger> logger) {
  logger = OrNullLogger(std::move(logger));
  ASSIGN_OR_RETURN(precision::Policy policy, PolicyOf(options));
  BuildResult result;
  result.summary.model_sha256 = DigestHex(Sha256(model_bytes));
  if (options.on_stage) options.on_stage("import", 0.05);
  logger->info("import: {} bytes, sha256 {}", model_bytes.size(), result.summary.model_sha256);
  ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> graph,
                   import::ImportModel(model_bytes, options.import, release));
  logger->info("import: {} nodes, {} values, opset {}, ir_version {}", graph->nodes().size(),
               graph->values().size(), graph->opset(), graph->ir_version());
  return BuildImported(std::move(graph), policy, options, std::move(result), *logger);
}

}  // namespace

absl::StatusOr<BuildResult> BuildEngine(const std::string& model_bytes, const BuildOptions& options,
                                        std::shared_ptr<spdlog::logger> logger) {
  return Build(model_bytes, nullptr, options, std::move(logger));
}

absl::StatusOr<BuildResult> BuildEngine(std::string&& model_bytes, const BuildOptions& options,
                                        std::shared_ptr<spdlog::logger> logger) {
  std::string bytes = std::move(model_bytes);
  return Build(bytes, &bytes, options, std::move(logger));
}

absl::StatusOr<BuildResult> BuildEngineFromImport(const ir::Graph& imported,
                                                  const std::string& model_sha256,
                                                  const BuildOptions& options,
                                                  std::shared_ptr<spdlog::logger> logger) {
  logger = OrNullLogger(std::move(logger));
  ASSIGN_OR_RETURN(precision::Policy policy, PolicyOf(options));
  BuildResult result;
  result.summary.model_sha256 = model_sha256;
  return BuildImported(imported.Clone(), policy, options, std::move(result), *logger);
}

absl::StatusOr<BuildResult> BuildEngineFromFile(const std::string& model_path, BuildOptions options,
                                                std::shared_ptr<spdlog::logger> logger) {
  ASSIGN_OR_RETURN(std::string bytes, import::ReadFile(model_path, options.import.max_model_bytes));
  if (options.import.model_dir.empty()) options.import.model_dir = ModelDirOf(model_path);
  return BuildEngine(std::move(bytes), options, std::move(logger));
}

std::string SummaryText(const BuildSummary& s) {
  std::string out = absl::StrFormat(
      "  %d source nodes -> %d kernels (%d folded, %d dead)\n"
      "  weights %d bytes%s%s; activation arena %d bytes for %d bytes of activations%s\n"
      "  precision (%s typing): %d floating nodes fp32, %d fp16, %d bf16; %d dtype change(s), "
      "%d conversion(s) inserted, %d weight(s) converted\n"
      "  fusion: %d group(s) fused, %d refused\n",
      s.source_nodes, s.kernels, s.folded_nodes, s.dead_nodes, s.weight_bytes,
      s.packed_weights ? absl::StrCat(" (", s.packed_weights, " packed for the GEMM)") : "",
      s.prepacked_convolutions ? absl::StrCat(" (", s.prepacked_convolutions,
                                              " convolution(s) also laid out for their kernels)")
                               : "",
      s.arena_bytes, s.total_activation_bytes,
      s.dynamic_activations ? absl::StrCat(" (+", s.dynamic_activations, " sized at run time)")
                            : "",
      s.strong_typing ? "strong" : "weak", s.nodes_fp32, s.nodes_fp16, s.nodes_bf16,
      s.dtype_changes, s.inserted_conversions, s.converted_weights, s.fusions,
      s.fusion_refusals.size());
  if (s.layout_convolutions > 0) {
    absl::StrAppend(&out, "  layout: ", s.layout_convolutions,
                    " convolution(s) channels-last (NHWC), ", s.layout_transposes,
                    " transpose(s) inserted\n");
  }
  for (const std::string& w : s.warnings) absl::StrAppend(&out, "  warning: ", w, "\n");
  for (const std::string& r : s.fusion_refusals) {
    absl::StrAppend(&out, "  fusion refused: ", r, "\n");
  }
  return out;
}

BuildOptions ReferenceBuildOptions(const BuildOptions& options) {
  BuildOptions r;
  r.policy = "fp32";
  r.typing = precision::Typing::kWeak;
  r.constraints = precision::Constraints::kPrefer;
  r.fusion.enabled = false;
  r.channels_last = false;  // node by node on the ONNX tensors themselves
  // The reference shares its weights with the import (Graph::Clone): packed copies would hold a
  // second fp32 copy of every GEMM weight for the whole report.
  r.pack_f32_weights = false;
  r.import = options.import;
  r.max_folded_bytes = options.max_folded_bytes;
  return r;
}

std::string ModelDirOf(const std::string& model_path) {
  const size_t slash = model_path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : model_path.substr(0, slash);
}

}  // namespace kiln::builder
