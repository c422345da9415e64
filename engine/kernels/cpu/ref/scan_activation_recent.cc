// Reference kernels of ops added in opsets 24..26: Swish (opset 24), CumProd (opset 26).
#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

// ---- Swish: y = x * sigmoid(alpha * x) ----

class SwishKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::make_unique<SwishKernel>(node);
    k->alpha_ = node.GetFloat("alpha", 1.0f);
    return std::unique_ptr<Kernel>(std::move(k));
  }
  explicit SwishKernel(const ir::Node& node) : node_(node) {}

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), x->dims()));
    return DispatchFloat(x->dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = Compute<T>;  // fp32 for fp16/bf16: one rounding, at the output
      const T* xs = x->data<T>();
      T* ys = y->data<T>();
      const C alpha = static_cast<C>(alpha_);
      for (int64_t i = 0; i < x->num_elements(); ++i) {
        const C v = Load(xs[i]);
        ys[i] = Store<T>(v / (C(1) + std::exp(-alpha * v)));
      }
      return absl::OkStatus();
    });
  }

 private:
  const ir::Node& node_;
  float alpha_ = 1.0f;
};

// ---- CumProd: running product along one axis (exclusive / reverse as in CumSum) ----

template <typename C>
C WrapMul(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    // Integer products wrap; signed overflow is undefined in C++, so multiply as unsigned.
    using U = std::make_unsigned_t<std::common_type_t<C, unsigned>>;
    return static_cast<C>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

class CumProdKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    return std::unique_ptr<Kernel>(new CumProdKernel(node));
  }
  explicit CumProdKernel(const ir::Node& node)
      : node_(node),
        exclusive_(node.GetInt("exclusive", 0) != 0),
        reverse_(node.GetInt("reverse", 0) != 0) {}

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* at, RequireInput(node_, ctx, 1));
    ASSIGN_OR_RETURN(std::vector<int64_t> av, ReadInts(node_, *at, "axis"));
    if (av.size() != 1) return InvalidNode(node_, "axis must hold one value, got ", av.size());
    if (x->rank() == 0) return InvalidNode(node_, "input must have rank >= 1");
    ASSIGN_OR_RETURN(int axis, NormalizeAxis(node_, av[0], x->rank()));
    const int64_t outer = Product(x->dims(), 0, axis), n = x->dim(axis);
    const int64_t inner = Product(x->dims(), axis + 1, x->rank());
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), x->dims()));
    return DispatchAll(x->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        return absl::UnimplementedError(node_.Label() + " unsupported dtype bool");
      } else {
        Loop<T>(x->data<T>(), y->data<T>(), outer, n, inner);
        return absl::OkStatus();
      }
    });
  }

 private:
  // Running products per inner lane in the compute type (fp32 for fp16/bf16: each output is
  // rounded once, rounding errors do not compound along the axis).
  template <typename T>
  void Loop(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) const {
    using C = Compute<T>;
    std::vector<C> acc(inner);
    for (int64_t o = 0; o < outer; ++o) {
      std::fill(acc.begin(), acc.end(), C(1));
      for (int64_t step = 0; step < n; ++step) {
        const int64_t k = reverse_ ? n - 1 - step : step;
        const T* xr = x + (o * n + k) * inner;
        T* yr = y + (o * n + k) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const C v = Load(xr[i]);
          if (exclusive_) {
            yr[i] = Store<T>(acc[i]);
            acc[i] = WrapMul(acc[i], v);
          } else {
            acc[i] = WrapMul(acc[i], v);
            yr[i] = Store<T>(acc[i]);
          }
        }
      }
    }
  }

  const ir::Node& node_;
  bool exclusive_;
  bool reverse_;
};

}  // namespace

void RegisterRecentOps(Registry& r) {
  r.AddRef(ir::OpType::kSwish, FloatTypes(), &SwishKernel::Create);
  // CumProd's types (opset 26): float, double, float16, bfloat16, int32/64, uint32/64.
  r.AddRef(ir::OpType::kCumProd,
           {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kF64, DataType::kI32,
            DataType::kI64, DataType::kU32, DataType::kU64},
           &CumProdKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
