// CausalConvWithState (opset 27): causal depthwise 1-D convolution with a carry state, as Gated
// DeltaNet and Mamba use it. input (B, C, L), weight (C, 1, k), bias (C), past_state
// (B, C, k - 1) -> output (B, C, L) and present_state (B, C, k - 1): the last k - 1 positions of
// past_state (zeros when omitted) followed by the input. Optional fused SiLU.
// fp16 / bf16 data compute in fp32 and round each output once (DESIGN.md §5).
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

class CausalConvWithStateKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::make_unique<CausalConvWithStateKernel>(node);
    const std::string act = node.GetString("activation", "none");
    if (act == "silu" || act == "swish") {
      k->silu_ = true;
    } else if (act != "none") {
      return InvalidNode(node, "activation must be 'none', 'silu' or 'swish', got '", act, "'");
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }
  explicit CausalConvWithStateKernel(const ir::Node& node) : node_(node) {}

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* w, RequireInput(node_, ctx, 1));
    const ir::Tensor* bias = ctx.input(2);
    const ir::Tensor* past = ctx.input(3);
    if (x->rank() != 3) {
      return InvalidNode(node_, "input must be 3-D (batch, channels, length), got ",
                         ir::DimsToString(x->dims()));
    }
    const int64_t batch = x->dim(0), channels = x->dim(1), len = x->dim(2);
    if (w->rank() != 3 || w->dim(0) != channels || w->dim(1) != 1 || w->dim(2) < 1) {
      return InvalidNode(node_, "weight must be (", channels, ", 1, k) with k >= 1, got ",
                         ir::DimsToString(w->dims()));
    }
    const int64_t k = w->dim(2), carry = k - 1;
    if (w->dtype() != x->dtype()) return InvalidNode(node_, "weight must have input's dtype");
    if (bias && (bias->dtype() != x->dtype() || bias->rank() != 1 || bias->dim(0) != channels)) {
      return InvalidNode(node_, "bias must be ", DataTypeOnnxName(x->dtype()), " of shape [",
                         channels, "], got ", ir::DimsToString(bias->dims()));
    }
    if (past && (past->dtype() != x->dtype() || past->rank() != 3 || past->dim(0) != batch ||
                 past->dim(1) != channels || past->dim(2) != carry)) {
      return InvalidNode(node_, "past_state must be ", DataTypeOnnxName(x->dtype()), " of shape [",
                         batch, ",", channels, ",", carry, "], got ",
                         ir::DimsToString(past->dims()));
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), x->dims()));
    ir::Tensor* present = nullptr;
    if (ctx.num_outputs() > 1 && ctx.output_requested(1)) {
      ASSIGN_OR_RETURN(present, ctx.output(1, x->dtype(), {batch, channels, carry}));
    }
    return DispatchFloat(x->dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = Compute<T>;
      const T* xs = x->data<T>();
      const T* ws = w->data<T>();
      std::vector<C> padded(carry + len);  // one (batch, channel) row of [state, input]
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t c = 0; c < channels; ++c) {
          const int64_t row = b * channels + c;
          for (int64_t t = 0; t < carry; ++t) {
            padded[t] = past ? Load(past->data<T>()[row * carry + t]) : C(0);
          }
          for (int64_t t = 0; t < len; ++t) padded[carry + t] = Load(xs[row * len + t]);
          const C bc = bias ? Load(bias->data<T>()[c]) : C(0);
          const T* wc = ws + c * k;
          T* yr = y->data<T>() + row * len;
          for (int64_t t = 0; t < len; ++t) {
            C acc = bc;
            for (int64_t j = 0; j < k; ++j) acc += Load(wc[j]) * padded[t + j];
            if (silu_) acc = acc / (C(1) + std::exp(-acc));
            yr[t] = Store<T>(acc);
          }
          if (present) {
            // The values are the inputs' own (stored) values: copying them loses nothing.
            T* pr = present->data<T>() + row * carry;
            for (int64_t t = 0; t < carry; ++t) pr[t] = Store<T>(padded[len + t]);
          }
        }
      }
      return absl::OkStatus();
    });
  }

 private:
  const ir::Node& node_;
  bool silu_ = false;
};

}  // namespace

void RegisterCausalConvWithState(Registry& r) {
  r.AddRef(ir::OpType::kCausalConvWithState, {DataType::kF32, DataType::kF16, DataType::kBF16},
           &CausalConvWithStateKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
