// Add, Sub, Mul, Div, Sum and Relu on float, float16 and bfloat16 without general broadcasting:
// Sum and Relu on inputs of the output's shape; Add, Sub, Mul and Div also with an operand that
// is a scalar, the output's trailing dims (a bias row) or its leading dims (a per-row column).
// The residual sums and activations between convolutions, the bias and normalisation arithmetic
// of unfused graphs. The reference's numbers to the bit (elementwise.h); a run whose operands
// broadcast otherwise (a dynamic shape) goes to the reference kernel.
#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/elementwise.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

EwOp OpOf(ir::OpType op) {
  switch (op) {
    case ir::OpType::kSub:
      return EwOp::kSub;
    case ir::OpType::kMul:
      return EwOp::kMul;
    case ir::OpType::kDiv:
      return EwOp::kDiv;
    case ir::OpType::kRelu:
      return EwOp::kRelu;
    default:
      return EwOp::kAdd;  // Add, Sum
  }
}

bool IsBinary(ir::OpType op) {
  return op == ir::OpType::kAdd || op == ir::OpType::kSub || op == ir::OpType::kMul ||
         op == ir::OpType::kDiv;
}

int64_t Product(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= d[i];
  return p;
}

// How a two-operand op reads its operands: each operand's EwRead and the row length.
struct BinaryPlan {
  EwRead read[2] = {EwRead::kFull, EwRead::kFull};
  int64_t row = 0;
  std::vector<int64_t> out;
};

// The plan for operand dims `a` and `b` (numpy broadcasting), or nullopt when an operand is
// broadcast other than as EwRead describes (or the dims do not broadcast: the reference says so).
std::optional<BinaryPlan> PlanBinary(std::vector<int64_t> a, std::vector<int64_t> b) {
  const size_t rank = std::max(a.size(), b.size());
  a.insert(a.begin(), rank - a.size(), 1);
  b.insert(b.begin(), rank - b.size(), 1);
  BinaryPlan p;
  p.out.resize(rank);
  for (size_t i = 0; i < rank; ++i) {
    if (a[i] != b[i] && a[i] != 1 && b[i] != 1) return std::nullopt;
    p.out[i] = a[i] == 1 ? b[i] : a[i];
  }
  const int64_t n = Product(p.out, 0, rank);
  int64_t row = 0;  // the row length an operand fixes (kRow, kCol), 0 while none has
  for (int k = 0; k < 2; ++k) {
    const std::vector<int64_t>& x = k == 0 ? a : b;
    if (x == p.out) continue;  // kFull
    if (Product(x, 0, rank) == 1) {
      p.read[k] = EwRead::kScalar;
      continue;
    }
    size_t first = 0, last = rank;  // first dim != 1; one past the last dim != 1
    while (x[first] == 1) ++first;
    while (x[last - 1] == 1) --last;
    int64_t len = 0;
    if (std::equal(x.begin() + first, x.end(), p.out.begin() + first)) {
      p.read[k] = EwRead::kRow;
      len = Product(p.out, first, rank);
    } else if (std::equal(x.begin(), x.begin() + last, p.out.begin())) {
      p.read[k] = EwRead::kCol;
      len = Product(p.out, last, rank);
    } else {
      return std::nullopt;
    }
    if (row != 0 && row != len) return std::nullopt;
    row = len;
  }
  if (row == 0) {
    // Full and scalar operands only: rows of the largest trailing block up to 64K elements
    // (the rows are what the threads share).
    row = n;
    for (size_t i = 0; i < rank && row > 65536; ++i) {
      if (Product(p.out, i + 1, rank) >= 256) row = Product(p.out, i + 1, rank);
    }
  }
  p.row = std::max<int64_t>(row, 1);
  return p;
}

class ElementwiseKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    return std::unique_ptr<Kernel>(new ElementwiseKernel(node, std::move(reference)));
  }

  // Inputs of one float dtype and static shapes: Add, Sub, Mul and Div two that PlanBinary
  // takes; Sum one or more of one shape, Relu one.
  static bool Supports(const ir::Node& node) {
    const int n = node.num_inputs();
    if (n < 1) return false;
    for (const ir::Value* v : node.inputs) {
      if (!v || v->dtype != node.inputs[0]->dtype || !IsF32OrHalf(v->dtype) ||
          !v->shape.rank_known || !v->shape.is_static()) {
        return false;
      }
    }
    if (IsBinary(node.op)) {
      return n == 2 &&
             PlanBinary(node.inputs[0]->shape.StaticDims(), node.inputs[1]->shape.StaticDims())
                 .has_value();
    }
    if (node.op != ir::OpType::kSum && (node.op != ir::OpType::kRelu || n != 1)) return false;
    for (const ir::Value* v : node.inputs) {
      if (v->shape.StaticDims() != node.inputs[0]->shape.StaticDims()) return false;
    }
    return true;
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x0 = ctx.input(0);
    std::vector<const void*> ins;
    bool same = x0 != nullptr && IsF32OrHalf(x0->dtype());
    for (int i = 0; same && i < ctx.num_inputs(); ++i) {
      const ir::Tensor* t = ctx.input(i);
      same = t != nullptr && t->dtype() == x0->dtype() &&
             (i == 0 || IsBinary(node_.op) || t->dims() == x0->dims());
      if (same) ins.push_back(t->raw_data());
    }
    if (!same) return reference_->Run(ctx);
    if (IsBinary(node_.op)) {
      if (ins.size() != 2) return reference_->Run(ctx);
      const std::optional<BinaryPlan> p = PlanBinary(x0->dims(), ctx.input(1)->dims());
      if (!p) return reference_->Run(ctx);
      ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x0->dtype(), p->out));
      if (p->read[0] == EwRead::kFull && p->read[1] == EwRead::kFull) {
        EwSameShape(OpOf(node_.op), x0->dtype(), ins.data(), 2, y->raw_data(), y->num_elements());
      } else {
        EwBinary(OpOf(node_.op), x0->dtype(), {ins[0], p->read[0]}, {ins[1], p->read[1]},
                 y->raw_data(), y->num_elements(), p->row);
      }
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x0->dtype(), x0->dims()));
    EwSameShape(OpOf(node_.op), x0->dtype(), ins.data(), static_cast<int>(ins.size()),
                y->raw_data(), y->num_elements());
    return absl::OkStatus();
  }

 private:
  ElementwiseKernel(const ir::Node& node, std::unique_ptr<Kernel> reference)
      : node_(node), reference_(std::move(reference)) {}

  const ir::Node& node_;
  std::unique_ptr<Kernel> reference_;
};

}  // namespace

void RegisterElementwise(Registry& r) {
  for (ir::OpType op : {ir::OpType::kAdd, ir::OpType::kSub, ir::OpType::kMul, ir::OpType::kDiv,
                        ir::OpType::kSum, ir::OpType::kRelu}) {
    KernelDef def{op,
                  {DataType::kF32, DataType::kF16, DataType::kBF16},
                  0,
                  Backend::kCpu,
                  Isa::kAvx512,
                  &ElementwiseKernel::Create};
    def.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 for bfloat16 outputs
    def.supports = &ElementwiseKernel::Supports;
    r.Add(def);
  }
}

}  // namespace kiln::kernels::cpu::avx512
