// Attention (opset 23): scaled dot-product attention over 3-D (B, S, heads * head_size) or
// 4-D (B, heads, S, head_size) Q/K/V, with GQA/MQA head sharing, boolean or additive masks,
// offset-aware causal masking, softcap, a KV cache (past_* in, present_* out) and the
// qk_matmul_output debug output. Both products go through the shared GEMM.
#include <cmath>
#include <limits>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"

namespace kiln::kernels::cpu::ref::nn {
namespace {

// Shapes of one run, all resolved from the inputs.
struct AttnShape {
  bool three_d = false;
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, past = 0, total = 0;
  int64_t head = 0, v_head = 0;
  int64_t mask_dims[4] = {1, 1, 1, 1};  // mask aligned to (batch, q_heads, q_len, total)
};

class AttentionKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::make_unique<AttentionKernel>(node);
    k->is_causal_ = node.GetInt("is_causal", 0) != 0;
    k->q_num_heads_ = node.GetInt("q_num_heads", 0);
    k->kv_num_heads_ = node.GetInt("kv_num_heads", 0);
    k->mode_ = node.GetInt("qk_matmul_output_mode", 0);
    k->has_scale_ = node.has_attr("scale");
    k->scale_ = node.GetFloat("scale", 1.0f);
    k->softcap_ = node.GetFloat("softcap", 0.0f);
    // Sliding window (opset 25): -1 leaves a side unbounded.
    k->left_window_ = node.GetInt("left_window_size", -1);
    k->right_window_ = node.GetInt("right_window_size", -1);
    if (k->left_window_ < -1 || k->right_window_ < -1) {
      return InvalidNode(node, "left_window_size and right_window_size must be -1 or >= 0, got ",
                         k->left_window_, " and ", k->right_window_);
    }
    if (node.since_version < 25 &&
        (node.has_attr("left_window_size") || node.has_attr("right_window_size"))) {
      return InvalidNode(node,
                         "left_window_size / right_window_size are not defined before opset 25");
    }
    if (k->mode_ < 0 || k->mode_ > 3) {
      return InvalidNode(node, "qk_matmul_output_mode must be 0..3, got ", k->mode_);
    }
    if (k->q_num_heads_ < 0 || k->kv_num_heads_ < 0) {
      return InvalidNode(node, "q_num_heads and kv_num_heads must be positive");
    }
    // softmax_precision only asks for at least the input precision; the softmax below always
    // runs in fp32 (double for double inputs), which satisfies every allowed value.
    return std::unique_ptr<Kernel>(std::move(k));
  }
  explicit AttentionKernel(const ir::Node& node) : node_(node) {}

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* q, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* k, RequireInput(node_, ctx, 1));
    ASSIGN_OR_RETURN(const ir::Tensor* v, RequireInput(node_, ctx, 2));
    const ir::Tensor* mask = ctx.input(3);
    const ir::Tensor* past_k = ctx.input(4);
    const ir::Tensor* past_v = ctx.input(5);
    const ir::Tensor* nonpad = ctx.num_inputs() > 6 ? ctx.input(6) : nullptr;
    ASSIGN_OR_RETURN(AttnShape s, Shapes(*q, *k, *v, mask, past_k, past_v));
    // nonpad_kv_seqlen (opset 24): per batch, the number of valid keys of an external (static)
    // cache; the keys after it are padding. Causal and window masks align to its end.
    std::vector<int64_t> offsets(s.batch, s.past);
    std::vector<int64_t> valid(s.batch, s.total);
    if (nonpad) {
      if (past_k) {
        return InvalidNode(node_, "nonpad_kv_seqlen cannot be combined with past_key/past_value");
      }
      if (nonpad->dtype() != DataType::kI64 || nonpad->rank() != 1 || nonpad->dim(0) != s.batch) {
        return InvalidNode(node_, "nonpad_kv_seqlen must be int64 of shape [", s.batch, "], got ",
                           DataTypeName(nonpad->dtype()), " ", ir::DimsToString(nonpad->dims()));
      }
      for (int64_t b = 0; b < s.batch; ++b) {
        const int64_t n = nonpad->data<int64_t>()[b];
        if (n < 0 || n > s.total) {
          return InvalidNode(node_, "nonpad_kv_seqlen[", b, "] = ", n, " is outside 0..", s.total);
        }
        valid[b] = n;
        offsets[b] = n - s.q_len;  // may be negative: those rows are fully masked (spec)
      }
    }
    const DataType dt = q->dtype();
    std::vector<int64_t> y_dims = s.three_d
                                      ? std::vector<int64_t>{s.batch, s.q_len, s.q_heads * s.v_head}
                                      : std::vector<int64_t>{s.batch, s.q_heads, s.q_len, s.v_head};
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, dt, y_dims));
    ir::Tensor* outs[4] = {y, nullptr, nullptr, nullptr};
    const std::vector<int64_t> out_dims[4] = {{},
                                              {s.batch, s.kv_heads, s.total, s.head},
                                              {s.batch, s.kv_heads, s.total, s.v_head},
                                              {s.batch, s.q_heads, s.q_len, s.total}};
    for (int i = 1; i < 4; ++i) {
      if (i < ctx.num_outputs() && ctx.output_requested(i)) {
        ASSIGN_OR_RETURN(outs[i], ctx.output(i, dt, out_dims[i]));
      }
    }
    return DispatchFloat(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      Evaluate<T>(s, *q, *k, *v, mask, past_k, past_v, offsets, valid, outs);
      return absl::OkStatus();
    });
  }

 private:
  absl::StatusOr<AttnShape> Shapes(const ir::Tensor& q, const ir::Tensor& k, const ir::Tensor& v,
                                   const ir::Tensor* mask, const ir::Tensor* past_k,
                                   const ir::Tensor* past_v) const {
    AttnShape s;
    if (q.rank() != k.rank() || q.rank() != v.rank() || (q.rank() != 3 && q.rank() != 4)) {
      return InvalidNode(node_, "Q, K and V must all be 3-D or all 4-D, got ",
                         ir::DimsToString(q.dims()), ", ", ir::DimsToString(k.dims()), ", ",
                         ir::DimsToString(v.dims()));
    }
    if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) {
      return InvalidNode(node_, "Q, K and V must have the same dtype");
    }
    s.three_d = q.rank() == 3;
    s.batch = q.dim(0);
    if (k.dim(0) != s.batch || v.dim(0) != s.batch) {
      return InvalidNode(node_, "Q, K and V batch sizes differ");
    }
    if (s.three_d) {
      if (q_num_heads_ <= 0 || kv_num_heads_ <= 0) {
        return InvalidNode(node_, "q_num_heads and kv_num_heads are required for 3-D inputs");
      }
      s.q_heads = q_num_heads_;
      s.kv_heads = kv_num_heads_;
      if (q.dim(2) % s.q_heads != 0 || k.dim(2) % s.kv_heads != 0 || v.dim(2) % s.kv_heads != 0) {
        return InvalidNode(node_, "hidden sizes are not divisible by the head counts");
      }
      s.q_len = q.dim(1);
      s.kv_len = k.dim(1);
      s.head = q.dim(2) / s.q_heads;
      if (k.dim(2) / s.kv_heads != s.head) {
        return InvalidNode(node_, "Q and K head sizes differ");
      }
      s.v_head = v.dim(2) / s.kv_heads;
      if (v.dim(1) != s.kv_len) return InvalidNode(node_, "K and V sequence lengths differ");
    } else {
      s.q_heads = q.dim(1);
      s.kv_heads = k.dim(1);
      s.q_len = q.dim(2);
      s.kv_len = k.dim(2);
      s.head = q.dim(3);
      s.v_head = v.dim(3);
      if (k.dim(3) != s.head) return InvalidNode(node_, "Q and K head sizes differ");
      if (v.dim(1) != s.kv_heads || v.dim(2) != s.kv_len) {
        return InvalidNode(node_, "K and V shapes disagree: ", ir::DimsToString(k.dims()), " vs ",
                           ir::DimsToString(v.dims()));
      }
    }
    if (s.kv_heads <= 0 || s.q_heads % s.kv_heads != 0) {
      return InvalidNode(node_, "q heads (", s.q_heads, ") must be a multiple of kv heads (",
                         s.kv_heads, ")");
    }
    if ((past_k == nullptr) != (past_v == nullptr)) {
      return InvalidNode(node_, "past_key and past_value must be given together");
    }
    if (past_k) {
      if (past_k->dtype() != q.dtype() || past_v->dtype() != q.dtype() || past_k->rank() != 4 ||
          past_v->rank() != 4 || past_k->dim(0) != s.batch || past_k->dim(1) != s.kv_heads ||
          past_k->dim(3) != s.head || past_v->dim(0) != s.batch || past_v->dim(1) != s.kv_heads ||
          past_v->dim(2) != past_k->dim(2) || past_v->dim(3) != s.v_head) {
        return InvalidNode(node_, "past_key ", ir::DimsToString(past_k->dims()), " / past_value ",
                           ir::DimsToString(past_v->dims()), " do not match K and V");
      }
      s.past = past_k->dim(2);
    }
    s.total = s.past + s.kv_len;
    if (mask) {
      if (mask->rank() < 1 || mask->rank() > 4) {
        return InvalidNode(node_, "attn_mask must have rank 1 to 4");
      }
      const int off = 4 - mask->rank();
      for (int d = 0; d < mask->rank(); ++d) s.mask_dims[off + d] = mask->dim(d);
      const int64_t want[4] = {s.batch, s.q_heads, s.q_len, s.total};
      for (int d = 0; d < 3; ++d) {
        if (s.mask_dims[d] != 1 && s.mask_dims[d] != want[d]) {
          return InvalidNode(node_, "attn_mask ", ir::DimsToString(mask->dims()),
                             " cannot be broadcast to [", s.batch, ",", s.q_heads, ",", s.q_len,
                             ",", s.total, "]");
        }
      }
      // A shorter last dim is padded with masked-out keys (reference semantics).
      if (s.mask_dims[3] > s.total) {
        return InvalidNode(node_, "attn_mask has ", s.mask_dims[3], " keys, more than ", s.total);
      }
    }
    return s;
  }

  template <typename T>
  void Evaluate(const AttnShape& s, const ir::Tensor& qt, const ir::Tensor& kt,
                const ir::Tensor& vt, const ir::Tensor* mask, const ir::Tensor* past_k,
                const ir::Tensor* past_v, const std::vector<int64_t>& offsets,
                const std::vector<int64_t>& valid, ir::Tensor* const outs[4]) const {
    using A = Acc<T>;
    constexpr A kNegInf = -std::numeric_limits<A>::infinity();
    std::vector<A> qbuf;
    const A* q = AccData(qt.data<T>(), qt.num_elements(), qbuf);
    // present_key / present_value in (B, kv_heads, total, head) layout, in A.
    std::vector<A> kp = Present<T>(s, kt, past_k, s.head);
    std::vector<A> vp = Present<T>(s, vt, past_v, s.v_head);
    if (outs[1]) StoreAll(kp, outs[1]->data<T>());
    if (outs[2]) StoreAll(vp, outs[2]->data<T>());
    // The mask as additive bias values (bool: true -> 0, false -> -inf), broadcast by strides.
    std::vector<A> bias;
    int64_t ms[4] = {0, 0, 0, 0};
    if (mask) {
      bias.resize(mask->num_elements());
      for (int64_t i = 0; i < mask->num_elements(); ++i) {
        const double m = ir::ElementAsDouble(*mask, i);
        bias[i] = mask->dtype() == DataType::kBool ? (m != 0 ? A(0) : kNegInf) : A(m);
      }
      int64_t st = 1;
      for (int d = 3; d >= 0; --d) {
        ms[d] = s.mask_dims[d] == 1 ? 0 : st;
        st *= s.mask_dims[d];
      }
    }
    // The function body scales Q and K each by sqrt(scale) held as a T1 constant.
    const double scale = has_scale_ ? scale_ : 1.0 / std::sqrt(static_cast<double>(s.head));
    const A root = static_cast<A>(Load(Store<T>(std::sqrt(scale))));
    const A factor = root * root;
    const A softcap = static_cast<A>(softcap_);
    const int64_t group = s.q_heads / s.kv_heads;
    const int64_t n_scores = s.q_len * s.total;
    std::vector<A> scores(n_scores);
    std::vector<A> yacc(outs[0]->num_elements(), A(0));
    T* qk_out = outs[3] ? outs[3]->data<T>() : nullptr;
    const int64_t mlast = s.mask_dims[3];
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.q_heads; ++h) {
        const int64_t hk = h / group;  // GQA: consecutive q heads share a kv head
        const MatView<A> qv =
            s.three_d ? MatView<A>{q + b * s.q_len * s.q_heads * s.head + h * s.head,
                                   s.q_heads * s.head, 1}
                      : MatView<A>{q + (b * s.q_heads + h) * s.q_len * s.head, s.head, 1};
        const A* kh = kp.data() + (b * s.kv_heads + hk) * s.total * s.head;
        std::fill(scores.begin(), scores.end(), A(0));
        GemmAccumulate(s.q_len, s.total, s.head, qv, MatView<A>{kh, 1, s.head}, scores.data(),
                       s.total);
        T* qk = qk_out ? qk_out + (b * s.q_heads + h) * n_scores : nullptr;
        for (A& x : scores) x *= factor;
        if (qk && mode_ == 0) StoreAll(scores, qk);
        if (softcap_ > 0) {
          for (A& x : scores) x = softcap * std::tanh(x / softcap);
        }
        if (qk && mode_ == 1) StoreAll(scores, qk);
        std::vector<bool> row_masked(s.q_len, false);
        for (int64_t i = 0; i < s.q_len; ++i) {
          A* row = scores.data() + i * s.total;
          const A* mrow = mask ? bias.data() + b * ms[0] + h * ms[1] + i * ms[2] : nullptr;
          bool all_masked = true;
          for (int64_t j = 0; j < s.total; ++j) {
            A add = 0;
            if (mask) add = j < mlast ? mrow[j * ms[3]] : kNegInf;
            const int64_t diff = i + offsets[b] - j;  // query position minus key position
            if (is_causal_ && diff < 0) add += kNegInf;
            if (left_window_ >= 0 && diff > left_window_) add += kNegInf;
            if (right_window_ >= 0 && -diff > right_window_) add += kNegInf;
            if (j >= valid[b]) add += kNegInf;  // padding after nonpad_kv_seqlen
            all_masked &= add == kNegInf;
            row[j] += add;
          }
          row_masked[i] = all_masked && s.total > 0;
        }
        if (qk && mode_ == 2) StoreAll(scores, qk);
        for (int64_t i = 0; i < s.q_len; ++i)
          SoftmaxRow(scores.data() + i * s.total, s.total, row_masked[i]);
        if (qk && mode_ == 3) StoreAll(scores, qk);
        const A* vh = vp.data() + (b * s.kv_heads + hk) * s.total * s.v_head;
        A* yh = s.three_d ? yacc.data() + b * s.q_len * s.q_heads * s.v_head + h * s.v_head
                          : yacc.data() + (b * s.q_heads + h) * s.q_len * s.v_head;
        const int64_t ldy = s.three_d ? s.q_heads * s.v_head : s.v_head;
        GemmAccumulate(s.q_len, s.v_head, s.total, MatView<A>{scores.data(), s.total, 1},
                       MatView<A>{vh, s.v_head, 1}, yh, ldy);
      }
    }
    StoreAll(yacc, outs[0]->data<T>());
  }

  // Softmax in place; a row whose bias masks every key (or whose logits are all -inf) is zero.
  template <typename A>
  static void SoftmaxRow(A* row, int64_t n, bool masked) {
    A mx = -std::numeric_limits<A>::infinity();
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, row[j]);
    if (masked || mx == -std::numeric_limits<A>::infinity()) {
      std::fill(row, row + n, A(0));
      return;
    }
    A sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    for (int64_t j = 0; j < n; ++j) row[j] /= sum;
  }

  // past (B, kv_heads, past, d) followed by the new keys/values, in (B, kv_heads, total, d).
  template <typename T>
  static std::vector<Acc<T>> Present(const AttnShape& s, const ir::Tensor& cur,
                                     const ir::Tensor* past, int64_t d) {
    std::vector<Acc<T>> out(s.batch * s.kv_heads * s.total * d);
    const T* c = cur.data<T>();
    const T* p = past ? past->data<T>() : nullptr;
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.kv_heads; ++h) {
        Acc<T>* dst = out.data() + (b * s.kv_heads + h) * s.total * d;
        for (int64_t t = 0; t < s.past * d; ++t) {
          dst[t] = Load(p[(b * s.kv_heads + h) * s.past * d + t]);
        }
        dst += s.past * d;
        for (int64_t t = 0; t < s.kv_len; ++t) {
          const T* src = s.three_d ? c + (b * s.kv_len + t) * s.kv_heads * d + h * d
                                   : c + ((b * s.kv_heads + h) * s.kv_len + t) * d;
          for (int64_t i = 0; i < d; ++i) dst[t * d + i] = Load(src[i]);
        }
      }
    }
    return out;
  }

  template <typename A, typename T>
  static void StoreAll(const std::vector<A>& v, T* out) {
    for (size_t i = 0; i < v.size(); ++i) out[i] = Store<T>(v[i]);
  }

  const ir::Node& node_;
  bool is_causal_ = false;
  int64_t q_num_heads_ = 0, kv_num_heads_ = 0, mode_ = 0;
  int64_t left_window_ = -1, right_window_ = -1;
  bool has_scale_ = false;
  float scale_ = 1.0f, softcap_ = 0.0f;
};

}  // namespace

void RegisterAttention(Registry& r) {
  r.AddRef(ir::OpType::kAttention, FloatTypes(), &AttentionKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref::nn
