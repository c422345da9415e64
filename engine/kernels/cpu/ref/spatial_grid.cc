// GridSample (2-D from opset 16, N-D from 20) and AffineGrid (opset 20, 2-D and 3-D): sampling an
// image at normalised [-1, 1] coordinates and building such coordinates from affine matrices.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/registry.h"

namespace kiln::kernels::cpu::ref::spatial {
namespace {

// ---- GridSample -------------------------------------------------------------------------------

enum class Interp { kNearest, kLinear, kCubic };
enum class Padding { kZeros, kBorder, kReflection };

constexpr int kMaxTaps = 4;

/// Reflects x into [lo, hi] by bouncing off the borders, as PyTorch and the ONNX reference do.
template <typename C>
C Reflect(C x, C lo, C hi) {
  const C range = hi - lo;
  if (range <= 0) return lo;  // a single cell with align_corners: everything maps onto it
  if (x >= lo && x <= hi) return x;
  const C dx = x < lo ? lo - x : x - hi;
  const C flips = std::floor(dx / range);
  const C r = dx - flips * range;
  const bool even = std::fmod(flips, C(2)) == 0;
  // Below lo: an even number of flips leaves us going up from lo; above hi the mirror image.
  return (x < lo) == even ? lo + r : hi - r;
}

/// Keys cubic convolution weights (alpha = -0.75, as PyTorch) for taps at -1, 0, 1, 2 around a
/// point at fraction t in [0, 1).
template <typename C>
std::array<C, 4> CubicWeights(C t) {
  constexpr C a = C(-0.75);
  auto near = [&](C s) { return ((a + 2) * s - (a + 3)) * s * s + 1; };       // |s| <= 1
  auto far = [&](C s) { return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a; };  // 1 < |s| < 2
  return {far(t + 1), near(t), near(1 - t), far(2 - t)};
}

struct GridSampleAttrs {
  Interp mode = Interp::kLinear;
  Padding padding = Padding::kZeros;
  bool align_corners = false;
};

absl::StatusOr<GridSampleAttrs> ReadGridSampleAttrs(const ir::Node& node) {
  GridSampleAttrs a;
  // Opset 16 names the modes bilinear / bicubic; opset 20 generalised them to N-D as linear /
  // cubic.
  const bool v16 = node.since_version < 20;
  const std::string mode = node.GetString("mode", v16 ? "bilinear" : "linear");
  if (mode == "nearest") {
    a.mode = Interp::kNearest;
  } else if (mode == (v16 ? "bilinear" : "linear")) {
    a.mode = Interp::kLinear;
  } else if (mode == (v16 ? "bicubic" : "cubic")) {
    a.mode = Interp::kCubic;
  } else {
    return InvalidNode(node, "attribute mode must be nearest, ", v16 ? "bilinear" : "linear",
                       " or ", v16 ? "bicubic" : "cubic", ", got '", mode, "'");
  }
  const std::string pad = node.GetString("padding_mode", "zeros");
  if (pad == "zeros") {
    a.padding = Padding::kZeros;
  } else if (pad == "border") {
    a.padding = Padding::kBorder;
  } else if (pad == "reflection") {
    a.padding = Padding::kReflection;
  } else {
    return InvalidNode(node, "attribute padding_mode must be zeros, border or reflection, got '",
                       pad, "'");
  }
  const int64_t ac = node.GetInt("align_corners", 0);
  if (ac != 0 && ac != 1) return InvalidNode(node, "attribute align_corners must be 0 or 1");
  a.align_corners = ac == 1;
  return a;
}

/// The taps of one spatial dim for one sample point: input indices (-1: outside, reads zero)
/// and their weights.
template <typename C>
struct Taps {
  int n = 0;
  std::array<int64_t, kMaxTaps> idx;
  std::array<C, kMaxTaps> w;
};

/// Per-dim sampling geometry: size and the borders a coordinate is reflected or clamped into.
template <typename C>
class AxisSampler {
 public:
  AxisSampler(int64_t size, const GridSampleAttrs& a) : size_(size), a_(a) {
    lo_ = a.align_corners ? C(0) : C(-0.5);
    hi_ = a.align_corners ? static_cast<C>(size - 1) : static_cast<C>(size) - C(0.5);
  }

  /// The taps for normalised coordinate `g`.
  Taps<C> Sample(C g) const {
    Taps<C> t;
    // Denormalise: -1 / 1 are the centres of the corner cells with align_corners, else their
    // outer edges.
    C x = a_.align_corners ? (g + 1) / 2 * static_cast<C>(size_ - 1)
                           : ((g + 1) * static_cast<C>(size_) - 1) / 2;
    if (a_.mode == Interp::kNearest) x = std::nearbyint(x);  // ties to even, as PyTorch
    if (x < lo_ || x > hi_) {
      if (a_.padding == Padding::kBorder) x = std::clamp(x, C(0), static_cast<C>(size_ - 1));
      if (a_.padding == Padding::kReflection) x = Reflect(x, lo_, hi_);
    }
    // NaN, infinities and coordinates too far out for int64 read the zero padding.
    if (!(std::abs(x) < C(1e15))) {
      t.n = 1;
      t.idx[0] = -1;
      t.w[0] = 0;
      return t;
    }
    if (a_.mode == Interp::kNearest) {
      t.n = 1;
      t.idx[0] = Resolve(static_cast<int64_t>(x));
      t.w[0] = 1;
      return t;
    }
    const C fl = std::floor(x);
    const int64_t x0 = static_cast<int64_t>(fl);
    const C f = x - fl;
    if (a_.mode == Interp::kLinear) {
      t.n = 2;
      t.idx = {Resolve(x0), Resolve(x0 + 1)};
      t.w[0] = 1 - f;
      t.w[1] = f;
      return t;
    }
    t.n = 4;
    const std::array<C, 4> cw = CubicWeights(f);
    for (int k = 0; k < 4; ++k) {
      t.idx[k] = Resolve(x0 - 1 + k);
      t.w[k] = cw[k];
    }
    return t;
  }

 private:
  /// Maps an integer cell index through the padding mode; -1 when it reads zero.
  int64_t Resolve(int64_t i) const {
    if (i >= 0 && i < size_) return i;
    switch (a_.padding) {
      case Padding::kZeros:
        return -1;
      case Padding::kBorder:
        return std::clamp<int64_t>(i, 0, size_ - 1);
      case Padding::kReflection: {
        const int64_t r = static_cast<int64_t>(Reflect(static_cast<C>(i), lo_, hi_));
        return std::clamp<int64_t>(r, 0, size_ - 1);
      }
    }
    return -1;
  }

  int64_t size_;
  GridSampleAttrs a_;
  C lo_, hi_;
};

class GridSampleKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::make_unique<GridSampleKernel>(node);
    ASSIGN_OR_RETURN(k->attrs_, ReadGridSampleAttrs(node));
    return std::unique_ptr<Kernel>(std::move(k));
  }
  explicit GridSampleKernel(const ir::Node& node) : node_(node) {}

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* grid, RequireInput(node_, ctx, 1));
    const int nd = x->rank() - 2;
    if (nd < 1) return InvalidNode(node_, "input must have rank >= 3, got ", x->rank());
    if (node_.since_version < 20 && nd != 2) {
      return InvalidNode(node_, "opset ", node_.since_version, " takes 4-D input only, got rank ",
                         x->rank());
    }
    if (grid->rank() != x->rank() || grid->dim(0) != x->dim(0) || grid->dim(nd + 1) != nd) {
      return InvalidNode(node_, "grid must have shape (N, out spatial..., ", nd,
                         ") matching input N");
    }
    std::vector<int64_t> out_dims = {x->dim(0), x->dim(1)};
    out_dims.insert(out_dims.end(), grid->dims().begin() + 1, grid->dims().end() - 1);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));
    return DispatchFloat(x->dtype(), [&](auto xtag) {
      return DispatchFloat(grid->dtype(), [&](auto gtag) {
        using T = typename decltype(xtag)::type;
        using G = typename decltype(gtag)::type;
        Evaluate<T, G>(*x, *grid, y->data<T>());
        return absl::OkStatus();
      });
    });
  }

 private:
  template <typename T, typename G>
  void Evaluate(const ir::Tensor& xt, const ir::Tensor& gt, T* y) const {
    using C = Compute<T>;
    const int nd = xt.rank() - 2;
    const int64_t batch = xt.dim(0), channels = xt.dim(1);
    const std::vector<int64_t> in(xt.dims().begin() + 2, xt.dims().end());
    const std::vector<int64_t> in_strides = Strides(in);
    const int64_t in_sp = ir::NumElementsOf(in);
    const int64_t out_sp = batch == 0 ? 0 : gt.num_elements() / (batch * nd);
    if (in_sp == 0) {  // an empty image has no pixel to sample or clamp to: all padding
      std::fill(y, y + batch * channels * out_sp, Store<T>(C(0)));
      return;
    }
    std::vector<AxisSampler<C>> axes;
    for (int d = 0; d < nd; ++d) axes.emplace_back(in[d], attrs_);
    std::vector<Taps<C>> taps(nd);
    std::vector<int> kpos(nd);
    const T* xd = xt.data<T>();
    const G* gd = gt.data<G>();
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t q = 0; q < out_sp; ++q) {
        // The grid's last axis lists coordinates innermost dim first (x = W, y = H, ...).
        const G* g = gd + (n * out_sp + q) * nd;
        for (int d = 0; d < nd; ++d) {
          taps[d] = axes[d].Sample(static_cast<C>(Load(g[nd - 1 - d])));
        }
        for (int64_t c = 0; c < channels; ++c) {
          const T* xp = xd + (n * channels + c) * in_sp;
          C sum = 0;
          std::fill(kpos.begin(), kpos.end(), 0);
          while (true) {  // odometer over the tap combinations
            C w = 1;
            int64_t off = 0;
            for (int d = 0; d < nd && off >= 0; ++d) {
              const int64_t i = taps[d].idx[kpos[d]];
              off = i < 0 ? -1 : off + i * in_strides[d];
              w *= taps[d].w[kpos[d]];
            }
            if (off >= 0) sum += w * Load(xp[off]);
            int d = nd - 1;
            for (; d >= 0; --d) {
              if (++kpos[d] < taps[d].n) break;
              kpos[d] = 0;
            }
            if (d < 0) break;
          }
          y[(n * channels + c) * out_sp + q] = Store<T>(sum);
        }
      }
    }
  }

  const ir::Node& node_;
  GridSampleAttrs attrs_;
};

// ---- AffineGrid -------------------------------------------------------------------------------

/// AffineGrid: grid[n, (d,) h, w] = theta[n] * (x_w, y_h, (z_d,) 1), where the base coordinates
/// span [-1, 1] over cell centres (align_corners) or cell edges.
absl::Status AffineGridRun(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* theta, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* size_t_, RequireInput(node, ctx, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> size, ReadInts(node, *size_t_, "size"));
  const int64_t ac = node.GetInt("align_corners", 0);
  if (ac != 0 && ac != 1) return InvalidNode(node, "attribute align_corners must be 0 or 1");
  if (size.size() != 4 && size.size() != 5) {
    return InvalidNode(node, "size must have 4 (2-D) or 5 (3-D) values, got ", size.size());
  }
  const int nd = static_cast<int>(size.size()) - 2;
  for (int64_t v : size) {
    if (v < 0) return InvalidNode(node, "size values must be non-negative");
  }
  if (theta->rank() != 3 || theta->dim(0) != size[0] || theta->dim(1) != nd ||
      theta->dim(2) != nd + 1) {
    return InvalidNode(node, "theta must have shape (", size[0], ", ", nd, ", ", nd + 1, ")");
  }
  // Output (N, spatial..., nd); spatial sizes in (D,) H, W order.
  const std::vector<int64_t> sp(size.begin() + 2, size.end());
  std::vector<int64_t> out_dims = {size[0]};
  out_dims.insert(out_dims.end(), sp.begin(), sp.end());
  out_dims.push_back(nd);
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, theta->dtype(), out_dims));
  return DispatchFloat(theta->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    // base[d][i]: normalised coordinate of cell i along spatial dim d.
    std::vector<std::vector<C>> base(nd);
    for (int d = 0; d < nd; ++d) {
      const int64_t s = sp[d];
      base[d].resize(s);
      for (int64_t i = 0; i < s; ++i) {
        if (ac) {
          // A single cell sits at -1, as torch.linspace(-1, 1, 1) gives.
          base[d][i] = s > 1 ? C(-1) + C(2) * static_cast<C>(i) / static_cast<C>(s - 1) : C(-1);
        } else {
          base[d][i] = (C(2) * static_cast<C>(i) + 1) / static_cast<C>(s) - C(1);
        }
      }
    }
    const int64_t n_sp = ir::NumElementsOf(sp);
    const T* th = theta->data<T>();
    T* o = out->data<T>();
    std::vector<int64_t> pos(nd, 0);
    std::array<C, 4> hom;  // homogeneous point (x, y, (z,) 1): innermost dim first
    for (int64_t n = 0; n < size[0]; ++n) {
      const T* m = th + n * nd * (nd + 1);
      std::fill(pos.begin(), pos.end(), 0);
      for (int64_t q = 0; q < n_sp; ++q) {
        for (int d = 0; d < nd; ++d) hom[d] = base[nd - 1 - d][pos[nd - 1 - d]];
        hom[nd] = 1;
        for (int r = 0; r < nd; ++r) {
          C acc = 0;
          for (int k = 0; k <= nd; ++k) acc += Load(m[r * (nd + 1) + k]) * hom[k];
          o[(n * n_sp + q) * nd + r] = Store<T>(acc);
        }
        for (int d = nd - 1; d >= 0; --d) {
          if (++pos[d] < sp[d]) break;
          pos[d] = 0;
        }
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterGridOps(Registry& r) {
  r.AddRef(ir::OpType::kGridSample, FloatTypes(), &GridSampleKernel::Create);
  r.AddRef(ir::OpType::kAffineGrid, FloatTypes(), &FunctionKernel<AffineGridRun>::Create);
}

}  // namespace kiln::kernels::cpu::ref::spatial
