// Expanders of the com.microsoft attention ops (contrib_ops.h) into projections, masks and the
// ONNX Attention op (23; 3-D Q/K/V with q_num_heads / kv_num_heads, kernels/cpu/ref/
// nn_attention.cc):
//   Attention            -> MatMul + bias Add + Split into Q, K, V; past (2, B, N, P, H) split
//                           into past_key / past_value; present re-stacked from present_key /
//                           present_value
//   QAttention           -> the same with the projection as MatMulInteger + Cast + Mul(scales)
//   MultiHeadAttention   -> [bias Add per Q/K/V] (packed QKV split) + Attention
//   GroupQueryAttention  -> [packed QKV split] [RotaryEmbedding of Q and K] + Attention
//                           (kv_num_heads) with the keys past seqlens_k masked
//   RotaryEmbedding      -> ONNX RotaryEmbedding (position_ids of the offset form expanded)
// Masks as ORT applies them: a key padding mask (raw 0/1 (B, T), (B, S, T), or key lengths (B))
// adds mask_filter_value (-10000) to the masked scores; unidirectional is the ONNX op's causal
// mask (offset by the past length), which ORT also builds with mask_filter_value: the two differ
// only in a row whose keys are all masked.
#include <limits>
#include <string>
#include <vector>

#include "engine/common/status.h"
#include "engine/import/contrib_ops_internal.h"

namespace kiln::import::contrib {
namespace {

using ir::Attribute;
using ir::OpType;
using Attrs = std::vector<std::pair<std::string, Attribute>>;

// Dim `axis` of value `v` when static, else -1.
int64_t StaticDim(const ir::Value* v, int axis) {
  if (v == nullptr) return -1;
  if (v->constant) {
    const int r = v->constant->rank();
    if (axis < 0) axis += r;
    return axis >= 0 && axis < r ? v->constant->dim(axis) : -1;
  }
  if (!v->shape.rank_known) return -1;
  const int r = v->shape.rank();
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r || !v->shape.dims[axis].is_static()) return -1;
  return v->shape.dims[axis].value;
}

// Dim `axis` of `v` at run time, as an int64 scalar.
absl::StatusOr<ir::Value*> RuntimeDim(Expansion& e, ir::Value* v, int axis,
                                      const std::string& part) {
  ASSIGN_OR_RETURN(ir::Value * s,
                   e.Op(OpType::kShape, part + "_shape", {v},
                        {{"start", Attribute::Int(axis)}, {"end", Attribute::Int(axis + 1)}}));
  ASSIGN_OR_RETURN(ir::Value * zero, e.I64s(part + "_axes", {0}));
  return e.Op(OpType::kSqueeze, part, {s, zero});
}

// Splits `x` along the last axis into parts of `sizes`.
absl::StatusOr<std::vector<ir::Value*>> SplitLast(Expansion& e, ir::Value* x,
                                                  const std::vector<int64_t>& sizes,
                                                  const std::vector<std::string>& names) {
  ASSIGN_OR_RETURN(ir::Value * split, e.I64s("split_sizes", sizes));
  std::vector<ir::Value*> outs;
  for (const std::string& n : names) {
    ASSIGN_OR_RETURN(ir::Value * o, e.Temp(n));
    outs.push_back(o);
  }
  RETURN_IF_ERROR(
      e.Node(OpType::kSplit, "Split", {x, split}, outs, {{"axis", Attribute::Int(-1)}}).status());
  return outs;
}

// The additive mask of key padding `mask` (rank 1: key lengths; 2: (B, T); 3: (B, S, T); 1 or
// any positive value keeps a key): 0 where kept, `filter` elsewhere, in `dt`, shaped to
// broadcast against (B, heads, S, T). `total` (int64 scalar) is T, read by the rank-1 form.
absl::StatusOr<ir::Value*> KeyPaddingMask(Expansion& e, ir::Value* mask, int rank, ir::Value* total,
                                          DataType dt, float filter) {
  ASSIGN_OR_RETURN(ir::Value * m64,
                   e.Op(OpType::kCast, "mask_int64", {mask}, {{"to", Attribute::Int(7)}}));
  ir::Value* keep;
  if (rank == 1) {
    ASSIGN_OR_RETURN(ir::Value * zero, e.I64s("mask_range_start", {0}));
    ASSIGN_OR_RETURN(ir::Value * one, e.I64s("mask_range_step", {1}));
    ASSIGN_OR_RETURN(ir::Value * ax0, e.I64s("mask_squeeze_axes", {0}));
    ASSIGN_OR_RETURN(ir::Value * z0, e.Op(OpType::kSqueeze, "mask_start", {zero, ax0}));
    ASSIGN_OR_RETURN(ir::Value * o0, e.Op(OpType::kSqueeze, "mask_step", {one, ax0}));
    ASSIGN_OR_RETURN(ir::Value * pos, e.Op(OpType::kRange, "key_positions", {z0, total, o0}));
    ASSIGN_OR_RETURN(ir::Value * axl, e.I64s("mask_lengths_axes", {-1}));
    ASSIGN_OR_RETURN(ir::Value * len, e.Op(OpType::kUnsqueeze, "key_lengths", {m64, axl}));
    ASSIGN_OR_RETURN(keep, e.Op(OpType::kLess, "key_kept", {pos, len}));
  } else {
    ASSIGN_OR_RETURN(ir::Tensor z, ir::Tensor::Allocate(DataType::kI64, {}));
    ASSIGN_OR_RETURN(ir::Value * zero, e.Const("mask_zero", std::move(z)));
    ASSIGN_OR_RETURN(keep, e.Op(OpType::kGreater, "key_kept", {m64, zero}));
  }
  ASSIGN_OR_RETURN(ir::Value * fz, e.FloatConst("mask_kept_value", dt, 0.0));
  ASSIGN_OR_RETURN(ir::Value * ff, e.FloatConst("mask_filter_value", dt, filter));
  ASSIGN_OR_RETURN(ir::Value * add, e.Op(OpType::kWhere, "mask_additive", {keep, fz, ff}));
  ASSIGN_OR_RETURN(ir::Value * axes, e.I64s("mask_axes", rank == 3 ? std::vector<int64_t>{1}
                                                                   : std::vector<int64_t>{1, 2}));
  return e.Op(OpType::kUnsqueeze, "mask_4d", {add, axes});
}

// Adds attention_bias (B or 1, N, S, T) to an additive mask (either may be null).
absl::StatusOr<ir::Value*> WithBias(Expansion& e, ir::Value* mask, ir::Value* bias) {
  if (bias == nullptr) return mask;
  if (mask == nullptr) return bias;
  return e.Op(OpType::kAdd, "mask_bias_add", {mask, bias});
}

struct Core {
  ir::Value *q, *k, *v;                            // 3-D (B, S|L, heads * head)
  ir::Value* mask = nullptr;                       // additive or bool, broadcasts to (B, N, S, T)
  ir::Value *past_k = nullptr, *past_v = nullptr;  // (B, kv_heads, P, head)
  int64_t q_heads = 0, kv_heads = 0;
  bool causal = false;
  float scale = 0;  // 0: 1/sqrt(head)
  float softcap = 0;
  ir::Value *out = nullptr, *present_k = nullptr, *present_v = nullptr;
};

absl::Status EmitAttention(Expansion& e, const Core& c) {
  Attrs attrs = {{"q_num_heads", Attribute::Int(c.q_heads)},
                 {"kv_num_heads", Attribute::Int(c.kv_heads)},
                 {"is_causal", Attribute::Int(c.causal ? 1 : 0)}};
  if (c.scale != 0) attrs.emplace_back("scale", Attribute::Float(c.scale));
  if (c.softcap != 0) attrs.emplace_back("softcap", Attribute::Float(c.softcap));
  std::vector<ir::Value*> ins = {c.q, c.k, c.v, c.mask, c.past_k, c.past_v};
  return e.Node(OpType::kAttention, "Attention", ins, {c.out, c.present_k, c.present_v}, attrs)
      .status();
}

int64_t NumHeads(Expansion& e) { return e.Int("num_heads", 0); }

// Attention / QAttention after the projection `qkv` (B, S, Hq + Hk + Hv): mask_index at input
// `mask_i`, past at `past_i`, attention_bias at `bias_i` (-1: none).
absl::Status AttentionFromQkv(Expansion& e, ir::Value* qkv, const std::vector<int64_t>& sizes,
                              DataType dt, int mask_i, int past_i, int bias_i) {
  const int64_t heads = NumHeads(e);
  ASSIGN_OR_RETURN(std::vector<ir::Value*> qkv3, SplitLast(e, qkv, sizes, {"Q", "K", "V"}));
  Core c{qkv3[0], qkv3[1], qkv3[2]};
  c.q_heads = c.kv_heads = heads;
  c.causal = e.Int("unidirectional", 0) != 0;
  c.scale = e.Float("scale", 0.0f);
  c.out = e.out(0);
  ir::Value* past = e.in(past_i);
  if (past != nullptr) {
    if (e.RankOf(past_i) >= 0 && e.RankOf(past_i) != 5) {
      return e.Invalid("past must be 5-D (2, batch, num_heads, past_length, head_size)");
    }
    ASSIGN_OR_RETURN(ir::Value * one, e.I64s("past_split", {1, 1}));
    ASSIGN_OR_RETURN(ir::Value * pk, e.Temp("past_key_5d"));
    ASSIGN_OR_RETURN(ir::Value * pv, e.Temp("past_value_5d"));
    RETURN_IF_ERROR(
        e.Node(OpType::kSplit, "past_split", {past, one}, {pk, pv}, {{"axis", Attribute::Int(0)}})
            .status());
    ASSIGN_OR_RETURN(ir::Value * ax0, e.I64s("past_axes", {0}));
    ASSIGN_OR_RETURN(c.past_k, e.Op(OpType::kSqueeze, "past_key", {pk, ax0}));
    ASSIGN_OR_RETURN(c.past_v, e.Op(OpType::kSqueeze, "past_value", {pv, ax0}));
  }
  if (e.out(1) != nullptr) {
    ASSIGN_OR_RETURN(c.present_k, e.Temp("present_key"));
    ASSIGN_OR_RETURN(c.present_v, e.Temp("present_value"));
  }
  ir::Value* mask = nullptr;
  if (e.in(mask_i) != nullptr) {
    const int rank = e.RankOf(mask_i);
    if (rank < 1 || rank > 3) {
      return e.Unsupported(absl::StrCat(
          "mask_index of rank ", rank,
          " (Kiln expands key lengths (batch), raw masks (batch, total) and (batch, seq, "
          "total); rank unknown is refused too)"));
    }
    if (rank == 1 && StaticDim(e.in(mask_i), 0) >= 0 && StaticDim(e.in(0), 0) >= 0 &&
        StaticDim(e.in(mask_i), 0) != StaticDim(e.in(0), 0)) {
      return e.Unsupported("a 1-D mask_index of 2 * batch (end and start positions)");
    }
    ir::Value* total = nullptr;
    if (rank == 1) {
      ASSIGN_OR_RETURN(total, RuntimeDim(e, qkv, 1, "sequence_length"));
      if (past != nullptr) {
        ASSIGN_OR_RETURN(ir::Value * p, RuntimeDim(e, past, 3, "past_length"));
        ASSIGN_OR_RETURN(total, e.Op(OpType::kAdd, "total_length", {total, p}));
      }
    }
    ASSIGN_OR_RETURN(mask, KeyPaddingMask(e, e.in(mask_i), rank, total, dt,
                                          e.Float("mask_filter_value", -10000.0f)));
  }
  ASSIGN_OR_RETURN(c.mask, WithBias(e, mask, bias_i >= 0 ? e.in(bias_i) : nullptr));
  RETURN_IF_ERROR(EmitAttention(e, c));
  if (e.out(1) == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(ir::Value * ax0, e.I64s("present_axes", {0}));
  ASSIGN_OR_RETURN(ir::Value * k5, e.Op(OpType::kUnsqueeze, "present_key_5d", {c.present_k, ax0}));
  ASSIGN_OR_RETURN(ir::Value * v5,
                   e.Op(OpType::kUnsqueeze, "present_value_5d", {c.present_v, ax0}));
  return e.Op(OpType::kConcat, "present", {k5, v5}, {{"axis", Attribute::Int(0)}}, e.out(1))
      .status();
}

absl::Status CheckCommonAttentionAttrs(Expansion& e) {
  if (NumHeads(e) <= 0) return e.Invalid("attribute num_heads must be given and positive");
  if (e.Int("do_rotary", 0) != 0) return e.Unsupported("do_rotary=1");
  if (e.Int("past_present_share_buffer", 0) != 0) {
    return e.Unsupported("past_present_share_buffer=1");
  }
  return absl::OkStatus();
}

// The Q, K, V hidden sizes of a packed projection of width `width`.
absl::StatusOr<std::vector<int64_t>> QkvSizes(Expansion& e, int64_t width) {
  std::vector<int64_t> sizes = e.Ints("qkv_hidden_sizes");
  if (sizes.empty()) {
    if (width < 0) {
      return e.Unsupported("the weight's last dim is unknown and qkv_hidden_sizes is not given");
    }
    if (width % 3 != 0) {
      return e.Invalid(absl::StrCat("weights' last dim ", width, " is not 3 * hidden_size"));
    }
    sizes = {width / 3, width / 3, width / 3};
  }
  if (sizes.size() != 3 || sizes[0] != sizes[1] || sizes[0] <= 0 || sizes[2] <= 0) {
    return e.Invalid("qkv_hidden_sizes must be 3 positive sizes with Q's equal to K's");
  }
  if (width >= 0 && sizes[0] + sizes[1] + sizes[2] != width) {
    return e.Invalid(absl::StrCat("qkv_hidden_sizes sum to ", sizes[0] + sizes[1] + sizes[2],
                                  " but the weights' last dim is ", width));
  }
  const int64_t heads = NumHeads(e);
  if (sizes[0] % heads != 0 || sizes[2] % heads != 0) {
    return e.Invalid(absl::StrCat("hidden sizes ", sizes[0], " / ", sizes[2],
                                  " are not multiples of num_heads ", heads));
  }
  return sizes;
}

// Attention(input, weights, bias?, mask_index?, past?, attention_bias?, past_sequence_length?).
absl::Status ExpandAttention(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(2, 7, 1, 2));
  RETURN_IF_ERROR(CheckCommonAttentionAttrs(e));
  ASSIGN_OR_RETURN(DataType dt, e.FloatType(0, "input"));
  ASSIGN_OR_RETURN(ir::Value * w, e.Required(1, "weights"));
  if (e.RankOf(0) >= 0 && e.RankOf(0) != 3) {
    return e.Invalid("input must be 3-D (batch, sequence, input_hidden)");
  }
  if (e.RankOf(1) >= 0 && e.RankOf(1) != 2) return e.Invalid("weights must be 2-D");
  if (e.in(6) != nullptr) return e.Unsupported("input 6 (past_sequence_length)");
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, QkvSizes(e, StaticDim(w, 1)));
  ASSIGN_OR_RETURN(ir::Value * qkv, e.Op(OpType::kMatMul, "qkv_MatMul", {e.in(0), w}));
  if (e.in(2) != nullptr) {
    ASSIGN_OR_RETURN(qkv, e.Op(OpType::kAdd, "qkv_bias_add", {qkv, e.in(2)}));
  }
  return AttentionFromQkv(e, qkv, sizes, dt, 3, 4, 5);
}

// QAttention(input, weight, bias, input_scale, weight_scale, mask_index?, input_zero_point?,
// weight_zero_point?, past?).
absl::Status ExpandQAttention(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(5, 9, 1, 2));
  RETURN_IF_ERROR(CheckCommonAttentionAttrs(e));
  ASSIGN_OR_RETURN(ir::Value * x, e.Required(0, "input"));
  ASSIGN_OR_RETURN(ir::Value * w, e.Required(1, "weight"));
  ASSIGN_OR_RETURN(ir::Value * bias, e.Required(2, "bias"));
  ASSIGN_OR_RETURN(DataType dt, e.FloatType(3, "input_scale"));
  RETURN_IF_ERROR(e.Required(4, "weight_scale").status());
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, QkvSizes(e, StaticDim(w, 1)));
  ASSIGN_OR_RETURN(ir::Value * acc,
                   e.Op(OpType::kMatMulInteger, "qkv_MatMulInteger", {x, w, e.in(6), e.in(7)}));
  ASSIGN_OR_RETURN(ir::Value * f, e.Op(OpType::kCast, "qkv_Cast", {acc},
                                       {{"to", Attribute::Int(static_cast<int64_t>(dt))}}));
  ASSIGN_OR_RETURN(ir::Value * s, e.Op(OpType::kMul, "scales", {e.in(3), e.in(4)}));
  ASSIGN_OR_RETURN(ir::Value * qkv, e.Op(OpType::kMul, "qkv_scale_mul", {f, s}));
  ASSIGN_OR_RETURN(qkv, e.Op(OpType::kAdd, "qkv_bias_add", {qkv, bias}));
  return AttentionFromQkv(e, qkv, sizes, dt, 5, 8, -1);
}

// Splits packed (B, S, N, parts, H) into `parts` 3-D (B, S, N*H) tensors.
absl::StatusOr<std::vector<ir::Value*>> UnpackHeads(Expansion& e, ir::Value* packed, int parts) {
  std::vector<int64_t> ones(parts, 1);
  ASSIGN_OR_RETURN(ir::Value * split, e.I64s("packed_split", ones));
  std::vector<ir::Value*> outs;
  for (int i = 0; i < parts; ++i) {
    ASSIGN_OR_RETURN(ir::Value * o, e.Temp(absl::StrCat("packed_", i)));
    outs.push_back(o);
  }
  RETURN_IF_ERROR(
      e.Node(OpType::kSplit, "packed_Split", {packed, split}, outs, {{"axis", Attribute::Int(3)}})
          .status());
  ASSIGN_OR_RETURN(ir::Value * shape, e.I64s("packed_shape", {0, 0, -1}));
  for (int i = 0; i < parts; ++i) {
    ASSIGN_OR_RETURN(outs[i],
                     e.Op(OpType::kReshape, absl::StrCat("unpacked_", i), {outs[i], shape}));
  }
  return outs;
}

// MultiHeadAttention(query, key?, value?, bias?, key_padding_mask?, attention_bias?, past_key?,
// past_value?, past_sequence_length?, cache_indirection?) -> output, present_key?,
// present_value?.
absl::Status ExpandMultiHeadAttention(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(1, 10, 1, 3));
  if (NumHeads(e) <= 0) return e.Invalid("attribute num_heads must be given and positive");
  ASSIGN_OR_RETURN(DataType dt, e.FloatType(0, "query"));
  if (e.in(8) != nullptr || e.in(9) != nullptr) {
    return e.Unsupported("past_sequence_length / cache_indirection (beam search)");
  }
  ir::Value *q = e.in(0), *k = e.in(1), *v = e.in(2);
  const int qr = e.RankOf(0);
  if (k == nullptr && v == nullptr) {
    if (qr != 5) return e.Invalid("without key and value, query must be packed (B, S, N, 3, H)");
    ASSIGN_OR_RETURN(auto qkv, UnpackHeads(e, q, 3));
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else if (k != nullptr && v == nullptr) {
    if (e.RankOf(1) != 5) return e.Invalid("without value, key must be packed (B, L, N, 2, H)");
    ASSIGN_OR_RETURN(auto kv, UnpackHeads(e, k, 2));
    k = kv[0], v = kv[1];
  } else if (k == nullptr) {
    return e.Invalid("value is given without key");
  }
  if (qr != 3 && qr != 5) return e.Invalid("query must be 3-D (B, S, D) or packed 5-D");
  if (e.RankOf(1) == 4) return e.Unsupported("key / value of rank 4 (B, N, L, H)");
  if (e.in(3) != nullptr) {
    const int64_t len = StaticDim(e.in(3), 0);
    int64_t dq = StaticDim(q, -1), dv = StaticDim(v, -1);
    if (len < 0 && (dq < 0 || dv < 0)) {
      return e.Unsupported("bias with Q / V hidden sizes unknown at import");
    }
    if (dq < 0 || dv < 0) dq = dv = len / 3;
    if (len >= 0 && 2 * dq + dv != len) {
      return e.Invalid(
          absl::StrCat("bias has ", len, " values; Q, K, V hidden sizes sum to ", 2 * dq + dv));
    }
    ASSIGN_OR_RETURN(auto b, SplitLast(e, e.in(3), {dq, dq, dv}, {"bias_q", "bias_k", "bias_v"}));
    ASSIGN_OR_RETURN(q, e.Op(OpType::kAdd, "q_bias_add", {q, b[0]}));
    ASSIGN_OR_RETURN(k, e.Op(OpType::kAdd, "k_bias_add", {k, b[1]}));
    ASSIGN_OR_RETURN(v, e.Op(OpType::kAdd, "v_bias_add", {v, b[2]}));
  }
  Core c{q, k, v};
  c.q_heads = c.kv_heads = NumHeads(e);
  c.causal = e.Int("unidirectional", 0) != 0;
  c.scale = e.Float("scale", 0.0f);
  c.past_k = e.in(6);
  c.past_v = e.in(7);
  if ((c.past_k == nullptr) != (c.past_v == nullptr)) {
    return e.Invalid("past_key and past_value must be given together");
  }
  c.out = e.out(0);
  c.present_k = e.out(1);
  c.present_v = e.out(2);
  ir::Value* mask = nullptr;
  if (e.in(4) != nullptr) {
    const int rank = e.RankOf(4);
    if (rank < 1 || rank > 3) return e.Unsupported("key_padding_mask of rank other than 1..3");
    ir::Value* total = nullptr;
    if (rank == 1) {
      ASSIGN_OR_RETURN(total, RuntimeDim(e, k, 1, "kv_length"));
      if (c.past_k != nullptr) {
        ASSIGN_OR_RETURN(ir::Value * p, RuntimeDim(e, c.past_k, 2, "past_length"));
        ASSIGN_OR_RETURN(total, e.Op(OpType::kAdd, "total_length", {total, p}));
      }
    }
    ASSIGN_OR_RETURN(
        mask, KeyPaddingMask(e, e.in(4), rank, total, dt, e.Float("mask_filter_value", -10000.0f)));
  }
  ASSIGN_OR_RETURN(c.mask, WithBias(e, mask, e.in(5)));
  return EmitAttention(e, c);
}

// position_ids for ONNX RotaryEmbedding (B, S) from `pos` (B, S) or the offset form (1): offset
// + 0..S-1, broadcast over the batch of `x` (whose sequence axis is `seq_axis`).
absl::StatusOr<ir::Value*> PositionIds(Expansion& e, ir::Value* x, int seq_axis, ir::Value* pos,
                                       int pos_rank) {
  if (pos_rank == 2) return pos;
  if (pos_rank != 1) return e.Invalid("position_ids must be 2-D (batch, seq) or 1-D (offset)");
  ASSIGN_OR_RETURN(ir::Value * p64,
                   e.Op(OpType::kCast, "position_offset", {pos}, {{"to", Attribute::Int(7)}}));
  ASSIGN_OR_RETURN(ir::Value * ax0, e.I64s("offset_axes", {0}));
  ASSIGN_OR_RETURN(ir::Value * start, e.Op(OpType::kSqueeze, "position_start", {p64, ax0}));
  ASSIGN_OR_RETURN(ir::Value * seq, RuntimeDim(e, x, seq_axis, "sequence_length"));
  ASSIGN_OR_RETURN(ir::Value * end, e.Op(OpType::kAdd, "position_end", {start, seq}));
  ASSIGN_OR_RETURN(ir::Value * one, e.I64s("position_step_1d", {1}));
  ASSIGN_OR_RETURN(ir::Value * step, e.Op(OpType::kSqueeze, "position_step", {one, ax0}));
  ASSIGN_OR_RETURN(ir::Value * r, e.Op(OpType::kRange, "positions", {start, end, step}));
  ASSIGN_OR_RETURN(ir::Value * b, e.Op(OpType::kShape, "batch_shape", {x},
                                       {{"start", Attribute::Int(0)}, {"end", Attribute::Int(1)}}));
  ASSIGN_OR_RETURN(ir::Value * s1, e.Op(OpType::kShape, "positions_shape", {r}));
  ASSIGN_OR_RETURN(ir::Value * shape, e.Op(OpType::kConcat, "position_ids_shape", {b, s1},
                                           {{"axis", Attribute::Int(0)}}));
  return e.Op(OpType::kExpand, "position_ids", {r, shape});
}

// RotaryEmbedding(input, position_ids, cos_cache, sin_cache; interleaved, is_packed_batching,
// num_heads, rotary_embedding_dim, scale).
absl::Status ExpandRotaryEmbedding(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(4, 4, 1, 1));
  RETURN_IF_ERROR(e.FloatType(0, "input").status());
  if (e.Int("is_packed_batching", 0) != 0) return e.Unsupported("is_packed_batching=1");
  if (e.Float("scale", 1.0f) != 1.0f) return e.Unsupported("scale other than 1");
  const int rank = e.RankOf(0);
  if (rank != 3 && rank != 4) {
    return e.Invalid("input must be 3-D (B, S, hidden) or 4-D (B, N, S, H), with a known rank");
  }
  ASSIGN_OR_RETURN(ir::Value * pos_in, e.Required(1, "position_ids"));
  ASSIGN_OR_RETURN(ir::Value * pos,
                   PositionIds(e, e.in(0), rank == 3 ? 1 : 2, pos_in, e.RankOf(1)));
  Attrs attrs = {{"interleaved", Attribute::Int(e.Int("interleaved", 0))}};
  if (e.Has("num_heads")) attrs.emplace_back("num_heads", Attribute::Int(e.Int("num_heads", 0)));
  if (e.Has("rotary_embedding_dim")) {
    attrs.emplace_back("rotary_embedding_dim", Attribute::Int(e.Int("rotary_embedding_dim", 0)));
  }
  if (rank == 3 && e.Int("num_heads", 0) == 0 && e.Int("rotary_embedding_dim", 0) != 0) {
    return e.Invalid("a 3-D input with rotary_embedding_dim needs num_heads");
  }
  return e
      .Op(OpType::kRotaryEmbedding, "RotaryEmbedding", {e.in(0), e.in(2), e.in(3), pos}, attrs,
          e.out(0))
      .status();
}

// GroupQueryAttention(query, key?, value?, past_key?, past_value?, seqlens_k,
// total_sequence_length, cos_cache?, sin_cache?, position_ids?, attention_bias?, head_sink?).
absl::Status ExpandGroupQueryAttention(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(7, 12, 1, 4));
  const int64_t heads = NumHeads(e), kv_heads = e.Int("kv_num_heads", 0);
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0) {
    return e.Invalid(
        "num_heads and kv_num_heads must be positive, num_heads a multiple of "
        "kv_num_heads");
  }
  ASSIGN_OR_RETURN(DataType dt, e.FloatType(0, "query"));
  if (e.Int("local_window_size", -1) != -1) return e.Unsupported("local_window_size");
  if (e.Int("smooth_softmax", 0) != 0 || e.in(11) != nullptr) {
    return e.Unsupported("smooth_softmax / head_sink");
  }
  if (e.Int("qk_output", 0) != 0 || e.out(3) != nullptr) return e.Unsupported("output_qk");
  ASSIGN_OR_RETURN(ir::Value * seqlens, e.Required(5, "seqlens_k"));
  ASSIGN_OR_RETURN(ir::Value * total_in, e.Required(6, "total_sequence_length"));
  ir::Value *q = e.in(0), *k = e.in(1), *v = e.in(2);
  if (k == nullptr || v == nullptr) {
    if (k != nullptr || v != nullptr) return e.Invalid("key and value must be given together");
    const int64_t width = StaticDim(q, -1);
    if (width < 0 || width % (heads + 2 * kv_heads) != 0) {
      return e.Invalid(
          "packed QKV needs a static last dim, a multiple of num_heads + "
          "2 * kv_num_heads");
    }
    const int64_t h = width / (heads + 2 * kv_heads);
    ASSIGN_OR_RETURN(auto qkv,
                     SplitLast(e, q, {heads * h, kv_heads * h, kv_heads * h}, {"Q", "K", "V"}));
    q = qkv[0], k = qkv[1], v = qkv[2];
  }
  if ((e.in(3) == nullptr) != (e.in(4) == nullptr)) {
    return e.Invalid("past_key and past_value must be given together");
  }
  // Positions of the new tokens: past length (seqlens_k + 1 - S) + 0..S-1 per batch.
  ASSIGN_OR_RETURN(ir::Value * sl64,
                   e.Op(OpType::kCast, "seqlens_int64", {seqlens}, {{"to", Attribute::Int(7)}}));
  if (e.Int("do_rotary", 0) != 0) {
    if (e.in(7) == nullptr || e.in(8) == nullptr) {
      return e.Invalid("do_rotary=1 needs cos_cache and sin_cache");
    }
    ir::Value* pos = e.in(9);
    if (pos == nullptr) {
      ASSIGN_OR_RETURN(ir::Value * s, RuntimeDim(e, q, 1, "sequence_length"));
      ASSIGN_OR_RETURN(ir::Value * one, e.I64s("one", {1}));
      ASSIGN_OR_RETURN(ir::Value * ax0, e.I64s("axes0", {0}));
      ASSIGN_OR_RETURN(ir::Value * one0, e.Op(OpType::kSqueeze, "one_scalar", {one, ax0}));
      ASSIGN_OR_RETURN(ir::Value * total_b, e.Op(OpType::kAdd, "totals", {sl64, one0}));
      ASSIGN_OR_RETURN(ir::Value * start, e.Op(OpType::kSub, "past_lengths", {total_b, s}));
      ASSIGN_OR_RETURN(ir::Value * zero0, e.Op(OpType::kSub, "zero_scalar", {one0, one0}));
      ASSIGN_OR_RETURN(ir::Value * r, e.Op(OpType::kRange, "offsets", {zero0, s, one0}));
      ASSIGN_OR_RETURN(ir::Value * axl, e.I64s("axes_last", {-1}));
      ASSIGN_OR_RETURN(ir::Value * st, e.Op(OpType::kUnsqueeze, "past_lengths_2d", {start, axl}));
      ASSIGN_OR_RETURN(pos, e.Op(OpType::kAdd, "position_ids", {st, r}));
    }
    Attrs rot = {{"interleaved", Attribute::Int(e.Int("rotary_interleaved", 0))}};
    Attrs rq = rot, rk = rot;
    rq.emplace_back("num_heads", Attribute::Int(heads));
    rk.emplace_back("num_heads", Attribute::Int(kv_heads));
    ASSIGN_OR_RETURN(q, e.Op(OpType::kRotaryEmbedding, "q_rotary", {q, e.in(7), e.in(8), pos}, rq));
    ASSIGN_OR_RETURN(k, e.Op(OpType::kRotaryEmbedding, "k_rotary", {k, e.in(7), e.in(8), pos}, rk));
  }
  // Keys past seqlens_k[b] (padding) are masked out.
  ASSIGN_OR_RETURN(ir::Value * t64,
                   e.Op(OpType::kCast, "total_int64", {total_in}, {{"to", Attribute::Int(7)}}));
  ASSIGN_OR_RETURN(ir::Value * ax0, e.I64s("total_axes", {0}));
  if (e.RankOf(6) == 1) {
    ASSIGN_OR_RETURN(t64, e.Op(OpType::kSqueeze, "total_scalar", {t64, ax0}));
  }
  ASSIGN_OR_RETURN(ir::Tensor z, ir::Tensor::Allocate(DataType::kI64, {}));
  ASSIGN_OR_RETURN(ir::Value * zero, e.Const("zero", std::move(z)));
  ASSIGN_OR_RETURN(ir::Tensor o, ir::Tensor::Allocate(DataType::kI64, {}));
  o.data<int64_t>()[0] = 1;
  ASSIGN_OR_RETURN(ir::Value * onev, e.Const("step", std::move(o)));
  ASSIGN_OR_RETURN(ir::Value * kpos, e.Op(OpType::kRange, "key_positions", {zero, t64, onev}));
  ASSIGN_OR_RETURN(ir::Value * axl, e.I64s("seqlens_axes", {-1}));
  ASSIGN_OR_RETURN(ir::Value * last, e.Op(OpType::kUnsqueeze, "last_key", {sl64, axl}));
  ASSIGN_OR_RETURN(ir::Value * keep, e.Op(OpType::kLessOrEqual, "key_kept", {kpos, last}));
  ASSIGN_OR_RETURN(ir::Value * axes, e.I64s("mask_axes", {1, 2}));
  ASSIGN_OR_RETURN(ir::Value * mask, e.Op(OpType::kUnsqueeze, "key_mask", {keep, axes}));
  if (e.in(10) != nullptr) {
    ASSIGN_OR_RETURN(ir::Value * fz, e.FloatConst("mask_kept_value", dt, 0.0));
    ASSIGN_OR_RETURN(ir::Value * fi, e.FloatConst("mask_masked_value", dt,
                                                  -std::numeric_limits<float>::infinity()));
    ASSIGN_OR_RETURN(mask, e.Op(OpType::kWhere, "mask_additive", {mask, fz, fi}));
    ASSIGN_OR_RETURN(mask, e.Op(OpType::kAdd, "mask_bias_add", {mask, e.in(10)}));
  }
  Core c{q, k, v};
  c.q_heads = heads;
  c.kv_heads = kv_heads;
  c.causal = true;
  c.scale = e.Float("scale", 0.0f);
  c.softcap = e.Float("softcap", 0.0f);
  c.mask = mask;
  c.past_k = e.in(3);
  c.past_v = e.in(4);
  c.out = e.out(0);
  c.present_k = e.out(1);
  c.present_v = e.out(2);
  return EmitAttention(e, c);
}

}  // namespace

void AddAttentionExpanders(ExpanderTable& t) {
  t["Attention"] = ExpandAttention;
  t["QAttention"] = ExpandQAttention;
  t["MultiHeadAttention"] = ExpandMultiHeadAttention;
  t["GroupQueryAttention"] = ExpandGroupQueryAttention;
  t["RotaryEmbedding"] = ExpandRotaryEmbedding;
}

}  // namespace kiln::import::contrib
