// The driver of Kiln's type and shape inference (shape_inference.h), the output dtypes of the
// ops (OutputType) and the switch over ops giving output shapes; the larger op families'
// shapes, the shared helpers and the build-time checks are in the files
// shape_inference_internal.h lists.
#include "engine/import/shape_inference.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/import/shape_inference_control_flow.h"
#include "engine/import/shape_inference_domains.h"
#include "engine/import/shape_inference_internal.h"
#include "engine/import/shape_inference_recurrent.h"
#include "engine/import/shape_inference_sequence.h"
#include "engine/import/shape_inference_signal.h"
#include "engine/import/shape_inference_stateful.h"

namespace kiln::import {
namespace {

using ir::Dim;
using ir::Node;
using ir::OpType;
using ir::Shape;
using ir::Value;
using shape_internal::Broadcast;
using shape_internal::CheckStaticOperands;
using shape_internal::ConcatShape;
using shape_internal::ConstInts;
using shape_internal::ConvShape;
using shape_internal::ConvTransposeShape;
using shape_internal::CountOf;
using shape_internal::ExpandShape;
using shape_internal::FlattenShape;
using shape_internal::GatherShape;
using shape_internal::GemmShape;
using shape_internal::GlobalPoolShape;
using shape_internal::In;
using shape_internal::InType;
using shape_internal::MatMulShape;
using shape_internal::PoolShape;
using shape_internal::RankOnly;
using shape_internal::ReduceShape;
using shape_internal::ReshapeShape;
using shape_internal::ResizeShape;
using shape_internal::SameShape;
using shape_internal::SliceShape;
using shape_internal::SqueezeShape;
using shape_internal::TooLarge;
using shape_internal::TransposeShape;

// The dtype attribute `attr` of `n` names (Cast's and BitCast's `to`, EyeLike's `dtype`, ...):
// Unimplemented naming the ONNX type when Kiln has no such type (float8, int4, string, ...).
absl::StatusOr<DataType> AttrDataType(const Node& n, const char* attr, int64_t fallback) {
  const int64_t v = n.GetInt(attr, fallback);
  const DataType t = v < INT32_MIN || v > INT32_MAX ? DataType::kUndefined
                                                    : DataTypeFromOnnx(static_cast<int32_t>(v));
  if (t == DataType::kUndefined || t == DataType::kString) {
    const std::string name = v < INT32_MIN || v > INT32_MAX
                                 ? absl::StrCat("number ", v)
                                 : OnnxDataTypeName(static_cast<int32_t>(v));
    return absl::UnimplementedError(
        absl::StrCat(n.Label(), " unsupported dtype ", name, ": attribute '", attr, "' = ", v));
  }
  return t;
}

// BitCast: `to` is a type Kiln has, of the input's element size (ONNX requires equal widths;
// the shape stays).
absl::StatusOr<DataType> BitCastType(const Node& n) {
  if (!n.has_attr("to")) {
    return absl::InvalidArgumentError(absl::StrCat(n.Label(), " requires attribute 'to'"));
  }
  ASSIGN_OR_RETURN(DataType to, AttrDataType(n, "to", 0));
  const DataType from = InType(n, 0);
  if (from == DataType::kString) {
    return absl::UnimplementedError(absl::StrCat(n.Label(), " unsupported dtype string"));
  }
  if (from != DataType::kUndefined && DataTypeBits(from) != DataTypeBits(to)) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.Label(), " cannot reinterpret ", DataTypeOnnxName(from), " (",
                     DataTypeBits(from), " bits) as ", DataTypeOnnxName(to), " (", DataTypeBits(to),
                     " bits): BitCast requires the same bit width"));
  }
  return to;
}

// Output dtype of output `k` of node `n`.
absl::StatusOr<DataType> OutputType(const Node& n, int k) {
  if (IsSignalOp(n.op)) return SignalOutputType(n, k);  // shape_inference_signal.h
  DataType t0 = InType(n, 0);
  ASSIGN_OR_RETURN(std::optional<DataType> domain_type, DomainOpOutputType(n, k));
  if (domain_type) return *domain_type;  // shape_inference_domains.h
  switch (n.op) {
    case OpType::kEqual:
    case OpType::kGreater:
    case OpType::kGreaterOrEqual:
    case OpType::kLess:
    case OpType::kLessOrEqual:
    case OpType::kAnd:
    case OpType::kOr:
    case OpType::kXor:
    case OpType::kNot:
    case OpType::kIsInf:
    case OpType::kIsNaN:
      return DataType::kBool;
    case OpType::kShape:
    case OpType::kSize:
    case OpType::kArgMax:
    case OpType::kArgMin:
    case OpType::kNonZero:
      return DataType::kI64;
    case OpType::kTopK:
    case OpType::kMaxPool:
      return k == 1 ? DataType::kI64 : t0;
    case OpType::kDropout:  // the mask is T before opset 10, bool from 10
      return k == 1 && n.since_version >= 10 ? DataType::kBool : t0;
    case OpType::kLayerNormalization:
      return k == 0 ? t0 : DataType::kF32;  // Mean/InvStdDev follow stash_type (float)
    case OpType::kCast:
      return AttrDataType(n, "to", 0);
    case OpType::kBitCast:
      return BitCastType(n);
    case OpType::kCastLike:
      return InType(n, 1);
    case OpType::kConstant: {
      const ir::Attribute* a = n.attr("value");
      if (a && a->type == ir::Attribute::Type::kTensor) return a->t.dtype();
      if (n.has_attr("value_float") || n.has_attr("value_floats")) return DataType::kF32;
      if (n.has_attr("value_int") || n.has_attr("value_ints")) return DataType::kI64;
      if (n.has_attr("value_string") || n.has_attr("value_strings")) {
        return absl::UnimplementedError(absl::StrCat(n.Label(), " unsupported dtype string"));
      }
      return absl::InvalidArgumentError(absl::StrCat(n.Label(), " has no value attribute"));
    }
    case OpType::kConstantOfShape: {
      const ir::Attribute* a = n.attr("value");
      return a && a->type == ir::Attribute::Type::kTensor ? a->t.dtype() : DataType::kF32;
    }
    case OpType::kEyeLike: {
      if (n.has_attr("dtype")) return AttrDataType(n, "dtype", 1);
      return t0;
    }
    case OpType::kQuantizeLinear: {
      if (n.input(2)) return InType(n, 2);
      if (n.has_attr("output_dtype") && n.GetInt("output_dtype", 0) != 0) {
        return AttrDataType(n, "output_dtype", 0);
      }
      return DataType::kU8;
    }
    case OpType::kDequantizeLinear:  // output_dtype (opset 23), else x_scale's dtype
      if (n.since_version >= 23 && n.GetInt("output_dtype", 0) != 0) {
        return AttrDataType(n, "output_dtype", 0);
      }
      return n.since_version >= 19 ? InType(n, 1) : DataType::kF32;
    case OpType::kWhere:
      return InType(n, 1);
    case OpType::kDynamicQuantizeLinear:  // y and y_zero_point are uint8, y_scale float
      return k == 1 ? DataType::kF32 : DataType::kU8;
    case OpType::kMatMulInteger:
    case OpType::kConvInteger:
      return DataType::kI32;
    case OpType::kConvIntegerToFloat:  // float(acc + B) * scale (engine/ir/ops.def)
    case OpType::kMatMulIntegerToFloat:
      return DataType::kF32;
    case OpType::kQLinearMatMul:  // y has y_zero_point's dtype (input 7, required)
    case OpType::kQLinearConv:
      return InType(n, 7);
    case OpType::kOneHot:
      return InType(n, 2);
    case OpType::kLSTM:  // checks the node too (shape_inference_recurrent.h)
    case OpType::kLSTMQuantizedR:
    case OpType::kGRU:
    case OpType::kRNN:
      return RecurrentOutputType(n, k);
    case OpType::kLinearAttention:  // checks the node too (shape_inference_stateful.h)
    case OpType::kCausalConvWithState:
    case OpType::kRotaryEmbedding:
      return StatefulOutputType(n, k);
    case OpType::kSequenceEmpty:
      return AttrDataType(n, "dtype", static_cast<int64_t>(DataType::kF32));
    case OpType::kSequenceLength:
      return DataType::kI64;
    case OpType::kOptionalHasElement:
      return DataType::kBool;
    case OpType::kOptional: {
      if (n.input(0)) return t0;
      const std::vector<int64_t> type = n.GetInts("type");  // {ValueKind, dtype} (import)
      if (type.size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat(n.Label(), " has neither an input nor a 'type' attribute"));
      }
      return static_cast<DataType>(type[1]);
    }
    case OpType::kSequenceConstruct:
    case OpType::kSequenceInsert:
      // Every element has the sequence's element type.
      for (int i = 1; i < n.num_inputs() && (n.op == OpType::kSequenceConstruct || i < 2); ++i) {
        if (InType(n, i) != t0) {
          return absl::InvalidArgumentError(
              absl::StrCat(n.Label(), " input ", i, " is ", DataTypeOnnxName(InType(n, i)),
                           " but the sequence holds ", DataTypeOnnxName(t0)));
        }
      }
      return t0;
    default:
      return t0;
  }
}

Shape InferShape(const Node& n, int k) {
  if (IsSignalOp(n.op)) return SignalOutputShape(n, k);
  const Value* x = In(n, 0);
  if (std::optional<Shape> s = DomainOpShape(n, k)) return *s;  // shape_inference_domains.h
  switch (n.op) {
    // Same shape as input 0.
    case OpType::kAbs:
    case OpType::kAcos:
    case OpType::kAcosh:
    case OpType::kAsin:
    case OpType::kAsinh:
    case OpType::kAtan:
    case OpType::kAtanh:
    case OpType::kCeil:
    case OpType::kCos:
    case OpType::kCosh:
    case OpType::kErf:
    case OpType::kExp:
    case OpType::kFloor:
    case OpType::kLog:
    case OpType::kNeg:
    case OpType::kReciprocal:
    case OpType::kRound:
    case OpType::kSign:
    case OpType::kSin:
    case OpType::kSinh:
    case OpType::kSqrt:
    case OpType::kTan:
    case OpType::kTanh:
    case OpType::kNot:
    case OpType::kIsInf:
    case OpType::kIsNaN:
    case OpType::kRelu:
    case OpType::kLeakyRelu:
    case OpType::kElu:
    case OpType::kSelu:
    case OpType::kCelu:
    case OpType::kSigmoid:
    case OpType::kHardSigmoid:
    case OpType::kHardSwish:
    case OpType::kSoftplus:
    case OpType::kSoftsign:
    case OpType::kMish:
    case OpType::kGelu:
    case OpType::kThresholdedRelu:
    case OpType::kShrink:
    case OpType::kClip:
    case OpType::kCast:
    case OpType::kCastLike:
    case OpType::kBitCast:
    case OpType::kTensorScatter:
    case OpType::kIdentity:
    case OpType::kSoftmax:
    case OpType::kLogSoftmax:
    case OpType::kHardmax:
    case OpType::kCumSum:
    case OpType::kCumProd:
    case OpType::kSwish:
    case OpType::kLpNormalization:
    case OpType::kInstanceNormalization:
    case OpType::kGroupNormalization:
    case OpType::kRMSNormalization:
    case OpType::kTrilu:
    case OpType::kQuantizeLinear:
    case OpType::kDequantizeLinear:
    case OpType::kEyeLike:
    case OpType::kScatterElements:
    case OpType::kScatterND:
    case OpType::kPRelu:
    case OpType::kLRN:
      return k == 0 ? SameShape(n, 0) : Shape::Unknown();
    case OpType::kDropout:
    case OpType::kBatchNormalization:
      return k == 0 || n.op == OpType::kDropout ? SameShape(n, 0) : Shape::Unknown();
    case OpType::kDynamicQuantizeLinear:  // y as x; y_scale and y_zero_point are scalars
      return k == 0 ? SameShape(n, 0) : Shape::Of(std::vector<int64_t>{});
    case OpType::kLayerNormalization:
      return k == 0 ? SameShape(n, 0) : Shape::Unknown();
    case OpType::kAddLayerNorm:  // normalised sum and the sum itself
      return SameShape(n, 0);
    case OpType::kAdd:
    case OpType::kSub:
    case OpType::kMul:
    case OpType::kDiv:
    case OpType::kPow:
    case OpType::kMod:
    case OpType::kAnd:
    case OpType::kOr:
    case OpType::kXor:
    case OpType::kEqual:
    case OpType::kGreater:
    case OpType::kGreaterOrEqual:
    case OpType::kLess:
    case OpType::kLessOrEqual:
    case OpType::kMax:
    case OpType::kMin:
    case OpType::kMean:
    case OpType::kSum:
    case OpType::kWhere: {
      std::vector<const Shape*> shapes;
      for (const Value* v : n.inputs) {
        if (!v) return Shape::Unknown();
        shapes.push_back(&v->shape);
      }
      return Broadcast(shapes);
    }
    case OpType::kShape: {
      if (!x || !x->shape.rank_known) return RankOnly(1);
      int r = x->shape.rank();
      int64_t start = n.GetInt("start", 0), end = n.GetInt("end", r);
      start = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r);
      end = std::clamp<int64_t>(end < 0 ? end + r : end, 0, r);
      return Shape::Of({std::max<int64_t>(0, end - start)});
    }
    case OpType::kSize:
      return Shape::Of({});
    case OpType::kConstant: {
      const ir::Attribute* a = n.attr("value");
      if (a && a->type == ir::Attribute::Type::kTensor) return Shape::Of(a->t.dims());
      if (n.has_attr("value_float") || n.has_attr("value_int")) return Shape::Of({});
      if (const ir::Attribute* b = n.attr("value_floats")) {
        return Shape::Of({static_cast<int64_t>(b->floats.size())});
      }
      if (const ir::Attribute* b = n.attr("value_ints")) {
        return Shape::Of({static_cast<int64_t>(b->ints.size())});
      }
      return Shape::Unknown();
    }
    case OpType::kConstantOfShape: {
      auto dims = ConstInts(n, 0);
      return dims ? Shape::Of(*dims) : Shape::Unknown();
    }
    case OpType::kResize:
    case OpType::kUpsample:
      return ResizeShape(n, k);
    case OpType::kSlice:
      return SliceShape(n, k);
    case OpType::kExpand:
      return ExpandShape(n, k);
    case OpType::kReshape:
      return ReshapeShape(n, k);
    case OpType::kFlatten:
      return FlattenShape(n, k);
    case OpType::kTranspose:
      return TransposeShape(n, k);
    case OpType::kSqueeze:
    case OpType::kUnsqueeze:
      return SqueezeShape(n, k);
    case OpType::kConcat:
      return ConcatShape(n, k);
    case OpType::kGather:
      return GatherShape(n, k);
    case OpType::kFusedMatMul:
    case OpType::kMatMulInteger:
    case OpType::kMatMulIntegerToFloat:
    case OpType::kQLinearMatMul:
    case OpType::kMatMul:
      return MatMulShape(n, k);
    case OpType::kGemm:
      return GemmShape(n, k);
    case OpType::kFusedConv:
    case OpType::kConvInteger:
    case OpType::kConvIntegerToFloat:
    case OpType::kQLinearConv:
    case OpType::kConv:
      return ConvShape(n, k);
    case OpType::kConvTranspose:
      if (!x) return Shape::Unknown();
      return ConvTransposeShape(n, x->shape, In(n, 1));
    case OpType::kMaxPool:
    case OpType::kAveragePool:
      return PoolShape(n, k);
    case OpType::kGlobalAveragePool:
    case OpType::kGlobalMaxPool:
      return GlobalPoolShape(n, k);
    case OpType::kReduceL1:
    case OpType::kReduceL2:
    case OpType::kReduceLogSum:
    case OpType::kReduceLogSumExp:
    case OpType::kReduceMax:
    case OpType::kReduceMean:
    case OpType::kReduceMin:
    case OpType::kReduceProd:
    case OpType::kReduceSum:
    case OpType::kReduceSumSquare:
    case OpType::kArgMax:
    case OpType::kArgMin:
      return ReduceShape(n, k);
    case OpType::kLSTM:
    case OpType::kLSTMQuantizedR:
    case OpType::kGRU:
    case OpType::kRNN:
      return RecurrentOutputShape(n, k);
    case OpType::kLinearAttention:
    case OpType::kCausalConvWithState:
    case OpType::kRotaryEmbedding:
      return StatefulOutputShape(n, k);
    // Sequences: the shape of a sequence value is its elements' (where they agree).
    case OpType::kSequenceLength:
    case OpType::kOptionalHasElement:
      return Shape::Of({});
    case OpType::kSequenceAt:
    case OpType::kSequenceErase:
    case OpType::kOptionalGetElement:
    case OpType::kOptional:
      return x ? x->shape : Shape::Unknown();
    case OpType::kSequenceConstruct:
    case OpType::kSequenceInsert: {
      if (!x || !x->shape.rank_known) return Shape::Unknown();
      Shape s = x->shape;
      const int last = n.op == OpType::kSequenceInsert ? 2 : n.num_inputs();
      for (int i = 1; i < last && i < n.num_inputs(); ++i) {
        const Value* e = In(n, i);
        if (!e || !e->shape.rank_known || e->shape.rank() != s.rank()) return Shape::Unknown();
        for (int d = 0; d < s.rank(); ++d) {
          if (!(s.dims[d] == e->shape.dims[d])) s.dims[d] = Dim{};
        }
      }
      return s;
    }
    default:
      return Shape::Unknown();
  }
}

}  // namespace

absl::Status InferTypesAndShapes(ir::Graph& graph, const std::vector<ir::Node*>& order) {
  for (const Value* v : graph.inputs()) {
    if (!v->shape.is_static()) continue;
    const std::string too_large = TooLarge(CountOf(v->shape.StaticDims()), v->dtype);
    if (!too_large.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("graph input '", v->name, "' of shape ",
                                                     v->shape.ToString(), " holds ", too_large));
    }
  }
  for (Node* n : order) {
    RETURN_IF_ERROR(InferFlexAttentionModifiers(*n));  // its subgraphs, if any
    if (IsControlFlow(n->op)) {
      RETURN_IF_ERROR(InferControlFlow(*n));  // the subgraphs, then the outputs
      continue;
    }
    RETURN_IF_ERROR(CheckInputKinds(*n));
    for (int k = 0; k < n->num_outputs(); ++k) {
      Value* out = n->outputs[k];
      if (!out) continue;
      RETURN_IF_ERROR(SetOutputKind(*n, k, OutputKind(*n, k)));
      ASSIGN_OR_RETURN(DataType t, OutputType(*n, k));
      if (t == DataType::kUndefined) {
        return absl::InvalidArgumentError(absl::StrCat(n->Label(), " output ", k, " '", out->name,
                                                       "': dtype cannot be inferred (input ",
                                                       "dtype unknown)"));
      }
      if (out->dtype != DataType::kUndefined && out->dtype != t) {
        return absl::InvalidArgumentError(absl::StrCat(
            n->Label(), " output ", k, " '", out->name, "' is declared ",
            DataTypeOnnxName(out->dtype), " but the op produces ", DataTypeOnnxName(t)));
      }
      out->dtype = t;
      if (k == 0) RETURN_IF_ERROR(CheckStaticOperands(*n, t));
      Shape s = InferShape(*n, k);
      if (s.rank_known || !out->shape.rank_known) out->shape = std::move(s);
      if (out->shape.is_static()) {
        const std::string too_large = TooLarge(CountOf(out->shape.StaticDims()), t);
        if (!too_large.empty()) {
          return absl::InvalidArgumentError(absl::StrCat(n->Label(), " output ", k, " '", out->name,
                                                         "' of shape ", out->shape.ToString(),
                                                         " holds ", too_large));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::import
