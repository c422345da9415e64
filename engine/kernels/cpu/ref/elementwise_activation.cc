// Activation functions: one functor each (attributes read once by Make), all run by
// UnaryKernel (elementwise_loops.h). Formulas follow the ONNX operator docs; where the literal
// formula overflows (exp of a large input) an algebraically equal stable form is used.
#include "engine/kernels/cpu/ref/elementwise_activation.h"

#include <cmath>
#include <string>

#include "engine/kernels/cpu/ref/elementwise_loops.h"

namespace kiln::kernels::cpu::ref::ew {
namespace {

using ir::OpType;

/// log(1 + exp(x)) without overflow for large x.
template <typename C>
C Softplus(C x) {
  return x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

struct EluOp : AlphaOp<EluOp> {
  static constexpr float kDefaultAlpha = 1.0f;
  template <typename C>
  C operator()(C x) const {
    return x < C(0) ? C(alpha) * std::expm1(x) : x;
  }
};

struct CeluOp : AlphaOp<CeluOp> {
  static constexpr float kDefaultAlpha = 1.0f;
  static absl::StatusOr<CeluOp> Make(const ir::Node& node) {
    ASSIGN_OR_RETURN(CeluOp op, AlphaOp<CeluOp>::Make(node));
    if (op.alpha == 0) return InvalidNode(node, "attribute alpha must be non-zero");
    return op;
  }
  template <typename C>
  C operator()(C x) const {
    // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
    C a = C(alpha);
    C neg = a * std::expm1(x / a);
    return (x > C(0) ? x : C(0)) + (neg < C(0) ? neg : C(0));
  }
};

struct ThresholdedReluOp : AlphaOp<ThresholdedReluOp> {
  static constexpr float kDefaultAlpha = 1.0f;
  template <typename C>
  C operator()(C x) const {
    return x > C(alpha) ? x : C(0);
  }
};

struct SeluOp {
  using Types = FloatList;
  float alpha = 0, gamma = 0;
  static absl::StatusOr<SeluOp> Make(const ir::Node& node) {
    SeluOp op;
    op.alpha = node.GetFloat("alpha", 1.67326319217681884765625f);
    op.gamma = node.GetFloat("gamma", 1.05070102214813232421875f);
    return op;
  }
  template <typename C>
  C operator()(C x) const {
    return x > C(0) ? C(gamma) * x : C(gamma) * (C(alpha) * std::exp(x) - C(alpha));
  }
};

struct HardSigmoidOp {
  using Types = FloatList;
  float alpha = 0, beta = 0;
  static absl::StatusOr<HardSigmoidOp> Make(const ir::Node& node) {
    HardSigmoidOp op;
    op.alpha = node.GetFloat("alpha", 0.2f);
    op.beta = node.GetFloat("beta", 0.5f);
    return op;
  }
  template <typename C>
  C operator()(C x) const {
    C y = C(alpha) * x + C(beta);
    return MinProp(MaxProp(y, C(0)), C(1));
  }
};

struct SoftplusOp {
  using Types = FloatList;
  template <typename C>
  C operator()(C x) const {
    return Softplus(x);
  }
};

struct SoftsignOp {
  using Types = FloatList;
  template <typename C>
  C operator()(C x) const {
    return x / (C(1) + std::abs(x));
  }
};

struct MishOp {
  using Types = FloatList;
  template <typename C>
  C operator()(C x) const {
    return x * std::tanh(Softplus(x));
  }
};

// Shrink-9 accepts integer tensors too; those compute in double and convert back.
struct ShrinkOp {
  using Types = NumericList;
  float bias = 0, lambd = 0;
  static absl::StatusOr<ShrinkOp> Make(const ir::Node& node) {
    ShrinkOp op;
    op.bias = node.GetFloat("bias", 0.0f);
    op.lambd = node.GetFloat("lambd", 0.5f);
    return op;
  }
  template <typename C>
  C operator()(C x) const {
    return ViaFloat(x, [this](auto v) {
      using F = decltype(v);
      if (v < -F(lambd)) return v + F(bias);
      if (v > F(lambd)) return v - F(bias);
      return F(0);
    });
  }
};

}  // namespace

void RegisterActivations(Registry& r) {
  AddUnary<ReluOp>(r, OpType::kRelu);
  AddUnary<LeakyReluOp>(r, OpType::kLeakyRelu);
  AddUnary<EluOp>(r, OpType::kElu);
  AddUnary<SeluOp>(r, OpType::kSelu);
  AddUnary<CeluOp>(r, OpType::kCelu);
  AddUnary<SigmoidOp>(r, OpType::kSigmoid);
  AddUnary<HardSigmoidOp>(r, OpType::kHardSigmoid);
  AddUnary<HardSwishOp>(r, OpType::kHardSwish);
  AddUnary<SoftplusOp>(r, OpType::kSoftplus);
  AddUnary<SoftsignOp>(r, OpType::kSoftsign);
  AddUnary<MishOp>(r, OpType::kMish);
  AddUnary<GeluOp>(r, OpType::kGelu);
  AddUnary<ThresholdedReluOp>(r, OpType::kThresholdedRelu);
  AddUnary<ShrinkOp>(r, OpType::kShrink);
}

}  // namespace kiln::kernels::cpu::ref::ew
