// Ops that normalise along one axis and keep the input shape: Softmax, LogSoftmax, Hardmax and
// LpNormalization.
//
// All see the input as [outer, n, inner] and reduce over n. Before opset 13 the Softmax family
// coerces the input to 2-D at `axis` (default 1): the reduction runs over the whole trailing
// block, i.e. n = prod(dims[axis:]) and inner = 1. From 13 it is a single axis (default -1).
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

struct Lanes {
  int64_t outer = 1;
  int64_t n = 1;
  int64_t inner = 1;
};

// Splits `dims` around `axis`; `coerce_2d` folds every dim from `axis` on into n.
Lanes SplitAt(const std::vector<int64_t>& dims, int axis, bool coerce_2d) {
  Lanes l;
  for (int d = 0; d < static_cast<int>(dims.size()); ++d) {
    if (d < axis) {
      l.outer *= dims[d];
    } else if (d == axis || coerce_2d) {
      l.n *= dims[d];
    } else {
      l.inner *= dims[d];
    }
  }
  return l;
}

enum class AxisOp { kSoftmax, kLogSoftmax, kHardmax, kLpNorm };

// One kernel for the four ops: each lane (o, i) is reduced to a per-lane statistic in a first
// pass over n, then every element is rewritten in a second pass. Both passes walk memory in
// order, keeping one statistic per inner lane.
template <AxisOp kOp>
class AxisKernel final : public Kernel {
 public:
  AxisKernel(const ir::Node& node, int64_t axis, bool coerce_2d, int64_t p)
      : node_(node), axis_(axis), coerce_2d_(coerce_2d), p_(p) {}

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    int64_t axis = -1;
    bool coerce_2d = false;
    int64_t p = 2;
    if constexpr (kOp == AxisOp::kLpNorm) {
      axis = node.GetInt("axis", -1);
      p = node.GetInt("p", 2);
      if (p != 1 && p != 2) return InvalidNode(node, "p must be 1 or 2, got ", p);
    } else {
      coerce_2d = node.since_version < 13;
      axis = node.GetInt("axis", coerce_2d ? 1 : -1);
    }
    return std::unique_ptr<Kernel>(new AxisKernel(node, axis, coerce_2d, p));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(int axis, NormalizeAxis(node_, axis_, x->rank()));
    const Lanes l = SplitAt(x->dims(), axis, coerce_2d_);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), x->dims()));
    return DispatchFloat(x->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      Loop<T>(x->data<T>(), y->data<T>(), l);
      return absl::OkStatus();
    });
  }

 private:
  // Outer blocks are independent: split over the threads when there is enough work (each
  // element is computed the same way on any thread count).
  template <typename T>
  void Loop(const T* x, T* y, const Lanes& l) const {
    using C = Compute<T>;
    const int64_t block = l.n * l.inner;
    ParallelFor(l.outer, l.outer > 1 && l.outer * block >= (int64_t{1} << 15),
                [&](int64_t o_begin, int64_t o_end) {
                  std::vector<C> stat(l.inner);  // max, norm
                  std::vector<C> sum(l.inner);   // softmax denominators
                  std::vector<int64_t> arg(l.inner);
                  for (int64_t o = o_begin; o < o_end; ++o) {
                    Block<T>(x + o * block, y + o * block, l, stat, sum, arg);
                  }
                });
  }

  // One outer block: its lanes' statistics, then every element rewritten.
  template <typename T>
  void Block(const T* xo, T* yo, const Lanes& l, std::vector<Compute<T>>& stat,
             std::vector<Compute<T>>& sum, std::vector<int64_t>& arg) const {
    using C = Compute<T>;
    if constexpr (kOp == AxisOp::kLpNorm) {
      std::fill(stat.begin(), stat.end(), C(0));
      for (int64_t k = 0; k < l.n; ++k) {
        for (int64_t i = 0; i < l.inner; ++i) {
          const C v = Load(xo[k * l.inner + i]);
          stat[i] += p_ == 1 ? std::fabs(v) : v * v;
        }
      }
      if (p_ == 2) {
        for (C& s : stat) s = std::sqrt(s);
      }
      // A zero norm gives zero (opset 22 spells this out; earlier opsets left it open).
      for (int64_t k = 0; k < l.n; ++k) {
        for (int64_t i = 0; i < l.inner; ++i) {
          const int64_t e = k * l.inner + i;
          yo[e] = Store<T>(stat[i] == C(0) ? C(0) : Load(xo[e]) / stat[i]);
        }
      }
      return;
    }
    // Softmax family: per-lane maximum (and, for Hardmax, its first index).
    std::fill(stat.begin(), stat.end(), -std::numeric_limits<C>::infinity());
    std::fill(arg.begin(), arg.end(), -1);
    for (int64_t k = 0; k < l.n; ++k) {
      for (int64_t i = 0; i < l.inner; ++i) {
        const C v = Load(xo[k * l.inner + i]);
        if (v > stat[i] || arg[i] < 0) {
          stat[i] = v;
          arg[i] = k;
        }
      }
    }
    if constexpr (kOp == AxisOp::kHardmax) {
      for (int64_t k = 0; k < l.n; ++k) {
        for (int64_t i = 0; i < l.inner; ++i) {
          yo[k * l.inner + i] = Store<T>(C(arg[i] == k ? 1 : 0));
        }
      }
      return;
    }
    // Subtracting the maximum keeps exp from overflowing; it cancels in the ratio.
    std::fill(sum.begin(), sum.end(), C(0));
    for (int64_t k = 0; k < l.n; ++k) {
      for (int64_t i = 0; i < l.inner; ++i) {
        sum[i] += std::exp(Load(xo[k * l.inner + i]) - stat[i]);
      }
    }
    if constexpr (kOp == AxisOp::kLogSoftmax) {
      for (C& s : sum) s = std::log(s);
    }
    for (int64_t k = 0; k < l.n; ++k) {
      for (int64_t i = 0; i < l.inner; ++i) {
        const int64_t e = k * l.inner + i;
        const C shifted = Load(xo[e]) - stat[i];
        if constexpr (kOp == AxisOp::kLogSoftmax) {
          yo[e] = Store<T>(shifted - sum[i]);
        } else {
          yo[e] = Store<T>(std::exp(shifted) / sum[i]);
        }
      }
    }
  }

  const ir::Node& node_;
  int64_t axis_;
  bool coerce_2d_;
  int64_t p_;
};

}  // namespace

void RegisterReduceAxisOps(Registry& r) {
  using ir::OpType;
  r.AddRef(OpType::kSoftmax, FloatTypes(), &AxisKernel<AxisOp::kSoftmax>::Create);
  r.AddRef(OpType::kLogSoftmax, FloatTypes(), &AxisKernel<AxisOp::kLogSoftmax>::Create);
  r.AddRef(OpType::kHardmax, FloatTypes(), &AxisKernel<AxisOp::kHardmax>::Create);
  r.AddRef(OpType::kLpNormalization, FloatTypes(), &AxisKernel<AxisOp::kLpNorm>::Create);
}

}  // namespace kiln::kernels::cpu::ref
