#include "engine/passes/fusion.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"

namespace kiln::passes {
namespace {

using precision::PatternInstance;
using precision::PatternKind;
using precision::Precision;

ir::Attribute IntAttr(int64_t v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kInt;
  a.i = v;
  return a;
}
ir::Attribute FloatAttr(float v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kFloat;
  a.f = v;
  return a;
}
ir::Attribute StringAttr(std::string v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kString;
  a.s = std::move(v);
  return a;
}

class Fuser {
 public:
  Fuser(ir::Graph& g, const precision::Assignment& a, const FusionOptions& o,
        spdlog::logger* logger)
      : g_(g), a_(a), o_(o), logger_(logger), removed_(g.nodes().size(), false) {}

  absl::StatusOr<FusionResult> Run(const std::vector<PatternInstance>& patterns) {
    for (const PatternInstance& p : patterns) RETURN_IF_ERROR(FusePattern(p));
    RETURN_IF_ERROR(FuseConvBatchNorm());
    g_.RemoveNodes(removed_);
    return std::move(result_);
  }

 private:
  const precision::NodeAssignment& Assigned(const ir::Node& n) { return a_.nodes[n.sources[0]]; }

  // True when a --no-fuse selector excludes a fusion of `members` producing `op`.
  bool Excluded(const std::vector<ir::Node*>& members, ir::OpType op, const char* pattern) {
    for (const std::string& sel : o_.no_fuse) {
      auto colon = sel.find(':');
      std::string kind = sel.substr(0, colon), arg = sel.substr(colon + 1);
      if (kind == "pattern" && arg == pattern) return true;
      if (kind == "op" && arg == ir::OpName(op)) return true;
      for (const ir::Node* n : members) {
        if (kind == "op" && arg == ir::OpName(n->op)) return true;
        if (kind == "scope" && absl::StartsWith(n->name, arg)) return true;
      }
    }
    return false;
  }

  std::string Names(const std::vector<ir::Node*>& members) {
    std::vector<std::string> names;
    for (const ir::Node* n : members) names.push_back(absl::StrCat("'", n->name, "'"));
    return absl::StrJoin(names, ", ");
  }

  void Refuse(std::string why) {
    if (logger_) logger_->warn("fusion refused: {}", why);
    result_.refusals.push_back(std::move(why));
  }

  // A constant float vector of ones with `d` elements (scale of a LayerNorm without gamma).
  absl::StatusOr<ir::Value*> Ones(int64_t d, const std::string& name) {
    ASSIGN_OR_RETURN(ir::Value * v, g_.AddValue(name));
    ASSIGN_OR_RETURN(ir::Tensor t, ir::Tensor::Allocate(DataType::kF32, {d}));
    for (int64_t i = 0; i < d; ++i) t.data<float>()[i] = 1.0f;
    v->dtype = DataType::kF32;
    v->shape = ir::Shape::Of({d});
    v->constant = std::move(t);
    return v;
  }

  absl::Status FusePattern(const PatternInstance& p) {
    if (p.is_op || p.kind == PatternKind::kAttention || !o_.enabled) return absl::OkStatus();
    std::vector<ir::Node*> members;
    for (int id : p.nodes) {
      if (removed_[id]) return absl::OkStatus();  // already absorbed by another fusion
      members.push_back(g_.nodes()[id].get());
    }
    if (members.empty() || !p.output || !p.input) return absl::OkStatus();
    const char* pattern = precision::PatternName(p.kind);
    ir::OpType op;
    int since;
    switch (p.kind) {
      case PatternKind::kLayerNorm:
        op = ir::OpType::kLayerNormalization;
        since = 17;
        break;
      case PatternKind::kRmsNorm:
        op = ir::OpType::kRMSNormalization;
        since = 23;
        break;
      case PatternKind::kGelu:
        op = ir::OpType::kGelu;
        since = 20;
        break;
      case PatternKind::kSoftmax:
        op = ir::OpType::kSoftmax;
        since = 13;
        break;
      default:
        return absl::OkStatus();
    }
    if (Excluded(members, op, pattern)) {
      if (logger_) logger_->info("fusion {} of {} skipped by --no-fuse", pattern, Names(members));
      return absl::OkStatus();
    }
    if (!IsFloating(p.input->dtype) || p.input->dtype != p.output->dtype) return absl::OkStatus();
    // Normalisations fuse into ops that normalise from `axis` to the end: only the last axis.
    const ir::Shape& xs = p.input->shape;
    bool last_axis = p.axis == -1 || (xs.rank_known && p.axis == xs.rank() - 1);
    if ((p.kind == PatternKind::kLayerNorm || p.kind == PatternKind::kRmsNorm) && !last_axis) {
      Refuse(absl::StrCat(pattern, " of ", Names(members), ": normalises axis ", p.axis,
                          ", not the last one"));
      return absl::OkStatus();
    }
    std::vector<ir::Value*> inputs = {const_cast<ir::Value*>(p.input)};
    if (p.kind == PatternKind::kLayerNorm || p.kind == PatternKind::kRmsNorm) {
      ir::Value* scale = const_cast<ir::Value*>(p.scale);
      if (!scale) {
        if (!xs.rank_known || xs.rank() == 0 || !xs.dims.back().is_static()) {
          Refuse(absl::StrCat(pattern, " of ", Names(members),
                              ": no scale and the normalised dim is not static"));
          return absl::OkStatus();
        }
        ASSIGN_OR_RETURN(
            scale, Ones(xs.dims.back().value, absl::StrCat(members.back()->name, "/fused_ones")));
      }
      inputs.push_back(scale);
      if (p.kind == PatternKind::kLayerNorm && p.bias) {
        inputs.push_back(const_cast<ir::Value*>(p.bias));
      }
    }
    // The fused kernel's precision: the join of its members', so none is computed lower.
    Precision t = Precision::kFp32;
    bool first = true;
    for (const ir::Node* m : members) {
      const auto& na = Assigned(*m);
      if (!na.floating) continue;
      t = first ? na.assigned : precision::Join(t, na.assigned);
      first = false;
    }
    ir::Node* fused = g_.AddNode(op, absl::StrCat(members.back()->name, "/fused_", pattern));
    removed_.push_back(false);
    fused->since_version = since;
    fused->inputs = inputs;
    fused->outputs = {const_cast<ir::Value*>(p.output)};
    fused->fusion = pattern;
    switch (p.kind) {
      case PatternKind::kLayerNorm:
      case PatternKind::kRmsNorm:
        fused->attrs["axis"] = IntAttr(-1);
        fused->attrs["epsilon"] = FloatAttr(p.epsilon);
        fused->attrs["stash_type"] = IntAttr(1);
        break;
      case PatternKind::kGelu:
        fused->attrs["approximate"] = StringAttr(p.tanh_approximation ? "tanh" : "none");
        break;
      case PatternKind::kSoftmax:
        fused->attrs["axis"] = IntAttr(p.axis);
        break;
      default:
        break;
    }
    for (ir::Node* m : members) {
      fused->sources.insert(fused->sources.end(), m->sources.begin(), m->sources.end());
      removed_[m->id] = true;
      // Interior members compute in fp32; the boundary rounds to t.
      bool boundary = m->outputs.size() == 1 && m->outputs[0] == p.output;
      for (const ir::Value* in : m->inputs) {
        boundary = boundary || (in && (in == p.input));
      }
      for (int s : m->sources) result_.effective[s] = boundary ? t : Precision::kFp32;
    }
    result_.precision[fused] = t;
    result_.applied.push_back(absl::StrCat(pattern, ": ", members.size(), " nodes (",
                                           Names(members), ") -> one ", ir::OpName(op), " at ",
                                           precision::PrecisionName(t)));
    return absl::OkStatus();
  }

  absl::Status FuseConvBatchNorm() {
    if (!o_.enabled) return absl::OkStatus();
    size_t count = g_.nodes().size();
    for (size_t i = 0; i < count; ++i) {
      ir::Node* bn = g_.nodes()[i].get();
      if (removed_[bn->id] || bn->op != ir::OpType::kBatchNormalization) continue;
      if (bn->num_outputs() != 1 || bn->GetInt("training_mode", 0) != 0) continue;
      ir::Value* y = bn->inputs.empty() ? nullptr : bn->inputs[0];
      if (!y || !y->producer || y->producer->op != ir::OpType::kConv) continue;
      ir::Node* conv = y->producer;
      if (removed_[conv->id] || y->consumers.size() != 1 || y->is_graph_output) continue;
      const ir::Value* w = conv->input(1);
      const ir::Value* b = conv->input(2);
      bool consts = w && w->constant && w->dtype == DataType::kF32 &&
                    (!b || (b->constant && b->dtype == DataType::kF32));
      for (int k = 1; k <= 4; ++k) {
        const ir::Value* v = bn->input(k);
        consts = consts && v && v->constant && v->dtype == DataType::kF32;
      }
      if (!consts) continue;
      std::vector<ir::Node*> members = {conv, bn};
      if (Excluded(members, ir::OpType::kConv, "conv+batchnorm")) continue;
      const auto& ca = Assigned(*conv);
      const auto& ba = Assigned(*bn);
      if (!precision::AtLeast(ca.assigned, ba.assigned)) {
        Refuse(absl::StrCat("conv+batchnorm of ", Names(members), ": ", bn->Label(),
                            " is assigned ", precision::PrecisionName(ba.assigned), " by ", ba.rule,
                            ", and folding it into the weights of ", conv->Label(), " (",
                            precision::PrecisionName(ca.assigned), ") would compute it lower"));
        continue;
      }
      const ir::Tensor& wt = *w->constant;
      int64_t oc = wt.dim(0);
      const ir::Tensor* scale = &*bn->input(1)->constant;
      const ir::Tensor* beta = &*bn->input(2)->constant;
      const ir::Tensor* mean = &*bn->input(3)->constant;
      const ir::Tensor* var = &*bn->input(4)->constant;
      if (scale->num_elements() != oc || beta->num_elements() != oc || mean->num_elements() != oc ||
          var->num_elements() != oc || (b && b->constant->num_elements() != oc)) {
        continue;
      }
      double eps = bn->GetFloat("epsilon", 1e-5f);
      ASSIGN_OR_RETURN(ir::Tensor nw, ir::Tensor::Allocate(DataType::kF32, wt.dims()));
      ASSIGN_OR_RETURN(ir::Tensor nb, ir::Tensor::Allocate(DataType::kF32, {oc}));
      int64_t per = wt.num_elements() / std::max<int64_t>(oc, 1);
      for (int64_t o = 0; o < oc; ++o) {
        double s =
            scale->data<float>()[o] / std::sqrt(static_cast<double>(var->data<float>()[o]) + eps);
        for (int64_t k = 0; k < per; ++k) {
          nw.data<float>()[o * per + k] = static_cast<float>(wt.data<float>()[o * per + k] * s);
        }
        double bias = b ? b->constant->data<float>()[o] : 0.0;
        nb.data<float>()[o] =
            static_cast<float>((bias - mean->data<float>()[o]) * s + beta->data<float>()[o]);
      }
      ASSIGN_OR_RETURN(ir::Value * wv, g_.AddValue(absl::StrCat(w->name, "/folded_", bn->name)));
      wv->dtype = DataType::kF32;
      wv->shape = ir::Shape::Of(nw.dims());
      wv->constant = std::move(nw);
      ASSIGN_OR_RETURN(ir::Value * bv, g_.AddValue(absl::StrCat(bn->name, "/folded_bias")));
      bv->dtype = DataType::kF32;
      bv->shape = ir::Shape::Of({oc});
      bv->constant = std::move(nb);
      conv->inputs = {conv->inputs[0], wv, bv};
      conv->outputs = {bn->outputs[0]};
      conv->sources.insert(conv->sources.end(), bn->sources.begin(), bn->sources.end());
      conv->fusion = "conv+batchnorm";
      removed_[bn->id] = true;
      result_.precision[conv] = ca.assigned;
      for (int s : conv->sources) result_.effective[s] = ca.assigned;
      result_.applied.push_back(absl::StrCat("conv+batchnorm: ", Names(members), " -> one Conv at ",
                                             precision::PrecisionName(ca.assigned)));
    }
    g_.RebuildEdges();
    return absl::OkStatus();
  }

  ir::Graph& g_;
  const precision::Assignment& a_;
  const FusionOptions& o_;
  spdlog::logger* logger_;
  std::vector<bool> removed_;
  FusionResult result_;
};

}  // namespace

absl::Status ValidateNoFuse(const std::vector<std::string>& selectors) {
  for (const std::string& s : selectors) {
    auto colon = s.find(':');
    std::string kind = colon == std::string::npos ? "" : s.substr(0, colon);
    if ((kind != "op" && kind != "scope" && kind != "pattern") || colon + 1 >= s.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--no-fuse '", s, "': expected op:TYPE, scope:PREFIX or pattern:NAME"));
    }
    if (kind == "pattern" && !precision::PatternFromName(s.substr(colon + 1)) &&
        s.substr(colon + 1) != "conv+batchnorm") {
      return absl::InvalidArgumentError(absl::StrCat("--no-fuse '", s, "': unknown pattern"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<FusionResult> Fuse(ir::Graph& graph, const precision::Assignment& assignment,
                                  const std::vector<PatternInstance>& patterns,
                                  const FusionOptions& options, spdlog::logger* logger) {
  RETURN_IF_ERROR(ValidateNoFuse(options.no_fuse));
  graph.RebuildEdges();
  return Fuser(graph, assignment, options, logger).Run(patterns);
}

}  // namespace kiln::passes
