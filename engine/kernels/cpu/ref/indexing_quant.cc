// Reference kernels of the indexing family, part 3: QuantizeLinear and DequantizeLinear with
// per-tensor, per-axis and blocked (opset 21 block_size) granularity. Registered by
// RegisterIndexing (indexing.cc).
//
// Quantize: y = saturate(round_half_even(x / scale) + zero_point). Dequantize:
// y = (x - zero_point) * scale. fp16/bf16 inputs and scales compute in fp32 and each output is
// rounded once (DESIGN.md §5); int32 data computes in double so no integer is rounded before the
// arithmetic. The low-bit types (int4/uint4/int2/uint2 saturating like the wider integers; float8
// and float4e2m1 with `saturate`; a float8e8m0 scale) convert through engine/common/lowbit.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/common/lowbit.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {

void RegisterIndexingQuant(Registry& r);

namespace {

// How scale/zero-point elements map onto x: element (o, a, i) of x viewed as
// [outer, axis_dim, inner] uses scale element o * so + (a / block) * sa + i * si.
struct QuantLayout {
  int64_t outer = 1, axis_dim = 1, inner = 1;
  int64_t so = 0, sa = 0, si = 0, block = 1;
};

absl::StatusOr<QuantLayout> MakeLayout(const ir::Node& node, const ir::Tensor& x,
                                       const ir::Tensor& scale, const ir::Tensor* zp) {
  // A single scale and zero point may differ in rank ([] against [1]: exporters write both, and
  // ONNX Runtime reads them as per-tensor); anything else must match exactly.
  const bool both_single = zp != nullptr && zp->num_elements() == 1 && scale.num_elements() == 1 &&
                           zp->rank() <= 1 && scale.rank() <= 1;
  if (zp != nullptr && zp->dims() != scale.dims() && !both_single) {
    return InvalidNode(node, "zero point shape ", ir::DimsToString(zp->dims()),
                       " must equal scale shape ", ir::DimsToString(scale.dims()));
  }
  QuantLayout l;
  if (scale.num_elements() == 1) {  // per-tensor
    l.inner = x.num_elements();
    return l;
  }
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(node, node.GetInt("axis", 1), x.rank()));
  const std::vector<int64_t>& xd = x.dims();
  l.outer = Product(xd, 0, axis);
  l.axis_dim = xd[axis];
  l.inner = Product(xd, axis + 1, xd.size());
  const int64_t block = node.GetInt("block_size", 0);
  if (block <= 0) {  // per-axis
    if (scale.rank() != 1 || scale.dim(0) != xd[axis]) {
      return InvalidNode(node, "per-axis scale must be 1-D of length ", xd[axis], " (axis ", axis,
                         "), got shape ", ir::DimsToString(scale.dims()));
    }
    l.sa = 1;
    return l;
  }
  // Blocked: scale has x's shape except ceil(D / block) on the axis.
  std::vector<int64_t> want = xd;
  want[axis] = (xd[axis] + block - 1) / block;
  if (scale.dims() != want) {
    return InvalidNode(node, "blocked scale shape ", ir::DimsToString(scale.dims()), " must be ",
                       ir::DimsToString(want), " for block_size ", block, " on axis ", axis);
  }
  l.block = block;
  l.sa = l.inner;
  l.so = want[axis] * l.inner;
  l.si = 1;
  return l;
}

// Calls f(x_index, scale_index) for every element of x in memory order.
template <typename F>
void ForEachQuantElement(const QuantLayout& l, F&& f) {
  int64_t e = 0;
  for (int64_t o = 0; o < l.outer; ++o) {
    for (int64_t a = 0; a < l.axis_dim; ++a) {
      const int64_t s0 = o * l.so + (a / l.block) * l.sa;
      for (int64_t i = 0; i < l.inner; ++i, ++e) f(e, s0 + i * l.si);
    }
  }
}

// Reads a scale or zero-point tensor into the compute type C.
template <typename C>
std::vector<C> ReadAs(const ir::Tensor& t) {
  std::vector<C> v(t.num_elements());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<C>(ir::ElementAsDouble(t, i));
  return v;
}

// The quantized types of QuantizeLinear's y and DequantizeLinear's x (not int32, which only
// DequantizeLinear reads, and not float8e8m0, which is a scale type only).
bool IsQuantType(DataType t) {
  return t == DataType::kU8 || t == DataType::kI8 || t == DataType::kU16 || t == DataType::kI16 ||
         (IsLowBit(t) && t != DataType::kF8E8M0);
}

absl::Status CheckCommon(const ir::Node& node) {
  if (node.GetInt("block_size", 0) < 0) {
    return InvalidNode(node, "block_size must be >= 0, got ", node.GetInt("block_size", 0));
  }
  if (node.since_version < 21 && node.GetInt("block_size", 0) != 0) {
    return InvalidNode(node, "block_size is not defined before opset 21");
  }
  // The default axis (1) is ignored by per-tensor quantization, which also serves rank-1 x;
  // only an explicit axis is checked here. Run checks it whenever it is used.
  const ir::Value* x = node.input(0);
  if (node.has_attr("axis") && x != nullptr && x->shape.rank_known && x->shape.rank() > 0) {
    RETURN_IF_ERROR(NormalizeAxis(node, node.GetInt("axis", 1), x->shape.rank()).status());
  }
  return absl::OkStatus();
}

// ---- QuantizeLinear -------------------------------------------------------------------------

// The quantized dtype: y_zero_point's, else output_dtype (opset 21), else uint8.
absl::StatusOr<DataType> QuantOutputType(const ir::Node& node, DataType zero_point) {
  DataType attr = DataType::kUndefined;
  if (node.has_attr("output_dtype") && node.GetInt("output_dtype", 0) != 0) {
    if (node.since_version < 21) {
      return InvalidNode(node, "output_dtype is not defined before opset 21");
    }
    const int64_t v = node.GetInt("output_dtype", 0);
    attr = v < INT32_MIN || v > INT32_MAX ? DataType::kUndefined
                                          : DataTypeFromOnnx(static_cast<int32_t>(v));
    if (!IsQuantType(attr)) {
      return absl::UnimplementedError(absl::StrCat(
          node.Label(), " unsupported attribute output_dtype=", v,
          ": only uint8/int8/uint16/int16, the float8 types (not float8e8m0), float4e2m1, "
          "uint4/int4 and uint2/int2 are supported"));
    }
  }
  if (zero_point != DataType::kUndefined) {
    if (!IsQuantType(zero_point)) {
      return InvalidNode(node, "y_zero_point dtype ", DataTypeOnnxName(zero_point),
                         " is not a quantized type");
    }
    if (attr != DataType::kUndefined && attr != zero_point) {
      return InvalidNode(node, "output_dtype ", DataTypeOnnxName(attr),
                         " differs from y_zero_point dtype ", DataTypeOnnxName(zero_point));
    }
    return zero_point;
  }
  return attr != DataType::kUndefined ? attr : DataType::kU8;
}

// The `precision` attribute (opset 23): the type the division x / y_scale is rounded to.
// Without it the division follows the project rule (fp32 for fp16/bf16/fp32 data).
absl::StatusOr<DataType> QuantPrecision(const ir::Node& node) {
  if (!node.has_attr("precision") || node.GetInt("precision", 0) == 0) {
    return DataType::kUndefined;
  }
  if (node.since_version < 23) return InvalidNode(node, "precision is not defined before opset 23");
  DataType p = DataTypeFromOnnx(static_cast<int32_t>(node.GetInt("precision", 0)));
  if (!IsFloating(p)) {
    return InvalidNode(node, "precision must be a floating dtype, got ",
                       node.GetInt("precision", 0));
  }
  return p;
}

// The `saturate` attribute (opset 19, default 1): float8 outputs only.
absl::StatusOr<bool> QuantSaturate(const ir::Node& node) {
  const int64_t v = node.GetInt("saturate", 1);
  if (v != 0 && v != 1) return InvalidNode(node, "attribute saturate must be 0 or 1, got ", v);
  return v != 0;
}

absl::Status CheckQuantize(const ir::Node& node) {
  RETURN_IF_ERROR(CheckCommon(node));
  const ir::Value* zp = node.input(2);
  RETURN_IF_ERROR(QuantOutputType(node, zp ? zp->dtype : DataType::kUndefined).status());
  RETURN_IF_ERROR(QuantSaturate(node).status());
  return QuantPrecision(node).status();
}

// Rounds the quotient to the division precision requested by the `precision` attribute.
template <typename C>
C RoundToPrecision(C q, DataType precision) {
  switch (precision) {
    case DataType::kF16:
      return static_cast<C>(static_cast<float>(Float16(static_cast<float>(q))));
    case DataType::kBF16:
      return static_cast<C>(static_cast<float>(BFloat16(static_cast<float>(q))));
    case DataType::kF32:
      return static_cast<C>(static_cast<float>(q));
    default:
      return q;
  }
}

// Calls `f.template operator()<X, C>()` with X the storage type of x and C the division type
// (float, or double for int32 data or precision=double).
template <typename F>
absl::Status WithQuantizeTypes(DataType x, DataType precision, F&& f) {
  const bool wide = x == DataType::kI32 || precision == DataType::kF64;
  switch (x) {
    case DataType::kF32:
      wide ? f.template operator()<float, double>() : f.template operator()<float, float>();
      return absl::OkStatus();
    case DataType::kF16:
      wide ? f.template operator()<Float16, double>() : f.template operator()<Float16, float>();
      return absl::OkStatus();
    case DataType::kBF16:
      wide ? f.template operator()<BFloat16, double>() : f.template operator()<BFloat16, float>();
      return absl::OkStatus();
    case DataType::kI32:
      f.template operator()<int32_t, double>();
      return absl::OkStatus();
    default:
      return absl::UnimplementedError(
          absl::StrCat("unsupported QuantizeLinear input dtype ", DataTypeOnnxName(x)));
  }
}

// Q: quantized storage type (uint8/int8/uint16/int16).
template <typename X, typename Q, typename C>
void QuantizeImpl(const ir::Tensor& x, const ir::Tensor& scale, const ir::Tensor* zp,
                  const QuantLayout& l, DataType precision, ir::Tensor& y) {
  const std::vector<C> s = ReadAs<C>(scale);
  const std::vector<int64_t> z = zp ? ReadAs<int64_t>(*zp) : std::vector<int64_t>(s.size(), 0);
  const X* px = x.data<X>();
  Q* py = y.data<Q>();
  constexpr double lo = std::numeric_limits<Q>::min(), hi = std::numeric_limits<Q>::max();
  ForEachQuantElement(l, [&](int64_t e, int64_t si) {
    const C q = RoundToPrecision<C>(static_cast<C>(Load<X>(px[e])) / s[si], precision);
    // nearbyint rounds half to even in the default rounding mode; NaN quantizes to the zero
    // point (no integer represents it), infinities saturate.
    double v = std::isnan(q) ? 0.0 : static_cast<double>(std::nearbyint(q));
    v = std::min(std::max(v + static_cast<double>(z[si]), lo), hi);
    py[e] = static_cast<Q>(v);
  });
}

// The low-bit outputs (one element per byte). int4/uint4/int2/uint2 round half to even and
// saturate to their range like the wider integers; the float8 types and float4e2m1 encode
// x / y_scale + y_zero_point (the zero point's value, usually 0) rounding to nearest even, with
// `saturate` as lowbit.h describes (float4e2m1 always saturates).
template <typename X, typename C>
void QuantizeLowBitImpl(const ir::Tensor& x, const ir::Tensor& scale, const ir::Tensor* zp,
                        const QuantLayout& l, DataType precision, bool saturate, ir::Tensor& y) {
  const DataType qtype = y.dtype();
  const std::vector<C> s = ReadAs<C>(scale);
  const std::vector<double> z = zp ? ReadAs<double>(*zp) : std::vector<double>(s.size(), 0.0);
  const X* px = x.data<X>();
  uint8_t* py = y.data<uint8_t>();
  const auto [lo, hi] = LowBitIntRange(qtype);
  const bool integer = IsLowBitInteger(qtype);
  ForEachQuantElement(l, [&](int64_t e, int64_t si) {
    const C q = RoundToPrecision<C>(static_cast<C>(Load<X>(px[e])) / s[si], precision);
    if (integer) {
      double v = std::isnan(q) ? 0.0 : static_cast<double>(std::nearbyint(q));
      v = std::min(std::max(v + z[si], static_cast<double>(lo)), static_cast<double>(hi));
      py[e] = SaturateLowBitInt(qtype, static_cast<int64_t>(v));
    } else {
      py[e] = EncodeMiniFloat(qtype, static_cast<double>(q + static_cast<C>(z[si])), saturate);
    }
  });
}

absl::Status RunQuantize(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* scale, RequireInput(node, ctx, 1));
  const ir::Tensor* zp = ctx.input(2);
  if (!IsFloating(scale->dtype()) && scale->dtype() != DataType::kI32 &&
      scale->dtype() != DataType::kF8E8M0) {
    return InvalidNode(node, "y_scale dtype ", DataTypeOnnxName(scale->dtype()),
                       " is not float, float16, bfloat16, int32 or float8e8m0");
  }
  ASSIGN_OR_RETURN(DataType qtype, QuantOutputType(node, zp ? zp->dtype() : DataType::kUndefined));
  ASSIGN_OR_RETURN(DataType precision, QuantPrecision(node));
  ASSIGN_OR_RETURN(bool saturate, QuantSaturate(node));
  ASSIGN_OR_RETURN(QuantLayout l, MakeLayout(node, *x, *scale, zp));
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, qtype, x->dims()));
  auto to = [&]<typename Q>() {
    return WithQuantizeTypes(x->dtype(), precision, [&]<typename X, typename C>() {
      QuantizeImpl<X, Q, C>(*x, *scale, zp, l, precision, *y);
    });
  };
  switch (qtype) {
    case DataType::kU8:
      return to.template operator()<uint8_t>();
    case DataType::kI8:
      return to.template operator()<int8_t>();
    case DataType::kU16:
      return to.template operator()<uint16_t>();
    case DataType::kI16:
      return to.template operator()<int16_t>();
    default:
      if (!IsQuantType(qtype)) {
        return InvalidNode(node, "unsupported quantized dtype ", DataTypeOnnxName(qtype));
      }
      return WithQuantizeTypes(x->dtype(), precision, [&]<typename X, typename C>() {
        QuantizeLowBitImpl<X, C>(*x, *scale, zp, l, precision, saturate, *y);
      });
  }
}

// ---- DequantizeLinear -----------------------------------------------------------------------

// The output dtype: output_dtype (opset 23), else x_scale's (which must then be a float type:
// a float8e8m0 scale needs output_dtype).
absl::StatusOr<DataType> DequantOutputType(const ir::Node& node, DataType scale) {
  if (node.has_attr("output_dtype") && node.GetInt("output_dtype", 0) != 0) {
    if (node.since_version < 23) {
      return InvalidNode(node, "output_dtype is not defined before opset 23");
    }
    DataType t = DataTypeFromOnnx(static_cast<int32_t>(node.GetInt("output_dtype", 0)));
    if (t != DataType::kF32 && t != DataType::kF16 && t != DataType::kBF16) {
      return InvalidNode(node, "output_dtype must be float, float16 or bfloat16, got ",
                         node.GetInt("output_dtype", 0));
    }
    return t;
  }
  if (scale == DataType::kF8E8M0) {
    return InvalidNode(node,
                       "x_scale is float8e8m0, which cannot be the output type: output_dtype "
                       "(float, float16 or bfloat16) is required");
  }
  return scale;
}

absl::Status CheckDequantize(const ir::Node& node) {
  RETURN_IF_ERROR(CheckCommon(node));
  const ir::Value* x = node.input(0);
  const ir::Value* zp = node.input(2);
  if (x != nullptr && zp != nullptr && zp->dtype != DataType::kUndefined && zp->dtype != x->dtype) {
    return InvalidNode(node, "x_zero_point dtype ", DataTypeOnnxName(zp->dtype),
                       " differs from x dtype ", DataTypeOnnxName(x->dtype));
  }
  const ir::Value* scale = node.input(1);
  return DequantOutputType(node, scale ? scale->dtype : DataType::kUndefined).status();
}

// y[e] = diff(e, s) * scale[s] for every element, Y the output storage type and C the
// arithmetic type; diff(e, s) is x[e] - zero_point[s] as C.
template <typename Y, typename C, typename Diff>
void DequantizeLoop(const ir::Tensor& scale, const QuantLayout& l, ir::Tensor& y, Diff&& diff) {
  const std::vector<C> s = ReadAs<C>(scale);
  Y* py = y.data<Y>();
  ForEachQuantElement(l, [&](int64_t e, int64_t si) { py[e] = Store<Y>(diff(e, si) * s[si]); });
}

template <typename C, typename Diff>
absl::Status DequantizeTo(const ir::Tensor& scale, const QuantLayout& l, ir::Tensor& y,
                          Diff&& diff) {
  switch (y.dtype()) {
    case DataType::kF32:
      DequantizeLoop<float, C>(scale, l, y, diff);
      break;
    case DataType::kF16:
      DequantizeLoop<Float16, C>(scale, l, y, diff);
      break;
    case DataType::kBF16:
      DequantizeLoop<BFloat16, C>(scale, l, y, diff);
      break;
    default:
      return absl::UnimplementedError(
          absl::StrCat("unsupported DequantizeLinear output dtype ", DataTypeOnnxName(y.dtype())));
  }
  return absl::OkStatus();
}

template <typename X>
absl::Status DequantizeFrom(const ir::Tensor& x, const ir::Tensor& scale, const ir::Tensor* zp,
                            const QuantLayout& l, ir::Tensor& y) {
  // int32 data (accumulators) needs more than fp32's 24-bit mantissa before the multiply.
  using C = std::conditional_t<std::is_same_v<X, int32_t>, double, float>;
  const std::vector<int64_t> z =
      zp ? ReadAs<int64_t>(*zp)
         : std::vector<int64_t>(static_cast<size_t>(scale.num_elements()), 0);
  const X* px = x.data<X>();
  // The difference is exact in int64; it is converted to C once.
  return DequantizeTo<C>(scale, l, y, [&](int64_t e, int64_t si) {
    return static_cast<C>(static_cast<int64_t>(px[e]) - z[si]);
  });
}

// The low-bit inputs (one element per byte), decoded exactly: int4/uint4/int2/uint2 subtract the
// zero point in int64 like the wider integers; the float8 types and float4e2m1 subtract the zero
// point's value (usually 0) in double, so NaN and inf propagate.
absl::Status DequantizeLowBit(const ir::Tensor& x, const ir::Tensor& scale, const ir::Tensor* zp,
                              const QuantLayout& l, ir::Tensor& y) {
  const DataType xt = x.dtype();
  const uint8_t* px = x.data<uint8_t>();
  const size_t scales = static_cast<size_t>(scale.num_elements());
  if (IsLowBitInteger(xt)) {
    const std::vector<int64_t> z = zp ? ReadAs<int64_t>(*zp) : std::vector<int64_t>(scales, 0);
    return DequantizeTo<float>(scale, l, y, [&](int64_t e, int64_t si) {
      return static_cast<float>(static_cast<int64_t>(LowBitToDouble(xt, px[e])) - z[si]);
    });
  }
  const std::vector<double> z = zp ? ReadAs<double>(*zp) : std::vector<double>(scales, 0.0);
  return DequantizeTo<float>(scale, l, y, [&](int64_t e, int64_t si) {
    return static_cast<float>(LowBitToDouble(xt, px[e]) - z[si]);
  });
}

absl::Status RunDequantize(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* scale, RequireInput(node, ctx, 1));
  const ir::Tensor* zp = ctx.input(2);
  if (zp != nullptr && zp->dtype() != x->dtype()) {
    return InvalidNode(node, "x_zero_point dtype ", DataTypeOnnxName(zp->dtype()),
                       " differs from x dtype ", DataTypeOnnxName(x->dtype()));
  }
  if (scale->dtype() != DataType::kF32 && scale->dtype() != DataType::kF16 &&
      scale->dtype() != DataType::kBF16 && scale->dtype() != DataType::kF8E8M0) {
    return InvalidNode(node, "x_scale dtype ", DataTypeOnnxName(scale->dtype()),
                       " is not float, float16, bfloat16 or float8e8m0");
  }
  ASSIGN_OR_RETURN(DataType ytype, DequantOutputType(node, scale->dtype()));
  ASSIGN_OR_RETURN(QuantLayout l, MakeLayout(node, *x, *scale, zp));
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, ytype, x->dims()));
  switch (x->dtype()) {
    case DataType::kU8:
      return DequantizeFrom<uint8_t>(*x, *scale, zp, l, *y);
    case DataType::kI8:
      return DequantizeFrom<int8_t>(*x, *scale, zp, l, *y);
    case DataType::kU16:
      return DequantizeFrom<uint16_t>(*x, *scale, zp, l, *y);
    case DataType::kI16:
      return DequantizeFrom<int16_t>(*x, *scale, zp, l, *y);
    case DataType::kI32:
      return DequantizeFrom<int32_t>(*x, *scale, zp, l, *y);
    default:
      if (!IsQuantType(x->dtype())) {
        return InvalidNode(node, "unsupported quantized dtype ", DataTypeOnnxName(x->dtype()));
      }
      return DequantizeLowBit(*x, *scale, zp, l, *y);
  }
}

}  // namespace

void RegisterIndexingQuant(Registry& r) {
  // Keyed by x. int32 x is QuantizeLinear-21's T1; int16/uint16 data arrive with opset 21.
  r.AddRef(ir::OpType::kQuantizeLinear,
           {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kI32},
           CheckedFactory<CheckQuantize, RunQuantize>);
  std::vector<DataType> dequant = {DataType::kU8, DataType::kI8, DataType::kU16, DataType::kI16,
                                   DataType::kI32};
  for (DataType t : LowBitTypes()) {
    if (IsQuantType(t)) dequant.push_back(t);  // float8e8m0 is a scale type only
  }
  r.AddRef(ir::OpType::kDequantizeLinear, dequant, CheckedFactory<CheckDequantize, RunDequantize>);
}

}  // namespace kiln::kernels::cpu::ref
