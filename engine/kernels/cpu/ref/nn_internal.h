// Internals shared by the nn reference kernel files (nn_*.cc): the one GEMM loop that Conv,
// ConvTranspose, Gemm, MatMul and Attention feed, accumulator types, and the window geometry
// (kernel / strides / pads / dilations / auto_pad) that Conv and the pools share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/ir/graph.h"
#include "engine/kernels/cpu/ref/common.h"
#include "engine/kernels/registry.h"

namespace kiln::kernels::cpu::ref::nn {

/// Accumulator type for storage type T: fp32 for fp16/bf16/fp32, double for double, and the
/// unsigned counterpart for integers so that overflow wraps (defined) instead of being UB.
template <typename T>
struct AccTypeOf {
  using type = Compute<T>;
};
template <typename T>
requires(std::is_integral_v<T> && !std::is_same_v<T, bool>) struct AccTypeOf<T> {
  using type = std::make_unsigned_t<T>;
};
template <typename T>
using Acc = typename AccTypeOf<T>::type;

/// A read-only strided matrix: element (r, c) is p[r * rs + c * cs].
template <typename A>
struct MatView {
  const A* p;
  int64_t rs;
  int64_t cs;
};

/// C[m x n] += A[m x k] * B[k x n] in accumulator type A. C has row stride `ldc` and unit column
/// stride. Defined for float, double, uint32_t, uint64_t (nn_gemm.cc).
template <typename A>
void GemmAccumulate(int64_t m, int64_t n, int64_t k, MatView<A> a, MatView<A> b, A* c, int64_t ldc);

/// numpy.matmul geometry: 1-D operands are promoted (and the added dim dropped from `out`),
/// batch dims broadcast; the batch strides count whole matrices (0 on broadcast dims).
struct MatMulShape {
  int64_t m = 0, n = 0, k = 0;
  std::vector<int64_t> batch, a_bstrides, b_bstrides, out;
};

/// Resolves MatMul of operands shaped `a` and `b`; errors (scalars, inner dims, batch
/// broadcast) name the node.
absl::StatusOr<MatMulShape> PlanMatMul(const ir::Node& node, const std::vector<int64_t>& a,
                                       const std::vector<int64_t>& b);

/// Calls f(i, a_matrix, b_matrix) for each output matrix i of `s` (in row-major batch order),
/// with the indices of the A and B matrices it multiplies.
template <typename F>
void ForEachMatMulBatch(const MatMulShape& s, F&& f) {
  const int64_t nbatch = ir::NumElementsOf(s.batch);
  std::vector<int64_t> idx(s.batch.size(), 0);
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    int64_t aoff = 0, boff = 0;
    for (size_t d = 0; d < s.batch.size(); ++d) {
      aoff += idx[d] * s.a_bstrides[d];
      boff += idx[d] * s.b_bstrides[d];
    }
    f(bi, aoff, boff);
    for (int d = static_cast<int>(s.batch.size()) - 1; d >= 0; --d) {
      if (++idx[d] < s.batch[d]) break;
      idx[d] = 0;
    }
  }
}

/// `n` values of `src` in accumulator type: `src` itself when its storage already is that type
/// (signed integers are reinterpreted as their unsigned twins), else converted into `buf`.
template <typename T>
const Acc<T>* AccData(const T* src, int64_t n, std::vector<Acc<T>>& buf) {
  if constexpr (std::is_same_v<T, Acc<T>> ||
                (std::is_integral_v<T> && sizeof(T) == sizeof(Acc<T>))) {
    return reinterpret_cast<const Acc<T>*>(src);
  } else {
    buf.resize(n);
    for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<Acc<T>>(Load(src[i]));
    return buf.data();
  }
}

/// Python-style floor division (pads may be negative in ConvTranspose).
inline int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

enum class AutoPad { kNotSet, kSameUpper, kSameLower, kValid };

/// Window attributes of Conv, ConvTranspose and the pools, read once in the factory.
/// Empty vectors mean "default" (kernel: inferred from the weights).
struct WindowAttrs {
  AutoPad auto_pad = AutoPad::kNotSet;
  std::vector<int64_t> kernel, strides, dilations, pads;
  bool ceil_mode = false;
};

/// Reads and checks auto_pad, kernel_shape, strides, dilations, pads, ceil_mode.
absl::StatusOr<WindowAttrs> ReadWindowAttrs(const ir::Node& node);

/// Window geometry for one run: per spatial dim.
struct Window {
  std::vector<int64_t> in, out, kernel, strides, dilations, pad_begin, pad_end;
  int rank() const { return static_cast<int>(in.size()); }
};

/// Resolves the forward window (Conv, pools): output sizes and pads from the input spatial sizes
/// and the kernel. Errors name the node.
absl::StatusOr<Window> ResolveWindow(const ir::Node& node, const WindowAttrs& attrs,
                                     const std::vector<int64_t>& in,
                                     const std::vector<int64_t>& kernel);

/// Every window of one (n, c) plane, the same for all planes: for output position p, the flat
/// input offsets (row-major, and column-major for MaxPool's storage_order=1 Indices) of the
/// window cells inside the input are offs[begin[p] .. begin[p + 1]), and padded[p] counts the
/// cells inside input + explicit pads (the count_include_pad divisor; cells that ceil_mode adds
/// past the end pad never count).
struct WindowList {
  std::vector<int64_t> begin, offs, col_offs, padded;
};

/// Builds the WindowList of `w` (an odometer over each window's cells inside the input). Used by
/// the pools (nn_pool.cc) and by LpPool (spatial.cc), which reads only begin and offs.
WindowList BuildWindowList(const Window& w);

/// An error for a channels-last pool node (kChannelsLastAttr): the reference pools are NCHW.
absl::Status RefuseChannelsLast(const ir::Node& node);

/// ReadWindowAttrs for the windowed pools (MaxPool, AveragePool, LpPool): kernel_shape required.
absl::StatusOr<WindowAttrs> ReadPoolAttrs(const ir::Node& node);

/// A windowed pool's X [N, C, in...], resolved window and Y [N, C, out...].
struct PoolIo {
  const ir::Tensor* x = nullptr;
  ir::Tensor* y = nullptr;
  Window win;
};
/// Checks X's rank against kernel_shape, resolves the window and allocates output 0.
absl::StatusOr<PoolIo> StartPool(const ir::Node& node, const WindowAttrs& attrs,
                                 KernelContext& ctx);

/// A global pool's X [N, C, ...] and Y [N, C, 1, ...]: `planes` = N * C planes of `plane_size`.
struct GlobalPoolIo {
  const ir::Tensor* x = nullptr;
  ir::Tensor* y = nullptr;
  int64_t planes = 0, plane_size = 0;
};
/// Checks X's rank (>= 2) and allocates output 0.
absl::StatusOr<GlobalPoolIo> StartGlobalPool(const ir::Node& node, KernelContext& ctx);

/// Conv's window and group attributes, read and checked once per node.
struct ConvAttrs {
  WindowAttrs window;
  int64_t group = 1;
};
/// Fails on a channels-last node (kChannelsLastAttr) unless `channels_last_ok` (the oneDNN
/// kernel, which takes NHWC X and Y).
absl::StatusOr<ConvAttrs> ReadConvAttrs(const ir::Node& node, bool channels_last_ok = false);

/// X, W and the optional B of a Conv or ConvTranspose run.
struct ConvOperands {
  const ir::Tensor* x = nullptr;
  const ir::Tensor* w = nullptr;
  const ir::Tensor* b = nullptr;  // null when omitted
};
/// Reads X, W and B and checks the spatial rank and W's rank. With `same_dtype` (the ONNX ops)
/// X, W and B must share a dtype; the fused kernels read any mix of float dtypes.
absl::StatusOr<ConvOperands> ReadConvOperands(const ir::Node& node, KernelContext& ctx,
                                              bool same_dtype);

/// One forward Conv run: operands, output channels, window and output dims [N, M, out...].
struct ConvSetup {
  ConvOperands in;
  int64_t m = 0;
  Window win;
  std::vector<int64_t> out_dims;
};
/// ReadConvOperands, then the channel, bias and kernel_shape checks and the window.
absl::StatusOr<ConvSetup> SetupConv(const ir::Node& node, const ConvAttrs& attrs,
                                    KernelContext& ctx, bool same_dtype);

/// Sets Y [N, channels, spatial] (n elements) to the per-channel bias, or 0 without one.
template <typename A>
void FillBias(A* y, int64_t n, const A* bias, int64_t channels, int64_t spatial) {
  for (int64_t i = 0; i < n; i += spatial) {
    std::fill(y + i, y + i + spatial, bias ? bias[(i / spatial) % channels] : A(0));
  }
}

/// Y [N, M, win.out...] += Conv(X, W) (im2col + GEMM per batch and group) in accumulator type A
/// (float or double). X is [N, C, win.in...], W is [M, C / group, win.kernel...].
template <typename A>
void ConvForward(const std::vector<int64_t>& x_dims, const std::vector<int64_t>& w_dims,
                 const Window& win, int64_t group, const A* x, const A* w, A* y);

void RegisterGemmOps(Registry& r);    // nn_gemm.cc: Gemm, MatMul
void RegisterConvOps(Registry& r);    // nn_conv.cc: Conv, ConvTranspose
void RegisterPoolOps(Registry& r);    // nn_pool.cc: AveragePool, MaxPool, Global*Pool
void RegisterEinsum(Registry& r);     // nn_einsum.cc
void RegisterAttention(Registry& r);  // nn_attention.cc

}  // namespace kiln::kernels::cpu::ref::nn
