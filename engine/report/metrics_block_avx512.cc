// AddFiniteBlocksAvx512 (metrics_block.h): the error sums of one block of pairs for one or two
// engine tensors against one reference, in AVX-512. Compiled with AVX-512 flags; called only on
// CPUs that have them.
#include <immintrin.h>

#include <cstdint>

#include "engine/report/metrics_block.h"

namespace kiln::report::internal {
namespace {

// A lane's max_rel is only recomputed when e >= kBelow * max_rel * d could hold (see Way::Add).
constexpr float kBelow = 0.99999f;

// Sum of the 8 doubles of each vector, low half first.
double Sum(__m512d lo, __m512d hi) { return _mm512_reduce_add_pd(lo) + _mm512_reduce_add_pd(hi); }

// The running sums of one engine tensor.
struct Way {
  __m512 mx, mrel;  // per-lane max |x - r| and max_rel
  __m512 below;     // kBelow * the max over the lanes of max_rel, in every lane
  __m512d sa[2], dot[2], xx[2], ee[2];
  int64_t outside = 0;
  __mmask16 bad = 0;

  void Start(const BlockSums& start) {
    mx = _mm512_set1_ps(start.max_abs);
    mrel = _mm512_set1_ps(start.max_rel);
    below = _mm512_mul_ps(mrel, _mm512_set1_ps(kBelow));
    for (int h = 0; h < 2; ++h) sa[h] = dot[h] = xx[h] = ee[h] = _mm512_setzero_pd();
  }

  // Adds 16 pairs (lanes outside `m` are zero in x and r, and add nothing).
  void Add(__m512 x, __m512 r, __m512 d, __m512 tol, const __m512d rd[2]) {
    const __m512i exponent = _mm512_set1_epi32(0x7f800000);
    const __m512i bits = _mm512_castps_si512(x);
    bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(bits, exponent), exponent);
    const __m512 e = _mm512_abs_ps(_mm512_sub_ps(x, r));
    mx = _mm512_max_ps(mx, e);
    outside += __builtin_popcount(_mm512_cmp_ps_mask(e, tol, _CMP_GT_OQ));
    // max_rel = max(e / d) without a division per element: the max can only grow where
    // e / d > max_rel, which (fl monotone, 0.99999 below the two product roundings) implies
    // e >= fl(fl(kBelow * max_rel) * d); a product in the subnormal range (c < FLT_MIN) proves
    // nothing and is taken as a candidate. Candidates are divided exactly, so the max is the
    // one of every quotient.
    const __m512 c = _mm512_mul_ps(below, d);
    const __mmask16 candidate =
        (_mm512_cmp_ps_mask(e, c, _CMP_GE_OQ) |
         _mm512_cmp_ps_mask(c, _mm512_set1_ps(1.17549435e-38f), _CMP_LT_OQ)) &
        _mm512_cmp_ps_mask(e, _mm512_setzero_ps(), _CMP_GT_OQ);
    if (candidate != 0) {
      mrel = _mm512_mask_max_ps(mrel, candidate, mrel, _mm512_div_ps(e, d));
      below = _mm512_set1_ps(_mm512_reduce_max_ps(mrel) * kBelow);
    }
    const __m512d xd[2] = {_mm512_cvtps_pd(_mm512_castps512_ps256(x)),
                           _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1))};
    const __m512d ed[2] = {_mm512_cvtps_pd(_mm512_castps512_ps256(e)),
                           _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1))};
    for (int h = 0; h < 2; ++h) {
      sa[h] = _mm512_add_pd(sa[h], ed[h]);
      ee[h] = _mm512_fmadd_pd(ed[h], ed[h], ee[h]);
      dot[h] = _mm512_fmadd_pd(xd[h], rd[h], dot[h]);
      xx[h] = _mm512_fmadd_pd(xd[h], xd[h], xx[h]);
    }
  }

  void Finish(__mmask16 bad_ref, double rr, BlockSums& out, bool& finite) const {
    finite = (bad | bad_ref) == 0;
    if (!finite) return;  // the sums are meaningless: the caller goes one by one
    out.max_abs = _mm512_reduce_max_ps(mx);
    out.max_rel = _mm512_reduce_max_ps(mrel);
    out.sum_abs += Sum(sa[0], sa[1]);
    out.dot += Sum(dot[0], dot[1]);
    out.xx += Sum(xx[0], xx[1]);
    out.ee += Sum(ee[0], ee[1]);
    out.rr += rr;
    out.outside += outside;
  }
};

template <int kWays>
void Blocks(const float* const* xs, const float* ref, int64_t n, float atol, float rtol,
            BlockSums* out, bool* finite) {
  const __m512i exponent = _mm512_set1_epi32(0x7f800000);
  const __m512 atolv = _mm512_set1_ps(atol), rtolv = _mm512_set1_ps(rtol);
  const __m512 tiny = _mm512_set1_ps(1e-6f);
  Way ways[kWays];
  for (int w = 0; w < kWays; ++w) ways[w].Start(out[w]);
  __m512d rr[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
  __mmask16 bad_ref = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m =
        n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 r = _mm512_maskz_loadu_ps(m, ref + i);
    bad_ref |=
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(r), exponent), exponent);
    const __m512 ar = _mm512_abs_ps(r);
    const __m512 d = _mm512_max_ps(ar, tiny);
    // atol + rtol * |r| rounded twice, as the scalar comparison in AddFiniteBlock.
    const __m512 tol = _mm512_add_ps(atolv, _mm512_mul_ps(rtolv, ar));
    const __m512d rd[2] = {_mm512_cvtps_pd(_mm512_castps512_ps256(r)),
                           _mm512_cvtps_pd(_mm512_extractf32x8_ps(r, 1))};
    for (int h = 0; h < 2; ++h) rr[h] = _mm512_fmadd_pd(rd[h], rd[h], rr[h]);
    for (int w = 0; w < kWays; ++w) {
      ways[w].Add(_mm512_maskz_loadu_ps(m, xs[w] + i), r, d, tol, rd);
    }
  }
  const double rr_sum = Sum(rr[0], rr[1]);
  for (int w = 0; w < kWays; ++w) ways[w].Finish(bad_ref, rr_sum, out[w], finite[w]);
}

}  // namespace

void AddFiniteBlocksAvx512(const float* const* x, int ways, const float* ref, int64_t n, float atol,
                           float rtol, BlockSums* out, bool* finite) {
  if (ways == 2) return Blocks<2>(x, ref, n, atol, rtol, out, finite);
  Blocks<1>(x, ref, n, atol, rtol, out, finite);
}

}  // namespace kiln::report::internal
