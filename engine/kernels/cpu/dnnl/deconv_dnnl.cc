// ConvTranspose (1-D, 2-D and 3-D, NCHW) on float, bfloat16 and float16 storage through oneDNN's
// deconvolution primitive. Shapes, attributes and errors are the reference kernel's
// (cpu/ref/nn_conv.cc): a run whose operands the reference would refuse, or whose geometry
// oneDNN does not take (negative pads: output_shape asking for more than the natural size),
// runs the reference kernel, which then reports the error or computes the result.
//
// Precision (DESIGN.md §5), as the reference: X, W and B are read in their storage type, each
// output element is an fp32 sum of products plus the bias, rounded once to the output type (bf16
// products are exact in fp32). The numbers differ from the reference's only by the order of the
// fp32 additions. bf16 dot-product instructions read subnormals as zero: a bf16 run with a
// subnormal in X or W goes to the reference. fp16 storage: the fp32 primitive on X, W and B
// widened to fp32 (exact), writing fp32 sums rounded once to fp16 Y.
//
// W is a constant (`Supports`): the primitive and W in the primitive's preferred layout are made
// at the first run and again only when X's shape or the thread count changes. ONNX's W
// [C, M/g, k...] is oneDNN's (g)io(d)(h)w weights layout, so the reorder reads it as it lies.
// X and Y are plain NC... tensors; oneDNN picks their layout inside the primitive and, when it
// picks a blocked one, X is reordered into it and Y back on each run.
//
// The non-overlapping 2x upsampling (kernel 2 wide with stride 2, kernel height == stride
// height, no padding: the decoders' ConvTranspose) runs on AVX-512 multiply-adds instead
// (avx512/deconv_s2.h), with neither the reorders nor oneDNN's padding of M to 16 channels.
#include <omp.h>

#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/convert.h"
#include "engine/kernels/cpu/avx512/deconv_s2.h"
#include "engine/kernels/cpu/dnnl/dnnl_common.h"
#include "engine/kernels/cpu/dnnl/register.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace kiln::kernels::cpu::dnnl {
namespace {

using Tag = dn::memory::format_tag;

// The plain layout of a rank-`rank` activation, and of ONNX's ConvTranspose W.
Tag DataTag(int rank) { return rank == 3 ? Tag::ncw : rank == 4 ? Tag::nchw : Tag::ncdhw; }
Tag WeightTag(int rank, bool grouped) {
  if (rank == 3) return grouped ? Tag::acbd : Tag::bac;  // (g)iow
  if (rank == 4) return grouped ? Tag::giohw : Tag::iohw;
  return grouped ? Tag::giodhw : Tag::iodhw;
}

// One run's geometry: the reference's output sizes and pads (nn_conv.cc, ConvTranspose).
struct Geometry {
  std::vector<int64_t> out, strides, dilations, pad_l, pad_r;
};

class DeconvKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(ref::nn::ConvAttrs attrs, ref::nn::ReadConvAttrs(node));
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    auto k = std::unique_ptr<DeconvKernel>(new DeconvKernel(node, std::move(attrs)));
    k->reference_ = std::move(reference);
    k->output_padding_ = node.GetInts("output_padding");
    k->output_shape_ = node.GetInts("output_shape");
    return std::unique_ptr<Kernel>(std::move(k));
  }

  // X, W, B and Y of one dtype, W a constant of rank 3 to 5 that is not an overridable input.
  static bool Supports(const ir::Node& node) {
    const ir::Value* x = node.input(0);
    const ir::Value* w = node.input(1);
    const ir::Value* b = node.input(2);
    const ir::Value* y = node.outputs.empty() ? nullptr : node.outputs[0];
    if (!x || !w || !y || !w->constant || w->is_graph_input) return false;
    if (node.GetInt(kChannelsLastAttr, 0) != 0) return false;
    const int w_rank = w->constant->rank();
    if (w_rank < 3 || w_rank > 5) return false;
    if (w->dtype != x->dtype || (b && b->dtype != x->dtype)) return false;
    return y->dtype == x->dtype || y->dtype == DataType::kUndefined;
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x = ctx.input(0);
    const ir::Tensor* w = ctx.input(1);
    const ir::Tensor* b = ctx.input(2);
    if (x == nullptr || w == nullptr) return reference_->Run(ctx);
    const DataType dt = x->dtype();
    const int rank = x->rank();
    const int64_t g = attrs_.group;
    if (!IsF32OrHalf(dt) || w->dtype() != dt || (b && b->dtype() != dt) || rank < 3 || rank > 5 ||
        w->rank() != rank || x->dim(1) != w->dim(0) || x->dim(1) % g != 0) {
      return reference_->Run(ctx);
    }
    const int64_t m = w->dim(1) * g;
    if ((b && b->num_elements() != m) || x->num_elements() == 0 || w->num_elements() == 0) {
      return reference_->Run(ctx);
    }
    std::optional<Geometry> geo = Resolve(*x, *w);
    if (!geo) return reference_->Run(ctx);
    std::vector<int64_t> out_dims = {x->dim(0), m};
    out_dims.insert(out_dims.end(), geo->out.begin(), geo->out.end());
    if (ir::NumElementsOf(out_dims) == 0) return reference_->Run(ctx);
    if (NonOverlapping2x(*w, *geo)) return RunS2(ctx, *x, *w, b, m, out_dims);
    if (dt == DataType::kBF16 && (!w_scan_.Allowed(*w) || !Bf16Allowed(*x))) {
      return reference_->Run(ctx);
    }
    ASSIGN_OR_RETURN(
        PrimitiveRun * plan,
        CachedRun(plan_, *x, *w, omp_get_max_threads(), node_, "deconvolution",
                  // A geometry oneDNN refuses runs the reference too.
                  /*any_error_unimplemented=*/true, [&](dn::engine& engine, PrimitiveRun& p) {
                    Build(*x, *w, b != nullptr, m, *geo, out_dims, engine, p);
                  }));
    if (plan == nullptr) return reference_->Run(ctx);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, dt, out_dims));
    const bool half = dt == DataType::kF16;
    const int64_t n = y->num_elements();
    const float* bias = BiasAsF32(b, bias_);
    const void* src = x->raw_data();
    void* dst = y->raw_data();
    if (half) {
      float* x32 = ref::ThreadScratch(ref::kScratchConvWidenedX, x->num_elements());
      float* sums = ref::ThreadScratch(ref::kScratchConvSums, n);
      if (x32 == nullptr || sums == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat(node_.Label(), " out of memory"));
      }
      avx512::ConvertArray(dt, DataType::kF32, src, x32, x->num_elements());
      src = x32;
      dst = sums;
    }
    RETURN_IF_ERROR(plan->Execute(node_, "deconvolution", src, dst, bias));
    if (half) avx512::ConvertArray(DataType::kF32, DataType::kF16, dst, y->raw_data(), n);
    return absl::OkStatus();
  }

 private:
  DeconvKernel(const ir::Node& node, ref::nn::ConvAttrs attrs)
      : node_(node), attrs_(std::move(attrs)) {}

  // Whether the run is the non-overlapping 2x upsampling of avx512/deconv_s2.h (a 2-D
  // ConvTranspose with one group, kernel width and stride width 2, kernel height == stride
  // height, no dilation, no padding, no output_padding) on an AVX-512 CPU.
  bool NonOverlapping2x(const ir::Tensor& w, const Geometry& geo) const {
    static const bool cpu_ok = kernels::CpuHasIsa(Isa::kAvx512);
    if (!cpu_ok || w.rank() != 4 || attrs_.group != 1 || w.dim(3) != 2 || geo.strides[1] != 2 ||
        geo.strides[0] != w.dim(2)) {
      return false;
    }
    for (int d = 0; d < 2; ++d) {
      if (geo.dilations[d] != 1 || geo.pad_l[d] != 0 || geo.pad_r[d] != 0) return false;
    }
    return true;
  }

  // That upsampling as fp32 multiply-adds on the AVX-512 units: per output element one fp32 sum
  // of the bias and C products, as the reference (in another order), rounded once. oneDNN's
  // deconvolution pads M to 16 channels and reorders X and Y to blocked layouts around it: on
  // PP-OCR's last layer (M = 1) that was slower than the reference.
  absl::Status RunS2(KernelContext& ctx, const ir::Tensor& x, const ir::Tensor& w,
                     const ir::Tensor* b, int64_t m, const std::vector<int64_t>& out_dims) {
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x.dtype(), out_dims));
    avx512::DeconvS2Args a;
    a.dtype = x.dtype();
    a.x = x.raw_data();
    a.w = w.raw_data();
    a.y = y->raw_data();
    a.bias = BiasAsF32(b, bias_);
    a.n = x.dim(0);
    a.c = x.dim(1);
    a.h = x.dim(2);
    a.wd = x.dim(3);
    a.m = m;
    a.kh = w.dim(2);
    avx512::DeconvS2(a);
    return absl::OkStatus();
  }

  // The reference's geometry (ConvTranspose's Geometry in nn_conv.cc), with oneDNN's end pads;
  // nullopt for what the reference refuses or oneDNN cannot express (a negative pad).
  std::optional<Geometry> Resolve(const ir::Tensor& x, const ir::Tensor& w) const {
    const int nd = x.rank() - 2;
    const ref::nn::WindowAttrs& a = attrs_.window;
    auto sized = [&](const std::vector<int64_t>& v) {
      return v.empty() || static_cast<int>(v.size()) == nd;
    };
    std::vector<int64_t> out_pad = output_padding_;
    if (static_cast<int>(out_pad.size()) == 2 * nd) out_pad.resize(nd);
    std::vector<int64_t> out_shape = output_shape_;
    if (static_cast<int>(out_shape.size()) == nd + 2) {
      out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
    }
    if (!sized(a.strides) || !sized(a.dilations) || !sized(out_pad) || !sized(out_shape) ||
        (!a.pads.empty() && static_cast<int>(a.pads.size()) != 2 * nd)) {
      return std::nullopt;
    }
    if (!a.kernel.empty()) {
      if (static_cast<int>(a.kernel.size()) != nd) return std::nullopt;
      for (int d = 0; d < nd; ++d) {
        if (a.kernel[d] != w.dim(d + 2)) return std::nullopt;
      }
    }
    Geometry geo;
    geo.strides = a.strides.empty() ? std::vector<int64_t>(nd, 1) : a.strides;
    geo.dilations = a.dilations.empty() ? std::vector<int64_t>(nd, 1) : a.dilations;
    geo.out.assign(nd, 0);
    geo.pad_l.assign(nd, 0);
    geo.pad_r.assign(nd, 0);
    const bool same =
        a.auto_pad == ref::nn::AutoPad::kSameUpper || a.auto_pad == ref::nn::AutoPad::kSameLower;
    for (int d = 0; d < nd; ++d) {
      const int64_t s = geo.strides[d], dil = geo.dilations[d], in = x.dim(d + 2);
      const int64_t k = w.dim(d + 2);
      const int64_t op = out_pad.empty() ? 0 : out_pad[d];
      if (s <= 0 || dil <= 0 || op < 0 || (op >= s && op >= dil)) return std::nullopt;
      const int64_t natural = s * (in - 1) + (k - 1) * dil + 1;  // without output_padding
      const int64_t full = natural + op;
      if (!out_shape.empty() || same) {
        geo.out[d] = out_shape.empty() ? in * s : out_shape[d];
        const int64_t total = full - geo.out[d];
        const int64_t half = ref::nn::FloorDiv(total, 2);
        geo.pad_l[d] = a.auto_pad == ref::nn::AutoPad::kSameUpper ? half : total - half;
      } else if (a.auto_pad == ref::nn::AutoPad::kValid || a.pads.empty()) {
        geo.out[d] = full;
      } else {
        geo.pad_l[d] = a.pads[d];
        if (a.pads[d] < 0 || a.pads[nd + d] < 0) return std::nullopt;
        geo.out[d] = full - a.pads[d] - a.pads[nd + d];
      }
      // oneDNN: out = natural - pad_l - pad_r; output_padding's extra positions at the end are
      // a negative pad_r (they receive only the bias).
      geo.pad_r[d] = natural - geo.out[d] - geo.pad_l[d];
      if (geo.out[d] <= 0 || geo.pad_l[d] < 0 || geo.pad_r[d] < -op) return std::nullopt;
    }
    return geo;
  }

  // Creates the primitive and reorders W into its layout; throws dnnl::error.
  void Build(const ir::Tensor& x, const ir::Tensor& w, bool has_bias, int64_t m,
             const Geometry& geo, const std::vector<int64_t>& out_dims, dn::engine& engine,
             PrimitiveRun& p) const {
    const int rank = x.rank();
    const dn::memory::data_type dt = DnnlType(x.dtype());
    const dn::memory::data_type f32 = dn::memory::data_type::f32;
    const int64_t g = attrs_.group;
    const dn::memory::dims x_dims(x.dims().begin(), x.dims().end());
    const dn::memory::dims y_dims(out_dims.begin(), out_dims.end());
    // oneDNN's deconvolution weights are [(g,) OC/g, IC/g, k...]; ONNX's bytes are
    // [(g,) IC/g, OC/g, k...]: the (g)io.. tag says so.
    dn::memory::dims w_dims = {m / g, x.dim(1) / g};
    for (int d = 2; d < rank; ++d) w_dims.push_back(w.dim(d));
    if (g > 1) w_dims.insert(w_dims.begin(), g);
    const dn::memory::desc src(x_dims, dt, DataTag(rank));
    const dn::memory::desc dst(y_dims, dt, DataTag(rank));
    const dn::memory::desc bias({m}, f32, Tag::a);
    const dn::memory::desc w_user(w_dims, dt, WeightTag(rank, g > 1));
    const dn::memory::desc w_any(w_dims, dt, Tag::any);
    const dn::memory::desc src_any(x_dims, dt, Tag::any);
    const dn::memory::desc dst_any(y_dims, dt, Tag::any);
    dn::memory::dims dilations(geo.dilations.begin(), geo.dilations.end());
    for (auto& d : dilations) d -= 1;  // oneDNN counts the gaps
    const dn::memory::dims strides(geo.strides.begin(), geo.strides.end());
    const dn::memory::dims pad_l(geo.pad_l.begin(), geo.pad_l.end());
    const dn::memory::dims pad_r(geo.pad_r.begin(), geo.pad_r.end());
    const auto desc =
        has_bias
            ? dn::deconvolution_forward::desc(dn::prop_kind::forward_inference,
                                              dn::algorithm::deconvolution_direct, src_any, w_any,
                                              bias, dst_any, strides, dilations, pad_l, pad_r)
            : dn::deconvolution_forward::desc(dn::prop_kind::forward_inference,
                                              dn::algorithm::deconvolution_direct, src_any, w_any,
                                              dst_any, strides, dilations, pad_l, pad_r);
    const dn::deconvolution_forward::primitive_desc pd(desc, engine);
    p.weights = ReorderedWeights(w, w_user, pd.weights_desc(), engine);
    p.primitive = dn::deconvolution_forward(pd);
    p.Connect(pd, src, dst, has_bias ? &bias : nullptr, engine);
  }

  const ir::Node& node_;
  ref::nn::ConvAttrs attrs_;
  std::vector<int64_t> output_padding_, output_shape_;
  std::unique_ptr<Kernel> reference_;
  std::optional<PrimitiveRun> plan_;
  std::vector<float> bias_;
  Bf16WeightScan w_scan_;
};

}  // namespace

void RegisterDeconv(Registry& r) {
  KernelDef def{ir::OpType::kConvTranspose, {DataType::kF32}, 0, Backend::kCpu, Isa::kDnnl,
                &DeconvKernel::Create};
  def.supports = &DeconvKernel::Supports;
  AddF32Bf16F16(r, def);
}

}  // namespace kiln::kernels::cpu::dnnl
