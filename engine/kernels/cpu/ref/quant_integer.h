// Shared by the ConvIntegerToFloat kernels (cpu/ref/quant_integer.cc, cpu/avx512/
// quant_integer_ops.cc): the forms of its bias and scale inputs (engine/ir/ops.def).
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::kernels::cpu::ref {

/// Whether a tensor of `dims` broadcast onto a convolution output of rank `out_rank` ([N, M,
/// spatial...]) under numpy rules gives one value per output channel of `m` (or one value for
/// all): every dim 1, or, of rank out_rank - 1 or out_rank, every dim 1 but the one aligned
/// with the output's channel axis, which is `m`. ([M] alone is not: it aligns with the last
/// spatial axis.)
inline bool IsChannelVector(const std::vector<int64_t>& dims, int64_t m, int out_rank) {
  const int r = static_cast<int>(dims.size());
  if (r > out_rank) return false;
  const int channel_axis = r - (out_rank - 1);  // dims' axis aligned with output axis 1
  for (int i = 0; i < r; ++i) {
    if (dims[i] != 1 && !(i == channel_axis && dims[i] == m)) return false;
  }
  return true;
}

}  // namespace kiln::kernels::cpu::ref
