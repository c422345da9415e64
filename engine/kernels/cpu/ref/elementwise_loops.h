// Machinery shared by the elementwise reference kernels (elementwise_*.cc, cast.cc): type lists
// that drive both registration and dispatch, the bool-as-uint8 storage rule, defined-behaviour
// integer arithmetic and float->int conversion, one N-ary broadcasting iterator, and the unary
// and binary loops and kernel classes every elementwise op is an instance of.
//
// An op is a small functor; the loops and kernels are written once here. Adding an op means
// writing its functor and one registration line, never another loop.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/registry.h"

namespace kiln::kernels::cpu::ref::ew {

// ---------------------------------------------------------------------------------------------
// Type lists: one list per op says which dtypes it registers *and* which it dispatches, so the
// two can never disagree.

template <typename... Ts>
struct TypeList {};

using FloatList = TypeList<float, double, Float16, BFloat16>;
using SignedIntList = TypeList<int8_t, int16_t, int32_t, int64_t>;
using IntList = TypeList<int8_t, uint8_t, int16_t, uint16_t, int32_t, uint32_t, int64_t, uint64_t>;

template <typename... A, typename... B>
constexpr TypeList<A..., B...> Concat(TypeList<A...>, TypeList<B...>) {
  return {};
}
using NumericList = decltype(Concat(FloatList{}, IntList{}));
using FloatSignedList = decltype(Concat(FloatList{}, SignedIntList{}));
using BoolList = TypeList<bool>;
using AllList = decltype(Concat(NumericList{}, BoolList{}));

template <typename... Ts>
std::vector<DataType> DataTypesOf(TypeList<Ts...>) {
  return {DataTypeOf<Ts>()...};
}

/// Calls `f(TypeTag<T>{})` for the T of `list` whose dtype is `dt`.
template <typename... Ts, typename F>
absl::Status DispatchList(TypeList<Ts...>, DataType dt, F&& f) {
  absl::Status status =
      absl::UnimplementedError(absl::StrCat("unsupported dtype ", DataTypeOnnxName(dt)));
  (void)((DataTypeOf<Ts>() == dt ? (status = f(TypeTag<Ts>{}), true) : false) || ...);
  return status;
}

// ---------------------------------------------------------------------------------------------
// Storage and compute values. Bool tensors hold uint8_t 0/1; any non-zero byte reads as true so a
// stray 2 cannot become an invalid `bool`.

template <typename T>
using Stor = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

/// Arithmetic type of T (fp16/bf16 -> float, bool -> bool, others themselves).
template <typename T>
using Comp = std::conditional_t<std::is_same_v<T, bool>, bool, Compute<T>>;

template <typename T>
inline Comp<T> LoadV(Stor<T> v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else {
    return Load<T>(v);
  }
}

template <typename T, typename C>
inline Stor<T> StoreV(C v) {
  if constexpr (std::is_same_v<T, bool>) {
    return static_cast<uint8_t>(v ? 1 : 0);
  } else {
    return Store<T>(v);
  }
}

/// Floating -> integer conversion with defined behaviour for every input: truncates toward zero,
/// saturates at the integer range, NaN gives 0. (C++ leaves out-of-range conversion undefined.)
template <typename I, typename F>
inline I SaturatingCast(F v) {
  static_assert(std::is_integral_v<I> && std::is_floating_point_v<F>);
  if (std::isnan(v)) return 0;
  // The bounds as F: min is a power of two (exact); max+1 is a power of two (exact), so compare
  // against it with >= to avoid the rounding of max itself.
  constexpr F lo = static_cast<F>(std::numeric_limits<I>::min());
  constexpr F hi_excl = static_cast<F>(std::numeric_limits<I>::max() / 2 + 1) * F(2);
  if (v <= lo) return std::numeric_limits<I>::min();
  if (v >= hi_excl) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

/// Computes `f` on an integer through double (for float-only math such as Erf, Shrink on ints)
/// and converts back with SaturatingCast; floating values pass straight through.
template <typename C, typename F>
inline C ViaFloat(C x, const F& f) {
  if constexpr (std::is_integral_v<C>) {
    return SaturatingCast<C>(f(static_cast<double>(x)));
  } else {
    return f(x);
  }
}

// Integer arithmetic wraps (two's complement, as ONNX runtimes do); signed overflow is undefined
// in C++, so the arithmetic runs in an unsigned type at least as wide as `unsigned` (narrower
// unsigned types would promote to int and could overflow in a multiply).
template <typename C>
using UWide = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;

template <typename C>
inline C WrapAdd(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<UWide<C>>(a) + static_cast<UWide<C>>(b));
  } else {
    return a + b;
  }
}
template <typename C>
inline C WrapSub(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<UWide<C>>(a) - static_cast<UWide<C>>(b));
  } else {
    return a - b;
  }
}
template <typename C>
inline C WrapMul(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<UWide<C>>(a) * static_cast<UWide<C>>(b));
  } else {
    return a * b;
  }
}
template <typename C>
inline C WrapNeg(C a) {
  return WrapSub(C(0), a);
}

/// Maximum / minimum that propagate NaN (numpy.maximum semantics, which ONNX's reference uses).
template <typename C>
inline C MaxProp(C a, C b) {
  return (a > b || a != a) ? a : b;
}
template <typename C>
inline C MinProp(C a, C b) {
  return (a < b || a != a) ? a : b;
}

// ---------------------------------------------------------------------------------------------
// Broadcasting.

/// Iteration plan over the numpy-broadcast of N input shapes. Output dims of size 1 are dropped
/// and adjacent dims that every input walks contiguously are merged, so the inner loop runs over
/// the longest possible stretch and the outer odometer does little work.
class BroadcastPlan {
 public:
  /// Fails (InvalidArgument naming `node`) when the shapes do not broadcast.
  static absl::StatusOr<BroadcastPlan> Make(const ir::Node& node,
                                            const std::vector<const ir::Tensor*>& inputs);

  /// The (uncoalesced) output shape.
  const std::vector<int64_t>& out_dims() const { return out_dims_; }
  int64_t num_elements() const { return num_elements_; }

  /// Calls `body(out_offset, in_offsets, n, in_inner_strides)` for each contiguous run of `n`
  /// output elements; input k's element for output `out_offset + i` is at
  /// `in_offsets[k] + i * in_inner_strides[k]`.
  template <typename Body>
  void ForEachRun(Body&& body) const;

 private:
  int num_inputs_ = 0;
  std::vector<int64_t> out_dims_;
  int64_t num_elements_ = 0;
  std::vector<int64_t> dims_;     // coalesced, rank >= 1
  std::vector<int64_t> strides_;  // [input * rank + dim], coalesced
};

template <typename Body>
void BroadcastPlan::ForEachRun(Body&& body) const {
  if (num_elements_ == 0) return;
  const int rank = static_cast<int>(dims_.size());
  const int n_in = num_inputs_;
  const int64_t inner = dims_[rank - 1];
  std::vector<int64_t> idx(rank, 0);
  std::vector<int64_t> off(n_in, 0);
  std::vector<int64_t> inner_strides(n_in);
  for (int k = 0; k < n_in; ++k) inner_strides[k] = strides_[k * rank + rank - 1];
  for (int64_t out = 0; out < num_elements_; out += inner) {
    body(out, off.data(), inner, inner_strides.data());
    for (int d = rank - 2; d >= 0; --d) {
      for (int k = 0; k < n_in; ++k) off[k] += strides_[k * rank + d];
      if (++idx[d] < dims_[d]) break;
      for (int k = 0; k < n_in; ++k) off[k] -= strides_[k * rank + d] * dims_[d];
      idx[d] = 0;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Loops. `f` receives compute values (Comp<T>) and returns a compute value; storage conversion
// happens here, once per element, so every op obeys the fp16/bf16 rule by construction. Long
// runs are split over the threads (each element is computed alone, so the numbers are the same
// on any thread count); short ones are not worth waking them for.

inline constexpr int64_t kParallelRun = int64_t{1} << 15;

template <typename TI, typename TO, typename F>
void UnaryLoop(const ir::Tensor& x, ir::Tensor& y, const F& f) {
  const Stor<TI>* px = x.data<Stor<TI>>();
  Stor<TO>* py = y.data<Stor<TO>>();
  const int64_t n = x.num_elements();
  ParallelFor(n, n >= kParallelRun, [&](int64_t i_begin, int64_t i_end) {
    for (int64_t i = i_begin; i < i_end; ++i) py[i] = StoreV<TO>(f(LoadV<TI>(px[i])));
  });
}

template <typename TA, typename TB, typename TO, typename F>
void BinaryLoop(const BroadcastPlan& plan, const ir::Tensor& a, const ir::Tensor& b,
                ir::Tensor& out, const F& f) {
  const Stor<TA>* pa = a.data<Stor<TA>>();
  const Stor<TB>* pb = b.data<Stor<TB>>();
  Stor<TO>* po = out.data<Stor<TO>>();
  plan.ForEachRun([&](int64_t o, const int64_t* off, int64_t n, const int64_t* st) {
    const Stor<TA>* ra = pa + off[0];
    const Stor<TB>* rb = pb + off[1];
    Stor<TO>* ro = po + o;
    const int64_t sa = st[0], sb = st[1];
    ParallelFor(n, n >= kParallelRun, [&](int64_t i_begin, int64_t i_end) {
      for (int64_t i = i_begin; i < i_end; ++i) {
        ro[i] = StoreV<TO>(f(LoadV<TA>(ra[i * sa]), LoadV<TB>(rb[i * sb])));
      }
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Kernels. An op functor `Op` provides:
//   using Types = <TypeList>;                    dtypes of input 0 it registers and dispatches
//   static constexpr bool kBoolOut;              (optional) output is bool instead of T
//   static absl::StatusOr<Op> Make(const Node&); (optional) reads and checks attributes
//   template <typename C> auto operator()(C...) const;
// Binary ops may also provide
//   template <typename C> absl::Status Check(const ir::Node&, const ir::Tensor& b) const;
// which runs before the loop (integer division by zero).

template <typename Op>
concept HasMake = requires(const ir::Node& n) {
  Op::Make(n);
};
template <typename Op, typename T>
concept HasCheck = requires(const Op& op, const ir::Node& n, const ir::Tensor& t) {
  op.template Check<T>(n, t);
};

template <typename Op>
absl::StatusOr<Op> MakeOp(const ir::Node& node) {
  if constexpr (HasMake<Op>) {
    return Op::Make(node);
  } else {
    return Op{};
  }
}

template <typename Op>
constexpr bool BoolOut() {
  if constexpr (requires { Op::kBoolOut; }) {
    return Op::kBoolOut;
  } else {
    return false;
  }
}

/// Base of the elementwise kernels: holds the node (for error labels) and the parsed functor.
template <typename Op>
class OpKernel : public Kernel {
 protected:
  OpKernel(const ir::Node& node, Op op) : node_(node), op_(std::move(op)) {}
  const ir::Node& node_;
  Op op_;
};

/// y = op(x), same shape; output dtype T (or bool).
template <typename Op>
class UnaryKernel final : public OpKernel<Op> {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(Op op, MakeOp<Op>(node));
    return std::unique_ptr<Kernel>(new UnaryKernel(node, std::move(op)));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(this->node_, ctx, 0));
    return DispatchList(typename Op::Types{}, x->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      using O = std::conditional_t<BoolOut<Op>(), bool, T>;
      ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, DataTypeOf<O>(), x->dims()));
      UnaryLoop<T, O>(*x, *y, [this](Comp<T> v) { return this->op_(v); });
      return absl::OkStatus();
    });
  }

 private:
  using OpKernel<Op>::OpKernel;
};

/// Checks that input `i` has the same dtype as input 0 (ONNX type constraint T shared).
absl::Status RequireSameDtype(const ir::Node& node, const ir::Tensor& first, const ir::Tensor& t,
                              int i);

/// c = op(a, b) with numpy broadcasting; a and b share dtype T; output T (or bool).
template <typename Op>
class BinaryKernel final : public OpKernel<Op> {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(Op op, MakeOp<Op>(node));
    return std::unique_ptr<Kernel>(new BinaryKernel(node, std::move(op)));
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Node& node = this->node_;
    ASSIGN_OR_RETURN(const ir::Tensor* a, RequireInput(node, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* b, RequireInput(node, ctx, 1));
    RETURN_IF_ERROR(RequireSameDtype(node, *a, *b, 1));
    ASSIGN_OR_RETURN(BroadcastPlan plan, BroadcastPlan::Make(node, {a, b}));
    return DispatchList(typename Op::Types{}, a->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      using O = std::conditional_t<BoolOut<Op>(), bool, T>;
      if constexpr (HasCheck<Op, T>) {
        if (plan.num_elements() > 0) RETURN_IF_ERROR(this->op_.template Check<T>(node, *b));
      }
      ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, DataTypeOf<O>(), plan.out_dims()));
      BinaryLoop<T, T, O>(plan, *a, *b, *out,
                          [this](Comp<T> x, Comp<T> y) { return this->op_(x, y); });
      return absl::OkStatus();
    });
  }

 private:
  using OpKernel<Op>::OpKernel;
};

/// Registers `Op` as a unary / binary kernel for its type list.
template <typename Op>
void AddUnary(Registry& r, ir::OpType op) {
  r.AddRef(op, DataTypesOf(typename Op::Types{}), &UnaryKernel<Op>::Create);
}
template <typename Op>
void AddBinary(Registry& r, ir::OpType op) {
  r.AddRef(op, DataTypesOf(typename Op::Types{}), &BinaryKernel<Op>::Create);
}

// The family's parts, called by RegisterElementwise (elementwise.cc).
void RegisterUnaryMath(Registry& r);    // elementwise_unary.cc
void RegisterActivations(Registry& r);  // elementwise_activation.cc
void RegisterBinary(Registry& r);       // elementwise_binary.cc
void RegisterVariadic(Registry& r);     // elementwise_variadic.cc: Max/Min/Mean/Sum, Where, Clip

}  // namespace kiln::kernels::cpu::ref::ew
