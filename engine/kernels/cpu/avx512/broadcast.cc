// MakeBcPlan (broadcast.h): the numpy broadcast of run-time dims as the merged iteration plan
// the AVX-512 broadcasting loops walk. Plain code, no AVX-512.
#include "engine/kernels/cpu/avx512/broadcast.h"

#include <algorithm>

namespace kiln::kernels::cpu::avx512 {

bool MakeBcPlan(const std::vector<const std::vector<int64_t>*>& inputs, BcPlan* plan,
                std::vector<int64_t>* out_dims) {
  const int nin = static_cast<int>(inputs.size());
  if (nin < 1 || nin > kBcMaxInputs) return false;
  size_t rank = 0;
  for (const auto* d : inputs) rank = std::max(rank, d->size());
  std::vector<int64_t> out(rank, 1);
  for (const auto* d : inputs) {
    const size_t lead = rank - d->size();
    for (size_t i = 0; i < d->size(); ++i) {
      const int64_t x = (*d)[i];
      if (x < 0) return false;
      int64_t& o = out[lead + i];
      if (x == o || x == 1) continue;
      if (o != 1) return false;  // neither is 1 and they differ: does not broadcast
      o = x;
    }
  }
  // Row-major strides of each input over the output dims (0 where it is broadcast).
  std::vector<std::vector<int64_t>> full(nin, std::vector<int64_t>(rank, 0));
  for (int k = 0; k < nin; ++k) {
    const std::vector<int64_t>& d = *inputs[k];
    const size_t lead = rank - d.size();
    int64_t s = 1;
    for (size_t i = d.size(); i-- > 0;) {
      full[k][lead + i] = d[i] == 1 ? 0 : s;
      s *= d[i];
    }
  }
  BcPlan p;
  p.num_inputs = nin;
  p.n = 1;
  int r = 0;  // merged dims so far
  for (size_t d = 0; d < rank; ++d) {
    p.n *= out[d];
    if (out[d] == 1) continue;
    // Merge into the previous kept dim when every input walks both alike (as one contiguous
    // range, or both broadcast).
    bool merge = r > 0;
    for (int k = 0; merge && k < nin; ++k) merge = p.strides[k][r - 1] == full[k][d] * out[d];
    if (merge) {
      p.dims[r - 1] *= out[d];
      for (int k = 0; k < nin; ++k) p.strides[k][r - 1] = full[k][d];
      continue;
    }
    if (r == kBcMaxRank) return false;
    p.dims[r] = out[d];
    for (int k = 0; k < nin; ++k) p.strides[k][r] = full[k][d];
    ++r;
  }
  if (r == 0) {  // a scalar (or all-ones) output: one run of one element
    p.dims[0] = 1;
    for (int k = 0; k < nin; ++k) p.strides[k][0] = 0;
    r = 1;
  }
  p.rank = r;
  *plan = p;
  *out_dims = std::move(out);
  return true;
}

}  // namespace kiln::kernels::cpu::avx512
