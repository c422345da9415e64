// The spatial family: LpPool, GlobalLpPool, MaxUnpool and Col2Im here; GridSample and AffineGrid
// in spatial_grid.cc. LpPool reuses the pools' window geometry (nn_internal.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/cpu/ref/nn_internal.h"
#include "engine/kernels/cpu/ref/register.h"

namespace kiln::kernels::cpu::ref {
namespace spatial {
void RegisterGridOps(Registry& r);  // spatial_grid.cc: GridSample, AffineGrid
}  // namespace spatial

namespace {

using nn::Window;

/// The p-norm of a window: sum of |x|^p, then the p-th root. p = 1 and 2 take exact shortcuts
/// (no pow) since they are by far the common cases.
template <typename C>
struct LpNorm {
  int64_t p;
  C Term(C v) const {
    const C a = std::abs(v);
    if (p == 1) return a;
    if (p == 2) return a * a;
    return std::pow(a, static_cast<C>(p));
  }
  C Finish(C sum) const {
    if (p == 1) return sum;
    if (p == 2) return std::sqrt(sum);
    return std::pow(sum, C(1) / static_cast<C>(p));
  }
};

absl::StatusOr<int64_t> ReadP(const ir::Node& node) {
  const int64_t p = node.GetInt("p", 2);
  if (p <= 0) return InvalidNode(node, "attribute p must be positive, got ", p);
  return p;
}

class LpPoolKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::make_unique<LpPoolKernel>(node);
    ASSIGN_OR_RETURN(k->attrs_, nn::ReadPoolAttrs(node));
    ASSIGN_OR_RETURN(k->p_, ReadP(node));
    return std::unique_ptr<Kernel>(std::move(k));
  }
  explicit LpPoolKernel(const ir::Node& node) : node_(node) {}

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const nn::PoolIo io, nn::StartPool(node_, attrs_, ctx));
    const ir::Tensor* x = io.x;
    ir::Tensor* y = io.y;
    const Window& win = io.win;
    const nn::WindowList cells = nn::BuildWindowList(win);
    const int64_t planes = x->dim(0) * x->dim(1);
    const int64_t in_sp = ir::NumElementsOf(win.in), out_sp = ir::NumElementsOf(win.out);
    return DispatchFloat(x->dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = Compute<T>;
      const LpNorm<C> norm{p_};
      const T* xd = x->data<T>();
      T* yd = y->data<T>();
      for (int64_t pl = 0; pl < planes; ++pl) {
        const T* xp = xd + pl * in_sp;
        T* yp = yd + pl * out_sp;
        for (int64_t q = 0; q < out_sp; ++q) {
          C sum = 0;
          for (int64_t j = cells.begin[q]; j < cells.begin[q + 1]; ++j) {
            sum += norm.Term(Load(xp[cells.offs[j]]));
          }
          yp[q] = Store<T>(norm.Finish(sum));
        }
      }
      return absl::OkStatus();
    });
  }

 private:
  const ir::Node& node_;
  nn::WindowAttrs attrs_;
  int64_t p_ = 2;
};

/// GlobalLpPool: the p-norm of each (n, c) plane.
absl::Status GlobalLpPoolRun(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const int64_t p, ReadP(node));
  ASSIGN_OR_RETURN(const nn::GlobalPoolIo io, nn::StartGlobalPool(node, ctx));
  const ir::Tensor* x = io.x;
  ir::Tensor* y = io.y;
  const int64_t planes = io.planes, sp = io.plane_size;
  return DispatchFloat(x->dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    const LpNorm<C> norm{p};
    const T* xd = x->data<T>();
    T* yd = y->data<T>();
    for (int64_t pl = 0; pl < planes; ++pl) {
      C sum = 0;
      for (int64_t i = 0; i < sp; ++i) sum += norm.Term(Load(xd[pl * sp + i]));
      yd[pl] = Store<T>(norm.Finish(sum));
    }
    return absl::OkStatus();
  });
}

// ---- MaxUnpool --------------------------------------------------------------------------------

/// Reads kernel_shape / strides / pads once; Run infers the unpooled shape.
class MaxUnpoolKernel final : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const ir::Node& node) {
    auto k = std::make_unique<MaxUnpoolKernel>(node);
    k->kernel_ = node.GetInts("kernel_shape");
    if (k->kernel_.empty()) return InvalidNode(node, "kernel_shape is required");
    const size_t nd = k->kernel_.size();
    k->strides_ = node.GetInts("strides", std::vector<int64_t>(nd, 1));
    k->pads_ = node.GetInts("pads", std::vector<int64_t>(2 * nd, 0));
    if (k->strides_.size() != nd || k->pads_.size() != 2 * nd) {
      return InvalidNode(node, "strides/pads do not match the ", nd, " dims of kernel_shape");
    }
    for (size_t d = 0; d < nd; ++d) {
      if (k->kernel_[d] <= 0 || k->strides_[d] <= 0) {
        return InvalidNode(node, "kernel_shape and strides must be positive");
      }
      if (k->pads_[d] < 0 || k->pads_[nd + d] < 0) {
        return InvalidNode(node, "pads must be non-negative");
      }
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }
  explicit MaxUnpoolKernel(const ir::Node& node) : node_(node) {}

  absl::Status Run(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node_, ctx, 0));
    ASSIGN_OR_RETURN(const ir::Tensor* ind, RequireInput(node_, ctx, 1));
    const size_t nd = kernel_.size();
    if (x->rank() != static_cast<int>(nd) + 2) {
      return InvalidNode(node_, "input rank ", x->rank(), " does not match kernel_shape of ", nd,
                         " dims");
    }
    if (ind->dims() != x->dims()) return InvalidNode(node_, "indices must have the shape of X");
    if (ind->dtype() != DataType::kI64) return InvalidNode(node_, "indices must be int64");
    // The unpooled shape: the input of a MaxPool with these attributes that gives X.
    std::vector<int64_t> inferred = {x->dim(0), x->dim(1)};
    for (size_t d = 0; d < nd; ++d) {
      const int64_t v = (x->dim(2 + d) - 1) * strides_[d] - pads_[d] - pads_[nd + d] + kernel_[d];
      if (v < 0) return InvalidNode(node_, "negative inferred output size on spatial axis ", d);
      inferred.push_back(v);
    }
    std::vector<int64_t> out_dims = inferred;
    const ir::Tensor* shape_t = ctx.input(2);
    if (shape_t != nullptr) {
      ASSIGN_OR_RETURN(out_dims, ReadInts(node_, *shape_t, "output_shape"));
      if (out_dims.size() != inferred.size()) {
        return InvalidNode(node_, "output_shape has ", out_dims.size(), " values, expected ",
                           inferred.size());
      }
      for (int64_t v : out_dims) {
        if (v < 0) return InvalidNode(node_, "output_shape values must be non-negative");
      }
    }
    ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));
    const int64_t n_inferred = ir::NumElementsOf(inferred);
    const int64_t* idx = ind->data<int64_t>();
    for (int64_t i = 0; i < ind->num_elements(); ++i) {
      if (idx[i] < 0 || idx[i] >= n_inferred) {
        return InvalidNode(node_, "index ", idx[i], " at element ", i, " is outside [0, ",
                           n_inferred, ")");
      }
    }
    return DispatchFloat(x->dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Unpool<T>(*x, idx, inferred, out_dims, y->data<T>());
      return absl::OkStatus();
    });
  }

 private:
  // The indices address the inferred (MaxPool input) shape; a given output_shape places that
  // tensor in its leading corner, zero-filled around it (the ONNX reference semantics, which the
  // conformance data follows).
  template <typename T>
  static void Unpool(const ir::Tensor& x, const int64_t* idx, const std::vector<int64_t>& inferred,
                     const std::vector<int64_t>& out_dims, T* y) {
    const T* xd = x.data<T>();
    const int64_t n = x.num_elements();
    const int64_t n_out = ir::NumElementsOf(out_dims);
    std::fill(y, y + n_out, T(0.0f));
    if (out_dims == inferred) {
      for (int64_t i = 0; i < n; ++i) y[idx[i]] = xd[i];
      return;
    }
    // Different shape: unpool into the inferred shape, then map each written cell's coordinates
    // onto the output, dropping cells outside it.
    const int rank = static_cast<int>(inferred.size());
    const std::vector<int64_t> out_strides = Strides(out_dims);
    for (int64_t i = 0; i < n; ++i) {
      int64_t rem = idx[i], off = 0;
      bool inside = true;
      for (int d = rank - 1; d >= 0; --d) {
        const int64_t c = rem % inferred[d];
        rem /= inferred[d];
        inside &= c < out_dims[d];
        off += c * out_strides[d];
      }
      if (inside) y[off] = xd[i];
    }
  }

  const ir::Node& node_;
  std::vector<int64_t> kernel_, strides_, pads_;
};

// ---- Col2Im -----------------------------------------------------------------------------------

/// Col2Im: sums each column entry (n, c * K + k, l) of the sliding blocks into the image cell it
/// came from. The map column entry -> image offset is the same for every (n, c) plane, so it is
/// built once per run; entries that fall in the padding map to -1.
absl::Status Col2ImRun(const ir::Node& node, KernelContext& ctx) {
  ASSIGN_OR_RETURN(const ir::Tensor* x, RequireInput(node, ctx, 0));
  ASSIGN_OR_RETURN(const ir::Tensor* image_t, RequireInput(node, ctx, 1));
  ASSIGN_OR_RETURN(const ir::Tensor* block_t, RequireInput(node, ctx, 2));
  ASSIGN_OR_RETURN(std::vector<int64_t> image, ReadInts(node, *image_t, "image_shape"));
  ASSIGN_OR_RETURN(std::vector<int64_t> block, ReadInts(node, *block_t, "block_shape"));
  const size_t nd = image.size();
  if (nd == 0 || block.size() != nd) {
    return InvalidNode(node, "image_shape and block_shape must have the same non-zero length");
  }
  const std::vector<int64_t> strides = node.GetInts("strides", std::vector<int64_t>(nd, 1));
  const std::vector<int64_t> dilations = node.GetInts("dilations", std::vector<int64_t>(nd, 1));
  const std::vector<int64_t> pads = node.GetInts("pads", std::vector<int64_t>(2 * nd, 0));
  if (strides.size() != nd || dilations.size() != nd || pads.size() != 2 * nd) {
    return InvalidNode(node, "strides/dilations/pads do not match the ", nd, " image dims");
  }
  if (x->rank() != 3) return InvalidNode(node, "input must have rank 3, got ", x->rank());
  std::vector<int64_t> blocks(nd);  // sliding block positions per dim
  for (size_t d = 0; d < nd; ++d) {
    if (image[d] < 0 || block[d] <= 0 || strides[d] <= 0 || dilations[d] <= 0 || pads[d] < 0 ||
        pads[nd + d] < 0) {
      return InvalidNode(node, "invalid image_shape/block_shape/strides/dilations/pads on dim ", d);
    }
    const int64_t span = image[d] + pads[d] + pads[nd + d] - dilations[d] * (block[d] - 1) - 1;
    if (span < 0) return InvalidNode(node, "block does not fit the padded image on dim ", d);
    blocks[d] = span / strides[d] + 1;
  }
  const int64_t k_size = ir::NumElementsOf(block), l_size = ir::NumElementsOf(blocks);
  if (x->dim(1) % k_size != 0) {
    return InvalidNode(node, "input dim 1 (", x->dim(1), ") is not a multiple of the block size ",
                       k_size);
  }
  if (x->dim(2) != l_size) {
    return InvalidNode(node, "input dim 2 (", x->dim(2), ") is not the block count ", l_size);
  }
  const int64_t channels = x->dim(1) / k_size;
  std::vector<int64_t> out_dims = {x->dim(0), channels};
  out_dims.insert(out_dims.end(), image.begin(), image.end());
  ASSIGN_OR_RETURN(ir::Tensor * y, ctx.output(0, x->dtype(), out_dims));

  // target[k * L + l]: image offset of kernel cell k at block position l, or -1.
  const std::vector<int64_t> img_strides = Strides(image);
  std::vector<int64_t> target(k_size * l_size);
  std::vector<int64_t> kpos(nd, 0), lpos(nd, 0);
  for (int64_t k = 0; k < k_size; ++k) {
    std::fill(lpos.begin(), lpos.end(), 0);
    for (int64_t l = 0; l < l_size; ++l) {
      int64_t off = 0;
      for (size_t d = 0; d < nd && off >= 0; ++d) {
        const int64_t i = lpos[d] * strides[d] - pads[d] + kpos[d] * dilations[d];
        off = (i >= 0 && i < image[d]) ? off + i * img_strides[d] : -1;
      }
      target[k * l_size + l] = off;
      for (int d = static_cast<int>(nd) - 1; d >= 0; --d) {
        if (++lpos[d] < blocks[d]) break;
        lpos[d] = 0;
      }
    }
    for (int d = static_cast<int>(nd) - 1; d >= 0; --d) {
      if (++kpos[d] < block[d]) break;
      kpos[d] = 0;
    }
  }

  const int64_t planes = x->dim(0) * channels;
  const int64_t img_size = ir::NumElementsOf(image);
  return DispatchAll(x->dtype(), [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      return InvalidNode(node, "unsupported dtype bool");
    } else {
      using A = nn::Acc<T>;  // fp32 for fp16/bf16; wrapping unsigned for integers
      std::vector<A> acc(img_size);
      const T* xd = x->data<T>();
      T* yd = y->data<T>();
      for (int64_t pl = 0; pl < planes; ++pl) {
        std::fill(acc.begin(), acc.end(), A(0));
        const T* xp = xd + pl * k_size * l_size;
        for (int64_t j = 0; j < k_size * l_size; ++j) {
          if (target[j] >= 0) acc[target[j]] += static_cast<A>(Load(xp[j]));
        }
        for (int64_t i = 0; i < img_size; ++i) yd[pl * img_size + i] = Store<T>(acc[i]);
      }
      return absl::OkStatus();
    }
  });
}

}  // namespace

void RegisterSpatial(Registry& r) {
  using ir::OpType;
  r.AddRef(OpType::kLpPool, FloatTypes(), &LpPoolKernel::Create);
  r.AddRef(OpType::kGlobalLpPool, FloatTypes(), &FunctionKernel<GlobalLpPoolRun>::Create);
  r.AddRef(OpType::kMaxUnpool, FloatTypes(), &MaxUnpoolKernel::Create);
  r.AddRef(OpType::kCol2Im, NumericTypes(), &FunctionKernel<Col2ImRun>::Create);
  spatial::RegisterGridOps(r);
}

}  // namespace kiln::kernels::cpu::ref
