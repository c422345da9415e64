// TopK and CumSum reference kernels: ops that order or scan the elements of one axis.
#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

// [outer, n, inner] around `axis`.
void Split(const std::vector<int64_t>& dims, int axis, int64_t& outer, int64_t& n, int64_t& inner) {
  outer = n = inner = 1;
  for (int d = 0; d < static_cast<int>(dims.size()); ++d) {
    if (d < axis) outer *= dims[d];
    if (d == axis) n = dims[d];
    if (d > axis) inner *= dims[d];
  }
}

// ---- TopK ----

struct TopKConfig {
  int64_t axis = -1;
  int64_t k_attr = -1;  // opset 1 only; later versions take K as input 1
  bool largest = true;
  bool sorted = true;
};

class TopKKernel final : public Kernel {
 public:
  TopKKernel(const ir::Node& node, TopKConfig cfg) : node_(node), cfg_(cfg) {}

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    TopKConfig cfg;
    cfg.axis = node.GetInt("axis", -1);
    if (node.since_version < 10) {
      if (!node.has_attr("k")) return InvalidNode(node, "attribute k is required before opset 10");
      cfg.k_attr = node.GetInt("k", 0);
      if (cfg.k_attr < 0) return InvalidNode(node, "k must be >= 0, got ", cfg.k_attr);
    }
    cfg.largest = node.GetInt("largest", 1) != 0;
    cfg.sorted = node.GetInt("sorted", 1) != 0;
    return std::unique_ptr<Kernel>(new TopKKernel(node, cfg));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    int64_t k = cfg_.k_attr;
    if (node_.since_version >= 10) {
      ASSIGN_OR_RETURN(const ir::Tensor* kt, RequireInput(node_, ctx, 1));
      ASSIGN_OR_RETURN(std::vector<int64_t> kv, ReadInts(node_, *kt, "K"));
      if (kv.size() != 1) return InvalidNode(node_, "K must hold one value, got ", kv.size());
      k = kv[0];
    }
    if (x->rank() == 0) return InvalidNode(node_, "input must have rank >= 1");
    ASSIGN_OR_RETURN(int axis, NormalizeAxis(node_, cfg_.axis, x->rank()));
    int64_t outer, n, inner;
    Split(x->dims(), axis, outer, n, inner);
    if (k < 0 || k > n) {
      return InvalidNode(node_, "k = ", k, " is out of range for axis ", axis, " of size ", n);
    }
    std::vector<int64_t> out_dims = x->dims();
    out_dims[axis] = k;
    ir::Tensor* values = nullptr;
    ir::Tensor* indices = nullptr;
    if (ctx.output_requested(0)) {
      ASSIGN_OR_RETURN(values, ctx.output(0, x->dtype(), out_dims));
    }
    if (ctx.num_outputs() > 1 && ctx.output_requested(1)) {
      ASSIGN_OR_RETURN(indices, ctx.output(1, DataType::kI64, out_dims));
    }
    return DispatchAll(x->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        return absl::UnimplementedError(node_.Label() + " unsupported dtype bool");
      } else {
        Loop<T>(*x, values ? values->data<T>() : nullptr,
                indices ? indices->data<int64_t>() : nullptr, outer, n, inner, k);
        return absl::OkStatus();
      }
    });
  }

 private:
  // Each lane is copied out, partially sorted, and its first k entries written back. Order:
  // by value (descending for largest, ascending otherwise), ties by lower index first as the
  // spec demands. NaN is ordered above +inf so the comparison stays a strict weak order.
  // With sorted=0 the order is unspecified; returning it sorted is a valid choice.
  template <typename T>
  void Loop(const ir::Tensor& x, T* values, int64_t* indices, int64_t outer, int64_t n,
            int64_t inner, int64_t k) const {
    using C = Compute<T>;
    struct Entry {
      C v;
      int64_t i;
    };
    auto greater = [](C a, C b) {
      if constexpr (std::is_floating_point_v<C>) {
        if (std::isnan(a)) return !std::isnan(b);
        if (std::isnan(b)) return false;
      }
      return a > b;
    };
    const bool largest = cfg_.largest;
    auto before = [&](const Entry& a, const Entry& b) {
      if (largest ? greater(a.v, b.v) : greater(b.v, a.v)) return true;
      if (largest ? greater(b.v, a.v) : greater(a.v, b.v)) return false;
      return a.i < b.i;
    };
    const T* xd = x.data<T>();
    std::vector<Entry> lane(n);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t in = 0; in < inner; ++in) {
        const T* src = xd + o * n * inner + in;
        for (int64_t j = 0; j < n; ++j) lane[j] = {Load(src[j * inner]), j};
        std::partial_sort(lane.begin(), lane.begin() + k, lane.end(), before);
        const int64_t dst = o * k * inner + in;
        for (int64_t j = 0; j < k; ++j) {
          // Values are copied from the input, not round-tripped through C.
          if (values) values[dst + j * inner] = src[lane[j].i * inner];
          if (indices) indices[dst + j * inner] = lane[j].i;
        }
      }
    }
  }

  const ir::Node& node_;
  TopKConfig cfg_;
};

// ---- CumSum ----

template <typename C>
C WrapAdd(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    // Integer sums wrap; signed overflow is undefined in C++, so add as unsigned.
    using U = std::make_unsigned_t<std::common_type_t<C, unsigned>>;
    return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

class CumSumKernel final : public Kernel {
 public:
  CumSumKernel(const ir::Node& node, bool exclusive, bool reverse)
      : node_(node), exclusive_(exclusive), reverse_(reverse) {}

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    return std::unique_ptr<Kernel>(
        new CumSumKernel(node, node.GetInt("exclusive", 0) != 0, node.GetInt("reverse", 0) != 0));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* at, RequireInput(node_, ctx, 1));
    ASSIGN_OR_RETURN(std::vector<int64_t> av, ReadInts(node_, *at, "axis"));
    if (av.size() != 1) return InvalidNode(node_, "axis must hold one value, got ", av.size());
    if (x->rank() == 0) return InvalidNode(node_, "input must have rank >= 1");
    ASSIGN_OR_RETURN(int axis, NormalizeAxis(node_, av[0], x->rank()));
    int64_t outer, n, inner;
    Split(x->dims(), axis, outer, n, inner);
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
  // Running sums per inner lane, in the compute type (fp32 for fp16/bf16, so each output is
  // rounded once and rounding errors do not compound along the axis).
  template <typename T>
  void Loop(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) const {
    using C = Compute<T>;
    std::vector<C> acc(inner);
    for (int64_t o = 0; o < outer; ++o) {
      std::fill(acc.begin(), acc.end(), C(0));
      for (int64_t step = 0; step < n; ++step) {
        const int64_t k = reverse_ ? n - 1 - step : step;
        const T* xr = x + (o * n + k) * inner;
        T* yr = y + (o * n + k) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const C v = Load(xr[i]);
          if (exclusive_) {
            yr[i] = Store<T>(acc[i]);
            acc[i] = WrapAdd(acc[i], v);
          } else {
            acc[i] = WrapAdd(acc[i], v);
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

void RegisterReduceTopKCumSum(Registry& r) {
  using ir::OpType;
  r.AddRef(OpType::kTopK, NumericTypes(), &TopKKernel::Create);
  r.AddRef(OpType::kCumSum,
           {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kF64, DataType::kI32,
            DataType::kI64, DataType::kU32, DataType::kU64},
           &CumSumKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
