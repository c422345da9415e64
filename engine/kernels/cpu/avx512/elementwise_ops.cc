// Add, Sub, Mul, Sum and Relu on float, float16 and bfloat16 when every input has the output's
// shape (no broadcasting): the residual sums and activations between convolutions. The
// reference's numbers to the bit (elementwise.h); a run whose inputs turn out to broadcast (a
// dynamic shape) goes to the reference kernel.
#include <memory>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/elementwise.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

bool FastType(DataType t) {
  return t == DataType::kF32 || t == DataType::kF16 || t == DataType::kBF16;
}

EwOp OpOf(ir::OpType op) {
  switch (op) {
    case ir::OpType::kSub:
      return EwOp::kSub;
    case ir::OpType::kMul:
      return EwOp::kMul;
    case ir::OpType::kRelu:
      return EwOp::kRelu;
    default:
      return EwOp::kAdd;  // Add, Sum
  }
}

class SameShapeKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(const KernelDef* ref_def, Registry::Default().Find(node, 0));
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ref_def->factory(node));
    return std::unique_ptr<Kernel>(new SameShapeKernel(node, std::move(reference)));
  }

  // Inputs of one float dtype whose static shapes equal the output's; Add, Sub and Mul take
  // two, Sum one or more, Relu one.
  static bool Supports(const ir::Node& node) {
    const int n = node.num_inputs();
    switch (node.op) {
      case ir::OpType::kAdd:
      case ir::OpType::kSub:
      case ir::OpType::kMul:
        if (n != 2) return false;
        break;
      case ir::OpType::kSum:
        if (n < 1) return false;
        break;
      case ir::OpType::kRelu:
        if (n != 1) return false;
        break;
      default:
        return false;
    }
    const ir::Value* y = node.outputs.empty() ? nullptr : node.outputs[0];
    if (!y || !y->shape.rank_known || !y->shape.is_static()) return false;
    for (const ir::Value* v : node.inputs) {
      if (!v || v->dtype != node.inputs[0]->dtype || !FastType(v->dtype)) return false;
      if (!v->shape.rank_known || !v->shape.is_static() ||
          v->shape.StaticDims() != y->shape.StaticDims()) {
        return false;
      }
    }
    return true;
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x0 = ctx.input(0);
    std::vector<const void*> ins;
    bool same = x0 != nullptr && FastType(x0->dtype());
    for (int i = 0; same && i < ctx.num_inputs(); ++i) {
      const ir::Tensor* t = ctx.input(i);
      same = t != nullptr && t->dtype() == x0->dtype() && t->dims() == x0->dims();
      if (same) ins.push_back(t->raw_data());
    }
    if (!same) return reference_->Run(ctx);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x0->dtype(), x0->dims()));
    EwSameShape(OpOf(node_.op), x0->dtype(), ins.data(), static_cast<int>(ins.size()),
                y->raw_data(), y->num_elements());
    return absl::OkStatus();
  }

 private:
  SameShapeKernel(const ir::Node& node, std::unique_ptr<Kernel> reference)
      : node_(node), reference_(std::move(reference)) {}

  const ir::Node& node_;
  std::unique_ptr<Kernel> reference_;
};

}  // namespace

void RegisterElementwise(Registry& r) {
  for (ir::OpType op : {ir::OpType::kAdd, ir::OpType::kSub, ir::OpType::kMul, ir::OpType::kSum,
                        ir::OpType::kRelu}) {
    KernelDef def{op,
                  {DataType::kF32, DataType::kF16, DataType::kBF16},
                  0,
                  Backend::kCpu,
                  Isa::kAvx512,
                  &SameShapeKernel::Create};
    def.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 for bfloat16 outputs
    def.supports = &SameShapeKernel::Supports;
    r.Add(def);
  }
}

}  // namespace kiln::kernels::cpu::avx512
