// Activation functors shared by the elementwise kernels (elementwise_activation.cc,
// elementwise_unary.cc, elementwise_variadic.cc) and the fused kernels (fused_*.cc), which apply
// them in their epilogues: one definition of each formula for both.
#pragma once

#include <cmath>
#include <string>

#include "engine/kernels/cpu/ref/elementwise_loops.h"

namespace kiln::kernels::cpu::ref::ew {

struct FloatOp {
  using Types = FloatList;
};

// Float-only math: `F` (a captureless generic lambda) evaluated in the compute type (float for
// float/fp16/bf16, double for double).
template <auto F>
struct FloatUnary : FloatOp {
  template <typename C>
  C operator()(C x) const {
    return F(x);
  }
};
using TanhOp = FloatUnary<[](auto x) { return std::tanh(x); }>;

struct ReluOp {
  using Types = FloatSignedList;  // Relu-14 added int8..int64
  template <typename C>
  C operator()(C x) const {
    return x < C(0) ? C(0) : x;  // NaN passes through
  }
};

/// Base of the activations with one `alpha` attribute.
template <typename Derived>
struct AlphaOp {
  using Types = FloatList;
  float alpha = 0;
  static absl::StatusOr<Derived> Make(const ir::Node& node) {
    Derived op;
    op.alpha = node.GetFloat("alpha", Derived::kDefaultAlpha);
    return op;
  }
};

struct LeakyReluOp : AlphaOp<LeakyReluOp> {
  static constexpr float kDefaultAlpha = 0.01f;
  template <typename C>
  C operator()(C x) const {
    return x < C(0) ? C(alpha) * x : x;
  }
};

struct HardSwishOp {
  using Types = FloatList;
  template <typename C>
  C operator()(C x) const {
    // x * HardSigmoid(x) with alpha = 1/6, beta = 0.5.
    C hs = MinProp(MaxProp(x / C(6) + C(0.5), C(0)), C(1));
    return x * hs;
  }
};

struct SigmoidOp {
  using Types = FloatList;
  template <typename C>
  C operator()(C x) const {
    // Both branches equal 1 / (1 + exp(-x)); each keeps exp's argument <= 0 so it cannot
    // overflow.
    if (x >= C(0)) return C(1) / (C(1) + std::exp(-x));
    C e = std::exp(x);
    return e / (C(1) + e);
  }
};

struct GeluOp {
  using Types = FloatList;
  bool tanh_approx = false;
  static absl::StatusOr<GeluOp> Make(const ir::Node& node) {
    std::string mode = node.GetString("approximate", "none");
    if (mode != "none" && mode != "tanh") {
      return InvalidNode(node, "attribute approximate must be \"none\" or \"tanh\", got \"", mode,
                         "\"");
    }
    GeluOp op;
    op.tanh_approx = mode == "tanh";
    return op;
  }
  template <typename C>
  C operator()(C x) const {
    if (tanh_approx) {
      const C k = C(0.79788456080286535587989211986876);  // sqrt(2 / pi)
      return C(0.5) * x * (C(1) + std::tanh(k * (x + C(0.044715) * x * x * x)));
    }
    return C(0.5) * x * (C(1) + std::erf(x * C(0.70710678118654752440084436210485)));
  }
};

/// min(max(x, lo), hi): gives `hi` everywhere when lo > hi (Clip-13 doc); NaN passes through.
template <typename C>
struct ClipFn {
  C lo, hi;
  C operator()(C v) const {
    C r = v < lo ? lo : v;
    return r > hi ? hi : r;
  }
};

}  // namespace kiln::kernels::cpu::ref::ew
