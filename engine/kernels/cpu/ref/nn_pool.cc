// AveragePool, MaxPool (with Indices), GlobalAveragePool, GlobalMaxPool over any number of
// spatial dims.
#include <algorithm>
#include <limits>

#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"

namespace kiln::kernels::cpu::ref::nn {

WindowList BuildWindowList(const Window& w) {
  const int nd = w.rank();
  // Per dim and output coordinate: the covered input coordinates and the padded count.
  std::vector<std::vector<std::vector<int64_t>>> valid(nd);
  std::vector<std::vector<int64_t>> padded(nd);
  for (int d = 0; d < nd; ++d) {
    valid[d].resize(w.out[d]);
    padded[d].assign(w.out[d], 0);
    for (int64_t o = 0; o < w.out[d]; ++o) {
      const int64_t start = o * w.strides[d] - w.pad_begin[d];
      for (int64_t k = 0; k < w.kernel[d]; ++k) {
        const int64_t i = start + k * w.dilations[d];
        if (i >= 0 && i < w.in[d]) valid[d][o].push_back(i);
        if (i >= -w.pad_begin[d] && i < w.in[d] + w.pad_end[d]) ++padded[d][o];
      }
    }
  }
  std::vector<int64_t> row_stride = Strides(w.in), col_stride(nd, 1);
  for (int d = 1; d < nd; ++d) col_stride[d] = col_stride[d - 1] * w.in[d - 1];
  const int64_t out_sp = ir::NumElementsOf(w.out);
  WindowList list;
  list.begin.reserve(out_sp + 1);
  list.padded.reserve(out_sp);
  std::vector<int64_t> o(nd, 0), kpos(nd, 0);
  for (int64_t p = 0; p < out_sp; ++p) {
    list.begin.push_back(static_cast<int64_t>(list.offs.size()));
    int64_t count = 1;
    bool empty = false;
    for (int d = 0; d < nd; ++d) {
      count *= padded[d][o[d]];
      empty |= valid[d][o[d]].empty();
    }
    list.padded.push_back(count);
    std::fill(kpos.begin(), kpos.end(), 0);
    while (!empty) {  // odometer over the window's valid cells
      int64_t off = 0, coff = 0;
      for (int d = 0; d < nd; ++d) {
        const int64_t i = valid[d][o[d]][kpos[d]];
        off += i * row_stride[d];
        coff += i * col_stride[d];
      }
      list.offs.push_back(off);
      list.col_offs.push_back(coff);
      int d = nd - 1;
      for (; d >= 0; --d) {
        if (++kpos[d] < static_cast<int64_t>(valid[d][o[d]].size())) break;
        kpos[d] = 0;
      }
      if (d < 0) break;
    }
    for (int d = nd - 1; d >= 0; --d) {
      if (++o[d] < w.out[d]) break;
      o[d] = 0;
    }
  }
  list.begin.push_back(static_cast<int64_t>(list.offs.size()));
  return list;
}

absl::Status RefuseChannelsLast(const ir::Node& node) {
  if (node.GetInt(kChannelsLastAttr, 0) == 0) return absl::OkStatus();
  return InvalidNode(node, "runs channels-last (", kChannelsLastAttr,
                     "), which only the AVX-512 kernels take");
}

absl::StatusOr<WindowAttrs> ReadPoolAttrs(const ir::Node& node) {
  ASSIGN_OR_RETURN(WindowAttrs attrs, ReadWindowAttrs(node));
  if (attrs.kernel.empty()) return InvalidNode(node, "kernel_shape is required");
  return attrs;
}

absl::StatusOr<PoolIo> StartPool(const ir::Node& node, const WindowAttrs& attrs,
                                 KernelContext& ctx) {
  PoolIo io;
  ASSIGN_OR_RETURN(io.x, RequireInput(node, ctx, 0));
  const int nd = io.x->rank() - 2;
  if (nd < 1) return InvalidNode(node, "input must have rank >= 3, got ", io.x->rank());
  if (static_cast<int>(attrs.kernel.size()) != nd) {
    return InvalidNode(node, "kernel_shape has ", attrs.kernel.size(), " values for ", nd,
                       " spatial dims");
  }
  std::vector<int64_t> in(io.x->dims().begin() + 2, io.x->dims().end());
  ASSIGN_OR_RETURN(io.win, ResolveWindow(node, attrs, in, attrs.kernel));
  std::vector<int64_t> out_dims = {io.x->dim(0), io.x->dim(1)};
  out_dims.insert(out_dims.end(), io.win.out.begin(), io.win.out.end());
  ASSIGN_OR_RETURN(io.y, ctx.output(0, io.x->dtype(), out_dims));
  return io;
}

absl::StatusOr<GlobalPoolIo> StartGlobalPool(const ir::Node& node, KernelContext& ctx) {
  RETURN_IF_ERROR(RefuseChannelsLast(node));
  GlobalPoolIo io;
  ASSIGN_OR_RETURN(io.x, RequireInput(node, ctx, 0));
  if (io.x->rank() < 2) return InvalidNode(node, "input must have rank >= 2, got ", io.x->rank());
  std::vector<int64_t> out_dims = io.x->dims();
  std::fill(out_dims.begin() + 2, out_dims.end(), 1);
  ASSIGN_OR_RETURN(io.y, ctx.output(0, io.x->dtype(), out_dims));
  io.planes = io.x->dim(0) * io.x->dim(1);
  io.plane_size = io.planes == 0 ? 0 : io.x->num_elements() / io.planes;
  return io;
}

namespace {

enum class PoolKind { kAverage, kMax };

class PoolKernel final : public Kernel {
 public:
  template <PoolKind kKind>
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    RETURN_IF_ERROR(RefuseChannelsLast(node));
    auto k = std::make_unique<PoolKernel>(node, kKind);
    ASSIGN_OR_RETURN(k->attrs_, ReadPoolAttrs(node));
    k->count_include_pad_ = node.GetInt("count_include_pad", 0) != 0;
    const int64_t order = node.GetInt("storage_order", 0);
    if (order != 0 && order != 1) return InvalidNode(node, "storage_order must be 0 or 1");
    k->column_major_ = order == 1;
    return std::unique_ptr<Kernel>(std::move(k));
  }
  PoolKernel(const ir::Node& node, PoolKind kind) : node_(node), kind_(kind) {}

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const PoolIo io, StartPool(node_, attrs_, ctx));
    const ir::Tensor* x = io.x;
    ir::Tensor* y = io.y;
    const Window& win = io.win;
    ir::Tensor* indices = nullptr;
    if (kind_ == PoolKind::kMax && ctx.num_outputs() > 1 && ctx.output_requested(1)) {
      ASSIGN_OR_RETURN(indices, ctx.output(1, DataType::kI64, y->dims()));
    }
    const WindowList windows = BuildWindowList(win);
    return DispatchAll(x->dtype(), [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        return InvalidNode(node_, "unsupported dtype bool");
      } else {
        Evaluate<T>(*x, win, windows, y->data<T>(), indices ? indices->data<int64_t>() : nullptr);
        return absl::OkStatus();
      }
    });
  }

 private:
  template <typename T>
  void Evaluate(const ir::Tensor& xt, const Window& win, const WindowList& wl, T* y,
                int64_t* indices) const {
    using C = Compute<T>;
    const int64_t planes = xt.dim(0) * xt.dim(1);
    const int64_t in_sp = ir::NumElementsOf(win.in), out_sp = ir::NumElementsOf(win.out);
    const T* x = xt.data<T>();
    const std::vector<int64_t>& idx_offs = column_major_ ? wl.col_offs : wl.offs;
    ParallelFor(planes, planes * out_sp >= 4096, [&](int64_t pl_begin, int64_t pl_end) {
      for (int64_t pl = pl_begin; pl < pl_end; ++pl) {
        const T* xp = x + pl * in_sp;
        T* yp = y + pl * out_sp;
        for (int64_t p = 0; p < out_sp; ++p) {
          const int64_t b = wl.begin[p], e = wl.begin[p + 1];
          if (kind_ == PoolKind::kAverage) {
            C sum = 0;
            for (int64_t j = b; j < e; ++j) sum += Load(xp[wl.offs[j]]);
            const int64_t count = count_include_pad_ ? wl.padded[p] : e - b;
            // A window entirely in the padding has nothing to average: 0 rather than NaN.
            yp[p] = Store<T>(count > 0 ? sum / static_cast<C>(count) : C(0));
            continue;
          }
          // First maximum wins (ties keep the earliest cell) and NaN cells are skipped, as in
          // ONNX Runtime and the ONNX reference.
          C best = std::numeric_limits<C>::lowest();
          int64_t arg = -1;
          for (int64_t j = b; j < e; ++j) {
            const C v = Load(xp[wl.offs[j]]);
            if (v > best || (arg < 0 && v == best)) {
              best = v;
              arg = j;
            }
          }
          if (arg < 0 && e > b) arg = b;  // all-NaN window: still report a cell
          yp[p] = Store<T>(best);
          if (indices) indices[pl * out_sp + p] = arg < 0 ? -1 : pl * in_sp + idx_offs[arg];
        }
      }
    });
  }

  const ir::Node& node_;
  PoolKind kind_;
  WindowAttrs attrs_;
  bool count_include_pad_ = false;
  bool column_major_ = false;
};

// Global pools reduce each (n, c) plane to one value.
template <PoolKind kKind>
absl::Status GlobalPoolRun(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const GlobalPoolIo io, StartGlobalPool(node, ctx));
  const ir::Tensor* x = io.x;
  ir::Tensor* y = io.y;
  const int64_t planes = io.planes, sp = io.plane_size;
  return DispatchFloat(x->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    const T* xd = x->data<T>();
    T* yd = y->data<T>();
    ParallelFor(planes, planes * sp >= (1 << 16), [&](int64_t pl_begin, int64_t pl_end) {
      for (int64_t pl = pl_begin; pl < pl_end; ++pl) {
        const T* xp = xd + pl * sp;
        if constexpr (kKind == PoolKind::kAverage) {
          C sum = 0;
          for (int64_t i = 0; i < sp; ++i) sum += Load(xp[i]);
          yd[pl] = Store<T>(sp > 0 ? sum / static_cast<C>(sp) : C(0));
        } else {
          C best = sp > 0 ? Load(xp[0]) : C(0);
          for (int64_t i = 1; i < sp; ++i) best = std::max(best, Load(xp[i]));
          yd[pl] = Store<T>(best);
        }
      }
    });
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterPoolOps(Registry& r) {
  r.AddRef(ir::OpType::kAveragePool, FloatTypes(), &PoolKernel::Create<PoolKind::kAverage>);
  std::vector<DataType> max_types = FloatTypes();
  max_types.push_back(DataType::kI8);
  max_types.push_back(DataType::kU8);
  r.AddRef(ir::OpType::kMaxPool, max_types, &PoolKernel::Create<PoolKind::kMax>);
  r.AddRef(ir::OpType::kGlobalAveragePool, FloatTypes(),
           &FunctionKernel<GlobalPoolRun<PoolKind::kAverage>>::Create);
  r.AddRef(ir::OpType::kGlobalMaxPool, FloatTypes(),
           &FunctionKernel<GlobalPoolRun<PoolKind::kMax>>::Create);
}

}  // namespace kiln::kernels::cpu::ref::nn
