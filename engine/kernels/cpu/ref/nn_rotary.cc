// RotaryEmbedding (opset 23): rotary positional embeddings (RoPE) over 4-D (B, heads, S, head)
// or 3-D (B, S, heads * head) input, halves or interleaved pairs rotated, full or partial
// (rotary_embedding_dim), with cos/sin caches gathered by position_ids or given per token.
// fp16 / bf16 data compute in fp32 and round each output once (DESIGN.md §5).
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

class RotaryEmbeddingKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::make_unique<RotaryEmbeddingKernel>(node);
    k->num_heads_ = node.GetInt("num_heads", 0);
    k->rotary_dim_ = node.GetInt("rotary_embedding_dim", 0);
    k->interleaved_ = node.GetInt("interleaved", 0) != 0;
    if (k->num_heads_ < 0) return InvalidNode(node, "num_heads must be >= 0, got ", k->num_heads_);
    if (k->rotary_dim_ < 0) {
      return InvalidNode(node, "rotary_embedding_dim must be >= 0, got ", k->rotary_dim_);
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }
  explicit RotaryEmbeddingKernel(const ir::Node& node) : node_(node) {}

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* cos, RequireInput(node_, ctx, 1));
    ASSIGN_OR_RETURN(const ir::Tensor* sin, RequireInput(node_, ctx, 2));
    const ir::Tensor* pos = ctx.input(3);
    if (cos->dtype() != x->dtype() || sin->dtype() != x->dtype()) {
      return InvalidNode(node_, "cos_cache and sin_cache must have X's dtype ",
                         DataTypeOnnxName(x->dtype()));
    }
    // Geometry: X as (batch, seq, heads, head), whatever its layout.
    int64_t batch, seq, heads, head;
    const bool four_d = x->rank() == 4;
    if (four_d) {
      batch = x->dim(0);
      heads = x->dim(1);
      seq = x->dim(2);
      head = x->dim(3);
    } else if (x->rank() == 3) {
      if (num_heads_ <= 0) {
        return InvalidNode(node_, "num_heads is required for 3-D input ",
                           ir::DimsToString(x->dims()));
      }
      batch = x->dim(0);
      seq = x->dim(1);
      heads = num_heads_;
      if (x->dim(2) % heads != 0) {
        return InvalidNode(node_, "hidden size ", x->dim(2), " is not divisible by num_heads ",
                           heads);
      }
      head = x->dim(2) / heads;
    } else {
      return InvalidNode(node_, "X must be 3-D or 4-D, got ", ir::DimsToString(x->dims()));
    }
    const int64_t rot = rotary_dim_ == 0 ? head : rotary_dim_;
    if (rot > head || rot % 2 != 0) {
      return InvalidNode(node_, "rotary_embedding_dim ", rot, " must be even and at most the ",
                         "head size ", head);
    }
    const int64_t half = rot / 2;
    // Cache rows: with position_ids, row position_ids[b, s] of a (max_position, half) cache;
    // without, row (b, s) of a (batch, seq, half) cache, or row s of a (seq, half) one (numpy
    // broadcasts it over the batch).
    std::vector<int64_t> rows(batch * seq);
    if (pos) {
      if (pos->dtype() != DataType::kI64 || pos->rank() != 2 || pos->dim(0) != batch ||
          pos->dim(1) != seq) {
        return InvalidNode(node_, "position_ids must be int64 of shape [", batch, ",", seq,
                           "], got ", DataTypeOnnxName(pos->dtype()), " ",
                           ir::DimsToString(pos->dims()));
      }
      if (cos->rank() != 2) {
        return InvalidNode(node_, "with position_ids, cos_cache must be 2-D (max_position, ", half,
                           "), got ", ir::DimsToString(cos->dims()));
      }
      for (int64_t i = 0; i < batch * seq; ++i) {
        const int64_t p = pos->data<int64_t>()[i];
        if (p < 0 || p >= cos->dim(0)) {
          return InvalidNode(node_, "position_ids value ", p, " is outside the cache rows 0..",
                             cos->dim(0) - 1);
        }
        rows[i] = p;
      }
    } else if (cos->rank() == 3 && cos->dim(0) == batch && cos->dim(1) == seq) {
      for (int64_t i = 0; i < batch * seq; ++i) rows[i] = i;
    } else if (cos->rank() == 2 && cos->dim(0) == seq) {
      for (int64_t i = 0; i < batch * seq; ++i) rows[i] = i % seq;
    } else {
      return InvalidNode(node_, "without position_ids, cos_cache must be (", batch, ",", seq, ",",
                         half, "), got ", ir::DimsToString(cos->dims()));
    }
    if (cos->dims().back() != half) {
      return InvalidNode(node_, "last dim of cos_cache ", ir::DimsToString(cos->dims()),
                         " must be rotary_embedding_dim / 2 = ", half);
    }
    if (sin->dims() != cos->dims()) {
      return InvalidNode(node_, "sin_cache ", ir::DimsToString(sin->dims()),
                         " must have cos_cache's shape ", ir::DimsToString(cos->dims()));
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), x->dims()));
    return DispatchFloat(x->dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = Compute<T>;
      const T* xs = x->data<T>();
      const T* cs = cos->data<T>();
      const T* ss = sin->data<T>();
      T* ys = y->data<T>();
      // Element i of the first / second operand of each rotated pair.
      const int64_t step = interleaved_ ? 2 : 1;
      const int64_t second = interleaved_ ? 1 : half;
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t s = 0; s < seq; ++s) {
          const T* crow = cs + rows[b * seq + s] * half;
          const T* srow = ss + rows[b * seq + s] * half;
          for (int64_t h = 0; h < heads; ++h) {
            const int64_t base =
                four_d ? ((b * heads + h) * seq + s) * head : ((b * seq + s) * heads + h) * head;
            const T* in = xs + base;
            T* out = ys + base;
            for (int64_t i = 0; i < half; ++i) {
              const C x1 = Load(in[i * step]);
              const C x2 = Load(in[i * step + second]);
              const C c = Load(crow[i]);
              const C sn = Load(srow[i]);
              out[i * step] = Store<T>(c * x1 - sn * x2);
              out[i * step + second] = Store<T>(sn * x1 + c * x2);
            }
            for (int64_t i = rot; i < head; ++i) out[i] = in[i];
          }
        }
      }
      return absl::OkStatus();
    });
  }

 private:
  const ir::Node& node_;
  int64_t num_heads_ = 0;
  int64_t rotary_dim_ = 0;
  bool interleaved_ = false;
};

}  // namespace

void RegisterRotaryEmbedding(Registry& r) {
  r.AddRef(ir::OpType::kRotaryEmbedding, {DataType::kF32, DataType::kF16, DataType::kBF16},
           &RotaryEmbeddingKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
