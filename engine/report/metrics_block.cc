#include "engine/report/metrics_block.h"

#include <cmath>
#include <cstring>

// One copy of each loop per vector width, picked at load time from the CPU (GCC target_clones):
// the double sums run 8 wide on AVX-512 instead of 2 on the x86-64 baseline.
#define KILN_METRICS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace kiln::report::internal {
namespace {

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline bool FiniteBits(uint32_t u) { return (u & 0x7f800000u) != 0x7f800000u; }

}  // namespace

KILN_METRICS_CLONES bool AddFiniteBlock(const float* x, const float* ref, int64_t n, float atol,
                                        float rtol, BlockSums& out) {
  float mx = out.max_abs, mrel = out.max_rel;
  double sa = 0, xx = 0, rr = 0, ee = 0;
  int64_t outside = 0;
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i], r = ref[i];
    bad |= !FiniteBits(Bits(v)) | !FiniteBits(Bits(r));
    const float e = std::fabs(v - r), ar = std::fabs(r);
    mx = std::fmax(mx, e);
    mrel = std::fmax(mrel, e / std::fmax(ar, 1e-6f));
    outside += e > atol + rtol * ar ? 1 : 0;
    sa += e;
    xx += static_cast<double>(v) * v;
    rr += static_cast<double>(r) * r;
    ee += static_cast<double>(e) * e;
  }
  if (bad != 0) return false;  // the sums above are meaningless: the caller goes one by one
  out.max_abs = mx;
  out.max_rel = mrel;
  out.sum_abs += sa;
  out.xx += xx;
  out.rr += rr;
  out.ee += ee;
  out.outside += outside;
  return true;
}

KILN_METRICS_CLONES float MaxAbsOfFinite(const float* v, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = Bits(v[i]);
    const float a = std::fabs(v[i]);
    m = std::fmax(m, FiniteBits(u) ? a : 0.0f);
  }
  return m;
}

}  // namespace kiln::report::internal
