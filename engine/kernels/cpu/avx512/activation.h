// The unary math and activation ops of activation_ops.cc on fp32 arrays (activation_avx512.cc):
// the piecewise-linear ones and the exactly rounded ones (Sqrt, Reciprocal, Floor, Ceil, Round)
// give the reference's numbers to the bit; the transcendental ones are math.h's functions, within
// the bounds stated there. Call only when the CPU has the kAvx512 features.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {

enum class ActFn {
  kSigmoid,
  kTanh,
  kExp,
  kLog,
  kSoftplus,
  kElu,          // alpha
  kSelu,         // alpha, gamma
  kCelu,         // alpha
  kLeakyRelu,    // alpha
  kHardSigmoid,  // alpha, beta
  kHardSwish,
  kSwish,  // alpha
  kMish,
  kGelu,      // approximate = "none"
  kGeluTanh,  // approximate = "tanh"
  kClip,      // lo, hi
  kSqrt,
  kReciprocal,
  kNeg,
  kAbs,
  kFloor,
  kCeil,
  kRound,  // halves to even
};

/// The attributes an ActFn reads (the others are ignored).
struct ActParams {
  float alpha = 0, beta = 0, gamma = 0;
  float lo = 0, hi = 0;  // Clip's bounds
};

/// y[i] = fn(x[i]) for i < n, computed in fp32 with the reference's formula (LeakyRelu:
/// x < 0 ? alpha x : x; HardSigmoid: min(max(alpha x + beta, 0), 1), NaN propagated; HardSwish:
/// x min(max(x / 6 + 0.5, 0), 1); Clip: min(max(x, lo), hi) as the reference's comparisons, so
/// NaN passes and lo > hi gives hi). `y` may be `x`.
void ActivationF32(ActFn fn, const ActParams& p, const float* x, float* y, int64_t n);

/// ActivationF32 on float16 (t = kF16) or bfloat16 (kBF16) storage: each element widened exactly,
/// the same fp32 arithmetic, one rounding back (half.h's), converted in registers (Elu, Selu,
/// Celu and Swish through a 4 KB fp32 piece): the numbers of ActivationF32 on an fp32 copy.
/// Needs kCpuAvx512Bf16 for kBF16. `y` may be `x`.
void ActivationHalf(ActFn fn, const ActParams& p, DataType t, const uint16_t* x, uint16_t* y,
                    int64_t n);

}  // namespace kiln::kernels::cpu::avx512
