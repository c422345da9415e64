#include "engine/passes/conv_chain.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/kernels/cpu/avx512/conv_chain_nodes.h"
#include "engine/kernels/kernel.h"
#include "engine/precision/precision.h"

namespace kiln::passes {
namespace {

using kernels::cpu::avx512::ChainDepthwiseConv;
using kernels::cpu::avx512::ChainPointwiseConv;

const char* const kActivationAttrs[] = {"activation", "activation_alpha", "activation_min",
                                        "activation_max"};

// Input `i` of `n` (nullptr when absent).
ir::Value* In(const ir::Node& n, int i) { return i < n.num_inputs() ? n.inputs[i] : nullptr; }

class Chainer {
 public:
  Chainer(ir::Graph& g, const std::vector<ir::Node*>& live,
          const std::function<bool(const ir::Node&)>& chain_kernel, const FusionOptions& o,
          spdlog::logger* logger)
      : g_(g), live_(live), chain_kernel_(chain_kernel), o_(o), logger_(logger) {
    for (ir::Node* n : live) live_set_.insert(n);
  }

  ChainResult Run() {
    if (!o_.enabled) return std::move(result_);
    g_.RebuildEdges();
    for (ir::Node* d : live_) {
      if (taken_.contains(d) || !ChainDepthwiseConv(*d)) continue;
      const int64_t c = d->input(1)->constant->dim(0);
      ir::Node* p = SoleReader(d->outputs[0]);
      if (p && (taken_.contains(p) || p->input(0) != d->outputs[0] || !ChainPointwiseConv(*p) ||
                p->input(1)->constant->dim(1) != c)) {
        p = nullptr;
      }
      ir::Node* e = d->input(0)->producer;
      if (e &&
          (taken_.contains(e) || !live_set_.contains(e) || e->input(3) || !ChainPointwiseConv(*e) ||
           SoleReader(e->outputs[0]) != d || e->input(1)->constant->dim(0) != c)) {
        e = nullptr;
      }
      // A depthwise convolution alone is no chain (its kernel is the chain's depthwise step)
      // unless it takes in the MaxPool after it.
      ir::Node* pool = PoolAfter((p ? p : d)->outputs[0]);
      if (e || p || pool) Chain(e, d, p, pool);
    }
    if (!result_.added.empty()) g_.RebuildEdges();
    return std::move(result_);
  }

 private:
  // The only live node reading `v`, once, when `v` is not a graph output.
  ir::Node* SoleReader(const ir::Value* v) const {
    if (!v || v->is_graph_output || v->consumers.size() != 1) return nullptr;
    ir::Node* c = v->consumers[0];
    int uses = 0;
    for (const ir::Value* in : c->inputs) uses += in == v;
    return uses == 1 && live_set_.contains(c) ? c : nullptr;
  }

  // The channels-last 2 x 2, stride-2 MaxPool without padding, dilation or ceil mode (and
  // without its Indices output) that alone reads `v` once, or nullptr.
  ir::Node* PoolAfter(const ir::Value* v) const {
    ir::Node* m = SoleReader(v);
    if (!m || taken_.contains(m) || m->op != ir::OpType::kMaxPool || m->input(0) != v ||
        m->GetInt(kernels::kChannelsLastAttr, 0) == 0 || m->num_outputs() < 1 || !m->outputs[0] ||
        (m->num_outputs() > 1 && m->outputs[1]) || m->outputs[0]->dtype != v->dtype) {
      return nullptr;
    }
    const std::string pad = m->GetString("auto_pad", "NOTSET");
    const std::vector<int64_t> two = {2, 2}, one = {1, 1};
    const std::vector<int64_t> pads = m->GetInts("pads", {0, 0, 0, 0});
    const bool unpadded = std::all_of(pads.begin(), pads.end(), [](int64_t x) { return x == 0; });
    return m->GetInts("kernel_shape") == two && m->GetInts("strides") == two &&
                   m->GetInts("dilations", one) == one && unpadded &&
                   m->GetInt("ceil_mode", 0) == 0 && m->GetInt("storage_order", 0) == 0 &&
                   (pad == "NOTSET" || pad.empty() || pad == "VALID")
               ? m
               : nullptr;
  }

  // Expansion `e` (or nullptr), depthwise `d`, projection `p` (or nullptr) and a MaxPool after
  // them (or nullptr) as one FusedConvChain, when allowed and a kernel takes it.
  void Chain(ir::Node* e, ir::Node* d, ir::Node* p, ir::Node* pool) {
    std::vector<std::pair<const char*, ir::Node*>> steps;
    if (e) steps.push_back({"expand_", e});
    steps.push_back({"depthwise_", d});
    if (p) steps.push_back({"project_", p});
    std::vector<const ir::Node*> members;
    for (const auto& step : steps) members.push_back(step.second);
    if (pool) members.push_back(pool);
    if (FusionExcluded(o_, members, ir::OpType::kFusedConvChain, "conv-chain")) return;
    ir::Node chain;
    chain.op = ir::OpType::kFusedConvChain;
    chain.name = absl::StrCat(d->name, "/chain");
    chain.since_version = 1;
    chain.inputs = {e ? e->inputs[0] : d->inputs[0],
                    e ? e->inputs[1] : nullptr,
                    e ? In(*e, 2) : nullptr,
                    d->inputs[1],
                    In(*d, 2),
                    p ? p->inputs[1] : nullptr,
                    p ? In(*p, 2) : nullptr,
                    p ? In(*p, 3) : nullptr};
    chain.outputs = {(pool ? pool : p ? p : d)->outputs[0]};
    chain.attrs["strides"] = ir::Attribute::Ints(d->GetInts("strides", {1, 1}));
    chain.attrs["pads"] = ir::Attribute::Ints(d->GetInts("pads", {0, 0, 0, 0}));
    chain.attrs[kernels::kChannelsLastAttr] = ir::Attribute::Int(1);
    if (pool) chain.attrs["pool"] = ir::Attribute::Int(1);
    std::vector<std::string> labels, names;
    for (const auto& [prefix, n] : steps) {
      for (const char* a : kActivationAttrs) {
        auto it = n->attrs.find(a);
        if (it != n->attrs.end()) chain.attrs[absl::StrCat(prefix, a)] = it->second;
      }
      labels.push_back(n->fusion.empty() ? "conv" : n->fusion);
      names.push_back(absl::StrCat("'", n->name, "'"));
    }
    if (pool) {
      steps.push_back({"", pool});
      labels.push_back("maxpool");
      names.push_back(absl::StrCat("'", pool->name, "'"));
    }
    if (!chain_kernel_(chain)) {
      if (logger_) {
        logger_->info("conv-chain of {}: no kernel takes it", absl::StrJoin(names, ", "));
      }
      return;
    }
    chain.fusion = absl::StrCat("conv-chain(", absl::StrJoin(labels, ", "), ")");
    ir::Node* added = g_.AddNode(chain.op, chain.name);
    added->since_version = chain.since_version;
    added->inputs = chain.inputs;
    added->outputs = chain.outputs;
    added->attrs = chain.attrs;
    added->fusion = chain.fusion;
    for (const auto& [prefix, n] : steps) {
      added->sources.insert(added->sources.end(), n->sources.begin(), n->sources.end());
      n->inputs.clear();
      n->outputs.clear();
      taken_.insert(n);
      result_.removed.push_back(n);
    }
    result_.added.push_back(added);
    // The members' type (ChainMemberConv: fp32, fp16 or bf16, in and out alike).
    const auto precision = precision::PrecisionOfDataType(added->outputs[0]->dtype);
    if (precision == precision::Precision::kFp16) {
      // Every convolution but the last (whose output a MaxPool reads as stored, in fp16).
      const size_t convolutions = steps.size() - (pool ? 1 : 0);
      for (size_t i = 0; i + 1 < convolutions; ++i) {
        const std::vector<int>& src = steps[i].second->sources;
        result_.fp32_interior.insert(result_.fp32_interior.end(), src.begin(), src.end());
      }
    }
    result_.applied.push_back(absl::StrCat(
        added->fusion, ": ", names.size(), " nodes (", absl::StrJoin(names, ", "), ") -> one ",
        ir::OpName(added->op), " at ", precision ? precision::PrecisionName(*precision) : "?"));
  }

  ir::Graph& g_;
  const std::vector<ir::Node*>& live_;
  const std::function<bool(const ir::Node&)>& chain_kernel_;
  const FusionOptions& o_;
  spdlog::logger* logger_;
  absl::flat_hash_set<const ir::Node*> live_set_, taken_;
  ChainResult result_;
};

}  // namespace

absl::StatusOr<ChainResult> ChainConvolutions(
    ir::Graph& graph, const std::vector<ir::Node*>& live,
    const std::function<bool(const ir::Node&)>& chain_kernel, const FusionOptions& options,
    spdlog::logger* logger) {
  RETURN_IF_ERROR(ValidateNoFuse(options.no_fuse));
  return Chainer(graph, live, chain_kernel, options, logger).Run();
}

}  // namespace kiln::passes
