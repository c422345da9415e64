// Elementwise arithmetic on float, float16 and bfloat16 storage (elementwise_avx512.cc) on
// inputs of one shape, for the fast Add, Sub, Mul, Div, Sum and Relu kernels (elementwise_ops.cc;
// broadcast operands go through broadcast.h). The reference's numbers
// to the bit: each element is computed in fp32 from its inputs widened exactly, folded left to
// right (Sum: ((x0 + x1) + x2) ...), and rounded once to the storage type (round to nearest
// even, the conversions of vec_convert_inl.h). Call only when the CPU has the kAvx512 features
// and kCpuAvx512Bf16.
#pragma once

#include <cstdint>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {

enum class EwOp { kAdd, kSub, kMul, kDiv, kRelu };

/// dst[i] = fold of op over ins[0][i] .. ins[nin-1][i] (Relu: of ins[0][i] alone) for i < n;
/// every pointer holds n elements of `dtype` (kF32, kF16 or kBF16). Runs on the OpenMP threads
/// when n is large; `dst` may be one of the inputs.
void EwSameShape(EwOp op, DataType dtype, const void* const* ins, int nin, void* dst, int64_t n);

}  // namespace kiln::kernels::cpu::avx512
