// The activation epilogue of the fused kernels (FusedMatMul, FusedConv), shared by the reference
// kernels (fused.cc) and the AVX-512 FusedMatMul (cpu/avx512/gemm_ops.cc): one parser of the
// `activation` attributes and one dispatch onto the elementwise functors.
#pragma once

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/elementwise_activation.h"

namespace kiln::kernels::cpu::ref {

enum class ActKind {
  kNone,
  kRelu,
  kLeakyRelu,
  kClip,
  kHardSwish,
  kSigmoid,
  kTanh,
  kGelu,
  kGeluTanh,
  kSwish  // SiLU: x * Sigmoid(x)
};

// The fused activation and its parameters, read once by the factory.
struct Activation {
  ActKind kind = ActKind::kNone;
  float alpha = 0.01f;                                 // LeakyRelu
  float lo = -std::numeric_limits<float>::infinity();  // Clip
  float hi = std::numeric_limits<float>::infinity();
};

// x * Sigmoid(x) in the compute type: the Conv -> Sigmoid -> Mul of SiLU (YOLO-style detectors)
// with the sigmoid unrounded.
struct SwishOp {
  template <typename C>
  C operator()(C x) const {
    return x * ew::SigmoidOp{}(x);
  }
};

struct Identity {
  template <typename C>
  C operator()(C x) const {
    return x;
  }
};

/// Reads `activation` (and its parameters) and checks it is one of `allowed` ("" is none);
/// `prefix` + those names for a kernel with several activations (the convolution chain's).
inline absl::StatusOr<Activation> ReadActivation(
    const ir::Node& node, const std::vector<std::pair<std::string, ActKind>>& allowed,
    const std::string& prefix = "") {
  const std::string name = node.GetString(prefix + "activation", "");
  Activation a;
  bool found = false;
  std::string names;
  for (const auto& [n, kind] : allowed) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", "\"", n, "\"");
    if (n == name) {
      a.kind = kind;
      found = true;
    }
  }
  if (!found) {
    return InvalidNode(node, "unsupported ", prefix, "activation \"", name, "\" (expected one of ",
                       names, ")");
  }
  a.alpha = node.GetFloat(prefix + "activation_alpha", 0.01f);
  a.lo = node.GetFloat(prefix + "activation_min", -std::numeric_limits<float>::infinity());
  a.hi = node.GetFloat(prefix + "activation_max", std::numeric_limits<float>::infinity());
  return a;
}

/// Calls f(functor) with the shared elementwise functor of `a` in compute type C, so the
// activation is chosen once per run, not per element.
template <typename C, typename F>
void WithActivation(const Activation& a, F&& f) {
  switch (a.kind) {
    case ActKind::kNone:
      return f(Identity{});
    case ActKind::kRelu:
      return f(ew::ReluOp{});
    case ActKind::kLeakyRelu: {
      ew::LeakyReluOp op;
      op.alpha = a.alpha;
      return f(op);
    }
    case ActKind::kClip:
      return f(ew::ClipFn<C>{static_cast<C>(a.lo), static_cast<C>(a.hi)});
    case ActKind::kHardSwish:
      return f(ew::HardSwishOp{});
    case ActKind::kSigmoid:
      return f(ew::SigmoidOp{});
    case ActKind::kSwish:
      return f(SwishOp{});
    case ActKind::kTanh:
      return f(ew::TanhOp{});
    case ActKind::kGelu:
      return f(ew::GeluOp{});
    case ActKind::kGeluTanh: {
      ew::GeluOp op;
      op.tanh_approx = true;
      return f(op);
    }
  }
}

/// The activations FusedMatMul takes.
inline const std::vector<std::pair<std::string, ActKind>>& MatMulActivations() {
  static const auto* v = new std::vector<std::pair<std::string, ActKind>>{
      {"", ActKind::kNone},           {"Relu", ActKind::kRelu},
      {"Gelu", ActKind::kGelu},       {"GeluTanh", ActKind::kGeluTanh},
      {"Sigmoid", ActKind::kSigmoid}, {"Tanh", ActKind::kTanh}};
  return *v;
}

}  // namespace kiln::kernels::cpu::ref
