// LayerNormalization (stash_type float) and the fused AddLayerNorm on float, float16 and
// bfloat16, through the rows of norm.h: the reference's arithmetic with the row sums in 16
// lanes. A run the rows do not cover goes to the reference kernel: a scale or bias that
// broadcasts within the normalized block, operands of mixed dtypes, an AddLayerNorm whose
// operands broadcast, empty rows, double values. And inference BatchNormalization on
// channels-last or channels-first tensors of any rank >= 2 (BatchNormNhwcKernel), and LRN on
// channels-last tensors (LrnNhwcKernel).
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/batchnorm_nchw.h"
#include "engine/kernels/cpu/avx512/convert.h"
#include "engine/kernels/cpu/avx512/norm.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// A scale or bias as fp32 values per position of the normalized block, when each position has
// its own value (the parameter's dims are X's from `axis` on, with leading 1s); else nullptr.
// `buf` holds the conversion of a 16-bit parameter.
const float* RowParam(const ir::Tensor* p, const std::vector<int64_t>& x_dims, int axis,
                      int64_t inner, std::vector<float>& buf) {
  const int rank = static_cast<int>(x_dims.size());
  if (p == nullptr || !IsF32OrHalf(p->dtype()) || p->rank() > rank || p->num_elements() != inner) {
    return nullptr;
  }
  const int lead = rank - p->rank();
  for (int d = 0; d < p->rank(); ++d) {
    if (p->dim(d) != (lead + d >= axis ? x_dims[lead + d] : 1)) return nullptr;
  }
  switch (p->dtype()) {
    case DataType::kF32:
      return p->data<float>();
    case DataType::kF16:
      buf.resize(inner);
      HalfToFloat(p->data<uint16_t>(), buf.data(), inner);
      return buf.data();
    default:
      buf.resize(inner);
      Bf16ToFloat(p->data<uint16_t>(), buf.data(), inner);
      return buf.data();
  }
}

class NormKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    return std::unique_ptr<Kernel>(new NormKernel(node, std::move(reference)));
  }

  // LayerNormalization with a float stash (its default); AddLayerNorm always (fusion makes it
  // only from such a LayerNormalization).
  static bool Supports(const ir::Node& node) {
    return node.op != ir::OpType::kLayerNormalization || node.GetInt("stash_type", 1) == 1;
  }

  absl::Status Run(KernelContext& ctx) override {
    const bool add = node_.op == ir::OpType::kAddLayerNorm;
    const int param0 = add ? 2 : 1;  // scale, then bias
    const ir::Tensor* x = ctx.input(0);
    const ir::Tensor* x2 = add ? ctx.input(1) : nullptr;
    const ir::Tensor* scale = ctx.input(param0);
    const ir::Tensor* bias = ctx.num_inputs() > param0 + 1 ? ctx.input(param0 + 1) : nullptr;
    if (x == nullptr || scale == nullptr || (add && x2 == nullptr) || !IsF32OrHalf(x->dtype()) ||
        x->rank() == 0 || x->num_elements() == 0) {
      return reference_->Run(ctx);  // its errors, or empty rows (NaN statistics)
    }
    const DataType t = x->dtype();
    if (add && (x2->dtype() != t || x2->dims() != x->dims())) return reference_->Run(ctx);
    for (int k = 0; k < (add ? 2 : 1); ++k) {
      if (ref::OutputDtype(node_, k, t) != t) return reference_->Run(ctx);
    }
    auto axis = ref::NormalizeAxis(node_, node_.GetInt("axis", -1), x->rank());
    if (!axis.ok()) return reference_->Run(ctx);
    const std::vector<int64_t>& dims = x->dims();
    const int64_t inner = ref::Product(dims, *axis, dims.size());
    std::vector<float> scale_buf, bias_buf;
    LayerNormArgs a;
    a.scale = RowParam(scale, dims, *axis, inner, scale_buf);
    a.bias = bias == nullptr ? nullptr : RowParam(bias, dims, *axis, inner, bias_buf);
    if (a.scale == nullptr || (bias != nullptr && a.bias == nullptr)) return reference_->Run(ctx);
    a.dtype = t;
    a.x = x->raw_data();
    a.x2 = add ? x2->raw_data() : nullptr;
    a.rows = x->num_elements() / inner;
    a.n = inner;
    a.eps = node_.GetFloat("epsilon", 1e-5f);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, t, dims));
    a.y = y->raw_data();
    if (add && ctx.num_outputs() > 1 && ctx.output_requested(1)) {
      ASSIGN_OR_RETURN(ir::Tensor * sum, ctx.output(1, t, dims));
      a.sum = sum->raw_data();
    }
    if (!add) {
      // Mean and InvStdDev: the stash type (float), X's dims with 1 from the axis on.
      std::vector<int64_t> stat_dims = dims;
      for (size_t d = *axis; d < stat_dims.size(); ++d) stat_dims[d] = 1;
      float** stats[2] = {&a.mean, &a.inv_std};
      for (int k = 1; k <= 2; ++k) {
        if (ctx.num_outputs() > k && ctx.output_requested(k)) {
          ASSIGN_OR_RETURN(ir::Tensor * s, ctx.output(k, DataType::kF32, stat_dims));
          *stats[k - 1] = s->data<float>();
        }
      }
    }
    LayerNormRows(a);
    return absl::OkStatus();
  }

 private:
  NormKernel(const ir::Node& node, std::unique_ptr<Kernel> reference)
      : node_(node), reference_(std::move(reference)) {}

  const ir::Node& node_;
  std::unique_ptr<Kernel> reference_;
};

// BatchNormalization in inference mode on a channels-last X (kChannelsLastAttr: X and Y NHWC,
// the layout pass's) or a channels-first one of any rank >= 2 (batchnorm_nchw.h), per channel:
// float, float16 and bfloat16 X, parameters of any float dtype widened to fp32 as the
// reference does. Training mode and opset-6/7 per-activation (spatial = 0) statistics stay
// NCHW on the reference.
class BatchNormNhwcKernel final : public Kernel {
 public:
  static bool Supports(const ir::Node& node) {
    if (node.num_inputs() != 5 || !node.inputs[0] || !IsF32OrHalf(node.inputs[0]->dtype) ||
        !Inference(node)) {
      return false;
    }
    return node.since_version >= 9 || node.GetInt("spatial", 1) != 0;
  }

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = new BatchNormNhwcKernel(node, node.GetFloat("epsilon", 1e-5f));
    k->channels_last_ = node.GetInt(kChannelsLastAttr, 0) != 0;
    return std::unique_ptr<Kernel>(k);
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, ref::RequireInput(node_, ctx, 0));
    if (channels_last_ && (x->rank() != 4 || !IsF32OrHalf(x->dtype()))) {
      return ref::InvalidNode(node_, "a channels-last BatchNormalization needs a rank-4 float X");
    }
    if (!channels_last_ && (x->rank() < 2 || !IsF32OrHalf(x->dtype()))) {
      return ref::InvalidNode(node_, "input must have rank >= 2 (N x C x ...) and a float type, ",
                              "got ", DataTypeOnnxName(x->dtype()), ir::DimsToString(x->dims()));
    }
    const int64_t c = x->dim(channels_last_ ? 3 : 1);
    static constexpr const char* kNames[] = {"scale", "B", "mean", "var"};
    std::array<const void*, 4> sources;
    for (int i = 0; i < 4; ++i) {
      ASSIGN_OR_RETURN(const ir::Tensor* t, ref::RequireInput(node_, ctx, i + 1));
      if (!IsFloating(t->dtype()) || t->num_elements() != c) {
        return ref::InvalidNode(node_, kNames[i], " must be ", c, " float values, got ",
                                DataTypeOnnxName(t->dtype()), ir::DimsToString(t->dims()));
      }
      const ir::Value* v = node_.input(i + 1);
      // A constant's buffer keeps its values; a graph input's may be reused with others.
      sources[i] = v && v->constant && !v->is_graph_input ? t->raw_data() : nullptr;
    }
    // The parameters widened once for constant ones, on every run otherwise.
    const bool constant = std::find(sources.begin(), sources.end(), nullptr) == sources.end();
    if (!constant || sources != sources_ || static_cast<int64_t>(stddev_.size()) != c) {
      for (int i = 0; i < 4; ++i) {
        const ir::Tensor& t = *ctx.input(i + 1);
        params_[i].resize(c);
        for (int64_t j = 0; j < c; ++j) {
          params_[i][j] = static_cast<float>(ir::ElementAsDouble(t, j));
        }
      }
      stddev_.resize(c);
      for (int64_t j = 0; j < c; ++j) stddev_[j] = std::sqrt(params_[3][j] + epsilon_);
      sources_ = sources;
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), x->dims()));
    if (!channels_last_) {
      BatchNormNchw(x->dtype(), x->raw_data(), y->raw_data(), x->dim(0), c,
                    ref::Product(x->dims(), 2, x->rank()), params_[2].data(), stddev_.data(),
                    params_[0].data(), params_[1].data());
      return absl::OkStatus();
    }
    BatchNormNhwc(x->dtype(), x->raw_data(), y->raw_data(),
                  x->num_elements() / std::max<int64_t>(c, 1), c, params_[2].data(), stddev_.data(),
                  params_[0].data(), params_[1].data());
    return absl::OkStatus();
  }

 private:
  BatchNormNhwcKernel(const ir::Node& node, float epsilon) : node_(node), epsilon_(epsilon) {}

  // Inference mode, as the reference reads it per opset, with Y the only output.
  static bool Inference(const ir::Node& node) {
    for (int i = 1; i < node.num_outputs(); ++i) {
      if (node.outputs[i]) return false;
    }
    if (node.since_version >= 14) return node.GetInt("training_mode", 0) == 0;
    return node.since_version >= 7 || node.GetInt("is_test", 0) != 0;
  }

  const ir::Node& node_;
  float epsilon_;
  bool channels_last_ = false;
  std::vector<float> params_[4], stddev_;    // scale, B, mean, var; sqrt(var + epsilon)
  std::array<const void*, 4> sources_ = {};  // the constant buffers params_ was read from
};

// LRN on a channels-last X (kChannelsLastAttr, the layout pass's): float, float16 and bfloat16
// X of rank 4, the reference's arithmetic (LrnNhwc). Attribute errors are the reference's.
class LrnNhwcKernel final : public Kernel {
 public:
  static bool Supports(const ir::Node& node) {
    return node.GetInt(kChannelsLastAttr, 0) != 0 && node.num_inputs() == 1 && node.inputs[0] &&
           IsF32OrHalf(node.inputs[0]->dtype) && node.GetInt("size", 0) > 0;
  }

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    if (!node.has_attr("size")) return ref::InvalidNode(node, "attribute 'size' is required");
    const int64_t size = node.GetInt("size", 0);
    if (size <= 0) return ref::InvalidNode(node, "attribute 'size' must be positive, got ", size);
    return std::unique_ptr<Kernel>(new LrnNhwcKernel(node, size));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, ref::RequireInput(node_, ctx, 0));
    if (x->rank() != 4 || !IsF32OrHalf(x->dtype())) {
      return ref::InvalidNode(node_, "a channels-last LRN needs a rank-4 float X");
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), x->dims()));
    const int64_t c = x->dim(3);
    LrnNhwc(x->dtype(), x->raw_data(), y->raw_data(), c == 0 ? 0 : x->num_elements() / c, c, size_,
            alpha_, beta_, bias_);
    return absl::OkStatus();
  }

 private:
  LrnNhwcKernel(const ir::Node& node, int64_t size)
      : node_(node),
        size_(size),
        alpha_(node.GetFloat("alpha", 1e-4f)),
        beta_(node.GetFloat("beta", 0.75f)),
        bias_(node.GetFloat("bias", 1.0f)) {}
  const ir::Node& node_;
  int64_t size_;
  float alpha_, beta_, bias_;
};

}  // namespace

void RegisterNormOps(Registry& r) {
  KernelDef lrn{ir::OpType::kLRN,
                {DataType::kF32, DataType::kF16, DataType::kBF16},
                0,
                Backend::kCpu,
                Isa::kAvx512,
                &LrnNhwcKernel::Create};
  lrn.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 for bfloat16 outputs
  lrn.supports = &LrnNhwcKernel::Supports;
  r.Add(lrn);
  KernelDef bn{ir::OpType::kBatchNormalization,
               {DataType::kF32, DataType::kF16, DataType::kBF16},
               0,
               Backend::kCpu,
               Isa::kAvx512,
               &BatchNormNhwcKernel::Create};
  bn.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 for bfloat16 outputs
  bn.supports = &BatchNormNhwcKernel::Supports;
  r.Add(bn);
  for (ir::OpType op : {ir::OpType::kLayerNormalization, ir::OpType::kAddLayerNorm}) {
    KernelDef def{op,
                  {DataType::kF32, DataType::kF16, DataType::kBF16},
                  0,
                  Backend::kCpu,
                  Isa::kAvx512,
                  &NormKernel::Create};
    def.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 for bfloat16 outputs
    def.supports = &NormKernel::Supports;
    r.Add(def);
  }
}

}  // namespace kiln::kernels::cpu::avx512
