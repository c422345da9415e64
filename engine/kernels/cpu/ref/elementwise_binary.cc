// Binary ops with numpy broadcasting: arithmetic, Mod, Pow, logical, comparisons, PRelu. Each is
// a functor run by BinaryKernel (or, for Pow's two type parameters, PowKernel) over the one
// broadcasting loop in elementwise_loops.h.
#include <cmath>

#include "engine/kernels/cpu/ref/elementwise_loops.h"

namespace kiln::kernels::cpu::ref::ew {
namespace {

using ir::OpType;

// ---- arithmetic ------------------------------------------------------------------------------

struct AddOp {
  using Types = NumericList;
  template <typename C>
  C operator()(C a, C b) const {
    return WrapAdd(a, b);
  }
};

struct SubOp {
  using Types = NumericList;
  template <typename C>
  C operator()(C a, C b) const {
    return WrapSub(a, b);
  }
};

struct MulOp {
  using Types = NumericList;
  template <typename C>
  C operator()(C a, C b) const {
    return WrapMul(a, b);
  }
};

/// Integer division by zero has no defined result (and traps on x86): reject it up front.
template <typename T>
absl::Status CheckNoZeroDivisor(const ir::Node& node, const ir::Tensor& b) {
  if constexpr (std::is_integral_v<T>) {
    const T* p = b.data<T>();
    for (int64_t i = 0; i < b.num_elements(); ++i) {
      if (p[i] == 0) return InvalidNode(node, "integer division by zero (divisor element ", i, ")");
    }
  }
  return absl::OkStatus();
}

struct DivOp {
  using Types = NumericList;
  template <typename T>
  absl::Status Check(const ir::Node& node, const ir::Tensor& b) const {
    return CheckNoZeroDivisor<T>(node, b);
  }
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C> && std::is_signed_v<C>) {
      if (b == C(-1)) return WrapNeg(a);  // INT_MIN / -1 wraps instead of trapping
    }
    return a / b;  // integers truncate toward zero, as ONNX Div specifies
  }
};

/// Mod: fmod=1 takes the sign of the dividend (C fmod / %); fmod=0 the sign of the divisor
/// (Python / numpy.mod). ONNX asks for fmod=1 on floating inputs; fmod=0 on floats follows
/// numpy.mod like the ONNX reference implementation instead of failing.
struct ModOp {
  using Types = NumericList;
  bool fmod = false;
  static absl::StatusOr<ModOp> Make(const ir::Node& node) {
    int64_t f = node.GetInt("fmod", 0);
    if (f != 0 && f != 1) return InvalidNode(node, "attribute fmod must be 0 or 1, got ", f);
    ModOp op;
    op.fmod = f == 1;
    return op;
  }
  template <typename T>
  absl::Status Check(const ir::Node& node, const ir::Tensor& b) const {
    return CheckNoZeroDivisor<T>(node, b);
  }
  template <typename C>
  C operator()(C a, C b) const {
    if constexpr (std::is_unsigned_v<C>) {
      return static_cast<C>(a % b);
    } else {
      C r;
      if constexpr (std::is_floating_point_v<C>) {
        r = std::fmod(a, b);
      } else {
        r = b == C(-1) ? C(0) : static_cast<C>(a % b);  // INT_MIN % -1 traps on x86
      }
      // Python rule: a non-zero remainder takes the divisor's sign (|r| < |b| so r + b is exact
      // for integers and cannot overflow).
      if (!fmod && r != C(0) && ((r < C(0)) != (b < C(0)))) r = static_cast<C>(r + b);
      return r;
    }
  }
};

// ---- Pow: base type T and exponent type T1 may differ ----------------------------------------

using PowBaseList = TypeList<float, double, Float16, BFloat16, int32_t, int64_t>;

/// a^b for integers, wrapping like repeated multiplication. Negative exponents go through double
/// (giving 0 except for bases 1 and -1, and a saturated value for base 0).
template <typename C, typename E>
C IntPow(C a, E e) {
  if constexpr (std::is_signed_v<E>) {
    if (e < 0) return SaturatingCast<C>(std::pow(static_cast<double>(a), static_cast<double>(e)));
  }
  C result = 1;
  C base = a;
  for (auto n = static_cast<std::make_unsigned_t<E>>(e); n != 0; n >>= 1) {
    if (n & 1) result = WrapMul(result, base);
    base = WrapMul(base, base);
  }
  return result;
}

template <typename CA, typename CB>
CA PowValue(CA a, CB b) {
  if constexpr (std::is_floating_point_v<CA>) {
    // Floating base: compute in the base's compute type, or in double when the exponent is double
    // (fp16/bf16 bases still round once to their storage type).
    // An exponent of 2 (x^2 in norms and variances) is the correctly rounded square, where the
    // C library's pow is off by an ulp on some inputs (an fp32 square is exact in double, so a
    // double exponent rounds once too); the fast kernels compute it the same way.
    using W = std::conditional_t<std::is_same_v<CB, double>, double, CA>;
    if (b == CB(2)) return static_cast<CA>(static_cast<W>(a) * static_cast<W>(a));
    return static_cast<CA>(std::pow(static_cast<W>(a), static_cast<W>(b)));
  } else if constexpr (std::is_integral_v<CB>) {
    return IntPow(a, b);
  } else {
    return SaturatingCast<CA>(std::pow(static_cast<double>(a), static_cast<double>(b)));
  }
}

class PowKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    return std::unique_ptr<Kernel>(new PowKernel(node));
  }
  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* a, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* b, RequireInput(node_, ctx, 1));
    ASSIGN_OR_RETURN(BroadcastPlan plan, BroadcastPlan::Make(node_, {a, b}));
    return DispatchList(PowBaseList{}, a->dtype(), [&](auto ta) -> absl::Status {
      using TA = typename decltype(ta)::type;
      return DispatchList(NumericList{}, b->dtype(), [&](auto tb) -> absl::Status {
        using TB = typename decltype(tb)::type;
        ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, DataTypeOf<TA>(), plan.out_dims()));
        BinaryLoop<TA, TB, TA>(plan, *a, *b, *out,
                               [](Comp<TA> x, Comp<TB> y) { return PowValue(x, y); });
        return absl::OkStatus();
      });
    });
  }

 private:
  explicit PowKernel(const ir::Node& node) : node_(node) {}
  const ir::Node& node_;
};

// ---- logical and comparison (bool output) ----------------------------------------------------

template <auto F, typename List>
struct Predicate {
  using Types = List;
  static constexpr bool kBoolOut = true;
  template <typename C>
  bool operator()(C a, C b) const {
    return F(a, b);
  }
};
using AndOp = Predicate<[](bool a, bool b) { return a && b; }, BoolList>;
using OrOp = Predicate<[](bool a, bool b) { return a || b; }, BoolList>;
using XorOp = Predicate<[](bool a, bool b) { return a != b; }, BoolList>;
using EqualOp = Predicate<[](auto a, auto b) { return a == b; }, AllList>;
using GreaterOp = Predicate<[](auto a, auto b) { return (a > b); }, NumericList>;
using GreaterOrEqualOp = Predicate<[](auto a, auto b) { return (a >= b); }, NumericList>;
using LessOp = Predicate<[](auto a, auto b) { return a < b; }, NumericList>;
using LessOrEqualOp = Predicate<[](auto a, auto b) { return a <= b; }, NumericList>;

// ---- PRelu: slope broadcasts to X (unidirectionally) -----------------------------------------

struct PReluOp {
  using Types = TypeList<float, double, Float16, BFloat16, int32_t, int64_t, uint32_t, uint64_t>;
  template <typename C>
  C operator()(C x, C slope) const {
    return x < C(0) ? WrapMul(slope, x) : x;
  }
};

/// PRelu is BinaryKernel<PReluOp> plus the rule that the output keeps X's shape.
class PReluKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(auto inner, BinaryKernel<PReluOp>::Create(node));
    return std::unique_ptr<Kernel>(new PReluKernel(node, std::move(inner)));
  }
  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* slope, RequireInput(node_, ctx, 1));
    ASSIGN_OR_RETURN(std::vector<int64_t> dims, BroadcastShapes(node_, x->dims(), slope->dims()));
    if (dims != x->dims()) {
      return InvalidNode(node_, "slope shape ", ir::DimsToString(slope->dims()),
                         " does not broadcast to X shape ", ir::DimsToString(x->dims()));
    }
    return inner_->Run(ctx);
  }

 private:
  PReluKernel(const ir::Node& node, std::unique_ptr<Kernel> inner)
      : node_(node), inner_(std::move(inner)) {}
  const ir::Node& node_;
  std::unique_ptr<Kernel> inner_;
};

}  // namespace

void RegisterBinary(Registry& r) {
  AddBinary<AddOp>(r, OpType::kAdd);
  AddBinary<SubOp>(r, OpType::kSub);
  AddBinary<MulOp>(r, OpType::kMul);
  AddBinary<DivOp>(r, OpType::kDiv);
  AddBinary<ModOp>(r, OpType::kMod);
  r.AddRef(OpType::kPow, DataTypesOf(PowBaseList{}), &PowKernel::Create);
  AddBinary<AndOp>(r, OpType::kAnd);
  AddBinary<OrOp>(r, OpType::kOr);
  AddBinary<XorOp>(r, OpType::kXor);
  AddBinary<EqualOp>(r, OpType::kEqual);
  AddBinary<GreaterOp>(r, OpType::kGreater);
  AddBinary<GreaterOrEqualOp>(r, OpType::kGreaterOrEqual);
  AddBinary<LessOp>(r, OpType::kLess);
  AddBinary<LessOrEqualOp>(r, OpType::kLessOrEqual);
  r.AddRef(OpType::kPRelu, DataTypesOf(PReluOp::Types{}), &PReluKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref::ew
