// Normalizations over contiguous blocks: LayerNormalization, RMSNormalization,
// GroupNormalization and InstanceNormalization (which is GroupNormalization with one group per
// channel and per-channel parameters).
//
// Stage one (statistics and the normalized value) follows the op's `stash_type` exactly as the
// ONNX function bodies define it: every intermediate is a tensor of the stash type, so each
// step is rounded to it (a no-op for float/double stashes; for a bf16/fp16 stash it emulates
// the cast), while sums accumulate in Compute<stash> (fp32 for half types). Ops without
// stash_type (GroupNormalization-18, InstanceNormalization) use Compute<T>. Stage two (scale
// and bias) computes in Compute<T> and rounds each output once; the normalized value is not
// rounded to T first (higher precision is allowed, DESIGN.md §5).
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/normalization_internal.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

// Calls f(TypeTag<S>) for an ONNX stash_type value.
template <typename F>
absl::Status DispatchStash(const ir::Node& node, int64_t stash_type, F&& f) {
  const DataType dt = DataTypeFromOnnx(static_cast<int32_t>(stash_type));
  if (!IsFloating(dt)) return InvalidNode(node, "stash_type ", stash_type, " is not a float type");
  return DispatchFloat(dt, std::forward<F>(f));
}

absl::Status CheckStash(const ir::Node& node, int64_t stash_type) {
  const DataType dt = DataTypeFromOnnx(static_cast<int32_t>(stash_type));
  if (!IsFloating(dt)) return InvalidNode(node, "stash_type ", stash_type, " is not a float type");
  return absl::OkStatus();
}

// ---- LayerNormalization and RMSNormalization ----

template <bool kRms>
class RowNormKernel final : public Kernel {
 public:
  RowNormKernel(const ir::Node& node, int64_t axis, float epsilon, int64_t stash_type)
      : node_(node), axis_(axis), epsilon_(epsilon), stash_type_(stash_type) {}

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    const int64_t stash = node.GetInt("stash_type", 1);
    RETURN_IF_ERROR(CheckStash(node, stash));
    return std::unique_ptr<Kernel>(
        new RowNormKernel(node, node.GetInt("axis", -1), node.GetFloat("epsilon", 1e-5f), stash));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* scale, RequireInput(node_, ctx, 1));
    const ir::Tensor* bias = kRms ? nullptr : ctx.input(2);
    if (x->rank() == 0) return InvalidNode(node_, "input must have rank >= 1");
    ASSIGN_OR_RETURN(int axis, NormalizeAxis(node_, axis_, x->rank()));
    RETURN_IF_ERROR(CheckFloatParam(node_, *scale, "scale"));
    ASSIGN_OR_RETURN(ParamMap smap, MapParam(node_, *scale, x->dims(), axis, "scale"));
    ParamMap bmap;
    if (bias != nullptr) {
      RETURN_IF_ERROR(CheckFloatParam(node_, *bias, "bias"));
      ASSIGN_OR_RETURN(bmap, MapParam(node_, *bias, x->dims(), axis, "bias"));
    }
    int64_t rows = 1, inner = 1;
    std::vector<int64_t> stat_dims;
    for (int d = 0; d < x->rank(); ++d) {
      (d < axis ? rows : inner) *= x->dim(d);
      stat_dims.push_back(d < axis ? x->dim(d) : 1);
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), x->dims()));
    const DataType stash_dt = DataTypeFromOnnx(static_cast<int32_t>(stash_type_));
    ir::Tensor* mean_out = nullptr;
    ir::Tensor* inv_out = nullptr;
    if (!kRms && ctx.num_outputs() > 1 && ctx.output_requested(1)) {
      ASSIGN_OR_RETURN(mean_out, ctx.output(1, stash_dt, stat_dims));
    }
    if (!kRms && ctx.num_outputs() > 2 && ctx.output_requested(2)) {
      ASSIGN_OR_RETURN(inv_out, ctx.output(2, stash_dt, stat_dims));
    }
    return DispatchFloat(x->dtype(), [&](auto xtag) -> absl::Status {
      using T = typename decltype(xtag)::type;
      return DispatchStash(node_, stash_type_, [&](auto stag) -> absl::Status {
        using S = typename decltype(stag)::type;
        Loop<T, S>(*x, *scale, bias, smap, bmap, rows, inner, *y, mean_out, inv_out);
        return absl::OkStatus();
      });
    });
  }

 private:
  template <typename T, typename S>
  void Loop(const ir::Tensor& xt, const ir::Tensor& scale_t, const ir::Tensor* bias_t,
            const ParamMap& smap, const ParamMap& bmap, int64_t rows, int64_t inner, ir::Tensor& yt,
            ir::Tensor* mean_out, ir::Tensor* inv_out) const {
    using CT = Compute<T>;
    using St = Stash<S>;
    using C = typename St::C;
    const std::vector<CT> scale = ReadParam<CT>(scale_t);
    const std::vector<CT> bias = bias_t ? ReadParam<CT>(*bias_t) : std::vector<CT>();
    const T* x = xt.data<T>();
    T* y = yt.data<T>();
    const C eps = static_cast<C>(epsilon_);
    const C count = static_cast<C>(inner);
    if (inner == 0) {
      // Empty rows: Y is empty, the statistics of nothing are NaN (0 / 0), as numpy gives.
      for (int64_t r = 0; r < rows; ++r) {
        if (mean_out) mean_out->data<S>()[r] = Store<S>(std::numeric_limits<C>::quiet_NaN());
        if (inv_out) inv_out->data<S>()[r] = Store<S>(std::numeric_limits<C>::quiet_NaN());
      }
      return;
    }
    // Rows are independent: split over the threads once there is enough work.
    ParallelFor(
        rows, rows > 1 && rows * inner >= (int64_t{1} << 15), [&](int64_t r_begin, int64_t r_end) {
          for (int64_t r = r_begin; r < r_end; ++r) {
            thread_local std::vector<C> xs;  // the row cast to the stash type
            xs.resize(inner);
            const T* xr = x + r * inner;
            T* yr = y + r * inner;
            const int64_t* so = smap.offsets.data() + (r * inner) % smap.period;
            const int64_t* bo = bias_t ? bmap.offsets.data() + (r * inner) % bmap.period : nullptr;
            for (int64_t j = 0; j < inner; ++j) xs[j] = St::R(static_cast<C>(Load(xr[j])));
            if constexpr (kRms) {
              C sum = 0;
              for (int64_t j = 0; j < inner; ++j) sum += St::R(xs[j] * xs[j]);
              const C mean_sq = St::R(sum / count);
              const C rms = St::R(std::sqrt(St::R(mean_sq + eps)));
              for (int64_t j = 0; j < inner; ++j) {
                const CT normalized = static_cast<CT>(St::R(xs[j] / rms));
                yr[j] = Store<T>(normalized * scale[so[j]]);
              }
            } else {
              const auto [mean, inv_std] =
                  LayerNormRow<S>(xs.data(), inner, eps, scale.data(), so, bias.data(), bo,
                                  [yr](int64_t j, CT v) { yr[j] = Store<T>(v); });
              if (mean_out) mean_out->data<S>()[r] = Store<S>(mean);
              if (inv_out) inv_out->data<S>()[r] = Store<S>(inv_std);
            }
          }
        });
  }

  const ir::Node& node_;
  int64_t axis_;
  float epsilon_;
  int64_t stash_type_;
};

// ---- GroupNormalization and InstanceNormalization ----

enum class GroupMode {
  kInstance,       // InstanceNormalization: one group per channel, params per channel
  kGroupPerGroup,  // GroupNormalization-18: params per group
  kGroupPerChan,   // GroupNormalization-21: params per channel, stash_type
};

class GroupNormKernel final : public Kernel {
 public:
  GroupNormKernel(const ir::Node& node, GroupMode mode, int64_t groups, float epsilon,
                  int64_t stash_type)
      : node_(node), mode_(mode), groups_(groups), epsilon_(epsilon), stash_type_(stash_type) {}

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    const float eps = node.GetFloat("epsilon", 1e-5f);
    if (node.op == ir::OpType::kInstanceNormalization) {
      return std::unique_ptr<Kernel>(new GroupNormKernel(node, GroupMode::kInstance, 0, eps, 0));
    }
    if (!node.has_attr("num_groups")) return InvalidNode(node, "attribute num_groups is required");
    const int64_t groups = node.GetInt("num_groups", 0);
    if (groups <= 0) return InvalidNode(node, "num_groups must be positive, got ", groups);
    if (node.since_version < 21) {
      return std::unique_ptr<Kernel>(
          new GroupNormKernel(node, GroupMode::kGroupPerGroup, groups, eps, 0));
    }
    const int64_t stash = node.GetInt("stash_type", 1);
    RETURN_IF_ERROR(CheckStash(node, stash));
    return std::unique_ptr<Kernel>(
        new GroupNormKernel(node, GroupMode::kGroupPerChan, groups, eps, stash));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* scale, RequireInput(node_, ctx, 1));
    ASSIGN_OR_RETURN(const ir::Tensor* bias, RequireInput(node_, ctx, 2));
    if (x->rank() < 2) {
      return InvalidNode(node_, "input must have rank >= 2 (N x C x ...), got rank ", x->rank());
    }
    const int64_t channels = x->dim(1);
    const int64_t groups = mode_ == GroupMode::kInstance ? channels : groups_;
    if (channels % groups != 0) {
      return InvalidNode(node_, "num_groups ", groups, " does not divide the ", channels,
                         " channels");
    }
    const int64_t nparams = mode_ == GroupMode::kGroupPerGroup ? groups : channels;
    for (const auto& [t, what] : {std::pair{scale, "scale"}, std::pair{bias, "bias"}}) {
      RETURN_IF_ERROR(CheckFloatParam(node_, *t, what));
      if (t->num_elements() != nparams) {
        return InvalidNode(node_, what, " must have ", nparams, " elements, got shape ",
                           ir::DimsToString(t->dims()));
      }
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), x->dims()));
    return DispatchFloat(x->dtype(), [&](auto xtag) -> absl::Status {
      using T = typename decltype(xtag)::type;
      if (mode_ != GroupMode::kGroupPerChan) {
        // No stash_type: stage one in Compute<T> (fp32 for half types, double for double).
        Loop<T, Compute<T>>(*x, *scale, *bias, groups, *y);
        return absl::OkStatus();
      }
      return DispatchStash(node_, stash_type_, [&](auto stag) -> absl::Status {
        Loop<T, typename decltype(stag)::type>(*x, *scale, *bias, groups, *y);
        return absl::OkStatus();
      });
    });
  }

 private:
  // Each (n, group) block is contiguous: channels_per_group x spatial elements.
  template <typename T, typename S>
  void Loop(const ir::Tensor& xt, const ir::Tensor& scale_t, const ir::Tensor& bias_t,
            int64_t groups, ir::Tensor& yt) const {
    using CT = Compute<T>;
    using St = Stash<S>;
    using C = typename St::C;
    const std::vector<CT> scale = ReadParam<CT>(scale_t);
    const std::vector<CT> bias = ReadParam<CT>(bias_t);
    const int64_t batch = xt.dim(0);
    const int64_t channels = xt.dim(1);
    int64_t spatial = 1;
    for (int d = 2; d < xt.rank(); ++d) spatial *= xt.dim(d);
    const int64_t cpg = channels / groups;
    const int64_t block = cpg * spatial;
    const C eps = static_cast<C>(epsilon_);
    const C count = static_cast<C>(block);
    const bool per_group = mode_ == GroupMode::kGroupPerGroup;
    std::vector<C> d(block);
    for (int64_t n = 0; n < batch && block > 0; ++n) {
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t base = (n * groups + g) * block;
        const T* xb = xt.data<T>() + base;
        T* yb = yt.data<T>() + base;
        C sum = 0;
        for (int64_t e = 0; e < block; ++e) {
          d[e] = St::R(static_cast<C>(Load(xb[e])));
          sum += d[e];
        }
        const C mean = St::R(sum / count);
        C sq = 0;
        for (int64_t e = 0; e < block; ++e) {
          d[e] = St::R(d[e] - mean);
          sq += St::R(d[e] * d[e]);
        }
        const C var = St::R(sq / count);
        const C stddev = St::R(std::sqrt(St::R(var + eps)));
        for (int64_t c = 0; c < cpg; ++c) {
          const int64_t p = per_group ? g : g * cpg + c;
          const CT s = scale[p];
          const CT b = bias[p];
          for (int64_t i = 0; i < spatial; ++i) {
            const int64_t e = c * spatial + i;
            yb[e] = Store<T>(static_cast<CT>(St::R(d[e] / stddev)) * s + b);
          }
        }
      }
    }
  }

  const ir::Node& node_;
  GroupMode mode_;
  int64_t groups_;
  float epsilon_;
  int64_t stash_type_;
};

}  // namespace

absl::Status CheckFloatParam(const ir::Node& node, const ir::Tensor& t, const char* what) {
  if (!IsFloating(t.dtype())) {
    return InvalidNode(node, what, " must be a float tensor, got ", DataTypeOnnxName(t.dtype()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ParamMap> MapParam(const ir::Node& node, const ir::Tensor& p,
                                  const std::vector<int64_t>& x_dims, int axis, const char* what) {
  const int rank = static_cast<int>(x_dims.size());
  const int prank = p.rank();
  if (prank > rank) {
    return InvalidNode(node, what, " of shape ", ir::DimsToString(p.dims()),
                       " does not broadcast to input shape ", ir::DimsToString(x_dims));
  }
  const int lead = rank - prank;
  for (int d = 0; d < prank; ++d) {
    if (p.dim(d) != 1 && p.dim(d) != x_dims[lead + d]) {
      return InvalidNode(node, what, " of shape ", ir::DimsToString(p.dims()),
                         " does not broadcast to input shape ", ir::DimsToString(x_dims));
    }
  }
  const int start = std::min(axis, lead);
  std::vector<int64_t> block(x_dims.begin() + start, x_dims.end());
  std::vector<int64_t> strides(block.size(), 0);
  const std::vector<int64_t> pstrides = Strides(p.dims());
  for (int d = start; d < rank; ++d) {
    if (d >= lead && p.dim(d - lead) != 1) strides[d - start] = pstrides[d - lead];
  }
  ParamMap m;
  m.period = ir::NumElementsOf(block);
  m.offsets.resize(m.period);
  std::vector<int64_t> idx(block.size(), 0);
  int64_t off = 0;
  for (int64_t e = 0; e < m.period; ++e) {
    m.offsets[e] = off;
    for (int d = static_cast<int>(block.size()) - 1; d >= 0; --d) {
      if (++idx[d] < block[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (block[d] - 1);
      idx[d] = 0;
    }
  }
  return m;
}

void RegisterNormalizationBlocks(Registry& r) {
  using ir::OpType;
  r.AddRef(OpType::kLayerNormalization, FloatTypes(), &RowNormKernel<false>::Create);
  r.AddRef(OpType::kRMSNormalization, FloatTypes(), &RowNormKernel<true>::Create);
  r.AddRef(OpType::kGroupNormalization, FloatTypes(), &GroupNormKernel::Create);
  r.AddRef(OpType::kInstanceNormalization, FloatTypes(), &GroupNormKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
