// The sampling of Resize / Upsample (resize_sampling.h): attribute parsing, per-axis output
// lengths from scales / sizes / keep_aspect_ratio_policy, source coordinates, nearest rounding,
// linear / cubic / antialias weights. One copy for the reference and the fast kernel.
#include "engine/kernels/cpu/ref/resize_sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "engine/kernels/cpu/ref/common.h"

namespace kiln::kernels::cpu::ref::resize {
namespace {

template <typename E>
absl::StatusOr<E> ParseEnum(const ir::Node& node, const char* attr, const std::string& dflt,
                            std::initializer_list<std::pair<const char*, E>> values) {
  const std::string s = node.GetString(attr, dflt);
  for (const auto& [name, v] : values) {
    if (s == name) return v;
  }
  return InvalidNode(node, "unsupported ", attr, " '", s, "'");
}

double SourceCoord(CoordMode mode, double y, const AxisSpec& s) {
  const double in = static_cast<double>(s.in);
  switch (mode) {
    case CoordMode::kHalfPixel:
      return (y + 0.5) / s.scale - 0.5;
    case CoordMode::kHalfPixelSymmetric: {
      const double adjustment = static_cast<double>(s.out) / s.out_width;
      const double offset = in / 2 * (1 - adjustment);
      return offset + (y + 0.5) / s.scale - 0.5;
    }
    case CoordMode::kPytorchHalfPixel:
      // The spec (and ONNX Runtime): 0 when the resized length is 1.
      return s.out > 1 ? (y + 0.5) / s.scale - 0.5 : 0.0;
    case CoordMode::kAlignCorners:
      return s.out_width == 1 ? 0.0 : y * (in - 1) / (s.out_width - 1);
    case CoordMode::kAsymmetric:
      return y / s.scale;
    case CoordMode::kTfHalfPixelForNn:
      return (y + 0.5) / s.scale;
    case CoordMode::kTfCropAndResize: {
      const double span = (s.roi_end - s.roi_start) * (in - 1);
      const double x = s.out_width == 1 ? span / 2 : y * span / (s.out_width - 1);
      return x + s.roi_start * (in - 1);
    }
  }
  return 0.0;
}

int64_t NearestIndex(NearestMode mode, double x, double scale) {
  switch (mode) {
    case NearestMode::kRoundPreferFloor:
      return static_cast<int64_t>(std::ceil(x - 0.5));
    case NearestMode::kRoundPreferCeil:
      return static_cast<int64_t>(std::floor(x + 0.5));
    case NearestMode::kFloor:
      return static_cast<int64_t>(std::floor(x));
    case NearestMode::kCeil:
      return static_cast<int64_t>(std::ceil(x));
    case NearestMode::kSimple:
      return static_cast<int64_t>(scale < 1 ? std::ceil(x) : std::floor(x));
  }
  return 0;
}

// Keys' cubic convolution kernel with parameter a (|d| in input pixels).
double CubicKernel(double d, double a) {
  d = std::abs(d);
  if (d <= 1) return ((a + 2) * d - (a + 3)) * d * d + 1;
  if (d < 2) return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
  return 0.0;
}

void Normalize(double* w, int n) {
  double sum = 0;
  for (int k = 0; k < n; ++k) sum += w[k];
  if (sum == 0) return;  // every tap excluded: the output is 0, as in the reference
  for (int k = 0; k < n; ++k) w[k] /= sum;
}

// Output lengths from scales must convert to int64 exactly; far beyond any allocatable size.
constexpr double kMaxDim = 9007199254740992.0;  // 2^53

// Reads an optional float tensor input; absent and empty are the same ("not given").
std::vector<double> ReadFloats(KernelContext& ctx, int i) {
  std::vector<double> v;
  if (const ir::Tensor* t = ctx.input(i)) {
    for (int64_t k = 0; k < t->num_elements(); ++k) v.push_back(ir::ElementAsDouble(*t, k));
  }
  return v;
}

}  // namespace

absl::StatusOr<Attrs> ParseAttrs(const ir::Node& node) {
  Attrs a;
  const bool upsample = node.op == ir::OpType::kUpsample;
  a.legacy = upsample || node.since_version < 11;
  ASSIGN_OR_RETURN(a.interp, ParseEnum<Interp>(node, "mode", "nearest",
                                               {{"nearest", Interp::kNearest},
                                                {"linear", Interp::kLinear},
                                                {"bilinear", Interp::kLinear},
                                                {"cubic", Interp::kCubic}}));
  if (a.legacy) {
    if (a.interp == Interp::kCubic) return InvalidNode(node, "mode 'cubic' needs opset 11");
    a.coord = CoordMode::kAsymmetric;
    a.nearest = NearestMode::kSimple;
    if (upsample && node.since_version < 9) {
      if (!node.has_attr("scales")) return InvalidNode(node, "the scales attribute is required");
      a.scales_attr = node.GetFloats("scales");
    }
    return a;
  }
  ASSIGN_OR_RETURN(a.coord,
                   ParseEnum<CoordMode>(node, "coordinate_transformation_mode", "half_pixel",
                                        {{"half_pixel", CoordMode::kHalfPixel},
                                         {"half_pixel_symmetric", CoordMode::kHalfPixelSymmetric},
                                         {"pytorch_half_pixel", CoordMode::kPytorchHalfPixel},
                                         {"align_corners", CoordMode::kAlignCorners},
                                         {"asymmetric", CoordMode::kAsymmetric},
                                         {"tf_crop_and_resize", CoordMode::kTfCropAndResize},
                                         {"tf_half_pixel_for_nn", CoordMode::kTfHalfPixelForNn}}));
  ASSIGN_OR_RETURN(a.nearest,
                   ParseEnum<NearestMode>(node, "nearest_mode", "round_prefer_floor",
                                          {{"round_prefer_floor", NearestMode::kRoundPreferFloor},
                                           {"round_prefer_ceil", NearestMode::kRoundPreferCeil},
                                           {"floor", NearestMode::kFloor},
                                           {"ceil", NearestMode::kCeil}}));
  ASSIGN_OR_RETURN(a.policy, ParseEnum<AspectPolicy>(node, "keep_aspect_ratio_policy", "stretch",
                                                     {{"stretch", AspectPolicy::kStretch},
                                                      {"not_larger", AspectPolicy::kNotLarger},
                                                      {"not_smaller", AspectPolicy::kNotSmaller}}));
  a.cubic_a = node.GetFloat("cubic_coeff_a", -0.75f);
  a.exclude_outside = node.GetInt("exclude_outside", 0) != 0;
  a.antialias = node.GetInt("antialias", 0) != 0;
  a.extrapolation_value = node.GetFloat("extrapolation_value", 0.0f);
  a.has_axes = node.has_attr("axes");
  a.axes = node.GetInts("axes");
  return a;
}

absl::StatusOr<std::vector<AxisSpec>> Specs(const ir::Node& node, const Attrs& attrs,
                                            KernelContext& ctx, const ir::Tensor& x) {
  const int rank = x.rank();
  std::vector<AxisSpec> specs(rank);
  for (int d = 0; d < rank; ++d) {
    specs[d].in = specs[d].out = x.dim(d);
    specs[d].out_width = static_cast<double>(x.dim(d));
  }
  std::vector<int> axes;
  if (attrs.has_axes) {
    std::vector<bool> seen(rank, false);
    for (int64_t ax : attrs.axes) {
      ASSIGN_OR_RETURN(int d, NormalizeAxis(node, ax, rank));
      if (seen[d]) return InvalidNode(node, "axis ", ax, " is repeated");
      seen[d] = true;
      axes.push_back(d);
    }
  } else {
    for (int d = 0; d < rank; ++d) axes.push_back(d);
  }
  const size_t n = axes.size();

  std::vector<double> roi, scales, sizes;
  if (attrs.legacy) {
    if (!attrs.scales_attr.empty()) {
      scales.assign(attrs.scales_attr.begin(), attrs.scales_attr.end());
    } else {
      ASSIGN_OR_RETURN(const ir::Tensor* t, RequireInput(node, ctx, 1));
      for (int64_t k = 0; k < t->num_elements(); ++k) scales.push_back(ir::ElementAsDouble(*t, k));
    }
  } else {
    roi = ReadFloats(ctx, 1);
    scales = ReadFloats(ctx, 2);
    if (const ir::Tensor* t = ctx.input(3); t != nullptr && t->num_elements() > 0) {
      ASSIGN_OR_RETURN(std::vector<int64_t> s, ReadInts(node, *t, "sizes"));
      sizes.assign(s.begin(), s.end());
    }
  }
  if (scales.empty() == sizes.empty()) {
    return InvalidNode(node, "exactly one of scales and sizes must be given");
  }
  const std::vector<double>& given = scales.empty() ? sizes : scales;
  if (given.size() != n) {
    return InvalidNode(node, scales.empty() ? "sizes" : "scales", " has ", given.size(),
                       " entries, expected ", n);
  }
  if (attrs.coord == CoordMode::kTfCropAndResize) {
    if (roi.size() != 2 * n) {
      return InvalidNode(node, "roi has ", roi.size(), " entries, expected ", 2 * n);
    }
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(roi[i]) || !std::isfinite(roi[n + i])) {
        return InvalidNode(node, "roi values must be finite");
      }
      specs[axes[i]].roi_start = roi[i];
      specs[axes[i]].roi_end = roi[n + i];
    }
  }

  if (!scales.empty()) {
    for (size_t i = 0; i < n; ++i) {
      if (!(scales[i] > 0) || !std::isfinite(scales[i])) {
        return InvalidNode(node, "scales must be positive and finite, got ", scales[i]);
      }
      AxisSpec& s = specs[axes[i]];
      s.scale = scales[i];
      s.out_width = scales[i] * static_cast<double>(s.in);
      if (s.out_width >= kMaxDim) return InvalidNode(node, "scale ", scales[i], " is too large");
      s.out = static_cast<int64_t>(std::floor(s.out_width));
    }
    return specs;
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t in = specs[axes[i]].in;
    if (sizes[i] < 0) return InvalidNode(node, "sizes must be >= 0, got ", sizes[i]);
    if (in == 0 && sizes[i] > 0) {
      return InvalidNode(node, "cannot resize an empty axis ", axes[i], " to ", sizes[i]);
    }
  }
  if (attrs.policy == AspectPolicy::kStretch) {
    for (size_t i = 0; i < n; ++i) {
      AxisSpec& s = specs[axes[i]];
      s.out = static_cast<int64_t>(sizes[i]);
      s.out_width = sizes[i];
      s.scale = s.in == 0 ? 1.0 : sizes[i] / static_cast<double>(s.in);
    }
    return specs;
  }
  // keep_aspect_ratio_policy: one scale for every listed axis, sizes rounded half up.
  double scale =
      attrs.policy == AspectPolicy::kNotLarger ? std::numeric_limits<double>::infinity() : 0.0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t in = specs[axes[i]].in;
    if (in == 0) continue;
    const double r = sizes[i] / static_cast<double>(in);
    scale = attrs.policy == AspectPolicy::kNotLarger ? std::min(scale, r) : std::max(scale, r);
  }
  if (!std::isfinite(scale) || scale <= 0) {
    return InvalidNode(node, "sizes give no usable scale for keep_aspect_ratio_policy");
  }
  for (int d : axes) {
    AxisSpec& s = specs[d];
    s.scale = scale;
    s.out_width = scale * static_cast<double>(s.in);
    if (s.out_width >= kMaxDim) return InvalidNode(node, "sizes give a too large output");
    s.out = static_cast<int64_t>(std::floor(s.out_width + 0.5));
  }
  return specs;
}

bool AxisActive(const Attrs& attrs, const AxisSpec& s) {
  const bool full_roi = s.roi_start == 0.0 && s.roi_end == 1.0;
  return !(s.scale == 1.0 && s.out == s.in &&
           (attrs.coord != CoordMode::kTfCropAndResize || full_roi));
}

AxisPlan BuildPlan(const Attrs& a, const AxisSpec& s) {
  AxisPlan p;
  const double support = a.interp == Interp::kCubic ? 2.0 : 1.0;
  // Antialiasing stretches the filter by 1/scale when downsampling.
  const double filter_scale = a.antialias ? std::min(s.scale, 1.0) : 1.0;
  if (a.interp != Interp::kNearest) {
    const int64_t first = static_cast<int64_t>(std::floor(-support / filter_scale)) + 1;
    p.taps = static_cast<int>(2 - 2 * first);
  }
  p.index.resize(s.out * p.taps);
  p.weight.resize(s.out * p.taps);
  p.extrapolate.assign(s.out, 0);
  const int64_t last = s.in - 1;
  for (int64_t y = 0; y < s.out; ++y) {
    double x = SourceCoord(a.coord, static_cast<double>(y), s);
    if (a.coord == CoordMode::kTfCropAndResize && (x < 0 || x > static_cast<double>(last))) {
      p.extrapolate[y] = 1;
    }
    // A far-away x (a huge roi) reads only clamped edge taps; bringing it within a window of
    // the axis keeps that result and keeps the integer conversions below in range.
    const double margin = p.taps + 2.0;
    x = std::clamp(x, -margin, static_cast<double>(s.in) + margin);
    int64_t* idx = &p.index[y * p.taps];
    double* w = &p.weight[y * p.taps];
    if (a.interp == Interp::kNearest) {
      idx[0] = std::clamp<int64_t>(NearestIndex(a.nearest, x, s.scale), 0, last);
      w[0] = 1.0;
      continue;
    }
    // Taps floor(x) + j for j in [1 - taps/2, taps/2]; the window is symmetric around x up to
    // one tap of zero weight, so every tap with non-zero weight is included.
    const int64_t base = static_cast<int64_t>(std::floor(x)) + 1 - p.taps / 2;
    for (int k = 0; k < p.taps; ++k) {
      const int64_t i = base + k;
      const double d = std::abs(static_cast<double>(i) - x) * filter_scale;
      w[k] = a.interp == Interp::kLinear ? std::max(0.0, 1.0 - d) : CubicKernel(d, a.cubic_a);
      idx[k] = i;
    }
    if (a.antialias) Normalize(w, p.taps);
    if (a.exclude_outside) {
      for (int k = 0; k < p.taps; ++k) {
        if (idx[k] < 0 || idx[k] > last) w[k] = 0;
      }
      Normalize(w, p.taps);
    }
    for (int k = 0; k < p.taps; ++k) idx[k] = std::clamp<int64_t>(idx[k], 0, last);
  }
  return p;
}

}  // namespace kiln::kernels::cpu::ref::resize
