// Fast Resize (opsets 11, 13, 18, 19; and the legacy Resize-10 / Upsample forms) on float,
// float16 and bfloat16, NCHW or channels-last (the layout pass's NHWC Resize is a plain Resize
// with its scales permuted): the reference kernel's numbers to the bit
// (kernels/cpu/ref/layout_resize.cc).
//
// The sampling of every resized axis (source indices, weights, extrapolation flags) is the
// reference's: the same functions compute it (kernels/cpu/ref/resize_sampling.h), once per
// run shape: the tables are cached and rebuilt only when X's dims or the roi, scales
// or sizes values change (dynamic shapes).
//  - nearest: a gather of whole rows. The output rows are the positions of every axis up to the
//    last resized one; a row reading the same input row as the one before it (upsampling along
//    H) is a copy of that output row; along the last resized axis each position copies a block
//    of the axes after it (one element for NCHW, the channels for NHWC), and an integer factor
//    f upsampling (index = o / f) is a plain loop writing each value f times.
//  - linear / cubic of one axis or two adjacent ones: resize_avx512.cc, the reference's passes
//    fused per output row. Anything else (three resized axes, antialias, a table too large for
//    32-bit indices) runs the reference kernel.

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/register.h"
#include "engine/kernels/cpu/avx512/resize.h"
#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/resize_sampling.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

namespace resize = ref::resize;
using resize::AxisPlan;
using resize::AxisSpec;
using resize::Interp;

// The run shape's tables: everything a run reads that depends on X's dims and the values of
// roi, scales and sizes.
struct Tables {
  std::vector<int64_t> in_dims, out_dims;
  std::vector<AxisPlan> plans;
  std::vector<bool> active;
  // Linear / cubic: the axes resized through ResizeSeparable and its tables (tap-major).
  bool separable = false;
  int h_axis = -1, w_axis = -1;
  std::vector<int32_t> h_index, w_index;
  std::vector<float> h_weight, w_weight;
  // Nearest: per position of the last resized axis its input index, and the integer factor f
  // when that index is o / f for every o (0 otherwise).
  int last = -1;
  int64_t factor = 0;
};

// Tap-major int32 indices and fp32 weights of `p` (the reference's double weights rounded to
// float, as it does before applying them); false when an index does not fit.
bool TapMajor(const AxisPlan& p, int64_t out, std::vector<int32_t>& index,
              std::vector<float>& weight) {
  index.resize(p.taps * out);
  weight.resize(p.taps * out);
  for (int64_t o = 0; o < out; ++o) {
    for (int k = 0; k < p.taps; ++k) {
      const int64_t i = p.index[o * p.taps + k];
      if (i > INT32_MAX) return false;
      index[k * out + o] = static_cast<int32_t>(i);
      weight[k * out + o] = static_cast<float>(p.weight[o * p.taps + k]);
    }
  }
  return true;
}

class ResizeKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(resize::Attrs attrs, resize::ParseAttrs(node));
    ASSIGN_OR_RETURN(std::unique_ptr<Kernel> reference, ReferenceKernel(node));
    return std::unique_ptr<Kernel>(new ResizeKernel(node, std::move(attrs), std::move(reference)));
  }

  // Float X and Y of one dtype, no antialias (its wide filters stay on the reference).
  static bool Supports(const ir::Node& node) {
    const ir::Value* x = node.input(0);
    const ir::Value* y = node.outputs.empty() ? nullptr : node.outputs[0];
    if (!x || !y || !IsF32OrHalf(x->dtype)) return false;
    if (y->dtype != x->dtype && y->dtype != DataType::kUndefined) return false;
    return node.GetInt("antialias", 0) == 0 && resize::ParseAttrs(node).ok();
  }

  absl::Status Run(KernelContext& ctx) override {
    const ir::Tensor* x = ctx.input(0);
    if (x == nullptr || !IsF32OrHalf(x->dtype()) || attrs_.antialias) return reference_->Run(ctx);
    ASSIGN_OR_RETURN(const Tables* t, GetTables(ctx, *x));
    if (t == nullptr) return reference_->Run(ctx);
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), t->out_dims));
    if (y->num_elements() == 0) return absl::OkStatus();
    if (attrs_.interp == Interp::kNearest) {
      return ref::DispatchBySize(x->dtype(), [&](auto tag) -> absl::Status {
        using U = typename decltype(tag)::type;
        Nearest<U>(*t, x->dtype(), x->data<U>(), y->data<U>());
        return absl::OkStatus();
      });
    }
    ResizeSeparableArgs a;
    a.dtype = x->dtype();
    a.x = x->raw_data();
    a.y = y->raw_data();
    a.extrapolation = attrs_.extrapolation_value;
    const int rank = x->rank();
    const int first = t->h_axis >= 0 ? t->h_axis : t->w_axis;
    a.outer = ref::Product(x->dims(), 0, first);
    a.inner = ref::Product(x->dims(), t->w_axis + 1, rank);
    a.w = Table(*t, t->w_axis, t->w_index, t->w_weight);
    if (t->h_axis >= 0) a.h = Table(*t, t->h_axis, t->h_index, t->h_weight);
    ResizeSeparable(a);
    return absl::OkStatus();
  }

 private:
  ResizeKernel(const ir::Node& node, resize::Attrs attrs, std::unique_ptr<Kernel> reference)
      : node_(node), attrs_(std::move(attrs)), reference_(std::move(reference)) {}

  static ResizeAxisTable Table(const Tables& t, int axis, const std::vector<int32_t>& index,
                               const std::vector<float>& weight) {
    ResizeAxisTable a;
    a.in = t.in_dims[axis];
    a.out = t.out_dims[axis];
    if (!t.active[axis]) return a;
    a.taps = t.plans[axis].taps;
    a.index = index.data();
    a.weight = weight.data();
    const std::vector<uint8_t>& e = t.plans[axis].extrapolate;
    if (std::find(e.begin(), e.end(), 1) != e.end()) a.extrapolate = e.data();
    return a;
  }

  // The tables of this run's shape (cached), or nullptr when the reference runs it. Errors are
  // the reference's (resize::Specs).
  absl::StatusOr<const Tables*> GetTables(KernelContext& ctx, const ir::Tensor& x) {
    std::vector<double> key(x.dims().begin(), x.dims().end());
    key.push_back(-1);  // separates the dims from the values
    for (int i = 1; i < 4; ++i) {
      const ir::Tensor* v = ctx.input(i);
      const int64_t n = v == nullptr ? 0 : v->num_elements();
      key.push_back(static_cast<double>(n));
      for (int64_t k = 0; k < n; ++k) key.push_back(ir::ElementAsDouble(*v, k));
    }
    if (tables_ && key == key_)
      return tables_->separable || !tables_->plans.empty() ? &*tables_ : nullptr;
    ASSIGN_OR_RETURN(std::vector<AxisSpec> specs, resize::Specs(node_, attrs_, ctx, x));
    Tables t;
    const int rank = x.rank();
    t.in_dims = x.dims();
    t.out_dims.resize(rank);
    for (int d = 0; d < rank; ++d) {
      t.out_dims[d] = specs[d].out;
      if (specs[d].in == 0 && specs[d].out > 0) {
        return ref::InvalidNode(node_, "cannot resize an empty axis ", d, " to ", specs[d].out);
      }
    }
    if (ir::NumElementsOf(t.out_dims) < 0) {
      return ref::InvalidNode(node_, "output shape ", ir::DimsToString(t.out_dims),
                              " is too large");
    }
    t.plans.resize(rank);
    t.active.assign(rank, false);
    std::vector<int> active;
    for (int d = 0; d < rank; ++d) {
      if (!resize::AxisActive(attrs_, specs[d])) continue;
      t.active[d] = true;
      t.plans[d] = resize::BuildPlan(attrs_, specs[d]);
      active.push_back(d);
    }
    bool usable = true;
    if (attrs_.interp == Interp::kNearest) {
      t.last = active.empty() ? -1 : active.back();
      if (t.last >= 0) {
        const AxisPlan& p = t.plans[t.last];
        const int64_t out = t.out_dims[t.last], in = t.in_dims[t.last];
        const int64_t f = in > 0 ? out / in : 0;
        bool pattern = f >= 2 && f * in == out;
        for (int64_t o = 0; pattern && o < out; ++o) {
          pattern = p.index[o] == o / f && p.extrapolate[o] == 0;
        }
        t.factor = pattern ? f : 0;
      }
    } else if (active.empty() || active.size() > 2 ||
               (active.size() == 2 && active[1] != active[0] + 1) ||
               ir::NumElementsOf(t.out_dims) == 0 || x.num_elements() == 0) {
      usable = false;  // the reference: three or more axes, or nothing to compute
    } else {
      t.separable = true;
      t.w_axis = active.back();
      if (active.size() == 2) t.h_axis = active[0];
      for (int d : active) usable &= t.plans[d].taps <= 8;
      usable = usable && TapMajor(t.plans[t.w_axis], t.out_dims[t.w_axis], t.w_index, t.w_weight);
      if (usable && t.h_axis >= 0) {
        usable = TapMajor(t.plans[t.h_axis], t.out_dims[t.h_axis], t.h_index, t.h_weight);
      }
    }
    if (!usable) {  // cached too: the reference runs this shape
      t.plans.clear();
      t.separable = false;
    }
    tables_ = std::move(t);
    key_ = std::move(key);
    return tables_->separable || !tables_->plans.empty() ? &*tables_ : nullptr;
  }

  // Nearest: whole output rows gathered (see the file comment); U is the element's bytes.
  template <typename U>
  void Nearest(const Tables& t, DataType dtype, const U* src, U* dst) const {
    const int64_t total_out = ir::NumElementsOf(t.out_dims);
    if (t.last < 0) {  // nothing resized: a copy
      ref::ParallelCopy(dst, src, total_out * sizeof(U));
      return;
    }
    const U ev = ExtrapolationAs<U>(dtype);
    const int rank = static_cast<int>(t.out_dims.size());
    const int last = t.last;
    const int64_t block = ref::Product(t.out_dims, last + 1, rank);
    const int64_t out_len = t.out_dims[last];
    const int64_t row_len = out_len * block;  // elements of one output row
    const std::vector<int64_t> in_strides = ref::Strides(t.in_dims);
    const int64_t rows = ref::Product(t.out_dims, 0, last);
    const AxisPlan& lp = t.plans[last];
    const int64_t in_len = t.in_dims[last];
    ParallelFor(rows, total_out >= (int64_t{1} << 16), [&](int64_t r0, int64_t r1) {
      int64_t prev_from = -1;
      bool prev_fill = false;
      for (int64_t r = r0; r < r1; ++r) {
        // The input row of output row r: positions of axes [0, last) mapped through the plans.
        int64_t rest = r, from = 0;
        bool fill = false;
        for (int a = last - 1; a >= 0; --a) {
          const int64_t i = rest % t.out_dims[a];
          rest /= t.out_dims[a];
          if (t.active[a]) {
            fill |= t.plans[a].extrapolate[i] != 0;
            from += t.plans[a].index[i] * in_strides[a];
          } else {
            from += i * in_strides[a];
          }
        }
        U* d = dst + r * row_len;
        if (r > r0 && from == prev_from && fill == prev_fill) {
          std::memcpy(d, d - row_len, row_len * sizeof(U));
          continue;
        }
        prev_from = from;
        prev_fill = fill;
        if (fill) {
          std::fill(d, d + row_len, ev);
          continue;
        }
        const U* s = src + from;
        if (t.factor > 0 && block == 1) {
          const int64_t f = t.factor;
          if (f == 2) {
            for (int64_t i = 0; i < in_len; ++i) d[2 * i] = d[2 * i + 1] = s[i];
          } else {
            for (int64_t i = 0; i < in_len; ++i) {
              const U v = s[i];
              for (int64_t k = 0; k < f; ++k) d[i * f + k] = v;
            }
          }
        } else if (block == 1) {
          for (int64_t o = 0; o < out_len; ++o) d[o] = lp.extrapolate[o] ? ev : s[lp.index[o]];
        } else {
          for (int64_t o = 0; o < out_len; ++o) {
            U* db = d + o * block;
            if (lp.extrapolate[o]) {
              std::fill(db, db + block, ev);
            } else {
              std::memcpy(db, s + lp.index[o] * in_strides[last], block * sizeof(U));
            }
          }
        }
      }
    });
  }

  // The extrapolation value as the bytes of an element of X's dtype.
  template <typename U>
  U ExtrapolationAs(DataType dtype) const {
    U u{};
    const float v = attrs_.extrapolation_value;
    if constexpr (sizeof(U) == 4) {
      std::memcpy(&u, &v, 4);
    } else if constexpr (sizeof(U) == 2) {
      const uint16_t bits =
          dtype == DataType::kF16 ? Float16(v).bits : BFloat16(v).bits;  // round to nearest even
      std::memcpy(&u, &bits, 2);
    }
    return u;
  }

  const ir::Node& node_;
  resize::Attrs attrs_;
  std::unique_ptr<Kernel> reference_;
  std::vector<double> key_;
  std::optional<Tables> tables_;
};

}  // namespace

void RegisterResize(Registry& r) {
  for (ir::OpType op : {ir::OpType::kResize, ir::OpType::kUpsample}) {
    KernelDef def{op,
                  {DataType::kF32, DataType::kF16, DataType::kBF16},
                  0,
                  Backend::kCpu,
                  Isa::kAvx512,
                  &ResizeKernel::Create};
    def.cpu_features = kCpuAvx512Bf16;  // vcvtneps2bf16 for bfloat16 outputs
    def.supports = &ResizeKernel::Supports;
    r.Add(def);
  }
}

}  // namespace kiln::kernels::cpu::avx512
