// Equal, Less, LessOrEqual, Greater and GreaterOrEqual on float, float16, bfloat16, int32 and
// int64 (bool output), and Where on any 1, 2, 4 or 8-byte element type, with general numpy
// broadcasting planned from the run-time dims (broadcast.h): the attention masks and index
// comparisons of real models. The reference's results exactly (comparisons in fp32 after exact
// widening, ordered so NaN compares false; Where copies bits). A run the fast loops do not
// cover goes to the reference kernel, which also reports the errors.
#include <memory>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/broadcast.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

using ir::OpType;

bool IsCompareType(DataType t) {
  return IsF32OrHalf(t) || t == DataType::kI32 || t == DataType::kI64;
}

BcCmp CmpOf(OpType op) {
  switch (op) {
    case OpType::kLess:
      return BcCmp::kLess;
    case OpType::kLessOrEqual:
      return BcCmp::kLessOrEqual;
    case OpType::kGreater:
      return BcCmp::kGreater;
    case OpType::kGreaterOrEqual:
      return BcCmp::kGreaterOrEqual;
    default:
      return BcCmp::kEqual;
  }
}

// The comparisons: BcCompare, or the reference kernel for a run it does not cover.
class CompareKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    return std::unique_ptr<Kernel>(new CompareKernel(node, std::move(reference)));
  }

  // Two inputs of one of the compared dtypes; shapes static or not.
  static bool Supports(const ir::Node& node) {
    return node.num_inputs() == 2 && node.inputs[0] && node.inputs[1] &&
           node.inputs[0]->dtype == node.inputs[1]->dtype && IsCompareType(node.inputs[0]->dtype);
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* a = ctx.input(0);
    const ir::Tensor* b = ctx.input(1);
    if (ctx.num_inputs() != 2 || a == nullptr || b == nullptr || a->dtype() != b->dtype() ||
        !IsCompareType(a->dtype())) {
      return reference_->Run(ctx);
    }
    BcPlan plan;
    std::vector<int64_t> out_dims;
    if (!MakeBcPlan({&a->dims(), &b->dims()}, &plan, &out_dims)) return reference_->Run(ctx);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, DataType::kBool, out_dims));
    BcCompare(CmpOf(node_.op), a->dtype(), plan, a->raw_data(), b->raw_data(),
              static_cast<uint8_t*>(y->raw_data()));
    return absl::OkStatus();
  }

 private:
  CompareKernel(const ir::Node& node, std::unique_ptr<Kernel> reference)
      : node_(node), reference_(std::move(reference)) {}

  const ir::Node& node_;
  std::unique_ptr<Kernel> reference_;
};

bool IsWhereSize(DataType t) {
  if (t == DataType::kString || t == DataType::kUndefined) return false;
  const int s = static_cast<int>(DataTypeSize(t));
  return s == 1 || s == 2 || s == 4 || s == 8;
}

// Where: BcWhere, or the reference kernel for a run it does not cover.
class WhereKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    return std::unique_ptr<Kernel>(new WhereKernel(node, std::move(reference)));
  }

  // A bool condition and X, Y of one dtype; shapes static or not.
  static bool Supports(const ir::Node& node) {
    return node.num_inputs() == 3 && node.inputs[0] && node.inputs[1] && node.inputs[2] &&
           node.inputs[0]->dtype == DataType::kBool &&
           node.inputs[1]->dtype == node.inputs[2]->dtype && IsWhereSize(node.inputs[1]->dtype);
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* c = ctx.input(0);
    const ir::Tensor* x = ctx.input(1);
    const ir::Tensor* y = ctx.input(2);
    if (ctx.num_inputs() != 3 || c == nullptr || x == nullptr || y == nullptr ||
        c->dtype() != DataType::kBool || x->dtype() != y->dtype() || !IsWhereSize(x->dtype())) {
      return reference_->Run(ctx);
    }
    BcPlan plan;
    std::vector<int64_t> out_dims;
    if (!MakeBcPlan({&c->dims(), &x->dims(), &y->dims()}, &plan, &out_dims)) {
      return reference_->Run(ctx);
    }
    ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, x->dtype(), out_dims));
    BcWhere(static_cast<int>(DataTypeSize(x->dtype())), plan,
            static_cast<const uint8_t*>(c->raw_data()), x->raw_data(), y->raw_data(),
            out->raw_data());
    return absl::OkStatus();
  }

 private:
  WhereKernel(const ir::Node& node, std::unique_ptr<Kernel> reference)
      : node_(node), reference_(std::move(reference)) {}

  const ir::Node& node_;
  std::unique_ptr<Kernel> reference_;
};

}  // namespace

void RegisterCompare(Registry& r) {
  for (OpType op : {OpType::kEqual, OpType::kLess, OpType::kLessOrEqual, OpType::kGreater,
                    OpType::kGreaterOrEqual}) {
    KernelDef def{op,
                  {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kI32, DataType::kI64},
                  0,
                  Backend::kCpu,
                  Isa::kAvx512,
                  &CompareKernel::Create};
    def.supports = &CompareKernel::Supports;
    r.Add(def);
  }
  // Keyed by X's dtype (the reference's type_source); every dtype of 1, 2, 4 or 8 bytes.
  KernelDef where{OpType::kWhere,
                  {DataType::kF32, DataType::kF64, DataType::kF16, DataType::kBF16, DataType::kI8,
                   DataType::kU8, DataType::kI16, DataType::kU16, DataType::kI32, DataType::kU32,
                   DataType::kI64, DataType::kU64, DataType::kBool},
                  1,
                  Backend::kCpu,
                  Isa::kAvx512,
                  &WhereKernel::Create};
  where.supports = &WhereKernel::Supports;
  r.Add(where);
}

}  // namespace kiln::kernels::cpu::avx512
