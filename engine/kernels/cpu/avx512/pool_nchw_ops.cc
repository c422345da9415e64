// MaxPool (without its Indices output), AveragePool, GlobalAveragePool and GlobalMaxPool on
// channels-first tensors of any spatial rank (the pools the layout pass leaves NCHW: those not
// fed by a channels-last convolution) on float, float16 and bfloat16, through pool_nchw.h: the
// reference's numbers to the bit. Shape and attribute errors are the reference's (the shared
// ref::nn readers run first); a run with offsets beyond 32 bits runs the reference kernel.
#include <limits>
#include <memory>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/pool_nchw.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

constexpr int64_t kMaxOffset = std::numeric_limits<int32_t>::max();

// An NCHW node of one float dtype with one output (MaxPool's Indices not asked for).
bool SupportsNchw(const ir::Node& node) {
  if (node.GetInt(kChannelsLastAttr, 0) != 0 || node.num_inputs() != 1 || !node.inputs[0]) {
    return false;
  }
  for (int i = 1; i < node.num_outputs(); ++i) {
    if (node.outputs[i]) return false;
  }
  return IsF32OrHalf(node.inputs[0]->dtype);
}

class PoolNchwKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::unique_ptr<PoolNchwKernel>(new PoolNchwKernel(node));
    ASSIGN_OR_RETURN(k->reference_, ReferenceKernel(node));
    k->global_ = node.op == ir::OpType::kGlobalAveragePool || node.op == ir::OpType::kGlobalMaxPool;
    k->average_ = node.op == ir::OpType::kAveragePool || node.op == ir::OpType::kGlobalAveragePool;
    if (!k->global_) {
      ASSIGN_OR_RETURN(k->attrs_, ref::nn::ReadPoolAttrs(node));
      k->count_include_pad_ = node.GetInt("count_include_pad", 0) != 0;
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x = ctx.input(0);
    if (x == nullptr || !IsF32OrHalf(x->dtype()) ||
        (ctx.num_outputs() > 1 && ctx.output_requested(1))) {
      return reference_->Run(ctx);
    }
    if (global_) {
      if (x->rank() < 2) return reference_->Run(ctx);  // the reference's error
      const int64_t planes = x->dim(0) * x->dim(1);
      const int64_t size = ref::Product(x->dims(), 2, x->rank());
      if (size == 0 || size * 16 > kMaxOffset) return reference_->Run(ctx);
      ASSIGN_OR_RETURN(const ref::nn::GlobalPoolIo io, ref::nn::StartGlobalPool(node_, ctx));
      GlobalPoolNchw(x->dtype(), x->raw_data(), io.y->raw_data(), planes, size, average_);
      return absl::OkStatus();
    }
    if (x->rank() < 3 || x->rank() != static_cast<int>(attrs_.kernel.size()) + 2) {
      return reference_->Run(ctx);  // the reference's error
    }
    ASSIGN_OR_RETURN(const ref::nn::PoolIo io, ref::nn::StartPool(node_, attrs_, ctx));
    const ref::nn::Window& w = io.win;
    const int last = w.rank() - 1;
    if (w.in[last] + (w.out[last] + 16) * w.strides[last] + w.kernel[last] * w.dilations[last] +
            w.pad_begin[last] >
        kMaxOffset) {
      return reference_->Run(ctx);
    }
    PoolNchwArgs a;
    a.dtype = x->dtype();
    a.x = x->raw_data();
    a.y = io.y->raw_data();
    a.planes = x->dim(0) * x->dim(1);
    a.in = w.in;
    a.out = w.out;
    a.kernel = w.kernel;
    a.strides = w.strides;
    a.dilations = w.dilations;
    a.pad_begin = w.pad_begin;
    a.pad_end = w.pad_end;
    a.average = average_;
    a.count_include_pad = count_include_pad_;
    if (io.y->num_elements() > 0) PoolNchw(a);
    return absl::OkStatus();
  }

 private:
  explicit PoolNchwKernel(const ir::Node& node) : node_(node) {}
  const ir::Node& node_;
  std::unique_ptr<Kernel> reference_;
  ref::nn::WindowAttrs attrs_;
  bool global_ = false, average_ = false, count_include_pad_ = false;
};

}  // namespace

void RegisterPoolNchw(Registry& r) {
  for (ir::OpType op : {ir::OpType::kMaxPool, ir::OpType::kAveragePool,
                        ir::OpType::kGlobalAveragePool, ir::OpType::kGlobalMaxPool}) {
    KernelDef def{op,
                  {DataType::kF32, DataType::kF16, DataType::kBF16},
                  0,
                  Backend::kCpu,
                  Isa::kAvx512,
                  &PoolNchwKernel::Create};
    def.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 for bfloat16 outputs
    def.supports = &SupportsNchw;
    r.Add(def);
  }
}

}  // namespace kiln::kernels::cpu::avx512
