// The phased mode of the AVX-512 convolution chain (conv_chain.h, conv_chain_inl.h): many threads
// on few rows, the images one by one in three phases (E, D, Y) of tasks split over all the
// threads. Compiled with AVX-512 flags; runs only after the registry has checked the CPU.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "engine/kernels/cpu/avx512/conv_chain_inl.h"
#include "engine/kernels/cpu/parallel.h"

namespace kiln::kernels::cpu::avx512::conv_chain {
namespace {

// Many threads on few rows: bands of rows per thread would recompute most of E at their edges
// (3.5 rows of 56 per thread on 16 threads: each thread's 3 x 3 windows need 5.5 E rows) and
// small images split into fewer row bands (or pixel shares) than threads, each streaming all of
// a 1x1 step's weights for a few pixels. From kPhasedMinThreads threads on, when the output rows
// per thread are fewer than kPhasedRows, the images go one by one in three phases, each split
// into tasks over all the threads, with a barrier between: E of the image's pixels (tasks of
// pixels x panels of 16 expanded channels), D (pixels x blocks of 32 channels), Y (pixels x
// panels of 16 outputs). Each element is still one sum in the same order (the tasks only choose
// which thread computes it), so the numbers are those of any other split. One and two threads
// keep the modes above.
constexpr int kPhasedMinThreads = 3;
constexpr int64_t kPhasedRows = 8;

// kPhasedRows, or KILN_CHAIN_PHASED_ROWS when set (a measuring knob, as KILN_NO_AMX: 0 turns the
// phases off), read once.
int64_t PhasedRows() {
  static const int64_t rows = [] {
    const char* v = std::getenv("KILN_CHAIN_PHASED_ROWS");
    return v != nullptr && *v != '\0' ? std::max<int64_t>(std::atoll(v), 0) : kPhasedRows;
  }();
  return rows;
}
// E and D of one image at most (beyond, bands of rows: they keep the rows in flight in L2).
constexpr int64_t kPhasedBytes = int64_t{32} << 20;

// E and D floats of one image in phased mode.
int64_t PhasedE(const ConvChainArgs& a) { return Ringed(a) ? a.h * a.w * Pad16(a.c1) : 0; }
int64_t PhasedD(const ConvChainArgs& a) { return a.w2 != nullptr ? a.oh * a.ow * Pad16(a.c1) : 0; }

// `pixels` x `units` (panels or channel blocks) of one step as pp x qp tasks: task k takes the
// pixel part k / qp and the unit part k % qp, each part as even as can be.
struct Split {
  int64_t pixels = 0, units = 0, pp = 1, qp = 1;
  int64_t Tasks() const { return pp * qp; }
  std::pair<int64_t, int64_t> PixelsOf(int64_t k) const {
    const int64_t i = k / qp;
    return {pixels * i / pp, pixels * (i + 1) / pp};
  }
  std::pair<int64_t, int64_t> UnitsOf(int64_t k) const {
    const int64_t j = k % qp;
    return {units * j / qp, units * (j + 1) / qp};
  }
};

// The split that finishes first on `threads` threads, by a model of a task's time: its units
// times its pixels, at least 4 (fewer pixels leave the tile waiting on the weights' loads rather
// than on its FMAs), plus 8 for the task's start (its weights from L2, its first loads); tasks
// run in rounds of `threads`. Equal times: the fewer tasks.
Split SplitOf(int64_t pixels, int64_t units, int64_t threads) {
  Split best{pixels, units, 1, 1};
  int64_t best_cost = -1;
  for (int64_t pp = 1; pp <= std::min(threads, pixels); ++pp) {
    for (int64_t qp = 1; qp <= std::min(threads, units); ++qp) {
      const int64_t rounds = (pp * qp + threads - 1) / threads;
      const int64_t task = (units + qp - 1) / qp * std::max<int64_t>((pixels + pp - 1) / pp, 4) + 8;
      const int64_t cost = rounds * task;
      if (best_cost < 0 || cost < best_cost || (cost == best_cost && pp * qp < best.Tasks())) {
        best = {pixels, units, pp, qp};
        best_cost = cost;
      }
    }
  }
  return best;
}

// The three phases' splits.
struct Phases {
  Split e, d, y;
};

Phases PhasesOf(const ConvChainArgs& a) {
  const int64_t t = a.threads;
  Phases ph;
  ph.e = SplitOf(a.h * a.w, a.w0 != nullptr ? (a.c1 + 15) / 16 : 1, t);
  ph.d = SplitOf(a.oh * a.ow, (a.c1 + 31) / 32, t);
  ph.y = SplitOf(a.oh * a.ow, a.w2 != nullptr ? (a.c2 + 15) / 16 : 1, t);
  return ph;
}

// Floats of the X pixels one thread widens for one expansion task (16-bit chains only).
int64_t PhasedX(const ConvChainArgs& a, const Phases& ph) {
  return a.half && a.w0 != nullptr && a.w0_dot == nullptr
             ? Pad16((a.h * a.w + ph.e.pp - 1) / ph.e.pp * a.c0)
             : 0;
}

// Panels [j0, j1) of a 1x1 convolution's n outputs: the channels from j0 * 16, how many.
int64_t SliceChannels(int64_t n, int64_t j0, int64_t j1) { return std::min(j1 * 16, n) - j0 * 16; }

}  // namespace

bool PhasedImages(const ConvChainArgs& a) {
  return a.threads >= kPhasedMinThreads && a.n * a.oh < PhasedRows() * a.threads &&
         (PhasedE(a) + PhasedD(a)) * 4 <= kPhasedBytes;
}

int64_t PhasedScratchFloats(const ConvChainArgs& a) {
  return PhasedE(a) + PhasedD(a) + a.threads * PhasedX(a, PhasesOf(a));  // multiples of 16
}

void RunPhased(const ConvChainArgs& a, const Act& act0, const Act& act1, const Act& act2,
               const DwGeom& dw) {
  const int64_t cp = Pad16(a.c1);
  const bool ringed = Ringed(a);
  const Phases ph = PhasesOf(a);
  const int64_t xper = PhasedX(a, ph);
  float* e = a.scratch;
  float* d = e + PhasedE(a);
  const Out y{a.y, OutputStore(a)};
  const Store interior = InteriorStore(a);
  const Out dout{d, DStore(a)};
  const PwWeights we = ExpandW(a), wp = ProjectW(a);
  const int64_t out_pixels = a.oh * a.ow;
  // Each phase one ParallelForTeam (its return the barrier between phases); X widened for the
  // expansion into the participant's own buffer.
  for (int64_t b = 0; b < a.n; ++b) {
    const float* xb = ImageF32(a, b);
    const uint16_t* xh = ImageF16(a, b);
    if (ringed) {
      ParallelForTeam(ph.e.Tasks(), a.threads, 4, [&](int64_t k0, int64_t k1, int t) {
        float* xbuf = d + PhasedD(a) + t * xper;
        for (int64_t k = k0; k < k1; ++k) {
          const auto [p0, p1] = ph.e.PixelsOf(k);
          if (p0 == p1) continue;
          if (a.w0 == nullptr) {
            WidenPixels(xh + p0 * a.c0, a.bf16, p1 - p0, a.c0, e + p0 * cp, cp);
            continue;
          }
          const auto [j0, j1] = ph.e.UnitsOf(k);
          const void* rows = xb != nullptr ? static_cast<const void*>(xb + p0 * a.c0) : xbuf;
          if (we.dot) {
            rows = xh + p0 * a.c0;  // bf16 X as it is
          } else if (xb == nullptr) {
            WidenPixels(xh + p0 * a.c0, a.bf16, p1 - p0, a.c0, xbuf, a.c0);
          }
          Pointwise(rows, a.c0, p1 - p0, we.From(j0), SliceChannels(a.c1, j0, j1), a.b0 + j0 * 16,
                    nullptr, Out{e + p0 * cp + j0 * 16, interior}, cp, act0);
        }
      });
    }
    const DwSource src{ringed ? e : xb, ringed ? cp : a.c0, a.w, a.h, 0};
    const int64_t yb = b * out_pixels * a.c2;
    ParallelForTeam(ph.d.Tasks(), a.threads, 4, [&](int64_t k0, int64_t k1, int) {
      for (int64_t k = k0; k < k1; ++k) {
        const auto [q0, q1] = ph.d.PixelsOf(k);
        const auto [c0, c1] = ph.d.UnitsOf(k);
        if (q0 == q1 || c0 == c1) continue;
        if (a.w2 == nullptr) {
          DepthwisePixels(src, dw, q0, q1, y.At(yb + q0 * a.c2), a.c2, act1, c0 * 32, c1 * 32);
        } else {
          DepthwisePixels(src, dw, q0, q1, dout.At(q0 * cp), cp, act1, c0 * 32, c1 * 32);
        }
      }
    });
    if (a.w2 != nullptr) {
      ParallelForTeam(ph.y.Tasks(), a.threads, 4, [&](int64_t k0, int64_t k1, int) {
        for (int64_t k = k0; k < k1; ++k) {
          const auto [q0, q1] = ph.y.PixelsOf(k);
          const auto [j0, j1] = ph.y.UnitsOf(k);
          if (q0 == q1) continue;
          const int64_t yo = yb + q0 * a.c2 + j0 * 16;
          Pointwise(dout.At(q0 * cp).p, cp, q1 - q0, wp.From(j0), SliceChannels(a.c2, j0, j1),
                    a.b2 + j0 * 16, ZAt(a.z, y.st, yo), y.At(yo), a.c2, act2);
        }
      });
    }
  }
}

}  // namespace kiln::kernels::cpu::avx512::conv_chain
