// Cast between float, float16 and bfloat16 with the vectorised conversions of convert.h,
// bit-identical to the reference Cast. Other dtype pairs fall through to the reference kernel
// (KernelDef::supports).
#include <memory>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/convert.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

DataType CastTo(const ir::Node& node) {
  const ir::Attribute* to = node.attr("to");
  if (to == nullptr || to->type != ir::Attribute::Type::kInt) return DataType::kUndefined;
  return DataTypeFromOnnx(static_cast<int32_t>(to->i));
}

// Pairs among float, float16, bfloat16 with at least one 16-bit side (float -> float is a copy
// the reference does as well).
bool Supports(const ir::Node& node) {
  const ir::Value* x = node.input(0);
  if (x == nullptr) return false;
  const DataType from = x->dtype, to = CastTo(node);
  return IsF32OrHalf(from) && IsF32OrHalf(to) && from != to;
}

// Converts n elements of `from` at src into `to` at dst; fp16 <-> bf16 goes through fp32 (exact
// from fp16, then one rounding, as the reference).
void Convert(DataType from, DataType to, const void* src, void* dst, int64_t n) {
  const auto* s16 = static_cast<const uint16_t*>(src);
  auto* d16 = static_cast<uint16_t*>(dst);
  if (from == DataType::kF32) {
    const auto* f = static_cast<const float*>(src);
    to == DataType::kF16 ? FloatToHalf(f, d16, n) : FloatToBf16(f, d16, n);
    return;
  }
  if (to == DataType::kF32) {
    auto* f = static_cast<float*>(dst);
    from == DataType::kF16 ? HalfToFloat(s16, f, n) : Bf16ToFloat(s16, f, n);
    return;
  }
  constexpr int64_t kChunk = 1024;
  alignas(64) float tmp[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = n - i < kChunk ? n - i : kChunk;
    if (from == DataType::kF16) {
      HalfToFloat(s16 + i, tmp, len);
      FloatToBf16(tmp, d16 + i, len);
    } else {
      Bf16ToFloat(s16 + i, tmp, len);
      FloatToHalf(tmp, d16 + i, len);
    }
  }
}

absl::Status CastRun(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, ref::RequireInput(node, ctx, 0));
  const DataType to = CastTo(node);
  if (!IsF32OrHalf(x->dtype()) || !IsF32OrHalf(to)) {
    return absl::InternalError(node.Label() + " fast Cast selected for an unsupported dtype pair");
  }
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, to, x->dims()));
  const int64_t n = x->num_elements();
  const int64_t in_size = DataTypeSize(x->dtype()), out_size = DataTypeSize(to);
  // Memory bound: split into large chunks only when both cores can each stream a few MB.
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const char* src = static_cast<const char*>(x->raw_data());
  char* dst = static_cast<char*>(y->raw_data());
#pragma omp parallel for schedule(static) if (chunks >= 8)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i = c * kChunk, len = n - i < kChunk ? n - i : kChunk;
    Convert(x->dtype(), to, src + i * in_size, dst + i * out_size, len);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterCast(Registry& r) {
  KernelDef def{ir::OpType::kCast,
                {DataType::kF32, DataType::kF16, DataType::kBF16},
                0,
                Backend::kCpu,
                Isa::kAvx512,
                &FunctionKernel<CastRun>::Create};
  def.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 (every pair shares the one kernel)
  def.supports = &Supports;
  r.Add(def);
}

}  // namespace kiln::kernels::cpu::avx512
