// The sampling of Resize (opsets 10, 11, 13, 18, 19) and Upsample (7, 9), shared by the reference
// kernel (layout_resize.cc) and the fast one (avx512/resize_ops.cc): the attributes, the output
// length of every axis and, per resized axis, the input indices and weights each output position
// reads. Both kernels use these functions, so they read the same input elements with the same
// weights (the fast kernel's tests compare the two bit for bit over every mode).
//
// Source coordinates follow the ONNX reference evaluator (which produced the conformance data),
// including its use of the fractional output width `scale * in` in align_corners and
// tf_crop_and_resize when the output size came from `scales`. Everything is computed in double.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/kernels/kernel.h"

namespace kiln::kernels::cpu::ref::resize {

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

/// A Resize / Upsample node's attributes.
struct Attrs {
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

/// What one axis does: lengths, scale, the fractional output width the coordinate formulas
/// use, and the roi (tf_crop_and_resize).
struct AxisSpec {
  int64_t in = 0;
  int64_t out = 0;
  double scale = 1.0;
  double out_width = 0.0;
  double roi_start = 0.0;
  double roi_end = 1.0;
};

/// The precomputed sampling of one resized axis: output position o reads input indices
/// index[o * taps + k] with weights weight[o * taps + k] (nearest: one tap of weight 1;
/// linear/cubic: 2/4 taps, or more with antialias), or extrapolates.
struct AxisPlan {
  int taps = 1;
  std::vector<int64_t> index;        // out * taps input indices, clamped to [0, in)
  std::vector<double> weight;        // out * taps
  std::vector<uint8_t> extrapolate;  // out flags: write extrapolation_value
};

/// The node's attributes; errors name the node and the attribute.
absl::StatusOr<Attrs> ParseAttrs(const ir::Node& node);

/// Every axis's spec for this run's X and roi / scales / sizes inputs; errors name the node.
absl::StatusOr<std::vector<AxisSpec>> Specs(const ir::Node& node, const Attrs& attrs,
                                            KernelContext& ctx, const ir::Tensor& x);

/// Whether the axis is resized: an axis mapping every output index to itself is skipped.
bool AxisActive(const Attrs& attrs, const AxisSpec& s);

/// The sampling of a resized axis.
AxisPlan BuildPlan(const Attrs& attrs, const AxisSpec& s);

}  // namespace kiln::kernels::cpu::ref::resize
