// The inner loops of the error metrics, in their own file: it is compiled with -O3 and
// finite-math flags (engine/CMakeLists.txt) so its reductions vectorize. Finiteness is therefore
// tested on the bits, never with isfinite/isnan, which those flags may fold away.
#pragma once

#include <cstdint>

namespace kiln::report::internal {

/// Sums of one block of finite pairs: |x - r|, x^2, r^2 and (x - r)^2 (the cosine follows from
/// the last three: 2 x.r = x.x + r.r - (x - r).(x - r)).
struct BlockSums {
  float max_abs = 0, max_rel = 0;
  double sum_abs = 0, xx = 0, rr = 0, ee = 0;
  int64_t outside = 0;
};

/// Adds `n` pairs to `out` when every element of `x` and `ref` is finite and returns true;
/// returns false, leaving `out` as it was, when one is not.
bool AddFiniteBlock(const float* x, const float* ref, int64_t n, float atol, float rtol,
                    BlockSums& out);

/// AddFiniteBlock of `ways` (1 or 2) tensors x[w] against the same `ref` in one pass (the
/// reference's part of the sums computed once), into out[w]; finite[w] tells whether x[w] and
/// `ref` were all finite (else out[w] is left as it was). The sums of squares are formed in fp32
/// over 16 elements per lane, then added in double (relative error ~1e-6; a block whose squares
/// could overflow or underflow fp32 is summed by AddFiniteBlock instead). AVX-512F/DQ: the
/// caller checks the CPU.
void AddFiniteBlocksAvx512(const float* const* x, int ways, const float* ref, int64_t n, float atol,
                           float rtol, BlockSums* out, bool* finite);

/// Max |v| over the finite elements of `v`.
float MaxAbsOfFinite(const float* v, int64_t n);

}  // namespace kiln::report::internal
