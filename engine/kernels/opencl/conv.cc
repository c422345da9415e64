// Conv and FusedConv on OpenCL (NCHW, 1-D and 2-D windows, any group, stride, padding and
// dilation). Groups of many output channels run as tiled GEMMs over the implicit im2col matrix
// (read in place, kernel_base.h's GemmTileLoop); few (depthwise) run directly, one work item per
// output: acc = bias, then acc = fma(x, w, acc) over the input channels of its group and the
// kernel window. Then + Z (the residual of a conv+residual fusion) and the activation, in fp32,
// and one rounding to Y's storage type. X, W, B, Z and Y
// may each be fp32, fp16 or bf16 (a fused kernel reads each boundary value in its own dtype).
// The activation is kernel_base.h's ActivationFunction.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/ref/fused_activation.h"
#include "engine/kernels/cpu/ref/nn_internal.h"
#include "engine/kernels/opencl/kernel_base.h"
#include "engine/kernels/opencl/register.h"

namespace kiln::kernels::opencl {
namespace {

using cpu::ref::Activation;
using cpu::ref::ActKind;

std::string ConvSource(DataType xt, DataType wt, DataType bt, DataType zt, DataType yt, ActKind act,
                       const GemmTiling& tiling) {
  return absl::StrCat(GemmDefines(tiling), StoragePrelude(xt, "X"), StoragePrelude(wt, "W"),
                      StoragePrelude(bt, "B"), StoragePrelude(zt, "Z"), StoragePrelude(yt, "Y"),
                      ActivationFunction(act),
                      R"(
__kernel void conv(__global const X_T* x, ulong xo, __global const W_T* w, ulong wo,
                   __global const B_T* b, ulong bo, __global const Z_T* z, ulong zo,
                   __global Y_T* y, ulong yo, ulong total,
                   uint C, uint H, uint W, uint M, uint OH, uint OW, uint KH, uint KW,
                   uint SH, uint SW, int PH, int PW, uint DH, uint DW, uint G,
                   int has_b, int has_z, float p0, float p1) {
  const size_t i = get_global_id(0);
  if (i >= total) return;
  const uint ox = i % OW;
  ulong t = i / OW;
  const uint oy = t % OH;
  t /= OH;
  const uint m = t % M;
  const ulong n = t / M;
  const uint cg = C / G, g = m / (M / G);
  float acc = has_b ? B_LD(b, bo + m) : 0.0f;
  for (uint c = 0; c < cg; ++c) {
    const ulong xb = xo + ((n * C + g * cg + c) * H) * (ulong)W;
    const ulong wb = wo + (((ulong)m * cg + c) * KH) * KW;
    for (uint ky = 0; ky < KH; ++ky) {
      const int iy = (int)(oy * SH) - PH + (int)(ky * DH);
      if (iy < 0 || iy >= (int)H) continue;
      for (uint kx = 0; kx < KW; ++kx) {
        const int ix = (int)(ox * SW) - PW + (int)(kx * DW);
        if (ix < 0 || ix >= (int)W) continue;
        acc = fma(X_LD(x, xb + (ulong)iy * W + ix), W_LD(w, wb + ky * KW + kx), acc);
      }
    }
  }
  if (has_z) acc = acc + Z_LD(z, zo + i);
  const float v = act(acc, p0, p1);
  Y_ST(v, y, yo + i);
}

// X's value at (iy, ix) of one channel plane from xc; 0 in the padding.
inline float im2col_at(__global const X_T* x, ulong xc, int iy, int ix, uint H, uint W) {
  if (iy < 0 || iy >= (int)H || ix < 0 || ix >= (int)W) return 0.0f;
  return X_LD(x, xc + (ulong)iy * W + ix);
}

// The convolution of one (image, group) as a tiled GEMM (grid dim 2): Y_g [Mg, OH*OW] =
// W_g [Mg, Cg*KH*KW] x im2col(X_g), the im2col matrix read in place. Its k order (c, ky, kx)
// is the direct kernel's.
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void conv_gemm(__global const X_T* x, ulong xo, __global const W_T* w, ulong wo,
               __global const B_T* b, ulong bo, __global const Z_T* z, ulong zo,
               __global Y_T* y, ulong yo,
               uint C, uint H, uint W, uint Mt, uint OH, uint OW, uint KH, uint KW,
               uint SH, uint SW, int PH, int PW, uint DH, uint DW, uint G,
               int has_b, int has_z, float p0, float p1, __global float* P, uint KC) {
  const uint Cg = C / G, M = Mt / G, N = OH * OW, K = Cg * KH * KW;
)",
                      GemmPart("gi"), R"(
  const ulong n = gi / G, g = gi % G;
  const ulong xb = xo + (n * C + g * Cg) * (ulong)H * W;
  const ulong wb = wo + g * (ulong)M * K;
  const ulong yb = (n * Mt + g * M) * (ulong)N;
  const uint row0 = get_group_id(1) * TILE, col0 = get_group_id(0) * TILE;
#define A_AT(r, k) W_LD(w, wb + (ulong)(r) * K + (k))
  // The im2col matrix without divisions in the k loop: each item's TPT columns (fixed over k)
  // as window origins, and each slice's 16 rows k = (c, ky, kx) as offsets, shared.
  int org_y[TPT], org_x[TPT];
#define GEMM_PRELUDE                                  \
  for (int l = 0; l < TPT; ++l) {                     \
    const uint col = col0 + (lid + 256 * l) % TILE;   \
    org_y[l] = (int)((col / OW) * SH) - PH;           \
    org_x[l] = (int)((col % OW) * SW) - PW;           \
  }
  __local ulong k_off[16];
  __local int k_dy[16], k_dx[16];
#define GEMM_SLICE                                            \
  if (lid < 16) {                                             \
    const uint k = k0 + lid;                                  \
    const uint kx = k % KW, ky = (k / KW) % KH, c = k / (KW * KH); \
    k_off[lid] = (ulong)c * H * W;                            \
    k_dy[lid] = (int)(ky * DH);                               \
    k_dx[lid] = (int)(kx * DW);                               \
  }
#define B_AT_STAGED(l, kk) im2col_at(x, xb + k_off[kk], org_y[l] + k_dy[kk], org_x[l] + k_dx[kk], H, W)
)",
                      GemmTileLoop(), R"(
  for (int i = 0; i < TPT; ++i) {
    const uint row = row0 + ty + 16 * i;
    if (row >= M) continue;
    const float bias = has_b ? B_LD(b, bo + g * M + row) : 0.0f;
    for (int j = 0; j < TPT; ++j) {
      const uint col = col0 + tx + 16 * j;
      if (col >= N) continue;
      const ulong at = yb + (ulong)row * N + col;
#if KSPLIT > 1
      P[(ulong)kc * (get_num_groups(2) / KSPLIT) * M * N + at] = acc[i][j];
      continue;
#endif
      // The sum of products, then the bias (the direct kernel starts its sum at the bias:
      // another fp32 order of the same terms).
      float v = acc[i][j] + bias;
      if (has_z) v = v + Z_LD(z, zo + at);
      v = act(v, p0, p1);
      Y_ST(v, y, yo + at);
    }
  }
}

// A split k range's parts added in part order, then the bias, Z and the activation (as above).
__kernel void conv_reduce(__global const float* P, __global const B_T* b, ulong bo,
                          __global const Z_T* z, ulong zo, __global Y_T* y, ulong yo,
                          ulong total, uint Mt, uint N, int has_b, int has_z, float p0, float p1) {
  const ulong i = get_global_id(0);
  if (i >= total) return;
  float v = P[i];
  for (uint s = 1; s < KSPLIT; ++s) v += P[s * total + i];
  if (has_b) v = v + B_LD(b, bo + (i / N) % Mt);
  if (has_z) v = v + Z_LD(z, zo + i);
  v = act(v, p0, p1);
  Y_ST(v, y, yo + i);
}
)");
}

// The fewest output channels per group that run as a tiled GEMM (its tile has 32 to 128 rows).
constexpr int64_t kGemmMinChannels = 8;

class ConvKernel final : public Kernel {
 public:
  ConvKernel(const ir::Node& node, cpu::ref::nn::ConvAttrs attrs, Activation act)
      : node_(node), attrs_(std::move(attrs)), act_(act) {}

  absl::Status Run(KernelContext& ctx) override {
    const bool fused = node_.op == ir::OpType::kFusedConv;
    ASSIGN_OR_RETURN(const cpu::ref::nn::ConvSetup s,
                     cpu::ref::nn::SetupConv(node_, attrs_, ctx, /*same_dtype=*/!fused));
    const ir::Tensor& x = *s.in.x;
    const ir::Tensor& w = *s.in.w;
    const ir::Tensor* z = fused ? ctx.input(3) : nullptr;
    if (z != nullptr && z->dims() != s.out_dims) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Label(), " Z has shape ",
                                                     ir::DimsToString(z->dims()), ", Y ",
                                                     ir::DimsToString(s.out_dims)));
    }
    if (s.win.rank() > 2) {
      return absl::UnimplementedError(absl::StrCat(node_.Label(), " 3-D convolution on OpenCL"));
    }
    const DataType yt = cpu::ref::OutputDtype(node_, 0, x.dtype());
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, yt, s.out_dims));
    if (y->num_elements() == 0) return absl::OkStatus();
    const std::string what = absl::StrCat(node_.Label(), " (OpenCL ", DataTypeOnnxName(yt), ")");
    ASSIGN_OR_RETURN(const ClStorage* ys, StorageOf(*y, what));
    const std::shared_ptr<Device>& dev = ys->shared_device();
    // Each (image, group) as a tiled GEMM when its output channels fill the tile's rows;
    // directly (one item per output) when they are few (depthwise: one).
    const int64_t group_channels = s.m / attrs_.group;
    const bool gemm = group_channels >= kGemmMinChannels;
    const size_t pixels = static_cast<size_t>(y->num_elements() / (y->dim(0) * s.m));
    // W (the GEMM's A) is contiguous along k; the im2col matrix along its columns.
    const uint64_t kdim = static_cast<uint64_t>(w.num_elements() / std::max<int64_t>(w.dim(0), 1));
    const GemmTiling tiling =
        ChooseGemmTiling(*dev, group_channels, pixels, kdim,
                         static_cast<uint64_t>(x.dim(0) * attrs_.group), true, false, gemm);
    Functions& fns = gemm ? gemm_fns_[{tiling.per_item, tiling.k_split}] : direct_;
    if (fns.main == nullptr) {
      const DataType bt = s.in.b ? s.in.b->dtype() : yt, zt = z ? z->dtype() : yt;
      const std::string source = ConvSource(x.dtype(), w.dtype(), bt, zt, yt, act_.kind, tiling);
      fns.main = std::make_unique<ClFunction>(what, source, gemm ? "conv_gemm" : "conv");
      if (tiling.k_split > 1) {
        fns.reduce = std::make_unique<ClFunction>(what, source, "conv_reduce");
      }
    }
    std::unique_ptr<ClFunction>& fn = fns.main;
    ASSIGN_OR_RETURN(cl_kernel k, fn->Get(dev));
    ASSIGN_OR_RETURN(TensorArg xa, ArgOf(x, what));
    ASSIGN_OR_RETURN(TensorArg wa, ArgOf(w, what));
    ASSIGN_OR_RETURN(TensorArg ya, ArgOf(*y, what));
    TensorArg ba = ya, za = ya;  // never read without has_b / has_z
    if (s.in.b != nullptr) {
      ASSIGN_OR_RETURN(ba, ArgOf(*s.in.b, what));
    }
    if (z != nullptr) {
      ASSIGN_OR_RETURN(za, ArgOf(*z, what));
    }
    // 1-D windows run as 2-D ones of height 1.
    const bool one_d = s.win.rank() == 1;
    const auto at = [&](const std::vector<int64_t>& v, int d2) -> cl_uint {
      return static_cast<cl_uint>(one_d ? (d2 == 0 ? 1 : v[0]) : v[d2]);
    };
    const auto pad = [&](int d2) -> cl_int {
      return static_cast<cl_int>(one_d ? (d2 == 0 ? 0 : s.win.pad_begin[0]) : s.win.pad_begin[d2]);
    };
    const cl_ulong total = static_cast<cl_ulong>(y->num_elements());
    const cl_uint c = static_cast<cl_uint>(x.dim(1)), m = static_cast<cl_uint>(s.m);
    const cl_int has_b = s.in.b != nullptr, has_z = z != nullptr;
    float p0 = 0, p1 = 0;
    ActivationParams(act_, p0, p1);
    // The direct kernel takes the element count first; then both take the same arguments.
    int first = 0;
    RETURN_IF_ERROR(SetArgs(*dev, k, what, first, xa, wa, ba, za, ya));
    first += 10;
    if (!gemm) RETURN_IF_ERROR(SetArgs(*dev, k, what, first++, total));
    const cl_uint oh = at(s.win.out, 0), ow = at(s.win.out, 1);
    RETURN_IF_ERROR(SetArgs(*dev, k, what, first, c, at(s.win.in, 0), at(s.win.in, 1), m, oh, ow,
                            at(s.win.kernel, 0), at(s.win.kernel, 1), at(s.win.strides, 0),
                            at(s.win.strides, 1), pad(0), pad(1), at(s.win.dilations, 0),
                            at(s.win.dilations, 1), static_cast<cl_uint>(attrs_.group), has_b,
                            has_z, p0, p1));
    if (!gemm) return Launch1D(*dev, k, total, what);
    // The parts' partial sums (fp32) when k is split; unread otherwise.
    cl_mem partials = ya.mem;
    if (tiling.k_split > 1) {
      const uint64_t bytes = static_cast<uint64_t>(tiling.k_split) * total * sizeof(float);
      if (partials_ == nullptr || partials_->bytes() < bytes || &partials_->device() != dev.get()) {
        ASSIGN_OR_RETURN(partials_, NewBuffer(dev, bytes));
      }
      partials = partials_->mem();
    }
    const cl_uint kc = static_cast<cl_uint>(SplitChunk(kdim, tiling.k_split));
    RETURN_IF_ERROR(SetArgs(*dev, k, what, first + 19, partials, kc));
    const size_t tile = 16 * tiling.per_item;
    const size_t global[3] = {(pixels + tile - 1) / tile * 16,
                              (static_cast<size_t>(group_channels) + tile - 1) / tile * 16,
                              static_cast<size_t>(x.dim(0) * attrs_.group) * tiling.k_split};
    const size_t local[3] = {16, 16, 1};
    RETURN_IF_ERROR(dev->Enqueue(k, 3, global, local, what));
    if (tiling.k_split == 1) return absl::OkStatus();
    ASSIGN_OR_RETURN(cl_kernel red, fns.reduce->Get(dev));
    RETURN_IF_ERROR(SetArgs(*dev, red, what, 0, partials, ba, za, ya, total, m,
                            static_cast<cl_uint>(pixels), has_b, has_z, p0, p1));
    return Launch1D(*dev, red, total, what);
  }

 private:
  const ir::Node& node_;
  cpu::ref::nn::ConvAttrs attrs_;
  Activation act_;
  struct Functions {
    std::unique_ptr<ClFunction> main, reduce;
  };
  Functions direct_;
  std::map<std::pair<int, int>, Functions> gemm_fns_;  // tiled GEMM, by TPT and k split
  std::shared_ptr<ClStorage> partials_;                // of a split k range
};

absl::StatusOr<std::unique_ptr<Kernel>> MakeConv(const ir::Node& node) {
  ASSIGN_OR_RETURN(cpu::ref::nn::ConvAttrs attrs, cpu::ref::nn::ReadConvAttrs(node));
  Activation act;
  if (node.op == ir::OpType::kFusedConv) {
    ASSIGN_OR_RETURN(act, cpu::ref::ReadActivation(node, {{"", ActKind::kNone},
                                                          {"Relu", ActKind::kRelu},
                                                          {"LeakyRelu", ActKind::kLeakyRelu},
                                                          {"Clip", ActKind::kClip},
                                                          {"HardSwish", ActKind::kHardSwish},
                                                          {"Sigmoid", ActKind::kSigmoid},
                                                          {"Swish", ActKind::kSwish}}));
  }
  return std::unique_ptr<Kernel>(new ConvKernel(node, std::move(attrs), act));
}

// NCHW (never a channels-last node, which a device build does not make), float operands, a 1-D
// or 2-D window where the rank is known, and no weight laid out for a CPU kernel.
bool ConvSupports(const ir::Node& node) {
  if (node.has_attr(kChannelsLastAttr) || node.has_attr(kPackedBAttr)) return false;
  for (const ir::Value* v : node.inputs) {
    if (v != nullptr && !ClFloatType(v->dtype)) return false;
  }
  const ir::Value* x = node.input(0);
  return x != nullptr && (!x->shape.rank_known || x->shape.rank() == 3 || x->shape.rank() == 4);
}

}  // namespace

void RegisterConv(Registry& r) {
  const std::vector<DataType> floats = {DataType::kF32, DataType::kF16, DataType::kBF16};
  for (ir::OpType op : {ir::OpType::kConv, ir::OpType::kFusedConv}) {
    KernelDef def{op, floats, 0, Backend::kOpenCl, Isa::kOpenClC, MakeConv};
    def.supports = ConvSupports;
    r.Add(def);
  }
}

}  // namespace kiln::kernels::opencl
