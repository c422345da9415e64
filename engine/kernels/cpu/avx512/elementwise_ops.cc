// Add, Sub, Mul, Div, Sum, Max, Min, PRelu, Relu and Pow by a scalar on float, float16 and
// bfloat16 (Add, Sub and Mul of two int32 / int64 tensors too: the integer models' bias and
// zero-point arithmetic) with general numpy broadcasting, planned from the run-time dims (dynamic
// batch dims included): the residual sums, per-channel scales and biases, SE-block gates and
// normalisation arithmetic of real models. The reference's numbers to the bit (broadcast.h,
// elementwise.h); a run the fast loops do not cover (more than kBcMaxInputs broadcast inputs, mixed
// dtypes, a non-scalar exponent, shapes that do not broadcast) goes to the reference kernel, which
// also reports the errors.
#include <memory>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/common/half.h"
#include "engine/kernels/cpu/avx512/broadcast.h"
#include "engine/kernels/cpu/avx512/elementwise.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

using ir::OpType;

EwOp SameShapeOp(OpType op) {
  switch (op) {
    case OpType::kSub:
      return EwOp::kSub;
    case OpType::kMul:
      return EwOp::kMul;
    case OpType::kDiv:
      return EwOp::kDiv;
    case OpType::kRelu:
      return EwOp::kRelu;
    default:
      return EwOp::kAdd;  // Add, Sum
  }
}

BcOp BroadcastOp(OpType op) {
  switch (op) {
    case OpType::kSub:
      return BcOp::kSub;
    case OpType::kMul:
      return BcOp::kMul;
    case OpType::kDiv:
      return BcOp::kDiv;
    case OpType::kMax:
      return BcOp::kMax;
    case OpType::kMin:
      return BcOp::kMin;
    case OpType::kPRelu:
      return BcOp::kPRelu;
    default:
      return BcOp::kAdd;  // Add, Sum
  }
}

bool IsBinary(OpType op) {
  return op == OpType::kAdd || op == OpType::kSub || op == OpType::kMul || op == OpType::kDiv ||
         op == OpType::kPRelu;
}

// Ops whose same-shape form EwSameShape computes (Max, Min and PRelu go through BcArith always).
bool HasSameShapeLoop(OpType op) {
  return op == OpType::kAdd || op == OpType::kSub || op == OpType::kMul || op == OpType::kDiv ||
         op == OpType::kSum || op == OpType::kRelu;
}

class ElementwiseKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    return std::unique_ptr<Kernel>(new ElementwiseKernel(node, std::move(reference)));
  }

  // Inputs present and of one float dtype, shapes static or not: Add, Sub, Mul, Div and PRelu
  // two; Sum one or more; Max and Min two or more; Relu one.
  static bool Supports(const ir::Node& node) {
    const int n = node.num_inputs();
    if (n < 1) return false;
    if (IsIntOperands(node)) return true;
    for (const ir::Value* v : node.inputs) {
      if (!v || v->dtype != node.inputs[0]->dtype || !IsF32OrHalf(v->dtype)) return false;
    }
    if (IsBinary(node.op)) return n == 2;
    if (node.op == OpType::kRelu) return n == 1;
    if (node.op == OpType::kMax || node.op == OpType::kMin) return n >= 2;
    return node.op == OpType::kSum;
  }

  absl::Status Run(KernelContext& ctx) override {
    const int nin = ctx.num_inputs();
    const ir::Tensor* x0 = ctx.input(0);
    if (x0 != nullptr && IsInt(x0->dtype())) return RunInt(ctx);
    if (x0 == nullptr || !IsF32OrHalf(x0->dtype())) return reference_->Run(ctx);
    std::vector<const void*> ins;
    std::vector<const std::vector<int64_t>*> dims;
    bool same_shape = true;
    for (int i = 0; i < nin; ++i) {
      const ir::Tensor* t = ctx.input(i);
      if (t == nullptr || t->dtype() != x0->dtype()) return reference_->Run(ctx);
      ins.push_back(t->raw_data());
      dims.push_back(&t->dims());
      same_shape = same_shape && t->dims() == x0->dims();
    }
    const DataType dtype = x0->dtype();
    if (same_shape && HasSameShapeLoop(node_.op) && (nin == 2 || !IsBinary(node_.op))) {
      ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, dtype, x0->dims()));
      EwSameShape(SameShapeOp(node_.op), dtype, ins.data(), nin, y->raw_data(), y->num_elements());
      return absl::OkStatus();
    }
    if (node_.op == OpType::kRelu || nin < 2 || nin > kBcMaxInputs ||
        (IsBinary(node_.op) && nin != 2)) {
      return reference_->Run(ctx);
    }
    BcPlan plan;
    std::vector<int64_t> out_dims;
    if (!MakeBcPlan(dims, &plan, &out_dims)) return reference_->Run(ctx);
    // PRelu's output keeps X's shape: a slope that would widen it is the reference's error.
    if (node_.op == OpType::kPRelu && out_dims != x0->dims()) return reference_->Run(ctx);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, dtype, out_dims));
    BcArith(BroadcastOp(node_.op), dtype, plan, ins.data(), y->raw_data());
    return absl::OkStatus();
  }

 private:
  static bool IsInt(DataType t) { return t == DataType::kI32 || t == DataType::kI64; }

  // Add, Sub or Mul of two int32 or two int64 operands.
  static bool IsIntOperands(const ir::Node& node) {
    return (node.op == OpType::kAdd || node.op == OpType::kSub || node.op == OpType::kMul) &&
           node.num_inputs() == 2 && node.inputs[0] && node.inputs[1] &&
           IsInt(node.inputs[0]->dtype) && node.inputs[1]->dtype == node.inputs[0]->dtype;
  }

  absl::Status RunInt(KernelContext& ctx) {
    const ir::Tensor* a = ctx.input(0);
    const ir::Tensor* b = ctx.input(1);
    if (ctx.num_inputs() != 2 || b == nullptr || b->dtype() != a->dtype()) {
      return reference_->Run(ctx);
    }
    BcPlan plan;
    std::vector<int64_t> out_dims;
    if (!MakeBcPlan({&a->dims(), &b->dims()}, &plan, &out_dims)) return reference_->Run(ctx);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, a->dtype(), out_dims));
    const void* ins[2] = {a->raw_data(), b->raw_data()};
    BcIntArith(BroadcastOp(node_.op), a->dtype(), plan, ins, y->raw_data());
    return absl::OkStatus();
  }

  ElementwiseKernel(const ir::Node& node, std::unique_ptr<Kernel> reference)
      : node_(node), reference_(std::move(reference)) {}

  const ir::Node& node_;
  std::unique_ptr<Kernel> reference_;
};

// ---- Pow by a scalar exponent ----------------------------------------------------------------

bool IsExponentType(DataType t) {
  return IsF32OrHalf(t) || t == DataType::kI32 || t == DataType::kI64;
}

// The one element of exponent tensor `t` as the reference reads it for a float base: widened
// exactly from float16 / bfloat16, converted with static_cast from integers.
float ExponentValue(const ir::Tensor& t) {
  switch (t.dtype()) {
    case DataType::kF16:
      return HalfBitsToFloat(*static_cast<const uint16_t*>(t.raw_data()));
    case DataType::kBF16:
      return BFloat16BitsToFloat(*static_cast<const uint16_t*>(t.raw_data()));
    case DataType::kI32:
      return static_cast<float>(*static_cast<const int32_t*>(t.raw_data()));
    case DataType::kI64:
      return static_cast<float>(*static_cast<const int64_t*>(t.raw_data()));
    default:
      return *static_cast<const float*>(t.raw_data());
  }
}

class PowKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    return std::unique_ptr<Kernel>(new PowKernel(node, std::move(reference)));
  }

  // A float base and a float or int32 / int64 exponent (the exponent's shape is checked at run
  // time: one element).
  static bool Supports(const ir::Node& node) {
    return node.num_inputs() == 2 && node.inputs[0] && node.inputs[1] &&
           IsF32OrHalf(node.inputs[0]->dtype) && IsExponentType(node.inputs[1]->dtype);
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x = ctx.input(0);
    const ir::Tensor* e = ctx.input(1);
    if (x == nullptr || e == nullptr || !IsF32OrHalf(x->dtype()) || !IsExponentType(e->dtype()) ||
        e->num_elements() != 1) {
      return reference_->Run(ctx);
    }
    // The output is the broadcast of x with a one-element exponent: x's elements, perhaps under
    // more leading dims of 1.
    BcPlan plan;
    std::vector<int64_t> out_dims;
    if (!MakeBcPlan({&x->dims(), &e->dims()}, &plan, &out_dims)) return reference_->Run(ctx);
    const float v = ExponentValue(*e);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));
    PowScalar(v == 2.0f ? PowKind::kSquare : PowKind::kGeneral, v, x->dtype(), x->raw_data(),
              y->raw_data(), y->num_elements());
    return absl::OkStatus();
  }

 private:
  PowKernel(const ir::Node& node, std::unique_ptr<Kernel> reference)
      : node_(node), reference_(std::move(reference)) {}

  const ir::Node& node_;
  std::unique_ptr<Kernel> reference_;
};

KernelDef FloatDef(OpType op, KernelFactory factory, bool (*supports)(const ir::Node&)) {
  KernelDef def{
      op,     {DataType::kF32, DataType::kF16, DataType::kBF16}, 0, Backend::kCpu, Isa::kAvx512,
      factory};
  def.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 for bfloat16 outputs
  def.supports = supports;
  return def;
}

}  // namespace

void RegisterElementwise(Registry& r) {
  for (OpType op : {OpType::kAdd, OpType::kSub, OpType::kMul, OpType::kDiv, OpType::kSum,
                    OpType::kRelu, OpType::kMax, OpType::kMin, OpType::kPRelu}) {
    r.Add(FloatDef(op, &ElementwiseKernel::Create, &ElementwiseKernel::Supports));
  }
  r.Add(FloatDef(OpType::kPow, &PowKernel::Create, &PowKernel::Supports));
  // Integer Add, Sub, Mul: a kernel of their own dtypes (the same class, Supports picks them).
  for (OpType op : {OpType::kAdd, OpType::kSub, OpType::kMul}) {
    KernelDef def = FloatDef(op, &ElementwiseKernel::Create, &ElementwiseKernel::Supports);
    def.dtypes = {DataType::kI32, DataType::kI64};
    r.Add(def);
  }
}

}  // namespace kiln::kernels::cpu::avx512
