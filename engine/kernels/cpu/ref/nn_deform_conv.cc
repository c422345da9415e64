// Reference kernel of DeformConv (opsets 19 and 22), for any number of spatial dims.
//
// A convolution whose kernel taps are moved per output position: tap k of output position o
// reads X at o * stride - pad_begin + k * dilation + offset[n, g, k, :, o] (offset_group g of the
// input channel), interpolated (bi-/multi-linear) from the neighbouring pixels, with pixels
// outside X read as 0, and scaled by mask[n, g, k, o] (1 when omitted). The taps are gathered
// into columns [C / group * K, positions] and multiplied by the weights as Conv's im2col does
// (nn_internal.h GemmAccumulate), in the accumulator type (fp32 for fp16/bf16/fp32 data).
//
// Shapes: X [N, C, D...], W [oC, C / group, k...], offset [N, offset_group * K * dims, O...],
// B [oC], mask [N, offset_group * K, O...], Y [N, oC, O...] (K = prod k, O from the window).
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace {

// Columns gathered per GEMM: positions are taken in chunks so the column buffer stays near this
// many values however large the output.
constexpr int64_t kColumnBudget = int64_t{1} << 22;

// Value of `plane` (dims `in`, row-major) at real coordinates `pos`, multilinear, 0 outside.
template <typename T>
double Sample(const T* plane, const std::vector<int64_t>& in, const std::vector<int64_t>& strides,
              const double* pos) {
  const int nd = static_cast<int>(in.size());
  int64_t lo[8];
  double frac[8];
  for (int d = 0; d < nd; ++d) {
    if (!(pos[d] > -1.0 && pos[d] < static_cast<double>(in[d]))) return 0.0;  // no corner inside
    const double f = std::floor(pos[d]);
    lo[d] = static_cast<int64_t>(f);
    frac[d] = pos[d] - f;
  }
  double sum = 0;
  for (int corner = 0; corner < (1 << nd); ++corner) {
    double w = 1;
    int64_t off = 0;
    bool inside = true;
    for (int d = 0; d < nd && inside; ++d) {
      const bool high = (corner >> d) & 1;
      const int64_t i = lo[d] + (high ? 1 : 0);
      inside = i >= 0 && i < in[d];
      w *= high ? frac[d] : 1.0 - frac[d];
      off += i * strides[d];
    }
    if (inside && w != 0) sum += w * static_cast<double>(Load(plane[off]));
  }
  return sum;
}

class DeformConvKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    ASSIGN_OR_RETURN(nn::WindowAttrs attrs, nn::ReadWindowAttrs(node));
    const int64_t group = node.GetInt("group", 1), offset_group = node.GetInt("offset_group", 1);
    if (group < 1) return InvalidNode(node, "group must be positive, got ", group);
    if (offset_group < 1) {
      return InvalidNode(node, "offset_group must be positive, got ", offset_group);
    }
    return std::unique_ptr<Kernel>(new DeformConvKernel(node, attrs, group, offset_group));
  }

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* w, RequireInput(node_, ctx, 1));
    ASSIGN_OR_RETURN(const ir::Tensor* offset, RequireInput(node_, ctx, 2));
    const ir::Tensor* bias = ctx.input(3);
    const ir::Tensor* mask = ctx.input(4);
    const int rank = x->rank(), nd = rank - 2;
    if (rank < 3 || rank > 10) {
      return InvalidNode(node_, "X must be [N, C, D1, ...] with 1 to 8 spatial dims, got shape ",
                         ir::DimsToString(x->dims()));
    }
    for (const ir::Tensor* t : {w, offset, bias, mask}) {
      if (t != nullptr && t->dtype() != x->dtype()) {
        return InvalidNode(node_, "inputs must share X's dtype ", DataTypeOnnxName(x->dtype()),
                           ", got ", DataTypeOnnxName(t->dtype()));
      }
    }
    const int64_t n = x->dim(0), c = x->dim(1), oc = w->dim(0);
    if (w->rank() != rank || w->dim(1) * group_ != c || oc % group_ != 0) {
      return InvalidNode(node_, "W ", ir::DimsToString(w->dims()), " must be [oC, C / group, k...]",
                         " with oC divisible by group ", group_, " for X ",
                         ir::DimsToString(x->dims()));
    }
    if (c % offset_group_ != 0) {
      return InvalidNode(node_, "the ", c, " input channels are not divisible by offset_group ",
                         offset_group_);
    }
    const std::vector<int64_t> in(x->dims().begin() + 2, x->dims().end());
    const std::vector<int64_t> kernel(w->dims().begin() + 2, w->dims().end());
    if (!attrs_.kernel.empty() && attrs_.kernel != kernel) {
      return InvalidNode(node_, "kernel_shape ", ir::DimsToString(attrs_.kernel),
                         " does not match W's ", ir::DimsToString(kernel));
    }
    ASSIGN_OR_RETURN(nn::Window win, nn::ResolveWindow(node_, attrs_, in, kernel));
    const int64_t taps = Product(kernel, 0, nd), positions = Product(win.out, 0, nd);
    std::vector<int64_t> want = {n, offset_group_ * taps * nd};
    want.insert(want.end(), win.out.begin(), win.out.end());
    if (offset->dims() != want) {
      return InvalidNode(node_, "offset must be ", ir::DimsToString(want), ", got ",
                         ir::DimsToString(offset->dims()));
    }
    want[1] = offset_group_ * taps;
    if (mask != nullptr && mask->dims() != want) {
      return InvalidNode(node_, "mask must be ", ir::DimsToString(want), ", got ",
                         ir::DimsToString(mask->dims()));
    }
    if (bias != nullptr && (bias->rank() != 1 || bias->dim(0) != oc)) {
      return InvalidNode(node_, "B must be [", oc, "], got ", ir::DimsToString(bias->dims()));
    }
    std::vector<int64_t> ydims = {n, oc};
    ydims.insert(ydims.end(), win.out.begin(), win.out.end());
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), ydims));
    return DispatchFloat(x->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      Compute(x->data<T>(), w->data<T>(), offset->data<T>(), bias ? bias->data<T>() : nullptr,
              mask ? mask->data<T>() : nullptr, y->data<T>(), n, c, oc, win, taps, positions);
      return absl::OkStatus();
    });
  }

 private:
  DeformConvKernel(const ir::Node& node, nn::WindowAttrs attrs, int64_t group, int64_t og)
      : node_(node), attrs_(std::move(attrs)), group_(group), offset_group_(og) {}

  template <typename T>
  void Compute(const T* x, const T* w, const T* offset, const T* bias, const T* mask, T* y,
               int64_t n, int64_t c, int64_t oc, const nn::Window& win, int64_t taps,
               int64_t positions) const {
    using A = nn::Acc<T>;
    const int nd = win.rank();
    const int64_t cg = c / group_, ocg = oc / group_, c_per_og = c / offset_group_;
    const int64_t plane = Product(win.in, 0, nd), rows = cg * taps;
    const std::vector<int64_t> in_strides = Strides(win.in);
    std::vector<A> wbuf;
    const A* wa = nn::AccData(w, oc * rows, wbuf);
    const int64_t chunk = std::clamp<int64_t>(kColumnBudget / std::max<int64_t>(rows, 1), 1,
                                              std::max<int64_t>(positions, 1));
    std::vector<A> cols(rows * chunk), acc(oc * positions);
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t o = 0; o < oc; ++o) {
        const A v = bias ? static_cast<A>(Load(bias[o])) : A(0);
        std::fill(acc.begin() + o * positions, acc.begin() + (o + 1) * positions, v);
      }
      for (int64_t g = 0; g < group_; ++g) {
        for (int64_t p0 = 0; p0 < positions; p0 += chunk) {
          const int64_t pn = std::min(chunk, positions - p0);
          ParallelFor(
              rows, rows * pn >= (int64_t{1} << 12), [&](int64_t row_begin, int64_t row_end) {
                for (int64_t row = row_begin; row < row_end; ++row) {
                  const int64_t ch = g * cg + row / taps, k = row % taps;
                  const int64_t og = ch / c_per_og;
                  const T* xp = x + (b * c + ch) * plane;
                  // offset[b, og, k, d, p] and mask[b, og, k, p].
                  const T* off = offset + ((b * offset_group_ + og) * taps + k) * nd * positions;
                  const T* mk =
                      mask ? mask + ((b * offset_group_ + og) * taps + k) * positions : nullptr;
                  int64_t kidx[8], pidx[8];
                  for (int64_t d = nd - 1, rem = k; d >= 0; --d) {
                    kidx[d] = rem % win.kernel[d];
                    rem /= win.kernel[d];
                  }
                  double pos[8];
                  for (int64_t j = 0; j < pn; ++j) {
                    const int64_t p = p0 + j;
                    for (int64_t d = nd - 1, rem = p; d >= 0; --d) {
                      pidx[d] = rem % win.out[d];
                      rem /= win.out[d];
                    }
                    for (int d = 0; d < nd; ++d) {
                      pos[d] = static_cast<double>(pidx[d] * win.strides[d] - win.pad_begin[d] +
                                                   kidx[d] * win.dilations[d]) +
                               static_cast<double>(Load(off[d * positions + p]));
                    }
                    double v = Sample(xp, win.in, in_strides, pos);
                    if (mk) v *= static_cast<double>(Load(mk[p]));
                    cols[row * pn + j] = static_cast<A>(v);
                  }
                }
              });
          nn::GemmAccumulate<A>(ocg, pn, rows, nn::MatView<A>{wa + g * ocg * rows, rows, 1},
                                nn::MatView<A>{cols.data(), pn, 1},
                                acc.data() + g * ocg * positions + p0, positions);
        }
      }
      T* yb = y + b * oc * positions;
      for (int64_t i = 0; i < oc * positions; ++i) yb[i] = Store<T>(acc[i]);
    }
  }

  const ir::Node& node_;
  nn::WindowAttrs attrs_;
  int64_t group_, offset_group_;
};

}  // namespace

void RegisterDeformConv(Registry& r) {
  r.AddRef(ir::OpType::kDeformConv, FloatTypes(), &DeformConvKernel::Create);
}

}  // namespace kiln::kernels::cpu::ref
