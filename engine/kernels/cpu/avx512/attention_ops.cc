// Attention (opset 23) on AVX-512 (attention.h) for what fused and exported attention carries:
// 3-D or 4-D Q/K/V of float, float16 or bfloat16, GQA head groups, an additive (float) or
// boolean mask broadcast over (batch, heads, queries, keys), is_causal, the scale attribute or
// 1/sqrt(head_size). Anything else (a KV cache, softcap, sliding windows, nonpad_kv_seqlen, the
// present_* or qk_matmul outputs, shapes the reference rejects) runs the reference kernel, which
// also gives the errors. The result differs from the reference's by summation order and
// ExpF32's error (within 1 ulp) only: the reference's scale rounding is reproduced.
#include <cmath>
#include <memory>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/attention.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

bool IsMaskType(DataType dt) {
  return dt == DataType::kF32 || dt == DataType::kF16 || dt == DataType::kBF16 ||
         dt == DataType::kBool;
}

class AttentionKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::unique_ptr<AttentionKernel>(new AttentionKernel(node));
    ASSIGN_OR_RETURN(k->reference_, ReferenceKernel(node));
    k->causal_ = node.GetInt("is_causal", 0) != 0;
    k->q_num_heads_ = node.GetInt("q_num_heads", 0);
    k->kv_num_heads_ = node.GetInt("kv_num_heads", 0);
    k->has_scale_ = node.has_attr("scale");
    k->scale_ = node.GetFloat("scale", 1.0f);
    // Only the plain form: the rest is the reference kernel's.
    k->plain_ =
        node.GetInt("qk_matmul_output_mode", 0) == 0 && node.GetFloat("softcap", 0.0f) == 0.0f &&
        node.GetInt("left_window_size", -1) == -1 && node.GetInt("right_window_size", -1) == -1;
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    AttentionArgs a;
    if (!Plan(ctx, a)) return reference_->Run(ctx);
    const std::vector<int64_t> y_dims =
        a.three_d ? std::vector<int64_t>{a.batch, a.q_len, a.q_heads * a.v_head}
                  : std::vector<int64_t>{a.batch, a.q_heads, a.q_len, a.v_head};
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, a.dtype, y_dims));
    a.y = y->raw_data();
    Attention(a);
    return absl::OkStatus();
  }

 private:
  explicit AttentionKernel(const ir::Node& node) : node_(node) {}

  // Fills `a` for a run the fast kernel takes; false sends the run to the reference kernel.
  bool Plan(KernelContext& ctx, AttentionArgs& a) const {
    if (!plain_) return false;
    for (int i = 4; i < ctx.num_inputs(); ++i) {
      if (ctx.input(i) != nullptr) return false;  // past_key / past_value / nonpad_kv_seqlen
    }
    for (int i = 1; i < ctx.num_outputs(); ++i) {
      if (ctx.output_requested(i)) return false;
    }
    const ir::Tensor* q = ctx.input(0);
    const ir::Tensor* k = ctx.input(1);
    const ir::Tensor* v = ctx.input(2);
    const ir::Tensor* mask = ctx.input(3);
    if (!q || !k || !v) return false;
    const DataType dt = q->dtype();
    if (!IsF32OrHalf(dt) || k->dtype() != dt || v->dtype() != dt) return false;
    const int rank = q->rank();
    if ((rank != 3 && rank != 4) || k->rank() != rank || v->rank() != rank) return false;
    a.dtype = dt;
    a.three_d = rank == 3;
    a.batch = q->dim(0);
    if (k->dim(0) != a.batch || v->dim(0) != a.batch) return false;
    if (a.three_d) {
      if (q_num_heads_ <= 0 || kv_num_heads_ <= 0) return false;
      a.q_heads = q_num_heads_;
      a.kv_heads = kv_num_heads_;
      if (q->dim(2) % a.q_heads != 0 || k->dim(2) % a.kv_heads != 0 ||
          v->dim(2) % a.kv_heads != 0) {
        return false;
      }
      a.q_len = q->dim(1);
      a.kv_len = k->dim(1);
      a.head = q->dim(2) / a.q_heads;
      a.v_head = v->dim(2) / a.kv_heads;
      if (k->dim(2) / a.kv_heads != a.head || v->dim(1) != a.kv_len) return false;
    } else {
      a.q_heads = q->dim(1);
      a.kv_heads = k->dim(1);
      a.q_len = q->dim(2);
      a.kv_len = k->dim(2);
      a.head = q->dim(3);
      a.v_head = v->dim(3);
      if (k->dim(3) != a.head || v->dim(1) != a.kv_heads || v->dim(2) != a.kv_len) return false;
    }
    if (a.kv_heads <= 0 || a.q_heads % a.kv_heads != 0) return false;
    if (mask != nullptr) {
      if (!IsMaskType(mask->dtype()) || mask->rank() < 1 || mask->rank() > 4) return false;
      int64_t dims[4] = {1, 1, 1, 1};
      const int off = 4 - mask->rank();
      for (int d = 0; d < mask->rank(); ++d) dims[off + d] = mask->dim(d);
      const int64_t want[3] = {a.batch, a.q_heads, a.q_len};
      for (int d = 0; d < 3; ++d) {
        if (dims[d] != 1 && dims[d] != want[d]) return false;
      }
      if (dims[3] > a.kv_len) return false;
      int64_t stride = 1;
      for (int d = 3; d >= 0; --d) {
        a.mask_strides[d] = dims[d] == 1 ? 0 : stride;
        stride *= dims[d];
      }
      a.mask = mask->raw_data();
      a.mask_dtype = mask->dtype();
      a.mask_keys = dims[3];
    }
    a.causal = causal_;
    a.q = q->raw_data();
    a.k = k->raw_data();
    a.v = v->raw_data();
    // The reference's function body scales Q and K each by sqrt(scale) held in Q's type.
    const double scale = has_scale_ ? scale_ : 1.0 / std::sqrt(static_cast<double>(a.head));
    const double root = std::sqrt(scale);
    float r = static_cast<float>(root);
    if (dt == DataType::kF16) r = ref::Load(ref::Store<Float16>(root));
    if (dt == DataType::kBF16) r = ref::Load(ref::Store<BFloat16>(root));
    a.factor = r * r;
    return true;
  }

  const ir::Node& node_;
  std::unique_ptr<Kernel> reference_;
  bool causal_ = false, has_scale_ = false, plain_ = false;
  int64_t q_num_heads_ = 0, kv_num_heads_ = 0;
  float scale_ = 1.0f;
};

}  // namespace

void RegisterAttention(Registry& r) {
  KernelDef def{ir::OpType::kAttention,
                {DataType::kF32, DataType::kF16, DataType::kBF16},
                0,
                Backend::kCpu,
                Isa::kAvx512,
                &AttentionKernel::Create};
  def.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 for bfloat16 outputs
  r.Add(def);
}

}  // namespace kiln::kernels::cpu::avx512
