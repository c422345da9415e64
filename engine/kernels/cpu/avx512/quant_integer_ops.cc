// MatMulInteger and ConvInteger (uint8 / int8 operands, int32 outputs) on the AVX512-VNNI
// integer GEMM (quant.h): the dynamically quantized layers of ONNX Runtime's quantize_dynamic
// (ddddocr's OCR model: a 1024 x 8210 MatMulInteger and 21 ConvIntegers). Exact: every output is
// the reference's int32 sum (modulo 2^32, its wrap-around), so the tests compare bit for bit.
//
// MatMulInteger: zero points per tensor, per row of A ([M]) or per column of B ([N]); any other
// form, or shapes the reference rejects, run on the reference kernel. A constant B (an
// initializer) is packed once, at the first run; a B computed at run time is packed per run.
// ConvInteger: 1-D and 2-D, any group, strides, dilations and pads, W a constant packed once;
// x_zero_point per tensor, w_zero_point per tensor or per output channel. X is laid out per
// image and group as the GEMM's B operand (im2col, padding taps reading X's zero point so they
// add nothing), W is the A operand, and the GEMM writes Y's [M, OH * OW] planes directly.
// ConvIntegerToFloat and MatMulIntegerToFloat (engine/ir/ops.def) are the same kernels with the
// GEMM's output stage on (quant.h: + B, to fp32, * scale per output channel / per column), bit
// for bit the reference's.
#include <memory>
#include <optional>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/quant.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"
#include "engine/kernels/cpu/ref/quant_integer.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

bool IsInt8(DataType t) { return t == DataType::kU8 || t == DataType::kI8; }

// A zero point's value as int32 (uint8 or int8 storage).
int32_t ZeroPointAt(const ir::Tensor& zp, int64_t i) {
  return zp.dtype() == DataType::kU8 ? zp.data<uint8_t>()[i] : zp.data<int8_t>()[i];
}

// The stored zero points (quant.h: +128 for an int8 A operand, -128 for a uint8 B operand) of
// `count` rows or columns from `zp` (null: zero; one element: shared; else one per row/column).
void StoredZeroPoints(const ir::Tensor* zp, int64_t count, int32_t shift,
                      std::vector<int32_t>& out) {
  out.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    const int32_t v = zp == nullptr ? 0 : ZeroPointAt(*zp, zp->num_elements() == 1 ? 0 : i);
    out[i] = v + shift;
  }
}

bool IsConstant(const ir::Value* v) {
  return v != nullptr && v->constant.has_value() && !v->is_graph_input;
}

// ...ToFloat's B (int32, optional) and scale (fp32), each one value or one per index of an
// output axis of `count` (`is_vector`: IsChannelVector / IsColumnVector), as `count` values in
// `bias_out` (empty without B) and `scale_out`; false (the reference runs, and names a bad form)
// for any other form.
template <typename IsVector>
bool ReadOutputStage(const ir::Tensor* bias, const ir::Tensor* scale, int64_t count,
                     IsVector is_vector, std::vector<int32_t>& bias_out,
                     std::vector<float>& scale_out) {
  if (scale == nullptr || scale->dtype() != DataType::kF32 || !is_vector(scale->dims()) ||
      (bias != nullptr && (bias->dtype() != DataType::kI32 || !is_vector(bias->dims())))) {
    return false;
  }
  scale_out.resize(count);
  bias_out.resize(bias != nullptr ? count : 0);
  for (int64_t i = 0; i < count; ++i) {
    scale_out[i] = scale->data<float>()[scale->num_elements() == 1 ? 0 : i];
    if (bias != nullptr) bias_out[i] = bias->data<int32_t>()[bias->num_elements() == 1 ? 0 : i];
  }
  return true;
}

class MatMulIntegerKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    auto k = std::unique_ptr<MatMulIntegerKernel>(new MatMulIntegerKernel(node));
    k->reference_ = std::move(reference);
    k->b_constant_ = IsConstant(node.input(1));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* a = ctx.input(0);
    const ir::Tensor* b = ctx.input(1);
    const ir::Tensor* azp = ctx.input(2);
    const ir::Tensor* bzp = ctx.input(3);
    if (a == nullptr || b == nullptr || !IsInt8(a->dtype()) || !IsInt8(b->dtype()) ||
        (azp != nullptr && azp->dtype() != a->dtype()) ||
        (bzp != nullptr && bzp->dtype() != b->dtype())) {
      return reference_->Run(ctx);
    }
    absl::StatusOr<ref::nn::MatMulShape> planned = ref::nn::PlanMatMul(node_, a->dims(), b->dims());
    if (!planned.ok()) return reference_->Run(ctx);
    const ref::nn::MatMulShape& s = *planned;
    const int64_t m = s.m, n = s.n, k = s.k;
    // The zero-point forms of the reference's Centered (quant_integer.cc): one element, a
    // per-row [M] of A (rank >= 2), a per-column [N] of B.
    const bool azp_ok = azp == nullptr || azp->num_elements() == 1 ||
                        (azp->rank() == 1 && a->rank() >= 2 && azp->dim(0) == m);
    const bool bzp_ok = bzp == nullptr || bzp->num_elements() == 1 ||
                        (bzp->rank() == 1 && b->rank() >= 2 && bzp->dim(0) == n);
    if (!azp_ok || !bzp_ok || k == 0) return reference_->Run(ctx);
    // MatMulIntegerToFloat: B and scale per column (the output's last axis; one value for a
    // 1-D B, whose one column that axis is not).
    const int out_rank = static_cast<int>(s.out.size());
    if (to_float_ &&
        !ReadOutputStage(
            ctx.input(4), ctx.input(5), n,
            [&](const std::vector<int64_t>& d) { return ref::IsColumnVector(d, n, out_rank); },
            col_bias_, col_scale_)) {
      return reference_->Run(ctx);
    }
    ASSIGN_OR_RETURN(ir::Tensor * y,
                     ctx.output(0, to_float_ ? DataType::kF32 : DataType::kI32, s.out));
    if (y->num_elements() == 0) return absl::OkStatus();
    const bool a_signed = a->dtype() == DataType::kI8, b_signed = b->dtype() == DataType::kI8;
    const int64_t kp = Int8KPadded(k), b_bytes = Int8PackedBBytes(k, n);
    const int64_t b_mats = b->num_elements() / (k * n);
    if (!(b_constant_ && packed_for_ == b->raw_data() && packed_dims_ == b->dims())) {
      b_packed_.resize(b_mats * b_bytes);
      col_sums_.resize(b_mats * n);
      for (int64_t i = 0; i < b_mats; ++i) {
        PackBInt8(b->data<uint8_t>() + i * k * n, b_signed, k, n, n, b_packed_.data() + i * b_bytes,
                  col_sums_.data() + i * n);
      }
      packed_for_ = b->raw_data();
      packed_dims_ = b->dims();
    }
    const int64_t a_mats = a->num_elements() / (m * k);
    a_packed_.resize(a_mats * m * kp);
    row_sums_.resize(a_mats * m);
    PackAInt8(a->raw_data(), a_signed, a_mats * m, k, k, a_packed_.data(), row_sums_.data());
    StoredZeroPoints(azp, m, a_signed ? 128 : 0, za_);
    StoredZeroPoints(bzp, n, b_signed ? 0 : -128, zb_);
    // int32 sums, or with the output stage fp32 values of the same 4 bytes (quant.h).
    auto* out = static_cast<int32_t*>(y->raw_data());
    ref::nn::ForEachMatMulBatch(s, [&](int64_t bi, int64_t aoff, int64_t boff) {
      GemmInt8Args g;
      g.m = m;
      g.n = n;
      g.k = k;
      g.a = a_packed_.data() + aoff * m * kp;
      g.row_sums = row_sums_.data() + aoff * m;
      g.b = b_packed_.data() + boff * b_bytes;
      g.col_sums = col_sums_.data() + boff * n;
      g.za = za_.data();
      g.zb = zb_.data();
      g.y = out + bi * m * n;
      g.y_rs = n;
      if (to_float_) {
        g.col_scale = col_scale_.data();
        g.col_bias = col_bias_.empty() ? nullptr : col_bias_.data();
      }
      GemmInt8(g);
    });
    return absl::OkStatus();
  }

 private:
  explicit MatMulIntegerKernel(const ir::Node& node)
      : node_(node), to_float_(node.op == ir::OpType::kMatMulIntegerToFloat) {}

  const ir::Node& node_;
  std::unique_ptr<Kernel> reference_;
  bool b_constant_ = false;
  const void* packed_for_ = nullptr;  // the constant B that b_packed_ holds
  std::vector<int64_t> packed_dims_;
  std::vector<uint8_t> b_packed_, a_packed_;
  std::vector<int32_t> col_sums_, row_sums_, za_, zb_;
  const bool to_float_;  // MatMulIntegerToFloat
  std::vector<int32_t> col_bias_;
  std::vector<float> col_scale_;
};

class ConvIntegerKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    ASSIGN_OR_RETURN(ref::nn::ConvAttrs attrs, ref::nn::ReadConvAttrs(node));
    auto k = std::unique_ptr<ConvIntegerKernel>(new ConvIntegerKernel(node, std::move(attrs)));
    k->reference_ = std::move(reference);
    return std::unique_ptr<Kernel>(std::move(k));
  }

  // W a constant (packed once) of rank 3 (1-D convolution) or 4 (2-D).
  static bool Supports(const ir::Node& node) {
    const ir::Value* w = node.input(1);
    if (!IsConstant(w)) return false;
    const int rank = w->constant->rank();
    return rank == 3 || rank == 4;
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x = ctx.input(0);
    const ir::Tensor* w = ctx.input(1);
    const ir::Tensor* xzp = ctx.input(2);
    const ir::Tensor* wzp = ctx.input(3);
    if (x == nullptr || w == nullptr || !IsInt8(x->dtype()) || !IsInt8(w->dtype()) ||
        (xzp != nullptr && (xzp->dtype() != x->dtype() || xzp->num_elements() != 1)) ||
        (wzp != nullptr && wzp->dtype() != w->dtype()) || x->rank() != w->rank() ||
        (x->rank() != 3 && x->rank() != 4)) {
      return reference_->Run(ctx);
    }
    const int64_t c = x->dim(1), cg = w->dim(1), m = w->dim(0), group = attrs_.group;
    if (cg * group != c || m % group != 0 ||
        (wzp != nullptr && wzp->num_elements() != 1 && (wzp->rank() != 1 || wzp->dim(0) != m))) {
      return reference_->Run(ctx);
    }
    const std::vector<int64_t> kernel(w->dims().begin() + 2, w->dims().end());
    if (!attrs_.window.kernel.empty() && attrs_.window.kernel != kernel) {
      return reference_->Run(ctx);
    }
    const std::vector<int64_t> spatial(x->dims().begin() + 2, x->dims().end());
    absl::StatusOr<ref::nn::Window> resolved =
        ref::nn::ResolveWindow(node_, attrs_.window, spatial, kernel);
    if (!resolved.ok()) return reference_->Run(ctx);
    const ref::nn::Window& win = *resolved;
    std::vector<int64_t> out_dims = {x->dim(0), m};
    out_dims.insert(out_dims.end(), win.out.begin(), win.out.end());
    if (x->num_elements() == 0 || ir::NumElementsOf(out_dims) == 0) return reference_->Run(ctx);
    const int out_rank = x->rank();
    if (to_float_ &&
        !ReadOutputStage(
            ctx.input(4), ctx.input(5), m,
            [&](const std::vector<int64_t>& d) { return ref::IsChannelVector(d, m, out_rank); },
            row_bias_, row_scale_)) {
      return reference_->Run(ctx);
    }

    // 1-D as 2-D with H = 1.
    const bool one_d = x->rank() == 3;
    Int8ConvGeometry geo;
    geo.channels = cg;
    geo.h = one_d ? 1 : x->dim(2);
    geo.w = x->dim(x->rank() - 1);
    geo.kh = one_d ? 1 : kernel[0];
    geo.kw = kernel.back();
    geo.oh = one_d ? 1 : win.out[0];
    geo.ow = win.out.back();
    geo.stride_h = one_d ? 1 : win.strides[0];
    geo.stride_w = win.strides.back();
    geo.pad_h = one_d ? 0 : win.pad_begin[0];
    geo.pad_w = win.pad_begin.back();
    geo.dil_h = one_d ? 1 : win.dilations[0];
    geo.dil_w = win.dilations.back();
    const int64_t k = cg * geo.kh * geo.kw, kp = Int8KPadded(k), p = geo.oh * geo.ow;
    const int64_t mg = m / group;
    const bool x_signed = x->dtype() == DataType::kI8, w_signed = w->dtype() == DataType::kI8;

    // W as the A operand, packed once per weight buffer (a constant: Supports).
    if (packed_for_ != w->raw_data() || packed_dims_ != w->dims()) {
      w_packed_.resize(m * kp);
      row_sums_.resize(m);
      PackAInt8(w->raw_data(), w_signed, m, k, k, w_packed_.data(), row_sums_.data());
      packed_for_ = w->raw_data();
      packed_dims_ = w->dims();
    }
    StoredZeroPoints(wzp, m, w_signed ? 128 : 0, za_);
    // X's stored zero point: the padding value of the im2col and every column's zb.
    const int32_t zx = (xzp == nullptr ? 0 : ZeroPointAt(*xzp, 0)) + (x_signed ? 0 : -128);
    zb_.assign(p, zx);
    b_packed_.resize(Int8PackedBBytes(k, p));
    col_sums_.resize(p);

    ASSIGN_OR_RETURN(ir::Tensor * y,
                     ctx.output(0, to_float_ ? DataType::kF32 : DataType::kI32, out_dims));
    // int32 sums, or with the output stage fp32 values of the same 4 bytes (quant.h).
    auto* yb = static_cast<int32_t*>(y->raw_data());
    const auto* xb = static_cast<const uint8_t*>(x->raw_data());
    const int64_t plane = geo.h * geo.w;
    for (int64_t img = 0; img < x->dim(0); ++img) {
      for (int64_t gi = 0; gi < group; ++gi) {
        Im2ColPackInt8(xb + (img * c + gi * cg) * plane, x_signed, geo, static_cast<int8_t>(zx),
                       b_packed_.data(), col_sums_.data());
        GemmInt8Args g;
        g.m = mg;
        g.n = p;
        g.k = k;
        g.a = w_packed_.data() + gi * mg * kp;
        g.row_sums = row_sums_.data() + gi * mg;
        g.za = za_.data() + gi * mg;
        g.b = b_packed_.data();
        g.col_sums = col_sums_.data();
        g.zb = zb_.data();
        g.y = yb + (img * m + gi * mg) * p;
        g.y_rs = p;
        if (to_float_) {
          g.row_scale = row_scale_.data() + gi * mg;
          g.row_bias = row_bias_.empty() ? nullptr : row_bias_.data() + gi * mg;
        }
        GemmInt8(g);
      }
    }
    return absl::OkStatus();
  }

 private:
  ConvIntegerKernel(const ir::Node& node, ref::nn::ConvAttrs attrs)
      : node_(node),
        attrs_(std::move(attrs)),
        to_float_(node.op == ir::OpType::kConvIntegerToFloat) {}

  const ir::Node& node_;
  ref::nn::ConvAttrs attrs_;
  std::unique_ptr<Kernel> reference_;
  const void* packed_for_ = nullptr;  // the W that w_packed_ holds
  std::vector<int64_t> packed_dims_;
  std::vector<uint8_t> w_packed_, b_packed_;
  std::vector<int32_t> row_sums_, col_sums_, za_, zb_;
  const bool to_float_;  // ConvIntegerToFloat
  std::vector<int32_t> row_bias_;
  std::vector<float> row_scale_;
};

}  // namespace

void RegisterQuantInteger(Registry& r) {
  KernelDef mm{
      ir::OpType::kMatMulInteger,  {DataType::kU8, DataType::kI8}, 0, Backend::kCpu, Isa::kAvx512,
      &MatMulIntegerKernel::Create};
  mm.cpu_features = kCpuAvx512Vnni;
  r.Add(mm);
  KernelDef mm_to_float = mm;
  mm_to_float.op = ir::OpType::kMatMulIntegerToFloat;
  r.Add(mm_to_float);
  KernelDef conv{
      ir::OpType::kConvInteger,  {DataType::kU8, DataType::kI8}, 0, Backend::kCpu, Isa::kAvx512,
      &ConvIntegerKernel::Create};
  conv.cpu_features = kCpuAvx512Vnni;
  conv.supports = &ConvIntegerKernel::Supports;
  r.Add(conv);
  KernelDef to_float = conv;
  to_float.op = ir::OpType::kConvIntegerToFloat;
  r.Add(to_float);
}

}  // namespace kiln::kernels::cpu::avx512
