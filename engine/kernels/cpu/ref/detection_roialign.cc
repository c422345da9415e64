// Reference kernel of RoiAlign (opsets 10, 16 and 22).
//
// Each RoI [x1, y1, x2, y2] (image coordinates, times spatial_scale) is cut into output_height x
// output_width bins; each bin samples a grid of sampling_ratio x sampling_ratio points (when 0:
// ceil(roi size / bins) per axis) by bilinear interpolation of X, and averages them (mode avg)
// or takes their maximum (mode max; each point is then the largest of its four weighted corner
// values, as in ONNX Runtime and the ONNX reference). Opset 16 added
// coordinate_transformation_mode: 'half_pixel' (its default) shifts the RoI by -0.5 pixel;
// 'output_half_pixel' (opset 10's only behaviour) does not, and widens RoIs narrower than a
// pixel to one. A sample point more than one pixel outside X counts as 0; one within a pixel of
// the border reads the border. Coordinates and sums are computed in double.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

// Sample points per RoI and axis (output bins times grid points) beyond this are refused: a
// 7 x 7 pooling of a RoI spanning a 4096-pixel feature map needs 4100, and each worker thread
// holds this many taps per axis.
constexpr double kMaxTaps = 1 << 20;

// One sample coordinate along an axis: the two neighbouring pixels and their weights; `valid`
// false for a point more than a pixel outside.
struct Tap {
  int64_t low = 0, high = 0;
  double w_low = 0, w_high = 0;
  bool valid = false;
};

// The tap of coordinate v on an axis of `size` pixels (size >= 1).
Tap MakeTap(double v, int64_t size) {
  Tap t;
  if (v < -1.0 || v > static_cast<double>(size)) return t;
  v = std::max(v, 0.0);
  t.low = static_cast<int64_t>(v);
  if (t.low >= size - 1) {
    t.low = t.high = size - 1;
    v = static_cast<double>(t.low);
  } else {
    t.high = t.low + 1;
  }
  const double frac = v - static_cast<double>(t.low);
  t.w_low = 1.0 - frac;
  t.w_high = frac;
  t.valid = true;
  return t;
}

class RoiAlignKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    const std::string mode = node.GetString("mode", "avg");
    if (mode != "avg" && mode != "max") {
      return InvalidNode(node, "mode must be 'avg' or 'max', got '", mode, "'");
    }
    // Opset 10 has no coordinate_transformation_mode: it behaves as 'output_half_pixel'.
    const std::string ctm =
        node.GetString("coordinate_transformation_mode",
                       node.since_version >= 16 ? "half_pixel" : "output_half_pixel");
    if (ctm != "half_pixel" && ctm != "output_half_pixel") {
      return InvalidNode(node,
                         "coordinate_transformation_mode must be 'half_pixel' or "
                         "'output_half_pixel', got '",
                         ctm, "'");
    }
    Params p;
    p.max = mode == "max";
    p.half_pixel = ctm == "half_pixel";
    p.out_h = node.GetInt("output_height", 1);
    p.out_w = node.GetInt("output_width", 1);
    p.sampling_ratio = node.GetInt("sampling_ratio", 0);
    p.spatial_scale = node.GetFloat("spatial_scale", 1.0f);
    if (p.out_h < 1 || p.out_w < 1) {
      return InvalidNode(node, "output_height and output_width must be positive, got ", p.out_h,
                         " and ", p.out_w);
    }
    if (p.sampling_ratio < 0) {
      return InvalidNode(node, "sampling_ratio must not be negative, got ", p.sampling_ratio);
    }
    if (!std::isfinite(p.spatial_scale)) {
      return InvalidNode(node, "spatial_scale must be finite, got ", p.spatial_scale);
    }
    return std::unique_ptr<Kernel>(new RoiAlignKernel(node, p));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* rois, RequireInput(node_, ctx, 1));
    ASSIGN_OR_RETURN(const ir::Tensor* bi_t, RequireInput(node_, ctx, 2));
    if (x->rank() != 4) {
      return InvalidNode(node_, "X must be 4-D [N, C, H, W], got shape ",
                         ir::DimsToString(x->dims()));
    }
    if (rois->rank() != 2 || rois->dim(1) != 4) {
      return InvalidNode(node_, "rois must be [num_rois, 4], got shape ",
                         ir::DimsToString(rois->dims()));
    }
    if (!IsFloating(rois->dtype())) {
      return InvalidNode(node_, "rois must be floating, got ", DataTypeOnnxName(rois->dtype()));
    }
    const int64_t num_rois = rois->dim(0);
    if (bi_t->rank() != 1 || bi_t->dim(0) != num_rois) {
      return InvalidNode(node_, "batch_indices must be 1-D of the ", num_rois, " rois, got shape ",
                         ir::DimsToString(bi_t->dims()));
    }
    ASSIGN_OR_RETURN(std::vector<int64_t> batch_index, ReadInts(node_, *bi_t, "batch_indices"));
    const int64_t n = x->dim(0), channels = x->dim(1), height = x->dim(2), width = x->dim(3);
    for (int64_t r = 0; r < num_rois; ++r) {
      if (batch_index[r] < 0 || batch_index[r] >= n) {
        return InvalidNode(node_, "batch_indices[", r, "] = ", batch_index[r],
                           " is out of range for batch size ", n);
      }
    }
    // Per RoI: start and bin size per axis, and the sampling grid.
    struct Roi {
      double y0, x0, bin_h, bin_w;
      int64_t grid_h, grid_w;
    };
    std::vector<Roi> geo(num_rois);
    const double offset = p_.half_pixel ? 0.5 : 0.0;
    for (int64_t r = 0; r < num_rois; ++r) {
      double c[4];
      for (int k = 0; k < 4; ++k)
        c[k] = ir::ElementAsDouble(*rois, r * 4 + k) * p_.spatial_scale - offset;
      double roi_w = c[2] - c[0], roi_h = c[3] - c[1];
      if (!p_.half_pixel) {  // malformed RoIs become at least one pixel
        roi_w = std::max(roi_w, 1.0);
        roi_h = std::max(roi_h, 1.0);
      }
      Roi& g = geo[r];
      g.y0 = c[1];
      g.x0 = c[0];
      g.bin_h = roi_h / static_cast<double>(p_.out_h);
      g.bin_w = roi_w / static_cast<double>(p_.out_w);
      double gh = static_cast<double>(p_.sampling_ratio), gw = gh;
      if (p_.sampling_ratio == 0) {
        gh = std::max(std::ceil(g.bin_h), 0.0);
        gw = std::max(std::ceil(g.bin_w), 0.0);
      }
      const double out_h = static_cast<double>(p_.out_h), out_w = static_cast<double>(p_.out_w);
      if (!(gh * out_h <= kMaxTaps && gw * out_w <= kMaxTaps)) {  // also catches NaN coordinates
        return InvalidNode(node_, "roi ", r, " [", c[0], ", ", c[1], ", ", c[2], ", ", c[3],
                           "] needs a sampling grid of ", gh, " x ", gw, " points in each of ",
                           p_.out_h, " x ", p_.out_w, " bins; the limit is ", kMaxTaps,
                           " points per axis");
      }
      g.grid_h = static_cast<int64_t>(gh);
      g.grid_w = static_cast<int64_t>(gw);
    }
    const int64_t oh = p_.out_h, ow = p_.out_w;
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), {num_rois, channels, oh, ow}));
    return DispatchFloat(x->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      const T* src = x->data<T>();
      T* dst = y->data<T>();
      ParallelFor(
          num_rois, num_rois > 1 && channels * oh * ow >= 64, [&](int64_t r_begin, int64_t r_end) {
            for (int64_t r = r_begin; r < r_end; ++r) {
              const Roi& g = geo[r];
              // Taps per output row / column and grid point; an empty image samples nothing.
              std::vector<Tap> ty(oh * g.grid_h), tx(ow * g.grid_w);
              if (height > 0 && width > 0) {
                for (int64_t ph = 0; ph < oh; ++ph) {
                  for (int64_t iy = 0; iy < g.grid_h; ++iy) {
                    const double v =
                        g.y0 + static_cast<double>(ph) * g.bin_h +
                        (static_cast<double>(iy) + 0.5) * g.bin_h / static_cast<double>(g.grid_h);
                    ty[ph * g.grid_h + iy] = MakeTap(v, height);
                  }
                }
                for (int64_t pw = 0; pw < ow; ++pw) {
                  for (int64_t ix = 0; ix < g.grid_w; ++ix) {
                    const double v =
                        g.x0 + static_cast<double>(pw) * g.bin_w +
                        (static_cast<double>(ix) + 0.5) * g.bin_w / static_cast<double>(g.grid_w);
                    tx[pw * g.grid_w + ix] = MakeTap(v, width);
                  }
                }
              }
              const double count = static_cast<double>(std::max<int64_t>(g.grid_h * g.grid_w, 1));
              for (int64_t c = 0; c < channels; ++c) {
                const T* plane = src + (batch_index[r] * channels + c) * height * width;
                T* out = dst + ((r * channels + c) * oh) * ow;
                for (int64_t ph = 0; ph < oh; ++ph) {
                  for (int64_t pw = 0; pw < ow; ++pw) {
                    double acc = 0;
                    bool first = true;
                    for (int64_t iy = 0; iy < g.grid_h; ++iy) {
                      const Tap& a = ty[ph * g.grid_h + iy];
                      for (int64_t ix = 0; ix < g.grid_w; ++ix) {
                        const Tap& b = tx[pw * g.grid_w + ix];
                        double v1 = 0, v2 = 0, v3 = 0, v4 = 0;  // weighted corners; 0 outside
                        if (a.valid && b.valid) {
                          v1 = a.w_low * b.w_low *
                               static_cast<double>(Load(plane[a.low * width + b.low]));
                          v2 = a.w_low * b.w_high *
                               static_cast<double>(Load(plane[a.low * width + b.high]));
                          v3 = a.w_high * b.w_low *
                               static_cast<double>(Load(plane[a.high * width + b.low]));
                          v4 = a.w_high * b.w_high *
                               static_cast<double>(Load(plane[a.high * width + b.high]));
                        }
                        if (!p_.max) {
                          acc += v1 + v2 + v3 + v4;
                        } else {
                          const double v = std::max(std::max(v1, v2), std::max(v3, v4));
                          acc = first ? v : std::max(acc, v);
                          first = false;
                        }
                      }
                    }
                    out[ph * ow + pw] = Store<T>(p_.max ? acc : acc / count);
                  }
                }
              }
            }
          });
      return absl::OkStatus();
    });
  }

 private:
  struct Params {
    bool max = false, half_pixel = true;
    int64_t out_h = 1, out_w = 1, sampling_ratio = 0;
    double spatial_scale = 1.0;
  };
  RoiAlignKernel(const ir::Node& node, Params p) : node_(node), p_(p) {}
  const ir::Node& node_;
  Params p_;
};

}  // namespace

void RegisterDetectionRoiAlign(Registry& r) {
  r.AddRef(ir::OpType::kRoiAlign, FloatTypes(), &RoiAlignKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
