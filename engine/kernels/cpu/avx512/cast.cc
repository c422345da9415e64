// Cast between float, float16 and bfloat16, int32 to float (the integer GEMMs' sums: QDQ
// models' MatMulInteger -> Cast -> Mul) and bool to float (one-hot encodings, masks), with the
// vectorised conversions of convert.h, bit-identical to the reference Cast. Other dtype pairs fall
// through to the reference kernel (KernelDef::supports).
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
// the reference does as well), and int32 or bool -> float.
bool Convertible(DataType from, DataType to) {
  return (IsF32OrHalf(from) && IsF32OrHalf(to) && from != to) ||
         ((from == DataType::kI32 || from == DataType::kBool) && to == DataType::kF32);
}

bool Supports(const ir::Node& node) {
  const ir::Value* x = node.input(0);
  if (x == nullptr) return false;
  return Convertible(x->dtype, CastTo(node));
}

absl::Status CastRun(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, ref::RequireInput(node, ctx, 0));
  const DataType to = CastTo(node);
  if (!Convertible(x->dtype(), to)) {
    return absl::InternalError(node.Label() + " fast Cast selected for an unsupported dtype pair");
  }
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, to, x->dims()));
  ConvertArray(x->dtype(), to, x->raw_data(), y->raw_data(), x->num_elements());
  return absl::OkStatus();
}

}  // namespace

void RegisterCast(Registry& r) {
  KernelDef def{ir::OpType::kCast,
                {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kI32, DataType::kBool},
                0,
                Backend::kCpu,
                Isa::kAvx512,
                &FunctionKernel<CastRun>::Create};
  def.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 (every pair shares the one kernel)
  def.supports = &Supports;
  r.Add(def);
}

}  // namespace kiln::kernels::cpu::avx512
