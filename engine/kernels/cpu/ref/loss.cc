// Reference kernels of the loss family: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss
// (opsets 12, 13 and 22; the versions differ only in the dtypes they allow).
//
// Both reduce to the same gather: input (N, C, d1, ..., dk) is viewed as (N, C, D) with
// D = d1 * ... * dk and target (N, d1, ..., dk) as (N, D). Element (n, d) contributes
//   loss[n, d] = -input[n, target[n, d], d] * w,   w = weight[target[n, d]] (or 1),
// and 0 with w = 0 when target[n, d] == ignore_index. Reduction "mean" divides the sum by the
// sum of w over all elements (the count of non-ignored targets when there are no weights), as
// the spec's definition says. SoftmaxCrossEntropyLoss applies that gather to
// log(softmax(scores, axis=1)) and optionally returns the log-probabilities too.
//
// Precision: the log-softmax, the per-element losses and the reductions are computed in
// Compute<T> (fp32 for fp16/bf16, double for double); each output element is rounded once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

enum class Reduction { kNone, kSum, kMean };

struct LossConfig {
  Reduction reduction = Reduction::kMean;
  bool has_ignore = false;
  int64_t ignore_index = 0;
};

absl::StatusOr<LossConfig> ParseLossConfig(const ir::Node& node) {
  LossConfig cfg;
  const std::string reduction = node.GetString("reduction", "mean");
  if (reduction == "none") {
    cfg.reduction = Reduction::kNone;
  } else if (reduction == "sum") {
    cfg.reduction = Reduction::kSum;
  } else if (reduction == "mean") {
    cfg.reduction = Reduction::kMean;
  } else {
    return InvalidNode(node, "reduction must be 'none', 'sum' or 'mean', got '", reduction, "'");
  }
  cfg.has_ignore = node.has_attr("ignore_index");
  if (cfg.has_ignore) cfg.ignore_index = node.GetInt("ignore_index", 0);
  return cfg;
}

// The (N, C, D) view of the input and the checked inputs of one run.
struct LossInputs {
  const ir::Tensor* input = nullptr;
  const ir::Tensor* target = nullptr;
  const ir::Tensor* weight = nullptr;  // null when omitted
  int64_t n = 0, c = 0, d = 0;
};

absl::StatusOr<LossInputs> CheckLossInputs(const ir::Node& node, KernelContext& ctx) {
  LossInputs in;
  ASSIGN_OR_RETURN(in.input, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(in.target, RequireInput(node, ctx, 1));
  in.weight = ctx.input(2);
  const ir::Tensor& x = *in.input;
  const ir::Tensor& t = *in.target;
  if (x.rank() < 2) {
    return InvalidNode(node, "input must have rank >= 2 (N x C x ...), got shape ",
                       ir::DimsToString(x.dims()));
  }
  if (t.dtype() != DataType::kI32 && t.dtype() != DataType::kI64) {
    return InvalidNode(node, "target must be int32 or int64, got ", DataTypeOnnxName(t.dtype()));
  }
  // target shape must be input shape without the class axis.
  bool shape_ok = t.rank() == x.rank() - 1 && t.dim(0) == x.dim(0);
  for (int i = 1; shape_ok && i < t.rank(); ++i) shape_ok = t.dim(i) == x.dim(i + 1);
  if (!shape_ok) {
    return InvalidNode(node, "target shape ", ir::DimsToString(t.dims()), " must be input shape ",
                       ir::DimsToString(x.dims()), " without dimension 1");
  }
  in.n = x.dim(0);
  in.c = x.dim(1);
  in.d = 1;
  for (int i = 2; i < x.rank(); ++i) in.d *= x.dim(i);
  if (in.weight != nullptr) {
    if (in.weight->dtype() != x.dtype()) {
      return InvalidNode(node, "weight dtype ", DataTypeOnnxName(in.weight->dtype()),
                         " must match input dtype ", DataTypeOnnxName(x.dtype()));
    }
    if (in.weight->rank() != 1 || in.weight->dim(0) != in.c) {
      return InvalidNode(node, "weight must have shape [", in.c, "], got ",
                         ir::DimsToString(in.weight->dims()));
    }
  }
  return in;
}

// Gathers -x[n, target, d] * w over the (N, C, D) view `x` (values in compute type C, or the
// storage type T loaded through Load) and writes the loss output (output 0).
template <typename T, typename X>
absl::Status GatherLoss(const ir::Node& node, const LossConfig& cfg, const LossInputs& in,
                        const X* x, KernelContext& ctx) {
  using C = Compute<T>;
  const ir::Tensor& tt = *in.target;
  std::vector<C> weight;
  if (in.weight != nullptr) {
    const T* w = in.weight->data<T>();
    weight.resize(in.c);
    for (int64_t k = 0; k < in.c; ++k) weight[k] = Load(w[k]);
  }
  // int32 and int64 targets are both read as int64, one at a time (no copy).
  const int32_t* t32 = tt.dtype() == DataType::kI32 ? tt.data<int32_t>() : nullptr;
  const int64_t* t64 = tt.dtype() == DataType::kI64 ? tt.data<int64_t>() : nullptr;

  T* out = nullptr;
  if (cfg.reduction == Reduction::kNone) {
    ASSIGN_OR_RETURN(ir::Tensor * o, ctx.output(0, in.input->dtype(), tt.dims()));
    out = o->data<T>();
  }
  C loss_sum = C(0);
  C weight_sum = C(0);
  for (int64_t n = 0; n < in.n; ++n) {
    const X* xn = x + n * in.c * in.d;
    for (int64_t d = 0; d < in.d; ++d) {
      const int64_t e = n * in.d + d;
      const int64_t k = t32 != nullptr ? t32[e] : t64[e];
      C loss = C(0);
      if (!(cfg.has_ignore && k == cfg.ignore_index)) {
        if (k < 0 || k >= in.c) {
          return InvalidNode(node, "target value ", k, " is out of range [0, ", in.c, ")");
        }
        const C w = weight.empty() ? C(1) : weight[k];
        // `0 - v` rather than `-v` keeps a zero loss positive, as the spec's formula gives.
        loss = (C(0) - static_cast<C>(Load(xn[k * in.d + d]))) * w;
        weight_sum += w;
      }
      if (out != nullptr) {
        out[e] = Store<T>(loss);
      } else {
        loss_sum += loss;
      }
    }
  }
  if (out != nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(ir::Tensor * o, ctx.output(0, in.input->dtype(), {}));
  // mean over zero non-ignored targets is 0/0 = NaN, as the spec's formula gives.
  o->data<T>()[0] = Store<T>(cfg.reduction == Reduction::kMean ? loss_sum / weight_sum : loss_sum);
  return absl::OkStatus();
}

class NllLossKernel final : public Kernel {
 public:
  NllLossKernel(const ir::Node& node, LossConfig cfg) : node_(node), cfg_(cfg) {}

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(LossConfig cfg, ParseLossConfig(node));
    if (node.num_outputs() != 1) return InvalidNode(node, "must have exactly 1 output");
    return std::unique_ptr<Kernel>(new NllLossKernel(node, cfg));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(LossInputs in, CheckLossInputs(node_, ctx));
    return DispatchFloat(in.input->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      return GatherLoss<T>(node_, cfg_, in, in.input->data<T>(), ctx);
    });
  }

 private:
  const ir::Node& node_;
  LossConfig cfg_;
};

class SoftmaxCrossEntropyKernel final : public Kernel {
 public:
  SoftmaxCrossEntropyKernel(const ir::Node& node, LossConfig cfg) : node_(node), cfg_(cfg) {}

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(LossConfig cfg, ParseLossConfig(node));
    if (node.num_outputs() < 1 || node.num_outputs() > 2) {
      return InvalidNode(node, "must have 1 or 2 outputs, got ", node.num_outputs());
    }
    return std::unique_ptr<Kernel>(new SoftmaxCrossEntropyKernel(node, cfg));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(LossInputs in, CheckLossInputs(node_, ctx));
    return DispatchFloat(in.input->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      using C = Compute<T>;
      std::vector<C> log_prob(static_cast<size_t>(in.input->num_elements()));
      LogSoftmax<T>(in, log_prob.data());
      RETURN_IF_ERROR(GatherLoss<T>(node_, cfg_, in, log_prob.data(), ctx));
      if (ctx.num_outputs() > 1 && ctx.output_requested(1)) {
        ASSIGN_OR_RETURN(ir::Tensor * lp, ctx.output(1, in.input->dtype(), in.input->dims()));
        T* dst = lp->data<T>();
        for (size_t i = 0; i < log_prob.size(); ++i) dst[i] = Store<T>(log_prob[i]);
      }
      return absl::OkStatus();
    });
  }

 private:
  // log(softmax(x)) over the class axis of the (N, C, D) view, as x - max - log(sum(exp(x -
  // max))): subtracting the max keeps exp from overflowing.
  template <typename T>
  static void LogSoftmax(const LossInputs& in, Compute<T>* out) {
    using C = Compute<T>;
    const T* x = in.input->data<T>();
    const int64_t cd = in.c * in.d;
    std::vector<C> max(in.d), sum(in.d);
    for (int64_t n = 0; n < in.n; ++n) {
      const T* xn = x + n * cd;
      C* on = out + n * cd;
      std::fill(max.begin(), max.end(), -std::numeric_limits<C>::infinity());
      std::fill(sum.begin(), sum.end(), C(0));
      for (int64_t k = 0; k < in.c; ++k)
        for (int64_t d = 0; d < in.d; ++d) max[d] = std::max(max[d], Load(xn[k * in.d + d]));
      for (int64_t k = 0; k < in.c; ++k) {
        for (int64_t d = 0; d < in.d; ++d) {
          on[k * in.d + d] = Load(xn[k * in.d + d]) - max[d];
          sum[d] += std::exp(on[k * in.d + d]);
        }
      }
      for (int64_t d = 0; d < in.d; ++d) sum[d] = std::log(sum[d]);
      for (int64_t k = 0; k < in.c; ++k)
        for (int64_t d = 0; d < in.d; ++d) on[k * in.d + d] -= sum[d];
    }
  }

  const ir::Node& node_;
  LossConfig cfg_;
};

}  // namespace

void RegisterLoss(Registry& r) {
  r.AddRef(ir::OpType::kNegativeLogLikelihoodLoss, FloatTypes(), &NllLossKernel::Create);
  r.AddRef(ir::OpType::kSoftmaxCrossEntropyLoss, FloatTypes(), &SoftmaxCrossEntropyKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
