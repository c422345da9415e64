// The recurrent time loop (recurrent.h). Compiled with AVX-512 flags (engine/CMakeLists.txt).
//
// Per step and per thread: for each of the thread's blocks of R, the dot products of the rows of
// Ht-1 with it, up to 4 rows at a time (GemvBlock, into the thread's `pre` buffer, gate by gate),
// then per row the gate math over the thread's units, in passes over short fp32 arrays that stay
// in L1. The dot products dominate: they stream the thread's slice of R once per step (a block
// of R stays in L2 for the next rows).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/kernels/cpu/avx512/math.h"
#include "engine/kernels/cpu/avx512/recurrent.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

constexpr int kMaxRows = 4;  // batch rows per pass over a block of R

// 16 packed weights (64-, 32- or 16-byte aligned) as fp32: exact widening.
template <DataType W>
static inline __m512 LoadW(const void* p) {
  if constexpr (W == DataType::kF32) {
    return _mm512_load_ps(p);
  } else if constexpr (W == DataType::kI8) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(static_cast<const __m128i*>(p))));
  } else if constexpr (W == DataType::kI16) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi16_epi32(_mm256_load_si256(static_cast<const __m256i*>(p))));
  } else {
    const __m256i raw = _mm256_load_si256(static_cast<const __m256i*>(p));
    if constexpr (W == DataType::kF16) {
      return _mm512_cvtph_ps(raw);
    } else {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
    }
  }
}

// out[r * row_stride + g * gate_stride + l] = sum over k < K of h[r * h_stride + k] *
// p[(k * G + g) * 16 + l] for r < ROWS, g < G, l < 16: one block of R for ROWS rows of Ht-1. The
// sum over k runs in S interleaved partial sums (k = s mod S), added at the end, so that at least
// 8 chains of fused multiply-adds are in flight. Integer weights (kI8, kI16): each finished sum
// times sc[g * sc_gs + l], the row's scale.
template <DataType W, int G, int ROWS>
void GemvBlock(const void* pv, int64_t K, const float* h, int64_t h_stride, float* out,
               int64_t row_stride, int64_t gate_stride, const float* sc, int64_t sc_gs) {
  constexpr int kChains = G * ROWS;
  constexpr int S = kChains >= 8 ? 1 : kChains >= 4 ? 2 : kChains >= 2 ? 4 : 8;
  constexpr bool kInt = W == DataType::kI8 || W == DataType::kI16;
  using Elem = std::conditional_t<
      W == DataType::kF32, float,
      std::conditional_t<W == DataType::kI8, int8_t,
                         std::conditional_t<W == DataType::kI16, int16_t, uint16_t>>>;
  const Elem* p = static_cast<const Elem*>(pv);
  __m512 acc[S][ROWS][G];
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s) {
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; ++r) {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) acc[s][r][g] = _mm512_setzero_ps();
    }
  }
  int64_t k = 0;
  for (; k + S <= K; k += S) {
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const Elem* pk = p + (k + s) * G * kRnnBlock;
      __m512 wv[G];
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) wv[g] = LoadW<W>(pk + g * kRnnBlock);
#pragma GCC unroll 4
      for (int r = 0; r < ROWS; ++r) {
        const __m512 hv = _mm512_set1_ps(h[r * h_stride + k + s]);
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g) acc[s][r][g] = _mm512_fmadd_ps(hv, wv[g], acc[s][r][g]);
      }
    }
  }
  for (; k < K; ++k) {
    const Elem* pk = p + k * G * kRnnBlock;
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; ++r) {
      const __m512 hv = _mm512_set1_ps(h[r * h_stride + k]);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        acc[0][r][g] = _mm512_fmadd_ps(hv, LoadW<W>(pk + g * kRnnBlock), acc[0][r][g]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < ROWS; ++r) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      __m512 v = acc[0][r][g];
#pragma GCC unroll 8
      for (int s = 1; s < S; ++s) v = _mm512_add_ps(v, acc[s][r][g]);
      if constexpr (kInt) v = _mm512_mul_ps(v, _mm512_loadu_ps(sc + g * sc_gs));
      _mm512_storeu_ps(out + r * row_stride + g * gate_stride, v);
    }
  }
}

using GemvFn = void (*)(const void*, int64_t, const float*, int64_t, float*, int64_t, int64_t,
                        const float*, int64_t);

template <DataType W, int G>
GemvFn GemvForRows(int rows) {
  switch (rows) {
    case 1:
      return &GemvBlock<W, G, 1>;
    case 2:
      return &GemvBlock<W, G, 2>;
    case 3:
      return &GemvBlock<W, G, 3>;
    default:
      return &GemvBlock<W, G, 4>;
  }
}

template <DataType W>
GemvFn GemvForType(int gates, int rows) {
  switch (gates) {
    case 1:
      return GemvForRows<W, 1>(rows);
    case 2:
      return GemvForRows<W, 2>(rows);
    case 3:
      return GemvForRows<W, 3>(rows);
    default:
      return GemvForRows<W, 4>(rows);
  }
}

// The block kernel for `gates` (1 to 4) gates, `rows` (1 to 4) rows and weights of `type`.
GemvFn Gemv(DataType type, int gates, int rows) {
  switch (type) {
    case DataType::kF16:
      return GemvForType<DataType::kF16>(gates, rows);
    case DataType::kBF16:
      return GemvForType<DataType::kBF16>(gates, rows);
    case DataType::kI8:
      return GemvForType<DataType::kI8>(gates, rows);
    case DataType::kI16:
      return GemvForType<DataType::kI16>(gates, rows);
    default:
      return GemvForType<DataType::kF32>(gates, rows);
  }
}

// p[i] = act(p[i]) for i < n.
void Activate(RnnActType act, float* p, int64_t n) {
  switch (act) {
    case RnnActType::kSigmoid:
      SigmoidF32(p, p, n);
      return;
    case RnnActType::kTanh:
      TanhF32(p, p, n);
      return;
    case RnnActType::kRelu:
      for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = LaneMask(n - i);
        // max(0, x): the second operand on NaN, so NaN passes through (as the reference's Relu).
        _mm512_mask_storeu_ps(p + i, m,
                              _mm512_max_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(m, p + i)));
      }
      return;
  }
}

// The pieces of one row's gate math, 16 lanes at a time (lanes past the row's units masked off).
struct Lanes {
  float clip;  // +Inf: none
  bool clipped;

  // min(max(x, -clip), clip), NaN kept (the reference's comparisons).
  __m512 Clip(__m512 x) const {
    if (!clipped) return x;
    x = _mm512_min_ps(_mm512_set1_ps(clip), x);
    return _mm512_max_ps(_mm512_set1_ps(-clip), x);
  }
};

static inline __m512 Ld(const float* p, int64_t i, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, p + i);
}
static inline void St(float* p, int64_t i, __mmask16 m, __m512 v) {
  _mm512_mask_storeu_ps(p + i, m, v);
}

// Where one row's step reads and writes, each pointer at the thread's first unit u0.
struct Row {
  int64_t n;          // the thread's units
  float* pre;         // gate g's dot products at pre + g * up
  int64_t up;         // pre's gate stride
  float* preh;        // GRU: the h gate's dot products
  const float* xp;    // the input projection, gate g at xp + g * hidden
  const float* peep;  // LSTM peepholes (gate stride hidden), or nullptr
  float* c;           // LSTM cell state
  const float* hp;    // Ht-1
  float* hn;          // Ht
  float* rh;          // GRU (linear_before_reset = 0): rt . Ht-1 for phase 2
  float* z;           // GRU (linear_before_reset = 0): zt for phase 2
};

void LstmRow(const RnnLoopArgs& a, int d, const Lanes& q, const Row& w) {
  const int64_t hs = a.hidden, n = w.n;
  float* pi = w.pre;
  float* po = w.pre + w.up;
  float* pf = w.pre + 2 * w.up;
  float* pc = w.pre + 3 * w.up;
  const float* peep = w.peep;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    const __m512 cp = Ld(w.c, i, m);
    __m512 vi = _mm512_add_ps(Ld(pi, i, m), Ld(w.xp, i, m));
    if (peep) vi = _mm512_add_ps(vi, _mm512_mul_ps(Ld(peep, i, m), cp));
    St(pi, i, m, q.Clip(vi));
    if (!a.input_forget) {
      __m512 vf = _mm512_add_ps(Ld(pf, i, m), Ld(w.xp + 2 * hs, i, m));
      if (peep) vf = _mm512_add_ps(vf, _mm512_mul_ps(Ld(peep + 2 * hs, i, m), cp));
      St(pf, i, m, q.Clip(vf));
    }
    St(pc, i, m, q.Clip(_mm512_add_ps(Ld(pc, i, m), Ld(w.xp + 3 * hs, i, m))));
  }
  Activate(a.f[d], pi, n);
  if (!a.input_forget) Activate(a.f[d], pf, n);
  Activate(a.g[d], pc, n);
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    const __m512 vi = Ld(pi, i, m);
    const __m512 vf = a.input_forget ? _mm512_sub_ps(one, vi) : Ld(pf, i, m);
    const __m512 cn =
        _mm512_add_ps(_mm512_mul_ps(vf, Ld(w.c, i, m)), _mm512_mul_ps(vi, Ld(pc, i, m)));
    St(w.c, i, m, cn);
    St(pc, i, m, cn);  // h's input
    __m512 vo = _mm512_add_ps(Ld(po, i, m), Ld(w.xp + hs, i, m));
    if (peep) vo = _mm512_add_ps(vo, _mm512_mul_ps(Ld(peep + hs, i, m), cn));
    St(po, i, m, q.Clip(vo));
  }
  Activate(a.f[d], po, n);
  Activate(a.h[d], pc, n);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    St(w.hn, i, m, _mm512_mul_ps(Ld(po, i, m), Ld(pc, i, m)));
  }
}

void RnnRow(const RnnLoopArgs& a, int d, const Lanes& q, const Row& w) {
  const int64_t n = w.n;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    St(w.pre, i, m, q.Clip(_mm512_add_ps(Ld(w.pre, i, m), Ld(w.xp, i, m))));
  }
  Activate(a.f[d], w.pre, n);
  std::memcpy(w.hn, w.pre, n * sizeof(float));
}

// Ht = (1 - zt) . ht + zt . Ht-1 with ht (activated) at `hh`, zt at `z`.
void GruUpdate(const Row& w, const float* hh, const float* z) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < w.n; i += 16) {
    const __mmask16 m = LaneMask(w.n - i);
    const __m512 vz = Ld(z, i, m);
    St(w.hn, i, m,
       _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(one, vz), Ld(hh, i, m)),
                     _mm512_mul_ps(vz, Ld(w.hp, i, m))));
  }
}

// GRU, first phase: zt and rt; with linear_before_reset also ht and Ht, else rt . Ht-1 and zt
// for the second phase.
void GruRow1(const RnnLoopArgs& a, int d, const Lanes& q, const Row& w, const float* rbh) {
  const int64_t hs = a.hidden, n = w.n;
  float* pz = w.pre;
  float* pr = w.pre + w.up;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    St(pz, i, m, q.Clip(_mm512_add_ps(Ld(pz, i, m), Ld(w.xp, i, m))));
    St(pr, i, m, q.Clip(_mm512_add_ps(Ld(pr, i, m), Ld(w.xp + hs, i, m))));
  }
  Activate(a.f[d], pz, n);
  Activate(a.f[d], pr, n);
  if (!a.linear_before_reset) {
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = LaneMask(n - i);
      St(w.rh, i, m, _mm512_mul_ps(Ld(pr, i, m), Ld(w.hp, i, m)));
      St(w.z, i, m, Ld(pz, i, m));
    }
    return;
  }
  // ht = g(Xt Wh^T + Wbh + rt . (Ht-1 Rh^T + Rbh))
  float* ph = w.preh;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    __m512 lin = Ld(ph, i, m);
    if (rbh) lin = _mm512_add_ps(lin, Ld(rbh, i, m));
    St(ph, i, m, q.Clip(_mm512_add_ps(Ld(w.xp + 2 * hs, i, m), _mm512_mul_ps(Ld(pr, i, m), lin))));
  }
  Activate(a.g[d], ph, n);
  GruUpdate(w, ph, pz);
}

// GRU with linear_before_reset = 0, second phase: ht = g(Xt Wh^T + Wbh + Rbh + (rt . Ht-1) Rh^T).
void GruRow2(const RnnLoopArgs& a, int d, const Lanes& q, const Row& w) {
  const int64_t hs = a.hidden, n = w.n;
  float* ph = w.preh;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = LaneMask(n - i);
    St(ph, i, m, q.Clip(_mm512_add_ps(Ld(w.xp + 2 * hs, i, m), Ld(ph, i, m))));
  }
  Activate(a.g[d], ph, n);
  GruUpdate(w, ph, w.z);
}

// `n` fp32 values into Y's storage type.
void StoreY(DataType type, const float* src, void* dst, int64_t n) {
  switch (type) {
    case DataType::kF16:
      for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = LaneMask(n - i);
        Store16<DataType::kF16>(dst, i, m, _mm512_maskz_loadu_ps(m, src + i));
      }
      return;
    case DataType::kBF16:
      for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = LaneMask(n - i);
        Store16<DataType::kBF16>(dst, i, m, _mm512_maskz_loadu_ps(m, src + i));
      }
      return;
    default:
      std::memcpy(dst, src, n * sizeof(float));
      return;
  }
}

// Direction `d` on thread `tid` of a team of `nt` that runs it: the thread owns blocks
// [jb0, jb1) of hidden units. With `sync`, every thread of the enclosing parallel region meets
// the same barriers, one per step (two for GRU with linear_before_reset = 0), whichever direction
// it runs (both directions take the same number of steps); without, the thread is its
// direction's whole team (nt = 1) and waits for no one.
void RunTeam(const RnnLoopArgs& a, int d, int tid, int nt, bool sync) {
  const int64_t hs = a.hidden, batch = a.batch;
  const int64_t nb = (hs + kRnnBlock - 1) / kRnnBlock;
  const int64_t jb0 = tid * nb / nt, jb1 = (tid + 1) * nb / nt;
  const int64_t u0 = jb0 * kRnnBlock, u1 = std::min(hs, jb1 * kRnnBlock), n = u1 - u0;
  const int64_t up = (jb1 - jb0) * kRnnBlock;
  const bool lstm = a.cell == RnnCellType::kLstm, gru = a.cell == RnnCellType::kGru;
  const int g0 = RnnGates0(a.cell, a.linear_before_reset);  // gates of r0
  const int gates = lstm ? 4 : gru ? 3 : 1;                 // gates of the input projection
  const int64_t esize = a.weight_type == DataType::kF32  ? 4
                        : a.weight_type == DataType::kI8 ? 1
                                                         : 2;
  const int64_t ysize = a.y_type == DataType::kF32 ? 4 : 2;
  const char* r0 = static_cast<const char*>(a.r0[d]);
  const char* r1 = static_cast<const char*>(a.r1[d]);
  const int64_t block0 = hs * g0 * kRnnBlock * esize, block1 = hs * kRnnBlock * esize;  // bytes
  float* scratch = a.scratch + d * 3 * batch * hs;
  float* hbuf[2] = {a.h_state + d * batch * hs, scratch};
  float* rh = scratch + batch * hs;
  float* zb = scratch + 2 * batch * hs;
  float* c = lstm ? a.c_state + d * batch * hs : nullptr;
  const float* peep = a.peep[d] ? a.peep[d] + u0 : nullptr;
  const float* rbh = a.rbh[d] ? a.rbh[d] + u0 : nullptr;
  const Lanes q{a.clip, std::isfinite(a.clip)};
  // The dot products of every row: gate g of row b at pre + (b * g0 + g) * up (preh: the GRU h
  // gate's of the second phase, at preh + b * up).
  const bool two_phases = gru && !a.linear_before_reset;
  std::vector<float> pre(static_cast<size_t>(batch * g0 * up) + 16);
  std::vector<float> preh(two_phases ? static_cast<size_t>(batch * up) + 16 : 0);
  int32_t steps = 0;
  for (int64_t b = 0; b < batch; ++b) steps = std::max(steps, a.lens[b]);
  const int64_t chunks = (batch + kMaxRows - 1) / kMaxRows;
  std::vector<char> live(chunks);

  // Row b's pointers for step s with state `cur` -> `nxt`; its time index into `t`.
  auto row = [&](int64_t b, int32_t s, const float* cur, float* nxt, int64_t* t) {
    Row w;
    w.n = n;
    w.pre = pre.data() + b * g0 * up;
    w.up = up;
    // GRU: the h gate's dot products, with Ht-1 (a third gate of r0) or with rt . Ht-1.
    w.preh = !gru ? nullptr : two_phases ? preh.data() + b * up : w.pre + 2 * up;
    *t = a.reverse[d] ? a.lens[b] - 1 - s : s;
    w.xp = a.xproj + (*t * a.x_ts + b * a.x_bs) * a.x_row + d * gates * hs + u0;
    w.peep = peep;
    w.c = c ? c + b * hs + u0 : nullptr;
    w.hp = cur + b * hs + u0;
    w.hn = nxt + b * hs + u0;
    w.rh = rh + b * hs + u0;
    w.z = zb + b * hs + u0;
    return w;
  };
  auto store_y = [&](int64_t t, int64_t b, const float* hn) {
    if (a.y == nullptr) return;
    char* y = static_cast<char*>(a.y) + (t * a.y_ts + d * a.y_ds + b * a.y_bs + u0) * ysize;
    StoreY(a.y_type, hn, y, n);
  };
  // Dot products of the rows of `h` ([batch][hs]) in live chunks with the thread's blocks of a
  // packed weight of `g` gates (block stride `bytes`) into `out` (row stride g * up). Blocks
  // outer: each block comes from memory once per step, and from L2 for the next chunks. Odd
  // steps take the blocks in reverse order: the blocks a step reads last are still in L2 when
  // the next step starts with them (a slice of R larger than L2 otherwise misses on every block:
  // the least recently used block is always the next one).
  // `sc`: the first gate's scales (integer R), or nullptr.
  auto dots = [&](const char* w, int64_t bytes, int g, const float* h, float* out, int32_t s,
                  const float* sc) {
    if (n == 0) return;
    for (int64_t i = 0; i < jb1 - jb0; ++i) {
      const int64_t j = s % 2 == 0 ? jb0 + i : jb1 - 1 - i;
      for (int64_t ch = 0; ch < chunks; ++ch) {
        if (!live[ch]) continue;
        const int64_t rb = ch * kMaxRows;
        const int rows = static_cast<int>(std::min<int64_t>(kMaxRows, batch - rb));
        Gemv(a.weight_type, g, rows)(w + j * bytes, hs, h + rb * hs, hs,
                                     out + rb * g * up + (j - jb0) * kRnnBlock, g * up, up,
                                     sc ? sc + j * kRnnBlock : nullptr, a.r_scale_gs);
      }
    }
  };

  for (int32_t s = 0; s < steps; ++s) {
    const float* cur = hbuf[s & 1];
    float* nxt = hbuf[(s + 1) & 1];
    for (int64_t ch = 0; ch < chunks; ++ch) {
      live[ch] = 0;
      for (int64_t b = ch * kMaxRows; b < std::min(batch, (ch + 1) * kMaxRows); ++b) {
        live[ch] = live[ch] || s < a.lens[b];
      }
    }
    dots(r0, block0, g0, cur, pre.data(), s, a.r_scale[d]);
    for (int64_t b = 0; b < batch; ++b) {
      if (s >= a.lens[b]) {  // ended: the state carries over
        std::memcpy(nxt + b * hs + u0, cur + b * hs + u0, n * sizeof(float));
        continue;
      }
      int64_t t;
      const Row w = row(b, s, cur, nxt, &t);
      switch (a.cell) {
        case RnnCellType::kLstm:
          LstmRow(a, d, q, w);
          store_y(t, b, w.hn);
          break;
        case RnnCellType::kRnn:
          RnnRow(a, d, q, w);
          store_y(t, b, w.hn);
          break;
        case RnnCellType::kGru:
          GruRow1(a, d, q, w, rbh);
          if (a.linear_before_reset) store_y(t, b, w.hn);
          break;
      }
    }
    if (two_phases) {
      // Every unit's rt . Ht-1 is in `rh` once the whole team is here.
      if (sync) {
#pragma omp barrier
      }
      dots(r1, block1, 1, rh, preh.data(), s,
           a.r_scale[d] ? a.r_scale[d] + g0 * a.r_scale_gs : nullptr);
      for (int64_t b = 0; b < batch; ++b) {
        if (s >= a.lens[b]) continue;
        int64_t t;
        const Row w = row(b, s, cur, nxt, &t);
        GruRow2(a, d, q, w);
        store_y(t, b, w.hn);
      }
    }
    // Ht of every unit is in `nxt` once the whole team is here.
    if (sync) {
#pragma omp barrier
    }
  }
  if (steps & 1) {  // the final state is in the scratch buffer
    for (int64_t b = 0; b < batch; ++b) {
      std::memcpy(hbuf[0] + b * hs + u0, hbuf[1] + b * hs + u0, n * sizeof(float));
    }
  }
}

}  // namespace

void RnnLoopAvx512(const RnnLoopArgs& a) {
  if (a.hidden <= 0 || a.batch <= 0) return;
  const int64_t nb = (a.hidden + kRnnBlock - 1) / kRnnBlock;
  if (a.dirs == 2 && a.threads >= 2) {
    // The two directions at once, each on a team of half the threads: no direction waits for
    // the other's whole sequence, and teams of one (two threads) never synchronise.
    const int per = static_cast<int>(std::min<int64_t>(a.threads / 2, nb));
#pragma omp parallel num_threads(2 * per)
    {
      const int tid = omp_get_thread_num(), all = omp_get_num_threads();
      if (all != 2 * per) {
        // Granted another thread count: the directions one after the other on one thread.
        if (tid == 0) {
          RunTeam(a, 0, 0, 1, false);
          RunTeam(a, 1, 0, 1, false);
        }
      } else {
        RunTeam(a, tid / per, tid % per, per, per > 1);
      }
    }
    return;
  }
  const int nt = static_cast<int>(std::clamp<int64_t>(a.threads, 1, nb));
  for (int d = 0; d < a.dirs; ++d) {
    if (nt == 1) {
      RunTeam(a, d, 0, 1, false);
    } else {
#pragma omp parallel num_threads(nt)
      RunTeam(a, d, omp_get_thread_num(), omp_get_num_threads(), true);
    }
  }
}

}  // namespace kiln::kernels::cpu::avx512
