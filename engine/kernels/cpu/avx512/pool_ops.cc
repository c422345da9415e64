// MaxPool, AveragePool and GlobalAveragePool on channels-last tensors (kChannelsLastAttr: X and Y
// NHWC), the pools the layout pass keeps between convolutions (passes/layout.h): 2-D, float,
// float16 and bfloat16, MaxPool without its Indices output. The reference's numbers to the bit
// (pool.h).
#include <memory>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/pool.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// A channels-last node of one float dtype with one output (Indices not asked for).
bool Supports(const ir::Node& node) {
  if (node.GetInt(kChannelsLastAttr, 0) == 0 || node.num_inputs() != 1 || !node.inputs[0]) {
    return false;
  }
  for (int i = 1; i < node.num_outputs(); ++i) {
    if (node.outputs[i]) return false;
  }
  return IsF32OrHalf(node.inputs[0]->dtype);
}

absl::StatusOr<const ir::Tensor*> NhwcInput(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, ref::RequireInput(node, ctx, 0));
  if (x->rank() != 4) return ref::InvalidNode(node, "a channels-last pool needs a rank-4 X");
  if (!IsF32OrHalf(x->dtype())) {
    return ref::InvalidNode(node, "unsupported dtype ", DataTypeOnnxName(x->dtype()));
  }
  return x;
}

// MaxPool or AveragePool (`average`) over 2-D windows.
template <bool average>
class PoolNhwcKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::unique_ptr<PoolNhwcKernel>(new PoolNhwcKernel(node));
    ASSIGN_OR_RETURN(k->attrs_, ref::nn::ReadPoolAttrs(node));
    if (k->attrs_.kernel.size() != 2) {
      return ref::InvalidNode(node, "a channels-last ", ir::OpName(node.op), " must be 2-D");
    }
    k->count_include_pad_ = node.GetInt("count_include_pad", 0) != 0;
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, NhwcInput(node_, ctx));
    const auto& d = x->dims();  // N, H, W, C
    ASSIGN_OR_RETURN(const ref::nn::Window win,
                     ref::nn::ResolveWindow(node_, attrs_, {d[1], d[2]}, attrs_.kernel));
    PoolWindow2d w;
    w.n = d[0];
    w.ih = d[1];
    w.iw = d[2];
    w.c = d[3];
    w.oh = win.out[0];
    w.ow = win.out[1];
    w.kh = win.kernel[0];
    w.kw = win.kernel[1];
    w.sh = win.strides[0];
    w.sw = win.strides[1];
    w.dh = win.dilations[0];
    w.dw = win.dilations[1];
    w.ph = win.pad_begin[0];
    w.pw = win.pad_begin[1];
    w.ph_end = win.pad_end[0];
    w.pw_end = win.pad_end[1];
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), {w.n, w.oh, w.ow, w.c}));
    if (average) {
      AveragePoolNhwc(x->dtype(), x->raw_data(), y->raw_data(), w, count_include_pad_);
    } else {
      MaxPoolNhwc(x->dtype(), x->raw_data(), y->raw_data(), w);
    }
    return absl::OkStatus();
  }

 private:
  explicit PoolNhwcKernel(const ir::Node& node) : node_(node) {}
  const ir::Node& node_;
  ref::nn::WindowAttrs attrs_;
  bool count_include_pad_ = false;
};

absl::Status GlobalAveragePoolRun(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, NhwcInput(node, ctx));
  const auto& d = x->dims();
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), {d[0], 1, 1, d[3]}));
  GlobalAveragePoolNhwc(x->dtype(), x->raw_data(), y->raw_data(), d[0], d[1] * d[2], d[3]);
  return absl::OkStatus();
}

}  // namespace

void RegisterPoolOps(Registry& r) {
  KernelDef def{ir::OpType::kMaxPool,
                {DataType::kF32, DataType::kF16, DataType::kBF16},
                0,
                Backend::kCpu,
                Isa::kAvx512,
                &PoolNhwcKernel<false>::Create};
  def.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 for bfloat16 outputs
  def.supports = &Supports;
  r.Add(def);
  def.op = ir::OpType::kAveragePool;
  def.factory = &PoolNhwcKernel<true>::Create;
  r.Add(def);
  def.op = ir::OpType::kGlobalAveragePool;
  def.factory = &FunctionKernel<GlobalAveragePoolRun>::Create;
  r.Add(def);
}

}  // namespace kiln::kernels::cpu::avx512
