// Expanders of the com.microsoft normalization and activation ops (contrib_ops.h):
//   Gelu                              -> Gelu (approximate none)
//   FastGelu(X, bias?)                -> [Add bias] + Gelu approximate=tanh
//   BiasGelu(A, B)                    -> Add + Gelu
//   QuickGelu(X; alpha)               -> X * Sigmoid(alpha * X)
//   BiasAdd(X, bias, skip)            -> Add + Add
//   SkipLayerNormalization            -> Add(input, skip) [+ bias] + LayerNormalization
//   SkipSimplifiedLayerNormalization  -> Add(input, skip) [+ bias] + RMSNormalization
//   SimplifiedLayerNormalization      -> RMSNormalization
//   EmbedLayerNormalization           -> Gather (word, position, segment) + Add +
//   LayerNormalization,
//                                        the mask index from a ReduceSum of the mask
//   QEmbedLayerNormalization          -> DequantizeLinear of the tables + the same
//   LayerNormalization (default domain, opset < 17: ORT's contrib op) -> LayerNormalization-17
//   FusedConv                         -> Conv [+ Add Z] + the activation
// The LayerNorm / RMSNorm / GELU pattern matchers and the Add+LayerNormalization fusion then see
// these nodes as they see any exporter's.
#include <string>
#include <vector>

#include "engine/common/status.h"
#include "engine/import/contrib_ops_internal.h"

namespace kiln::import::contrib {
namespace {

using ir::Attribute;
using ir::OpType;
using Attrs = std::vector<std::pair<std::string, Attribute>>;

absl::Status ExpandGelu(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(1, 1, 1, 1));
  RETURN_IF_ERROR(e.FloatType(0, "X").status());
  return e.Op(OpType::kGelu, "Gelu", {e.in(0)}, {}, e.out(0)).status();
}

// FastGelu is the tanh approximation of GELU (ORT: 0.5x(1 + tanh(0.7978845608(x + 0.044715x^3)))
// = ONNX Gelu approximate="tanh"), of X + bias when a bias is given.
absl::Status ExpandFastGelu(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(1, 2, 1, 1));
  RETURN_IF_ERROR(e.FloatType(0, "X").status());
  ir::Value* x = e.in(0);
  if (e.in(1) != nullptr) {
    if (e.RankOf(1) > 1) return e.Invalid("bias must be 1-D (hidden size)");
    ASSIGN_OR_RETURN(x, e.Op(OpType::kAdd, "bias_add", {x, e.in(1)}));
  }
  return e.Op(OpType::kGelu, "Gelu", {x}, {{"approximate", Attribute::String("tanh")}}, e.out(0))
      .status();
}

absl::Status ExpandBiasGelu(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(2, 2, 1, 1));
  RETURN_IF_ERROR(e.FloatType(0, "A").status());
  if (e.RankOf(1) > 1) return e.Invalid("B (the bias) must be 1-D (hidden size)");
  ASSIGN_OR_RETURN(ir::Value * sum, e.Op(OpType::kAdd, "bias_add", {e.in(0), e.in(1)}));
  return e.Op(OpType::kGelu, "Gelu", {sum}, {}, e.out(0)).status();
}

absl::Status ExpandQuickGelu(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(1, 1, 1, 1));
  ASSIGN_OR_RETURN(DataType dt, e.FloatType(0, "X"));
  const float alpha = e.Float("alpha", 1.702f);
  ASSIGN_OR_RETURN(ir::Value * a, e.FloatConst("alpha", dt, alpha));
  ASSIGN_OR_RETURN(ir::Value * ax, e.Op(OpType::kMul, "alpha_mul", {e.in(0), a}));
  ASSIGN_OR_RETURN(ir::Value * s, e.Op(OpType::kSigmoid, "Sigmoid", {ax}));
  return e.Op(OpType::kMul, "Mul", {e.in(0), s}, {}, e.out(0)).status();
}

absl::Status ExpandBiasAdd(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(3, 3, 1, 1));
  RETURN_IF_ERROR(e.FloatType(0, "X").status());
  if (e.RankOf(0) >= 0 && e.RankOf(0) != 3) return e.Invalid("X must be 3-D (N, S, C)");
  if (e.RankOf(1) >= 0 && e.RankOf(1) != 1) return e.Invalid("bias must be 1-D (C)");
  ASSIGN_OR_RETURN(ir::Value * xb, e.Op(OpType::kAdd, "bias_add", {e.in(0), e.in(1)}));
  return e.Op(OpType::kAdd, "skip_add", {xb, e.in(2)}, {}, e.out(0)).status();
}

// input + skip (+ bias): ORT adds in that order, in the input's type.
absl::StatusOr<ir::Value*> SkipSum(Expansion& e, int bias_index, int sum_output) {
  if (e.RankOf(0) >= 0 && e.RankOf(0) != 3 && e.RankOf(0) != 2) {
    return e.Invalid("input must be 3-D (batch, sequence, hidden) or 2-D");
  }
  const bool has_bias = e.in(bias_index) != nullptr;
  ir::Value* out = has_bias ? nullptr : e.out(sum_output);
  ASSIGN_OR_RETURN(ir::Value * s, e.Op(OpType::kAdd, "skip_add", {e.in(0), e.in(1)}, {}, out));
  if (!has_bias) return s;
  if (e.RankOf(bias_index) >= 0 && e.RankOf(bias_index) != 1) {
    return e.Invalid("bias must be 1-D (hidden size)");
  }
  return e.Op(OpType::kAdd, "bias_add", {s, e.in(bias_index)}, {}, e.out(sum_output));
}

absl::Status CheckNormParam(Expansion& e, int i, const char* what) {
  if (e.in(i) != nullptr && e.RankOf(i) >= 0 && e.RankOf(i) != 1) {
    return e.Invalid(absl::StrCat(what, " must be 1-D (hidden size)"));
  }
  return absl::OkStatus();
}

float Epsilon(Expansion& e, float dflt) { return e.Float("epsilon", dflt); }

// SkipLayerNormalization(input, skip, gamma, beta?, bias?) -> output, mean?, inv_std_var?,
// input_skip_bias_sum?. LayerNormalization over the last axis, statistics in fp32.
absl::Status ExpandSkipLayerNorm(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(3, 5, 1, 4));
  RETURN_IF_ERROR(e.FloatType(0, "input").status());
  RETURN_IF_ERROR(e.Required(1, "skip").status());
  RETURN_IF_ERROR(e.Required(2, "gamma").status());
  RETURN_IF_ERROR(CheckNormParam(e, 2, "gamma"));
  RETURN_IF_ERROR(CheckNormParam(e, 3, "beta"));
  ASSIGN_OR_RETURN(ir::Value * s, SkipSum(e, 4, 3));
  std::vector<ir::Value*> ins = {s, e.in(2)};
  if (e.in(3) != nullptr) ins.push_back(e.in(3));
  return e
      .Node(OpType::kLayerNormalization, "LayerNormalization", ins, {e.out(0), e.out(1), e.out(2)},
            {{"axis", Attribute::Int(-1)},
             {"epsilon", Attribute::Float(Epsilon(e, 1e-12f))},
             {"stash_type", Attribute::Int(1)}})
      .status();
}

// 1 / sqrt(mean(x^2) + epsilon) over the last axis, kept (..., 1): the inv_std_var output of the
// simplified norms, which RMSNormalization does not give.
absl::Status InvStdDev(Expansion& e, ir::Value* x, DataType dt, float epsilon, ir::Value* out) {
  ASSIGN_OR_RETURN(ir::Value * sq, e.Op(OpType::kMul, "square", {x, x}));
  ASSIGN_OR_RETURN(ir::Value * axes, e.I64s("axes", {-1}));
  ASSIGN_OR_RETURN(ir::Value * ms, e.Op(OpType::kReduceMean, "mean_square", {sq, axes},
                                        {{"keepdims", Attribute::Int(1)}}));
  ASSIGN_OR_RETURN(ir::Value * eps, e.FloatConst("epsilon", dt, epsilon));
  ASSIGN_OR_RETURN(ir::Value * var, e.Op(OpType::kAdd, "add_epsilon", {ms, eps}));
  ASSIGN_OR_RETURN(ir::Value * sd, e.Op(OpType::kSqrt, "sqrt", {var}));
  return e.Op(OpType::kReciprocal, "inv_std_var", {sd}, {}, out).status();
}

// SkipSimplifiedLayerNormalization(input, skip, gamma, bias?) -> output, mean? (unused by ORT),
// inv_std_var?, input_skip_bias_sum?.
absl::Status ExpandSkipSimplifiedLayerNorm(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(3, 4, 1, 4));
  ASSIGN_OR_RETURN(DataType dt, e.FloatType(0, "input"));
  RETURN_IF_ERROR(e.Required(1, "skip").status());
  RETURN_IF_ERROR(e.Required(2, "gamma").status());
  RETURN_IF_ERROR(CheckNormParam(e, 2, "gamma"));
  if (e.out(1) != nullptr) {
    return e.Unsupported("output 1 (mean) is not computed by RMS normalization; omit it");
  }
  ASSIGN_OR_RETURN(ir::Value * s, SkipSum(e, 3, 3));
  const float eps = Epsilon(e, 1e-12f);
  RETURN_IF_ERROR(e.Node(OpType::kRMSNormalization, "RMSNormalization", {s, e.in(2)}, {e.out(0)},
                         {{"axis", Attribute::Int(-1)},
                          {"epsilon", Attribute::Float(eps)},
                          {"stash_type", Attribute::Int(1)}})
                      .status());
  if (e.out(2) != nullptr) RETURN_IF_ERROR(InvStdDev(e, s, dt, eps, e.out(2)));
  return absl::OkStatus();
}

// SimplifiedLayerNormalization(X, scale; axis, epsilon, stash_type) -> Y, inv_std_var?.
absl::Status ExpandSimplifiedLayerNorm(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(2, 2, 1, 2));
  ASSIGN_OR_RETURN(DataType dt, e.FloatType(0, "X"));
  const int64_t axis = e.Int("axis", -1);
  const float eps = Epsilon(e, 1e-5f);
  RETURN_IF_ERROR(e.Node(OpType::kRMSNormalization, "RMSNormalization", {e.in(0), e.in(1)},
                         {e.out(0)},
                         {{"axis", Attribute::Int(axis)},
                          {"epsilon", Attribute::Float(eps)},
                          {"stash_type", Attribute::Int(e.Int("stash_type", 1))}})
                      .status());
  if (e.out(1) != nullptr) {
    if (axis != -1 && !(e.RankOf(0) > 0 && axis == e.RankOf(0) - 1)) {
      return e.Unsupported("output 1 (inv_std_var) over more than the last axis");
    }
    RETURN_IF_ERROR(InvStdDev(e, e.in(0), dt, eps, e.out(1)));
  }
  return absl::OkStatus();
}

int RankOfValue(const ir::Value* v) {
  if (v == nullptr) return -1;
  if (v->constant) return v->constant->rank();
  return v->shape.rank_known ? v->shape.rank() : -1;
}

// The inputs of EmbedLayerNormalization, float tables (QEmbedLayerNormalization's dequantized).
struct EmbedInputs {
  ir::Value *ids, *seg, *word, *pos, *segemb, *gamma, *beta, *mask, *pos_ids;
};

// output = LayerNorm(word[ids] + position[pos] + segment[seg]); pos = position_ids when given,
// else 0..S-1; mask_index[b] = the number of 1s in mask[b] (0 without a mask), as ORT's kernel.
absl::Status EmbedCore(Expansion& e, const EmbedInputs& in, ir::Value* out, ir::Value* mask_out,
                       ir::Value* sum_out) {
  if (RankOfValue(in.ids) >= 0 && RankOfValue(in.ids) != 2) {
    return e.Invalid("input_ids must be 2-D (batch, sequence)");
  }
  for (const ir::Value* t : {in.word, in.pos, in.segemb}) {
    if (t != nullptr && RankOfValue(t) >= 0 && RankOfValue(t) != 2) {
      return e.Invalid(absl::StrCat("embedding table '", t->name, "' must be 2-D"));
    }
  }
  if ((in.seg == nullptr) != (in.segemb == nullptr)) {
    return e.Invalid("segment_ids and segment_embedding must be given together");
  }
  const Attrs axis0 = {{"axis", Attribute::Int(0)}};
  ASSIGN_OR_RETURN(ir::Value * word,
                   e.Op(OpType::kGather, "word_gather", {in.word, in.ids}, axis0));
  ir::Value* pos_ids = in.pos_ids;
  if (pos_ids == nullptr) {
    ASSIGN_OR_RETURN(ir::Value * shape,
                     e.Op(OpType::kShape, "ids_shape", {in.ids},
                          {{"start", Attribute::Int(1)}, {"end", Attribute::Int(2)}}));
    ASSIGN_OR_RETURN(ir::Value * zero, e.I64s("zero", {0}));
    ASSIGN_OR_RETURN(ir::Value * one, e.I64s("one", {1}));
    ASSIGN_OR_RETURN(ir::Value * s0, e.Op(OpType::kSqueeze, "seq_len", {shape, zero}));
    ASSIGN_OR_RETURN(ir::Value * z0, e.Op(OpType::kSqueeze, "range_start", {zero, zero}));
    ASSIGN_OR_RETURN(ir::Value * o0, e.Op(OpType::kSqueeze, "range_step", {one, zero}));
    ASSIGN_OR_RETURN(pos_ids, e.Op(OpType::kRange, "position_ids", {z0, s0, o0}));
  }
  ASSIGN_OR_RETURN(ir::Value * pos,
                   e.Op(OpType::kGather, "position_gather", {in.pos, pos_ids}, axis0));
  ASSIGN_OR_RETURN(ir::Value * sum, e.Op(OpType::kAdd, "position_add", {word, pos}, {},
                                         in.seg == nullptr ? sum_out : nullptr));
  if (in.seg != nullptr) {
    ASSIGN_OR_RETURN(ir::Value * seg,
                     e.Op(OpType::kGather, "segment_gather", {in.segemb, in.seg}, axis0));
    ASSIGN_OR_RETURN(sum, e.Op(OpType::kAdd, "segment_add", {sum, seg}, {}, sum_out));
  }
  RETURN_IF_ERROR(e.Node(OpType::kLayerNormalization, "LayerNormalization",
                         {sum, in.gamma, in.beta}, {out},
                         {{"axis", Attribute::Int(-1)},
                          {"epsilon", Attribute::Float(Epsilon(e, 1e-12f))},
                          {"stash_type", Attribute::Int(1)}})
                      .status());
  if (mask_out == nullptr) return absl::OkStatus();
  if (in.mask != nullptr) {
    ASSIGN_OR_RETURN(ir::Value * m64,
                     e.Op(OpType::kCast, "mask_int64", {in.mask}, {{"to", Attribute::Int(7)}}));
    ASSIGN_OR_RETURN(ir::Tensor one_t, ir::Tensor::Allocate(DataType::kI64, {}));
    one_t.data<int64_t>()[0] = 1;
    ASSIGN_OR_RETURN(ir::Value * one, e.Const("mask_one", std::move(one_t)));
    ASSIGN_OR_RETURN(ir::Value * ones, e.Op(OpType::kEqual, "mask_is_one", {m64, one}));
    ASSIGN_OR_RETURN(ir::Value * ones_i, e.Op(OpType::kCast, "mask_count_input", {ones},
                                              {{"to", Attribute::Int(6)}}));  // int32
    ASSIGN_OR_RETURN(ir::Value * axes, e.I64s("mask_axes", {1}));
    return e
        .Op(OpType::kReduceSum, "mask_index", {ones_i, axes}, {{"keepdims", Attribute::Int(0)}},
            mask_out)
        .status();
  }
  // No mask: ORT's mask_index is zeros of shape (batch).
  ASSIGN_OR_RETURN(ir::Value * bshape,
                   e.Op(OpType::kShape, "batch_shape", {in.ids},
                        {{"start", Attribute::Int(0)}, {"end", Attribute::Int(1)}}));
  Attribute zero;
  zero.type = Attribute::Type::kTensor;
  ASSIGN_OR_RETURN(zero.t, ir::Tensor::Allocate(DataType::kI32, {1}));
  return e.Op(OpType::kConstantOfShape, "mask_index", {bshape}, {{"value", zero}}, mask_out)
      .status();
}

// EmbedLayerNormalization(input_ids, segment_ids?, word_embedding, position_embedding,
// segment_embedding?, gamma, beta, mask?, position_ids?) -> output, mask_index, embedding_sum?.
absl::Status ExpandEmbedLayerNorm(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(7, 9, 1, 3));
  RETURN_IF_ERROR(e.Required(0, "input_ids").status());
  RETURN_IF_ERROR(e.FloatType(2, "word_embedding").status());
  RETURN_IF_ERROR(e.Required(3, "position_embedding").status());
  RETURN_IF_ERROR(e.Required(5, "gamma").status());
  RETURN_IF_ERROR(e.Required(6, "beta").status());
  EmbedInputs in{e.in(0), e.in(1), e.in(2), e.in(3), e.in(4), e.in(5), e.in(6), e.in(7), e.in(8)};
  return EmbedCore(e, in, e.out(0), e.out(1), e.out(2));
}

// QEmbedLayerNormalization(input_ids, segment_ids?, word_q, position_q, segment_q?, gamma_q,
// beta_q, mask?, 5 scales, 5 zero points) -> layernorm_out, mask_index_out: the tables
// dequantized (DequantizeLinear of constants: folded at build), then as EmbedLayerNormalization.
absl::Status ExpandQEmbedLayerNorm(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(18, 18, 1, 2));
  RETURN_IF_ERROR(e.Required(0, "input_ids").status());
  const char* names[] = {"word_embedding", "position_embedding", "segment_embedding", "gamma",
                         "beta"};
  ir::Value* f[5] = {};
  for (int t = 0; t < 5; ++t) {
    const int q = t < 3 ? 2 + t : 5 + (t - 3);
    if (e.in(q) == nullptr) {
      if (t == 2) continue;  // no segment embedding
      return e.Invalid(absl::StrCat("input ", q, " (", names[t], "_quant) is required"));
    }
    ASSIGN_OR_RETURN(ir::Value * s, e.Required(8 + t, absl::StrCat(names[t], "_scale")));
    ASSIGN_OR_RETURN(ir::Value * z, e.Required(13 + t, absl::StrCat(names[t], "_zero_point")));
    ASSIGN_OR_RETURN(f[t], e.Op(OpType::kDequantizeLinear, absl::StrCat(names[t], "_dequantize"),
                                {e.in(q), s, z}));
  }
  EmbedInputs in{e.in(0), e.in(1), f[0], f[1], f[2], f[3], f[4], e.in(7), nullptr};
  return EmbedCore(e, in, e.out(0), e.out(1), nullptr);
}

// LayerNormalization of the default domain before opset 17: ONNX Runtime's contrib op (same
// inputs, outputs and attributes as the ONNX op of opset 17).
absl::Status ExpandLegacyLayerNorm(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(2, 3, 1, 3));
  RETURN_IF_ERROR(e.FloatType(0, "X").status());
  return e
      .Node(OpType::kLayerNormalization, "LayerNormalization", {e.in(0), e.in(1), e.in(2)},
            {e.out(0), e.out(1), e.out(2)},
            {{"axis", Attribute::Int(e.Int("axis", -1))},
             {"epsilon", Attribute::Float(Epsilon(e, 1e-5f))},
             {"stash_type", Attribute::Int(e.Int("stash_type", 1))}})
      .status();
}

// The activation of FusedConv (`activation`, `activation_params`) applied to `x`.
absl::Status FusedActivation(Expansion& e, ir::Value* x, ir::Value* out) {
  const std::string act = e.Str("activation", "");
  std::vector<float> p;
  if (e.Has("activation_params")) p = e.attrs().at("activation_params").floats;
  auto param = [&](size_t i, float dflt) { return i < p.size() ? p[i] : dflt; };
  if (act.empty() || act == "Identity") {
    return e.Op(OpType::kIdentity, "Identity", {x}, {}, out).status();
  }
  if (act == "Relu") return e.Op(OpType::kRelu, "Relu", {x}, {}, out).status();
  if (act == "Tanh") return e.Op(OpType::kTanh, "Tanh", {x}, {}, out).status();
  if (act == "Sigmoid") return e.Op(OpType::kSigmoid, "Sigmoid", {x}, {}, out).status();
  if (act == "LeakyRelu") {
    return e
        .Op(OpType::kLeakyRelu, "LeakyRelu", {x}, {{"alpha", Attribute::Float(param(0, 0.01f))}},
            out)
        .status();
  }
  if (act == "HardSigmoid") {
    return e
        .Op(OpType::kHardSigmoid, "HardSigmoid", {x},
            {{"alpha", Attribute::Float(param(0, 0.2f))},
             {"beta", Attribute::Float(param(1, 0.5f))}},
            out)
        .status();
  }
  if (act == "Clip") {
    if (p.size() != 2) return e.Invalid("activation Clip needs activation_params {min, max}");
    ASSIGN_OR_RETURN(DataType dt, e.FloatType(0, "X"));
    ASSIGN_OR_RETURN(ir::Value * lo, e.FloatConst("clip_min", dt, p[0]));
    ASSIGN_OR_RETURN(ir::Value * hi, e.FloatConst("clip_max", dt, p[1]));
    return e.Op(OpType::kClip, "Clip", {x, lo, hi}, {}, out).status();
  }
  return e.Unsupported(absl::StrCat("activation '", act, "'"));
}

// FusedConv(X, W, B?, Z?; Conv's attributes, activation, activation_params):
// activation(Conv(X, W, B) + Z).
absl::Status ExpandFusedConv(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(2, 4, 1, 1));
  RETURN_IF_ERROR(e.FloatType(0, "X").status());
  Attrs attrs;
  for (const char* k : {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}) {
    if (e.Has(k)) attrs.emplace_back(k, e.attrs().at(k));
  }
  ASSIGN_OR_RETURN(ir::Value * y, e.Op(OpType::kConv, "Conv", {e.in(0), e.in(1), e.in(2)}, attrs));
  if (e.in(3) != nullptr) {
    ASSIGN_OR_RETURN(y, e.Op(OpType::kAdd, "Z_add", {y, e.in(3)}));
  }
  return FusedActivation(e, y, e.out(0));
}

}  // namespace

void AddNormActivationExpanders(ExpanderTable& t) {
  t["Gelu"] = ExpandGelu;
  t["FastGelu"] = ExpandFastGelu;
  t["BiasGelu"] = ExpandBiasGelu;
  t["QuickGelu"] = ExpandQuickGelu;
  t["BiasAdd"] = ExpandBiasAdd;
  t["SkipLayerNormalization"] = ExpandSkipLayerNorm;
  t["SkipSimplifiedLayerNormalization"] = ExpandSkipSimplifiedLayerNorm;
  t["SimplifiedLayerNormalization"] = ExpandSimplifiedLayerNorm;
  t["EmbedLayerNormalization"] = ExpandEmbedLayerNorm;
  t["QEmbedLayerNormalization"] = ExpandQEmbedLayerNorm;
  t["LayerNormalization"] = ExpandLegacyLayerNorm;
  t["FusedConv"] = ExpandFusedConv;
}

}  // namespace kiln::import::contrib
