// Reference kernels of the data-ops family, part 2: MeanVarianceNormalization (opsets 9, 13) and
// DynamicQuantizeLinear (opset 11).
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/dynamic_quantize.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

// ---------------------------------------------------------------------------------------------
// MeanVarianceNormalization: Y = (X - mean) / (sqrt(var) + 1e-9), mean and (population) variance
// taken over `axes` (default [0, 2, 3]). The spec's function computes var as E[X^2] - E[X]^2; we
// take the mean of squared deviations instead (same value, without the cancellation that can
// make E[X^2] - E[X]^2 negative). The 1e-9 is the spec function's epsilon.

absl::StatusOr<std::vector<bool>> MvnReduced(const ir::Node& node, int rank) {
  std::vector<bool> reduced(rank, false);
  for (int64_t a : node.GetInts("axes", {0, 2, 3})) {
    ASSIGN_OR_RETURN(int d, NormalizeAxis(node, a, rank));
    reduced[d] = true;
  }
  return reduced;
}

absl::Status CheckMvn(const ir::Node& node) {
  const ir::Value* v = node.input(0);
  if (v == nullptr || !v->shape.rank_known) return absl::OkStatus();
  return MvnReduced(node, v->shape.rank()).status();
}

// Calls f(element, group) for every element of a tensor of `dims` in memory order, where
// `group` indexes the element's coordinates on the kept (non-reduced) dims.
template <typename F>
void ForEachGrouped(const std::vector<int64_t>& dims, const std::vector<int64_t>& gstride,
                    int64_t total, F&& f) {
  const int rank = static_cast<int>(dims.size());
  std::vector<int64_t> ctr(rank, 0);
  int64_t g = 0;
  for (int64_t e = 0; e < total; ++e) {
    f(e, g);
    for (int k = rank - 1; k >= 0; --k) {
      g += gstride[k];
      if (++ctr[k] < dims[k]) break;
      g -= dims[k] * gstride[k];
      ctr[k] = 0;
    }
  }
}

absl::Status RunMvn(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(std::vector<bool> reduced, MvnReduced(node, x->rank()));
  const std::vector<int64_t>& dims = x->dims();
  // Group strides: row-major over the kept dims, 0 on reduced dims.
  std::vector<int64_t> gstride(x->rank(), 0);
  int64_t groups = 1, count = 1;
  for (int k = x->rank() - 1; k >= 0; --k) {
    if (reduced[k]) {
      count *= dims[k];
    } else {
      gstride[k] = groups;
      groups *= dims[k];
    }
  }
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), dims));
  const int64_t total = x->num_elements();
  if (total == 0) return absl::OkStatus();
  return DispatchFloat(x->dtype(), [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    const T* xs = x->data<T>();
    T* ys = y->data<T>();
    std::vector<C> mean(groups, C(0)), var(groups, C(0));
    ForEachGrouped(dims, gstride, total, [&](int64_t e, int64_t g) { mean[g] += Load(xs[e]); });
    for (C& m : mean) m /= static_cast<C>(count);
    ForEachGrouped(dims, gstride, total, [&](int64_t e, int64_t g) {
      const C dv = Load(xs[e]) - mean[g];
      var[g] += dv * dv;
    });
    const C eps = static_cast<C>(1e-9);
    for (C& v : var) v = std::sqrt(v / static_cast<C>(count)) + eps;  // now the divisor
    ForEachGrouped(dims, gstride, total, [&](int64_t e, int64_t g) {
      ys[e] = Store<T>((Load(xs[e]) - mean[g]) / var[g]);
    });
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------------------
// DynamicQuantizeLinear: uint8 quantization with scale and zero point from the data range
// (extended to include 0), all in float as the spec writes it:
//   scale = (max(0, max(x)) - min(0, min(x))) / 255
//   zero_point = round_half_even(clamp(0 - min(0, min(x)) / scale, 0, 255))
//   y = clamp(round_half_even(x / scale) + zero_point, 0, 255)
// An all-zero (or empty) input has max == min; scale is then 1 (the ONNX reference's choice)
// rather than the 0 that would make every x / scale NaN.

absl::Status RunDynamicQuantizeLinear(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  if (x->dtype() != DataType::kF32) {
    return InvalidNode(node, "x must be float, got ", DataTypeOnnxName(x->dtype()));
  }
  const float* xs = x->data<float>();
  const int64_t n = x->num_elements();
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, xs[i]);
    hi = std::max(hi, xs[i]);
  }
  const DynamicQuantParams p = DynamicQuantizeParams(lo, hi);
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, DataType::kU8, x->dims()));
  uint8_t* ys = y->data<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    ys[i] = SaturateU8(std::nearbyint(xs[i] / p.scale) + p.zero_point);
  }
  return WriteDynamicQuantizeParams(ctx, p);
}

absl::Status CheckDynamicQuantizeLinear(const ir::Node& node) {
  if (node.num_outputs() > 3) return InvalidNode(node, "has more than 3 outputs");
  return absl::OkStatus();
}

}  // namespace

DynamicQuantParams DynamicQuantizeParams(float lo, float hi) {
  DynamicQuantParams p;
  p.scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
  // std::nearbyint rounds half to even under the default rounding mode.
  p.zero_point = std::nearbyint(std::clamp(0.0f - lo / p.scale, 0.0f, 255.0f));
  return p;
}

uint8_t SaturateU8(float v) {
  if (!(v > 0.0f)) return 0;
  if (v >= 255.0f) return 255;
  return static_cast<uint8_t>(v);
}

absl::Status WriteDynamicQuantizeParams(KernelContext& ctx, const DynamicQuantParams& p) {
  if (ctx.num_outputs() > 1 && ctx.output_requested(1)) {
    ASSIGN_OR_RETURN(ir::Tensor * s, ctx.output(1, DataType::kF32, {}));
    s->data<float>()[0] = p.scale;
  }
  if (ctx.num_outputs() > 2 && ctx.output_requested(2)) {
    ASSIGN_OR_RETURN(ir::Tensor * z, ctx.output(2, DataType::kU8, {}));
    z->data<uint8_t>()[0] = SaturateU8(p.zero_point);
  }
  return absl::OkStatus();
}

void RegisterDataOpsNumeric(Registry& r) {
  r.AddRef(ir::OpType::kMeanVarianceNormalization, FloatTypes(), &CheckedFactory<CheckMvn, RunMvn>);
  r.AddRef(ir::OpType::kDynamicQuantizeLinear, {DataType::kF32},
           &CheckedFactory<CheckDynamicQuantizeLinear, RunDynamicQuantizeLinear>);
}

}  // namespace kiln::kernels::cpu::ref
