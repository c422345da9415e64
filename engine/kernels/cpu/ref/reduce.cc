// Reduce* and ArgMax/ArgMin reference kernels, and the family's registration entry point.
//
// Every Reduce* op runs through one generic loop (`ReduceLoop`) driven by a small functor with
// `Init` (the value of an empty reduction), `Add` (fold one element in) and `Final` (turn the
// state into the output, given the element count). The loop walks the input once in memory
// order, so a reduction over any axis set is a single streaming pass.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {

// Other files of the family (reduce_axis.cc, reduce_topk.cc).
void RegisterReduceAxisOps(Registry& r);
void RegisterReduceTopKCumSum(Registry& r);

namespace {

// Integer reductions wrap in two's complement (as ONNX Runtime does); signed overflow is
// undefined in C++, so sums and products go through the unsigned type (at least `unsigned`, to
// dodge the promotion of small types to int).
template <typename C>
using WrapType = std::make_unsigned_t<std::common_type_t<C, unsigned>>;

template <typename C>
C WrapAdd(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<WrapType<C>>(a) + static_cast<WrapType<C>>(b));
  } else {
    return a + b;
  }
}
template <typename C>
C WrapMul(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<WrapType<C>>(a) * static_cast<WrapType<C>>(b));
  } else {
    return a * b;
  }
}
template <typename C>
C Abs(C a) {
  if constexpr (std::is_unsigned_v<C>) {
    return a;
  } else if constexpr (std::is_integral_v<C>) {
    return a < 0 ? WrapMul(a, C(-1)) : a;
  } else {
    return std::fabs(a);
  }
}
template <typename C>
bool IsNan(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

// Transcendental finals (sqrt, log) on integer data are computed in double; converting a
// non-finite or out-of-range double to an integer is undefined in C++, so saturate instead.
template <typename C>
C FromDouble(double v) {
  if constexpr (std::is_floating_point_v<C>) {
    return static_cast<C>(v);
  } else {
    if (std::isnan(v)) return C(0);
    if (v <= static_cast<double>(std::numeric_limits<C>::lowest())) {
      return std::numeric_limits<C>::lowest();
    }
    if (v >= static_cast<double>(std::numeric_limits<C>::max())) {
      return std::numeric_limits<C>::max();
    }
    return static_cast<C>(v);
  }
}

// ---- Reduction functors. `C` is the accumulation type (Compute<T>). ----

template <typename C>
struct SumOp {
  using State = C;
  static State Init() { return C(0); }
  static void Add(State& s, C x) { s = WrapAdd(s, x); }
  static C Final(const State& s, int64_t) { return s; }
};
template <typename C>
struct SumSquareOp : SumOp<C> {
  static void Add(C& s, C x) { s = WrapAdd(s, WrapMul(x, x)); }
};
template <typename C>
struct L1Op : SumOp<C> {
  static void Add(C& s, C x) { s = WrapAdd(s, Abs(x)); }
};
template <typename C>
struct L2Op : SumSquareOp<C> {
  static C Final(const C& s, int64_t) { return FromDouble<C>(std::sqrt(static_cast<double>(s))); }
};
template <typename C>
struct LogSumOp : SumOp<C> {
  static C Final(const C& s, int64_t) { return FromDouble<C>(std::log(static_cast<double>(s))); }
};
template <typename C>
struct MeanOp : SumOp<C> {
  static C Final(const C& s, int64_t n) {
    if (n == 0) {
      // Mean of nothing: NaN where the type has one (numpy agrees); integers have none.
      if constexpr (std::is_floating_point_v<C>) return std::numeric_limits<C>::quiet_NaN();
      return C(0);
    }
    return s / static_cast<C>(n);
  }
};
template <typename C>
struct ProdOp {
  using State = C;
  static State Init() { return C(1); }
  static void Add(State& s, C x) { s = WrapMul(s, x); }
  static C Final(const State& s, int64_t) { return s; }
};
// Max/Min propagate NaN (like numpy's maximum.reduce); an empty reduction gives -inf/+inf, or
// the type's lowest/highest value where there is no infinity (false/true for bool).
template <typename C>
struct MaxOp {
  using State = C;
  static State Init() {
    if constexpr (std::is_floating_point_v<C>) return -std::numeric_limits<C>::infinity();
    return std::numeric_limits<C>::lowest();
  }
  static void Add(State& s, C x) {
    if (x > s || IsNan(x)) s = x;
  }
  static C Final(const State& s, int64_t) { return s; }
};
template <typename C>
struct MinOp {
  using State = C;
  static State Init() {
    if constexpr (std::is_floating_point_v<C>) return std::numeric_limits<C>::infinity();
    return std::numeric_limits<C>::max();
  }
  static void Add(State& s, C x) {
    if (x < s || IsNan(x)) s = x;
  }
  static C Final(const State& s, int64_t) { return s; }
};
// log(sum(exp(x))) in one pass with a running maximum (the "online" form): the sum is kept
// relative to the largest element seen so far and rescaled when a larger one arrives, so no
// exp overflows. Integer data computes in double.
template <typename C>
struct LogSumExpOp {
  using D = std::conditional_t<std::is_floating_point_v<C>, C, double>;
  struct State {
    D max;
    D sum;
  };
  static State Init() { return {-std::numeric_limits<D>::infinity(), D(0)}; }
  static void Add(State& s, C xc) {
    D x = static_cast<D>(xc);
    if (std::isnan(s.sum)) return;
    if (std::isnan(x)) {
      s.sum = x;
      return;
    }
    // exp(-inf) contributes nothing; once +inf is seen the result is +inf whatever follows
    // (and inf - inf would make NaN below).
    if (x == -std::numeric_limits<D>::infinity() || s.max == std::numeric_limits<D>::infinity()) {
      return;
    }
    if (x > s.max) {
      s.sum = s.sum * std::exp(s.max - x) + D(1);
      s.max = x;
    } else {
      s.sum += std::exp(x - s.max);
    }
  }
  static C Final(const State& s, int64_t) {
    if (std::isnan(s.sum)) return FromDouble<C>(s.sum);
    if (s.sum == D(0)) return FromDouble<C>(-std::numeric_limits<double>::infinity());
    return FromDouble<C>(static_cast<double>(std::log(s.sum) + s.max));
  }
};

// The input shape collapsed for the loop: size-1 dims dropped, runs of adjacent dims that are
// all reduced (or all kept) merged. `out_strides` are 0 on reduced dims.
struct ReducePlan {
  std::vector<int64_t> dims;
  std::vector<bool> reduced;
  std::vector<int64_t> out_strides;
  int64_t in_count = 1;
  int64_t out_count = 1;
};

ReducePlan MakePlan(const std::vector<int64_t>& dims, const std::vector<bool>& reduced) {
  ReducePlan p;
  for (size_t d = 0; d < dims.size(); ++d) {
    p.in_count *= dims[d];
    if (!reduced[d]) p.out_count *= dims[d];
    if (dims[d] == 1) continue;
    if (!p.dims.empty() && p.reduced.back() == reduced[d]) {
      p.dims.back() *= dims[d];
    } else {
      p.dims.push_back(dims[d]);
      p.reduced.push_back(reduced[d]);
    }
  }
  p.out_strides.assign(p.dims.size(), 0);
  int64_t stride = 1;
  for (int d = static_cast<int>(p.dims.size()) - 1; d >= 0; --d) {
    if (p.reduced[d]) continue;
    p.out_strides[d] = stride;
    stride *= p.dims[d];
  }
  return p;
}

template <typename T, template <typename> class Op>
void ReduceLoop(const T* x, T* y, const ReducePlan& p) {
  using C = Compute<T>;
  using F = Op<C>;
  // A plain array, not std::vector: vector<bool> (the bool Max/Min state) has no data().
  using State = typename F::State;
  std::unique_ptr<State[]> acc(new State[p.out_count]);
  std::fill_n(acc.get(), p.out_count, F::Init());
  const int r = static_cast<int>(p.dims.size());
  if (p.in_count > 0 && r == 0) {
    F::Add(acc[0], Load(x[0]));
  } else if (p.in_count > 0) {
    const int64_t inner = p.dims[r - 1];
    const bool inner_reduced = p.reduced[r - 1];
    std::vector<int64_t> idx(r - 1, 0);
    int64_t o = 0;  // output offset of the current innermost row
    for (int64_t base = 0; base < p.in_count; base += inner) {
      const T* row = x + base;
      if (inner_reduced) {
        State& a = acc[o];
        for (int64_t i = 0; i < inner; ++i) F::Add(a, Load(row[i]));
      } else {
        State* a = acc.get() + o;
        for (int64_t i = 0; i < inner; ++i) F::Add(a[i], Load(row[i]));
      }
      for (int d = r - 2; d >= 0; --d) {  // odometer over the outer dims
        if (++idx[d] < p.dims[d]) {
          o += p.out_strides[d];
          break;
        }
        o -= p.out_strides[d] * (p.dims[d] - 1);
        idx[d] = 0;
      }
    }
  }
  const int64_t n = p.out_count > 0 ? p.in_count / p.out_count : 0;
  for (int64_t i = 0; i < p.out_count; ++i) y[i] = Store<T>(F::Final(acc[i], n));
}

// Which storage types each functor is instantiated for: floats and the 32/64-bit integers for
// all; Max/Min also take 8-bit integers and bool (opset 12/20).
template <template <typename> class Op>
constexpr bool kIsMinMax = false;
template <>
constexpr bool kIsMinMax<MaxOp> = true;
template <>
constexpr bool kIsMinMax<MinOp> = true;

template <template <typename> class Op, typename T>
constexpr bool Supports() {
  if constexpr (std::is_same_v<T, bool>) return kIsMinMax<Op>;
  if constexpr (!std::is_floating_point_v<Compute<T>>) {
    return sizeof(T) >= 4 || (kIsMinMax<Op> && sizeof(T) == 1);
  }
  return true;
}

struct ReduceConfig {
  bool keepdims = true;
  bool noop_with_empty_axes = false;
  bool axes_from_input = false;
  std::vector<int64_t> axes_attr;
};

template <template <typename> class Op>
class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(const ir::Node& node, ReduceConfig cfg) : node_(node), cfg_(std::move(cfg)) {}

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ReduceConfig cfg;
    cfg.keepdims = node.GetInt("keepdims", 1) != 0;
    // ReduceSum moved axes to an input at 13, the other reductions at 18.
    const int axes_input_since = node.op == ir::OpType::kReduceSum ? 13 : 18;
    cfg.axes_from_input = node.since_version >= axes_input_since;
    if (cfg.axes_from_input) {
      cfg.noop_with_empty_axes = node.GetInt("noop_with_empty_axes", 0) != 0;
      if (node.has_attr("axes")) {
        return InvalidNode(node, "takes axes as an input from opset ", axes_input_since,
                           ", not as an attribute");
      }
    } else {
      cfg.axes_attr = node.GetInts("axes");
    }
    return std::unique_ptr<Kernel>(new ReduceKernel(node, std::move(cfg)));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    std::vector<int64_t> axes = cfg_.axes_attr;
    if (cfg_.axes_from_input && ctx.input(1) != nullptr) {
      ASSIGN_OR_RETURN(axes, ReadInts(node_, *ctx.input(1), "axes"));
    }
    const int rank = x->rank();
    std::vector<bool> reduced(rank, axes.empty() && !cfg_.noop_with_empty_axes);
    for (int64_t a : axes) {
      ASSIGN_OR_RETURN(int ax, NormalizeAxis(node_, a, rank));
      if (ax >= rank) continue;  // axis 0 of a scalar: nothing to reduce
      if (reduced[ax]) return InvalidNode(node_, "axis ", a, " is repeated in axes");
      reduced[ax] = true;
    }
    std::vector<int64_t> out_dims;
    for (int d = 0; d < rank; ++d) {
      if (!reduced[d]) {
        out_dims.push_back(x->dim(d));
      } else if (cfg_.keepdims) {
        out_dims.push_back(1);
      }
    }
    const ReducePlan plan = MakePlan(x->dims(), reduced);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));
    return DispatchAll(x->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      if constexpr (Supports<Op, T>()) {
        ReduceLoop<T, Op>(x->data<T>(), y->data<T>(), plan);
        return absl::OkStatus();
      } else {
        return absl::UnimplementedError(node_.Label() + " unsupported dtype " +
                                        DataTypeOnnxName(x->dtype()));
      }
    });
  }

 private:
  const ir::Node& node_;
  ReduceConfig cfg_;
};

// ---- ArgMax / ArgMin ----

struct ArgConfig {
  int64_t axis = 0;
  bool keepdims = true;
  bool select_last = false;
};

template <bool kMax>
class ArgKernel final : public Kernel {
 public:
  ArgKernel(const ir::Node& node, ArgConfig cfg) : node_(node), cfg_(cfg) {}

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ArgConfig cfg;
    cfg.axis = node.GetInt("axis", 0);
    cfg.keepdims = node.GetInt("keepdims", 1) != 0;
    cfg.select_last = node.GetInt("select_last_index", 0) != 0;
    if (cfg.select_last && node.since_version < 12) {
      return InvalidNode(node, "select_last_index needs opset 12 or later");
    }
    return std::unique_ptr<Kernel>(new ArgKernel(node, cfg));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    const int rank = x->rank();
    ASSIGN_OR_RETURN(int axis, NormalizeAxis(node_, cfg_.axis, rank));
    // A scalar behaves as a 1-element vector along the axis.
    const int64_t n = rank == 0 ? 1 : x->dim(axis);
    if (n == 0) return InvalidNode(node_, "cannot take the index of an extremum of an empty axis");
    int64_t outer = 1, inner = 1;
    std::vector<int64_t> out_dims;
    for (int d = 0; d < rank; ++d) {
      if (d < axis) outer *= x->dim(d);
      if (d > axis) inner *= x->dim(d);
      if (d != axis) {
        out_dims.push_back(x->dim(d));
      } else if (cfg_.keepdims) {
        out_dims.push_back(1);
      }
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, DataType::kI64, out_dims));
    return DispatchAll(x->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        return absl::UnimplementedError(node_.Label() + " unsupported dtype bool");
      } else {
        Loop<T>(x->data<T>(), y->data<int64_t>(), outer, n, inner);
        return absl::OkStatus();
      }
    });
  }

 private:
  // Walks the input in memory order keeping the best value and index of each inner lane.
  // NaN counts as the extremum (the first one, or the last with select_last_index), as numpy.
  template <typename T>
  void Loop(const T* x, int64_t* y, int64_t outer, int64_t n, int64_t inner) const {
    using C = Compute<T>;
    std::vector<C> best(inner);
    const bool last = cfg_.select_last;
    for (int64_t o = 0; o < outer; ++o) {
      const T* xo = x + o * n * inner;
      int64_t* yo = y + o * inner;
      for (int64_t i = 0; i < inner; ++i) {
        best[i] = Load(xo[i]);
        yo[i] = 0;
      }
      for (int64_t k = 1; k < n; ++k) {
        const T* row = xo + k * inner;
        for (int64_t i = 0; i < inner; ++i) {
          const C v = Load(row[i]);
          const C b = best[i];
          bool take;
          if (IsNan(b)) {
            take = last && IsNan(v);
          } else if (IsNan(v)) {
            take = true;
          } else if constexpr (kMax) {
            take = last ? v >= b : v > b;
          } else {
            take = last ? v <= b : v < b;
          }
          if (take) {
            best[i] = v;
            yo[i] = k;
          }
        }
      }
    }
  }

  const ir::Node& node_;
  ArgConfig cfg_;
};

std::vector<DataType> ReduceTypes() {
  return {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kF64,
          DataType::kI32, DataType::kI64, DataType::kU32,  DataType::kU64};
}

}  // namespace

void RegisterReduce(Registry& r) {
  using ir::OpType;
  r.AddRef(OpType::kReduceSum, ReduceTypes(), &ReduceKernel<SumOp>::Create);
  r.AddRef(OpType::kReduceSumSquare, ReduceTypes(), &ReduceKernel<SumSquareOp>::Create);
  r.AddRef(OpType::kReduceL1, ReduceTypes(), &ReduceKernel<L1Op>::Create);
  r.AddRef(OpType::kReduceL2, ReduceTypes(), &ReduceKernel<L2Op>::Create);
  r.AddRef(OpType::kReduceLogSum, ReduceTypes(), &ReduceKernel<LogSumOp>::Create);
  r.AddRef(OpType::kReduceLogSumExp, ReduceTypes(), &ReduceKernel<LogSumExpOp>::Create);
  r.AddRef(OpType::kReduceMean, ReduceTypes(), &ReduceKernel<MeanOp>::Create);
  r.AddRef(OpType::kReduceProd, ReduceTypes(), &ReduceKernel<ProdOp>::Create);
  std::vector<DataType> minmax = ReduceTypes();
  minmax.insert(minmax.end(), {DataType::kI8, DataType::kU8, DataType::kBool});
  r.AddRef(OpType::kReduceMax, minmax, &ReduceKernel<MaxOp>::Create);
  r.AddRef(OpType::kReduceMin, minmax, &ReduceKernel<MinOp>::Create);
  r.AddRef(OpType::kArgMax, NumericTypes(), &ArgKernel<true>::Create);
  r.AddRef(OpType::kArgMin, NumericTypes(), &ArgKernel<false>::Create);
  RegisterReduceAxisOps(r);
  RegisterReduceTopKCumSum(r);
}

}  // namespace kiln::kernels::cpu::ref
