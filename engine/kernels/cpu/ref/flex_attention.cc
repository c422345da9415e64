// Reference kernel of ai.onnx.preview FlexAttention: attention over rank-4 Q [B, Hq, L, E],
// K [B, Hkv, S, E], V [B, Hkv, S, Ev] (query head h reads K/V head h / (Hq / Hkv)), with two
// optional modifier subgraphs run by the runtime like If/Loop bodies (KernelContext::subgraph):
//
//   scores = (Q K^T) * scale        [B, Hq, L, S], scale defaulting to 1/sqrt(E)
//   scores = score_mod(scores)      if given
//   probs  = softmax(scores, axis -1)
//   probs  = prob_mod(probs)        if given
//   Y      = probs V                [B, Hq, L, Ev]
//
// scores and probs are tensors of the softmax precision (softmax_precision, by default float32,
// or double for double inputs): that is what the subgraphs take and give. Dot products
// accumulate in double; Y is rounded once to the inputs' dtype.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

// The dtype of scores and probs: softmax_precision, else float32 (double for double inputs).
absl::StatusOr<DataType> SoftmaxType(const ir::Node& node, DataType input) {
  const ir::Attribute* a = node.attr("softmax_precision");
  if (a == nullptr) return input == DataType::kF64 ? DataType::kF64 : DataType::kF32;
  const DataType dt = a->type == ir::Attribute::Type::kInt && a->i >= 0 && a->i <= INT32_MAX
                          ? DataTypeFromOnnx(static_cast<int32_t>(a->i))
                          : DataType::kUndefined;
  if (!IsFloating(dt)) {
    return InvalidNode(node,
                       "softmax_precision must name a floating dtype (float, float16, "
                       "bfloat16, double), got ",
                       a->i);
  }
  return dt;
}

absl::Status CheckFlexAttention(const ir::Node& node) {
  const ir::Attribute* scale = node.attr("scale");
  if (scale != nullptr && scale->type != ir::Attribute::Type::kFloat) {
    return InvalidNode(node, "attribute 'scale' must be a float");
  }
  return SoftmaxType(node, DataType::kF32).status();
}

// Runs modifier `attr` on `t` in place when the node has it; the output must keep t's shape.
absl::Status ApplyModifier(const ir::Node& node, KernelContext& ctx, const char* attr,
                           ir::Tensor& t) {
  if (!node.has_attr(attr)) return absl::OkStatus();
  SubgraphRunner* runner = ctx.subgraph(attr);
  if (runner == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        node.Label(), " subgraph '", attr, "' cannot run here (it runs only in a session)"));
  }
  const int captured = static_cast<int>(node.GetInt(ir::kCapturedInputsAttr, 0));
  std::vector<const ir::Tensor*> inputs = {&t};
  for (int i = ctx.num_inputs() - captured; i < ctx.num_inputs(); ++i) {
    inputs.push_back(ctx.input(i));
  }
  ASSIGN_OR_RETURN(std::vector<ir::Tensor> outs, runner->Run(inputs));
  if (outs.size() != 1 || outs[0].dims() != t.dims() || outs[0].dtype() != t.dtype()) {
    return InvalidNode(node, "subgraph '", attr, "' must give one ", DataTypeOnnxName(t.dtype()),
                       " tensor of shape ", ir::DimsToString(t.dims()), ", got ",
                       outs.empty() ? std::string("none")
                                    : absl::StrCat(DataTypeOnnxName(outs[0].dtype()),
                                                   ir::DimsToString(outs[0].dims())));
  }
  if (t.byte_size() > 0) std::memcpy(t.raw_data(), outs[0].raw_data(), t.byte_size());
  return absl::OkStatus();
}

// Reads element i of a floating tensor as double.
double At(const ir::Tensor& t, int64_t i) { return ir::ElementAsDouble(t, i); }

absl::Status RunFlexAttention(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* q, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* k, RequireInput(node, ctx, 1));
  ASSIGN_OR_RETURN(const ir::Tensor* v, RequireInput(node, ctx, 2));
  if (q->rank() != 4 || k->rank() != 4 || v->rank() != 4) {
    return InvalidNode(node, "Q, K and V must be rank 4, got ", ir::DimsToString(q->dims()), ", ",
                       ir::DimsToString(k->dims()), " and ", ir::DimsToString(v->dims()));
  }
  if (k->dtype() != q->dtype() || v->dtype() != q->dtype()) {
    return InvalidNode(node, "Q, K and V must share one dtype, got ", DataTypeOnnxName(q->dtype()),
                       ", ", DataTypeOnnxName(k->dtype()), " and ", DataTypeOnnxName(v->dtype()));
  }
  const int64_t b = q->dim(0), hq = q->dim(1), l = q->dim(2), e = q->dim(3);
  const int64_t hkv = k->dim(1), s = k->dim(2), ev = v->dim(3);
  if (k->dim(0) != b || v->dim(0) != b || k->dim(3) != e || v->dim(1) != hkv || v->dim(2) != s) {
    return InvalidNode(node, "shapes Q ", ir::DimsToString(q->dims()), ", K ",
                       ir::DimsToString(k->dims()), " and V ", ir::DimsToString(v->dims()),
                       " do not fit [B, Hq, L, E], [B, Hkv, S, E], [B, Hkv, S, Ev]");
  }
  if (hkv <= 0 ? hq != 0 : hq % hkv != 0) {
    return InvalidNode(node, "q_num_heads ", hq, " must be a multiple of kv_num_heads ", hkv);
  }
  const int64_t group = hkv > 0 ? hq / hkv : 1;
  const double scale = node.has_attr("scale") ? node.GetFloat("scale", 1.0f)
                                              : 1.0 / std::sqrt(static_cast<double>(e));
  ASSIGN_OR_RETURN(const DataType soft, SoftmaxType(node, q->dtype()));
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, q->dtype(), {b, hq, l, ev}));
  ASSIGN_OR_RETURN(ir::Tensor scores, ir::Tensor::AllocateUninitialized(soft, {b, hq, l, s}));
  for (int64_t bh = 0; bh < b * hq; ++bh) {
    const int64_t kvh = (bh / hq) * hkv + (bh % hq) / group;
    for (int64_t i = 0; i < l; ++i) {
      for (int64_t j = 0; j < s; ++j) {
        double dot = 0;
        for (int64_t x = 0; x < e; ++x) {
          dot += At(*q, (bh * l + i) * e + x) * At(*k, (kvh * s + j) * e + x);
        }
        StoreFloat(scores, (bh * l + i) * s + j, dot * scale);
      }
    }
  }
  RETURN_IF_ERROR(ApplyModifier(node, ctx, "score_mod", scores));
  // Softmax over the last axis, in place (scores become probs). A row of -inf gives NaNs, as
  // the reference's exp(-inf - -inf).
  std::vector<double> row(s);
  for (int64_t r = 0; r < b * hq * l; ++r) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < s; ++j) mx = std::max(mx, row[j] = At(scores, r * s + j));
    double sum = 0;
    for (int64_t j = 0; j < s; ++j) sum += row[j] = std::exp(row[j] - mx);
    for (int64_t j = 0; j < s; ++j) StoreFloat(scores, r * s + j, row[j] / sum);
  }
  RETURN_IF_ERROR(ApplyModifier(node, ctx, "prob_mod", scores));
  for (int64_t bh = 0; bh < b * hq; ++bh) {
    const int64_t kvh = (bh / hq) * hkv + (bh % hq) / group;
    for (int64_t i = 0; i < l; ++i) {
      for (int64_t x = 0; x < ev; ++x) {
        double acc = 0;
        for (int64_t j = 0; j < s; ++j) {
          acc += At(scores, (bh * l + i) * s + j) * At(*v, (kvh * s + j) * ev + x);
        }
        StoreFloat(*y, (bh * l + i) * ev + x, acc);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterFlexAttention(Registry& r) {
  r.AddRef(ir::OpType::kFlexAttention, FloatTypes(),
           CheckedFactory<CheckFlexAttention, RunFlexAttention>);
}

}  // namespace kiln::kernels::cpu::ref
