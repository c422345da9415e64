// AddFiniteBlocksAvx512 (metrics_block.h): the error sums of one block of pairs for one or two
// engine tensors against one reference, in AVX-512. Compiled with AVX-512 flags; called only on
// CPUs that have them.
#include <immintrin.h>

#include <cstdint>

#include "engine/report/metrics_block.h"

namespace kiln::report::internal {
namespace {

// Quotients e / d are only computed where e >= kBelow * max_rel * d (see Way::Add).
constexpr float kBelow = 0.99999f;

// Vectors of 16 pairs whose squares are summed in fp32 before going into the double sums.
constexpr int kRun = 16;

// dst += the 16 floats of `v` in double.
inline void AddWide(__m512d dst[2], __m512 v) {
  dst[0] = _mm512_add_pd(dst[0], _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
  dst[1] = _mm512_add_pd(dst[1], _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)));
}

double Sum(const __m512d v[2]) { return _mm512_reduce_add_pd(v[0]) + _mm512_reduce_add_pd(v[1]); }

// Whether values of magnitude at most `max` (0 or in [1e-12, 1e18]) square and sum in fp32
// without harm: a run's sum stays below 16 * 16 * 1e36 (no overflow), and a sum of squares with
// one as large as 1e-24 loses at most 4096 underflowed squares of < 1.2e-38 (relative 5e-11).
inline bool InRange(float max) { return max == 0 || (max >= 1e-12f && max <= 1e18f); }

// The running sums of one engine tensor.
struct Way {
  __m512 mx, mrel, mxx;  // per-lane max |x - r|, max_rel and max |x|
  __m512 below;          // kBelow * the max over the lanes of max_rel, in every lane
  __m512 sa, xx, ee;     // fp32 sums of the current run of kRun vectors
  __m512d sa_d[2], xx_d[2], ee_d[2];
  int64_t outside = 0;
  __mmask16 bad = 0;

  void Start(const BlockSums& start) {
    mx = _mm512_set1_ps(start.max_abs);
    mxx = _mm512_setzero_ps();
    mrel = _mm512_set1_ps(start.max_rel);
    below = _mm512_mul_ps(mrel, _mm512_set1_ps(kBelow));
    sa = xx = ee = _mm512_setzero_ps();
    for (int h = 0; h < 2; ++h) sa_d[h] = xx_d[h] = ee_d[h] = _mm512_setzero_pd();
  }

  // Adds 16 pairs (lanes outside the block are zero in x and r, and add nothing).
  void Add(__m512 x, __m512 r, __m512 d, __m512 tol) {
    const __m512i exponent = _mm512_set1_epi32(0x7f800000);
    const __m512i bits = _mm512_castps_si512(x);
    bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(bits, exponent), exponent);
    const __m512 e = _mm512_abs_ps(_mm512_sub_ps(x, r));
    mx = _mm512_max_ps(mx, e);
    mxx = _mm512_max_ps(mxx, _mm512_abs_ps(x));
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
    sa = _mm512_add_ps(sa, e);
    ee = _mm512_fmadd_ps(e, e, ee);
    xx = _mm512_fmadd_ps(x, x, xx);
  }

  // The fp32 sums of the run into the double ones.
  void EndRun() {
    AddWide(sa_d, sa);
    AddWide(xx_d, xx);
    AddWide(ee_d, ee);
    sa = xx = ee = _mm512_setzero_ps();
  }

  // Whether the fp32 squares held (see InRange); if so the sums go into `out`. `ref_max` is
  // max |r| over the block.
  bool Finish(__mmask16 bad_ref, double rr, float ref_max, BlockSums& out, bool& finite) const {
    finite = (bad | bad_ref) == 0;
    if (!finite) return true;  // the sums are meaningless: the caller goes one by one
    const float max_abs = _mm512_reduce_max_ps(mx);
    if (!InRange(max_abs) || !InRange(_mm512_reduce_max_ps(mxx)) || !InRange(ref_max)) {
      return false;
    }
    out.max_abs = max_abs;
    out.max_rel = _mm512_reduce_max_ps(mrel);
    out.sum_abs += Sum(sa_d);
    out.xx += Sum(xx_d);
    out.ee += Sum(ee_d);
    out.rr += rr;
    out.outside += outside;
    return true;
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
  __m512 rr = _mm512_setzero_ps(), rmax = _mm512_setzero_ps();
  __m512d rr_d[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
  __mmask16 bad_ref = 0;
  int in_run = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m =
        n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 r = _mm512_maskz_loadu_ps(m, ref + i);
    bad_ref |=
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(r), exponent), exponent);
    const __m512 ar = _mm512_abs_ps(r);
    rmax = _mm512_max_ps(rmax, ar);
    const __m512 d = _mm512_max_ps(ar, tiny);
    // atol + rtol * |r| rounded twice, as the scalar comparison in AddFiniteBlock.
    const __m512 tol = _mm512_add_ps(atolv, _mm512_mul_ps(rtolv, ar));
    rr = _mm512_fmadd_ps(r, r, rr);
    for (int w = 0; w < kWays; ++w) ways[w].Add(_mm512_maskz_loadu_ps(m, xs[w] + i), r, d, tol);
    if (++in_run == kRun || i + 16 >= n) {
      AddWide(rr_d, rr);
      rr = _mm512_setzero_ps();
      for (int w = 0; w < kWays; ++w) ways[w].EndRun();
      in_run = 0;
    }
  }
  const double rr_sum = Sum(rr_d);
  const float ref_max = _mm512_reduce_max_ps(rmax);
  for (int w = 0; w < kWays; ++w) {
    if (!ways[w].Finish(bad_ref, rr_sum, ref_max, out[w], finite[w])) {
      finite[w] = AddFiniteBlock(xs[w], ref, n, atol, rtol, out[w]);
    }
  }
}

}  // namespace

void AddFiniteBlocksAvx512(const float* const* x, int ways, const float* ref, int64_t n, float atol,
                           float rtol, BlockSums* out, bool* finite) {
  if (ways == 2) return Blocks<2>(x, ref, n, atol, rtol, out, finite);
  Blocks<1>(x, ref, n, atol, rtol, out, finite);
}

}  // namespace kiln::report::internal
