// Conv and ConvTranspose (1-D, 2-D, 3-D and beyond), both lowered onto the shared GEMM: Conv as
// im2col + GEMM, ConvTranspose as GEMM + col2im. Column buffers are built in chunks of output
// (input) positions so that their size stays bounded on large images.
#include <algorithm>

#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"

namespace kiln::kernels::cpu::ref::nn {
namespace {

// Target size of one column buffer, in elements (8 MiB of fp32).
constexpr int64_t kColumnElements = int64_t{1} << 21;

// Splits flat position `p` of `dims` into coordinates, scaled by `stride` and shifted by
// -`pad`: the window origin (Conv) or the scatter origin (ConvTranspose) of that position.
void Origins(int64_t p0, int64_t count, const std::vector<int64_t>& dims,
             const std::vector<int64_t>& stride, const std::vector<int64_t>& pad,
             std::vector<int64_t>& origin) {
  const int nd = static_cast<int>(dims.size());
  origin.resize(count * nd);
  std::vector<int64_t> coord(nd);
  int64_t rem = p0;
  for (int d = nd - 1; d >= 0; --d) {
    coord[d] = rem % dims[d];
    rem /= dims[d];
  }
  for (int64_t q = 0; q < count; ++q) {
    for (int d = 0; d < nd; ++d) origin[q * nd + d] = coord[d] * stride[d] - pad[d];
    for (int d = nd - 1; d >= 0; --d) {
      if (++coord[d] < dims[d]) break;
      coord[d] = 0;
    }
  }
}

// Offsets (kernel coordinate * dilation) of flat kernel position `kk`.
void KernelOffsets(int64_t kk, const std::vector<int64_t>& kernel,
                   const std::vector<int64_t>& dilations, int64_t* off) {
  for (int d = static_cast<int>(kernel.size()) - 1; d >= 0; --d) {
    off[d] = (kk % kernel[d]) * dilations[d];
    kk /= kernel[d];
  }
}

// Flat index into `dims` of origin + off, or -1 when outside.
inline int64_t Locate(const int64_t* origin, const int64_t* off, const std::vector<int64_t>& dims) {
  int64_t idx = 0;
  for (size_t d = 0; d < dims.size(); ++d) {
    const int64_t i = origin[d] + off[d];
    if (i < 0 || i >= dims[d]) return -1;
    idx = idx * dims[d] + i;
  }
  return idx;
}

constexpr int kMaxSpatial = 16;  // bounds the on-stack kernel offset arrays

absl::Status CheckSpatialRank(const ir::Node& node, int nd) {
  if (nd < 1 || nd > kMaxSpatial) {
    return InvalidNode(node, "input must have 1 to ", kMaxSpatial, " spatial dims, got ", nd);
  }
  return absl::OkStatus();
}

// The channel-count error, once the caller has found X, W and group inconsistent.
absl::Status GroupMismatch(const ir::Node& node, const ConvOperands& in, int64_t group) {
  return InvalidNode(node, "X has ", in.x->dim(1), " channels and W is ",
                     ir::DimsToString(in.w->dims()), ", inconsistent with group ", group);
}

// B has shape [m]; kernel_shape, when given, matches W's spatial dims. Returns those dims.
absl::StatusOr<std::vector<int64_t>> CheckBiasAndKernel(const ir::Node& node,
                                                        const WindowAttrs& attrs,
                                                        const ConvOperands& in, int64_t m) {
  if (in.b && (in.b->rank() != 1 || in.b->dim(0) != m)) {
    return InvalidNode(node, "B must have shape [", m, "], got ", ir::DimsToString(in.b->dims()));
  }
  std::vector<int64_t> kernel(in.w->dims().begin() + 2, in.w->dims().end());
  if (!attrs.kernel.empty() && attrs.kernel != kernel) {
    return InvalidNode(node, "kernel_shape ", ir::DimsToString(attrs.kernel), " does not match W ",
                       ir::DimsToString(in.w->dims()));
  }
  return kernel;
}

// X, W and B in accumulator type (converted copies unless T already is it).
template <typename T>
struct AccOperands {
  using A = Acc<T>;
  AccOperands(const ir::Tensor& xt, const ir::Tensor& wt, const ir::Tensor* bt)
      : x(AccData(xt.data<T>(), xt.num_elements(), xbuf)),
        w(AccData(wt.data<T>(), wt.num_elements(), wbuf)),
        bias(bt ? AccData(bt->data<T>(), bt->num_elements(), bbuf) : nullptr) {}
  std::vector<A> xbuf, wbuf, bbuf;
  const A* x;
  const A* w;
  const A* bias;
};

// Output storage [N, channels, spatial], every channel starting at its bias (or 0): accumulate
// straight into Y when T is its own accumulator type, else into a scratch buffer rounded once
// at the end.
template <typename T>
struct OutputAcc {
  using A = Acc<T>;
  OutputAcc(T* y, int64_t n, const A* bias, int64_t channels, int64_t spatial) : y_(y), n_(n) {
    if constexpr (!std::is_same_v<T, A>) buf_.resize(n);
    FillBias(data(), n, bias, channels, spatial);
  }
  A* data() {
    if constexpr (std::is_same_v<T, A>) {
      return y_;
    } else {
      return buf_.data();
    }
  }
  void Finish() {
    if constexpr (!std::is_same_v<T, A>) {
      for (int64_t i = 0; i < n_; ++i) y_[i] = Store<T>(buf_[i]);
    }
  }
  T* y_;
  int64_t n_;
  std::vector<A> buf_;
};

// What Conv and ConvTranspose share: the window and group attributes, the operand checks, and
// the output: Y [N, M, out...] starts at the bias and Derived::Evaluate accumulates into it, in
// accumulator type A, given X and W in A.
template <typename Derived>
class ConvKernelBase : public Kernel {
 public:
  explicit ConvKernelBase(const ir::Node& node) : node_(node) {}

 protected:
  using Operands = ConvOperands;

  absl::Status ReadAttrs() {
    ASSIGN_OR_RETURN(ConvAttrs a, ReadConvAttrs(node_));
    attrs_ = std::move(a.window);
    group_ = a.group;
    return absl::OkStatus();
  }

  // Allocates Y [N, m, win.out...] and fills it through Derived::Evaluate.
  absl::Status WriteOutput(KernelContext& ctx, const Operands& in, int64_t m,
                           const Window& win) const {
    std::vector<int64_t> out_dims = {in.x->dim(0), m};
    out_dims.insert(out_dims.end(), win.out.begin(), win.out.end());
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, in.x->dtype(), out_dims));
    return DispatchFloat(in.x->dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const AccOperands<T> acc(*in.x, *in.w, in.b);
      OutputAcc<T> yacc(y->data<T>(), y->num_elements(), acc.bias, m, ir::NumElementsOf(win.out));
      static_cast<const Derived*>(this)->Evaluate(*in.x, *in.w, win, acc.x, acc.w, yacc.data());
      yacc.Finish();
      return absl::OkStatus();
    });
  }

  const ir::Node& node_;
  WindowAttrs attrs_;
  int64_t group_ = 1;
};

class ConvKernel final : public ConvKernelBase<ConvKernel> {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::make_unique<ConvKernel>(node);
    RETURN_IF_ERROR(k->ReadAttrs());
    return std::unique_ptr<Kernel>(std::move(k));
  }
  explicit ConvKernel(const ir::Node& node) : ConvKernelBase(node) {}

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ConvSetup s, SetupConv(node_, {attrs_, group_}, ctx, true));
    return WriteOutput(ctx, s.in, s.m, s.win);
  }

  template <typename A>
  void Evaluate(const ir::Tensor& xt, const ir::Tensor& wt, const Window& win, const A* x,
                const A* w, A* y) const {
    ConvForward(xt.dims(), wt.dims(), win, group_, x, w, y);
  }
};

class ConvTransposeKernel final : public ConvKernelBase<ConvTransposeKernel> {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::make_unique<ConvTransposeKernel>(node);
    RETURN_IF_ERROR(k->ReadAttrs());
    k->output_padding_ = node.GetInts("output_padding");
    k->output_shape_ = node.GetInts("output_shape");
    return std::unique_ptr<Kernel>(std::move(k));
  }
  explicit ConvTransposeKernel(const ir::Node& node) : ConvKernelBase(node) {}

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const Operands in, ReadConvOperands(node_, ctx, true));
    const int64_t c = in.x->dim(1), mg = in.w->dim(1), m = mg * group_;
    if (in.w->dim(0) != c || c % group_ != 0) return GroupMismatch(node_, in, group_);
    Window win;
    ASSIGN_OR_RETURN(win.kernel, CheckBiasAndKernel(node_, attrs_, in, m));
    win.in.assign(in.x->dims().begin() + 2, in.x->dims().end());
    RETURN_IF_ERROR(Geometry(in.x->rank() - 2, win));
    return WriteOutput(ctx, in, m, win);
  }

  // GEMM + col2im per (batch, group); y holds the bias already.
  template <typename A>
  void Evaluate(const ir::Tensor& xt, const ir::Tensor& wt, const Window& win, const A* x,
                const A* w, A* y) const {
    const int nd = win.rank();
    const int64_t n_batch = xt.dim(0), c = xt.dim(1), mg = wt.dim(1), m = mg * group_;
    const int64_t cg = c / group_;
    const int64_t ksp = ir::NumElementsOf(win.kernel);
    const int64_t in_sp = ir::NumElementsOf(win.in), out_sp = ir::NumElementsOf(win.out);
    const int64_t rows = mg * ksp;  // one row per (output channel, kernel position)
    const int64_t chunk = std::clamp<int64_t>(kColumnElements / std::max<int64_t>(rows, 1), 1,
                                              std::max<int64_t>(in_sp, 1));
    std::vector<A> col(rows * chunk);
    std::vector<int64_t> origin;
    for (int64_t n = 0; n < n_batch; ++n) {
      for (int64_t g = 0; g < group_; ++g) {
        A* yg = y + (n * m + g * mg) * out_sp;
        // W[g] is (cg x rows); the columns are W[g]^T * X[g].
        const MatView<A> wt_view{w + g * cg * rows, 1, rows};
        const A* xg = x + (n * c + g * cg) * in_sp;
        for (int64_t p0 = 0; p0 < in_sp; p0 += chunk) {
          const int64_t cn = std::min(chunk, in_sp - p0);
          std::fill(col.begin(), col.begin() + rows * cn, A(0));
          GemmAccumulate(rows, cn, cg, wt_view, MatView<A>{xg + p0, in_sp, 1}, col.data(), cn);
          Origins(p0, cn, win.in, win.strides, win.pad_begin, origin);
          // col2im: each output channel is scattered by one thread, so writes never race.
          ParallelFor(mg, rows * cn >= (int64_t{1} << 16), [&](int64_t oc_begin, int64_t oc_end) {
            for (int64_t oc = oc_begin; oc < oc_end; ++oc) {
              A* yc = yg + oc * out_sp;
              for (int64_t kk = 0; kk < ksp; ++kk) {
                int64_t off[kMaxSpatial];
                KernelOffsets(kk, win.kernel, win.dilations, off);
                const A* src = col.data() + (oc * ksp + kk) * cn;
                for (int64_t q = 0; q < cn; ++q) {
                  const int64_t idx = Locate(&origin[q * nd], off, win.out);
                  if (idx >= 0) yc[idx] += src[q];
                }
              }
            }
          });
        }
      }
    }
  }

 private:
  // Output sizes and begin pads (pads may come out negative when output_shape asks for more
  // than the natural size: the extra positions receive only the bias).
  absl::Status Geometry(int nd, Window& win) const {
    auto sized = [&](const std::vector<int64_t>& v, const char* what) -> absl::Status {
      if (v.empty() || static_cast<int>(v.size()) == nd) return absl::OkStatus();
      return InvalidNode(node_, what, " has ", v.size(), " values, expected ", nd);
    };
    RETURN_IF_ERROR(sized(attrs_.strides, "strides"));
    RETURN_IF_ERROR(sized(attrs_.dilations, "dilations"));
    std::vector<int64_t> out_pad = output_padding_;
    if (static_cast<int>(out_pad.size()) == 2 * nd) out_pad.resize(nd);  // reference's [0]*2n
    RETURN_IF_ERROR(sized(out_pad, "output_padding"));
    std::vector<int64_t> out_shape = output_shape_;
    if (static_cast<int>(out_shape.size()) == nd + 2)
      out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
    RETURN_IF_ERROR(sized(out_shape, "output_shape"));
    if (!attrs_.pads.empty() && static_cast<int>(attrs_.pads.size()) != 2 * nd) {
      return InvalidNode(node_, "pads has ", attrs_.pads.size(), " values, expected ", 2 * nd);
    }
    win.strides = attrs_.strides.empty() ? std::vector<int64_t>(nd, 1) : attrs_.strides;
    win.dilations = attrs_.dilations.empty() ? std::vector<int64_t>(nd, 1) : attrs_.dilations;
    win.pad_begin.assign(nd, 0);
    win.pad_end.assign(nd, 0);
    win.out.assign(nd, 0);
    for (int d = 0; d < nd; ++d) {
      const int64_t s = win.strides[d];
      const int64_t op = out_pad.empty() ? 0 : out_pad[d];
      if (op < 0 || (op >= s && op >= win.dilations[d])) {
        return InvalidNode(node_, "output_padding ", op,
                           " must be smaller than stride or dilation");
      }
      const int64_t full = s * (win.in[d] - 1) + op + (win.kernel[d] - 1) * win.dilations[d] + 1;
      const bool same =
          attrs_.auto_pad == AutoPad::kSameUpper || attrs_.auto_pad == AutoPad::kSameLower;
      if (!out_shape.empty() || same) {
        win.out[d] = out_shape.empty() ? win.in[d] * s : out_shape[d];
        const int64_t total = full - win.out[d];
        const int64_t half = FloorDiv(total, 2);
        win.pad_begin[d] = attrs_.auto_pad == AutoPad::kSameUpper ? half : total - half;
      } else if (attrs_.auto_pad == AutoPad::kValid || attrs_.pads.empty()) {
        win.out[d] = full;
      } else {
        win.pad_begin[d] = attrs_.pads[d];
        win.pad_end[d] = attrs_.pads[nd + d];
        if (win.pad_begin[d] < 0 || win.pad_end[d] < 0) {
          return InvalidNode(node_, "pads must be non-negative");
        }
        win.out[d] = full - win.pad_begin[d] - win.pad_end[d];
      }
      if (win.out[d] < 0) {
        return InvalidNode(node_, "output size ", win.out[d], " on spatial axis ", d,
                           " is negative");
      }
    }
    return absl::OkStatus();
  }

  std::vector<int64_t> output_padding_, output_shape_;
};

}  // namespace

absl::StatusOr<ConvAttrs> ReadConvAttrs(const ir::Node& node, bool channels_last_ok) {
  if (!channels_last_ok && node.GetInt(kChannelsLastAttr, 0) != 0) {
    return InvalidNode(node, "runs channels-last (", kChannelsLastAttr,
                       "), which only the oneDNN convolution kernel takes");
  }
  ConvAttrs a;
  ASSIGN_OR_RETURN(a.window, ReadWindowAttrs(node));
  a.group = node.GetInt("group", 1);
  if (a.group <= 0) return InvalidNode(node, "group must be positive");
  return a;
}

absl::StatusOr<ConvOperands> ReadConvOperands(const ir::Node& node, KernelContext& ctx,
                                              bool same_dtype) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* w, RequireInput(node, ctx, 1));
  const ir::Tensor* b = ctx.input(2);
  RETURN_IF_ERROR(CheckSpatialRank(node, x->rank() - 2));
  if (w->rank() != x->rank()) {
    return InvalidNode(node, "W rank ", w->rank(), " differs from X rank ", x->rank());
  }
  if (same_dtype && (w->dtype() != x->dtype() || (b && b->dtype() != x->dtype()))) {
    return InvalidNode(node, "X, W and B must have the same dtype");
  }
  return ConvOperands{x, w, b};
}

absl::StatusOr<ConvSetup> SetupConv(const ir::Node& node, const ConvAttrs& attrs,
                                    KernelContext& ctx, bool same_dtype) {
  ConvSetup s;
  ASSIGN_OR_RETURN(s.in, ReadConvOperands(node, ctx, same_dtype));
  const ConvOperands& in = s.in;
  const int64_t c = in.x->dim(1), cg = in.w->dim(1);
  s.m = in.w->dim(0);
  if (cg * attrs.group != c || s.m % attrs.group != 0) return GroupMismatch(node, in, attrs.group);
  ASSIGN_OR_RETURN(const std::vector<int64_t> kernel,
                   CheckBiasAndKernel(node, attrs.window, in, s.m));
  std::vector<int64_t> spatial(in.x->dims().begin() + 2, in.x->dims().end());
  ASSIGN_OR_RETURN(s.win, ResolveWindow(node, attrs.window, spatial, kernel));
  s.out_dims = {in.x->dim(0), s.m};
  s.out_dims.insert(s.out_dims.end(), s.win.out.begin(), s.win.out.end());
  return s;
}

template <typename A>
void ConvForward(const std::vector<int64_t>& x_dims, const std::vector<int64_t>& w_dims,
                 const Window& win, int64_t group, const A* x, const A* w, A* y) {
  const int nd = win.rank();
  const int64_t n_batch = x_dims[0], c = x_dims[1], m = w_dims[0], cg = w_dims[1];
  const int64_t mg = m / group;
  const int64_t ksp = ir::NumElementsOf(win.kernel);
  const int64_t in_sp = ir::NumElementsOf(win.in), out_sp = ir::NumElementsOf(win.out);
  const int64_t kdim = cg * ksp;
  bool pointwise = true;  // 1x1, stride 1, no pads: the input already is the column matrix
  for (int d = 0; d < nd; ++d) {
    pointwise &=
        win.kernel[d] == 1 && win.strides[d] == 1 && win.pad_begin[d] == 0 && win.pad_end[d] == 0;
  }
  // im2col works on whole rows of the last spatial dim: the outer coordinates are checked
  // once per row and the last dim is a strided copy between two precomputed bounds.
  const int64_t out_last = win.out[nd - 1], in_last = win.in[nd - 1];
  const int64_t s_last = win.strides[nd - 1], p_last = win.pad_begin[nd - 1];
  const std::vector<int64_t> outer_out(win.out.begin(), win.out.end() - 1);
  const std::vector<int64_t> outer_in(win.in.begin(), win.in.end() - 1);
  const std::vector<int64_t> outer_strides(win.strides.begin(), win.strides.end() - 1);
  const std::vector<int64_t> outer_pads(win.pad_begin.begin(), win.pad_begin.end() - 1);
  const int64_t n_outer = out_last == 0 ? 0 : out_sp / out_last;
  const int64_t rows_per_chunk = std::clamp<int64_t>(
      kColumnElements / std::max<int64_t>(kdim * out_last, 1), 1, std::max<int64_t>(n_outer, 1));
  std::vector<A> col(pointwise ? 0 : kdim * rows_per_chunk * out_last);
  std::vector<int64_t> origin;
  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t g = 0; g < group; ++g) {
      A* yg = y + (n * m + g * mg) * out_sp;
      const A* xg = x + (n * c + g * cg) * in_sp;
      const MatView<A> wv{w + g * mg * kdim, kdim, 1};
      if (pointwise) {
        GemmAccumulate(mg, out_sp, kdim, wv, MatView<A>{xg, in_sp, 1}, yg, out_sp);
        continue;
      }
      for (int64_t u0 = 0; u0 < n_outer; u0 += rows_per_chunk) {
        const int64_t un = std::min(rows_per_chunk, n_outer - u0);
        const int64_t cn = un * out_last;
        Origins(u0, un, outer_out, outer_strides, outer_pads, origin);
        ParallelFor(kdim, kdim * cn >= (int64_t{1} << 16), [&](int64_t r_begin, int64_t r_end) {
          for (int64_t r = r_begin; r < r_end; ++r) {
            int64_t off[kMaxSpatial];
            KernelOffsets(r % ksp, win.kernel, win.dilations, off);
            const int64_t koff = off[nd - 1];
            // Output columns [lo, hi) read inside the input row; the rest is padding.
            const int64_t lo = std::clamp<int64_t>(-FloorDiv(koff - p_last, s_last), 0, out_last);
            const int64_t hi = std::clamp<int64_t>(
                FloorDiv(in_last - 1 + p_last - koff, s_last) + 1, lo, out_last);
            const A* xc = xg + (r / ksp) * in_sp;
            for (int64_t u = 0; u < un; ++u) {
              A* dst = col.data() + r * cn + u * out_last;
              const int64_t outer = Locate(origin.data() + u * (nd - 1), off, outer_in);
              if (outer < 0) {
                std::fill(dst, dst + out_last, A(0));
                continue;
              }
              const A* src = xc + outer * in_last + koff - p_last;
              std::fill(dst, dst + lo, A(0));
              for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = src[ow * s_last];
              std::fill(dst + hi, dst + out_last, A(0));
            }
          }
        });
        GemmAccumulate(mg, cn, kdim, wv, MatView<A>{col.data(), cn, 1}, yg + u0 * out_last, out_sp);
      }
    }
  }
}

template void ConvForward<float>(const std::vector<int64_t>&, const std::vector<int64_t>&,
                                 const Window&, int64_t, const float*, const float*, float*);
template void ConvForward<double>(const std::vector<int64_t>&, const std::vector<int64_t>&,
                                  const Window&, int64_t, const double*, const double*, double*);

void RegisterConvOps(Registry& r) {
  r.AddRef(ir::OpType::kConv, FloatTypes(), &ConvKernel::Create);
  r.AddRef(ir::OpType::kConvTranspose, FloatTypes(), &ConvTransposeKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref::nn
