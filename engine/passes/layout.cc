#include "engine/passes/layout.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/dnnl/register.h"
#include "engine/kernels/kernel.h"

namespace kiln::passes {
namespace {

// NCHW -> NHWC and back.
const std::vector<int64_t> kToNhwc = {0, 2, 3, 1};
const std::vector<int64_t> kToNchw = {0, 3, 1, 2};
// Where NCHW axis a lies in NHWC.
constexpr int kNhwcAxis[4] = {0, 3, 1, 2};

bool KnownRank4(const ir::Value* v) { return v && v->shape.rank_known && v->shape.rank() == 4; }

ir::Shape Permuted(const ir::Shape& s, const std::vector<int64_t>& perm) {
  ir::Shape out = s;
  for (size_t i = 0; i < perm.size(); ++i) out.dims[i] = s.dims[perm[i]];
  return out;
}

bool IsScalarConstant(const ir::Value* v) {
  return v->constant && v->constant->num_elements() == 1;
}

// A constant of IsPerChannelDims: one value per channel of an NCHW operand with C channels (a
// decomposed BatchNormalization's scale or shift).
bool IsChannelConstant(const ir::Value* v, int64_t channels) {
  return v->constant && IsPerChannelDims(v->constant->dims(), channels);
}

// Elementwise ops whose arithmetic does not depend on the layout of same-shaped inputs.
bool LayoutFreeElementwise(ir::OpType op) {
  switch (op) {
    case ir::OpType::kAdd:
    case ir::OpType::kSum:
    case ir::OpType::kMul:
    case ir::OpType::kSub:
    case ir::OpType::kRelu:
    case ir::OpType::kClip:
    case ir::OpType::kLeakyRelu:
    case ir::OpType::kSigmoid:
    case ir::OpType::kHardSwish:
    case ir::OpType::kTanh:
    case ir::OpType::kDiv:
    case ir::OpType::kHardSigmoid:
      return true;
    default:
      return false;
  }
}

class ChannelsLast {
 public:
  ChannelsLast(ir::Graph& g, const std::vector<ir::Node*>& live,
               const std::function<bool(const ir::Node&)>& kernel_ok)
      : g_(g), live_(live), kernel_ok_(kernel_ok) {
    for (ir::Node* n : live) live_set_.insert(n);
  }

  absl::StatusOr<LayoutResult> Run() {
    // Which nodes run NHWC, in execution order: a convolution when the kernel takes it; an
    // elementwise node when every activation input is already NHWC.
    for (ir::Node* n : live_) {
      if (IsConv(*n)) {
        if (!kernel_ok_(*n) || !KnownRank4(n->inputs[0]) || !KnownRank4(n->outputs[0]) ||
            (n->input(3) && !KnownRank4(n->inputs[3]))) {
          continue;
        }
        nhwc_nodes_.insert(n);
        nhwc_values_.insert(n->outputs[0]);
        ++result_.convolutions;
        if (!nhwc_values_.contains(n->inputs[0]) && ReadsNchwX(*n)) {
          y_only_.insert(n);
          ++result_.nchw_x_convolutions;
        }
      } else if (IsPool(*n)) {
        // Only a pool already reading an NHWC value: one on an NCHW value gains nothing.
        if (!n->input(0) || !nhwc_values_.contains(n->input(0)) || !KnownRank4(n->outputs[0]) ||
            !kernel_ok_(*n)) {
          continue;
        }
        nhwc_nodes_.insert(n);
        nhwc_values_.insert(n->outputs[0]);
        ++result_.pools;
      } else if (ElementwiseOnNhwc(*n)) {
        nhwc_nodes_.insert(n);
        nhwc_values_.insert(n->outputs[0]);
        ++result_.elementwise;
      } else if (ConcatOnNhwc(*n)) {
        nhwc_nodes_.insert(n);
        nhwc_values_.insert(n->outputs[0]);
        ++result_.concats;
      } else if (ResizeOnNhwc(*n)) {
        nhwc_nodes_.insert(n);
        nhwc_values_.insert(n->outputs[0]);
        ++result_.resizes;
      }
    }
    if (nhwc_nodes_.empty()) return std::move(result_);
    // Rewrite: outputs first (every NHWC value gets its NHWC twin), then inputs.
    for (ir::Node* n : live_) {
      if (!nhwc_nodes_.contains(n)) continue;
      ir::Value* v = n->outputs[0];
      ASSIGN_OR_RETURN(ir::Value * w,
                       g_.AddValue(absl::StrCat(v->name, "::", kernels::kChannelsLastSuffix)));
      w->dtype = v->dtype;
      w->shape = Permuted(v->shape, kToNhwc);
      n->outputs[0] = w;
      twin_[v] = w;
      twins_in_order_.push_back({v, w});
      if (IsConv(*n) || IsPool(*n)) {
        n->attrs[kernels::kChannelsLastAttr] =
            ir::Attribute::Int(y_only_.contains(n) ? kernels::cpu::dnnl::kChannelsLastYOnly : 1);
      }
      // A Concat joins along the same logical axis, at its NHWC position.
      if (n->op == ir::OpType::kConcat) {
        n->attrs["axis"] = ir::Attribute::Int(kNhwcAxis[NormalizedAxis(*n)]);
      }
    }
    for (ir::Node* n : live_) {
      if (!nhwc_nodes_.contains(n)) continue;
      // Convolutions: X and FusedConv's residual Z; pools: X; elementwise nodes and Concat: every
      // input; Resize: X, and its scales or sizes in NHWC axis order.
      for (int i = 0; i < n->num_inputs(); ++i) {
        if (n->op == ir::OpType::kResize && i > 0) {
          ir::Value* v = n->inputs[i];
          if ((i == 2 || i == 3) && v && v->constant && v->constant->num_elements() == 4) {
            ASSIGN_OR_RETURN(n->inputs[i], InNhwcOrder(v));
          }
          continue;
        }
        if ((IsConv(*n) && i != 0 && i != 3) || (y_only_.contains(n) && i == 0) ||
            (IsPool(*n) && i != 0) || (LayoutFreeElementwise(n->op) && i >= ActivationInputs(*n))) {
          continue;
        }
        ir::Value* v = n->inputs[i];
        if (!v || IsScalarConstant(v)) continue;
        if (LayoutFreeElementwise(n->op) &&
            IsChannelConstant(v, v->constant ? v->constant->num_elements() : 0)) {
          ASSIGN_OR_RETURN(n->inputs[i], ChannelRow(v));
          continue;
        }
        auto it = twin_.find(v);
        if (it != twin_.end()) {
          n->inputs[i] = it->second;
        } else {
          ASSIGN_OR_RETURN(n->inputs[i], ToNhwc(v));
        }
      }
    }
    // A Transpose of the model reading a value computed NHWC reads its NHWC twin instead, with
    // the two permutations composed (YuNet's heads: NHWC -> NCHW -> NHWC becomes one identity
    // copy, and the value needs no transpose back).
    for (ir::Node* n : live_) {
      if (nhwc_nodes_.contains(n) || !ModelTranspose(*n)) continue;
      auto it = twin_.find(n->inputs[0]);
      if (it == twin_.end()) continue;
      const std::vector<int64_t> p = n->GetInts("perm");
      std::vector<int64_t> q(4);
      for (int i = 0; i < 4; ++i) q[i] = kToNchw[p[i]];  // v = w transposed by kToNchw
      n->inputs[0] = it->second;
      n->attrs["perm"] = ir::Attribute::Ints(q);
      ++result_.composed;
    }
    // Values produced NHWC that something still reads as NCHW (or a graph output): one
    // transpose back, producing the value under its own name (in execution order, so that a
    // build is deterministic).
    for (auto& [v, w] : twins_in_order_) {
      bool nchw_reader = v->is_graph_output;
      for (ir::Node* c : v->consumers) {
        if (!live_set_.contains(c)) continue;
        for (const ir::Value* in : c->inputs) nchw_reader |= in == v;
      }
      if (!nchw_reader) continue;
      AddTranspose(w, v, kToNchw);
    }
    g_.RebuildEdges();
    return std::move(result_);
  }

 private:
  static bool IsConv(const ir::Node& n) {
    return n.op == ir::OpType::kConv || n.op == ir::OpType::kFusedConv;
  }
  // Pools, BatchNormalization and LRN (per channel): nodes that read X (input 0) in NHWC when
  // kChannelsLastAttr is set on them, their other inputs as they are.
  static bool IsPool(const ir::Node& n) {
    return n.op == ir::OpType::kMaxPool || n.op == ir::OpType::kAveragePool ||
           n.op == ir::OpType::kGlobalAveragePool || n.op == ir::OpType::kBatchNormalization ||
           n.op == ir::OpType::kLRN;
  }

  // Whether channels-last convolution `n` reads its NCHW X as it is (kChannelsLastYOnly): one
  // group, a kernel larger than 1 x 1, at most kMaxNchwXChannels input channels and 16 outputs
  // (oneDNN's NCHW-in, nChw16c-out first-convolution kernel, nChw16c being NHWC with 16
  // channels), no residual. The transpose of X it saves costs about half the convolution (YuNet's
  // 3 x 640 x 640 image: 0.21 ms of 0.68). The AVX-512 depthwise and chain kernels, which read
  // NHWC X only, never take such a node (they need a 1 x 1 or a depthwise one).
  static bool ReadsNchwX(const ir::Node& n) {
    const ir::Value* w = n.input(1);
    if (!w || !w->constant || w->constant->rank() != 4 || n.input(3) || n.GetInt("group", 1) != 1) {
      return false;
    }
    const auto& wd = w->constant->dims();
    const ir::Dim& c = n.inputs[0]->shape.dims[1];
    return wd[0] == 16 && wd[1] <= kMaxNchwXChannels && wd[2] * wd[3] > 1 && c.is_static() &&
           c.value == wd[1];
  }
  static constexpr int64_t kMaxNchwXChannels = 4;

  // A live Transpose of the graph with a rank-4 permutation, one input and one output.
  bool ModelTranspose(const ir::Node& n) const {
    if (n.op != ir::OpType::kTranspose || !live_set_.contains(&n) || n.num_inputs() != 1 ||
        n.num_outputs() != 1 || !n.inputs[0] || !n.has_attr("perm")) {
      return false;
    }
    std::vector<int64_t> p = n.GetInts("perm");
    if (p.size() != 4) return false;
    std::sort(p.begin(), p.end());
    return p == std::vector<int64_t>{0, 1, 2, 3};
  }

  // Whether every live reader of `v` is a convolution or pool running NHWC that reads `v` as
  // its X only (input 0, which the rewrite points at the NHWC twin), and `v` is no graph output.
  bool OnlyNhwcXReaders(const ir::Value* v) const {
    if (v->is_graph_output || v->consumers.empty()) return false;
    for (const ir::Node* c : v->consumers) {
      if (!live_set_.contains(c)) continue;
      if (!nhwc_nodes_.contains(c) || !(IsConv(*c) || IsPool(*c)) || y_only_.contains(c)) {
        return false;
      }
      for (int i = 1; i < c->num_inputs(); ++i) {
        if (c->inputs[i] == v) return false;
      }
    }
    return true;
  }

  // How many leading inputs of elementwise node `n` are operands (the rest, Clip's bounds, are
  // left as they are).
  static int ActivationInputs(const ir::Node& n) {
    return n.op == ir::OpType::kAdd || n.op == ir::OpType::kSum || n.op == ir::OpType::kMul ||
                   n.op == ir::OpType::kSub || n.op == ir::OpType::kDiv
               ? n.num_inputs()
               : 1;
  }

  // Every operand input (ActivationInputs) a rank-4 NHWC value, a scalar constant (it
  // broadcasts the same in any layout) or a channel constant (the output's channels static); any
  // other inputs (Clip's bounds) are read as they are. Rank-4 operands may broadcast against each
  // other (an SE block's [N, C, 1, 1] scale of [N, C, H, W]) and their dims may be symbolic:
  // permuting every rank-4 operand and the output alike permutes numpy broadcasting with them,
  // so the kernel broadcasts (or refuses) the NHWC operands exactly as it would the NCHW ones.
  bool ElementwiseOnNhwc(const ir::Node& n) const {
    if (!LayoutFreeElementwise(n.op) || n.num_outputs() != 1 || !KnownRank4(n.outputs[0])) {
      return false;
    }
    const int activations = ActivationInputs(n);
    const ir::Dim& c = n.outputs[0]->shape.dims[1];
    const int64_t channels = c.is_static() ? c.value : 0;
    bool any = false;
    for (int i = 0; i < n.num_inputs(); ++i) {
      const ir::Value* v = n.inputs[i];
      if (!v) continue;
      if (i < activations && channels > 1 && IsChannelConstant(v, channels)) continue;
      if (i >= activations || IsScalarConstant(v)) {
        if (!v->constant && i < activations) return false;
        continue;
      }
      if (!nhwc_values_.contains(v) || !KnownRank4(v)) return false;
      any = true;
    }
    return any;
  }

  // Concat's axis in [0, 4) (rank 4), or -1 when out of range (the kernel reports it).
  static int NormalizedAxis(const ir::Node& n) {
    int64_t axis = n.GetInt("axis", 0);
    if (axis < 0) axis += 4;
    return axis >= 0 && axis < 4 ? static_cast<int>(axis) : -1;
  }

  // A Concat of NHWC values only (rank 4), along a valid axis: it moves values, in any layout.
  bool ConcatOnNhwc(const ir::Node& n) const {
    if (n.op != ir::OpType::kConcat || n.num_outputs() != 1 || !KnownRank4(n.outputs[0]) ||
        n.num_inputs() == 0 || NormalizedAxis(n) < 0) {
      return false;
    }
    for (const ir::Value* v : n.inputs) {
      if (!v || !nhwc_values_.contains(v)) return false;
    }
    return true;
  }

  // A Resize (opset 11 on: X, roi, scales, sizes) of an NHWC value with constant scales or sizes
  // (4 values, in NCHW axis order) and no roi: each axis is resized on its own, in axis order,
  // so the same resize of the NHWC axes (H and W still in that order) gives the same values.
  bool ResizeOnNhwc(const ir::Node& n) const {
    if (n.op != ir::OpType::kResize || n.since_version < 11 || n.num_outputs() != 1 ||
        !KnownRank4(n.outputs[0]) || !n.input(0) || !nhwc_values_.contains(n.input(0)) ||
        n.has_attr("axes")) {
      return false;
    }
    const ir::Value* roi = n.input(1);
    if (roi && (!roi->constant || roi->constant->num_elements() != 0)) return false;
    bool given = false;
    for (int i : {2, 3}) {
      const ir::Value* v = n.input(i);
      if (!v) continue;
      if (!v->constant) return false;
      const int64_t count = v->constant->num_elements();
      if (count != 0 && count != 4) return false;
      given |= count == 4;
    }
    return given;
  }

  // Constant `v` of 4 values in NCHW axis order ([N, C, H, W]) in NHWC order ([N, H, W, C]).
  absl::StatusOr<ir::Value*> InNhwcOrder(ir::Value* v) {
    auto it = nhwc_order_.find(v);
    if (it != nhwc_order_.end()) return it->second;
    ASSIGN_OR_RETURN(ir::Value * w, g_.AddValue(absl::StrCat(v->name, "::nhwc_order")));
    ASSIGN_OR_RETURN(ir::Tensor t, ir::Tensor::AllocateUninitialized(v->constant->dtype(), {4}));
    const size_t size = DataTypeSize(t.dtype());
    const char* from = static_cast<const char*>(v->constant->raw_data());
    for (int i = 0; i < 4; ++i) {
      std::memcpy(static_cast<char*>(t.raw_data()) + i * size, from + kToNhwc[i] * size, size);
    }
    w->dtype = v->dtype;
    w->shape = ir::Shape::Of({4});
    w->constant = std::move(t);
    nhwc_order_[v] = w;
    return w;
  }

  // Channel constant `v` ([C, 1, 1] or [1, C, 1, 1]) as the [C] row an NHWC operand broadcasts
  // over its last axis: the same values, one value shared by every reader. Its name carries no
  // channels-last marker (the report reads it as the constant it is, not an NHWC tensor).
  absl::StatusOr<ir::Value*> ChannelRow(ir::Value* v) {
    auto it = channel_rows_.find(v);
    if (it != channel_rows_.end()) return it->second;
    const int64_t c = v->constant->num_elements();
    ASSIGN_OR_RETURN(ir::Value * w, g_.AddValue(absl::StrCat(v->name, "::channel_row")));
    w->dtype = v->dtype;
    w->shape = ir::Shape::Of({c});
    w->constant = v->constant->Reshaped({c});
    channel_rows_[v] = w;
    return w;
  }

  // The NHWC twin of NCHW value `v`: one inserted transpose shared by every reader.
  absl::StatusOr<ir::Value*> ToNhwc(ir::Value* v) {
    auto it = to_nhwc_.find(v);
    if (it != to_nhwc_.end()) return it->second;
    ASSIGN_OR_RETURN(ir::Value * w,
                     g_.AddValue(absl::StrCat(v->name, "::", kernels::kChannelsLastSuffix)));
    w->dtype = v->dtype;
    w->shape = Permuted(v->shape, kToNhwc);
    ir::Node* t = v->producer;
    if (t != nullptr && ModelTranspose(*t) && OnlyNhwcXReaders(v)) {
      // v = the model's Transpose of u, read only as X of NHWC nodes: that Transpose writes the
      // NHWC twin directly, the two permutations composed (magika's [N, L, C, 1] -> [N, C, L, 1]
      // -> NHWC [N, L, 1, C] becomes one transpose moving a unit axis).
      const std::vector<int64_t> p = t->GetInts("perm");
      std::vector<int64_t> q(4);
      for (int i = 0; i < 4; ++i) q[i] = p[kToNhwc[i]];
      t->attrs["perm"] = ir::Attribute::Ints(q);
      t->outputs[0] = w;
      w->producer = t;
      ++result_.composed;
      to_nhwc_[v] = w;
      return w;
    }
    AddTranspose(v, w, kToNhwc);
    to_nhwc_[v] = w;
    return w;
  }

  void AddTranspose(ir::Value* from, ir::Value* to, const std::vector<int64_t>& perm) {
    ir::Node* t = g_.AddNode(ir::OpType::kTranspose, absl::StrCat(to->name, "/Transpose"));
    t->since_version = 21;
    t->attrs["perm"] = ir::Attribute::Ints(perm);
    t->inputs = {from};
    t->outputs = {to};
    result_.inserted.push_back(t);
    ++result_.transposes;
  }

  ir::Graph& g_;
  const std::vector<ir::Node*>& live_;
  const std::function<bool(const ir::Node&)>& kernel_ok_;
  absl::flat_hash_set<const ir::Node*> live_set_;
  absl::flat_hash_set<const ir::Node*> nhwc_nodes_;
  absl::flat_hash_set<const ir::Node*> y_only_;        // convolutions reading NCHW X (ReadsNchwX)
  absl::flat_hash_set<const ir::Value*> nhwc_values_;  // NCHW values computed NHWC
  absl::flat_hash_map<ir::Value*, ir::Value*> twin_;   // such a value -> its NHWC value
  std::vector<std::pair<ir::Value*, ir::Value*>> twins_in_order_;  // the same, in order
  absl::flat_hash_map<ir::Value*, ir::Value*> to_nhwc_;            // NCHW value -> transposed copy
  absl::flat_hash_map<ir::Value*, ir::Value*> channel_rows_;       // channel constant -> [C] row
  absl::flat_hash_map<ir::Value*, ir::Value*> nhwc_order_;  // Resize's scales / sizes, permuted
  LayoutResult result_;
};

}  // namespace

bool IsPerChannelDims(const std::vector<int64_t>& dims, int64_t channels) {
  if (channels <= 1 || (dims.size() != 3 && dims.size() != 4)) return false;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] != (i == dims.size() - 3 ? channels : 1)) return false;
  }
  return true;
}

absl::StatusOr<LayoutResult> KeepChannelsLast(
    ir::Graph& graph, const std::vector<ir::Node*>& live,
    const std::function<bool(const ir::Node&)>& channels_last_kernel, spdlog::logger* logger) {
  ASSIGN_OR_RETURN(LayoutResult r, ChannelsLast(graph, live, channels_last_kernel).Run());
  if (logger && r.convolutions > 0) {
    logger->info(
        "layout: {} convolution(s) ({} of them on NCHW X), {} pool, BatchNormalization and LRN "
        "node(s), {} elementwise node(s), {} Concat(s) and {} Resize(s) run channels-last "
        "(NHWC), {} transpose(s) inserted, {} of the model's Transpose(s) composed with a layout "
        "change",
        r.convolutions, r.nchw_x_convolutions, r.pools, r.elementwise, r.concats, r.resizes,
        r.transposes, r.composed);
  }
  return r;
}

}  // namespace kiln::passes
