// General numpy broadcasting for the AVX-512 elementwise kernels: the iteration plan (built from
// run-time dims in broadcast.cc) and the loops over it (broadcast_avx512.cc: arithmetic, Max,
// Min, PRelu, Pow by a scalar; compare_avx512.cc: comparisons and Where). The reference's
// numbers to the bit: float16 and bfloat16 are widened exactly to fp32, each output element is
// computed in fp32 folding the inputs left to right ((x0 op x1) op x2 ...), and rounded once to
// the storage type (the conversions of vec_convert_inl.h). Call the loops only when the CPU has
// the kAvx512 features and kCpuAvx512Bf16.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/common/dtype.h"

namespace kiln::kernels::cpu::avx512 {

inline constexpr int kBcMaxInputs = 4;
inline constexpr int kBcMaxRank = 8;

/// How the output of a broadcasting op walks its inputs. `dims` are the output's dims with the
/// size-1 dims dropped and adjacent dims merged wherever every input walks them alike (rank >= 1;
/// a scalar output is one dim of 1). strides[k][d] is input k's element stride along dims[d], 0
/// where input k is broadcast. The last dim is the inner run: its stride is 1 (the input is read
/// contiguously) or 0 (one element, splat to all lanes).
struct BcPlan {
  int rank = 1;
  int num_inputs = 0;
  int64_t n = 0;  // output elements
  int64_t dims[kBcMaxRank] = {};
  int64_t strides[kBcMaxInputs][kBcMaxRank] = {};
};

/// Plans the numpy broadcast of the dims of `inputs` (1 to kBcMaxInputs of them) into `plan` and
/// the (unmerged) output dims into `out_dims`. False when the dims do not broadcast or the merged
/// rank exceeds kBcMaxRank (the caller runs the reference kernel, which reports the error).
bool MakeBcPlan(const std::vector<const std::vector<int64_t>*>& inputs, BcPlan* plan,
                std::vector<int64_t>* out_dims);

/// Two-operand (folded N-operand) arithmetic of BcArith. Max and Min propagate NaN as the
/// reference (a > b || a != a ? a : b); PRelu is x < 0 ? slope * x : x (two inputs, x first).
enum class BcOp { kAdd, kSub, kMul, kDiv, kMax, kMin, kPRelu };

/// dst = ((in0 op in1) op in2) ... over `plan` (plan.num_inputs >= 2 inputs), all of `dtype`
/// (kF32, kF16 or kBF16). Runs on the OpenMP threads when the output is large.
void BcArith(BcOp op, DataType dtype, const BcPlan& plan, const void* const* ins, void* dst);

/// dst = ((in0 op in1) op in2) ... for op kAdd, kSub or kMul on int32 or int64 (`dtype` kI32 or
/// kI64) inputs, wrapping around in two's complement as the reference does.
void BcIntArith(BcOp op, DataType dtype, const BcPlan& plan, const void* const* ins, void* dst);

/// Pow(x, e) with a scalar exponent e, as the reference computes it (so its bits): kSquare x * x
/// for e == 2 (the reference's rule too: the correctly rounded square, where powf(x, 2) is off by
/// an ulp on about 1.5M of the 2^32 fp32 inputs), kGeneral the C library's powf on each element.
enum class PowKind { kGeneral, kSquare };

/// dst[i] = Pow(x[i], e) for i < n as `kind` says; x and dst of `dtype` (kF32, kF16, kBF16).
void PowScalar(PowKind kind, float e, DataType dtype, const void* x, void* dst, int64_t n);

/// The comparisons of BcCompare; ordered (a NaN operand gives false) as the reference.
enum class BcCmp { kEqual, kLess, kLessOrEqual, kGreater, kGreaterOrEqual };

/// dst = a cmp b (bool bytes 0 / 1) over a two-input `plan`; a and b of `dtype` (kF32, kF16,
/// kBF16 compared in fp32 after exact widening; kI32, kI64 as integers).
void BcCompare(BcCmp op, DataType dtype, const BcPlan& plan, const void* a, const void* b,
               uint8_t* dst);

/// dst = cond ? x : y over a three-input `plan` (cond bool bytes, any non-zero true); x, y and
/// dst hold elements of `elem_size` bytes (1, 2, 4 or 8), copied bit for bit.
void BcWhere(int elem_size, const BcPlan& plan, const uint8_t* cond, const void* x, const void* y,
             void* dst);

}  // namespace kiln::kernels::cpu::avx512
