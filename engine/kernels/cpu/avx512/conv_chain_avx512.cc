// The AVX-512 convolution chain (conv_chain.h): the bands of rows and whole-image modes, and the
// entry points that pick a mode (the 1x1 and depthwise steps are conv_chain_pointwise_avx512.cc
// and conv_chain_depthwise_avx512.cc, the phased mode conv_chain_phased_avx512.cc). Compiled with
// AVX-512 flags; runs only after the registry has checked the CPU.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "engine/kernels/cpu/avx512/conv_chain.h"
#include "engine/kernels/cpu/avx512/conv_chain_inl.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512 {
namespace conv_chain {
namespace {

// Output rows per band and E rows in the ring: what a band keeps in L2 between the steps (its E
// rows, (band - 1) * sh + kh, in the ring, or those rows of X without an expansion, which the
// depthwise step reads once per channel block; and its D rows when a projection follows) within
// kBandBytes; at least one output row.
constexpr int64_t kBandBytes = int64_t{384} << 10;

// Images of fewer than kWholeRows output rows per thread whose E and D together fit in
// kWholeBytes run image by image on all the threads (WholeImages): each E pixel computed once and
// the output pixels split evenly, where bands of rows per thread would recompute the E rows at
// their edges (a quarter of E at 7 x 7 on two threads) and split 7 rows 4 + 3. Measured in
// MobileNetV2 on two threads: its 7 x 7 blocks 8-12% faster so; its 14 x 14 blocks (7 rows per
// thread) 3-5% slower, the E rows the other thread computed coming from its core's cache.
constexpr int64_t kWholeBytes = int64_t{1} << 20;
constexpr int64_t kWholeRows = 6;

struct Band {
  int64_t rows, ring;
};

// Floats of an fp16 chain's X rows widened for the expansion of `ring` rows at once (0 for an
// fp32 chain or without an expansion), in whole vectors.
int64_t XRowsFloats(const ConvChainArgs& a, int64_t ring) {
  return a.half && a.w0 != nullptr && a.w0_dot == nullptr ? Pad16(ring * a.w * a.c0) : 0;
}

// Floats of a pooled chain's band of output rows before the pool (Y's type, at most fp32).
int64_t PoolRowsFloats(const ConvChainArgs& a, int64_t rows) {
  return a.pool ? Pad16(rows * a.ow * a.c2) : 0;
}

// Output rows a band computes (before the pool): all of them, or, pooled, the pairs of rows.
int64_t ChainRows(const ConvChainArgs& a) { return a.pool ? a.oh / 2 * 2 : a.oh; }

Band BandOf(const ConvChainArgs& a) {
  const int64_t cp = Pad16(a.c1);
  const bool project = a.w2 != nullptr;
  const int64_t step = a.pool ? 2 : 1;  // a pooled band takes whole pairs of rows
  Band b{step, (step - 1) * a.sh + a.kh};
  for (int64_t rows = 2 * step; rows <= ChainRows(a); rows += step) {
    const int64_t ring = (rows - 1) * a.sh + a.kh;
    const int64_t bytes = (ring * a.w * (Ringed(a) ? cp : a.c0) + XRowsFloats(a, ring) +
                           (project ? rows * a.ow * cp : 0) + PoolRowsFloats(a, rows)) *
                          4;
    if (bytes > kBandBytes) break;
    b = {rows, ring};
  }
  return b;
}

// The 2 x 2, stride-2 maxima of `rows` (even) stored rows of `ow` pixels x c channels at `in`
// (Y's type) into the pooled rows at `out`: per output pixel the cells (0, 0), (0, 1), (1, 0),
// (1, 1) folded with max(v, best) from the lowest float, as MaxRowInside (pool_avx512.cc) does.
template <DataType T>
void PoolRows(const void* in, int64_t rows, int64_t ow, int64_t c, void* out) {
  const int64_t pw = ow / 2, rs = ow * c;
  for (int64_t r = 0; r < rows / 2; ++r) {
    const int64_t i0 = 2 * r * rs, o0 = r * pw * c;
    for (int64_t x = 0; x < pw; ++x) {
      const int64_t i = i0 + 2 * x * c, o = o0 + x * c;
      int64_t ch = 0;
      for (; ch + 16 <= c; ch += 16) {
        __m512 best = _mm512_set1_ps(std::numeric_limits<float>::lowest());
        best = _mm512_max_ps(LoadFull16<T>(in, i + ch), best);
        best = _mm512_max_ps(LoadFull16<T>(in, i + c + ch), best);
        best = _mm512_max_ps(LoadFull16<T>(in, i + rs + ch), best);
        best = _mm512_max_ps(LoadFull16<T>(in, i + rs + c + ch), best);
        StoreFull16<T>(out, o + ch, best);
      }
      if (ch < c) {
        const __mmask16 m = LaneMask(c - ch);
        __m512 best = _mm512_set1_ps(std::numeric_limits<float>::lowest());
        best = _mm512_max_ps(Load16<T>(in, i + ch, m), best);
        best = _mm512_max_ps(Load16<T>(in, i + c + ch, m), best);
        best = _mm512_max_ps(Load16<T>(in, i + rs + ch, m), best);
        best = _mm512_max_ps(Load16<T>(in, i + rs + c + ch, m), best);
        Store16<T>(out, o + ch, m, best);
      }
    }
  }
}

void PoolRowsOf(Store st, const void* in, int64_t rows, int64_t ow, int64_t c, void* out) {
  if (st == Store::kHalf) {
    PoolRows<DataType::kF16>(in, rows, ow, c, out);
  } else if (st == Store::kBf16) {
    PoolRows<DataType::kBF16>(in, rows, ow, c, out);
  } else {
    PoolRows<DataType::kF32>(in, rows, ow, c, out);
  }
}

// Floats of one image's E (or widened X; 0 when not Ringed), of the D pixels one of `threads`
// threads projects (0 without a projection), and of the X pixels one thread widens for the
// expansion (fp16 only), in whole-image mode.
struct Whole {
  int64_t e, d, x;
};

Whole WholeOf(const ConvChainArgs& a) {
  const int64_t cp = Pad16(a.c1);
  const int64_t pixels = a.oh * a.ow, in_share = (a.h * a.w + a.threads - 1) / a.threads;
  return {Ringed(a) ? a.h * a.w * cp : 0,
          a.w2 != nullptr ? (pixels + a.threads - 1) / a.threads * cp : 0,
          a.half && a.w0 != nullptr && a.w0_dot == nullptr ? Pad16(in_share * a.c0) : 0};
}

bool WholeImages(const ConvChainArgs& a) {
  if (a.threads < 2 || a.oh >= kWholeRows * a.threads) return false;
  const int64_t cp = Pad16(a.c1);
  const int64_t e = Ringed(a) ? a.h * a.w * cp : 0;
  const int64_t d = a.w2 != nullptr ? a.oh * a.ow * cp : 0;
  return (e + d) * 4 <= kWholeBytes;
}
}  // namespace

// The first step on `pixels` pixels of X from pixel p0 (of image xb or xh): the expansion into
// `e` (cp floats per pixel; X widened into `xbuf` first in an fp16 chain), or, in an fp16 chain
// without an expansion, X widened into `e`.
void FirstStep(const ConvChainArgs& a, const float* xb, const uint16_t* xh, int64_t p0,
               int64_t pixels, float* e, float* xbuf, const Act& act0, Lines then) {
  const int64_t cp = Pad16(a.c1);
  if (a.w0 == nullptr) {
    WidenPixels(xh + p0 * a.c0, a.bf16, pixels, a.c0, e, cp);
    return;
  }
  const void* rows = xb != nullptr ? static_cast<const void*>(xb + p0 * a.c0) : xbuf;
  if (a.w0_dot != nullptr) {
    rows = xh + p0 * a.c0;  // bf16 X as it is
  } else if (xb == nullptr) {
    WidenPixels(xh + p0 * a.c0, a.bf16, pixels, a.c0, xbuf, a.c0);
  }
  Pointwise(rows, a.c0, pixels, ExpandW(a), a.c1, a.b0, nullptr, Out{e, InteriorStore(a)}, cp, act0,
            then);
}

namespace {

// Bands of output rows, each thread a contiguous run of them (its own ring and D band; pooled,
// whole pairs of rows, and the band's rows before the pool).
void RunBands(const ConvChainArgs& a, const Act& act0, const Act& act1, const Act& act2,
              const DwGeom& dw) {
  const int64_t rows_per_image = ChainRows(a), unit = a.pool ? 2 : 1;
  const int64_t units = a.n * rows_per_image / unit;
  const int64_t cp = Pad16(a.c1);
  const bool ringed = Ringed(a);
  const Band band = BandOf(a);
  const int64_t per_thread = ConvChainScratchFloats(a) / a.threads;
  const Lines project_first = a.w2 ? FirstGroup(ProjectW(a), a.c2) : Lines{};
  const Lines expand_first = a.w0 ? FirstGroup(ExpandW(a), a.c1) : Lines{};  // the next band's
  const Out y{a.y, OutputStore(a)};
  // A share in one piece: its bands reuse the ring rows of the band before.
  ParallelForTeam(units, a.threads, 1, [&](int64_t u0, int64_t u1, int t) {
    const int64_t q0 = u0 * unit, q1 = u1 * unit;
    float* ring = a.scratch + t * per_thread;
    float* dband = ring + (ringed ? band.ring * a.w * cp : 0);
    float* xbuf = dband + (a.w2 != nullptr ? band.rows * a.ow * cp : 0);
    float* pbuf = xbuf + XRowsFloats(a, band.ring);
    int64_t image = -1, next = 0;
    for (int64_t q = q0; q < q1;) {
      // A band of output rows [oy0, oy1) of one image.
      const int64_t b = q / rows_per_image, oy0 = q % rows_per_image;
      const int64_t oy1 = std::min({oy0 + band.rows, rows_per_image, oy0 + (q1 - q)});
      if (b != image) {
        image = b;
        next = 0;
      }
      const float* xb = ImageF32(a, b);
      if (ringed) {
        // The ring rows of the band's windows not yet computed, row iy into ring slot
        // iy % ring: one first step per run of slots without a wrap.
        const int64_t lo = std::max<int64_t>(oy0 * a.sh - a.pad_top, 0);
        const int64_t hi = std::min((oy1 - 1) * a.sh - a.pad_top + a.kh, a.h);
        for (int64_t iy = std::max(next, lo); iy < hi;) {
          const int64_t slot = iy % band.ring;
          const int64_t count = std::min(hi - iy, band.ring - slot);
          FirstStep(a, xb, ImageF16(a, b), iy * a.w, count * a.w, ring + slot * a.w * cp, xbuf,
                    act0, project_first);
          iy += count;
        }
        next = std::max(next, hi);
      }
      const DwSource src{ringed ? ring : xb, ringed ? cp : a.c0, a.w, a.h, ringed ? band.ring : 0};
      // The band's Y rows are consecutive (pooled: those of the band's buffer); without a
      // projection the D rows are Y's.
      const int64_t yo = (b * a.oh + oy0) * a.ow * a.c2;
      const Out out = a.pool ? Out{pbuf, y.st} : y.At(yo);
      const int64_t p0 = oy0 * a.ow, p1 = oy1 * a.ow;
      if (a.w2 == nullptr) {
        DepthwisePixels(src, dw, p0, p1, out, a.c2, act1);
      } else {
        DepthwisePixels(src, dw, p0, p1, Out{dband, DStore(a)}, cp, act1);
        Pointwise(dband, cp, p1 - p0, ProjectW(a), a.c2, a.b2, ZAt(a.z, y.st, yo), out, a.c2, act2,
                  expand_first);
      }
      if (a.pool) {
        const int64_t pw = a.ow / 2;
        PoolRowsOf(y.st, pbuf, oy1 - oy0, a.ow, a.c2,
                   y.At((b * (a.oh / 2) + oy0 / 2) * pw * a.c2).p);
      }
      q += oy1 - oy0;
    }
  });
}

// Image by image on all the threads: E of the image's pixels split evenly, then, after a barrier,
// each thread's even share of the output pixels through the depthwise step and the projection.
void RunWholeImages(const ConvChainArgs& a, const Act& act0, const Act& act1, const Act& act2,
                    const DwGeom& dw) {
  const int64_t cp = Pad16(a.c1);
  const bool ringed = Ringed(a);
  const Whole whole = WholeOf(a);
  const int64_t in_pixels = a.h * a.w, out_pixels = a.oh * a.ow;
  const Lines project_first = a.w2 ? FirstGroup(ProjectW(a), a.c2) : Lines{};
  const Lines expand_first = a.w0 ? FirstGroup(ExpandW(a), a.c1) : Lines{};  // the next image's
  const Out y{a.y, OutputStore(a)};
  float* e = a.scratch;
  const int64_t parts = a.threads;  // the scratch holds `parts` D shares and X shares
  auto part = [parts](int64_t n, int64_t k) {
    return std::pair<int64_t, int64_t>(n * k / parts, n * (k + 1) / parts);
  };
  // Part k of `parts` of the pixels per piece; each step one ParallelForTeam (its return the
  // barrier: the next image's E overwrites this one's, which the depthwise step reads).
  for (int64_t b = 0; b < a.n; ++b) {
    const float* xb = ImageF32(a, b);
    if (ringed) {
      ParallelForTeam(parts, a.threads, 1, [&](int64_t k0, int64_t k1, int t) {
        float* xbuf = a.scratch + whole.e + parts * whole.d + t * whole.x;
        for (int64_t k = k0; k < k1; ++k) {
          const auto [p0, p1] = part(in_pixels, k);
          FirstStep(a, xb, ImageF16(a, b), p0, p1 - p0, e + p0 * cp, xbuf, act0, project_first);
        }
      });
    }
    const DwSource src{ringed ? e : xb, ringed ? cp : a.c0, a.w, a.h, 0};
    ParallelForTeam(parts, a.threads, 1, [&](int64_t k0, int64_t k1, int) {
      for (int64_t k = k0; k < k1; ++k) {
        const auto [q0, q1] = part(out_pixels, k);
        const int64_t yo = (b * out_pixels + q0) * a.c2;
        if (a.w2 == nullptr) {
          DepthwisePixels(src, dw, q0, q1, y.At(yo), a.c2, act1);
        } else {
          float* d = a.scratch + whole.e + k * whole.d;
          DepthwisePixels(src, dw, q0, q1, Out{d, DStore(a)}, cp, act1);
          Pointwise(d, cp, q1 - q0, ProjectW(a), a.c2, a.b2, ZAt(a.z, y.st, yo), y.At(yo), a.c2,
                    act2, expand_first);
        }
      }
    });
  }
}

}  // namespace
}  // namespace conv_chain

using conv_chain::Act;
using conv_chain::Band;
using conv_chain::BandOf;
using conv_chain::DwGeom;
using conv_chain::Pad16;
using conv_chain::PhasedImages;
using conv_chain::PoolRowsFloats;
using conv_chain::Ringed;
using conv_chain::RunBands;
using conv_chain::RunPhased;
using conv_chain::RunWholeImages;
using conv_chain::Whole;
using conv_chain::WholeImages;
using conv_chain::WholeOf;
using conv_chain::XRowsFloats;

int64_t ConvChainThreads(const ConvChainArgs& a) {
  if (a.pool) return std::max<int64_t>(1, std::min<int64_t>(a.threads, a.n * (a.oh / 2)));
  if (PhasedImages(a)) return std::min<int64_t>(a.threads, a.n * a.oh * a.ow);
  return std::min<int64_t>(a.threads, a.n * a.oh);
}

int64_t ConvChainScratchFloats(const ConvChainArgs& a) {
  // A pooled chain runs in bands whatever the threads.
  if (!a.pool && PhasedImages(a)) {
    return conv_chain::PhasedScratchFloats(a);  // multiples of 16
  }
  if (!a.pool && WholeImages(a)) {
    const Whole whole = WholeOf(a);
    return whole.e + a.threads * (whole.d + whole.x);  // multiples of 16
  }
  const int64_t cp = Pad16(a.c1);
  const Band band = BandOf(a);
  const int64_t ring = Ringed(a) ? band.ring * a.w * cp : 0;
  const int64_t d = a.w2 != nullptr ? band.rows * a.ow * cp : 0;
  // Multiples of 16 per thread.
  return (ring + d + XRowsFloats(a, band.ring) + PoolRowsFloats(a, band.rows)) * a.threads;
}

void ConvChainAvx512(const ConvChainArgs& a) {
  const Act act0(a.act0), act1(a.act1), act2(a.act2);
  const DwGeom dw{a.w, a.c1, a.kh, a.kw, a.sh, a.sw, a.pad_top, a.pad_left, a.ow, a.w1, a.b1};
  if (a.pool) {
    if (a.oh >= 2 && a.ow >= 2) RunBands(a, act0, act1, act2, dw);
  } else if (PhasedImages(a)) {
    RunPhased(a, act0, act1, act2, dw);
  } else if (WholeImages(a)) {
    RunWholeImages(a, act0, act1, act2, dw);
  } else {
    RunBands(a, act0, act1, act2, dw);
  }
}

}  // namespace kiln::kernels::cpu::avx512