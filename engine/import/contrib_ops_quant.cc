// Expanders of the com.microsoft quantized ops (contrib_ops.h), as ONNX Runtime's quantization
// tool writes them (QOperator format, dynamic quantization, MatMulNBits weight-only):
//   QLinearAdd/Mul/Sigmoid/LeakyRelu/Softmax/Concat/Where/AveragePool/GlobalAveragePool/
//   ReduceMean           -> DequantizeLinear per input + the float op + QuantizeLinear. ORT
//                           computes these in float the same way; QLinearSigmoid/LeakyRelu/
//                           Softmax and QLinearConcat (scales differing) read 256-entry lookup
//                           tables built with the same float formula, and QLinearGlobalAveragePool
//                           sums integers and scales once: an element within float rounding of a
//                           .5 tie may land one quantum apart.
//   QGemm                -> [Transpose] + MatMulInteger [+ C] + Cast + Mul(alpha*a_scale*b_scale)
//                           [+ QuantizeLinear]
//   MatMulIntegerToFloat -> MatMulInteger + Cast + Mul(a_scale*b_scale) [+ bias]
//   DynamicQuantizeMatMul-> DynamicQuantizeLinear + the same
//   MatMulNBits          -> the 2/4/8-bit blocked weight dequantized to a float constant (K, N)
//                           at import + MatMul [+ bias]
//   DynamicQuantizeLSTM  -> W dequantized (and transposed to ONNX's layout) at import +
//                           LSTMQuantizedR (engine/ir/ops.def): an LSTM whose R stays int8/uint8
//                           (transposed), with one scale and zero point per row, so that the
//                           time loop reads a quarter of fp32 R's bytes; its R is
//                           (q - zero_point) * scale, the fp32 weight the model defines. ORT
//                           quantizes X and H to uint8 at every step instead: its gates differ
//                           by that activation rounding.
//   QuantizeLinear/DequantizeLinear (com.microsoft) -> the ONNX ops.
#include <cmath>
#include <string>
#include <vector>

#include "engine/common/half.h"
#include "engine/common/status.h"
#include "engine/import/contrib_ops_internal.h"

namespace kiln::import::contrib {
namespace {

using ir::Attribute;
using ir::OpType;

absl::StatusOr<ir::Value*> Dq(Expansion& e, ir::Value* x, ir::Value* scale, ir::Value* zp,
                              const std::string& part) {
  std::vector<ir::Value*> ins = {x, scale};
  if (zp != nullptr) ins.push_back(zp);
  return e.Op(OpType::kDequantizeLinear, part, ins);
}

// QuantizeLinear into `out` with the quantized dtype of `like` (the op's type T): a missing zero
// point becomes a zero of that dtype (ONNX's default would be uint8).
absl::Status Q(Expansion& e, ir::Value* y, ir::Value* scale, ir::Value* zp, const ir::Value* like,
               ir::Value* out) {
  if (zp == nullptr) {
    if (like->dtype != DataType::kU8 && like->dtype != DataType::kI8) {
      return e.Invalid(absl::StrCat("quantized input '", like->name,
                                    "' must be uint8 or int8 (dtype ",
                                    DataTypeOnnxName(like->dtype), ")"));
    }
    ASSIGN_OR_RETURN(ir::Tensor t, ir::Tensor::Allocate(like->dtype, {}));
    ASSIGN_OR_RETURN(zp, e.Const("output_zero_point", std::move(t)));
  }
  return e.Op(OpType::kQuantizeLinear, "QuantizeLinear", {y, scale, zp}, {}, out).status();
}

// QLinearAdd / QLinearMul(A, A_scale, A_zp?, B, B_scale, B_zp?, C_scale, C_zp?).
absl::Status ExpandQLinearBinary(Expansion& e, OpType op) {
  RETURN_IF_ERROR(e.Arity(7, 8, 1, 1));
  ASSIGN_OR_RETURN(ir::Value * a, e.Required(0, "A"));
  ASSIGN_OR_RETURN(ir::Value * b, e.Required(3, "B"));
  ASSIGN_OR_RETURN(ir::Value * a_s, e.Required(1, "A_scale"));
  ASSIGN_OR_RETURN(ir::Value * b_s, e.Required(4, "B_scale"));
  ASSIGN_OR_RETURN(ir::Value * c_s, e.Required(6, "C_scale"));
  ASSIGN_OR_RETURN(ir::Value * fa, Dq(e, a, a_s, e.in(2), "dequantize_A"));
  ASSIGN_OR_RETURN(ir::Value * fb, Dq(e, b, b_s, e.in(5), "dequantize_B"));
  ASSIGN_OR_RETURN(ir::Value * y, e.Op(op, ir::OpName(op), {fa, fb}));
  return Q(e, y, c_s, e.in(7), a, e.out(0));
}

// X, X_scale, X_zp?, Y_scale, Y_zp? around one float unary op.
absl::Status ExpandQLinearUnary(Expansion& e, OpType op,
                                std::vector<std::pair<std::string, Attribute>> attrs) {
  RETURN_IF_ERROR(e.Arity(4, 5, 1, 1));
  ASSIGN_OR_RETURN(ir::Value * x, e.Required(0, "X"));
  ASSIGN_OR_RETURN(ir::Value * x_s, e.Required(1, "X_scale"));
  ASSIGN_OR_RETURN(ir::Value * y_s, e.Required(3, "Y_scale"));
  ASSIGN_OR_RETURN(ir::Value * fx, Dq(e, x, x_s, e.in(2), "dequantize_X"));
  ASSIGN_OR_RETURN(ir::Value * y, e.Op(op, ir::OpName(op), {fx}, std::move(attrs)));
  return Q(e, y, y_s, e.in(4), x, e.out(0));
}

// QLinearSoftmax(X, X_scale, x_zp?, y_scale, y_zp; axis, opset): `opset` < 13 is Softmax-1/11's
// 2-D coercion at `axis` (Flatten + Softmax over the last axis + Reshape back).
absl::Status ExpandQLinearSoftmax(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(4, 5, 1, 1));
  const int64_t opset = e.Int("opset", 0);
  if (!e.Has("opset")) return e.Invalid("attribute 'opset' is required");
  ASSIGN_OR_RETURN(ir::Value * x, e.Required(0, "X"));
  ASSIGN_OR_RETURN(ir::Value * fx, Dq(e, x, e.in(1), e.in(2), "dequantize_X"));
  ir::Value* y;
  if (opset >= 13) {
    ASSIGN_OR_RETURN(
        y, e.Op(OpType::kSoftmax, "Softmax", {fx}, {{"axis", Attribute::Int(e.Int("axis", -1))}}));
  } else {
    ASSIGN_OR_RETURN(ir::Value * flat, e.Op(OpType::kFlatten, "Flatten", {fx},
                                            {{"axis", Attribute::Int(e.Int("axis", 1))}}));
    ASSIGN_OR_RETURN(ir::Value * sm,
                     e.Op(OpType::kSoftmax, "Softmax", {flat}, {{"axis", Attribute::Int(-1)}}));
    ASSIGN_OR_RETURN(ir::Value * shape, e.Op(OpType::kShape, "shape", {fx}));
    ASSIGN_OR_RETURN(y, e.Op(OpType::kReshape, "Reshape", {sm, shape}));
  }
  ASSIGN_OR_RETURN(ir::Value * y_s, e.Required(3, "y_scale"));
  return Q(e, y, y_s, e.in(4), x, e.out(0));
}

// QLinearConcat(Y_scale, Y_zp, X1, X1_scale, X1_zp, ...; axis).
absl::Status ExpandQLinearConcat(Expansion& e) {
  if (e.num_inputs() < 5 || (e.num_inputs() - 2) % 3 != 0) {
    return e.Invalid(absl::StrCat("has ", e.num_inputs(),
                                  " inputs; QLinearConcat takes Y_scale, Y_zero_point and a "
                                  "(X, X_scale, X_zero_point) triple per input"));
  }
  RETURN_IF_ERROR(e.Arity(5, 1 << 20, 1, 1));
  if (!e.Has("axis")) return e.Invalid("attribute 'axis' is required");
  std::vector<ir::Value*> parts;
  for (int i = 2; i < e.num_inputs(); i += 3) {
    ASSIGN_OR_RETURN(ir::Value * x, e.Required(i, "X"));
    ASSIGN_OR_RETURN(ir::Value * s, e.Required(i + 1, "X_scale"));
    ASSIGN_OR_RETURN(ir::Value * f, Dq(e, x, s, e.in(i + 2), absl::StrCat("dequantize_X", i / 3)));
    parts.push_back(f);
  }
  ASSIGN_OR_RETURN(ir::Value * y, e.Op(OpType::kConcat, "Concat", parts,
                                       {{"axis", Attribute::Int(e.Int("axis", 0))}}));
  ASSIGN_OR_RETURN(ir::Value * y_s, e.Required(0, "Y_scale"));
  return Q(e, y, y_s, e.in(1), e.in(2), e.out(0));
}

// QLinearWhere(condition, X, x_scale, x_zp, Y, y_scale, y_zp, z_scale, z_zp).
absl::Status ExpandQLinearWhere(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(9, 9, 1, 1));
  ASSIGN_OR_RETURN(ir::Value * c, e.Required(0, "condition"));
  ASSIGN_OR_RETURN(ir::Value * x, e.Required(1, "X"));
  ASSIGN_OR_RETURN(ir::Value * y, e.Required(4, "Y"));
  ASSIGN_OR_RETURN(ir::Value * fx, Dq(e, x, e.in(2), e.in(3), "dequantize_X"));
  ASSIGN_OR_RETURN(ir::Value * fy, Dq(e, y, e.in(5), e.in(6), "dequantize_Y"));
  ASSIGN_OR_RETURN(ir::Value * z, e.Op(OpType::kWhere, "Where", {c, fx, fy}));
  ASSIGN_OR_RETURN(ir::Value * z_s, e.Required(7, "z_scale"));
  return Q(e, z, z_s, e.in(8), x, e.out(0));
}

// The permutation moving channels from the last axis to axis 1 (`to_first`) or back.
std::vector<int64_t> ChannelsPerm(int rank, bool to_first) {
  std::vector<int64_t> p;
  if (to_first) {
    p = {0, rank - 1};
    for (int i = 1; i < rank - 1; ++i) p.push_back(i);
  } else {
    p = {0};
    for (int i = 2; i < rank; ++i) p.push_back(i);
    p.push_back(1);
  }
  return p;
}

// QLinearAveragePool(X, x_scale, x_zp?, y_scale, y_zp?; AveragePool's attributes, channels_last).
absl::Status ExpandQLinearAveragePool(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(4, 5, 1, 1));
  ASSIGN_OR_RETURN(ir::Value * x, e.Required(0, "X"));
  const std::vector<int64_t> kernel = e.Ints("kernel_shape");
  if (kernel.empty()) return e.Invalid("attribute 'kernel_shape' is required");
  const int rank = static_cast<int>(kernel.size()) + 2;
  if (e.RankOf(0) >= 0 && e.RankOf(0) != rank) {
    return e.Invalid(
        absl::StrCat("X has rank ", e.RankOf(0), " but kernel_shape has ", kernel.size(), " dims"));
  }
  const bool channels_last = e.Int("channels_last", 0) != 0;
  ASSIGN_OR_RETURN(ir::Value * fx, Dq(e, x, e.in(1), e.in(2), "dequantize_X"));
  if (channels_last) {
    ASSIGN_OR_RETURN(fx, e.Op(OpType::kTranspose, "to_channels_first", {fx},
                              {{"perm", Attribute::Ints(ChannelsPerm(rank, true))}}));
  }
  std::vector<std::pair<std::string, Attribute>> attrs;
  for (const char* k : {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads",
                        "strides", "dilations"}) {
    if (e.Has(k)) attrs.emplace_back(k, e.attrs().at(k));
  }
  ASSIGN_OR_RETURN(ir::Value * y, e.Op(OpType::kAveragePool, "AveragePool", {fx}, attrs));
  if (channels_last) {
    ASSIGN_OR_RETURN(y, e.Op(OpType::kTranspose, "to_channels_last", {y},
                             {{"perm", Attribute::Ints(ChannelsPerm(rank, false))}}));
  }
  ASSIGN_OR_RETURN(ir::Value * y_s, e.Required(3, "y_scale"));
  return Q(e, y, y_s, e.in(4), x, e.out(0));
}

// QLinearGlobalAveragePool(X, x_scale, x_zp, y_scale, y_zp; channels_last).
absl::Status ExpandQLinearGlobalAveragePool(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(4, 5, 1, 1));
  ASSIGN_OR_RETURN(ir::Value * x, e.Required(0, "X"));
  ASSIGN_OR_RETURN(ir::Value * fx, Dq(e, x, e.in(1), e.in(2), "dequantize_X"));
  ir::Value* y;
  if (e.Int("channels_last", 0) != 0) {
    const int rank = e.RankOf(0);
    if (rank < 3) {
      return e.Unsupported(
          "channels_last=1 needs X's rank (>= 3), which shape inference does "
          "not give");
    }
    std::vector<int64_t> axes;
    for (int i = 1; i < rank - 1; ++i) axes.push_back(i);
    ASSIGN_OR_RETURN(ir::Value * ax, e.I64s("axes", axes));
    ASSIGN_OR_RETURN(
        y, e.Op(OpType::kReduceMean, "ReduceMean", {fx, ax}, {{"keepdims", Attribute::Int(1)}}));
  } else {
    ASSIGN_OR_RETURN(y, e.Op(OpType::kGlobalAveragePool, "GlobalAveragePool", {fx}));
  }
  ASSIGN_OR_RETURN(ir::Value * y_s, e.Required(3, "y_scale"));
  return Q(e, y, y_s, e.in(4), x, e.out(0));
}

// QLinearReduceMean(data, data_scale, data_zp?, reduced_scale, reduced_zp?; axes, keepdims).
absl::Status ExpandQLinearReduceMean(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(4, 5, 1, 1));
  ASSIGN_OR_RETURN(ir::Value * x, e.Required(0, "data"));
  if (!e.Has("axes")) return e.Invalid("attribute 'axes' is required");
  if (!e.Has("keepdims")) return e.Invalid("attribute 'keepdims' is required");
  ASSIGN_OR_RETURN(ir::Value * fx, Dq(e, x, e.in(1), e.in(2), "dequantize_data"));
  ASSIGN_OR_RETURN(ir::Value * ax, e.I64s("axes", e.Ints("axes")));
  ASSIGN_OR_RETURN(ir::Value * y, e.Op(OpType::kReduceMean, "ReduceMean", {fx, ax},
                                       {{"keepdims", Attribute::Int(e.Int("keepdims", 1))}}));
  ASSIGN_OR_RETURN(ir::Value * y_s, e.Required(3, "reduced_scale"));
  return Q(e, y, y_s, e.in(4), x, e.out(0));
}

// acc (int32) -> float * scale [+ bias] into `out`.
absl::Status ScaleToFloat(Expansion& e, ir::Value* acc, ir::Value* scale, ir::Value* bias,
                          DataType dt, ir::Value* out) {
  ASSIGN_OR_RETURN(ir::Value * f, e.Op(OpType::kCast, "Cast", {acc},
                                       {{"to", Attribute::Int(static_cast<int64_t>(dt))}}));
  ASSIGN_OR_RETURN(ir::Value * y,
                   e.Op(OpType::kMul, "scale_mul", {f, scale}, {}, bias ? nullptr : out));
  if (bias == nullptr) return absl::OkStatus();
  return e.Op(OpType::kAdd, "bias_add", {y, bias}, {}, out).status();
}

// MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp?, b_zp?, bias?).
absl::Status ExpandMatMulIntegerToFloat(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(4, 7, 1, 1));
  ASSIGN_OR_RETURN(ir::Value * a, e.Required(0, "A"));
  ASSIGN_OR_RETURN(ir::Value * b, e.Required(1, "B"));
  ASSIGN_OR_RETURN(DataType dt, e.FloatType(2, "a_scale"));
  RETURN_IF_ERROR(e.Required(3, "b_scale").status());
  std::vector<ir::Value*> ins = {a, b, e.in(4), e.in(5)};
  ASSIGN_OR_RETURN(ir::Value * acc, e.Op(OpType::kMatMulInteger, "MatMulInteger", ins));
  ASSIGN_OR_RETURN(ir::Value * scale, e.Op(OpType::kMul, "scales", {e.in(2), e.in(3)}));
  return ScaleToFloat(e, acc, scale, e.in(6), dt, e.out(0));
}

// DynamicQuantizeMatMul(A, B, b_scale, b_zp?, bias?): A quantized to uint8 per tensor.
absl::Status ExpandDynamicQuantizeMatMul(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(3, 5, 1, 1));
  ASSIGN_OR_RETURN(DataType dt, e.FloatType(0, "A"));
  ASSIGN_OR_RETURN(ir::Value * b, e.Required(1, "B"));
  RETURN_IF_ERROR(e.Required(2, "b_scale").status());
  ASSIGN_OR_RETURN(ir::Value * aq, e.Temp("A_quantized"));
  ASSIGN_OR_RETURN(ir::Value * as, e.Temp("A_scale"));
  ASSIGN_OR_RETURN(ir::Value * az, e.Temp("A_zero_point"));
  RETURN_IF_ERROR(
      e.Node(OpType::kDynamicQuantizeLinear, "DynamicQuantizeLinear", {e.in(0)}, {aq, as, az})
          .status());
  ASSIGN_OR_RETURN(ir::Value * acc,
                   e.Op(OpType::kMatMulInteger, "MatMulInteger", {aq, b, az, e.in(3)}));
  ASSIGN_OR_RETURN(ir::Value * scale, e.Op(OpType::kMul, "scales", {as, e.in(2)}));
  return ScaleToFloat(e, acc, scale, e.in(4), dt, e.out(0));
}

// QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?; alpha, transA, transB):
// (A - a_zp)(B - b_zp) + C in int32, times alpha * a_scale * b_scale; quantized with y_scale /
// y_zp when given, else float.
absl::Status ExpandQGemm(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(6, 9, 1, 1));
  ASSIGN_OR_RETURN(ir::Value * a, e.Required(0, "A"));
  ASSIGN_OR_RETURN(ir::Value * b, e.Required(3, "B"));
  ASSIGN_OR_RETURN(DataType dt, e.FloatType(1, "a_scale"));
  RETURN_IF_ERROR(e.Required(2, "a_zero_point").status());
  RETURN_IF_ERROR(e.Required(4, "b_scale").status());
  RETURN_IF_ERROR(e.Required(5, "b_zero_point").status());
  if (e.RankOf(0) >= 0 && e.RankOf(0) != 2) return e.Invalid("A must be 2-D");
  if (e.RankOf(3) >= 0 && e.RankOf(3) != 2) return e.Invalid("B must be 2-D");
  if ((e.in(7) == nullptr) != (e.in(8) == nullptr) && e.in(7) == nullptr) {
    return e.Invalid("y_zero_point is given without y_scale");
  }
  const std::vector<std::pair<std::string, Attribute>> swap = {{"perm", Attribute::Ints({1, 0})}};
  if (e.Int("transA", 0) != 0) {
    ASSIGN_OR_RETURN(a, e.Op(OpType::kTranspose, "transpose_A", {a}, swap));
  }
  if (e.Int("transB", 0) != 0) {
    ASSIGN_OR_RETURN(b, e.Op(OpType::kTranspose, "transpose_B", {b}, swap));
  }
  ASSIGN_OR_RETURN(ir::Value * acc,
                   e.Op(OpType::kMatMulInteger, "MatMulInteger", {a, b, e.in(2), e.in(5)}));
  if (e.in(6) != nullptr) {
    ASSIGN_OR_RETURN(acc, e.Op(OpType::kAdd, "C_add", {acc, e.in(6)}));
  }
  ASSIGN_OR_RETURN(ir::Value * scale, e.Op(OpType::kMul, "scales", {e.in(1), e.in(4)}));
  const float alpha = e.Float("alpha", 1.0f);
  if (alpha != 1.0f) {
    ASSIGN_OR_RETURN(ir::Value * al, e.FloatConst("alpha", dt, alpha));
    ASSIGN_OR_RETURN(scale, e.Op(OpType::kMul, "alpha_mul", {scale, al}));
  }
  if (e.in(7) == nullptr) return ScaleToFloat(e, acc, scale, nullptr, dt, e.out(0));
  ASSIGN_OR_RETURN(ir::Value * y, e.Temp("float_output"));
  RETURN_IF_ERROR(ScaleToFloat(e, acc, scale, nullptr, dt, y));
  return Q(e, y, e.in(7), e.in(8), e.in(0), e.out(0));
}

// Element `idx` of a packed array of `bits`-bit unsigned values, least significant bits first.
int PackedAt(const uint8_t* p, int64_t idx, int bits) {
  const int64_t bit = idx * bits;
  return (p[bit / 8] >> (bit % 8)) & ((1 << bits) - 1);
}

// MatMulNBits(A, B, scales, zero_points?, g_idx?, bias?; K, N, bits, block_size).
absl::Status ExpandMatMulNBits(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(3, 6, 1, 1));
  ASSIGN_OR_RETURN(DataType dt, e.FloatType(0, "A"));
  const int64_t K = e.Int("K", -1), N = e.Int("N", -1), bits = e.Int("bits", 4);
  const int64_t block = e.Int("block_size", -1);
  if (K <= 0 || N <= 0) return e.Invalid("attributes K and N must be given and positive");
  if (bits != 2 && bits != 4 && bits != 8) {
    return e.Unsupported(absl::StrCat("bits=", bits, " (Kiln expands 2, 4 and 8)"));
  }
  if (block < 16 || (block & (block - 1)) != 0) {
    return e.Invalid(absl::StrCat("block_size must be a power of 2 and >= 16, got ", block));
  }
  if (e.in(4) != nullptr) return e.Unsupported("input 4 (g_idx)");
  const int64_t k_blocks = (K + block - 1) / block;
  const int64_t blob = block * bits / 8;
  ASSIGN_OR_RETURN(const ir::Tensor* B, e.ConstantInput(1, "B"));
  ASSIGN_OR_RETURN(const ir::Tensor* S, e.ConstantInput(2, "scales"));
  if (B->dtype() != DataType::kU8 || B->num_elements() != N * k_blocks * blob) {
    return e.Invalid(absl::StrCat("B must be uint8 of shape (N, k_blocks, blob_size) = (", N, ", ",
                                  k_blocks, ", ", blob, "); got ", DataTypeOnnxName(B->dtype()),
                                  " with ", B->num_elements(), " elements"));
  }
  if (S->dtype() != dt || S->num_elements() != N * k_blocks) {
    return e.Invalid(absl::StrCat("scales must be ", DataTypeOnnxName(dt),
                                  " with N * k_blocks = ", N * k_blocks, " elements"));
  }
  const ir::Tensor* Z = nullptr;
  if (e.in(3) != nullptr) {
    ASSIGN_OR_RETURN(Z, e.ConstantInput(3, "zero_points"));
    const int64_t packed = N * ((k_blocks * bits + 7) / 8);
    const bool ok = (Z->dtype() == DataType::kU8 && Z->num_elements() == packed) ||
                    (Z->dtype() == dt && Z->num_elements() == N * k_blocks);
    if (!ok) {
      return e.Invalid(absl::StrCat("zero_points must be uint8 with ", packed,
                                    " elements (packed) or ", DataTypeOnnxName(dt), " with ",
                                    N * k_blocks));
    }
  }
  const uint8_t* bq = B->data<uint8_t>();
  const int64_t zp_row = (k_blocks * bits + 7) / 8;
  std::vector<float> w(static_cast<size_t>(K * N));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      const float scale = static_cast<float>(ir::ElementAsDouble(*S, n * k_blocks + kb));
      float zp = static_cast<float>(1 << (bits - 1));
      if (Z != nullptr && Z->dtype() == DataType::kU8) {
        zp = static_cast<float>(PackedAt(Z->data<uint8_t>() + n * zp_row, kb, bits));
      } else if (Z != nullptr) {
        zp = static_cast<float>(ir::ElementAsDouble(*Z, n * k_blocks + kb));
      }
      const uint8_t* blk = bq + (n * k_blocks + kb) * blob;
      for (int64_t j = 0; j < block && kb * block + j < K; ++j) {
        const float q = static_cast<float>(PackedAt(blk, j, bits));
        w[(kb * block + j) * N + n] = (q - zp) * scale;
      }
    }
  }
  ASSIGN_OR_RETURN(ir::Tensor wt, FloatTensor(dt, {K, N}, w));
  ASSIGN_OR_RETURN(ir::Value * wv, e.Const("weight_dequantized", std::move(wt)));
  const bool bias = e.in(5) != nullptr;
  ASSIGN_OR_RETURN(ir::Value * y,
                   e.Op(OpType::kMatMul, "MatMul", {e.in(0), wv}, {}, bias ? nullptr : e.out(0)));
  if (!bias) return absl::OkStatus();
  return e.Op(OpType::kAdd, "bias_add", {y, e.in(5)}, {}, e.out(0)).status();
}

// (D, rows, 4H) int8/uint8 with per-direction or per-column scale / zero point ->
// float (D, 4H, rows): ONNX LSTM's layout.
absl::StatusOr<ir::Value*> DequantizeLstmWeight(Expansion& e, int wi, int si, int zi,
                                                const char* what) {
  ASSIGN_OR_RETURN(const ir::Tensor* W, e.ConstantInput(wi, what));
  ASSIGN_OR_RETURN(const ir::Tensor* S, e.ConstantInput(si, absl::StrCat(what, "_scale")));
  ASSIGN_OR_RETURN(const ir::Tensor* Z, e.ConstantInput(zi, absl::StrCat(what, "_zero_point")));
  if (W->rank() != 3 || (W->dtype() != DataType::kI8 && W->dtype() != DataType::kU8)) {
    return e.Invalid(absl::StrCat(what, " must be int8/uint8 of rank 3 (D, rows, 4*hidden)"));
  }
  const int64_t D = W->dim(0), rows = W->dim(1), cols = W->dim(2);
  const bool per_col = S->num_elements() == D * cols;
  if (!(per_col || S->num_elements() == D) || Z->num_elements() != S->num_elements()) {
    return e.Invalid(absl::StrCat(what, "_scale and ", what, "_zero_point must have D = ", D,
                                  " or D * 4*hidden = ", D * cols, " elements, the same count"));
  }
  std::vector<float> w(static_cast<size_t>(D * rows * cols));
  for (int64_t d = 0; d < D; ++d) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t si_ = per_col ? d * cols + c : d;
        const double q = ir::ElementAsDouble(*W, (d * rows + r) * cols + c);
        const float s = static_cast<float>(ir::ElementAsDouble(*S, si_));
        const float z = static_cast<float>(ir::ElementAsDouble(*Z, si_));
        w[(d * cols + c) * rows + r] = (static_cast<float>(q) - z) * s;
      }
    }
  }
  ASSIGN_OR_RETURN(ir::Tensor t, FloatTensor(DataType::kF32, {D, cols, rows}, w));
  return e.Const(absl::StrCat(what, "_dequantized"), std::move(t));
}

// R (D, hidden, 4H) int8/uint8 with per-direction or per-column scale / zero point -> R
// transposed to ONNX's (D, 4H, hidden), its scale as float and its zero point as R's dtype, both
// (D, 4H): one per row of the transposed R. Values are copied, never rounded.
struct QuantizedR {
  ir::Value* r = nullptr;
  ir::Value* scale = nullptr;
  ir::Value* zero_point = nullptr;
};
absl::StatusOr<QuantizedR> TransposeQuantizedR(Expansion& e) {
  ASSIGN_OR_RETURN(const ir::Tensor* R, e.ConstantInput(2, "R"));
  ASSIGN_OR_RETURN(const ir::Tensor* S, e.ConstantInput(10, "R_scale"));
  ASSIGN_OR_RETURN(const ir::Tensor* Z, e.ConstantInput(11, "R_zero_point"));
  const DataType rt = R->dtype();
  if (R->rank() != 3 || (rt != DataType::kI8 && rt != DataType::kU8)) {
    return e.Invalid("R must be int8/uint8 of rank 3 (D, hidden, 4*hidden)");
  }
  if (Z->dtype() != rt) {
    return e.Invalid(absl::StrCat("R_zero_point is ", DataTypeOnnxName(Z->dtype()),
                                  ", expected R's ", DataTypeOnnxName(rt)));
  }
  const int64_t D = R->dim(0), rows = R->dim(1), cols = R->dim(2);
  const bool per_col = S->num_elements() == D * cols;
  if (!(per_col || S->num_elements() == D) || Z->num_elements() != S->num_elements()) {
    return e.Invalid(absl::StrCat("R_scale and R_zero_point must have D = ", D,
                                  " or D * 4*hidden = ", D * cols, " elements, the same count"));
  }
  ASSIGN_OR_RETURN(ir::Tensor q, ir::Tensor::Allocate(rt, {D, cols, rows}));
  ASSIGN_OR_RETURN(ir::Tensor zp, ir::Tensor::Allocate(rt, {D, cols}));
  std::vector<float> scale(static_cast<size_t>(D * cols));
  const auto* src = static_cast<const uint8_t*>(R->raw_data());  // 1-byte elements, bits copied
  auto* dst = static_cast<uint8_t*>(q.raw_data());
  auto* zdst = static_cast<uint8_t*>(zp.raw_data());
  const auto* zsrc = static_cast<const uint8_t*>(Z->raw_data());
  for (int64_t d = 0; d < D; ++d) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t si = per_col ? d * cols + c : d;
      scale[d * cols + c] = static_cast<float>(ir::ElementAsDouble(*S, si));
      zdst[d * cols + c] = zsrc[si];
      for (int64_t r = 0; r < rows; ++r) {
        dst[(d * cols + c) * rows + r] = src[(d * rows + r) * cols + c];
      }
    }
  }
  QuantizedR out;
  ASSIGN_OR_RETURN(out.r, e.Const("R_quantized", std::move(q)));
  ASSIGN_OR_RETURN(ir::Tensor st, FloatTensor(DataType::kF32, {D, cols}, scale));
  ASSIGN_OR_RETURN(out.scale, e.Const("R_scale", std::move(st)));
  ASSIGN_OR_RETURN(out.zero_point, e.Const("R_zero_point", std::move(zp)));
  return out;
}

// DynamicQuantizeLSTM(X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?, W_scale,
// W_zero_point, R_scale, R_zero_point) -> Y?, Y_h?, Y_c?.
absl::Status ExpandDynamicQuantizeLSTM(Expansion& e) {
  RETURN_IF_ERROR(e.Arity(12, 12, 0, 3));
  ASSIGN_OR_RETURN(DataType dt, e.FloatType(0, "X"));
  if (dt != DataType::kF32) return e.Invalid("X must be float");
  ASSIGN_OR_RETURN(ir::Value * w, DequantizeLstmWeight(e, 1, 8, 9, "W"));
  ASSIGN_OR_RETURN(const QuantizedR r, TransposeQuantizedR(e));
  std::vector<std::pair<std::string, Attribute>> attrs;
  for (const char* k : {"activation_alpha", "activation_beta", "activations", "clip", "direction",
                        "hidden_size", "input_forget"}) {
    if (e.Has(k)) attrs.emplace_back(k, e.attrs().at(k));
  }
  std::vector<ir::Value*> ins = {e.in(0), w,       r.r,     e.in(3), e.in(4),
                                 e.in(5), e.in(6), e.in(7), r.scale, r.zero_point};
  // Made as an LSTM (its since_version gives the LSTM semantics the kernels read), then retyped:
  // the internal op has no ONNX version of its own.
  ASSIGN_OR_RETURN(ir::Node * n,
                   e.Node(OpType::kLSTM, "LSTM", ins, {e.out(0), e.out(1), e.out(2)}, attrs));
  n->op = OpType::kLSTMQuantizedR;
  return absl::OkStatus();
}

absl::Status ExpandQuantizeLinear(Expansion& e, OpType op) {
  RETURN_IF_ERROR(e.Arity(2, 3, 1, 1));
  std::vector<std::pair<std::string, Attribute>> attrs;
  if (e.Has("axis")) attrs.emplace_back("axis", e.attrs().at("axis"));
  return e.Op(op, ir::OpName(op), {e.in(0), e.in(1), e.in(2)}, attrs, e.out(0)).status();
}

}  // namespace

void AddQuantizedExpanders(ExpanderTable& t) {
  t["QLinearAdd"] = [](Expansion& e) { return ExpandQLinearBinary(e, OpType::kAdd); };
  t["QLinearMul"] = [](Expansion& e) { return ExpandQLinearBinary(e, OpType::kMul); };
  t["QLinearSigmoid"] = [](Expansion& e) { return ExpandQLinearUnary(e, OpType::kSigmoid, {}); };
  t["QLinearLeakyRelu"] = [](Expansion& e) {
    return ExpandQLinearUnary(e, OpType::kLeakyRelu,
                              {{"alpha", Attribute::Float(e.Float("alpha", 0.01f))}});
  };
  t["QLinearSoftmax"] = ExpandQLinearSoftmax;
  t["QLinearConcat"] = ExpandQLinearConcat;
  t["QLinearWhere"] = ExpandQLinearWhere;
  t["QLinearAveragePool"] = ExpandQLinearAveragePool;
  t["QLinearGlobalAveragePool"] = ExpandQLinearGlobalAveragePool;
  t["QLinearReduceMean"] = ExpandQLinearReduceMean;
  t["QGemm"] = ExpandQGemm;
  t["MatMulIntegerToFloat"] = ExpandMatMulIntegerToFloat;
  t["DynamicQuantizeMatMul"] = ExpandDynamicQuantizeMatMul;
  t["MatMulNBits"] = ExpandMatMulNBits;
  t["DynamicQuantizeLSTM"] = ExpandDynamicQuantizeLSTM;
  t["QuantizeLinear"] = [](Expansion& e) {
    return ExpandQuantizeLinear(e, OpType::kQuantizeLinear);
  };
  t["DequantizeLinear"] = [](Expansion& e) {
    return ExpandQuantizeLinear(e, OpType::kDequantizeLinear);
  };
}

}  // namespace kiln::import::contrib
