// LRN (local response normalisation across channels), used by AlexNet-era CNNs:
//   y[n,c,...] = x[n,c,...] / (bias + alpha / size * sum_{c' in window(c)} x[n,c',...]^2)^beta
// with window(c) = [c - floor((size-1)/2), c + ceil((size-1)/2)] clipped to [0, C).
#include <cmath>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

class LrnKernel final : public Kernel {
 public:
  LrnKernel(const ir::Node& node, float alpha, float beta, float bias, int64_t size)
      : node_(node), alpha_(alpha), beta_(beta), bias_(bias), size_(size) {}

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    RETURN_IF_ERROR(nn::RefuseChannelsLast(node));  // NCHW only
    if (!node.has_attr("size")) return InvalidNode(node, "attribute 'size' is required");
    int64_t size = node.GetInt("size", 0);
    if (size <= 0) return InvalidNode(node, "attribute 'size' must be positive, got ", size);
    return std::unique_ptr<Kernel>(new LrnKernel(node, node.GetFloat("alpha", 1e-4f),
                                                 node.GetFloat("beta", 0.75f),
                                                 node.GetFloat("bias", 1.0f), size));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    if (x->rank() < 3)
      return InvalidNode(node_, "input must be N x C x D1 ..., got rank ", x->rank());
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), x->dims()));
    return DispatchFloat(x->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      using C = Compute<T>;
      const int64_t n = x->dim(0), ch = x->dim(1);
      const int64_t inner = x->num_elements() / std::max<int64_t>(1, n * ch);
      const int64_t lo = (size_ - 1) / 2, hi = size_ - 1 - lo;
      const T* in = x->data<T>();
      T* out = y->data<T>();
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t c = 0; c < ch; ++c) {
          int64_t c0 = std::max<int64_t>(0, c - lo), c1 = std::min<int64_t>(ch - 1, c + hi);
          for (int64_t i = 0; i < inner; ++i) {
            C sq = 0;
            for (int64_t k = c0; k <= c1; ++k) {
              C v = Load(in[(b * ch + k) * inner + i]);
              sq += v * v;
            }
            C denom = std::pow(static_cast<C>(bias_) + static_cast<C>(alpha_) / size_ * sq,
                               static_cast<C>(beta_));
            out[(b * ch + c) * inner + i] = Store<T>(Load(in[(b * ch + c) * inner + i]) / denom);
          }
        }
      }
      return absl::OkStatus();
    });
  }

 private:
  const ir::Node& node_;
  float alpha_, beta_, bias_;
  int64_t size_;
};

}  // namespace

void RegisterLrn(Registry& r) { r.AddRef(ir::OpType::kLRN, FloatTypes(), LrnKernel::Create); }

}  // namespace kiln::kernels::cpu::ref
