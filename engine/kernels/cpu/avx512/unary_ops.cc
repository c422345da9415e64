// Erf, Softmax and LogSoftmax on float, float16 and bfloat16 through the vectorised erf and exp
// of math.h.
// Erf: the reference Erf's values (erf in fp32, one rounding to the output type) within the
// bound of the vector erf (math.h: 2 ulp below |erf| 0.99999). Softmax along any axis: the
// reference's arithmetic in fp32 (max, exp of the shifted values, their sum, one division each)
// with the vector exp, then one rounding to the output type. LogSoftmax along any axis: the
// reference's steps in fp32 (max, the shifted values, log of the sum of their exps, shifted - log
// sum) with ExpF32 (within 1 ulp): the only difference from the reference is in log(sum), off by
// about the sum's relative error (1 ulp per exp plus the summation order), i.e. an absolute error
// of a few 2^-24. A contiguous row (the last axis) sums in 16 lanes (math.h SoftmaxRowF32 /
// LogSoftmaxRowF32); an inner axis of fp32 goes 16 columns at a time (SoftmaxColumnsF32), other
// strided rows are gathered.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/common/half.h"
#include "engine/kernels/cpu/avx512/math.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

absl::Status ErfRun(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, ref::RequireInput(node, ctx, 0));
  const DataType t = x->dtype();
  if (t != DataType::kF32 && t != DataType::kF16 && t != DataType::kBF16) {
    return absl::InternalError(node.Label() + " fast Erf selected for " + DataTypeOnnxName(t));
  }
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, t, x->dims()));
  const int64_t n = x->num_elements();
  // Compute bound (~20 instructions per 16 elements): both cores from a few chunks on.
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  ParallelFor(chunks, chunks >= 4, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t i = c * kChunk, len = std::min(kChunk, n - i);
      if (t == DataType::kF32) {
        ErfF32(x->data<float>() + i, y->data<float>() + i, len);
        continue;
      }
      MathHalf(MathFn::kErf, t, x->data<uint16_t>() + i, y->data<uint16_t>() + i, len);
    }
  });
  return absl::OkStatus();
}

// Softmax along `axis`: opset < 13 folds every dim from `axis` on into one row; later opsets
// reduce that axis alone. A row is contiguous when the axis is the last one (the common case);
// otherwise its elements are `inner` apart and gathered into the row buffer.
template <bool kLog>
absl::Status SoftmaxRun(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, ref::RequireInput(node, ctx, 0));
  const DataType t = x->dtype();
  if (x->rank() == 0) return ref::InvalidNode(node, "input must have rank >= 1");
  const bool coerce_2d = node.since_version < 13;
  ASSIGN_OR_RETURN(int axis,
                   ref::NormalizeAxis(node, node.GetInt("axis", coerce_2d ? 1 : -1), x->rank()));
  int64_t outer = 1, n = 1, inner = 1;
  for (int d = 0; d < x->rank(); ++d) {
    (d < axis ? outer : d == axis || coerce_2d ? n : inner) *= x->dim(d);
  }
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, t, x->dims()));
  if (t == DataType::kF32 && inner > 1) {
    // An inner axis (Softmax over the channels of [N, C, H, W], say): 16 columns at a time in
    // registers, in tasks of up to 256 columns of one outer index, instead of gathering each
    // strided row (LogSoftmax over axis 1 of [8, 100, 500]: 0.66 -> 0.16 ms on one thread).
    constexpr int64_t kCols = 256;
    const int64_t blocks = (inner + kCols - 1) / kCols, tasks = outer * blocks;
    ParallelFor(tasks, tasks > 1 && outer * n * inner >= (int64_t{1} << 15),
                [&](int64_t task_begin, int64_t task_end) {
                  for (int64_t task = task_begin; task < task_end; ++task) {
                    const int64_t o = task / blocks, c0 = task % blocks * kCols;
                    const int64_t base = o * n * inner + c0;
                    SoftmaxColumnsF32(x->data<float>() + base, y->data<float>() + base, n, inner,
                                      std::min(kCols, inner - c0), kLog);
                  }
                });
    return absl::OkStatus();
  }
  const int64_t rows = outer * inner;
  const bool parallel = rows > 1 && rows * n >= (int64_t{1} << 15);
  ParallelFor(rows, parallel, [&](int64_t r_begin, int64_t r_end) {
    std::vector<float> buf(n);
    for (int64_t r = r_begin; r < r_end; ++r) {
      float* v = buf.data();
      const int64_t base = (r / inner) * n * inner + r % inner;  // element k at base + k * inner
      if (kLog && inner == 1 && t == DataType::kF32) {
        LogSoftmaxRowF32(x->data<float>() + base, y->data<float>() + base, n);
        continue;
      }
      if (!kLog && inner == 1 && t == DataType::kF32) {
        SoftmaxRowF32(x->data<float>() + base, y->data<float>() + base, n);
        continue;
      }
      if (!kLog && inner == 1) {  // 16-bit storage converted in registers, the exps in `buf`
        SoftmaxRowHalf(t, x->data<uint16_t>() + base, y->data<uint16_t>() + base, n, v);
        continue;
      }
      for (int64_t k = 0; k < n; ++k) {  // a strided row: gathered into `buf`
        const int64_t e = base + k * inner;
        v[k] = t == DataType::kF32   ? x->data<float>()[e]
               : t == DataType::kF16 ? HalfBitsToFloat(x->data<uint16_t>()[e])
                                     : BFloat16BitsToFloat(x->data<uint16_t>()[e]);
      }
      if (kLog) {
        LogSoftmaxRowF32(v, v, n);
      } else {
        SoftmaxRowF32(v, v, n);
      }
      for (int64_t k = 0; k < n; ++k) {
        const int64_t e = base + k * inner;
        if (t == DataType::kF32) {
          y->data<float>()[e] = v[k];
        } else {
          y->data<uint16_t>()[e] =
              t == DataType::kF16 ? FloatToHalfBits(v[k]) : FloatToBFloat16Bits(v[k]);
        }
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterUnary(Registry& r) {
  KernelDef def{ir::OpType::kErf,
                {DataType::kF32, DataType::kF16, DataType::kBF16},
                0,
                Backend::kCpu,
                Isa::kAvx512,
                &FunctionKernel<ErfRun>::Create};
  def.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 for bfloat16 outputs
  r.Add(def);
  KernelDef softmax = def;
  softmax.op = ir::OpType::kSoftmax;
  softmax.factory = &FunctionKernel<SoftmaxRun<false>>::Create;
  r.Add(softmax);
  KernelDef log_softmax = def;
  log_softmax.op = ir::OpType::kLogSoftmax;
  log_softmax.factory = &FunctionKernel<SoftmaxRun<true>>::Create;
  r.Add(log_softmax);
}

}  // namespace kiln::kernels::cpu::avx512
