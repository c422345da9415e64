// Reference kernels of the Fourier ops: DFT (opset 17: axis an attribute; opset 20: dft_length
// and axis both inputs) and STFT (opset 17).
//
// Tensors hold complex values as a trailing dim of 2 (real, imaginary) or real ones as a trailing
// dim of 1. Every line is transformed in double precision by an O(n log n) FftPlan
// (signal_fft.h) and rounded once to the output dtype. DFT's forms:
//   forward, onesided=0   complex out, dft_length bins;
//   forward, onesided=1   real in only, complex out, floor(dft_length / 2) + 1 bins (RFFT);
//   inverse, onesided=0   complex out, dft_length points, scaled by 1 / dft_length;
//   inverse, onesided=1   complex one-sided in only, real out of dft_length points (IRFFT, the
//                         missing bins the conjugates of their mirrors; the imaginary parts of
//                         the bins that are their own mirror drop out, as in numpy's irfft).
// A signal longer than dft_length is cut to it, a shorter one zero-padded.
#include <algorithm>
#include <complex>
#include <memory>
#include <vector>

#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"
#include "engine/kernels/cpu/ref/scalar_inputs.h"
#include "engine/kernels/cpu/ref/signal_fft.h"

namespace kiln::kernels::cpu::ref {
namespace {

using signal::Complex;
using signal::FftPlan;

// A transform length from an operand or default: positive, and small enough for FftPlan.
absl::Status CheckLength(const ir::Node& node, int64_t n, const char* what) {
  if (n < 1) return InvalidNode(node, what, " must be positive, got ", n);
  if (n > FftPlan::kMaxLength) {
    return InvalidNode(node, what, " ", n, " exceeds the largest transform length ",
                       FftPlan::kMaxLength);
  }
  return absl::OkStatus();
}

// The last dim of a signal: 1 (real) or 2 (complex).
absl::Status CheckComponents(const ir::Node& node, const ir::Tensor& x, const char* what) {
  const int64_t c = x.dim(x.rank() - 1);
  if (c != 1 && c != 2) {
    return InvalidNode(node, what, " ", ir::DimsToString(x.dims()),
                       " must end in a dim of 1 (real) or 2 (complex), got ", c);
  }
  return absl::OkStatus();
}

// ---- DFT ----

class DftKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(bool inverse, ReadFlagAttr(node, "inverse", 0));
    ASSIGN_OR_RETURN(bool onesided, ReadFlagAttr(node, "onesided", 0));
    // Opset 17 takes the axis as an attribute (default 1), opset 20 as input 2 (default -2).
    if (node.since_version >= 20 && node.has_attr("axis")) {
      return InvalidNode(node, "takes the axis as input 2 from opset 20, not as an attribute");
    }
    const int64_t axis_attr = node.GetInt("axis", 1);
    return std::unique_ptr<Kernel>(new DftKernel(node, inverse, onesided, axis_attr));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    const int r = x->rank();
    if (r < 2) {
      return InvalidNode(node_, "input must have rank >= 2 ([..., signal, 1 or 2]), got shape ",
                         ir::DimsToString(x->dims()));
    }
    RETURN_IF_ERROR(CheckComponents(node_, *x, "input"));
    const int64_t comps = x->dim(r - 1);
    int64_t axis = node_.since_version >= 20 ? -2 : axis_attr_;
    if (node_.since_version >= 20 && ctx.input(2) != nullptr) {
      ASSIGN_OR_RETURN(axis, ReadScalarInt(node_, *ctx.input(2), "axis"));
    }
    // Accepted: [-r, -2] and [0, r - 2]; the last dim holds the complex parts.
    const int64_t a = axis < 0 ? axis + r : axis;
    if (a < 0 || a > r - 2) {
      return InvalidNode(node_, "axis ", axis, " is out of range for input rank ", r,
                         " (the last dim holds the real and imaginary parts)");
    }
    const bool irfft = inverse_ && onesided_;
    if (onesided_ && !inverse_ && comps != 1) {
      return InvalidNode(node_, "onesided=1 (forward) takes a real input (last dim 1), got ",
                         ir::DimsToString(x->dims()));
    }
    if (irfft && comps != 2) {
      return InvalidNode(node_,
                         "onesided=1 with inverse=1 takes a complex input (last dim 2), got ",
                         ir::DimsToString(x->dims()));
    }
    const int64_t n_in = x->dim(static_cast<int>(a));
    int64_t n = irfft ? 2 * (n_in - 1) : n_in;
    if (ctx.input(1) != nullptr) {
      ASSIGN_OR_RETURN(n, ReadScalarInt(node_, *ctx.input(1), "dft_length"));
      RETURN_IF_ERROR(CheckLength(node_, n, "dft_length"));
    } else {
      RETURN_IF_ERROR(CheckLength(node_, n, "the default dft_length (from the axis dim)"));
    }
    const int64_t out_len = onesided_ && !inverse_ ? n / 2 + 1 : n;
    const int64_t out_comps = irfft ? 1 : 2;
    std::vector<int64_t> dims = x->dims();
    dims[a] = out_len;
    dims[r - 1] = out_comps;
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), dims));
    const int64_t outer = Product(x->dims(), 0, a);
    const int64_t inner = Product(x->dims(), a + 1, r - 1);
    return DispatchFloat(x->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      const T* src = x->data<T>();
      T* dst = y->data<T>();
      const FftPlan plan(n);
      const int64_t lines = outer * inner;
      const double scale = inverse_ ? 1.0 / static_cast<double>(n) : 1.0;
      ParallelFor(lines, lines > 1 && lines * n >= (int64_t{1} << 14),
                  [&](int64_t line_begin, int64_t line_end) {
                    std::vector<Complex> buf(n), scratch(plan.scratch_size());
                    for (int64_t line = line_begin; line < line_end; ++line) {
                      const int64_t o = line / inner, i = line % inner;
                      const T* in = src + (o * n_in * inner + i) * comps;
                      const int64_t in_step = inner * comps;
                      T* out = dst + (o * out_len * inner + i) * out_comps;
                      const int64_t out_step = inner * out_comps;
                      auto load = [&](int64_t j) {
                        const T* p = in + j * in_step;
                        return Complex(Load(p[0]),
                                       comps == 2 ? static_cast<double>(Load(p[1])) : 0.0);
                      };
                      // IRFFT reads the one-sided half and mirrors the rest; the other forms read n
                      // points.
                      const int64_t read = irfft ? n / 2 + 1 : n;
                      for (int64_t j = 0; j < read; ++j)
                        buf[j] = j < n_in ? load(j) : Complex(0, 0);
                      for (int64_t j = read; j < n; ++j) buf[j] = std::conj(buf[n - j]);
                      plan.Transform(buf.data(), inverse_, scratch.data());
                      for (int64_t k = 0; k < out_len; ++k) {
                        out[k * out_step] = Store<T>(buf[k].real() * scale);
                        if (out_comps == 2) out[k * out_step + 1] = Store<T>(buf[k].imag() * scale);
                      }
                    }
                  });
      return absl::OkStatus();
    });
  }

 private:
  DftKernel(const ir::Node& node, bool inverse, bool onesided, int64_t axis_attr)
      : node_(node), inverse_(inverse), onesided_(onesided), axis_attr_(axis_attr) {}
  const ir::Node& node_;
  bool inverse_, onesided_;
  int64_t axis_attr_;
};

// ---- STFT ----

class StftKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(bool onesided, ReadFlagAttr(node, "onesided", 1));
    return std::unique_ptr<Kernel>(new StftKernel(node, onesided));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* step_t, RequireInput(node_, ctx, 1));
    const ir::Tensor* window = ctx.input(2);
    const ir::Tensor* length_t = ctx.input(3);
    if (x->rank() != 3) {
      return InvalidNode(node_, "signal must have rank 3 ([batch, length, 1 or 2]), got shape ",
                         ir::DimsToString(x->dims()));
    }
    RETURN_IF_ERROR(CheckComponents(node_, *x, "signal"));
    const int64_t comps = x->dim(2), batch = x->dim(0), len = x->dim(1);
    if (onesided_ && comps != 1) {
      return InvalidNode(node_, "onesided=1 takes a real signal (last dim 1), got ",
                         ir::DimsToString(x->dims()));
    }
    ASSIGN_OR_RETURN(const int64_t step, ReadScalarInt(node_, *step_t, "frame_step"));
    if (step < 1) return InvalidNode(node_, "frame_step must be positive, got ", step);
    if (window != nullptr) {
      if (window->rank() != 1) {
        return InvalidNode(node_, "window must be 1-D, got shape ",
                           ir::DimsToString(window->dims()));
      }
      if (!IsFloating(window->dtype())) {
        return InvalidNode(node_, "window must be floating, got ",
                           DataTypeOnnxName(window->dtype()));
      }
    }
    int64_t frame = window != nullptr ? window->dim(0) : len;
    if (length_t != nullptr) {
      ASSIGN_OR_RETURN(frame, ReadScalarInt(node_, *length_t, "frame_length"));
      if (window != nullptr && window->dim(0) != frame) {
        return InvalidNode(node_, "window has ", window->dim(0), " values but frame_length is ",
                           frame);
      }
    }
    RETURN_IF_ERROR(CheckLength(node_, frame, "frame_length"));
    if (frame > len) {
      return InvalidNode(node_, "frame_length ", frame, " exceeds the signal length ", len);
    }
    const int64_t frames = (len - frame) / step + 1;
    const int64_t bins = onesided_ ? frame / 2 + 1 : frame;
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), {batch, frames, bins, 2}));
    std::vector<double> w(frame, 1.0);
    if (window != nullptr) {
      for (int64_t j = 0; j < frame; ++j) w[j] = ir::ElementAsDouble(*window, j);
    }
    return DispatchFloat(x->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      const T* src = x->data<T>();
      T* dst = y->data<T>();
      const FftPlan plan(frame);
      const int64_t total = batch * frames;
      ParallelFor(total, total > 1 && total * frame >= (int64_t{1} << 14),
                  [&](int64_t bf_begin, int64_t bf_end) {
                    std::vector<Complex> buf(frame), scratch(plan.scratch_size());
                    for (int64_t bf = bf_begin; bf < bf_end; ++bf) {
                      const int64_t b = bf / frames, f = bf % frames;
                      const T* in = src + (b * len + f * step) * comps;
                      for (int64_t j = 0; j < frame; ++j) {
                        const double im =
                            comps == 2 ? static_cast<double>(Load(in[j * 2 + 1])) : 0.0;
                        buf[j] = Complex(Load(in[j * comps]), im) * w[j];
                      }
                      plan.Transform(buf.data(), false, scratch.data());
                      T* out = dst + bf * bins * 2;
                      for (int64_t k = 0; k < bins; ++k) {
                        out[2 * k] = Store<T>(buf[k].real());
                        out[2 * k + 1] = Store<T>(buf[k].imag());
                      }
                    }
                  });
      return absl::OkStatus();
    });
  }

 private:
  StftKernel(const ir::Node& node, bool onesided) : node_(node), onesided_(onesided) {}
  const ir::Node& node_;
  bool onesided_;
};

}  // namespace

void RegisterSignalDft(Registry& r) {
  r.AddRef(ir::OpType::kDFT, FloatTypes(), &DftKernel::Create);
  r.AddRef(ir::OpType::kSTFT, FloatTypes(), &StftKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
