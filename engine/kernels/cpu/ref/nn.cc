// The nn family: registration and the window geometry shared by Conv and the pools.
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace nn {

absl::StatusOr<WindowAttrs> ReadWindowAttrs(const ir::Node& node) {
  WindowAttrs w;
  std::string ap = node.GetString("auto_pad", "NOTSET");
  if (ap == "NOTSET") {
    w.auto_pad = AutoPad::kNotSet;
  } else if (ap == "SAME_UPPER") {
    w.auto_pad = AutoPad::kSameUpper;
  } else if (ap == "SAME_LOWER") {
    w.auto_pad = AutoPad::kSameLower;
  } else if (ap == "VALID") {
    w.auto_pad = AutoPad::kValid;
  } else {
    return InvalidNode(node, "auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '", ap,
                       "'");
  }
  w.kernel = node.GetInts("kernel_shape");
  w.strides = node.GetInts("strides");
  w.dilations = node.GetInts("dilations");
  w.pads = node.GetInts("pads");
  w.ceil_mode = node.GetInt("ceil_mode", 0) != 0;
  for (int64_t k : w.kernel) {
    if (k <= 0) return InvalidNode(node, "kernel_shape values must be positive");
  }
  for (int64_t s : w.strides) {
    if (s <= 0) return InvalidNode(node, "strides must be positive");
  }
  for (int64_t d : w.dilations) {
    if (d <= 0) return InvalidNode(node, "dilations must be positive");
  }
  if (w.pads.size() % 2 != 0) return InvalidNode(node, "pads must have an even length");
  if (w.auto_pad != AutoPad::kNotSet) w.pads.clear();  // auto_pad overrides explicit pads
  return w;
}

absl::StatusOr<Window> ResolveWindow(const ir::Node& node, const WindowAttrs& attrs,
                                     const std::vector<int64_t>& in,
                                     const std::vector<int64_t>& kernel) {
  const size_t nd = in.size();
  auto check_len = [&](const std::vector<int64_t>& v, size_t n, const char* what) {
    return v.empty() || v.size() == n
               ? absl::OkStatus()
               : InvalidNode(node, what, " has ", v.size(), " values, expected ", n);
  };
  RETURN_IF_ERROR(check_len(kernel, nd, "kernel_shape"));
  RETURN_IF_ERROR(check_len(attrs.strides, nd, "strides"));
  RETURN_IF_ERROR(check_len(attrs.dilations, nd, "dilations"));
  RETURN_IF_ERROR(check_len(attrs.pads, 2 * nd, "pads"));
  Window w;
  w.in = in;
  w.kernel = kernel;
  w.strides = attrs.strides.empty() ? std::vector<int64_t>(nd, 1) : attrs.strides;
  w.dilations = attrs.dilations.empty() ? std::vector<int64_t>(nd, 1) : attrs.dilations;
  w.pad_begin.assign(nd, 0);
  w.pad_end.assign(nd, 0);
  w.out.assign(nd, 0);
  for (size_t d = 0; d < nd; ++d) {
    if (attrs.pads.size() == 2 * nd) {
      w.pad_begin[d] = attrs.pads[d];
      w.pad_end[d] = attrs.pads[nd + d];
      if (w.pad_begin[d] < 0 || w.pad_end[d] < 0) {
        return InvalidNode(node, "pads must be non-negative");
      }
    }
    const int64_t s = w.strides[d];
    const int64_t eff = (kernel[d] - 1) * w.dilations[d] + 1;  // dilated window extent
    switch (attrs.auto_pad) {
      case AutoPad::kSameUpper:
      case AutoPad::kSameLower: {
        w.out[d] = (in[d] + s - 1) / s;
        int64_t total = std::max<int64_t>(0, (w.out[d] - 1) * s + eff - in[d]);
        int64_t small = total / 2;
        w.pad_begin[d] = attrs.auto_pad == AutoPad::kSameUpper ? small : total - small;
        w.pad_end[d] = total - w.pad_begin[d];
        break;
      }
      case AutoPad::kValid:
      case AutoPad::kNotSet: {
        int64_t span = in[d] + w.pad_begin[d] + w.pad_end[d] - eff;
        if (span < 0) {
          return InvalidNode(node, "window of extent ", eff, " does not fit input size ", in[d],
                             " with pads on spatial axis ", d);
        }
        // ceil_mode only affects explicit padding: the spec's VALID size with ceil_mode,
        // ceil((in - eff + 1) / s), equals the floor formula.
        if (attrs.ceil_mode && attrs.auto_pad == AutoPad::kNotSet) {
          w.out[d] = (span + s - 1) / s + 1;
          // A window that would start entirely inside the end padding is dropped.
          if ((w.out[d] - 1) * s >= in[d] + w.pad_begin[d]) --w.out[d];
        } else {
          w.out[d] = span / s + 1;
        }
        break;
      }
    }
  }
  return w;
}

}  // namespace nn

void RegisterNn(Registry& r) {
  nn::RegisterGemmOps(r);
  nn::RegisterConvOps(r);
  nn::RegisterPoolOps(r);
  nn::RegisterEinsum(r);
  nn::RegisterAttention(r);
}

}  // namespace kiln::kernels::cpu::ref
