// Reference kernels of the integer quantized ops: MatMulInteger, ConvInteger (int32 outputs)
// and QLinearMatMul, QLinearConv (requantized int8/uint8 outputs), and Kiln's ConvIntegerToFloat
// and MatMulIntegerToFloat (ConvInteger's / MatMulInteger's int32 sums [+ int32 B], converted to
// fp32 and times an fp32 scale, as the separate Add, Cast and Mul compute it). Registered by
// RegisterQuantInteger (register.h).
//
// Arithmetic, as the ONNX reference (onnx/reference/ops/op_qlinear_*.py) defines it:
//   acc = sum_k (a - a_zp) * (b - b_zp)  [+ bias]          exact integers, int32 wrap-around
//   y   = saturate(round_half_even(acc * M) + y_zp)         M = fp32(fp32(s_a * s_b) / s_y)
// The multiplier M is formed in fp32 (the scales are fp32 inputs; fp16/bf16 scales of opset 21
// are widened first, DESIGN.md §5) and the product acc * M is taken in double, as numpy does
// for an int32 array times an fp32 array. The matrix products run on the shared GEMM in uint32
// (exact modulo 2^32, i.e. int32 wrap-around); the convolutions run on the shared im2col + GEMM
// in double, exact for every sum below 2^53 (checked), then wrapped to int32.
#include "engine/kernels/cpu/ref/quant_integer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

using nn::ConvAttrs;
using nn::MatMulShape;
using nn::MatView;
using nn::Window;

bool IsInt8Type(DataType t) { return t == DataType::kU8 || t == DataType::kI8; }

absl::Status CheckInt8(const ir::Node& node, const ir::Tensor& t, const char* what) {
  if (!IsInt8Type(t.dtype())) {
    return InvalidNode(node, what, " dtype ", DataTypeOnnxName(t.dtype()), " is not int8 or uint8");
  }
  return absl::OkStatus();
}

// An int8/uint8 tensor widened to int32.
std::vector<int32_t> Widen(const ir::Tensor& t) {
  std::vector<int32_t> v(t.num_elements());
  if (t.dtype() == DataType::kU8) {
    const uint8_t* p = t.data<uint8_t>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  } else {
    const int8_t* p = t.data<int8_t>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  }
  return v;
}

// x - zp as int32, zp broadcast onto x under numpy rules from `zp_dims` (zp's dims, or a
// reshaping of them such as [M] -> [M, 1] for per-row zero points). zp must have x's dtype.
absl::StatusOr<std::vector<int32_t>> Centered(const ir::Node& node, const ir::Tensor& x,
                                              const ir::Tensor* zp,
                                              const std::vector<int64_t>& zp_dims,
                                              const char* what) {
  std::vector<int32_t> v = Widen(x);
  if (zp == nullptr) return v;
  if (zp->dtype() != x.dtype()) {
    return InvalidNode(node, what, " dtype ", DataTypeOnnxName(zp->dtype()),
                       " differs from its input's ", DataTypeOnnxName(x.dtype()));
  }
  const std::vector<int32_t> z = Widen(*zp);
  if (z.size() == 1) {
    for (int32_t& e : v) e -= z[0];
    return v;
  }
  ASSIGN_OR_RETURN(const std::vector<int64_t> bd, BroadcastShapes(node, x.dims(), zp_dims));
  if (bd != x.dims()) {
    return InvalidNode(node, what, " shape ", ir::DimsToString(zp->dims()),
                       " does not broadcast to its input's ", ir::DimsToString(x.dims()));
  }
  const std::vector<int64_t> st = BroadcastStrides(zp_dims, x.dims());
  const int r = x.rank();
  std::vector<int64_t> idx(r, 0);
  int64_t zi = 0;
  for (size_t e = 0; e < v.size(); ++e) {
    v[e] -= z[zi];
    for (int d = r - 1; d >= 0; --d) {
      zi += st[d];
      if (++idx[d] < x.dim(d)) break;
      zi -= st[d] * x.dim(d);
      idx[d] = 0;
    }
  }
  return v;
}

// The dims a per-row zero point / scale of A takes for broadcasting: a 1-D tensor of A's row
// count becomes [M, 1]; anything else keeps its dims.
std::vector<int64_t> RowDims(const ir::Tensor& a, const ir::Tensor& zp) {
  if (zp.rank() == 1 && zp.num_elements() > 1 && a.rank() >= 2 &&
      zp.dim(0) == a.dim(a.rank() - 2)) {
    return {zp.dim(0), 1};
  }
  return zp.dims();
}

// A floating scale tensor (fp32, or fp16/bf16 from opset 21) as fp32 values.
absl::StatusOr<std::vector<float>> ReadScales(const ir::Node& node, const ir::Tensor& s,
                                              const char* what) {
  if (s.dtype() != DataType::kF32 && s.dtype() != DataType::kF16 && s.dtype() != DataType::kBF16) {
    return InvalidNode(node, what, " dtype ", DataTypeOnnxName(s.dtype()),
                       " is not float, float16 or bfloat16");
  }
  std::vector<float> v(s.num_elements());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(ir::ElementAsDouble(s, i));
  return v;
}

// round_half_even(acc * mult) + zp, saturated to Q.
template <typename Q>
Q Requantize(int32_t acc, float mult, int32_t zp) {
  const double v = std::nearbyint(static_cast<double>(acc) * static_cast<double>(mult)) + zp;
  constexpr double lo = std::numeric_limits<Q>::min(), hi = std::numeric_limits<Q>::max();
  return static_cast<Q>(std::min(std::max(v, lo), hi));
}

// ---- integer matrix product -----------------------------------------------------------------

// y = a @ b (numpy.matmul geometry of `s`), exact modulo 2^32.
void IntMatMul(const MatMulShape& s, const std::vector<int32_t>& a, const std::vector<int32_t>& b,
               int32_t* y) {
  const int64_t m = s.m, n = s.n, k = s.k;
  // int32 and uint32 may alias; uint32 arithmetic wraps where int32 would overflow.
  const uint32_t* ap = reinterpret_cast<const uint32_t*>(a.data());
  const uint32_t* bp = reinterpret_cast<const uint32_t*>(b.data());
  uint32_t* yp = reinterpret_cast<uint32_t*>(y);
  nn::ForEachMatMulBatch(s, [&](int64_t bi, int64_t aoff, int64_t boff) {
    uint32_t* out = yp + bi * m * n;
    std::fill(out, out + m * n, 0u);
    nn::GemmAccumulate<uint32_t>(m, n, k, MatView<uint32_t>{ap + aoff * m * k, k, 1},
                                 MatView<uint32_t>{bp + boff * k * n, n, 1}, out, n);
  });
}

// The int32 sums of MatMulInteger's inputs 0-3 (A, B, a_zero_point, b_zero_point), of dims
// `out_dims`; `n` is the product's column count (B's last dim, 1 for a 1-D B).
absl::StatusOr<std::vector<int32_t>> MatMulIntegerAcc(const ir::Node& node, KernelContext& ctx,
                                                      std::vector<int64_t>& out_dims, int64_t& n) {
  ASSIGN_OR_RETURN(const ir::Tensor* a, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* b, RequireInput(node, ctx, 1));
  RETURN_IF_ERROR(CheckInt8(node, *a, "A"));
  RETURN_IF_ERROR(CheckInt8(node, *b, "B"));
  const ir::Tensor* azp = ctx.input(2);
  const ir::Tensor* bzp = ctx.input(3);
  ASSIGN_OR_RETURN(const MatMulShape s, nn::PlanMatMul(node, a->dims(), b->dims()));
  ASSIGN_OR_RETURN(
      std::vector<int32_t> ac,
      Centered(node, *a, azp, azp ? RowDims(*a, *azp) : std::vector<int64_t>{}, "a_zero_point"));
  ASSIGN_OR_RETURN(
      std::vector<int32_t> bc,
      Centered(node, *b, bzp, bzp ? bzp->dims() : std::vector<int64_t>{}, "b_zero_point"));
  std::vector<int32_t> acc(ir::NumElementsOf(s.out));
  IntMatMul(s, ac, bc, acc.data());
  out_dims = s.out;
  n = s.n;
  return acc;
}

absl::Status MatMulIntegerRun(const ir::Node& node, KernelContext& ctx) {
  std::vector<int64_t> out_dims;
  int64_t n = 0;
  ASSIGN_OR_RETURN(std::vector<int32_t> acc, MatMulIntegerAcc(node, ctx, out_dims, n));
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, DataType::kI32, out_dims));
  std::copy(acc.begin(), acc.end(), y->data<int32_t>());
  return absl::OkStatus();
}

// Index of the per-row (A side) or per-column (B side) parameter of output element
// (matrix `mat` of that operand, row/column `i` of `len`) for a parameter of `count` elements:
// per tensor (1), per row/column (len) or per matrix and row/column (matrices * len).
absl::Status CheckParamCount(const ir::Node& node, int64_t count, int64_t len, int64_t matrices,
                             const char* what) {
  if (count == 1 || count == len || count == matrices * len) return absl::OkStatus();
  return InvalidNode(node, what, " has ", count, " elements; expected 1, ", len, " or ",
                     matrices * len);
}
inline int64_t ParamIndex(int64_t count, int64_t len, int64_t mat, int64_t i) {
  return count == 1 ? 0 : count == len ? i : mat * len + i;
}

absl::Status QLinearMatMulRun(const ir::Node& node, KernelContext& ctx) {
  const ir::Tensor* in[8];
  for (int i = 0; i < 8; ++i) {
    ASSIGN_OR_RETURN(in[i], RequireInput(node, ctx, i));
  }
  const ir::Tensor &a = *in[0], &azp = *in[2], &b = *in[3], &bzp = *in[5], &yzp = *in[7];
  RETURN_IF_ERROR(CheckInt8(node, a, "a"));
  RETURN_IF_ERROR(CheckInt8(node, b, "b"));
  RETURN_IF_ERROR(CheckInt8(node, yzp, "y_zero_point"));
  ASSIGN_OR_RETURN(const std::vector<float> sa, ReadScales(node, *in[1], "a_scale"));
  ASSIGN_OR_RETURN(const std::vector<float> sb, ReadScales(node, *in[4], "b_scale"));
  ASSIGN_OR_RETURN(const std::vector<float> sy, ReadScales(node, *in[6], "y_scale"));
  if (sy.size() != 1 || yzp.num_elements() != 1) {
    return absl::UnimplementedError(absl::StrCat(
        node.Label(), " y_scale and y_zero_point must be per-tensor (one element each)"));
  }
  ASSIGN_OR_RETURN(const MatMulShape s, nn::PlanMatMul(node, a.dims(), b.dims()));
  const int64_t a_mats = a.rank() > 2 ? Product(a.dims(), 0, a.rank() - 2) : 1;
  const int64_t b_mats = b.rank() > 2 ? Product(b.dims(), 0, b.rank() - 2) : 1;
  RETURN_IF_ERROR(CheckParamCount(node, sa.size(), s.m, a_mats, "a_scale"));
  RETURN_IF_ERROR(CheckParamCount(node, sb.size(), s.n, b_mats, "b_scale"));
  ASSIGN_OR_RETURN(std::vector<int32_t> ac,
                   Centered(node, a, &azp, RowDims(a, azp), "a_zero_point"));
  ASSIGN_OR_RETURN(std::vector<int32_t> bc, Centered(node, b, &bzp, bzp.dims(), "b_zero_point"));
  std::vector<int32_t> acc(ir::NumElementsOf(s.out));
  IntMatMul(s, ac, bc, acc.data());
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, yzp.dtype(), s.out));
  const int32_t zy = Widen(yzp)[0];
  auto write = [&](auto* out) {
    using Q = std::remove_pointer_t<decltype(out)>;
    const int64_t m = s.m, n = s.n;
    nn::ForEachMatMulBatch(s, [&](int64_t bi, int64_t aoff, int64_t boff) {
      for (int64_t i = 0; i < m; ++i) {
        const float fa = sa[ParamIndex(sa.size(), m, aoff, i)];
        for (int64_t j = 0; j < n; ++j) {
          // fp32 multiplier, as the reference's fp32 arrays compute it.
          const float mult = (fa * sb[ParamIndex(sb.size(), n, boff, j)]) / sy[0];
          const int64_t e = (bi * m + i) * n + j;
          out[e] = Requantize<Q>(acc[e], mult, zy);
        }
      }
    });
  };
  if (yzp.dtype() == DataType::kU8) {
    write(y->data<uint8_t>());
  } else {
    write(y->data<int8_t>());
  }
  return absl::OkStatus();
}

// ---- integer convolution --------------------------------------------------------------------

absl::Status CheckConvAttrs(const ir::Node& node) { return nn::ReadConvAttrs(node).status(); }

// acc = Conv(xc, wc) + bias as int32 ([N, M, out...] in `out_dims`), xc and wc the centered
// operands of X (dims of `x`) and W (dims of `w`).
absl::StatusOr<std::vector<int32_t>> IntConv(const ir::Node& node, const ir::Tensor& x,
                                             const std::vector<int32_t>& xc, const ir::Tensor& w,
                                             const std::vector<int32_t>& wc, const ir::Tensor* bias,
                                             std::vector<int64_t>& out_dims) {
  ASSIGN_OR_RETURN(const ConvAttrs attrs, nn::ReadConvAttrs(node));
  const int nd = x.rank() - 2;
  if (nd < 1 || nd > 16) {
    return InvalidNode(node, "X must have 1 to 16 spatial dims, got shape ",
                       ir::DimsToString(x.dims()));
  }
  if (w.rank() != x.rank()) {
    return InvalidNode(node, "W rank ", w.rank(), " differs from X rank ", x.rank());
  }
  const int64_t c = x.dim(1), cg = w.dim(1), m = w.dim(0);
  if (cg * attrs.group != c || m % attrs.group != 0) {
    return InvalidNode(node, "X has ", c, " channels and W is ", ir::DimsToString(w.dims()),
                       ", inconsistent with group ", attrs.group);
  }
  std::vector<int64_t> kernel(w.dims().begin() + 2, w.dims().end());
  if (!attrs.window.kernel.empty() && attrs.window.kernel != kernel) {
    return InvalidNode(node, "kernel_shape ", ir::DimsToString(attrs.window.kernel),
                       " does not match W ", ir::DimsToString(w.dims()));
  }
  if (bias != nullptr &&
      (bias->dtype() != DataType::kI32 || bias->rank() != 1 || bias->dim(0) != m)) {
    return InvalidNode(node, "B must be int32 of shape [", m, "], got ",
                       DataTypeOnnxName(bias->dtype()), " ", ir::DimsToString(bias->dims()));
  }
  // Every product is at most 255 * 255 in magnitude; the double sums stay exact below 2^53.
  if (static_cast<double>(cg) * static_cast<double>(ir::NumElementsOf(kernel)) * 65025.0 +
          2147483648.0 >=
      9007199254740992.0) {
    return absl::UnimplementedError(
        absl::StrCat(node.Label(), " reduction of ", cg, " x ", ir::DimsToString(kernel),
                     " is too long for the exact reference convolution"));
  }
  std::vector<int64_t> spatial(x.dims().begin() + 2, x.dims().end());
  ASSIGN_OR_RETURN(const Window win, nn::ResolveWindow(node, attrs.window, spatial, kernel));
  out_dims = {x.dim(0), m};
  out_dims.insert(out_dims.end(), win.out.begin(), win.out.end());
  const std::vector<double> xd(xc.begin(), xc.end()), wd(wc.begin(), wc.end());
  std::vector<double> bd;
  if (bias != nullptr) bd.assign(bias->data<int32_t>(), bias->data<int32_t>() + m);
  std::vector<double> yd(ir::NumElementsOf(out_dims));
  nn::FillBias(yd.data(), static_cast<int64_t>(yd.size()), bias ? bd.data() : nullptr, m,
               ir::NumElementsOf(win.out));
  nn::ConvForward<double>(x.dims(), w.dims(), win, attrs.group, xd.data(), wd.data(), yd.data());
  std::vector<int32_t> acc(yd.size());
  for (size_t i = 0; i < acc.size(); ++i) {
    // Exact integer in double; the int64 -> int32 conversion wraps as int32 accumulation does.
    acc[i] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(yd[i])));
  }
  return acc;
}

// The dims of a conv zero point for broadcasting onto W: per output channel [M] -> [M, 1, ...].
std::vector<int64_t> ChannelDims(const ir::Tensor& w, const ir::Tensor& zp) {
  if (zp.rank() == 1 && zp.num_elements() > 1) {
    std::vector<int64_t> d(w.rank(), 1);
    d[0] = zp.dim(0);
    return d;
  }
  return zp.dims();
}

absl::Status CheckPerTensor(const ir::Node& node, const ir::Tensor* t, const char* what) {
  if (t != nullptr && t->num_elements() != 1) {
    return InvalidNode(node, what, " must have one element (per tensor), got shape ",
                       ir::DimsToString(t->dims()));
  }
  return absl::OkStatus();
}

absl::Status CheckPerChannel(const ir::Node& node, const ir::Tensor& t, int64_t m,
                             const char* what) {
  if (t.num_elements() == 1 || (t.rank() == 1 && t.dim(0) == m)) return absl::OkStatus();
  return InvalidNode(node, what, " must have one element or shape [", m, "], got ",
                     ir::DimsToString(t.dims()));
}

// The int32 sums of ConvInteger's inputs 0-3 (X, W, x_zero_point, w_zero_point).
absl::StatusOr<std::vector<int32_t>> ConvIntegerAcc(const ir::Node& node, KernelContext& ctx,
                                                    std::vector<int64_t>& out_dims) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* w, RequireInput(node, ctx, 1));
  RETURN_IF_ERROR(CheckInt8(node, *x, "x"));
  RETURN_IF_ERROR(CheckInt8(node, *w, "w"));
  const ir::Tensor* xzp = ctx.input(2);
  const ir::Tensor* wzp = ctx.input(3);
  RETURN_IF_ERROR(CheckPerTensor(node, xzp, "x_zero_point"));
  if (wzp) RETURN_IF_ERROR(CheckPerChannel(node, *wzp, w->dim(0), "w_zero_point"));
  ASSIGN_OR_RETURN(
      std::vector<int32_t> xc,
      Centered(node, *x, xzp, xzp ? xzp->dims() : std::vector<int64_t>{}, "x_zero_point"));
  ASSIGN_OR_RETURN(std::vector<int32_t> wc,
                   Centered(node, *w, wzp, wzp ? ChannelDims(*w, *wzp) : std::vector<int64_t>{},
                            "w_zero_point"));
  return IntConv(node, *x, xc, *w, wc, nullptr, out_dims);
}

absl::Status ConvIntegerRun(const ir::Node& node, KernelContext& ctx) {
  std::vector<int64_t> out_dims;
  ASSIGN_OR_RETURN(std::vector<int32_t> acc, ConvIntegerAcc(node, ctx, out_dims));
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, DataType::kI32, out_dims));
  std::copy(acc.begin(), acc.end(), y->data<int32_t>());
  return absl::OkStatus();
}

// The axis of a ...ToFloat output stage: B and scale hold one value, or one per index of the
// output's axis `axis` (of `count`: a convolution's channels, a matrix product's columns).
struct StageAxis {
  int axis;
  int64_t count;
  const char* per;  // "output channel", "output column"
};

// ...ToFloat's B (slot 4, int32) or scale (slot 5, float32): one value, or one per index of
// the stage's axis (IsAxisVector) of an output `out_dims`.
absl::Status CheckStageVector(const ir::Node& node, const ir::Tensor& t, DataType dtype,
                              const std::vector<int64_t>& out_dims, const StageAxis& ax,
                              const char* what) {
  if (t.dtype() != dtype) {
    return InvalidNode(node, what, " dtype ", DataTypeOnnxName(t.dtype()), " is not ",
                       DataTypeOnnxName(dtype));
  }
  if (!IsAxisVector(t.dims(), ax.count, static_cast<int>(out_dims.size()), ax.axis)) {
    return InvalidNode(node, what, " of shape ", ir::DimsToString(t.dims()),
                       " is not one value or one per ", ax.per, " of ", ir::DimsToString(out_dims));
  }
  return absl::OkStatus();
}

// y = float(acc + B) * scale: the int32 Add (wrapping), the Cast to fp32 (round to nearest
// even) and the fp32 Mul of the separate nodes, per element; B and scale along `ax`.
absl::Status ToFloatStage(const ir::Node& node, KernelContext& ctx, const std::vector<int32_t>& acc,
                          const std::vector<int64_t>& out_dims, const StageAxis& ax) {
  const ir::Tensor* bias = ctx.input(4);
  ASSIGN_OR_RETURN(const ir::Tensor* scale, RequireInput(node, ctx, 5));
  if (bias != nullptr) {
    RETURN_IF_ERROR(CheckStageVector(node, *bias, DataType::kI32, out_dims, ax, "B"));
  }
  RETURN_IF_ERROR(CheckStageVector(node, *scale, DataType::kF32, out_dims, ax, "scale"));
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, DataType::kF32, out_dims));
  const int64_t count = std::max<int64_t>(ax.count, 1);
  const int64_t inner = Product(out_dims, ax.axis + 1, out_dims.size());
  const bool bias_per_index = bias != nullptr && bias->num_elements() > 1;
  const bool scale_per_index = scale->num_elements() > 1;
  float* out = y->data<float>();
  for (size_t e = 0; e < acc.size(); ++e) {
    const int64_t c = (static_cast<int64_t>(e) / inner) % count;
    uint32_t v = static_cast<uint32_t>(acc[e]);
    if (bias != nullptr) {
      v += static_cast<uint32_t>(bias->data<int32_t>()[bias_per_index ? c : 0]);
    }
    out[e] =
        static_cast<float>(static_cast<int32_t>(v)) * scale->data<float>()[scale_per_index ? c : 0];
  }
  return absl::OkStatus();
}

absl::Status ConvIntegerToFloatRun(const ir::Node& node, KernelContext& ctx) {
  std::vector<int64_t> out_dims;
  ASSIGN_OR_RETURN(std::vector<int32_t> acc, ConvIntegerAcc(node, ctx, out_dims));
  return ToFloatStage(node, ctx, acc, out_dims, {1, out_dims[1], "output channel"});
}

// B and scale per column: the last axis of the output (a 1-D B has one column, and only the
// one-value forms then apply).
absl::Status MatMulIntegerToFloatRun(const ir::Node& node, KernelContext& ctx) {
  std::vector<int64_t> out_dims;
  int64_t n = 0;
  ASSIGN_OR_RETURN(std::vector<int32_t> acc, MatMulIntegerAcc(node, ctx, out_dims, n));
  return ToFloatStage(node, ctx, acc, out_dims,
                      {static_cast<int>(out_dims.size()) - 1, n, "output column"});
}

absl::Status QLinearConvRun(const ir::Node& node, KernelContext& ctx) {
  const ir::Tensor* in[8];
  for (int i = 0; i < 8; ++i) {
    ASSIGN_OR_RETURN(in[i], RequireInput(node, ctx, i));
  }
  const ir::Tensor &x = *in[0], &xzp = *in[2], &w = *in[3], &wzp = *in[5], &yzp = *in[7];
  const ir::Tensor* bias = ctx.input(8);
  RETURN_IF_ERROR(CheckInt8(node, x, "x"));
  RETURN_IF_ERROR(CheckInt8(node, w, "w"));
  RETURN_IF_ERROR(CheckInt8(node, yzp, "y_zero_point"));
  if (w.rank() < 1) return InvalidNode(node, "w must not be a scalar");
  const int64_t m = w.dim(0);
  ASSIGN_OR_RETURN(const std::vector<float> sx, ReadScales(node, *in[1], "x_scale"));
  ASSIGN_OR_RETURN(const std::vector<float> sw, ReadScales(node, *in[4], "w_scale"));
  ASSIGN_OR_RETURN(const std::vector<float> sy, ReadScales(node, *in[6], "y_scale"));
  RETURN_IF_ERROR(CheckPerTensor(node, in[1], "x_scale"));
  RETURN_IF_ERROR(CheckPerTensor(node, &xzp, "x_zero_point"));
  RETURN_IF_ERROR(CheckPerTensor(node, in[6], "y_scale"));
  RETURN_IF_ERROR(CheckPerTensor(node, &yzp, "y_zero_point"));
  RETURN_IF_ERROR(CheckPerChannel(node, *in[4], m, "w_scale"));
  RETURN_IF_ERROR(CheckPerChannel(node, wzp, m, "w_zero_point"));
  ASSIGN_OR_RETURN(std::vector<int32_t> xc, Centered(node, x, &xzp, xzp.dims(), "x_zero_point"));
  ASSIGN_OR_RETURN(std::vector<int32_t> wc,
                   Centered(node, w, &wzp, ChannelDims(w, wzp), "w_zero_point"));
  std::vector<int64_t> out_dims;
  ASSIGN_OR_RETURN(std::vector<int32_t> acc, IntConv(node, x, xc, w, wc, bias, out_dims));
  std::vector<float> mult(m);
  for (int64_t c = 0; c < m; ++c) mult[c] = (sx[0] * sw[sw.size() == 1 ? 0 : c]) / sy[0];
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, yzp.dtype(), out_dims));
  const int64_t plane = Product(out_dims, 2, out_dims.size());
  const int32_t zy = Widen(yzp)[0];
  auto write = [&](auto* out) {
    using Q = std::remove_pointer_t<decltype(out)>;
    for (size_t e = 0; e < acc.size(); ++e) {
      out[e] = Requantize<Q>(acc[e], mult[(static_cast<int64_t>(e) / plane) % m], zy);
    }
  };
  if (yzp.dtype() == DataType::kU8) {
    write(y->data<uint8_t>());
  } else {
    write(y->data<int8_t>());
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterQuantInteger(Registry& r) {
  const std::vector<DataType> q = {DataType::kU8, DataType::kI8};
  r.AddRef(ir::OpType::kMatMulInteger, q, &FunctionKernel<MatMulIntegerRun>::Create);
  r.AddRef(ir::OpType::kMatMulIntegerToFloat, q, &FunctionKernel<MatMulIntegerToFloatRun>::Create);
  r.AddRef(ir::OpType::kQLinearMatMul, q, &FunctionKernel<QLinearMatMulRun>::Create);
  r.AddRef(ir::OpType::kConvInteger, q, CheckedFactory<CheckConvAttrs, ConvIntegerRun>);
  r.AddRef(ir::OpType::kConvIntegerToFloat, q,
           CheckedFactory<CheckConvAttrs, ConvIntegerToFloatRun>);
  r.AddRef(ir::OpType::kQLinearConv, q, CheckedFactory<CheckConvAttrs, QLinearConvRun>);
}

}  // namespace kiln::kernels::cpu::ref
