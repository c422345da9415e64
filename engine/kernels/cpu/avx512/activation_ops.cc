// Unary math and activation ops on float, float16 and bfloat16 (activation.h, math.h): Sigmoid,
// Tanh, Exp, Log, Softplus, Elu, Selu, Celu, LeakyRelu, HardSigmoid, HardSwish, Swish, Mish, Gelu
// (both forms), Clip, Sqrt, Reciprocal, Neg, Abs, Floor, Ceil, Round. Each element widened
// exactly to fp32, the reference's formula computed there, one rounding to the output type: the
// piecewise-linear and exactly rounded ops give the reference's numbers to the bit, the
// transcendental ones are within the bounds math.h states. Attribute errors are the reference
// kernel's (built first); a run the fast path does not take (another dtype, a Clip bound that is
// not a one-element tensor of the input's dtype) goes to that reference kernel.
#include <algorithm>
#include <limits>
#include <memory>
#include <string>

#include "engine/common/cpu_features.h"
#include "engine/common/half.h"
#include "engine/kernels/cpu/avx512/activation.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

using ir::OpType;

struct OpEntry {
  OpType op;
  ActFn fn;
};

constexpr OpEntry kOps[] = {
    {OpType::kSigmoid, ActFn::kSigmoid},
    {OpType::kTanh, ActFn::kTanh},
    {OpType::kExp, ActFn::kExp},
    {OpType::kLog, ActFn::kLog},
    {OpType::kSoftplus, ActFn::kSoftplus},
    {OpType::kElu, ActFn::kElu},
    {OpType::kSelu, ActFn::kSelu},
    {OpType::kCelu, ActFn::kCelu},
    {OpType::kLeakyRelu, ActFn::kLeakyRelu},
    {OpType::kHardSigmoid, ActFn::kHardSigmoid},
    {OpType::kHardSwish, ActFn::kHardSwish},
    {OpType::kSwish, ActFn::kSwish},
    {OpType::kMish, ActFn::kMish},
    {OpType::kGelu, ActFn::kGelu},  // kGeluTanh by the node's `approximate`
    {OpType::kClip, ActFn::kClip},
    {OpType::kSqrt, ActFn::kSqrt},
    {OpType::kReciprocal, ActFn::kReciprocal},
    {OpType::kNeg, ActFn::kNeg},
    {OpType::kAbs, ActFn::kAbs},
    {OpType::kFloor, ActFn::kFloor},
    {OpType::kCeil, ActFn::kCeil},
    {OpType::kRound, ActFn::kRound},
};

ActFn FnOf(OpType op) {
  for (const OpEntry& e : kOps) {
    if (e.op == op) return e.fn;
  }
  return ActFn::kNeg;  // not reached: only kOps' ops are registered
}

bool IsFloatType(DataType t) {
  return t == DataType::kF32 || t == DataType::kF16 || t == DataType::kBF16;
}

// One element of a float, float16 or bfloat16 tensor, widened exactly.
float ScalarOf(const ir::Tensor& t) {
  if (t.dtype() == DataType::kF32) return t.data<float>()[0];
  const uint16_t b = t.data<uint16_t>()[0];
  return t.dtype() == DataType::kF16 ? HalfBitsToFloat(b) : BFloat16BitsToFloat(b);
}

class ActivationKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    // The reference kernel validates the attributes (Celu's alpha, Gelu's approximate) with its
    // own errors, and runs what the fast path leaves.
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    ActParams p;
    ActFn fn = FnOf(node.op);
    switch (fn) {
      case ActFn::kElu:
      case ActFn::kCelu:
      case ActFn::kSwish:
        p.alpha = node.GetFloat("alpha", 1.0f);
        break;
      case ActFn::kLeakyRelu:
        p.alpha = node.GetFloat("alpha", 0.01f);
        break;
      case ActFn::kSelu:
        p.alpha = node.GetFloat("alpha", 1.67326319217681884765625f);
        p.gamma = node.GetFloat("gamma", 1.05070102214813232421875f);
        break;
      case ActFn::kHardSigmoid:
        p.alpha = node.GetFloat("alpha", 0.2f);
        p.beta = node.GetFloat("beta", 0.5f);
        break;
      case ActFn::kGelu:
        if (node.GetString("approximate", "none") == "tanh") fn = ActFn::kGeluTanh;
        break;
      case ActFn::kClip:
        // Clip-6: attributes, defaulting to the float range; Clip-11+: inputs (at run time).
        p.lo = node.GetFloat("min", std::numeric_limits<float>::lowest());
        p.hi = node.GetFloat("max", std::numeric_limits<float>::max());
        break;
      default:
        break;
    }
    return std::unique_ptr<Kernel>(new ActivationKernel(node, fn, p, std::move(reference)));
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x = ctx.input(0);
    if (x == nullptr || !IsFloatType(x->dtype())) return reference_->Run(ctx);
    const DataType t = x->dtype();
    ActParams p = params_;
    if (fn_ == ActFn::kClip && node_.since_version >= 11) {
      // An omitted bound does not clip (infinities pass through).
      p.lo = -std::numeric_limits<float>::infinity();
      p.hi = std::numeric_limits<float>::infinity();
      for (int i : {1, 2}) {
        const ir::Tensor* b = ctx.input(i);
        if (b == nullptr) continue;
        if (b->dtype() != t || b->num_elements() != 1) return reference_->Run(ctx);  // its error
        (i == 1 ? p.lo : p.hi) = ScalarOf(*b);
      }
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, t, x->dims()));
    const int64_t n = x->num_elements();
    // Chunks of 4096; both cores from a few chunks on, as ErfRun. 16-bit storage is converted in
    // registers (ActivationHalf), so it reads and writes half the bytes of fp32.
    constexpr int64_t kChunk = 4096;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    const ActFn fn = fn_;
    ParallelFor(chunks, chunks >= 4, [&](int64_t c_begin, int64_t c_end) {
      for (int64_t c = c_begin; c < c_end; ++c) {
        const int64_t i = c * kChunk, len = std::min(kChunk, n - i);
        if (t == DataType::kF32) {
          ActivationF32(fn, p, x->data<float>() + i, y->data<float>() + i, len);
        } else {
          ActivationHalf(fn, p, t, x->data<uint16_t>() + i, y->data<uint16_t>() + i, len);
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  ActivationKernel(const ir::Node& node, ActFn fn, ActParams params,
                   std::unique_ptr<Kernel> reference)
      : node_(node), fn_(fn), params_(params), reference_(std::move(reference)) {}

  const ir::Node& node_;
  ActFn fn_;
  ActParams params_;
  std::unique_ptr<Kernel> reference_;
};

}  // namespace

void RegisterActivation(Registry& r) {
  for (const OpEntry& e : kOps) {
    KernelDef def{e.op,
                  {DataType::kF32, DataType::kF16, DataType::kBF16},
                  0,
                  Backend::kCpu,
                  Isa::kAvx512,
                  &ActivationKernel::Create};
    def.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 for bfloat16 outputs
    r.Add(def);
  }
}

}  // namespace kiln::kernels::cpu::avx512
