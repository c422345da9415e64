#include "engine/passes/precision_lowering.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/common/half.h"
#include "engine/common/status.h"
#include "engine/passes/qdq_integer.h"

namespace kiln::passes {
namespace {

using precision::Precision;

// Slots whose dtype the op fixes regardless of the compute precision.
bool FixedInput(const ir::Node& n, int i) {
  switch (n.op) {
    case ir::OpType::kResize:
      return i == 1 || i == 2;  // roi, scales
    case ir::OpType::kUpsample:
      return i == 1;  // scales
    case ir::OpType::kQuantizeLinear:
    case ir::OpType::kDequantizeLinear:
    case ir::OpType::kDynamicQuantizeLinear:
    case ir::OpType::kQLinearConv:
    case ir::OpType::kQLinearMatMul:
      return true;  // quantization keeps fp32 scales
    case ir::OpType::kBitCast:
      return true;  // the bits of the authored dtype: fp16 bits reinterpreted are not fp32's
    case ir::OpType::kLSTMQuantizedR:
      return i == 8;  // R_scale: a dequantization scale, fp32 as DequantizeLinear's
    default:
      return false;
  }
}

bool FixedOutput(const ir::Node& n, int k) {
  switch (n.op) {
    case ir::OpType::kLayerNormalization:
      return k > 0;  // Mean, InvStdDev follow stash_type
    case ir::OpType::kQuantizeLinear:
    case ir::OpType::kDequantizeLinear:
    case ir::OpType::kDynamicQuantizeLinear:
    case ir::OpType::kBitCast:  // the `to` dtype, whatever the precision
      return true;
    default:
      return false;
  }
}

// Element-wise conversion of a floating tensor to another floating dtype (RNE).
absl::StatusOr<ir::Tensor> ConvertFloatTensor(const ir::Tensor& t, DataType to) {
  ASSIGN_OR_RETURN(ir::Tensor out, ir::Tensor::Allocate(to, t.dims()));
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    double v = ir::ElementAsDouble(t, i);
    switch (to) {
      case DataType::kF32:
        out.data<float>()[i] = static_cast<float>(v);
        break;
      case DataType::kF64:
        out.data<double>()[i] = v;
        break;
      case DataType::kF16:
        out.data<uint16_t>()[i] = FloatToHalfBits(static_cast<float>(v));
        break;
      case DataType::kBF16:
        out.data<uint16_t>()[i] = FloatToBFloat16Bits(static_cast<float>(v));
        break;
      default:
        return absl::InternalError(absl::StrCat("cannot convert to ", DataTypeOnnxName(to)));
    }
  }
  return out;
}

// True when the registry has a kernel for `op` over `dtype` keyed on a floating slot, or keyed
// on a non-floating slot (whose kernel then handles every floating dtype it is given).
bool HasKernelAt(const kernels::Registry& reg, const ir::Node& n, DataType dtype) {
  for (const kernels::KernelDef& d : reg.defs()) {
    if (d.op != n.op) continue;
    DataType key = kernels::KernelKeyType(n, d.type_source);
    if (!IsFloating(key)) return true;
    if (std::find(d.dtypes.begin(), d.dtypes.end(), dtype) != d.dtypes.end()) return true;
  }
  return false;
}

class Lowering {
 public:
  Lowering(ir::Graph& g, const precision::Assignment& a, const FusionResult& f,
           precision::Constraints c, const kernels::Registry& reg, spdlog::logger* logger)
      : g_(g), a_(a), f_(f), constraints_(c), reg_(reg), logger_(logger) {}

  absl::StatusOr<LoweringResult> Run() {
    int sources = static_cast<int>(a_.nodes.size());
    result_.effective.resize(sources);
    result_.fallback_reason.resize(sources);
    for (int i = 0; i < sources; ++i) {
      auto fused = f_.effective.find(i);
      result_.effective[i] = fused != f_.effective.end() ? fused->second : a_.nodes[i].assigned;
    }
    if (a_.strong_typing) return std::move(result_);
    ASSIGN_OR_RETURN(std::vector<ir::Node*> order, g_.TopologicalOrder());
    authored_.resize(g_.values().size());
    for (const auto& v : g_.values()) authored_[v->id] = v->dtype;
    for (ir::Node* n : order) RETURN_IF_ERROR(LowerNode(*n));
    g_.RebuildEdges();
    RETURN_IF_ERROR(DequantizeToReaders());
    RETURN_IF_ERROR(KeepGraphOutputTypes());
    g_.RebuildEdges();
    return std::move(result_);
  }

 private:
  absl::Status LowerNode(ir::Node& n) {
    // A fused node computes at its fused precision; a source node at its assignment; nodes a
    // pass inserted are already typed.
    Precision p;
    std::string rule;
    auto fused = f_.precision.find(&n);
    if (fused != f_.precision.end()) {
      p = fused->second;
      rule = absl::StrCat("fusion ", n.fusion);
    } else if (n.sources.size() == 1) {
      const precision::NodeAssignment& na = a_.nodes[n.sources[0]];
      p = na.floating ? na.assigned : Precision::kFp32;
      rule = na.rule;
    } else {
      return absl::OkStatus();
    }
    DataType pdt = precision::PrecisionDataType(p);
    if (p != Precision::kFp32 && !HasKernelAt(reg_, n, pdt)) {
      std::string why = absl::StrCat(n.Label(), " has no ", precision::PrecisionName(p),
                                     " kernel for ", ir::OpName(n.op));
      if (constraints_ == precision::Constraints::kObey) {
        return absl::UnimplementedError(absl::StrCat(
            why, " (assigned by ", rule, "; use --constraints prefer to run it in fp32)"));
      }
      if (logger_) logger_->warn("{}; runs in fp32", why);
      for (int s : n.sources) {
        result_.fallback_reason[s] = why;
        result_.effective[s] = Precision::kFp32;
      }
      p = Precision::kFp32;
      pdt = DataType::kF32;
    }
    if (p != Precision::kFp32) {
      ASSIGN_OR_RETURN(const std::string overflow, WeightOverflow(n, pdt));
      if (!overflow.empty()) {
        const std::string why =
            absl::StrCat(n.Label(), n.op == ir::OpType::kConstant ? " holds " : " reads ", overflow,
                         " beyond the ", precision::PrecisionName(p), " range");
        const bool pinned = n.sources.size() == 1 && !a_.nodes[n.sources[0]].matched.empty();
        if (pinned && constraints_ == precision::Constraints::kObey) {
          return absl::InvalidArgumentError(absl::StrCat(
              why, " (assigned by ", rule, "; use --constraints prefer to run it in fp32)"));
        }
        result_.warnings.push_back(absl::StrCat(why, ": it runs in fp32"));
        if (logger_) logger_->warn("{}", result_.warnings.back());
        for (int s : n.sources) {
          result_.fallback_reason[s] = why;
          result_.effective[s] = Precision::kFp32;
        }
        p = Precision::kFp32;
        pdt = DataType::kF32;
      }
    }
    for (int i = 0; i < n.num_inputs(); ++i) {
      ir::Value* v = n.inputs[i];
      if (!v || !IsFloating(v->dtype)) continue;
      // The dtype this node reads the slot at: T-typed slots follow the node's precision, fixed
      // ones and authored non-fp32 ones (double) keep their authored dtype.
      DataType want = authored_[v->id];
      // If / Loop / Scan / SequenceMap feed their subgraphs the authored types: the subgraphs'
      // interfaces keep them, as an engine's do (their nodes are lowered inside). Sequences and
      // optionals keep their authored types too (a Cast takes no sequence).
      const bool authored_types = ir::HasSubgraphs(n.op) || n.TouchesContainers();
      if (!FixedInput(n, i) && Retypable(want) && !authored_types) want = pdt;
      // QuantizeLinear widens an fp16 / bf16 x exactly and divides in fp32 by its fp32 scale:
      // it reads x at whatever float dtype its producer wrote (what a Cast to fp32 would give).
      if (n.op == ir::OpType::kQuantizeLinear && i == 0 && Retypable(v->dtype)) want = v->dtype;
      if (v->dtype != want) {
        ASSIGN_OR_RETURN(n.inputs[i], Convert(v, want, n));
      }
    }
    bool changed_output = false;
    for (int k = 0; k < n.num_outputs(); ++k) {
      ir::Value* v = n.outputs[k];
      if (!v || !Retypable(authored_[v->id]) || FixedOutput(n, k)) continue;
      if (n.TouchesContainers()) continue;  // authored types, as its inputs
      if (v->dtype == pdt) continue;
      changed_output = true;
      Record(v->name, v->dtype, pdt,
             absl::StrCat("output of ", n.Label(), " at ", precision::PrecisionName(p)));
      v->dtype = pdt;
    }
    if (changed_output) RETURN_IF_ERROR(RetypeAttributes(n, pdt));
    return absl::OkStatus();
  }

  // The first constant of `n` that `pdt` would retype and whose finite values do not fit it
  // ("weight 'w' (max |x| 9.8e+07)"), or "" when all fit: a Constant node's own value, and each
  // input that is a weight or the output of a Constant node (exporters such as Paddle2ONNX write
  // weights so). bf16 holds every finite fp32 but the largest; fp16 stops at 65504.
  absl::StatusOr<std::string> WeightOverflow(const ir::Node& n, DataType pdt) const {
    const double limit = pdt == DataType::kF16 ? 65504.0 : 3.3895313892515355e38;
    auto too_large = [&](const ir::Tensor& t) {
      if (!IsFloating(t.dtype()) || t.dtype() == pdt) return 0.0;
      double max_abs = 0;
      if (t.dtype() == DataType::kF32) {  // the common case, without a per-element switch
        float m = 0;
        const float* d = t.data<float>();
        for (int64_t e = 0; e < t.num_elements(); ++e) {
          const float x = std::fabs(d[e]);
          if (x > m && x <= std::numeric_limits<float>::max()) m = x;
        }
        max_abs = m;
      } else {
        for (int64_t e = 0; e < t.num_elements(); ++e) {
          const double x = std::fabs(ir::ElementAsDouble(t, e));
          if (std::isfinite(x)) max_abs = std::max(max_abs, x);
        }
      }
      return max_abs > limit ? max_abs : 0.0;
    };
    auto describe = [](const std::string& name, double max_abs) {
      return absl::StrCat("weight '", name, "' (max |x| ", absl::StrFormat("%.3g", max_abs), ")");
    };
    if (n.op == ir::OpType::kConstant) {
      const ir::Attribute* a = n.attr("value");
      if (a && a->type == ir::Attribute::Type::kTensor && n.outputs[0]) {
        if (double m = too_large(a->t); m > 0) return describe(n.outputs[0]->name, m);
      }
    }
    for (int i = 0; i < n.num_inputs(); ++i) {
      const ir::Value* v = n.inputs[i];
      if (!v || !IsFloating(v->dtype) || FixedInput(n, i)) continue;
      if (v->id >= static_cast<int>(authored_.size()) || !Retypable(authored_[v->id])) continue;
      const ir::Tensor* t = v->constant ? &*v->constant : nullptr;
      if (t == nullptr && v->producer && v->producer->op == ir::OpType::kConstant) {
        const ir::Attribute* a = v->producer->attr("value");
        if (a && a->type == ir::Attribute::Type::kTensor) t = &a->t;
      }
      if (t == nullptr) continue;
      if (double m = too_large(*t); m > 0) return describe(v->name, m);
    }
    return std::string();
  }

  // Floating slots the assignment may retype: fp32 always, fp16/bf16 too (they are authored only
  // under weak typing here; strong typing returns before lowering). f64 stays as authored.
  static bool Retypable(DataType t) { return IsF32OrHalf(t); }

  // Ops whose output dtype is an attribute follow the new output dtype.
  absl::Status RetypeAttributes(ir::Node& n, DataType pdt) {
    const ir::Value* out = n.outputs.empty() ? nullptr : n.outputs[0];
    if (!out || out->dtype != pdt) return absl::OkStatus();
    switch (n.op) {
      case ir::OpType::kCast:
        n.attrs["to"] = ir::Attribute::Int(static_cast<int64_t>(pdt));
        break;
      case ir::OpType::kEyeLike:
        n.attrs["dtype"] = ir::Attribute::Int(static_cast<int64_t>(pdt));
        break;
      case ir::OpType::kHannWindow:
      case ir::OpType::kHammingWindow:
      case ir::OpType::kBlackmanWindow:
      case ir::OpType::kMelWeightMatrix:
        n.attrs["output_datatype"] = ir::Attribute::Int(static_cast<int64_t>(pdt));
        break;
      case ir::OpType::kConstant:
      case ir::OpType::kConstantOfShape: {
        auto it = n.attrs.find("value");
        if (it != n.attrs.end() && it->second.type == ir::Attribute::Type::kTensor) {
          ASSIGN_OR_RETURN(it->second.t, ConvertFloatTensor(it->second.t, pdt));
        } else if (n.op == ir::OpType::kConstantOfShape) {
          ir::Attribute a;  // the default value, float 0, in the new dtype
          a.type = ir::Attribute::Type::kTensor;
          ASSIGN_OR_RETURN(a.t, ir::Tensor::Allocate(pdt, {1}));
          n.attrs["value"] = std::move(a);
        } else {
          // value_float(s): make it a tensor attribute of the new dtype.
          for (const char* key : {"value_float", "value_floats"}) {
            auto f = n.attrs.find(key);
            if (f == n.attrs.end()) continue;
            std::vector<float> vals = f->second.type == ir::Attribute::Type::kFloat
                                          ? std::vector<float>{f->second.f}
                                          : f->second.floats;
            std::vector<int64_t> dims;
            if (f->second.type != ir::Attribute::Type::kFloat) {
              dims.push_back(static_cast<int64_t>(vals.size()));
            }
            ASSIGN_OR_RETURN(ir::Tensor src, ir::Tensor::Allocate(DataType::kF32, dims));
            std::copy(vals.begin(), vals.end(), src.data<float>());
            ir::Attribute a;
            a.type = ir::Attribute::Type::kTensor;
            ASSIGN_OR_RETURN(a.t, ConvertFloatTensor(src, pdt));
            n.attrs.erase(f);
            n.attrs["value"] = std::move(a);
            break;
          }
        }
        break;
      }
      default:
        break;
    }
    return absl::OkStatus();
  }

  // The value `v` at dtype `to`: a converted copy of a constant (weights are stored in the
  // precision that reads them), or the output of one inserted Cast shared by every consumer.
  absl::StatusOr<ir::Value*> Convert(ir::Value* v, DataType to, const ir::Node& consumer) {
    auto key = std::make_pair(v->id, to);
    auto it = converted_.find(key);
    if (it != converted_.end()) return it->second;
    std::string name = absl::StrCat(v->name, "::", DataTypeName(to));
    ASSIGN_OR_RETURN(ir::Value * out, g_.AddValue(name));
    authored_.push_back(DataType::kUndefined);  // not in the authored model
    out->dtype = to;
    out->shape = v->shape;
    if (v->constant) {
      ASSIGN_OR_RETURN(out->constant, ConvertFloatTensor(*v->constant, to));
      ++result_.converted_weights;
      Record(name, v->dtype, to,
             absl::StrCat("weight '", v->name, "' stored in ", DataTypeName(to), " for ",
                          consumer.Label()));
    } else {
      ir::Node* cast = g_.AddNode(ir::OpType::kCast, absl::StrCat(name, "/Cast"));
      cast->since_version = 21;
      cast->attrs["to"] = ir::Attribute::Int(static_cast<int64_t>(to));
      cast->inputs = {v};
      cast->outputs = {out};
      ++result_.inserted_conversions;
      inserted_[cast] = result_.changes.size();
      Record(name, v->dtype, to, absl::StrCat("conversion inserted for ", consumer.Label()));
    }
    converted_[key] = out;
    return out;
  }

  // Dequantization rounded once to its reader's dtype, in place of an inserted conversion of an
  // fp32 result to fp16 / bf16 that is its only reader, where that dtype is the precision every
  // source of the producer was assigned (rounding there is what the assignment asks, DESIGN.md
  // §5): a DequantizeLinear writes that dtype itself (output_dtype, opset 23), and the Cast +
  // Mul of a qdq-integer rewrite whose int32 sums are exact in fp32 (IntegerSumsExactInFloat)
  // become one such DequantizeLinear of the sums. Both compute the fp32 result (for int32 data
  // the double product rounded to fp32) and round it once: the converted bits. The effective
  // precision of the sources becomes the assigned one (the MatMul of a qdq-integer rewrite, run
  // in fp32 until now, rounds its output so). Graph outputs keep their authored dtype.
  absl::Status DequantizeToReaders() {
    std::vector<bool> removed(g_.nodes().size(), false);
    bool any = false;
    for (const auto& node : g_.nodes()) {
      auto it = inserted_.find(node.get());
      if (it == inserted_.end()) continue;
      ir::Node* conversion = node.get();
      ir::Value* converted = conversion->outputs[0];
      ir::Value* v = conversion->inputs[0];
      const DataType to = converted->dtype;
      if ((to != DataType::kF16 && to != DataType::kBF16) || v->dtype != DataType::kF32 ||
          v->is_graph_output || v->consumers.size() != 1 || v->producer == nullptr) {
        continue;
      }
      ir::Node& p = *v->producer;
      if (p.sources.empty() || p.num_outputs() != 1) continue;
      bool assigned = true;
      for (int s : p.sources) {
        assigned &=
            a_.nodes[s].floating && precision::PrecisionDataType(a_.nodes[s].assigned) == to;
      }
      if (!assigned) continue;
      if (p.op == ir::OpType::kMul) {
        ASSIGN_OR_RETURN(ir::Node * cast, IntegerDequantization(p));
        if (cast == nullptr) continue;
        removed[cast->id] = true;
      } else if (p.op != ir::OpType::kDequantizeLinear) {
        continue;
      }
      // The conversion's readers read v, now of its dtype.
      for (ir::Node* c : std::vector<ir::Node*>(converted->consumers)) {
        for (ir::Value*& in : c->inputs) {
          if (in == converted) in = v;
        }
      }
      Record(v->name, v->dtype, to,
             absl::StrCat("output of ", p.Label(), " rounded once to ", DataTypeName(to),
                          " (dequantized in fp32), in place of an inserted conversion"));
      v->dtype = to;
      p.attrs["output_dtype"] = ir::Attribute::Int(static_cast<int64_t>(to));
      p.since_version = std::max(p.since_version, 23);
      for (int s : p.sources) result_.effective[s] = a_.nodes[s].assigned;
      result_.changes[it->second].reason.clear();  // dropped below
      --result_.inserted_conversions;
      removed[conversion->id] = true;
      any = true;
    }
    if (!any) return absl::OkStatus();
    std::erase_if(result_.changes, [](const DtypeChange& c) { return c.reason.empty(); });
    inserted_.clear();  // indices into changes, stale now
    g_.RemoveNodes(removed);
    return absl::OkStatus();
  }

  // `mul`, the Mul(Cast(int32 sums), scale) of a qdq-integer rewrite whose sums are exact in fp32,
  // made a DequantizeLinear of the sums (opset 13 form: scale [] or 1-D with its axis); returns
  // the Cast, which goes, or null (and `mul` unchanged) for any other node.
  absl::StatusOr<ir::Node*> IntegerDequantization(ir::Node& mul) {
    if ((mul.fusion != "qdq-matmul" && mul.fusion != "qdq-conv") || mul.num_inputs() != 2) {
      return nullptr;
    }
    ir::Value* f = mul.inputs[0];
    ir::Value* scale = mul.inputs[1];
    if (f == nullptr || f->is_graph_output || f->consumers.size() != 1 || scale == nullptr ||
        !scale->constant || scale->constant->dtype() != DataType::kF32) {
      return nullptr;
    }
    ir::Node* cast = f->producer;
    if (cast == nullptr || cast->op != ir::OpType::kCast || cast->fusion != mul.fusion) {
      return nullptr;
    }
    ir::Value* acc = cast->inputs[0];
    if (acc == nullptr || acc->dtype != DataType::kI32 || acc->producer == nullptr ||
        !IntegerSumsExactInFloat(*acc->producer)) {
      return nullptr;
    }
    // The scale: one value, [N] over a MatMul's last axis, or [M, 1(, 1)] over a Conv's axis 1.
    const ir::Tensor& t = *scale->constant;
    int axis = 0;
    if (t.num_elements() != 1) {
      if (mul.fusion == "qdq-matmul" && t.rank() == 1) {
        axis = -1;
      } else if (mul.fusion == "qdq-conv" && t.rank() >= 2 && t.dim(0) == t.num_elements()) {
        axis = 1;
        ASSIGN_OR_RETURN(ir::Value * flat, g_.AddValue(absl::StrCat(scale->name, "::1d")));
        authored_.push_back(DataType::kUndefined);
        ir::Tensor c = t.Clone().Reshaped({t.num_elements()});  // its values as [M]
        flat->dtype = DataType::kF32;
        flat->shape = ir::Shape::Of(c.dims());
        flat->constant = std::move(c);
        scale = flat;
      } else {
        return nullptr;
      }
    }
    mul.op = ir::OpType::kDequantizeLinear;
    mul.inputs = {acc, scale};
    mul.attrs.clear();
    if (axis != 0) mul.attrs["axis"] = ir::Attribute::Int(axis);
    return cast;
  }

  // Graph outputs keep their authored name and dtype: the lowered value is renamed and a final
  // conversion produces the authored one.
  absl::Status KeepGraphOutputTypes() {
    for (ir::Value*& out : g_.outputs()) {
      DataType authored = authored_[out->id];
      if (out->dtype == authored) continue;
      std::string name = out->name;
      RETURN_IF_ERROR(g_.RenameValue(out, absl::StrCat(name, "::", DataTypeName(out->dtype))));
      ASSIGN_OR_RETURN(ir::Value * final_out, g_.AddValue(name));
      authored_.push_back(authored);
      final_out->dtype = authored;
      final_out->shape = out->shape;
      ir::Node* cast = g_.AddNode(ir::OpType::kCast, absl::StrCat(name, "/Cast"));
      cast->since_version = 21;
      cast->attrs["to"] = ir::Attribute::Int(static_cast<int64_t>(authored));
      cast->inputs = {out};
      cast->outputs = {final_out};
      ++result_.inserted_conversions;
      Record(
          out->name, authored, out->dtype,
          absl::StrCat("graph output '", name, "' converted back to ", DataTypeOnnxName(authored)));
      out = final_out;
    }
    return absl::OkStatus();
  }

  void Record(const std::string& value, DataType from, DataType to, std::string reason) {
    result_.changes.push_back(DtypeChange{value, from, to, std::move(reason)});
  }

  ir::Graph& g_;
  const precision::Assignment& a_;
  const FusionResult& f_;
  precision::Constraints constraints_;
  const kernels::Registry& reg_;
  spdlog::logger* logger_;
  LoweringResult result_;
  std::vector<DataType> authored_;  // per value id: dtype in the authored model
  std::map<std::pair<int, DataType>, ir::Value*> converted_;
  std::map<const ir::Node*, size_t> inserted_;  // inserted conversion -> its entry in changes
};

}  // namespace

absl::StatusOr<LoweringResult> LowerPrecision(
    ir::Graph& graph, const precision::Assignment& assignment, const FusionResult& fusion,
    precision::Constraints constraints, const kernels::Registry& registry, spdlog::logger* logger) {
  return Lowering(graph, assignment, fusion, constraints, registry, logger).Run();
}

}  // namespace kiln::passes
