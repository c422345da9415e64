// QdqToInteger (qdq_integer.h): QDQ MatMul and Conv rewritten onto MatMulInteger / ConvInteger,
// a Cast to fp32 and one Mul by the product of the scales (and the Conv's bias Add), then the
// integer GEMM chains onto ConvIntegerToFloat / MatMulIntegerToFloat (FuseIntegerToFloat,
// integer_to_float.cc); and IntegerSumsExactInFloat, the bound on those integer sums that
// precision lowering reads.
#include "engine/passes/qdq_integer.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/ref/quant_integer.h"

namespace kiln::passes {
namespace {

using precision::Precision;

bool IsInt8(DataType t) { return t == DataType::kU8 || t == DataType::kI8; }

bool IsConstant(const ir::Value* v) {
  return v != nullptr && v->constant.has_value() && !v->is_graph_input;
}

// One DequantizeLinear feeding the rewritten node: its quantized input, scale and zero point.
struct Dequantized {
  ir::Node* node = nullptr;
  ir::Value* q = nullptr;
  const ir::Tensor* scale = nullptr;  // fp32
  ir::Value* zero_point = nullptr;    // null: zero
  int axis = 1;                       // normalised against q's rank (when known)
};

// The DequantizeLinear computing `v` in fp32 from a uint8 / int8 input with constant fp32 scale
// and constant zero point of the input's dtype, not blocked; nullopt for anything else.
std::optional<Dequantized> DequantizedOf(const ir::Value* v) {
  if (v == nullptr || v->dtype != DataType::kF32 || v->producer == nullptr) return std::nullopt;
  ir::Node* dq = v->producer;
  if (dq->op != ir::OpType::kDequantizeLinear || dq->num_inputs() < 2 || !dq->fusion.empty()) {
    return std::nullopt;
  }
  if (dq->GetInt("block_size", 0) != 0) return std::nullopt;
  Dequantized d;
  d.node = dq;
  d.q = dq->inputs[0];
  const ir::Value* s = dq->input(1);
  if (d.q == nullptr || !IsInt8(d.q->dtype) || !IsConstant(s) ||
      s->constant->dtype() != DataType::kF32 || s->constant->rank() > 1) {
    return std::nullopt;
  }
  d.scale = &*s->constant;
  if (ir::Value* z = dq->inputs.size() > 2 ? dq->inputs[2] : nullptr) {
    if (!IsConstant(z) || z->constant->dtype() != d.q->dtype ||
        z->constant->num_elements() != d.scale->num_elements() || z->constant->rank() > 1) {
      return std::nullopt;
    }
    d.zero_point = z;
  }
  int64_t axis = dq->GetInt("axis", 1);
  const int rank = d.q->shape.rank_known ? d.q->shape.rank() : -1;
  if (axis < 0 && rank > 0) axis += rank;
  d.axis = static_cast<int>(axis);
  return d;
}

bool PerTensor(const Dequantized& d) { return d.scale->num_elements() == 1; }

// Per-tensor, or per slice `count` along `axis` of a constant q.
bool PerAxis(const Dequantized& d, int axis, int64_t count) {
  if (PerTensor(d)) return true;
  return d.axis == axis && d.scale->rank() == 1 && d.scale->dim(0) == count;
}

std::string Names(const std::vector<ir::Node*>& nodes) {
  std::vector<std::string> names;
  for (const ir::Node* n : nodes) names.push_back(absl::StrCat("'", n->name, "'"));
  return absl::StrJoin(names, ", ");
}

class Rewriter {
 public:
  Rewriter(ir::Graph& g, const FusionOptions& o, FusionResult& f,
           const std::function<bool(const ir::Node&)>& fast_kernel)
      : g_(g), o_(o), f_(f), fast_kernel_(fast_kernel) {}

  absl::Status Run() {
    if (!o_.enabled) return absl::OkStatus();
    g_.RebuildEdges();
    removed_.assign(g_.nodes().size(), false);
    const size_t count = g_.nodes().size();
    for (size_t i = 0; i < count; ++i) {
      ir::Node* n = g_.nodes()[i].get();
      if (!n->fusion.empty() || n->num_outputs() != 1 || n->outputs[0] == nullptr) continue;
      if (n->op == ir::OpType::kMatMul) RETURN_IF_ERROR(RewriteMatMul(n));
      if (n->op == ir::OpType::kConv) RETURN_IF_ERROR(RewriteConv(n));
    }
    if (rewrites_.empty()) return absl::OkStatus();
    RemoveAbsorbedDequantizers();
    g_.RemoveNodes(removed_);
    return absl::OkStatus();
  }

 private:
  // One rewrite: the integer node, the node it replaced and the DequantizeLinears it reads past.
  struct Rewrite {
    ir::Node* integer;
    std::vector<ir::Node*> dequantizers;
  };

  // MatMul(DQ(qa), DQ(qb)) with qb a constant 2-D matrix.
  absl::Status RewriteMatMul(ir::Node* mm) {
    if (mm->num_inputs() != 2 || mm->outputs[0]->dtype != DataType::kF32) return absl::OkStatus();
    std::optional<Dequantized> a = DequantizedOf(mm->inputs[0]);
    std::optional<Dequantized> b = DequantizedOf(mm->inputs[1]);
    if (!a || !b || !PerTensor(*a) || !IsConstant(b->q) || b->q->constant->rank() != 2) {
      return absl::OkStatus();
    }
    const int64_t n = b->q->constant->dim(1);
    if (!PerAxis(*b, 1, n)) return absl::OkStatus();  // per row of B: not a column factor
    std::vector<ir::Node*> members = {mm, a->node, b->node};
    if (FusionExcluded(o_, {members.begin(), members.end()}, ir::OpType::kMatMulInteger,
                       "qdq-matmul")) {
      return absl::OkStatus();
    }
    ir::Node probe;
    probe.op = ir::OpType::kMatMulInteger;
    probe.since_version = 10;
    probe.inputs = {a->q, b->q, a->zero_point, b->zero_point};
    if (!fast_kernel_(probe)) return absl::OkStatus();  // the fp32 GEMM is faster than that

    const std::vector<int64_t> scale_dims =
        PerTensor(*b) ? std::vector<int64_t>{} : std::vector<int64_t>{n};
    ASSIGN_OR_RETURN(ir::Value * scale, ScaleConstant(*mm, *a, *b, scale_dims));
    ir::Node* integer = NewNode(*mm, ir::OpType::kMatMulInteger, "integer", 10);
    integer->inputs = probe.inputs;
    RETURN_IF_ERROR(ToFloat(mm, integer, scale, nullptr, "qdq-matmul"));
    rewrites_.push_back({integer, {a->node, b->node}});
    Applied("qdq-matmul", members, "MatMulInteger + Cast + Mul");
    return absl::OkStatus();
  }

  // Conv(DQ(qx), DQ(qw) [, B]) with qw a constant 1-D or 2-D convolution weight.
  absl::Status RewriteConv(ir::Node* conv) {
    if (conv->num_inputs() < 2 || conv->num_inputs() > 3 ||
        conv->outputs[0]->dtype != DataType::kF32) {
      return absl::OkStatus();
    }
    std::optional<Dequantized> x = DequantizedOf(conv->inputs[0]);
    std::optional<Dequantized> w = DequantizedOf(conv->inputs[1]);
    if (!x || !w || !PerTensor(*x) || !IsConstant(w->q)) return absl::OkStatus();
    const int rank = w->q->constant->rank();
    if (rank != 3 && rank != 4) return absl::OkStatus();
    const int64_t m = w->q->constant->dim(0);
    if (!PerAxis(*w, 0, m)) return absl::OkStatus();
    ir::Value* bias = conv->num_inputs() == 3 ? conv->inputs[2] : nullptr;
    if (bias != nullptr &&
        (bias->dtype != DataType::kF32 || !bias->shape.rank_known || bias->shape.rank() != 1)) {
      return absl::OkStatus();
    }
    std::vector<ir::Node*> members = {conv, x->node, w->node};
    if (FusionExcluded(o_, {members.begin(), members.end()}, ir::OpType::kConvInteger,
                       "qdq-conv")) {
      return absl::OkStatus();
    }
    ir::Node probe;
    probe.op = ir::OpType::kConvInteger;
    probe.since_version = 10;
    probe.inputs = {x->q, w->q, x->zero_point, w->zero_point};
    probe.attrs = conv->attrs;
    if (!fast_kernel_(probe)) return absl::OkStatus();

    // [M, 1] or [M, 1, 1]: broadcast over Y's [N, M, (H,) W] from the channel axis on.
    std::vector<int64_t> channel_dims(rank - 1, 1);
    channel_dims[0] = m;
    ASSIGN_OR_RETURN(
        ir::Value * scale,
        ScaleConstant(*conv, *x, *w, PerTensor(*w) ? std::vector<int64_t>{} : channel_dims));
    ir::Node* integer = NewNode(*conv, ir::OpType::kConvInteger, "integer", 10);
    integer->inputs = probe.inputs;
    integer->attrs = conv->attrs;
    ir::Value* b = nullptr;
    if (bias != nullptr) {
      // B [M] as [M, 1(, 1)]: a Reshape that constant folding turns into a weight.
      ASSIGN_OR_RETURN(ir::Tensor shape_t,
                       ir::Tensor::Allocate(DataType::kI64, {static_cast<int64_t>(rank - 1)}));
      for (int i = 0; i < rank - 1; ++i) shape_t.data<int64_t>()[i] = channel_dims[i];
      ASSIGN_OR_RETURN(ir::Value * shape, NewConstant(*conv, "bias_shape", std::move(shape_t)));
      ir::Node* reshape = NewNode(*conv, ir::OpType::kReshape, "bias_reshape", 14);
      ASSIGN_OR_RETURN(b, NewValue(*conv, "bias_reshaped", DataType::kF32));
      b->shape = ir::Shape::Of(channel_dims);
      reshape->inputs = {bias, shape};
      reshape->outputs = {b};
      Float(reshape, *conv);
    }
    RETURN_IF_ERROR(ToFloat(conv, integer, scale, b, "qdq-conv"));
    rewrites_.push_back({integer, {x->node, w->node}});
    Applied("qdq-conv", members,
            bias != nullptr ? "ConvInteger + Cast + Mul + Add" : "ConvInteger + Cast + Mul");
    return absl::OkStatus();
  }

  // integer -> Cast(fp32) -> Mul(scale) [-> Add(bias)] into `old`'s output; `old` removed.
  absl::Status ToFloat(ir::Node* old, ir::Node* integer, ir::Value* scale, ir::Value* bias,
                       const char* label) {
    ir::Value* out = old->outputs[0];
    ASSIGN_OR_RETURN(ir::Value * acc, NewValue(*old, "acc", DataType::kI32));
    acc->shape = out->shape;
    integer->outputs = {acc};
    ASSIGN_OR_RETURN(ir::Value * f, NewValue(*old, "acc_f32", DataType::kF32));
    f->shape = out->shape;
    ir::Node* cast = NewNode(*old, ir::OpType::kCast, "to_float", 13);
    cast->inputs = {acc};
    cast->outputs = {f};
    cast->attrs["to"] = ir::Attribute::Int(static_cast<int64_t>(DataType::kF32));
    ir::Node* mul = NewNode(*old, ir::OpType::kMul, "scale", 14);
    mul->inputs = {f, scale};
    if (bias == nullptr) {
      mul->outputs = {out};
    } else {
      ASSIGN_OR_RETURN(ir::Value * scaled, NewValue(*old, "scaled", DataType::kF32));
      scaled->shape = out->shape;
      mul->outputs = {scaled};
      ir::Node* add = NewNode(*old, ir::OpType::kAdd, "bias", 14);
      add->inputs = {scaled, bias};
      add->outputs = {out};
      Float(add, *old);
      add->fusion = label;
    }
    for (ir::Node* n : {integer, cast, mul}) {
      Float(n, *old);
      n->fusion = label;
    }
    removed_[old->id] = true;
    for (int s : old->sources) f_.effective[s] = Precision::kFp32;
    return absl::OkStatus();
  }

  // The fp32 products scale_a * scale_b[j] (as ONNX Runtime multiplies them), shaped `dims`.
  absl::StatusOr<ir::Value*> ScaleConstant(const ir::Node& old, const Dequantized& a,
                                           const Dequantized& b, const std::vector<int64_t>& dims) {
    ASSIGN_OR_RETURN(ir::Tensor t, ir::Tensor::Allocate(DataType::kF32, dims));
    const float sa = a.scale->data<float>()[0];
    const float* sb = b.scale->data<float>();
    for (int64_t j = 0; j < t.num_elements(); ++j) {
      t.data<float>()[j] = sa * sb[b.scale->num_elements() == 1 ? 0 : j];
    }
    return NewConstant(old, "scale_product", std::move(t));
  }

  // A node "<old>/<part>" implementing `old` (its sources; the dequantizers' are added once
  // they are removed), computing in fp32.
  ir::Node* NewNode(const ir::Node& old, ir::OpType op, const char* part, int since_version) {
    ir::Node* n = g_.AddNode(op, absl::StrCat(BaseName(old), "/", part));
    n->since_version = since_version;
    n->sources = old.sources;
    removed_.push_back(false);
    return n;
  }

  void Float(ir::Node* n, const ir::Node& old) {
    n->sources = old.sources;
    f_.precision[n] = Precision::kFp32;
  }

  absl::StatusOr<ir::Value*> NewValue(const ir::Node& old, const char* part, DataType dt) {
    ASSIGN_OR_RETURN(ir::Value * v, g_.AddValue(absl::StrCat(old.outputs[0]->name, "/", part)));
    v->dtype = dt;
    return v;
  }

  absl::StatusOr<ir::Value*> NewConstant(const ir::Node& old, const char* part, ir::Tensor t) {
    ASSIGN_OR_RETURN(ir::Value * v, NewValue(old, part, t.dtype()));
    v->shape = ir::Shape::Of(t.dims());
    v->constant = std::move(t);
    return v;
  }

  static std::string BaseName(const ir::Node& n) {
    return n.name.empty() ? n.outputs[0]->name : n.name;
  }

  void Applied(const char* label, const std::vector<ir::Node*>& members, const char* into) {
    f_.applied.push_back(absl::StrCat(label, ": ", members.size(), " nodes (", Names(members),
                                      ") -> ", into, " at fp32 (integer sum)"));
  }

  // A dequantizer every reader of which was rewritten goes, and the integer nodes reading past
  // it take its sources; one with other readers (or a graph output) stays for them.
  void RemoveAbsorbedDequantizers() {
    for (const Rewrite& r : rewrites_) {
      for (ir::Node* dq : r.dequantizers) {
        const ir::Value* v = dq->outputs[0];
        bool needed = v->is_graph_output;
        for (const ir::Node* c : v->consumers) needed |= !removed_[c->id];
        if (needed) continue;
        removed_[dq->id] = true;
        for (int s : dq->sources) {
          if (std::find(r.integer->sources.begin(), r.integer->sources.end(), s) ==
              r.integer->sources.end()) {
            r.integer->sources.push_back(s);
          }
          f_.effective[s] = Precision::kFp32;
        }
      }
    }
  }

  ir::Graph& g_;
  const FusionOptions& o_;
  FusionResult& f_;
  const std::function<bool(const ir::Node&)>& fast_kernel_;
  std::vector<bool> removed_;
  std::vector<Rewrite> rewrites_;
};

}  // namespace

namespace {

// The largest |q - z| over the values of a uint8 / int8 input against its per-tensor constant
// zero point `z` (null: zero); -1 for any other input.
int64_t MaxCentered(const ir::Value* q, const ir::Value* z) {
  if (q == nullptr || !IsInt8(q->dtype)) return -1;
  int64_t zero = 0;
  if (z != nullptr) {
    if (!IsConstant(z) || z->constant->num_elements() != 1) return -1;
    zero = static_cast<int64_t>(ir::ElementAsDouble(*z->constant, 0));
  }
  const int64_t lo = q->dtype == DataType::kU8 ? 0 : -128;
  const int64_t hi = q->dtype == DataType::kU8 ? 255 : 127;
  return std::max(zero - lo, hi - zero);
}

// The largest sum of |w - zw| over one slice of the constant uint8 / int8 weight `w` along
// `axis` (1: the columns of a MatMul's B [K, N]; 0: a convolution's output channels), zw (null:
// zero) per tensor or per slice; -1 for any other form.
int64_t MaxSliceAbsSum(const ir::Value* w, const ir::Value* zw, int axis) {
  if (!IsConstant(w) || !IsInt8(w->constant->dtype()) || w->constant->rank() <= axis) return -1;
  const ir::Tensor& t = *w->constant;
  const int64_t slices = t.dim(axis);
  if (slices == 0) return 0;
  if (axis == 1 && t.rank() != 2) return -1;
  const ir::Tensor* z = nullptr;
  if (zw != nullptr) {
    if (!IsConstant(zw)) return -1;
    z = &*zw->constant;
    if (z->num_elements() != 1 && z->num_elements() != slices) return -1;
  }
  const int64_t outer = axis == 0 ? 1 : t.dim(0);
  const int64_t inner = axis == 0 ? t.num_elements() / slices : 1;
  const bool is_signed = t.dtype() == DataType::kI8;
  int64_t worst = 0;
  for (int64_t j = 0; j < slices; ++j) {
    const int64_t zero =
        z == nullptr
            ? 0
            : static_cast<int64_t>(ir::ElementAsDouble(*z, z->num_elements() == 1 ? 0 : j));
    int64_t sum = 0;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t e = (o * slices + j) * inner + i;
        const int64_t q = is_signed ? t.data<int8_t>()[e] : t.data<uint8_t>()[e];
        sum += q > zero ? q - zero : zero - q;
      }
    }
    worst = std::max(worst, sum);
  }
  return worst;
}

}  // namespace

bool IntegerSumsExactInFloat(const ir::Node& integer) {
  int axis;
  if (integer.op == ir::OpType::kMatMulInteger) {
    axis = 1;
  } else if (integer.op == ir::OpType::kConvInteger) {
    axis = 0;
  } else {
    return false;
  }
  const int64_t a = MaxCentered(integer.input(0), integer.input(2));
  const int64_t w = MaxSliceAbsSum(integer.input(1), integer.input(3), axis);
  return a >= 0 && w >= 0 && a * w <= (int64_t{1} << 24);
}

absl::StatusOr<int> QdqToInteger(ir::Graph& graph, const FusionOptions& options,
                                 FusionResult& fusion,
                                 const std::function<bool(const ir::Node&)>& fast_kernel,
                                 spdlog::logger* logger, const precision::Assignment* assignment) {
  const size_t before = fusion.applied.size();
  RETURN_IF_ERROR(Rewriter(graph, options, fusion, fast_kernel).Run());
  // A rewritten MatMul's Cast + Mul fuse into its MatMulIntegerToFloat unless precision lowering
  // may make them one DequantizeLinear rounding to fp16 / bf16 (precision_lowering.cc's
  // DequantizeToReaders: sums exact in fp32 and every source of the MatMul assigned that
  // precision); without the assignment, only where the sums are not exact.
  auto fuse_qdq = [&](const ir::Node& integer, const ir::Node& mul) {
    if (!IntegerSumsExactInFloat(integer)) return true;
    if (assignment == nullptr) return false;
    for (int s : mul.sources) {
      if (s < 0 || s >= static_cast<int>(assignment->nodes.size())) return false;
      const precision::NodeAssignment& a = assignment->nodes[s];
      const DataType t = precision::PrecisionDataType(a.assigned);
      if (!a.floating || (t != DataType::kF16 && t != DataType::kBF16)) return true;
    }
    return false;
  };
  RETURN_IF_ERROR(FuseIntegerToFloat(graph, options, fusion, fast_kernel, fuse_qdq).status());
  if (logger != nullptr) {
    for (size_t i = before; i < fusion.applied.size(); ++i) {
      logger->info("fusion {}", fusion.applied[i]);
    }
  }
  return static_cast<int>(fusion.applied.size() - before);
}

}  // namespace kiln::passes
