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
// The sampling (attributes, output lengths, plans) is resize_sampling.{h,cc}, shared with the
// fast kernel (avx512/resize_ops.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/register.h"
#include "engine/kernels/cpu/ref/resize_sampling.h"

namespace kiln::kernels::cpu::ref {
namespace {

using resize::AxisPlan;
using resize::AxisSpec;
using resize::Interp;

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
  ParallelFor(outer, outer * block >= (int64_t{1} << 16), [&](int64_t o_begin, int64_t o_end) {
    for (int64_t o = o_begin; o < o_end; ++o) {
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
  });
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
  ResizeKernel(const ir::Node& node, resize::Attrs attrs) : node_(node), attrs_(std::move(attrs)) {}
  absl::Status Run(KernelContext& ctx) override;

 private:
  const ir::Node& node_;
  resize::Attrs attrs_;
};

absl::Status ResizeKernel::Run(KernelContext& ctx) {
  const ir::Node& node = node_;
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(std::vector<AxisSpec> specs, resize::Specs(node, attrs_, ctx, *x));
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
    if (!resize::AxisActive(attrs_, specs[d])) continue;
    active[d] = true;
    plans[d] = resize::BuildPlan(attrs_, specs[d]);
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
  ASSIGN_OR_RETURN(resize::Attrs attrs, resize::ParseAttrs(node));
  return std::unique_ptr<Kernel>(new ResizeKernel(node, std::move(attrs)));
}

}  // namespace

void RegisterLayoutResize(Registry& r) {
  r.AddRef(ir::OpType::kResize, AllTypes(), CreateResize);
  r.AddRef(ir::OpType::kUpsample, AllTypes(), CreateResize);
}

}  // namespace kiln::kernels::cpu::ref
