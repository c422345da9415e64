// Erf and Softmax on float, float16 and bfloat16 through the vectorised erf and exp of math.h.
// Erf: the reference Erf's values (erf in fp32, one rounding to the output type) within the
// bound of the vector erf (math.h: 2 ulp below |erf| 0.99999). Softmax over the last axis: the
// reference's arithmetic in fp32 (max, exp of the shifted values, their sum, one division each)
// with the vector exp and the sum in 16 lanes, then one rounding to the output type.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

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

// Softmax over contiguous rows: opset < 13 folds every dim from `axis` on into the row; later
// opsets reduce one axis, here only the last one (the reference kernel takes the others).
bool SoftmaxSupports(const ir::Node& node) {
  if (node.since_version < 13) return true;
  const ir::Value* x = node.input(0);
  if (!x || !x->shape.rank_known) return false;
  const int64_t axis = node.GetInt("axis", -1);
  return axis == -1 || axis == x->shape.rank() - 1;
}

absl::Status SoftmaxRun(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, ref::RequireInput(node, ctx, 0));
  const DataType t = x->dtype();
  if (x->rank() == 0) return ref::InvalidNode(node, "input must have rank >= 1");
  ASSIGN_OR_RETURN(
      int axis,
      ref::NormalizeAxis(node, node.GetInt("axis", node.since_version < 13 ? 1 : -1), x->rank()));
  if (node.since_version >= 13 && axis != x->rank() - 1) {
    return absl::InternalError(node.Label() + " fast Softmax selected for an inner axis");
  }
  int64_t n = 1;
  for (int d = axis; d < x->rank(); ++d) n *= x->dim(d);
  const int64_t rows = n == 0 ? 0 : x->num_elements() / n;
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, t, x->dims()));
  const bool parallel = rows > 1 && rows * n >= (int64_t{1} << 15);
#pragma omp parallel if (parallel)
  {
    std::vector<float> buf(n);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float* v = buf.data();
      if (t == DataType::kF32) {
        std::memcpy(v, x->data<float>() + r * n, n * sizeof(float));
      } else {
        const uint16_t* src = x->data<uint16_t>() + r * n;
        t == DataType::kF16 ? HalfToFloat(src, v, n) : Bf16ToFloat(src, v, n);
      }
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < n; ++i) mx = v[i] > mx ? v[i] : mx;
      for (int64_t i = 0; i < n; ++i) v[i] -= mx;  // exp cannot overflow; cancels in the ratio
      ExpF32(v, v, n);
      float lanes[16] = {};
      int64_t j = 0;
      for (; j + 16 <= n; j += 16) {
        for (int l = 0; l < 16; ++l) lanes[l] += v[j + l];
      }
      for (; j < n; ++j) lanes[j % 16] += v[j];
      float sum = 0;
      for (float l : lanes) sum += l;
      for (int64_t i = 0; i < n; ++i) v[i] /= sum;
      if (t == DataType::kF32) {
        std::memcpy(y->data<float>() + r * n, v, n * sizeof(float));
      } else {
        uint16_t* dst = y->data<uint16_t>() + r * n;
        t == DataType::kF16 ? FloatToHalf(v, dst, n) : FloatToBf16(v, dst, n);
      }
    }
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
  KernelDef softmax = def;
  softmax.op = ir::OpType::kSoftmax;
  softmax.factory = &FunctionKernel<SoftmaxRun>::Create;
  softmax.supports = &SoftmaxSupports;
  r.Add(softmax);
}

}  // namespace kiln::kernels::cpu::avx512
