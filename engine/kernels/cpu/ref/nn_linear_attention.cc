// LinearAttention (opset 27): the recurrent linear-attention family (linear, gated / GLA,
// delta / DeltaNet, gated_delta / Gated DeltaNet) over packed 3-D (B, T, heads * d) inputs, with
// GQA head sharing and a (B, kv_heads, d_k, d_v) recurrent state in (past_state) and out
// (present_state). Evaluated token by token, as the specification defines it:
//   S <- exp(g_t) * S (gated rules);  v_t <- beta_t * (v_t - S^T k_t) (delta rules);
//   S <- S + k_t (x) v_t;  o_t = scale * q_t^T S.
// The state and every product stay in fp32 whatever the storage types (T for the activations,
// S for the state, which may differ); outputs are rounded once (DESIGN.md §5).
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

// Every element of a floating tensor as float.
absl::StatusOr<std::vector<float>> FloatsOf(const ir::Tensor& t) {
  std::vector<float> out(t.num_elements());
  RETURN_IF_ERROR(DispatchFloat(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    for (int64_t i = 0; i < t.num_elements(); ++i) out[i] = static_cast<float>(Load(p[i]));
    return absl::OkStatus();
  }));
  return out;
}

// Writes `v` into `t`, rounding once to its dtype.
absl::Status StoreFloats(const std::vector<float>& v, ir::Tensor& t) {
  return DispatchFloat(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = Store<T>(v[i]);
    return absl::OkStatus();
  });
}

bool IsStateType(DataType t) {
  return t == DataType::kF32 || t == DataType::kF16 || t == DataType::kBF16;
}

class LinearAttentionKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::make_unique<LinearAttentionKernel>(node);
    k->q_heads_ = node.GetInt("q_num_heads", 0);
    k->kv_heads_ = node.GetInt("kv_num_heads", 0);
    if (!node.has_attr("q_num_heads") || !node.has_attr("kv_num_heads")) {
      return InvalidNode(node, "q_num_heads and kv_num_heads are required");
    }
    if (k->q_heads_ <= 0 || k->kv_heads_ <= 0 || k->q_heads_ % k->kv_heads_ != 0) {
      return InvalidNode(node, "q_num_heads (", k->q_heads_, ") must be a positive multiple of ",
                         "kv_num_heads (", k->kv_heads_, ")");
    }
    k->scale_ = node.GetFloat("scale", 0.0f);
    const std::string rule = node.GetString("update_rule", "gated_delta");
    if (rule != "linear" && rule != "gated" && rule != "delta" && rule != "gated_delta") {
      return InvalidNode(node, "update_rule must be 'linear', 'gated', 'delta' or 'gated_delta', ",
                         "got '", rule, "'");
    }
    k->gated_ = rule == "gated" || rule == "gated_delta";
    k->delta_ = rule == "delta" || rule == "gated_delta";
    k->rule_ = rule;
    if (node.GetInt("chunk_size", 64) <= 0) {
      return InvalidNode(node, "chunk_size must be positive, got ", node.GetInt("chunk_size", 64));
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }
  explicit LinearAttentionKernel(const ir::Node& node) : node_(node) {}

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* q, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* k, RequireInput(node_, ctx, 1));
    ASSIGN_OR_RETURN(const ir::Tensor* v, RequireInput(node_, ctx, 2));
    const ir::Tensor* past = ctx.input(3);
    const ir::Tensor* decay = ctx.input(4);
    const ir::Tensor* beta = ctx.input(5);
    const char* names[3] = {"query", "key", "value"};
    const ir::Tensor* qkv[3] = {q, k, v};
    for (int i = 0; i < 3; ++i) {
      if (qkv[i]->rank() != 3) {
        return InvalidNode(node_, names[i], " must be 3-D (B, T, heads * d), got ",
                           ir::DimsToString(qkv[i]->dims()));
      }
      if (qkv[i]->dtype() != q->dtype()) {
        return InvalidNode(node_, names[i], " must have query's dtype ",
                           DataTypeOnnxName(q->dtype()));
      }
    }
    const int64_t batch = q->dim(0), steps = q->dim(1), hq = q_heads_, hkv = kv_heads_;
    if (k->dim(0) != batch || v->dim(0) != batch || k->dim(1) != steps || v->dim(1) != steps) {
      return InvalidNode(node_,
                         "query, key and value must share (B, T): ", ir::DimsToString(q->dims()),
                         ", ", ir::DimsToString(k->dims()), ", ", ir::DimsToString(v->dims()));
    }
    if (q->dim(2) % hq != 0 || v->dim(2) % hkv != 0) {
      return InvalidNode(node_, "query's last dim ", q->dim(2), " must divide by q_num_heads ", hq,
                         " and value's ", v->dim(2), " by kv_num_heads ", hkv);
    }
    const int64_t dk = q->dim(2) / hq, dv = v->dim(2) / hkv;
    if (k->dim(2) != hkv * dk) {
      return InvalidNode(node_, "key's last dim must be kv_num_heads * d_k = ", hkv * dk, ", got ",
                         k->dim(2));
    }
    if (gated_ != (decay != nullptr)) {
      return InvalidNode(node_, "update_rule '", rule_, "' ", gated_ ? "requires" : "forbids",
                         " the decay input");
    }
    if (delta_ != (beta != nullptr)) {
      return InvalidNode(node_, "update_rule '", rule_, "' ", delta_ ? "requires" : "forbids",
                         " the beta input");
    }
    // decay: per key dim (B, T, hkv * dk) or per head (B, T, hkv); beta: (B, T, hkv) or (B, T, 1).
    int64_t decay_width = 0, beta_width = 0;
    if (decay) {
      decay_width = decay->rank() == 3 ? decay->dim(2) : -1;
      if (decay->dtype() != q->dtype() || decay->rank() != 3 || decay->dim(0) != batch ||
          decay->dim(1) != steps || (decay_width != hkv && decay_width != hkv * dk)) {
        return InvalidNode(node_, "decay must be ", DataTypeOnnxName(q->dtype()), " of shape [",
                           batch, ",", steps, ",", hkv, "] or [", batch, ",", steps, ",", hkv * dk,
                           "], got ", ir::DimsToString(decay->dims()));
      }
    }
    if (beta) {
      beta_width = beta->rank() == 3 ? beta->dim(2) : -1;
      if (beta->dtype() != q->dtype() || beta->rank() != 3 || beta->dim(0) != batch ||
          beta->dim(1) != steps || (beta_width != hkv && beta_width != 1)) {
        return InvalidNode(node_, "beta must be ", DataTypeOnnxName(q->dtype()), " of shape [",
                           batch, ",", steps, ",", hkv, "] or [", batch, ",", steps, ",1], got ",
                           ir::DimsToString(beta->dims()));
      }
    }
    const std::vector<int64_t> state_dims = {batch, hkv, dk, dv};
    if (past && (!IsStateType(past->dtype()) || past->dims() != state_dims)) {
      return InvalidNode(node_, "past_state must be a float tensor of shape ",
                         ir::DimsToString(state_dims), ", got ", DataTypeOnnxName(past->dtype()),
                         " ", ir::DimsToString(past->dims()));
    }
    const DataType state_type = OutputDtype(node_, 1, past ? past->dtype() : q->dtype());
    if (!IsStateType(state_type)) {
      return InvalidNode(node_, "present_state must be float, float16 or bfloat16, not ",
                         DataTypeOnnxName(state_type));
    }
    ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, q->dtype(), {batch, steps, hq * dv}));
    ir::Tensor* present = nullptr;
    if (ctx.num_outputs() > 1 && ctx.output_requested(1)) {
      ASSIGN_OR_RETURN(present, ctx.output(1, state_type, state_dims));
    }

    ASSIGN_OR_RETURN(std::vector<float> qs, FloatsOf(*q));
    ASSIGN_OR_RETURN(std::vector<float> ks, FloatsOf(*k));
    ASSIGN_OR_RETURN(std::vector<float> vs, FloatsOf(*v));
    std::vector<float> gs, bs;
    if (decay) {
      ASSIGN_OR_RETURN(gs, FloatsOf(*decay));
    }
    if (beta) {
      ASSIGN_OR_RETURN(bs, FloatsOf(*beta));
    }
    std::vector<float> state(batch * hkv * dk * dv, 0.0f);
    if (past) {
      ASSIGN_OR_RETURN(state, FloatsOf(*past));
    }
    const float scale = scale_ != 0.0f ? scale_ : 1.0f / std::sqrt(static_cast<float>(dk));
    const int64_t group = hq / hkv;
    std::vector<float> o(batch * steps * hq * dv);
    std::vector<float> vt(dv), decay_row(dk);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < hkv; ++h) {
        float* s = state.data() + (b * hkv + h) * dk * dv;  // (dk, dv), row d holds key dim d
        for (int64_t t = 0; t < steps; ++t) {
          const int64_t bt = b * steps + t;
          const float* kt = ks.data() + bt * hkv * dk + h * dk;
          const float* vsrc = vs.data() + bt * hkv * dv + h * dv;
          for (int64_t m = 0; m < dv; ++m) vt[m] = vsrc[m];
          if (gated_) {
            for (int64_t d = 0; d < dk; ++d) {
              const float g =
                  decay_width == hkv ? gs[bt * hkv + h] : gs[bt * hkv * dk + h * dk + d];
              const float e = std::exp(g);
              for (int64_t m = 0; m < dv; ++m) s[d * dv + m] *= e;
            }
          }
          if (delta_) {
            const float bv = bs[bt * beta_width + (beta_width == 1 ? 0 : h)];
            for (int64_t m = 0; m < dv; ++m) {
              float r = 0.0f;  // (S^T k_t)[m]
              for (int64_t d = 0; d < dk; ++d) r += s[d * dv + m] * kt[d];
              vt[m] = bv * (vt[m] - r);
            }
          }
          for (int64_t d = 0; d < dk; ++d) {
            for (int64_t m = 0; m < dv; ++m) s[d * dv + m] += kt[d] * vt[m];
          }
          // Read: each query head of this kv head's group.
          for (int64_t g = 0; g < group; ++g) {
            const int64_t qh = h * group + g;
            const float* qt = qs.data() + bt * hq * dk + qh * dk;
            float* ot = o.data() + bt * hq * dv + qh * dv;
            for (int64_t m = 0; m < dv; ++m) {
              float acc = 0.0f;
              for (int64_t d = 0; d < dk; ++d) acc += qt[d] * s[d * dv + m];
              ot[m] = scale * acc;
            }
          }
        }
      }
    }
    RETURN_IF_ERROR(StoreFloats(o, *out));
    if (present) RETURN_IF_ERROR(StoreFloats(state, *present));
    return absl::OkStatus();
  }

 private:
  const ir::Node& node_;
  int64_t q_heads_ = 0, kv_heads_ = 0;
  float scale_ = 0.0f;
  bool gated_ = false, delta_ = false;
  std::string rule_;
};

}  // namespace

void RegisterLinearAttention(Registry& r) {
  r.AddRef(ir::OpType::kLinearAttention, {DataType::kF32, DataType::kF16, DataType::kBF16},
           &LinearAttentionKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
