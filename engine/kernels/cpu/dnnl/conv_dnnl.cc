// Conv and FusedConv (2-D, NCHW, and 1-D, NCL) on float, bfloat16 and float16 storage through
// oneDNN's convolution primitive.
// Shape rules and errors are the reference kernels' (cpu/ref/nn_conv.cc, cpu/ref/fused.cc): the
// same attribute readers and SetupConv run first.
//
// Precision (DESIGN.md §5), as the reference: X, W and B are read in their storage type, every
// output element is an fp32 sum of products plus the bias (bf16 products are exact in fp32),
// the fused activation reads that fp32 value, and the result is rounded once to the output
// type. The numbers differ from the reference only by the accumulation order oneDNN chooses.
// bf16 dot-product instructions (vdpbf16ps, AMX) read subnormal inputs as zero, which the
// contract does not allow: a bf16 run with a subnormal in X or W goes to the reference kernel.
// fp16 storage (this CPU has no fp16 arithmetic): the primitive is the fp32 one, on X, W, B and
// Z converted to fp32 (exact, F16C) and writing fp32 sums that are rounded once to fp16 Y.
//
// W is a constant (`Supports`): the primitive and W reordered into the primitive's preferred
// layout are built once, at the first run, and rebuilt only when the input shape or the thread
// count changes. The build stores W in that layout too (PrepackConvWeights, register.h): a
// primitive choosing the layout the build's did then reads those bytes where they lie in the
// blob, with no reorder and no memory of its own. X and Y are the engine's NCHW tensors; oneDNN
// picks their layout inside the primitive, and when it picks a blocked one (nChw16c: its direct and
// brgemm convolutions) X is reordered into it and Y back on each run. On ResNet-50 those reorders
// cost about half the convolution time and the blocked convolutions are several times faster than
// oneDNN's im2col + GEMM convolution, what it runs on NCHW X and Y for most shapes.
//
// Threads: this kernel's own loops (X widened, the residual added, the epilogue) are OpenMP
// regions, not kernels/cpu/parallel.h's pool: they run between oneDNN's primitives, whose
// threads are OpenMP's, and on the pool's threads each loop would wake one set of threads while
// the other still spins.
//
// Channels-last (kChannelsLastAttr, set by passes/layout.h): X and Y are NHWC tensors and the
// primitive reads and writes them as they are, with no reorder; the reference kernel, when it
// runs instead, gets NCHW copies.
// With kChannelsLastYOnly (register.h) X stays the NCHW tensor it is and only Y (and Z) are NHWC:
// a first convolution on a 3-channel image. oneDNN has no NCHW-in, NHWC-out convolution (it
// picks its reference implementation, ~2000x slower), but its "first convolution" kernel reads
// NCHW X and writes nChw16c Y, which with 16 output channels is NHWC Y byte for byte: YuNet's
// 3 -> 16, 640 x 640 stride-2 convolution ran in 0.43 ms against 0.47 on NHWC X plus 0.21 for
// the transpose of X. Any other such run (another M, group or dtype oneDNN has no such kernel
// for) transposes X to an NHWC copy and runs as a channels-last convolution.
//
// 1-D convolutions (X [N, C, L], W [M, C/g, K]: speech front ends and voice-activity detectors)
// are run as the 2-D convolution with H = 1 they equal: X viewed as [N, C, 1, L], W as
// [M, C/g, 1, K], Y as [N, M, 1, OL], with stride and dilation 1 and no padding on H (As2d).
// The bytes are the same, so only the primitive's descriptors change; auto_pad was resolved into
// the window by the shared reference geometry (SetupConv), as for 2-D. The prepacked W of a 1-D
// node is recorded with the 4-D descriptor its primitive chose and read when the run's primitive
// chooses the same, as for 2-D. The layout pass (passes/layout.cc) turns only rank-4 convolutions
// channels-last, and `Supports` refuses a channels-last 1-D node.
//
// Thin 2-D convolutions, running along one spatial axis only (the other 1 wide in X, the kernel
// and Y, unpadded: magika's [N, C, 512, 1] by a 5 x 1 kernel): an fp32 channels-last one with one
// group runs as one GEMM per image on X's own bytes (conv_thin_gemm.h); any other one
// along H only is described to oneDNN as the H = 1 convolution over the same bytes, as 1-D ones
// are (WidthTrivial), which its brgconv runs 2.4x faster than the W = 1 description.
//
// Small images: an fp32 channels-last convolution with one group, at most kGemmMaxPixels
// outputs per image and at least kGemmMinWeightBytes of W runs on the AVX-512 GEMM instead, one
// matrix product per kernel tap (GemmApplies, RunGemm): with few products per weight the work is
// streaming W from memory, which the GEMM overlaps with the arithmetic.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/activation.h"
#include "engine/kernels/cpu/avx512/convert.h"
#include "engine/kernels/cpu/avx512/gemm.h"
#include "engine/kernels/cpu/dnnl/conv_thin_gemm.h"
#include "engine/kernels/cpu/dnnl/dnnl_common.h"
#include "engine/kernels/cpu/dnnl/register.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/fused_activation.h"
#include "engine/kernels/cpu/ref/nn_internal.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace kiln::kernels::cpu::dnnl {
namespace {

using ref::Activation;
using ref::ActKind;
using Tag = dn::memory::format_tag;

// The activations of the reference FusedConv (cpu/ref/fused.cc); a plain Conv has none ("").
const std::vector<std::pair<std::string, ActKind>>& ConvActivations() {
  static const auto* v =
      new std::vector<std::pair<std::string, ActKind>>{{"", ActKind::kNone},
                                                       {"Relu", ActKind::kRelu},
                                                       {"LeakyRelu", ActKind::kLeakyRelu},
                                                       {"Clip", ActKind::kClip},
                                                       {"HardSwish", ActKind::kHardSwish},
                                                       {"Sigmoid", ActKind::kSigmoid},
                                                       {"Swish", ActKind::kSwish}};
  return *v;
}

// Appends `a` as a oneDNN post-op when oneDNN evaluates it on the fp32 sum with the reference
// formula, so the one rounding to the output type still comes last: Relu (x > 0 ? x : 0 * x,
// which differs from the reference only in the sign of a zero), LeakyRelu (one fp32 product)
// and Clip with lo <= hi (two exact comparisons; the reference gives hi everywhere when
// lo > hi, oneDNN does not). HardSwish and Sigmoid evaluate other formulas in oneDNN (relu6
// scaled, a polynomial exp): false, and the kernel applies the reference functor itself.
bool AppendPostOp(const Activation& a, dn::post_ops& ops) {
  switch (a.kind) {
    case ActKind::kNone:
      return true;
    case ActKind::kRelu:
      ops.append_eltwise(1.0f, dn::algorithm::eltwise_relu, 0.0f, 0.0f);
      return true;
    case ActKind::kLeakyRelu:
      ops.append_eltwise(1.0f, dn::algorithm::eltwise_relu, a.alpha, 0.0f);
      return true;
    case ActKind::kClip:
      if (!(a.lo <= a.hi)) return false;
      ops.append_eltwise(1.0f, dn::algorithm::eltwise_clip_v2, a.lo, a.hi);
      return true;
    default:
      return false;
  }
}

// A memory descriptor as kPrepackedWeightsAttr words: oneDNN's version and the size of its
// descriptor struct (a reader built against another oneDNN takes no prepacked W), then the
// struct's bytes.
std::vector<int64_t> DescToWords(const dn::memory::desc& d) {
  const dnnl_version_t* v = dnnl_version();
  const size_t bytes = sizeof(d.data);
  std::vector<int64_t> words = {v->major * 1000000 + v->minor * 1000 + v->patch,
                                static_cast<int64_t>(bytes)};
  words.resize(2 + (bytes + 7) / 8, 0);
  std::memcpy(words.data() + 2, &d.data, bytes);
  return words;
}

std::optional<dn::memory::desc> DescFromWords(const std::vector<int64_t>& words) {
  const dnnl_version_t* v = dnnl_version();
  const size_t bytes = sizeof(dnnl_memory_desc_t);
  if (words.size() != 2 + (bytes + 7) / 8 ||
      words[0] != v->major * 1000000 + v->minor * 1000 + v->patch ||
      words[1] != static_cast<int64_t>(bytes)) {
    return std::nullopt;
  }
  dnnl_memory_desc_t raw;
  std::memcpy(&raw, words.data() + 2, bytes);
  return dn::memory::desc(raw);
}

// A channels-last node's context as the NCHW kernel code reads it: X with its NCHW dims over
// the same NHWC bytes (only the shape checks and the primitive's descriptors read the dims), and
// output 0 allocated with the NHWC dims of the NCHW dims asked for.
class ChannelsLastView final : public ForwardingContext {
 public:
  // `x_nhwc`: X is NHWC (else the NCHW tensor it is, kChannelsLastYOnly, and read as it is).
  explicit ChannelsLastView(KernelContext& ctx, bool x_nhwc = true) : ForwardingContext(ctx) {
    const ir::Tensor* x = ctx.input(0);
    if (x_nhwc && x != nullptr && x->rank() == 4) {
      const auto& d = x->dims();
      x_ = x->Reshaped({d[0], d[3], d[1], d[2]});
    }
  }
  const ir::Tensor* input(int i) const override {
    return i == 0 && x_.defined() ? &x_ : inner().input(i);
  }
  absl::StatusOr<ir::Tensor*> output(int i, DataType dtype, std::vector<int64_t> dims) override {
    if (i == 0 && dims.size() == 4) dims = {dims[0], dims[2], dims[3], dims[1]};
    return inner().output(i, dtype, std::move(dims));
  }

 private:
  ir::Tensor x_;
};

// `ctx` with input 0 replaced by `x` (a kChannelsLastYOnly run on an NHWC copy of X).
class XReplaced final : public ForwardingContext {
 public:
  XReplaced(KernelContext& ctx, const ir::Tensor* x) : ForwardingContext(ctx), x_(x) {}
  const ir::Tensor* input(int i) const override { return i == 0 ? x_ : inner().input(i); }

 private:
  const ir::Tensor* x_;
};

// A convolution's context whose one output is kept here, in memory of its own.
class OwnOutputContext : public KernelContext {
 public:
  int num_outputs() const override { return 1; }
  absl::StatusOr<ir::Tensor*> output(int i, DataType dtype, std::vector<int64_t> dims) override {
    if (i != 0) return absl::InternalError("a convolution has one output");
    ASSIGN_OR_RETURN(y_, ir::Tensor::AllocateUninitialized(dtype, std::move(dims)));
    return &y_;
  }
  bool output_requested(int i) const override { return i == 0; }
  const ir::Tensor& y() const { return y_; }

 private:
  ir::Tensor y_;
};

// A context over NCHW copies, for the reference kernel of a channels-last node: X (input 0)
// and the residual Z (input 3) replaced, output 0 kept here.
class NchwCopyContext final : public OwnOutputContext {
 public:
  NchwCopyContext(KernelContext& ctx, const ir::Tensor* x, const ir::Tensor* z)
      : ctx_(ctx), x_(x), z_(z) {}
  int num_inputs() const override { return ctx_.num_inputs(); }
  const ir::Tensor* input(int i) const override {
    return i == 0 ? x_ : i == 3 ? z_ : ctx_.input(i);
  }

 private:
  KernelContext& ctx_;
  const ir::Tensor* x_;
  const ir::Tensor* z_;
};

// 2-D or 1-D Conv / FusedConv = act(Conv(X, W) + B [+ Z]) through one oneDNN convolution (Z, the
// residual of a conv+residual fusion, through the primitive's sum post-op).
class ConvKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(ref::nn::ConvAttrs attrs,
                     ref::nn::ReadConvAttrs(node, /*channels_last_ok=*/true));
    ASSIGN_OR_RETURN(Activation act, ref::ReadActivation(node, ConvActivations()));
    auto k = std::unique_ptr<ConvKernel>(new ConvKernel(node, std::move(attrs), act));
    k->channels_last_ = node.GetInt(kChannelsLastAttr, 0) != 0;
    k->x_nchw_ = node.GetInt(kChannelsLastAttr, 0) == kChannelsLastYOnly;
    k->prepacked_words_ = node.GetInts(kPrepackedWeightsAttr, {});
    // The reference kernel of the node runs what oneDNN may not: empty tensors, bf16
    // subnormals, shapes no oneDNN implementation takes. It is an NCHW kernel: a channels-last
    // node's is made from an NCHW copy of the node (kept here, as kernels keep their node).
    k->nchw_node_ = node;
    k->nchw_node_.attrs.erase(kChannelsLastAttr);
    ASSIGN_OR_RETURN(k->reference_, ReferenceKernel(k->nchw_node_));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  // X, W, B and Y of one dtype, W a 4-D (2-D convolution) or 3-D (1-D convolution, not
  // channels-last) constant that is not an overridable graph input, and an activation of the
  // reference FusedConv (the reference reports a bad one). X's rank is not asked (inside an If
  // branch it may be unknown): a run whose X rank is not W's fails in SetupConv with the
  // reference's error.
  static bool Supports(const ir::Node& node) {
    const ir::Value* x = node.input(0);
    const ir::Value* w = node.input(1);
    const ir::Value* b = node.input(2);
    const ir::Value* y = node.outputs.empty() ? nullptr : node.outputs[0];
    if (!x || !w || !y || !w->constant || w->is_graph_input) return false;
    const int w_rank = w->constant->rank();
    if (w_rank != 4 && (w_rank != 3 || node.GetInt(kChannelsLastAttr, 0) != 0)) return false;
    const ir::Value* z = node.input(3);  // FusedConv's residual
    if (w->dtype != x->dtype || (b && b->dtype != x->dtype) || (z && z->dtype != x->dtype)) {
      return false;
    }
    if (y->dtype != x->dtype && y->dtype != DataType::kUndefined) return false;
    return ref::ReadActivation(node, ConvActivations()).ok();
  }

  absl::Status Run(KernelContext& ctx) override {
    prepacked_ = ctx.input(kPrepackedWeightsInput);
    if (!channels_last_) return RunOn(ctx);
    if (ctx.input(0) == nullptr || ctx.input(0)->rank() != 4) {
      return ref::InvalidNode(node_, "a channels-last convolution needs a rank-4 X");
    }
    ChannelsLastView view(ctx, /*x_nhwc=*/!x_nchw_);
    return RunOn(view, x_nchw_);
  }

 private:
  // The run on NCHW dims (`ctx` may be a ChannelsLastView over NHWC tensors); `x_nchw`: X is
  // the NCHW tensor of a kChannelsLastYOnly node, Y NHWC.
  absl::Status RunOn(KernelContext& ctx, bool x_nchw = false) {
    ASSIGN_OR_RETURN(const ref::nn::ConvSetup s, ref::nn::SetupConv(node_, attrs_, ctx, true));
    const ir::Tensor& x = *s.in.x;
    const ir::Tensor& w = *s.in.w;
    const DataType dt = x.dtype();
    // Supports admits 1-D and 2-D convolutions only; a 3-D node made here directly (tests)
    // runs the reference.
    if (s.win.rank() > 2 || x.num_elements() == 0 || ir::NumElementsOf(s.out_dims) == 0) {
      return RunReference(ctx, s, x_nchw);
    }
    // fp16, and bf16 with a subnormal in X or W (which the bf16 dot products would read as
    // zero), run the fp32 primitive on X widened exactly, W widened once: the contract's fp32
    // arithmetic on the rounded values. (The reference kernel ran those bf16 runs: PP-OCRv4 rec
    // under bf16-layernorm, whose activations carry subnormals, took 43 ms against 23 in fp32.)
    const bool half =
        dt == DataType::kF16 || (dt == DataType::kBF16 && (!w_scan_.Allowed(w) || !Bf16Allowed(x)));
    // The GEMM routes read NHWC X: a kChannelsLastYOnly run takes oneDNN's NCHW-X kernel.
    if (!x_nchw && GemmApplies(s)) return RunGemm(ctx, s);
    if (const int axis = ThinConvGemm::Axis(s, attrs_.group, channels_last_);
        !x_nchw && axis >= 0) {
      return RunThinGemm(ctx, s, axis);
    }
    const bool widened = half && dt == DataType::kBF16;
    // A kChannelsLastYOnly node's runs on an NHWC copy of X have plans of their own.
    std::optional<Plan>& cache = x_nchw_ && !x_nchw ? copied_x_plan_[widened]
                                 : widened          ? widened_plan_
                                                    : plan_;
    ASSIGN_OR_RETURN(Plan * plan,
                     CachedRun(cache, x, w, omp_get_max_threads(), node_, "convolution",
                               /*any_error_unimplemented=*/false, [&](dn::engine& engine, Plan& p) {
                                 Build(s, engine, p, half, x_nchw);
                               }));
    if (plan == nullptr && x_nchw) return RunOnCopiedX(ctx, s);
    if (plan == nullptr) return RunReference(ctx, s, x_nchw);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, dt, s.out_dims));
    const int64_t n = y->num_elements();
    // Without the activation as a post-op, the primitive writes the fp32 sums: into Y when Y is
    // fp32, else into a scratch buffer that the activation epilogue rounds into Y. An fp16
    // convolution's primitive always writes fp32 (act(sums) with the post-op) to the scratch.
    float* sums = nullptr;
    if (!plan->post_op || half) {
      if (dt == DataType::kF32) {
        sums = y->data<float>();
      } else {
        // The calling thread's, shared by the convolutions it runs (ref/common.h).
        sums = ref::ThreadScratch(ref::kScratchConvSums, n);
        if (sums == nullptr) return absl::ResourceExhaustedError("out of memory for the sums");
      }
    }
    // The residual Z (conv+residual fusion): the primitive adds the destination's prior
    // contents (its sum post-op, before the activation), so Z is copied there first, unless
    // Y is Z's bytes already (the memory plan gives Y Z's slot when Z dies here).
    if (const ir::Tensor* z = ctx.input(3)) {
      RETURN_IF_ERROR(CheckResidual(*z, *y));
      if (sums == nullptr || dt == DataType::kF32) {
        // On the threads: between two parallel primitives (ResNet-50: ~2% of a 2-thread run).
        if (y->raw_data() != z->raw_data()) {
          ref::ParallelCopy(y->raw_data(), z->raw_data(), z->byte_size());
        }
      } else {
        avx512::ConvertArray(dt, DataType::kF32, z->raw_data(), sums, n);  // exact
      }
    }
    const float* bias = BiasAsF32(s.in.b, bias_);
    const void* src = x.raw_data();
    if (half) {
      float* x32 = ref::ThreadScratch(ref::kScratchConvWidenedX, x.num_elements());
      if (x32 == nullptr) return absl::ResourceExhaustedError("out of memory widening X");
      avx512::ConvertArray(dt, DataType::kF32, src, x32, x.num_elements());
      src = x32;
    }
    RETURN_IF_ERROR(plan->Execute(node_, "convolution", src,
                                  sums ? static_cast<void*>(sums) : y->raw_data(), bias));
    if (half && plan->post_op) {
      avx512::ConvertArray(DataType::kF32, dt, sums, y->raw_data(), n);
    } else if (sums != nullptr) {
      ApplyActivation(sums, *y);
    }
    return absl::OkStatus();
  }

  // Whether the run goes to the AVX-512 GEMM (avx512/gemm.h) instead of oneDNN: an fp32
  // channels-last 2-D convolution with one group on small images (at most kGemmMaxPixels
  // outputs per image: ResNet-50's 7 x 7 stage) whose W is too large to stay in a core's L2
  // (kGemmMinWeightBytes): each weight serves few products and the convolution streams W from
  // memory. oneDNN ran those at ~115 GFLOP/s on one core; the GEMM, which fetches the next
  // weight strip while it computes, at ~150. Smaller weights stay on oneDNN (MobileNetV2's
  // 7 x 7 stage ran ~5% slower on 2 threads through the GEMM).
  bool GemmApplies(const ref::nn::ConvSetup& s) const {
    static const bool cpu_ok = kernels::CpuHasIsa(Isa::kAvx512);
    return cpu_ok && channels_last_ && s.in.x->dtype() == DataType::kF32 && attrs_.group == 1 &&
           s.in.w->rank() == 4 && s.out_dims.size() == 4 && s.win.rank() == 2 &&
           s.out_dims[2] * s.out_dims[3] <= kGemmMaxPixels &&
           s.in.w->byte_size() >= kGemmMinWeightBytes;
  }

  // The convolution as one GEMM per kernel tap (kh, kw): Y [N*OH*OW, M] += A_tap W_tap^T with
  // A_tap [N*OH*OW, C] the input pixel each output reads through that tap (zero where it falls in
  // the padding; X itself for a 1x1 kernel with unit strides and no padding) and W_tap [M, C].
  // Each tap's epilogue adds its fp32 sum to Y (the first tap to B, or to nothing): every output
  // is one fp32 sum of its K * taps products and the bias, grouped by tap. Then Y = act(Y + Z).
  // W is packed at the first run of a weight buffer (as the oneDNN path reorders it).
  absl::Status RunGemm(KernelContext& ctx, const ref::nn::ConvSetup& s) {
    const ir::Tensor& x = *s.in.x;  // NCHW dims over NHWC bytes
    const ir::Tensor& w = *s.in.w;
    const int64_t c = w.dim(1), m = w.dim(0), kh = w.dim(2), kw = w.dim(3), taps = kh * kw;
    // Tap t's B[k][n] = W[n][k][t]: element (n, k, t) of W at (n * C + k) * taps + t.
    const int64_t strip = avx512::PackedBElemsF32(c, m);  // one tap's B
    const float* packed = PrepackedGemmFits(prepacked_, prepacked_words_,
                                            GemmWords(c, m, taps, /*line=*/false), taps * strip)
                              ? static_cast<const float*>(prepacked_->raw_data())
                              : nullptr;
    if (packed == nullptr) {
      packed = packed_w_.Get(w.data<float>(), c, m, /*b_rs=*/taps, /*b_cs=*/c * taps,
                             /*count=*/taps, /*offset=*/1);
      if (packed == nullptr) return absl::ResourceExhaustedError("out of memory packing W");
    }
    gemm_w_ = {packed, taps * strip};
    line_laid_out_ = false;
    gemm_shape_ = {c, m, taps};
    const ref::nn::Window& win = s.win;
    const int64_t batch = x.dim(0), h = x.dim(2), wd = x.dim(3);
    const int64_t oh = s.out_dims[2], ow = s.out_dims[3], pixels = batch * oh * ow;
    const bool in_place = taps == 1 && win.strides[0] == 1 && win.strides[1] == 1 &&
                          win.pad_begin[0] == 0 && win.pad_begin[1] == 0 && oh == h && ow == wd;
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, DataType::kF32, s.out_dims));
    ASSIGN_OR_RETURN(const float* zp, ResidualF32(ctx, *y));
    if (!in_place) gathered_.resize(pixels * c);
    for (int64_t t = 0; t < taps; ++t) {
      const float* a = x.data<float>();
      if (!in_place) {
        const int64_t ti = t / kw, tj = t % kw;
#pragma omp parallel for schedule(static) if (pixels * c >= (int64_t{1} << 15))
        for (int64_t p = 0; p < pixels; ++p) {
          const int64_t n = p / (oh * ow), i = p / ow % oh, j = p % ow;
          const int64_t ii = i * win.strides[0] - win.pad_begin[0] + ti * win.dilations[0];
          const int64_t jj = j * win.strides[1] - win.pad_begin[1] + tj * win.dilations[1];
          float* row = gathered_.data() + p * c;
          if (ii < 0 || ii >= h || jj < 0 || jj >= wd) {
            std::memset(row, 0, c * sizeof(float));
          } else {
            std::memcpy(row, a + ((n * h + ii) * wd + jj) * c, c * sizeof(float));
          }
        }
        a = gathered_.data();
      }
      avx512::GemmArgs g;
      g.m = pixels;
      g.n = m;
      g.k = c;
      g.a = a;
      g.a_rs = c;
      g.b_packed_f32 = packed + t * strip;
      g.y = y->raw_data();
      g.y_rs = m;
      // 1 * sum + 1 * (B, or Y so far): the one rounding of that addition.
      if (t > 0 || s.in.b != nullptr) {
        g.scale = true;
        g.c = t > 0 ? y->raw_data() : s.in.b->raw_data();
        g.c_rs = t > 0 ? m : 0;
        g.c_cs = 1;
      }
      avx512::GemmAvx512(g);
    }
    FinishGemm(zp, *y);
    return absl::OkStatus();
  }

  // The convolution along one spatial axis (ThinConvGemm::Axis) as one GEMM per image
  // (conv_thin_gemm.h), then Y = act(Y + Z).
  absl::Status RunThinGemm(KernelContext& ctx, const ref::nn::ConvSetup& s, int axis) {
    const int64_t c = s.in.w->dim(1), m = s.in.w->dim(0), taps = s.win.kernel[axis];
    const float* packed = thin_.PackedW(s, axis, prepacked_, prepacked_words_);
    gemm_w_ = {packed, ThinConvGemm::PackedFloats(c, m, taps)};
    gemm_shape_ = {c, m, taps};
    line_laid_out_ = true;
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, DataType::kF32, s.out_dims));
    ASSIGN_OR_RETURN(const float* zp, ResidualF32(ctx, *y));
    thin_.Run(s, axis, packed, y->data<float>());
    FinishGemm(zp, *y);
    return absl::OkStatus();
  }

  // The GEMM routes' fp32 residual Z (input 3; nullptr without one), checked against Y and kept
  // aside when Y is Z's bytes (the GEMMs write Y before Z is added).
  absl::StatusOr<const float*> ResidualF32(KernelContext& ctx, const ir::Tensor& y) {
    const ir::Tensor* z = ctx.input(3);
    if (z == nullptr) return nullptr;
    RETURN_IF_ERROR(CheckResidual(*z, y));
    const float* zp = z->data<float>();
    if (z->raw_data() == y.raw_data()) {
      residual_.assign(zp, zp + z->num_elements());
      zp = residual_.data();
    }
    return zp;
  }

  // The GEMM routes' epilogue: Y = act(Y + Z) (Z from ResidualF32, or nullptr).
  void FinishGemm(const float* zp, ir::Tensor& y) const {
    if (zp != nullptr) {
      float* yp = y.data<float>();
      const int64_t n = y.num_elements();
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 15))
      for (int64_t i = 0; i < n; ++i) yp[i] += zp[i];
    }
    if (act_.kind != ActKind::kNone) ApplyActivation(y.data<float>(), y);
  }

  // The residual Z must be Y's dims and dtype (it is added element by element).
  absl::Status CheckResidual(const ir::Tensor& z, const ir::Tensor& y) const {
    if (z.dims() == y.dims() && z.dtype() == y.dtype()) return absl::OkStatus();
    return ref::InvalidNode(node_, "Z of ", DataTypeName(z.dtype()), " ",
                            ir::DimsToString(z.dims()), " does not match Y (",
                            DataTypeName(y.dtype()), " ", ir::DimsToString(y.dims()), ")");
  }

  // A kChannelsLastYOnly run that oneDNN has no NCHW-X kernel for: on an NHWC copy of X, as a
  // channels-last convolution (`ctx` permutes Y's dims already).
  absl::Status RunOnCopiedX(KernelContext& ctx, const ref::nn::ConvSetup& s) {
    ASSIGN_OR_RETURN(ir::Tensor nhwc, ir::ChannelsLastCopy(*s.in.x, /*to_channels_last=*/true));
    const ir::Tensor x = nhwc.Reshaped(s.in.x->dims());  // NCHW dims over NHWC bytes
    XReplaced copied(ctx, &x);
    return RunOn(copied, /*x_nchw=*/false);
  }

  // The reference kernel; a channels-last node's on NCHW copies of X (unless `x_nchw`: X is
  // NCHW already) and Y.
  absl::Status RunReference(KernelContext& ctx, const ref::nn::ConvSetup& s, bool x_nchw) {
    if (!channels_last_) return reference_->Run(ctx);
    ir::Tensor x;
    if (!x_nchw) {
      ASSIGN_OR_RETURN(x, ir::ChannelsLastCopy(s.in.x->Reshaped(NhwcDims(s.in.x->dims())),
                                               /*to_channels_last=*/false));
    }
    ir::Tensor z;
    if (const ir::Tensor* zc = ctx.input(3)) {
      ASSIGN_OR_RETURN(z, ir::ChannelsLastCopy(*zc, /*to_channels_last=*/false));
    }
    NchwCopyContext nchw(ctx, x_nchw ? s.in.x : &x, z.defined() ? &z : nullptr);
    RETURN_IF_ERROR(reference_->Run(nchw));
    ASSIGN_OR_RETURN(ir::Tensor y, ir::ChannelsLastCopy(nchw.y(), /*to_channels_last=*/true));
    // `ctx` asks for the NHWC dims of the NCHW dims given.
    ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, nchw.y().dtype(), nchw.y().dims()));
    std::memcpy(out->raw_data(), y.raw_data(), y.byte_size());
    return absl::OkStatus();
  }

  static std::vector<int64_t> NhwcDims(const std::vector<int64_t>& d) {
    return {d[0], d[2], d[3], d[1]};
  }

  // The primitive's run (dnnl_common.h) and whether the activation runs inside it.
  struct Plan : PrimitiveRun {
    bool post_op = false;
  };

  ConvKernel(const ir::Node& node, ref::nn::ConvAttrs attrs, Activation act)
      : node_(node), attrs_(std::move(attrs)), act_(act) {}

  // A 1-D convolution's dims or window values as its 2-D twin's (H = 1): `v` with `h`
  // inserted before its last value ([N, C, L] -> [N, C, 1, L], [M, C/g, K] -> [M, C/g, 1, K],
  // strides [s] -> [1, s]); a 2-D convolution's as they are.
  // A 2-D convolution running along H only (WidthTrivial) is folded the same way: its W entry
  // dropped, then H = 1 inserted ([N, C, H, 1] -> [N, C, 1, H], strides [sh, sw] -> [1, sh]).
  static dn::memory::dims As2d(const std::vector<int64_t>& v, const ref::nn::Window& win, int64_t h,
                               bool fold_width = false) {
    dn::memory::dims out(v.begin(), v.end());
    if (fold_width && win.rank() == 2 && !out.empty()) out.pop_back();
    if ((win.rank() == 1 || fold_width) && !out.empty()) out.insert(out.end() - 1, h);
    return out;
  }

  // A 2-D convolution along H alone (magika's [N, C, 512, 1] by a 5 x 1 kernel: a 1-D
  // convolution written as 2-D). oneDNN's 2-D convolutions vectorise along W, and on a 1-wide W
  // its brgconv ran it at 61 GFLOP/s on one core; described as the H = 1 convolution over the
  // same bytes (NCHW [N, C, H, 1] and [N, C, 1, H] are one layout, NHWC ones too, and so are
  // OIHW [M, C, KH, 1] and [M, C, 1, KH]) at 145 GFLOP/s.
  static bool WidthTrivial(const ref::nn::ConvSetup& s) {
    return AxisTrivial(s, 1) && s.win.in[0] > 1;
  }

  // Creates the primitive and reorders W into its layout; throws dnnl::error (dnnl_unimplemented
  // when `x_nchw`, NCHW X and NHWC Y, has no kernel but oneDNN's reference one).
  void Build(const ref::nn::ConvSetup& s, dn::engine& engine, Plan& p, bool widened,
             bool x_nchw) const {
    const ir::Tensor& w = *s.in.w;
    const dn::memory::data_type dt =
        widened ? dn::memory::data_type::f32 : DnnlType(s.in.x->dtype());
    const dn::memory::data_type f32 = dn::memory::data_type::f32;
    const int64_t g = attrs_.group;
    const ref::nn::Window& win = s.win;
    // The primitive is 2-D: a 1-D convolution's tensors are viewed with H = 1 (the same bytes),
    // and so are those of a 2-D one along H alone (WidthTrivial).
    const bool fold = WidthTrivial(s);
    // NCHW X to NHWC Y: nChw16c Y, NHWC's bytes with 16 channels.
    if (x_nchw && (s.m != 16 || g != 1 || fold || win.rank() != 2)) {
      throw dn::error(dnnl_unimplemented, "no NCHW-X, NHWC-Y convolution for this shape");
    }
    const dn::memory::dims x_dims = As2d(s.in.x->dims(), win, 1, fold);
    const dn::memory::dims y_dims = As2d(s.out_dims, win, 1, fold);
    dn::post_ops ops;
    if (node_.input(3) != nullptr) ops.append_sum(1.0f);  // + Z, in fp32, before the activation
    p.post_op = AppendPostOp(act_, ops);
    dn::primitive_attr attr;
    attr.set_post_ops(ops);

    const Tag layout = channels_last_ ? Tag::nhwc : Tag::nchw;
    // The engine's layouts of X, Y and B.
    const dn::memory::desc src(x_dims, dt, x_nchw ? Tag::nchw : layout);
    const dn::memory::desc dst(y_dims, p.post_op ? dt : f32, x_nchw ? Tag::nChw16c : layout);
    const dn::memory::desc bias({s.m}, f32, Tag::a);
    // Grouped weights are [g, M/g, C/g, kh, kw] in oneDNN, the same bytes as ONNX's W.
    dn::memory::dims w_dims = As2d(w.dims(), win, 1, fold);
    if (g > 1) {
      w_dims[0] /= g;
      w_dims.insert(w_dims.begin(), g);
    }
    // W's own bytes (fp16 ones are widened by ReorderedWeights; bf16 ones by the reorder).
    const dn::memory::desc w_user(w_dims, DnnlType(w.dtype()), g > 1 ? Tag::goihw : Tag::oihw);
    const dn::memory::desc w_any(w_dims, dt, Tag::any);
    const dn::memory::dims strides = As2d(win.strides, win, 1, fold);
    dn::memory::dims dilations = As2d(win.dilations, win, 1, fold);
    for (int64_t& d : dilations) d -= 1;  // oneDNN counts the gaps: ONNX dilation - 1
    const dn::memory::dims pad_l = As2d(win.pad_begin, win, 0, fold);
    const dn::memory::dims pad_r = As2d(win.pad_end, win, 0, fold);
    // Channels-last tensors are taken as they are (oneDNN's NHWC convolutions are as fast as
    // its blocked ones); NCHW ones in whatever layout the primitive prefers, but for Y with a
    // residual: the sum post-op reads Z where it was copied, Y itself.
    const dn::memory::desc src_any = channels_last_ ? src : dn::memory::desc(x_dims, dt, Tag::any);
    const dn::memory::desc dst_any = channels_last_ || node_.input(3) != nullptr
                                         ? dst
                                         : dn::memory::desc(y_dims, dst.data_type(), Tag::any);
    const auto desc =
        s.in.b ? dn::convolution_forward::desc(dn::prop_kind::forward_inference,
                                               dn::algorithm::convolution_direct, src_any, w_any,
                                               bias, dst_any, strides, dilations, pad_l, pad_r)
               : dn::convolution_forward::desc(dn::prop_kind::forward_inference,
                                               dn::algorithm::convolution_direct, src_any, w_any,
                                               dst_any, strides, dilations, pad_l, pad_r);
    const dn::convolution_forward::primitive_desc pd(desc, attr, engine);
    if (x_nchw && std::string(pd.impl_info_str()).rfind("ref", 0) == 0) {
      throw dn::error(dnnl_unimplemented, "only oneDNN's reference NCHW-X, NHWC-Y convolution");
    }
    if (PrepackedFits(pd.weights_desc())) {
      // The build's bytes in this very layout (only read: the primitive's weights are const).
      p.weights = dn::memory(pd.weights_desc(), engine, const_cast<void*>(prepacked_->raw_data()));
    } else {
      p.weights = ReorderedWeights(w, w_user, pd.weights_desc(), engine);
    }
    p.primitive = dn::convolution_forward(pd);
    p.Connect(pd, src, dst, s.in.b != nullptr ? &bias : nullptr, engine);
  }

  // Y = act(sums), rounded once to Y's type (the reference epilogue; `sums` may be Y itself).
  // Sigmoid and Swish (SiLU) on AVX-512 (avx512/activation.h: within the bound math.h states,
  // the reference's std::exp being an ulp off as well; a scalar exp per output cost more than
  // the convolution on YOLO-style detectors), HardSwish too (the reference's bits: x / 6 + 1/2
  // clamped, times x), in chunks on the threads.
  void ApplyActivation(const float* sums, ir::Tensor& y) const {
    const int64_t n = y.num_elements();
    static const bool avx512 = kernels::CpuHasIsa(Isa::kAvx512);
    if (avx512 && (act_.kind == ActKind::kSigmoid || act_.kind == ActKind::kSwish ||
                   act_.kind == ActKind::kHardSwish)) {
      avx512::ActParams p;
      p.alpha = 1.0f;
      const avx512::ActFn fn = act_.kind == ActKind::kSigmoid ? avx512::ActFn::kSigmoid
                               : act_.kind == ActKind::kSwish ? avx512::ActFn::kSwish
                                                              : avx512::ActFn::kHardSwish;
      constexpr int64_t kChunk = 4096;
      const int64_t chunks = (n + kChunk - 1) / kChunk;
      float* sums_rw = const_cast<float*>(sums);  // the kernel's own sums (scratch or Y)
#pragma omp parallel for schedule(static) if (chunks >= 4)
      for (int64_t c = 0; c < chunks; ++c) {
        const int64_t at = c * kChunk, len = std::min(kChunk, n - at);
        if (y.dtype() == DataType::kF32) {
          avx512::ActivationF32(fn, p, sums + at, y.data<float>() + at, len);
        } else {
          avx512::ActivationF32(fn, p, sums + at, sums_rw + at, len);
          avx512::ConvertArray(DataType::kF32, y.dtype(), sums_rw + at,
                               static_cast<char*>(y.raw_data()) + at * DataTypeSize(y.dtype()),
                               len);
        }
      }
      return;
    }
    ref::WithActivation<float>(act_, [&](const auto& f) {
      if (y.dtype() == DataType::kF32) {
        float* yp = y.data<float>();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) yp[i] = f(sums[i]);
      } else if (y.dtype() == DataType::kF16) {
        Float16* yp = y.data<Float16>();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) yp[i] = ref::Store<Float16>(f(sums[i]));
      } else {
        BFloat16* yp = y.data<BFloat16>();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) yp[i] = ref::Store<BFloat16>(f(sums[i]));
      }
    });
  }

  // Whether the build's prepacked W (input kPrepackedWeightsInput, its layout in the node's
  // kPrepackedWeightsAttr) is W in layout `want`: the same descriptor, as many bytes.
  bool PrepackedFits(const dn::memory::desc& want) const {
    if (prepacked_ == nullptr || prepacked_->dtype() != DataType::kU8) return false;
    const std::optional<dn::memory::desc> have = DescFromWords(prepacked_words_);
    return have && *have == want && prepacked_->byte_size() == want.get_size();
  }

 public:
  // W as the last run laid it out (the build's PrepackConvWeights): in the primitive's layout,
  // or packed for the GEMM path; nullopt when the reference ran.
  std::optional<PrepackedConvWeights> LaidOutWeights() const {
    const void* data = nullptr;
    size_t size = 0;
    PrepackedConvWeights out;
    if (plan_ && plan_->primitive) {
      const dn::memory::desc d = plan_->weights.get_desc();
      out.desc = DescToWords(d);
      data = plan_->weights.get_data_handle();
      size = d.get_size();
    } else if (gemm_w_.first != nullptr) {
      const std::array<int64_t, 4> words =
          GemmWords(gemm_shape_[0], gemm_shape_[1], gemm_shape_[2], line_laid_out_);
      out.desc.assign(words.begin(), words.end());
      data = gemm_w_.first;
      size = static_cast<size_t>(gemm_w_.second) * sizeof(float);
    } else {
      return std::nullopt;
    }
    auto t = ir::Tensor::AllocateUninitialized(DataType::kU8, {static_cast<int64_t>(size)});
    if (!t.ok()) return std::nullopt;
    std::memcpy(t->raw_data(), data, size);
    out.bytes = *std::move(t);
    return out;
  }

 private:
  static constexpr int64_t kGemmMaxPixels = 64;
  static constexpr int64_t kGemmMinWeightBytes = int64_t{2} << 20;

  const ir::Node& node_;
  ref::nn::ConvAttrs attrs_;
  Activation act_;
  // The GEMM path's W packed per tap, one tap's A, and Z when Y is its bytes.
  avx512::PackedWeightF32 packed_w_;
  std::vector<float> gathered_, residual_;
  ir::Node nchw_node_;
  std::unique_ptr<Kernel> reference_;
  std::optional<Plan> plan_;
  std::optional<Plan> widened_plan_;       // bf16 runs with a subnormal: the fp32 primitive
  std::optional<Plan> copied_x_plan_[2];   // kChannelsLastYOnly on an NHWC copy of X (widened)
  const ir::Tensor* prepacked_ = nullptr;  // this run's input kPrepackedWeightsInput
  std::vector<int64_t> prepacked_words_;   // the node's kPrepackedWeightsAttr (empty: none)
  // The GEMM path's packed W of the last run (floats) and its C, M and taps.
  std::pair<const float*, int64_t> gemm_w_ = {nullptr, 0};
  std::array<int64_t, 3> gemm_shape_ = {};
  // The thin GEMM route (its packed W); whether gemm_w_ is its layout.
  ThinConvGemm thin_;
  bool line_laid_out_ = false;
  std::vector<float> bias_;
  Bf16WeightScan w_scan_;
  bool channels_last_ = false;  // Y (and Z) NHWC
  bool x_nchw_ = false;         // kChannelsLastYOnly: X NCHW all the same
};

}  // namespace

namespace {

// The build's run of a convolution node: its constants, zeros for every other input, and an
// output of its own.
class ZeroInputs final : public OwnOutputContext {
 public:
  static std::optional<ZeroInputs> For(const ir::Node& node) {
    ZeroInputs z;
    for (const ir::Value* v : node.inputs) {
      if (v == nullptr) {
        z.owned_.emplace_back();
        continue;
      }
      if (v->constant) {
        z.owned_.push_back(*v->constant);  // shares the constant's bytes
        continue;
      }
      if (!v->shape.is_static()) return std::nullopt;
      auto t = ir::Tensor::Allocate(v->dtype, v->shape.StaticDims());  // zeros
      if (!t.ok()) return std::nullopt;
      z.owned_.push_back(*std::move(t));
    }
    return z;
  }
  int num_inputs() const override { return static_cast<int>(owned_.size()); }
  const ir::Tensor* input(int i) const override {
    return i < static_cast<int>(owned_.size()) && owned_[i].defined() ? &owned_[i] : nullptr;
  }

 private:
  std::vector<ir::Tensor> owned_;
};

}  // namespace

absl::StatusOr<std::optional<PrepackedConvWeights>> PrepackConvWeights(const ir::Node& node,
                                                                       const KernelDef& def) {
  if (def.factory != &ConvKernel::Create || node.input(kPrepackedWeightsInput) != nullptr) {
    return std::optional<PrepackedConvWeights>();
  }
  std::optional<ZeroInputs> ctx = ZeroInputs::For(node);
  if (!ctx) return std::optional<PrepackedConvWeights>();
  ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, ConvKernel::Create(node));
  RETURN_IF_ERROR(kernel->Run(*ctx));
  return static_cast<const ConvKernel&>(*kernel).LaidOutWeights();
}

void RegisterConv(Registry& r) {
  for (ir::OpType op : {ir::OpType::kConv, ir::OpType::kFusedConv}) {
    KernelDef def{op, {DataType::kF32}, 0, Backend::kCpu, Isa::kDnnl, &ConvKernel::Create};
    def.supports = &ConvKernel::Supports;
    AddF32Bf16F16(r, def);
  }
}

}  // namespace kiln::kernels::cpu::dnnl
