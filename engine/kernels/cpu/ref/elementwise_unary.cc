// Unary math ops: one functor each, all run by UnaryKernel (elementwise_loops.h).
#include <cmath>

#include "engine/kernels/cpu/ref/elementwise_activation.h"
#include "engine/kernels/cpu/ref/elementwise_loops.h"

namespace kiln::kernels::cpu::ref::ew {
namespace {

using ir::OpType;

using AcosOp = FloatUnary<[](auto x) { return std::acos(x); }>;
using AcoshOp = FloatUnary<[](auto x) { return std::acosh(x); }>;
using AsinOp = FloatUnary<[](auto x) { return std::asin(x); }>;
using AsinhOp = FloatUnary<[](auto x) { return std::asinh(x); }>;
using AtanOp = FloatUnary<[](auto x) { return std::atan(x); }>;
using AtanhOp = FloatUnary<[](auto x) { return std::atanh(x); }>;
using CeilOp = FloatUnary<[](auto x) { return std::ceil(x); }>;
using CosOp = FloatUnary<[](auto x) { return std::cos(x); }>;
using CoshOp = FloatUnary<[](auto x) { return std::cosh(x); }>;
using ExpOp = FloatUnary<[](auto x) { return std::exp(x); }>;
using FloorOp = FloatUnary<[](auto x) { return std::floor(x); }>;
using LogOp = FloatUnary<[](auto x) { return std::log(x); }>;
using ReciprocalOp = FloatUnary<[](auto x) { return decltype(x)(1) / x; }>;
// Round: halves go to the nearest even integer (ONNX Round); nearbyint does that in the default
// rounding mode.
using RoundOp = FloatUnary<[](auto x) { return std::nearbyint(x); }>;
using SinOp = FloatUnary<[](auto x) { return std::sin(x); }>;
using SinhOp = FloatUnary<[](auto x) { return std::sinh(x); }>;
using SqrtOp = FloatUnary<[](auto x) { return std::sqrt(x); }>;
using TanOp = FloatUnary<[](auto x) { return std::tan(x); }>;

struct AbsOp {
  using Types = NumericList;
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      return std::abs(x);
    } else if constexpr (std::is_signed_v<C>) {
      return x < 0 ? WrapNeg(x) : x;  // |INT_MIN| wraps to INT_MIN
    } else {
      return x;
    }
  }
};

struct NegOp {
  using Types = FloatSignedList;
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_integral_v<C>) {
      return WrapNeg(x);  // -INT_MIN wraps to INT_MIN
    } else {
      return -x;
    }
  }
};

struct SignOp {
  using Types = NumericList;
  template <typename C>
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) {
      return x > 0 ? C(1) : C(0);
    } else {
      if (x != x) return x;  // NaN stays NaN (numpy.sign)
      return x > C(0) ? C(1) : (x < C(0) ? C(-1) : C(0));
    }
  }
};

// Erf-9 also accepts integer tensors: computed in double, converted back.
struct ErfOp {
  using Types = NumericList;
  template <typename C>
  C operator()(C x) const {
    return ViaFloat(x, [](auto v) { return std::erf(v); });
  }
};

struct NotOp {
  using Types = BoolList;
  bool operator()(bool x) const { return !x; }
};

struct IsNaNOp : FloatOp {
  static constexpr bool kBoolOut = true;
  template <typename C>
  bool operator()(C x) const {
    return std::isnan(x);
  }
};

struct IsInfOp : FloatOp {
  static constexpr bool kBoolOut = true;
  bool detect_negative = true;
  bool detect_positive = true;
  static absl::StatusOr<IsInfOp> Make(const ir::Node& node) {
    IsInfOp op;
    op.detect_negative = node.GetInt("detect_negative", 1) != 0;
    op.detect_positive = node.GetInt("detect_positive", 1) != 0;
    return op;
  }
  template <typename C>
  bool operator()(C x) const {
    return std::isinf(x) && (x > 0 ? detect_positive : detect_negative);
  }
};

}  // namespace

void RegisterUnaryMath(Registry& r) {
  AddUnary<AbsOp>(r, OpType::kAbs);
  AddUnary<AcosOp>(r, OpType::kAcos);
  AddUnary<AcoshOp>(r, OpType::kAcosh);
  AddUnary<AsinOp>(r, OpType::kAsin);
  AddUnary<AsinhOp>(r, OpType::kAsinh);
  AddUnary<AtanOp>(r, OpType::kAtan);
  AddUnary<AtanhOp>(r, OpType::kAtanh);
  AddUnary<CeilOp>(r, OpType::kCeil);
  AddUnary<CosOp>(r, OpType::kCos);
  AddUnary<CoshOp>(r, OpType::kCosh);
  AddUnary<ErfOp>(r, OpType::kErf);
  AddUnary<ExpOp>(r, OpType::kExp);
  AddUnary<FloorOp>(r, OpType::kFloor);
  AddUnary<LogOp>(r, OpType::kLog);
  AddUnary<NegOp>(r, OpType::kNeg);
  AddUnary<ReciprocalOp>(r, OpType::kReciprocal);
  AddUnary<RoundOp>(r, OpType::kRound);
  AddUnary<SignOp>(r, OpType::kSign);
  AddUnary<SinOp>(r, OpType::kSin);
  AddUnary<SinhOp>(r, OpType::kSinh);
  AddUnary<SqrtOp>(r, OpType::kSqrt);
  AddUnary<TanOp>(r, OpType::kTan);
  AddUnary<TanhOp>(r, OpType::kTanh);
  AddUnary<NotOp>(r, OpType::kNot);
  AddUnary<IsInfOp>(r, OpType::kIsInf);
  AddUnary<IsNaNOp>(r, OpType::kIsNaN);
}

}  // namespace kiln::kernels::cpu::ref::ew
