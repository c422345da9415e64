// Erf on float, float16 and bfloat16 through the vectorised erf of math.h: the reference Erf's
// values (erf in fp32, one rounding to the output type) within the bound of the vector erf
// (math.h: 2 ulp below |erf| 0.99999).
#include <algorithm>
#include <memory>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/convert.h"
#include "engine/kernels/cpu/avx512/math.h"
#include "engine/kernels/cpu/avx512/register.h"
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
#pragma omp parallel for schedule(static) if (chunks >= 4)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i = c * kChunk, len = std::min(kChunk, n - i);
    if (t == DataType::kF32) {
      ErfF32(x->data<float>() + i, y->data<float>() + i, len);
      continue;
    }
    alignas(64) float tmp[kChunk];
    const uint16_t* src = x->data<uint16_t>() + i;
    uint16_t* dst = y->data<uint16_t>() + i;
    t == DataType::kF16 ? HalfToFloat(src, tmp, len) : Bf16ToFloat(src, tmp, len);
    ErfF32(tmp, tmp, len);
    t == DataType::kF16 ? FloatToHalf(tmp, dst, len) : FloatToBf16(tmp, dst, len);
  }
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
}

}  // namespace kiln::kernels::cpu::avx512
