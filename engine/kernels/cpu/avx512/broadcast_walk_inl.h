// The walk over a BcPlan (broadcast.h) shared by broadcast_avx512.cc and compare_avx512.cc.
// Include only from `*_avx512.cc` files: everything is `static` in an anonymous namespace, as in
// vec_convert_inl.h, so each of those files keeps its own copy.
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/kernels/cpu/avx512/broadcast.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

// Memory bound: pieces of 16K output elements, on every thread from 4 pieces on (the split of
// elementwise_avx512.cc). Each element is computed alone, so any split gives the same numbers.
constexpr int64_t kBcPiece = int64_t{1} << 14;

/// Calls seg(o, len, off) for each stretch [o, o + len) of output elements [begin, end) that lies
/// in one inner run: input k's element for output o + i is at off[k] + i * (its inner stride,
/// 0 or 1).
template <typename Seg>
static void BcWalkRange(const BcPlan& p, int64_t begin, int64_t end, Seg&& seg) {
  const int r = p.rank;
  const int nin = p.num_inputs;
  const int64_t inner = p.dims[r - 1];
  int64_t idx[kBcMaxRank] = {};
  int64_t off[kBcMaxInputs] = {};
  int64_t q = begin / inner;
  int64_t j = begin % inner;
  for (int d = r - 2; d >= 0; --d) {
    idx[d] = q % p.dims[d];
    q /= p.dims[d];
    for (int k = 0; k < nin; ++k) off[k] += idx[d] * p.strides[k][d];
  }
  int64_t at[kBcMaxInputs] = {};
  for (int64_t o = begin; o < end;) {
    const int64_t len = std::min(inner - j, end - o);
    for (int k = 0; k < nin; ++k) at[k] = off[k] + j * p.strides[k][r - 1];
    seg(o, len, static_cast<const int64_t*>(at));
    o += len;
    j = 0;
    for (int d = r - 2; d >= 0; --d) {  // the next row: the odometer over the outer dims
      for (int k = 0; k < nin; ++k) off[k] += p.strides[k][d];
      if (++idx[d] < p.dims[d]) break;
      for (int k = 0; k < nin; ++k) off[k] -= p.strides[k][d] * p.dims[d];
      idx[d] = 0;
    }
  }
}

/// BcWalkRange over the whole output, in pieces shared by the OpenMP threads.
template <typename Seg>
static void BcWalk(const BcPlan& p, Seg&& seg) {
  if (p.n <= 0) return;
  const int64_t pieces = (p.n + kBcPiece - 1) / kBcPiece;
  ParallelFor(pieces, pieces >= 4, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c) {
      BcWalkRange(p, c * kBcPiece, std::min(p.n, (c + 1) * kBcPiece), seg);
    }
  });
}

}  // namespace
}  // namespace kiln::kernels::cpu::avx512
