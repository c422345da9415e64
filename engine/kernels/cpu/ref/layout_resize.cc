// Resize (opsets 10, 11, 13, 18, 19) and Upsample (7, 9): one separable N-D implementation.
//
// Every mode of these ops is separable: the output is obtained by resizing one axis at a time.
// For each resized axis we compute, once, an AxisPlan: for every output position the input
// indices it reads (already clamped, which is the spec's edge padding), their weights (nearest:
// one tap of weight 1; linear/cubic: 2/4 taps, or more with antialias) and whether the position
// extrapolates (tf_crop_and_resize). Applying a plan is the same loop for every mode.
//
// Precision: nearest moves bytes (exact for every dtype). Linear/cubic convert the input to the
// compute type once, keep every intermediate pass there and round once at the end: fp16/bf16/
// float compute in float (the fp16/bf16 rule); double and integers compute in double (float
// would lose digits of large integers and misplace values near the .5 rounding boundary);
// integer outputs round half to even and saturate, as the ONNX reference does.
//
// Source coordinates follow the ONNX reference evaluator (which produced the conformance data),
// including its use of the fractional output width `scale * in` in align_corners and
// tf_crop_and_resize when the output size came from `scales`.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

enum class Interp { kNearest, kLinear, kCubic };
enum class CoordMode {
  kHalfPixel,
  kHalfPixelSymmetric,
  kPytorchHalfPixel,
  kAlignCorners,
  kAsymmetric,
  kTfCropAndResize,
  kTfHalfPixelForNn,
};
// kSimple is the pre-opset-11 rule (Upsample, Resize-10): floor when upsampling the axis, ceil
// when downsampling it.
enum class NearestMode { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kSimple };
enum class AspectPolicy { kStretch, kNotLarger, kNotSmaller };

struct ResizeAttrs {
  Interp interp = Interp::kNearest;
  CoordMode coord = CoordMode::kHalfPixel;
  NearestMode nearest = NearestMode::kRoundPreferFloor;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  bool antialias = false;
  float extrapolation_value = 0.0f;
  AspectPolicy policy = AspectPolicy::kStretch;
  bool has_axes = false;
  std::vector<int64_t> axes;
  // Legacy form (Upsample, Resize-10): scales only, from the attribute (Upsample-7) or input 1.
  bool legacy = false;
  std::vector<float> scales_attr;
};

template <typename E>
absl::StatusOr<E> ParseEnum(const ir::Node& node, const char* attr, const std::string& dflt,
                            std::initializer_list<std::pair<const char*, E>> values) {
  const std::string s = node.GetString(attr, dflt);
  for (const auto& [name, v] : values) {
    if (s == name) return v;
  }
  return InvalidNode(node, "unsupported ", attr, " '", s, "'");
}

absl::StatusOr<ResizeAttrs> ParseResizeAttrs(const ir::Node& node) {
  ResizeAttrs a;
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

// What one axis does: output length, scale, the fractional output width used by the
// coordinate formulas, and the roi (tf_crop_and_resize).
struct AxisSpec {
  int64_t in = 0;
  int64_t out = 0;
  double scale = 1.0;
  double out_width = 0.0;
  double roi_start = 0.0;
  double roi_end = 1.0;
};

// The precomputed sampling of one axis.
struct AxisPlan {
  int taps = 1;
  std::vector<int64_t> index;        // out * taps input indices, clamped to [0, in)
  std::vector<double> weight;        // out * taps
  std::vector<uint8_t> extrapolate;  // out flags: write extrapolation_value
};

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

AxisPlan BuildPlan(const ResizeAttrs& a, const AxisSpec& s) {
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

// Resizes axis `axis` of `src` (dims `dims`) into `dst` by `plan` (linear or cubic). V is the
// element type accumulated, C the weight type.
template <typename V, typename C>
void ApplyPlan(const V* src, V* dst, const std::vector<int64_t>& dims, int axis, int64_t out,
               const AxisPlan& plan, const std::vector<C>& weights, V extrapolation) {
  int64_t outer = 1, inner = 1;
  for (int a = 0; a < axis; ++a) outer *= dims[a];
  for (size_t a = axis + 1; a < dims.size(); ++a) inner *= dims[a];
  const int64_t in = dims[axis];
  const int taps = plan.taps;
  for (int64_t o = 0; o < outer; ++o) {
    const V* s = src + o * in * inner;
    V* d = dst + o * out * inner;
    for (int64_t y = 0; y < out; ++y, d += inner) {
      if (plan.extrapolate[y]) {
        std::fill(d, d + inner, extrapolation);
        continue;
      }
      const int64_t* idx = &plan.index[y * taps];
      const C* w = &weights[y * taps];
      std::fill(d, d + inner, V(0));
      for (int k = 0; k < taps; ++k) {
        const V* row = s + idx[k] * inner;
        const C wk = w[k];
        for (int64_t j = 0; j < inner; ++j) d[j] += wk * row[j];
      }
    }
  }
}

// Runs the active plans axis by axis over `data` (dims updated in place).
template <typename V, typename C>
std::vector<V> ResizeSeparable(std::vector<V> data, std::vector<int64_t> dims,
                               const std::vector<AxisSpec>& specs,
                               const std::vector<AxisPlan>& plans, const std::vector<bool>& active,
                               V extrapolation) {
  for (size_t a = 0; a < specs.size(); ++a) {
    if (!active[a]) continue;
    std::vector<C> weights(plans[a].weight.begin(), plans[a].weight.end());
    std::vector<int64_t> out_dims = dims;
    out_dims[a] = specs[a].out;
    std::vector<V> next(ir::NumElementsOf(out_dims));
    ApplyPlan(data.data(), next.data(), dims, static_cast<int>(a), specs[a].out, plans[a], weights,
              extrapolation);
    data.swap(next);
    dims = std::move(out_dims);
  }
  return data;
}

// Nearest, all axes at once: output element (o_0, ..., o_r) is input element (i_0, ..., i_r),
// i_a = the plan's one tap for o_a on a resized axis and o_a on the others, or the
// extrapolation value when any resized axis extrapolates at o_a -- what ResizeSeparable's
// axis-by-axis passes give, without their intermediate copies. The axes after the last resized
// one are the same in X and Y: each output index up to it copies that block whole.
template <typename U>
void NearestGather(const U* src, U* dst, const std::vector<int64_t>& in_dims,
                   const std::vector<int64_t>& out_dims, const std::vector<AxisPlan>& plans,
                   const std::vector<bool>& active, U extrapolation) {
  const int rank = static_cast<int>(out_dims.size());
  int last = rank - 1;
  while (last > 0 && !active[last]) --last;
  int64_t block = 1;
  for (int a = last + 1; a < rank; ++a) block *= out_dims[a];
  const std::vector<int64_t> in_strides = Strides(in_dims);
  int64_t outer = 1;
  for (int a = 0; a <= last; ++a) outer *= out_dims[a];
#pragma omp parallel for schedule(static) if (outer * block >= (int64_t{1} << 16))
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rest = o, from = 0;
    bool fill = false;
    for (int a = last; a >= 0; --a) {
      const int64_t i = rest % out_dims[a];
      rest /= out_dims[a];
      if (active[a]) {
        fill |= plans[a].extrapolate[i] != 0;
        from += plans[a].index[i] * in_strides[a];
      } else {
        from += i * in_strides[a];
      }
    }
    U* d = dst + o * block;
    if (fill) {
      std::fill(d, d + block, extrapolation);
    } else {
      std::copy(src + from, src + from + block, d);
    }
  }
}

// Compute type of linear/cubic for storage type T (see the file comment).
template <typename T>
using ResizeCompute =
    std::conditional_t<std::is_same_v<T, double> || std::is_integral_v<T>, double, float>;

// Compute value -> storage: floats round once; integers round half to even and saturate.
template <typename T, typename C>
T FromCompute(C v) {
  if constexpr (std::is_same_v<T, bool>) {
    return std::nearbyint(v) >= 1;
  } else if constexpr (std::is_integral_v<T>) {
    if (std::isnan(v)) return 0;
    const C r = std::nearbyint(v);
    if (r <= static_cast<C>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
    if (r >= static_cast<C>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(r);
  } else {
    return Store<T>(v);
  }
}

class ResizeKernel final : public Kernel {
 public:
  ResizeKernel(const ir::Node& node, ResizeAttrs attrs) : node_(node), attrs_(std::move(attrs)) {}
  absl::Status Run(KernelContext& ctx) override;

 private:
  absl::StatusOr<std::vector<AxisSpec>> Specs(KernelContext& ctx, const ir::Tensor& x) const;

  const ir::Node& node_;
  ResizeAttrs attrs_;
};

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

absl::StatusOr<std::vector<AxisSpec>> ResizeKernel::Specs(KernelContext& ctx,
                                                          const ir::Tensor& x) const {
  const ir::Node& node = node_;
  const int rank = x.rank();
  std::vector<AxisSpec> specs(rank);
  for (int d = 0; d < rank; ++d) {
    specs[d].in = specs[d].out = x.dim(d);
    specs[d].out_width = static_cast<double>(x.dim(d));
  }
  std::vector<int> axes;
  if (attrs_.has_axes) {
    std::vector<bool> seen(rank, false);
    for (int64_t ax : attrs_.axes) {
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
  if (attrs_.legacy) {
    if (!attrs_.scales_attr.empty()) {
      scales.assign(attrs_.scales_attr.begin(), attrs_.scales_attr.end());
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
  if (attrs_.coord == CoordMode::kTfCropAndResize) {
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
  if (attrs_.policy == AspectPolicy::kStretch) {
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
      attrs_.policy == AspectPolicy::kNotLarger ? std::numeric_limits<double>::infinity() : 0.0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t in = specs[axes[i]].in;
    if (in == 0) continue;
    const double r = sizes[i] / static_cast<double>(in);
    scale = attrs_.policy == AspectPolicy::kNotLarger ? std::min(scale, r) : std::max(scale, r);
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

absl::Status ResizeKernel::Run(KernelContext& ctx) {
  const ir::Node& node = node_;
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(std::vector<AxisSpec> specs, Specs(ctx, *x));
  const int rank = x->rank();
  std::vector<int64_t> out_dims(rank);
  for (int d = 0; d < rank; ++d) {
    out_dims[d] = specs[d].out;
    if (specs[d].in == 0 && specs[d].out > 0) {
      return InvalidNode(node, "cannot resize an empty axis ", d, " to ", specs[d].out);
    }
  }
  if (ir::NumElementsOf(out_dims) < 0) {
    return InvalidNode(node, "output shape ", ir::DimsToString(out_dims), " is too large");
  }
  ASSIGN_OR_RETURN(ir::Tensor * out, ctx.output(0, x->dtype(), out_dims));
  if (out->num_elements() == 0) return absl::OkStatus();

  // Axes that map every output index to itself are skipped (as the reference does).
  std::vector<AxisPlan> plans(rank);
  std::vector<bool> active(rank, false);
  for (int d = 0; d < rank; ++d) {
    const AxisSpec& s = specs[d];
    const bool full_roi = s.roi_start == 0.0 && s.roi_end == 1.0;
    if (s.scale == 1.0 && s.out == s.in &&
        (attrs_.coord != CoordMode::kTfCropAndResize || full_roi)) {
      continue;
    }
    active[d] = true;
    plans[d] = BuildPlan(attrs_, s);
  }

  const int64_t total = x->num_elements();
  return DispatchAll(x->dtype(), [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    const T* src = x->data<T>();
    T* dst = out->data<T>();
    if (attrs_.interp == Interp::kNearest) {
      // Bytes move unchanged; only the extrapolation value is converted to T.
      using U = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;
      const T ev = FromCompute<T>(attrs_.extrapolation_value);
      U uev;
      std::memcpy(&uev, &ev, sizeof(U));
      NearestGather(reinterpret_cast<const U*>(src), reinterpret_cast<U*>(dst), x->dims(), out_dims,
                    plans, active, uev);
      return absl::OkStatus();
    }
    using C = ResizeCompute<T>;
    std::vector<C> data(total);
    for (int64_t i = 0; i < total; ++i) data[i] = static_cast<C>(Load<T>(src[i]));
    std::vector<C> r = ResizeSeparable<C, C>(std::move(data), x->dims(), specs, plans, active,
                                             static_cast<C>(attrs_.extrapolation_value));
    for (size_t i = 0; i < r.size(); ++i) dst[i] = FromCompute<T>(r[i]);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateResize(const ir::Node& node) {
  ASSIGN_OR_RETURN(ResizeAttrs attrs, ParseResizeAttrs(node));
  return std::unique_ptr<Kernel>(new ResizeKernel(node, std::move(attrs)));
}

}  // namespace

void RegisterLayoutResize(Registry& r) {
  r.AddRef(ir::OpType::kResize, AllTypes(), CreateResize);
  r.AddRef(ir::OpType::kUpsample, AllTypes(), CreateResize);
}

}  // namespace kiln::kernels::cpu::ref
