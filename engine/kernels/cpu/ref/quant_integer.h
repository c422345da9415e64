// Shared by the ConvIntegerToFloat and MatMulIntegerToFloat kernels (cpu/ref/quant_integer.cc,
// cpu/avx512/quant_integer_ops.cc) and their fusion (passes/qdq_integer.cc): the forms of their
// bias and scale inputs (engine/ir/ops.def).
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::kernels::cpu::ref {

/// Whether a tensor of `dims` broadcast onto an output of rank `out_rank` under numpy rules gives
/// one value per index of the output's axis `axis` (of size `count`), or one value for all:
/// of rank at most out_rank, every dim 1 but the one aligned with `axis` (dims' axis
/// axis - (out_rank - rank)), which is 1 or `count`.
inline bool IsAxisVector(const std::vector<int64_t>& dims, int64_t count, int out_rank, int axis) {
  const int r = static_cast<int>(dims.size());
  if (r > out_rank) return false;
  const int aligned = axis - (out_rank - r);
  for (int i = 0; i < r; ++i) {
    if (dims[i] != 1 && !(i == aligned && dims[i] == count)) return false;
  }
  return true;
}

/// One value per output channel of `m` of a convolution output [N, M, spatial...] of rank
/// `out_rank` (or one value for all): [M, 1, ...] of rank out_rank - 1, [1, M, 1, ...] of rank
/// out_rank, or all ones. ([M] alone is not: it aligns with the last spatial axis.)
inline bool IsChannelVector(const std::vector<int64_t>& dims, int64_t m, int out_rank) {
  return IsAxisVector(dims, m, out_rank, 1);
}

/// One value per output column of `n` (the last axis) of a matrix product's output of rank
/// `out_rank` (or one value for all): [], [1], [N], [1, N], [1, 1, N], ... of rank at most
/// out_rank.
inline bool IsColumnVector(const std::vector<int64_t>& dims, int64_t n, int out_rank) {
  return IsAxisVector(dims, n, out_rank, out_rank - 1);
}

}  // namespace kiln::kernels::cpu::ref
