// Ops over more than two inputs or with run-time bounds: variadic Max/Min/Mean/Sum (N-ary
// broadcast, one fold per element so fp16/bf16 accumulate in fp32 and round once), Where
// (3-way broadcast) and Clip (bounds from attributes before opset 11, from inputs after).
#include <cmath>
#include <limits>

#include "engine/kernels/cpu/ref/elementwise_activation.h"
#include "engine/kernels/cpu/ref/elementwise_loops.h"

namespace kiln::kernels::cpu::ref::ew {
namespace {

using ir::OpType;

// ---- Max / Min / Mean / Sum ------------------------------------------------------------------

/// A variadic op: `Fold(acc, x)` combines, `Finish(acc, n)` produces the output value.
template <auto F, typename List, bool kMean = false>
struct FoldOp {
  using Types = List;
  template <typename C>
  C Fold(C acc, C x) const {
    return F(acc, x);
  }
  template <typename C>
  C Finish(C acc, int n) const {
    if constexpr (kMean) {
      return acc / static_cast<C>(n);
    } else {
      return acc;
    }
  }
};
using MaxOp = FoldOp<[](auto a, auto b) { return MaxProp(a, b); }, NumericList>;
using MinOp = FoldOp<[](auto a, auto b) { return MinProp(a, b); }, NumericList>;
using SumOp = FoldOp<[](auto a, auto b) { return a + b; }, FloatList>;
using MeanOp = FoldOp<[](auto a, auto b) { return a + b; }, FloatList, true>;

template <typename Op>
class VariadicKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    if (node.num_inputs() < 1) return InvalidNode(node, "needs at least one input");
    return std::unique_ptr<Kernel>(new VariadicKernel(node));
  }

  absl::Status Run(KernelContext& ctx) override {
    std::vector<const ir::Tensor*> ins;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      ASSIGN_OR_RETURN(const ir::Tensor* t, RequireInput(node_, ctx, i));
      if (i > 0) RETURN_IF_ERROR(RequireSameDtype(node_, *ins[0], *t, i));
      ins.push_back(t);
    }
    if (ins.empty()) return InvalidNode(node_, "needs at least one input");
    ASSIGN_OR_RETURN(BroadcastPlan plan, BroadcastPlan::Make(node_, ins));
    return DispatchList(typename Op::Types{}, ins[0]->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, DataTypeOf<T>(), plan.out_dims()));
      const int n_in = static_cast<int>(ins.size());
      std::vector<const Stor<T>*> src(n_in);
      for (int k = 0; k < n_in; ++k) src[k] = ins[k]->template data<Stor<T>>();
      Stor<T>* dst = out->template data<Stor<T>>();
      plan.ForEachRun([&](int64_t o, const int64_t* off, int64_t n, const int64_t* st) {
        for (int64_t i = 0; i < n; ++i) {
          Comp<T> acc = LoadV<T>(src[0][off[0] + i * st[0]]);
          for (int k = 1; k < n_in; ++k) acc = op_.Fold(acc, LoadV<T>(src[k][off[k] + i * st[k]]));
          dst[o + i] = StoreV<T>(op_.Finish(acc, n_in));
        }
      });
      return absl::OkStatus();
    });
  }

 private:
  explicit VariadicKernel(const ir::Node& node) : node_(node) {}
  const ir::Node& node_;
  Op op_;
};

// ---- Where -----------------------------------------------------------------------------------

/// Where(cond, X, Y): pure selection, so it dispatches on element size only.
absl::Status RunWhere(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* cond, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 1));
  ASSIGN_OR_RETURN(const ir::Tensor* y, RequireInput(node, ctx, 2));
  if (cond->dtype() != DataType::kBool) {
    return InvalidNode(node, "condition must be bool, got ", DataTypeOnnxName(cond->dtype()));
  }
  RETURN_IF_ERROR(RequireSameDtype(node, *x, *y, 2));
  ASSIGN_OR_RETURN(BroadcastPlan plan, BroadcastPlan::Make(node, {cond, x, y}));
  return DispatchBySize(x->dtype(), [&](auto tag) -> absl::Status {
    using S = typename decltype(tag)::type;
    ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, x->dtype(), plan.out_dims()));
    const uint8_t* pc = cond->data<uint8_t>();
    const S* px = x->data<S>();
    const S* py = y->data<S>();
    S* po = out->data<S>();
    plan.ForEachRun([&](int64_t o, const int64_t* off, int64_t n, const int64_t* st) {
      for (int64_t i = 0; i < n; ++i) {
        po[o + i] = pc[off[0] + i * st[0]] ? px[off[1] + i * st[1]] : py[off[2] + i * st[2]];
      }
    });
    return absl::OkStatus();
  });
}

// ---- Clip ------------------------------------------------------------------------------------

/// A float attribute bound in compute type C (saturated for integers).
template <typename C>
C BoundFromFloat(float v) {
  if constexpr (std::is_integral_v<C>) {
    return SaturatingCast<C>(v);
  } else {
    return static_cast<C>(v);
  }
}

/// Clip-11+ bound from optional input `i`: a one-element tensor of the input's dtype; `dflt`
/// when omitted.
template <typename T>
absl::StatusOr<Comp<T>> BoundFromInput(const ir::Node& node, KernelContext& ctx,
                                       const ir::Tensor& x, int i, Comp<T> dflt) {
  const ir::Tensor* t = ctx.input(i);
  if (t == nullptr) return dflt;
  RETURN_IF_ERROR(RequireSameDtype(node, x, *t, i));
  if (t->num_elements() != 1) {
    return InvalidNode(node, i == 1 ? "min" : "max", " must be a scalar, got shape ",
                       ir::DimsToString(t->dims()));
  }
  return LoadV<T>(t->data<Stor<T>>()[0]);
}

absl::Status RunClip(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  return DispatchList(NumericList{}, x->dtype(), [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    using C = Comp<T>;
    C lo, hi;
    if (node.since_version < 11) {
      // Clip-6: attributes, defaulting to the float range as the spec states.
      lo = BoundFromFloat<C>(node.GetFloat("min", std::numeric_limits<float>::lowest()));
      hi = BoundFromFloat<C>(node.GetFloat("max", std::numeric_limits<float>::max()));
    } else {
      // Clip-11+: an omitted bound does not clip (infinities pass through).
      constexpr bool kFloat = std::is_floating_point_v<C>;
      const C lowest =
          kFloat ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::lowest();
      const C highest = kFloat ? std::numeric_limits<C>::infinity() : std::numeric_limits<C>::max();
      ASSIGN_OR_RETURN(lo, BoundFromInput<T>(node, ctx, *x, 1, lowest));
      ASSIGN_OR_RETURN(hi, BoundFromInput<T>(node, ctx, *x, 2, highest));
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), x->dims()));
    UnaryLoop<T, T>(*x, *y, ClipFn<C>{lo, hi});
    return absl::OkStatus();
  });
}

template <typename Op>
void AddVariadic(Registry& r, OpType op) {
  r.AddRef(op, DataTypesOf(typename Op::Types{}), &VariadicKernel<Op>::Create);
}

}  // namespace

void RegisterVariadic(Registry& r) {
  AddVariadic<MaxOp>(r, OpType::kMax);
  AddVariadic<MinOp>(r, OpType::kMin);
  AddVariadic<SumOp>(r, OpType::kSum);
  AddVariadic<MeanOp>(r, OpType::kMean);
  r.AddRef(OpType::kWhere, DataTypesOf(AllList{}), &FunctionKernel<&RunWhere>::Create,
           /*type_source=*/1);
  r.AddRef(OpType::kClip, DataTypesOf(NumericList{}), &FunctionKernel<&RunClip>::Create);
}

}  // namespace kiln::kernels::cpu::ref::ew
