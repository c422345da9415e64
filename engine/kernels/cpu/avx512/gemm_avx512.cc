// The AVX-512 GEMM core (gemm.h). Compiled with AVX-512 flags (engine/CMakeLists.txt).
//
// Blocking: the output is cut into strips of kNr = 64 columns and tiles of kMr = 6 rows (the
// fp32 kernels also 7, RowTiles). The kernels read A's rows in place (the fp32 kernels: fp32 A
// with unit column stride; the dot path: bf16 A with unit column stride and even K) or from one
// copy made per call (fp32 rows of K values; bf16 rows of K rounded up to even, zero padded).
// Each task packs one B strip ([K][64] fp32 or [K/2][64][2] bf16) into a thread buffer (a plain
// B's strip on the way through the task's first row tile), where it stays in L2 while every row
// tile of the task runs the micro-kernel over the full K with its 6 x 64 accumulators in 24 zmm
// registers (7 x 64 in 28). Keeping the whole K in registers makes the accumulation order exactly
// the one gemm.h defines, with no partial sums to combine. Tasks (batch x strip x row group) are
// spread over the OpenMP threads.
#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "engine/common/half.h"
#include "engine/kernels/cpu/avx512/gemm.h"
#include "engine/kernels/cpu/avx512/math.h"
#include "engine/kernels/cpu/avx512/vec_convert_inl.h"
#include "engine/kernels/cpu/parallel.h"
#include "engine/kernels/cpu/ref/thread_scratch.h"

namespace kiln::kernels::cpu::avx512 {
namespace {

constexpr int kMr = 6;
constexpr int kNr = 64;
constexpr int kMrMax = 7;  // the fp32 kernels' tallest tile (RowTiles)

static inline int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t Max(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static inline __mmask16 TailMask(int64_t left) {
  if (left <= 0) return 0;
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}

// 64-byte aligned scratch, freed on scope exit (packing at build time).
class Buffer {
 public:
  explicit Buffer(int64_t bytes) {
    size_t size = static_cast<size_t>((bytes + 63) / 64 * 64);
    p_ = std::aligned_alloc(64, size == 0 ? 64 : size);
  }
  ~Buffer() { std::free(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_;
};

// The GEMM's scratch on the hot path, each thread's kept from one call to the next
// (ref::ThreadScratch; the OpenMP threads persist). A buffer allocated and freed per call went
// back to the system when large (the heap trimmed by brk and madvise, two or three system calls
// a call, the pages faulted in again and the other core's TLB flushed): 13% of a 1x1280x1000
// GEMV's time on two threads. As Buffer, at least `bytes`, 64-byte aligned.
class Scratch {
 public:
  Scratch(ref::ThreadScratchSlot slot, int64_t bytes)
      : p_(ref::ThreadScratch(slot, (bytes + 3) / 4)) {}
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_;
};

// `count` elements p[i * cs] of `type` as fp32 into out.
static void LoadRowF32(GemmType type, const void* base, int64_t cs, int64_t count, float* out) {
  if (type == GemmType::kF32) {
    const float* p = static_cast<const float*>(base);
    if (cs == 1) {
      std::memcpy(out, p, count * sizeof(float));
    } else {
      for (int64_t i = 0; i < count; ++i) out[i] = p[i * cs];
    }
    return;
  }
  const uint16_t* p = static_cast<const uint16_t*>(base);
  const bool half = type == GemmType::kF16;
  for (int64_t i = 0; i < count; i += 16) {
    __mmask16 m = TailMask(count - i);
    __m256i raw;
    if (cs == 1) {
      raw = _mm256_maskz_loadu_epi16(m, p + i);
    } else {
      alignas(32) uint16_t tmp[16] = {};
      for (int64_t e = 0; e < 16 && i + e < count; ++e) tmp[e] = p[(i + e) * cs];
      raw = _mm256_load_si256(reinterpret_cast<const __m256i*>(tmp));
    }
    _mm512_mask_storeu_ps(out + i, m, half ? HalfToFloat16(raw) : Bf16ToFloat16(raw));
  }
}

// `count` raw 16-bit elements p[i * cs] into out.
static void LoadRowU16(const void* base, int64_t cs, int64_t count, uint16_t* out) {
  const uint16_t* p = static_cast<const uint16_t*>(base);
  if (cs == 1) {
    std::memcpy(out, p, count * sizeof(uint16_t));
  } else {
    for (int64_t i = 0; i < count; ++i) out[i] = p[i * cs];
  }
}

static inline const char* Elem(const void* base, GemmType type, int64_t offset) {
  return static_cast<const char*>(base) + offset * (type == GemmType::kF32 ? 4 : 2);
}

// ---------------------------------------------------------------- packing

// How many rows ahead the strip packers prefetch B.
constexpr int64_t kPackAhead = 24;

// Columns j0 .. j0+63 of B as [K][64] fp32; columns past N are zero.
static void PackBStripF32(const GemmArgs& g, const void* b, int64_t j0, float* dst) {
  const int64_t nc = Min(kNr, g.n - j0);
  if (g.type == GemmType::kF32 && g.b_cs == 1) {
    // Contiguous fp32 rows: masked loads straight from B (zero past N), no staging copies.
    __mmask16 m[kNr / 16];
    for (int q = 0; q < kNr / 16; ++q) m[q] = TailMask(nc - q * 16);
    const float* base = reinterpret_cast<const float*>(Elem(b, g.type, j0));
    for (int64_t kk = 0; kk < g.k; ++kk) {
      const float* row = base + kk * g.b_rs;
      // Rows N floats apart (a weight streaming from memory): ask for each a few rows ahead.
      if (kk + kPackAhead < g.k) {
        for (int q = 0; q < kNr / 16; ++q) {
          _mm_prefetch(reinterpret_cast<const char*>(row + kPackAhead * g.b_rs + q * 16),
                       _MM_HINT_T0);
        }
      }
      for (int q = 0; q < kNr / 16; ++q) {
        _mm512_store_ps(dst + kk * kNr + q * 16, _mm512_maskz_loadu_ps(m[q], row + q * 16));
      }
    }
    return;
  }
  for (int64_t kk = 0; kk < g.k; ++kk) {
    float* out = dst + kk * kNr;
    LoadRowF32(g.type, Elem(b, g.type, kk * g.b_rs + j0 * g.b_cs), g.b_cs, nc, out);
    for (int64_t j = nc; j < kNr; ++j) out[j] = 0.0f;
  }
}

// Lane indices of the two-source word permutes that interleave 32 bf16 values of a row x with
// those of the next row y into pairs: lo[2e] = e, lo[2e+1] = 32 + e (lanes 0..15 of x and y),
// hi the same of lanes 16..31.
struct PairIndex {
  alignas(64) uint16_t lo[32];
  alignas(64) uint16_t hi[32];
  constexpr PairIndex() : lo(), hi() {
    for (int e = 0; e < 16; ++e) {
      lo[2 * e] = static_cast<uint16_t>(e);
      lo[2 * e + 1] = static_cast<uint16_t>(32 + e);
      hi[2 * e] = static_cast<uint16_t>(16 + e);
      hi[2 * e + 1] = static_cast<uint16_t>(48 + e);
    }
  }
};
constexpr PairIndex kPairIndex;

// Columns j0 .. j0+63 of bf16 B as [K/2][64][2]: rows 2p and 2p+1 interleaved per column.
static void PackBStripBf16(const GemmArgs& g, const void* b, int64_t j0, uint16_t* dst) {
  const int64_t nc = Min(kNr, g.n - j0);
  const int64_t kp = CeilDiv(g.k, 2);
  alignas(64) uint16_t r0[kNr], r1[kNr];
  const __m512i lo = _mm512_load_si512(kPairIndex.lo), hi = _mm512_load_si512(kPairIndex.hi);
  if (g.b_cs == 1) {
    // Contiguous rows (the common case: a [K, N] weight): masked loads straight from B, no
    // staging copies; the same bits as the general path below.
    const uint16_t* base = reinterpret_cast<const uint16_t*>(Elem(b, g.type, j0));
    const __mmask32 m0 = nc >= 32 ? ~__mmask32{0} : ((__mmask32{1} << nc) - 1);
    const __mmask32 m1 = nc >= 64   ? ~__mmask32{0}
                         : nc <= 32 ? 0
                                    : ((__mmask32{1} << (nc - 32)) - 1);
    const __mmask32 mh[2] = {m0, m1};
    for (int64_t p = 0; p < kp; ++p) {
      const uint16_t* r0 = base + 2 * p * g.b_rs;
      const bool odd = 2 * p + 1 < g.k;
      uint16_t* out = dst + p * kNr * 2;
      for (int h = 0; h < 2; ++h) {
        const __m512i x = _mm512_maskz_loadu_epi16(mh[h], r0 + 32 * h);
        const __m512i y =
            odd ? _mm512_maskz_loadu_epi16(mh[h], r0 + g.b_rs + 32 * h) : _mm512_setzero_si512();
        _mm512_storeu_si512(out + 64 * h, _mm512_permutex2var_epi16(x, lo, y));
        _mm512_storeu_si512(out + 64 * h + 32, _mm512_permutex2var_epi16(x, hi, y));
      }
    }
    return;
  }
  for (int64_t p = 0; p < kp; ++p) {
    std::memset(r0, 0, sizeof(r0));
    std::memset(r1, 0, sizeof(r1));
    LoadRowU16(Elem(b, g.type, 2 * p * g.b_rs + j0 * g.b_cs), g.b_cs, nc, r0);
    if (2 * p + 1 < g.k) {
      LoadRowU16(Elem(b, g.type, (2 * p + 1) * g.b_rs + j0 * g.b_cs), g.b_cs, nc, r1);
    }
    uint16_t* out = dst + p * kNr * 2;
    for (int h = 0; h < 2; ++h) {
      __m512i x = _mm512_load_si512(r0 + 32 * h), y = _mm512_load_si512(r1 + 32 * h);
      _mm512_storeu_si512(out + 64 * h, _mm512_permutex2var_epi16(x, lo, y));
      _mm512_storeu_si512(out + 64 * h + 32, _mm512_permutex2var_epi16(x, hi, y));
    }
  }
}

// A strip of a packed bf16 B (PackBBf16) as [K][64] fp32, for the fp32-order path (an A with
// subnormal values): element (k, j) sits at pair k / 2, column j, slot k % 2.
static void UnpackBStripF32(const uint16_t* strip, int64_t k, float* dst) {
  for (int64_t kk = 0; kk < k; ++kk) {
    const uint16_t* pair = strip + (kk / 2) * kNr * 2 + kk % 2;
    for (int64_t j = 0; j < kNr; ++j) dst[kk * kNr + j] = BFloat16BitsToFloat(pair[j * 2]);
  }
}

// ---------------------------------------------------------------- micro-kernels

// out[r][0..63] = sum over k of a[r * lda + k] * bp[k][0..63], in k order, for r < R: A read
// in place, row by row (six streams the hardware prefetches), B from its packed strip.
// `pf`, when set, names `pf_lines` cache lines (contiguous) of the strip the thread takes next:
// they are requested into L2 evenly over the k steps (one every k / pf_lines steps), so that
// strip's first row tile finds it there instead of waiting on memory (only the first tile of a
// strip streams it; the others read L2). Requested back to back, those misses would hold the
// line fill buffers the strip's own loads need (measured 1-2% slower on BERT-base fp32).
template <int R>
static void KernelF32(int64_t k, const float* a, int64_t lda, const float* bp, float* out,
                      const char* pf, int64_t pf_lines) {
  __m512 c[R][4];
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < 4; ++q) c[r][q] = _mm512_setzero_ps();
  }
  const int64_t every = pf_lines > 0 && pf_lines <= k ? k / pf_lines : 1;  // >= 1
  int64_t countdown = 1;
  const char* pf_end = pf + pf_lines * 64;
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* b = bp + kk * kNr;
    if (--countdown == 0) {
      countdown = every;
      if (pf < pf_end) {
        _mm_prefetch(pf, _MM_HINT_T1);
        pf += 64;
      }
    }
    // All four lines of the row 16 rows (4 KB) ahead into L1: a packed weight's strip streams
    // from memory on the first row tile, and later tiles read it from L2 at 256 bytes a step;
    // measured 7% off BERT-base fp32 for two of the lines, 4% more for all four.
    _mm_prefetch(reinterpret_cast<const char*>(b + 16 * kNr), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + 16 * kNr + 16), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + 16 * kNr + 32), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + 16 * kNr + 48), _MM_HINT_T0);
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
    const __m512 b2 = _mm512_load_ps(b + 32), b3 = _mm512_load_ps(b + 48);
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + kk]);
      c[r][0] = _mm512_fmadd_ps(av, b0, c[r][0]);
      c[r][1] = _mm512_fmadd_ps(av, b1, c[r][1]);
      c[r][2] = _mm512_fmadd_ps(av, b2, c[r][2]);
      c[r][3] = _mm512_fmadd_ps(av, b3, c[r][3]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < 4; ++q) _mm512_store_ps(out + r * kNr + q * 16, c[r][q]);
  }
}

// As KernelF32 over bf16 pairs with vdpbf16ps (odd product first, subnormal results flushed):
// pair p of row r is a[r * lda + 2p], a[r * lda + 2p + 1]; B is a [kp][64][2] strip.
template <int R>
static void KernelBf16(int64_t kp, const uint16_t* a, int64_t lda, const uint16_t* bp, float* out,
                       const char* /*pf*/, int64_t /*pf_lines*/) {
  __m512 c[R][4];
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < 4; ++q) c[r][q] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < kp; ++p) {
    const uint16_t* b = bp + p * kNr * 2;
    const __m512bh b0 = reinterpret_cast<__m512bh>(_mm512_load_si512(b));
    const __m512bh b1 = reinterpret_cast<__m512bh>(_mm512_load_si512(b + 32));
    const __m512bh b2 = reinterpret_cast<__m512bh>(_mm512_load_si512(b + 64));
    const __m512bh b3 = reinterpret_cast<__m512bh>(_mm512_load_si512(b + 96));
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * p, sizeof(pair));
      const __m512bh av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
      c[r][0] = _mm512_dpbf16_ps(c[r][0], av, b0);
      c[r][1] = _mm512_dpbf16_ps(c[r][1], av, b1);
      c[r][2] = _mm512_dpbf16_ps(c[r][2], av, b2);
      c[r][3] = _mm512_dpbf16_ps(c[r][3], av, b3);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < 4; ++q) _mm512_store_ps(out + r * kNr + q * 16, c[r][q]);
  }
}

// The 6-row tile, the one nearly every row of a large M runs, as KernelF32<6> and
// KernelBf16<6> in assembly: the same loads and FMAs (vdpbf16ps) in the same k (pair) order, so
// the same bits, with the steps unrolled four times so the loop's counter and pointer updates
// take 5 integer uops per 96 FMAs instead of 3-4 per 24 (the 512-bit FMAs share ports 0 and 5
// with integer uops on the CPUs it was first measured on), and without the L1 prefetches of B
// (the strip is read at consecutive addresses, which the hardware prefetchers follow; dropping
// them from the C++ kernels alone changed nothing measurable). The next strip's lines `pf` go to
// L2 one per four steps, spread to cover `pf_lines`. Measured on the GEMM benchmark: packed
// fp32 weights ~77% -> 81-84% of the fp32 peak on 1 thread, 86-87% on 2; BERT-base fp32 ~1-2%.
// The C++ loop compiled with k unrolled spills B registers and ran slower, and GCC kept the
// bf16 loop's accumulators in memory as soon as a prefetch branch joined it (2.8x slower).
// A step is 4 bytes of each A row (one fp32 value or one bf16 pair) and 256 bytes of B.
// clang-format off
#define KILN_GEMM_B_ROW(ADDR)           \
  "vmovups " ADDR ", %%zmm24\n\t"        \
  "vmovups 64" ADDR ", %%zmm25\n\t"      \
  "vmovups 128" ADDR ", %%zmm26\n\t"     \
  "vmovups 192" ADDR ", %%zmm27\n\t"
#define KILN_GEMM_A_ROW(BCAST, OP, AOFF, ADDR, C0, C1, C2, C3, T)  \
  BCAST " " #AOFF ADDR ", %%zmm" #T "\n\t"                         \
  OP " %%zmm24, %%zmm" #T ", %%zmm" #C0 "\n\t"                     \
  OP " %%zmm25, %%zmm" #T ", %%zmm" #C1 "\n\t"                     \
  OP " %%zmm26, %%zmm" #T ", %%zmm" #C2 "\n\t"                     \
  OP " %%zmm27, %%zmm" #T ", %%zmm" #C3 "\n\t"
// One step: the B row at BADDR (%[b] plus 0 to 3 times %[ldb], the bytes from one step's row to
// the next: 256 in a packed strip, a row of B when a tile packs its strip), the A column at byte
// offset AOFF of each row (rows 0-2 from %[a0], 3-5 from %[a3], %[lda] bytes apart); row r
// accumulates in zmm4r..zmm4r+3, B sits in zmm24..27, the broadcasts alternate over zmm28..31.
#define KILN_GEMM_STEP(BCAST, OP, BADDR, AOFF)                               \
  KILN_GEMM_B_ROW(BADDR)                                                     \
  KILN_GEMM_A_ROW(BCAST, OP, AOFF, "(%[a0])", 0, 1, 2, 3, 28)                \
  KILN_GEMM_A_ROW(BCAST, OP, AOFF, "(%[a0],%[lda])", 4, 5, 6, 7, 29)         \
  KILN_GEMM_A_ROW(BCAST, OP, AOFF, "(%[a0],%[lda],2)", 8, 9, 10, 11, 30)     \
  KILN_GEMM_A_ROW(BCAST, OP, AOFF, "(%[a3])", 12, 13, 14, 15, 31)            \
  KILN_GEMM_A_ROW(BCAST, OP, AOFF, "(%[a3],%[lda])", 16, 17, 18, 19, 28)     \
  KILN_GEMM_A_ROW(BCAST, OP, AOFF, "(%[a3],%[lda],2)", 20, 21, 22, 23, 29)
// The step's B row kept at byte offset OFF of %[pk] (the strip packed on the way), or not.
#define KILN_GEMM_KEEP_ROW(OFF)                   \
  "vmovaps %%zmm24, " #OFF "(%[pk])\n\t"         \
  "vmovaps %%zmm25, " #OFF "+64(%[pk])\n\t"      \
  "vmovaps %%zmm26, " #OFF "+128(%[pk])\n\t"     \
  "vmovaps %%zmm27, " #OFF "+192(%[pk])\n\t"
#define KILN_GEMM_KEEP_NONE(OFF) ""
#define KILN_GEMM_ZERO4(A, B, C, D)                     \
  "vpxord %%zmm" #A ", %%zmm" #A ", %%zmm" #A "\n\t"    \
  "vpxord %%zmm" #B ", %%zmm" #B ", %%zmm" #B "\n\t"    \
  "vpxord %%zmm" #C ", %%zmm" #C ", %%zmm" #C "\n\t"    \
  "vpxord %%zmm" #D ", %%zmm" #D ", %%zmm" #D "\n\t"
#define KILN_GEMM_STORE4(A, B, C, D)            \
  "vmovaps %%zmm" #A ", " #A "*64(%[out])\n\t"  \
  "vmovaps %%zmm" #B ", " #B "*64(%[out])\n\t"  \
  "vmovaps %%zmm" #C ", " #C "*64(%[out])\n\t"  \
  "vmovaps %%zmm" #D ", " #D "*64(%[out])\n\t"
// All 24 accumulators zeroed, and stored to %[out] ([6][64] floats).
#define KILN_GEMM_ZERO_ACC                                                                         \
  KILN_GEMM_ZERO4(0, 1, 2, 3) KILN_GEMM_ZERO4(4, 5, 6, 7) KILN_GEMM_ZERO4(8, 9, 10, 11)            \
  KILN_GEMM_ZERO4(12, 13, 14, 15) KILN_GEMM_ZERO4(16, 17, 18, 19) KILN_GEMM_ZERO4(20, 21, 22, 23)
#define KILN_GEMM_STORE_ACC                                                                        \
  KILN_GEMM_STORE4(0, 1, 2, 3) KILN_GEMM_STORE4(4, 5, 6, 7) KILN_GEMM_STORE4(8, 9, 10, 11)         \
  KILN_GEMM_STORE4(12, 13, 14, 15) KILN_GEMM_STORE4(16, 17, 18, 19) KILN_GEMM_STORE4(20, 21, 22, 23)
// What a kernel's block writes besides its outputs: memory, flags and every vector register.
#define KILN_GEMM_CLOBBERS                                                                         \
  "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",  \
  "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19",        \
  "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29",        \
  "xmm30", "xmm31"
// The whole kernel for one broadcast and one multiply-add instruction. The upper register
// halves are cleaned on the way out (vzeroupper), as the compiler leaves them after its own AVX
// code (it cannot see this block's).
#define KILN_GEMM_SIX(BCAST, OP, KEEP)                                                             \
  asm volatile(                                                                                    \
      KILN_GEMM_ZERO_ACC                                                                           \
      "test %[groups], %[groups]\n\t"                                                              \
      "jz 2f\n\t"                                                                                  \
      ".p2align 5\n"                                                                               \
      "1:\n\t"                                                                                     \
      "prefetcht1 (%[pf])\n\t"                                                                     \
      "add %[pf_step], %[pf]\n\t"                                                                  \
      KILN_GEMM_STEP(BCAST, OP, "(%[b])", 0) KEEP(0)                                               \
      KILN_GEMM_STEP(BCAST, OP, "(%[b],%[ldb])", 4) KEEP(256)                                      \
      KILN_GEMM_STEP(BCAST, OP, "(%[b],%[ldb],2)", 8) KEEP(512)                                    \
      KILN_GEMM_STEP(BCAST, OP, "(%[b3])", 12) KEEP(768)                                           \
      "add $1024, %[pk]\n\t"                                                                       \
      "add $16, %[a0]\n\t"                                                                         \
      "add $16, %[a3]\n\t"                                                                         \
      "lea (%[b],%[ldb],4), %[b]\n\t"                                                              \
      "lea (%[b3],%[ldb],4), %[b3]\n\t"                                                            \
      "dec %[groups]\n\t"                                                                          \
      "jnz 1b\n"                                                                                   \
      "2:\n\t"                                                                                     \
      "test %[rest], %[rest]\n\t"                                                                  \
      "jz 4f\n"                                                                                    \
      "3:\n\t"                                                                                     \
      KILN_GEMM_STEP(BCAST, OP, "(%[b])", 0) KEEP(0)                                               \
      "add $256, %[pk]\n\t"                                                                        \
      "add $4, %[a0]\n\t"                                                                          \
      "add $4, %[a3]\n\t"                                                                          \
      "add %[ldb], %[b]\n\t"                                                                       \
      "dec %[rest]\n\t"                                                                            \
      "jnz 3b\n"                                                                                   \
      "4:\n\t"                                                                                     \
      KILN_GEMM_STORE_ACC                                                                          \
      "vzeroupper\n\t"                                                                             \
      : [a0] "+r"(a), [a3] "+r"(a3), [b] "+r"(bp), [b3] "+r"(b3), [pk] "+r"(pk),                   \
        [pf] "+r"(pf), [groups] "+r"(groups), [rest] "+r"(rest)                                    \
      : [lda] "r"(lda_bytes), [ldb] "r"(ldb_bytes), [pf_step] "r"(pf_step), [out] "r"(out)         \
      : KILN_GEMM_CLOBBERS)
// clang-format on

// KILN_GEMM_SIX over `steps` steps: fp32 (kDot false: `a_rows` float rows, lda in floats, k
// steps) or bf16 pairs (kDot: bf16 rows, lda in bf16 values, kp steps).
template <bool kDot>
static void KernelSix(int64_t steps, const void* a_rows, int64_t lda, const void* b_strip,
                      int64_t ldb_bytes, float* out, const char* pf, int64_t pf_lines,
                      void* keep = nullptr) {
  const char* a = static_cast<const char*>(a_rows);
  const char* bp = static_cast<const char*>(b_strip);
  int64_t groups = steps / 4, rest = steps % 4;
  int64_t pf_step =
      groups > 0 && pf != nullptr && pf_lines > 0 ? CeilDiv(pf_lines * 64, groups) : 0;
  if (pf_step == 0) pf = bp;  // a harmless address, never moved
  const int64_t lda_bytes = lda * (kDot ? 2 : 4);
  const char* a3 = a + 3 * lda_bytes;
  const char* b3 = bp + 3 * ldb_bytes;
  char* pk = static_cast<char*>(keep);
  if constexpr (kDot) {
    KILN_GEMM_SIX("vpbroadcastd", "vdpbf16ps", KILN_GEMM_KEEP_NONE);
  } else if (keep != nullptr) {
    KILN_GEMM_SIX("vbroadcastss", "vfmadd231ps", KILN_GEMM_KEEP_ROW);
  } else {
    KILN_GEMM_SIX("vbroadcastss", "vfmadd231ps", KILN_GEMM_KEEP_NONE);
  }
}

// KernelSix<true> (the bf16 dot path's 6-row tile, the same vdpbf16ps in the same pair order)
// reading B's pairs from the rows of a plain bf16 B, `b_rows` the strip's first column in row 0
// and `row_bytes` apart (K even), and keeping each pair step's interleaved strip row at `keep`
// (the [kp][64][2] layout PackBStripBf16 writes): the first tile of a task packs its strip on
// the way instead of in a pass of its own. One step per loop: the four 2-source permutes
// (zmm30/zmm31 hold their lane indices) already outweigh the loop's integer uops.
static void KernelBf16SixPacking(int64_t kp, const uint16_t* a_rows, int64_t lda,
                                 const uint16_t* b_rows, int64_t row_bytes, float* out,
                                 uint16_t* keep) {
  const char* a = reinterpret_cast<const char*>(a_rows);
  const int64_t lda_bytes = lda * 2;
  const char* a3 = a + 3 * lda_bytes;
  const char* b = reinterpret_cast<const char*>(b_rows);
  const int64_t pair_bytes = 2 * row_bytes;
  char* pk = reinterpret_cast<char*>(keep);
  int64_t steps = kp;
  // clang-format off
  asm volatile(
      "vmovdqa64 (%[lo]), %%zmm30\n\t"
      "vmovdqa64 (%[hi]), %%zmm31\n\t"
      KILN_GEMM_ZERO_ACC
      "test %[steps], %[steps]\n\t"
      "jz 2f\n\t"
      ".p2align 5\n"
      "1:\n\t"
      // zmm24/25: columns 0-31 of rows 2p and 2p+1 interleaved (pairs of columns 0-15, 16-31),
      // zmm26/27 the same of columns 32-63.
      "vmovdqu16 (%[b]), %%zmm24\n\t"
      "vmovdqu16 64(%[b]), %%zmm26\n\t"
      "vmovdqa64 %%zmm24, %%zmm25\n\t"
      "vmovdqa64 %%zmm26, %%zmm27\n\t"
      "vpermt2w (%[b],%[rb]), %%zmm30, %%zmm24\n\t"
      "vpermt2w (%[b],%[rb]), %%zmm31, %%zmm25\n\t"
      "vpermt2w 64(%[b],%[rb]), %%zmm30, %%zmm26\n\t"
      "vpermt2w 64(%[b],%[rb]), %%zmm31, %%zmm27\n\t"
      KILN_GEMM_KEEP_ROW(0)
      KILN_GEMM_A_ROW("vpbroadcastd", "vdpbf16ps", 0, "(%[a0])", 0, 1, 2, 3, 28)
      KILN_GEMM_A_ROW("vpbroadcastd", "vdpbf16ps", 0, "(%[a0],%[lda])", 4, 5, 6, 7, 29)
      KILN_GEMM_A_ROW("vpbroadcastd", "vdpbf16ps", 0, "(%[a0],%[lda],2)", 8, 9, 10, 11, 28)
      KILN_GEMM_A_ROW("vpbroadcastd", "vdpbf16ps", 0, "(%[a3])", 12, 13, 14, 15, 29)
      KILN_GEMM_A_ROW("vpbroadcastd", "vdpbf16ps", 0, "(%[a3],%[lda])", 16, 17, 18, 19, 28)
      KILN_GEMM_A_ROW("vpbroadcastd", "vdpbf16ps", 0, "(%[a3],%[lda],2)", 20, 21, 22, 23, 29)
      "add $4, %[a0]\n\t"
      "add $4, %[a3]\n\t"
      "add %[pb], %[b]\n\t"
      "add $256, %[pk]\n\t"
      "dec %[steps]\n\t"
      "jnz 1b\n"
      "2:\n\t"
      KILN_GEMM_STORE_ACC
      "vzeroupper\n\t"
      : [a0] "+r"(a), [a3] "+r"(a3), [b] "+r"(b), [pk] "+r"(pk), [steps] "+r"(steps)
      : [lda] "r"(lda_bytes), [rb] "r"(row_bytes), [pb] "r"(pair_bytes), [out] "r"(out),
        [lo] "r"(kPairIndex.lo), [hi] "r"(kPairIndex.hi)
      : KILN_GEMM_CLOBBERS);
  // clang-format on
}

#undef KILN_GEMM_B_ROW
#undef KILN_GEMM_A_ROW
#undef KILN_GEMM_STEP
#undef KILN_GEMM_KEEP_ROW
#undef KILN_GEMM_KEEP_NONE
#undef KILN_GEMM_ZERO4
#undef KILN_GEMM_ZERO_ACC
#undef KILN_GEMM_STORE_ACC
#undef KILN_GEMM_CLOBBERS
#undef KILN_GEMM_STORE4
#undef KILN_GEMM_SIX

static void KernelF32Six(int64_t k, const float* a, int64_t lda, const float* bp, float* out,
                         const char* pf, int64_t pf_lines) {
  KernelSix<false>(k, a, lda, bp, kNr * 4, out, pf, pf_lines);
}

static void KernelBf16Six(int64_t kp, const uint16_t* a, int64_t lda, const uint16_t* bp,
                          float* out, const char* pf, int64_t pf_lines) {
  KernelSix<true>(kp, a, lda, bp, kNr * 2 * 2, out, pf, pf_lines);
}

using KernelF32Fn = void (*)(int64_t, const float*, int64_t, const float*, float*, const char*,
                             int64_t);
using KernelBf16Fn = void (*)(int64_t, const uint16_t*, int64_t, const uint16_t*, float*,
                              const char*, int64_t);
constexpr KernelF32Fn kKernelsF32[kMrMax + 1] = {nullptr,      KernelF32<1>, KernelF32<2>,
                                                 KernelF32<3>, KernelF32<4>, KernelF32<5>,
                                                 KernelF32Six, KernelF32<7>};

// How the fp32 kernels cut M into row tiles. A short last tile costs nearly a full one (it
// streams the same B strip from L2 for fewer products: a 2-row tile ran at 58% of the 6-row
// rate), so an M of 35 or more is cut exactly into tiles of 7 and 6 rows (7 = 6 + 1, so M % 6
// tiles of 7 and the rest of 6), e.g. 128 = 2 x 7 + 19 x 6 instead of 21 x 6 + 2. The 7-row
// kernel runs as fast per row as the 6-row one though its 28 accumulators leave too few
// registers for all (one lives on the stack: its chain of store, load and FMA is still shorter
// than the 14 cycles of a k step). Smaller M, and the bf16 dot path (A packed in 6-row tiles):
// tiles of 6 and one shorter last tile.
struct RowTiles {
  int64_t sevens = 0, count = 0, m = 0;
  RowTiles(int64_t rows, bool six_only) : m(rows) {
    if (!six_only && rows >= 7 * (rows % 6)) sevens = rows % 6;
    count = sevens + CeilDiv(rows - 7 * sevens, kMr);
  }
  int64_t start(int64_t t) const { return t < sevens ? 7 * t : 7 * sevens + (t - sevens) * kMr; }
  int rows(int64_t t) const { return static_cast<int>(t < sevens ? 7 : Min(kMr, m - start(t))); }
};
constexpr KernelBf16Fn kKernelsBf16[kMr + 1] = {nullptr,       KernelBf16<1>, KernelBf16<2>,
                                                KernelBf16<3>, KernelBf16<4>, KernelBf16<5>,
                                                KernelBf16Six};

// ---------------------------------------------------------------- epilogue

// `v` rounded to the output storage type and widened back (exact): the value a later pass
// would read from the stored output.
static inline __m512 AsStored(GemmType type, __m512 v) {
  switch (type) {
    case GemmType::kF16:
      return HalfToFloat16(FloatToHalf16(v));
    case GemmType::kBF16:
      return Bf16ToFloat16(FloatToBf16x16(v));
    default:
      return v;
  }
}

// `v` stored to `y` as the output type under mask `m`.
static inline void StoreVec(GemmType type, void* y, __mmask16 m, __m512 v) {
  if (type == GemmType::kF32) {
    _mm512_mask_storeu_ps(static_cast<float*>(y), m, v);
  } else {
    _mm256_mask_storeu_epi16(y, m, type == GemmType::kF16 ? FloatToHalf16(v) : FloatToBf16x16(v));
  }
}

// Rows i0 .. i0+mr-1, columns j0 .. j0+nc-1 of batch `bi` from the fp32 tile `acc` ([6][64]).
// `crow` holds 2 x 64 floats: the row's values before GELU, and C's row.
static void StoreTile(const GemmArgs& g, int64_t bi, int64_t i0, int mr, int64_t j0, int64_t nc,
                      const float* acc, float* crow) {
  const __m512 alpha = _mm512_set1_ps(g.alpha), beta = _mm512_set1_ps(g.beta);
  // alpha = beta = 1 (a FusedMatMul's bias): 1 * x is x, so v = acc + C, the same bits.
  const bool unit = g.alpha == 1.0f && g.beta == 1.0f;
  const int64_t es = g.type == GemmType::kF32 ? 4 : 2;
  float* vrow = crow;
  float* c_row = crow + kNr;
  // C broadcast over rows (a bias): its row is read once per tile.
  if (g.c != nullptr && g.c_rs == 0) {
    LoadRowF32(g.type, Elem(g.c, g.type, j0 * g.c_cs), g.c_cs, nc, c_row);
  }
  for (int r = 0; r < mr; ++r) {
    const int64_t i = i0 + r;
    if (g.c != nullptr && g.c_rs != 0) {
      LoadRowF32(g.type, Elem(g.c, g.type, i * g.c_rs + j0 * g.c_cs), g.c_cs, nc, c_row);
    }
    char* y = static_cast<char*>(g.y) + (bi * g.y_batch + i * g.y_rs + j0) * es;
    for (int q = 0; q * 16 < nc; ++q) {
      const __mmask16 m = TailMask(nc - q * 16);
      __m512 v = _mm512_load_ps(acc + r * kNr + q * 16);
      if (g.acc != nullptr) _mm512_mask_storeu_ps(g.acc + (bi * g.m + i) * g.n + j0 + q * 16, m, v);
      if (g.scale) {
        if (g.c == nullptr) {
          v = _mm512_mul_ps(alpha, v);
        } else if (unit) {
          v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, c_row + q * 16));
        } else {
          v = _mm512_add_ps(_mm512_mul_ps(alpha, v),
                            _mm512_mul_ps(beta, _mm512_maskz_loadu_ps(m, c_row + q * 16)));
        }
      }
      if (g.gelu) {
        _mm512_store_ps(vrow + q * 16, AsStored(g.type, v));  // GELU below, on the stored value
      } else {
        StoreVec(g.type, y + q * 16 * es, m, v);
      }
    }
    if (g.gelu) {
      if (g.type == GemmType::kF32) {
        GeluF32(vrow, reinterpret_cast<float*>(y), nc);
      } else {
        GeluF32(vrow, vrow, nc);
        for (int q = 0; q * 16 < nc; ++q) {
          StoreVec(g.type, y + q * 16 * es, TailMask(nc - q * 16), _mm512_load_ps(vrow + q * 16));
        }
      }
    }
  }
}

// How a GEMM's output is cut into tasks: batch x strip x row group, where rows are split into
// groups only when batches x strips cannot keep every thread busy twice over.
struct TaskSplit {
  int64_t strips, mgroups, units_per_group, tasks;
  bool parallel;
  TaskSplit(const GemmArgs& g, int64_t row_units) {
    strips = CeilDiv(g.n, kNr);
    const int threads = omp_get_max_threads();
    mgroups = 1;
    if (g.batch * strips < 2 * threads) {
      mgroups = Min(row_units, CeilDiv(2 * threads, g.batch * strips));
    }
    units_per_group = CeilDiv(row_units, mgroups);
    tasks = g.batch * strips * mgroups;
    parallel = g.batch * g.m * g.n * (g.k + 1) >= (1 << 16);
  }
};

// ---------------------------------------------------------------- AMX (bf16 dot path)
//
// On CPUs with AMX-BF16 whose kernel grants the tile data state, the bf16 dot path runs on
// tiles: TDPBF16PS forms the same pair products of bf16 values (exact in fp32), accumulates them
// in fp32 with subnormal inputs read as zero and subnormal results flushed, like vdpbf16ps; the
// order within a pair and the rounding between the two products are the hardware's, so AMX
// results may differ from the vdpbf16ps path in the last bit of an element (tests bound it).
// Blocking: 32 x 32 outputs in four 16 x 16 fp32 tiles, A as two 16 x 32 bf16 tiles, B as two
// 16-pair x 16-column tiles read straight from the packed [K/2][64][2] strip.

// Whether AMX runs here: CPUID AMX-TILE and AMX-BF16, the OS enabling the tile state in XCR0,
// and Linux granting this process the tile data (arch_prctl); KILN_NO_AMX=1 turns it off.
static bool AmxUsable() {
  static const bool usable = [] {
    const char* off = std::getenv("KILN_NO_AMX");
    if (off != nullptr && off[0] == '1') return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    if (!(d & (1u << 24)) || !(d & (1u << 22))) return false;
    __cpuid(1, a, b, c, d);
    if (!(c & (1u << 27))) return false;  // OSXSAVE
    uint32_t xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;  // XTILECFG, XTILEDATA
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

constexpr int kAmxRows = 32;  // rows per block (two A tiles)
constexpr int kAmxK = 32;     // bf16 values of K per A tile row (16 pairs)

static void GemmAmxBf16(const GemmArgs& g) {
  const int64_t kb = CeilDiv(g.k, kAmxK);          // K blocks
  const int64_t mblocks = CeilDiv(g.m, kAmxRows);  // 32-row blocks
  const TaskSplit split(g, mblocks);
  const int64_t strips = split.strips, mgroups = split.mgroups;
  const int64_t a_block = kAmxRows * kb * kAmxK;  // bf16 values per packed 32-row block
  // Packed A: per batch and 32-row block, per K block, two 16 x 32 tiles ([2][16][32]); zero
  // past M and K.
  const Scratch apack(ref::kScratchGemmA,
                      g.batch * mblocks * a_block * 2 + 64);  // zeroed by block below
  const int64_t kp_padded = kb * (kAmxK / 2);
  const int64_t b_strip_bytes = kp_padded * kNr * 2 * 2 + 64;

  const int64_t blocks_per_group = split.units_per_group, tasks = split.tasks;

  ParallelFor(g.batch * mblocks, split.parallel, [&](int64_t begin, int64_t end) {
    const Scratch row(ref::kScratchGemmAmxRow, kb * kAmxK * 2 + 64);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t bi = t / mblocks, blk = t % mblocks;
      const void* a = Elem(g.a, g.type, g.a_offsets ? g.a_offsets[bi] : 0);
      uint16_t* dst = apack.as<uint16_t>() + t * a_block;
      std::memset(dst, 0, a_block * 2);
      uint16_t* r = row.as<uint16_t>();
      for (int64_t i = 0; i < kAmxRows && blk * kAmxRows + i < g.m; ++i) {
        std::memset(r, 0, kb * kAmxK * 2);
        LoadRowU16(Elem(a, g.type, (blk * kAmxRows + i) * g.a_rs), g.a_cs, g.k, r);
        const int64_t half = i / 16, ri = i % 16;
        for (int64_t q = 0; q < kb; ++q) {
          std::memcpy(dst + ((q * 2 + half) * 16 + ri) * kAmxK, r + q * kAmxK, kAmxK * 2);
        }
      }
    }
  });

  ParallelFor(tasks, split.parallel, [&](int64_t t_begin, int64_t t_end) {
    const Scratch bpack(ref::kScratchGemmB, b_strip_bytes);
    alignas(64) float acc[kAmxRows * kNr];
    const Scratch crow(ref::kScratchGemmC, 2 * kNr * 4);
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {
      cfg.rows[t] = 16;
      cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t bi = t / (strips * mgroups);
      const int64_t s = (t / mgroups) % strips, grp = t % mgroups;
      const int64_t j0 = s * kNr, nc = Min(kNr, g.n - j0);
      const uint16_t* bp;
      if (g.b_packed != nullptr) {
        bp = g.b_packed + s * kp_padded * kNr * 2;
      } else {
        const void* b = Elem(g.b, g.type, g.b_offsets ? g.b_offsets[bi] : 0);
        uint16_t* strip = bpack.as<uint16_t>();
        PackBStripBf16(g, b, j0, strip);
        const int64_t kp = CeilDiv(g.k, 2);
        std::memset(strip + kp * kNr * 2, 0, (kp_padded - kp) * kNr * 2 * 2);
        bp = strip;
      }
      const int64_t b1 = Min(mblocks, (grp + 1) * blocks_per_group);
      for (int64_t blk = grp * blocks_per_group; blk < b1; ++blk) {
        const uint16_t* ap = apack.as<uint16_t>() + (bi * mblocks + blk) * a_block;
        for (int h = 0; h < 2; ++h) {
          if (h * 32 >= nc) break;
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
          for (int64_t q = 0; q < kb; ++q) {
            _tile_loadd(4, ap + (q * 2 + 0) * 16 * kAmxK, kAmxK * 2);
            _tile_loadd(5, ap + (q * 2 + 1) * 16 * kAmxK, kAmxK * 2);
            const uint16_t* bq = bp + (q * 16 * kNr + h * 32) * 2;
            _tile_loadd(6, bq, kNr * 2 * 2);
            _tile_loadd(7, bq + 16 * 2, kNr * 2 * 2);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
          _tile_stored(0, acc + h * 32, kNr * 4);
          _tile_stored(1, acc + h * 32 + 16, kNr * 4);
          _tile_stored(2, acc + 16 * kNr + h * 32, kNr * 4);
          _tile_stored(3, acc + 16 * kNr + h * 32 + 16, kNr * 4);
        }
        const int64_t i0 = blk * kAmxRows;
        StoreTile(g, bi, i0, static_cast<int>(Min(kAmxRows, g.m - i0)), j0, nc, acc,
                  crow.as<float>());
      }
    }
    _tile_release();
  });
}

}  // namespace

bool GemmUsesAmx() { return AmxUsable(); }

int64_t PackedBStripElemsF32(int64_t k) { return k * kNr; }

namespace {

// The arguments a strip packer reads for a row-major [k, n] B of `type`.
GemmArgs RowMajorB(GemmType type, int64_t k, int64_t n) {
  GemmArgs g;
  g.type = type;
  g.k = k;
  g.n = n;
  g.b_rs = n;
  g.b_cs = 1;
  return g;
}

}  // namespace

void PackBF32(const float* b, int64_t k, int64_t n, float* out) {
  PackBF32Strided(b, k, n, n, 1, out);
}

void PackBF32Strided(const float* b, int64_t k, int64_t n, int64_t b_rs, int64_t b_cs, float* out) {
  GemmArgs g = RowMajorB(GemmType::kF32, k, n);
  g.b_rs = b_rs;
  g.b_cs = b_cs;
  // Through an aligned strip buffer: `out` may be any address (a weight inside a blob).
  const int64_t strip = PackedBStripElemsF32(k);
  Buffer tmp(strip * 4);
  for (int64_t s = 0; s * kNr < n; ++s) {
    PackBStripF32(g, b, s * kNr, tmp.as<float>());
    std::memcpy(out + s * strip, tmp.as<float>(), strip * 4);
  }
}

void PackBHalf(const uint16_t* b, int64_t k, int64_t n, uint16_t* out) {
  PackBHalfStrided(b, k, n, n, 1, out);
}

void PackBHalfStrided(const uint16_t* b, int64_t k, int64_t n, int64_t b_rs, int64_t b_cs,
                      uint16_t* out) {
  const int64_t strip = PackedBStripElemsF32(k);
  for (int64_t s = 0; s * kNr < n; ++s) {
    const int64_t j0 = s * kNr, nc = Min(kNr, n - j0);
    for (int64_t kk = 0; kk < k; ++kk) {
      uint16_t* row = out + s * strip + kk * kNr;
      const uint16_t* src = b + kk * b_rs + j0 * b_cs;
      if (b_cs == 1) {
        std::memcpy(row, src, nc * sizeof(uint16_t));
      } else {
        for (int64_t j = 0; j < nc; ++j) row[j] = src[j * b_cs];
      }
      std::memset(row + nc, 0, (kNr - nc) * sizeof(uint16_t));
    }
  }
}

int64_t PackedBStripElems(int64_t k) { return CeilDiv(k, kAmxK) * (kAmxK / 2) * kNr * 2; }

void PackBBf16(const uint16_t* b, int64_t k, int64_t n, uint16_t* out) {
  PackBBf16Strided(b, k, n, n, 1, out);
}

void PackBBf16Strided(const uint16_t* b, int64_t k, int64_t n, int64_t b_rs, int64_t b_cs,
                      uint16_t* out) {
  GemmArgs g = RowMajorB(GemmType::kBF16, k, n);
  g.b_rs = b_rs;
  g.b_cs = b_cs;
  const int64_t strip = PackedBStripElems(k), filled = CeilDiv(k, 2) * kNr * 2;
  for (int64_t s = 0; s * kNr < n; ++s) {
    PackBStripBf16(g, b, s * kNr, out + s * strip);
    std::memset(out + s * strip + filled, 0, (strip - filled) * 2);
  }
}

bool Bf16DotPathAllowed(const uint16_t* values, int64_t n) {
  // Subnormal: exponent bits zero, mantissa non-zero, i.e. (v & 0x7fff) - 1 below 0x7f unsigned.
  const __m512i abs_mask = _mm512_set1_epi16(0x7fff), one = _mm512_set1_epi16(1);
  const __m512i top = _mm512_set1_epi16(0x7f);
  auto subnormals = [&](__mmask32 m, const uint16_t* p) {
    const __m512i v = _mm512_and_si512(_mm512_maskz_loadu_epi16(m, p), abs_mask);
    return _mm512_mask_cmplt_epu16_mask(m, _mm512_sub_epi16(v, one), top);
  };
  int64_t i = 0;
  // Four vectors a branch: the scan of an activation runs on every call.
  for (; i + 128 <= n; i += 128) {
    const __mmask32 any = subnormals(~0u, values + i) | subnormals(~0u, values + i + 32) |
                          subnormals(~0u, values + i + 64) | subnormals(~0u, values + i + 96);
    if (any) return false;
  }
  for (; i < n; i += 32) {
    const __mmask32 m = n - i >= 32 ? ~0u : (1u << (n - i)) - 1u;
    if (subnormals(m, values + i)) return false;
  }
  return true;
}

void GemmTileF32(int64_t k, const float* a, int64_t lda, const float* bp, float* out) {
  KernelF32Six(k, a, lda, bp, out, nullptr, 0);
}

void GemmAvx512(const GemmArgs& g) {
  if (g.batch <= 0 || g.m <= 0 || g.n <= 0) return;
  const bool dot = g.type == GemmType::kBF16 && g.bf16_dot;
  if (dot && g.k > 0 && AmxUsable()) {
    GemmAmxBf16(g);
    return;
  }
  const RowTiles row_tiles(g.m, /*six_only=*/dot);
  const int64_t mtiles = row_tiles.count;
  const TaskSplit split(g, mtiles);
  const int64_t strips = split.strips, mgroups = split.mgroups;
  const int64_t kp = CeilDiv(g.k, 2);
  // A as the kernels read it: rows of bf16 pairs (dot path) or of fp32 values, read in place
  // when A is of that kind with unit column stride (and even K for pairs), else copied once
  // into [batch][M][lda] (bf16 rows zero padded to 2 * kp values; other types to fp32).
  const bool a_in_place = g.a_cs == 1 && (dot ? g.k % 2 == 0 : g.type == GemmType::kF32);
  // fp16 / bf16 A of unit column stride on the fp32 path: each row tile widened to fp32 by its
  // task just before the micro-kernel (into the thread's own [kMrMax][K] buffer), not the whole
  // of A into one fp32 copy first: a large A (attention probabilities) then streams through
  // memory once at half the bytes instead of three times at twice them. The widening is exact,
  // so the numbers are the copy's. Each strip widens its tiles again, so only for one or two
  // strips (N <= 128: attention's probabilities times V); more strips share the one copy.
  const bool a_per_tile = !a_in_place && !dot && g.a_cs == 1 && split.strips <= 2;
  const int64_t lda = a_in_place ? g.a_rs : (dot ? 2 * kp : g.k);
  const int64_t a_elem = dot ? 2 : 4;  // bytes per element the kernels read
  const Scratch apack(ref::kScratchGemmA,
                      a_in_place || a_per_tile ? 64 : g.batch * g.m * lda * a_elem + 64);
  auto a_rows = [&](int64_t bi) -> const char* {
    if (!a_in_place) return apack.as<char>() + bi * g.m * lda * a_elem;
    return Elem(g.a, g.type, g.a_offsets ? g.a_offsets[bi] : 0);
  };
  const int64_t b_strip_bytes = (dot ? kp * kNr * 2 * 2 : g.k * kNr * 4) + 64;

  const int64_t tiles_per_group = split.units_per_group, tasks = split.tasks;

  if (!a_in_place && !a_per_tile) {
    ParallelFor(g.batch * g.m, split.parallel, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t bi = t / g.m, i = t % g.m;
        const void* a = Elem(g.a, g.type, g.a_offsets ? g.a_offsets[bi] : 0);
        if (dot) {
          uint16_t* dst = apack.as<uint16_t>() + t * lda;
          LoadRowU16(Elem(a, g.type, i * g.a_rs), g.a_cs, g.k, dst);
          if (g.k < lda) dst[g.k] = 0;
        } else {
          LoadRowF32(g.type, Elem(a, g.type, i * g.a_rs), g.a_cs, g.k, apack.as<float>() + t * g.k);
        }
      }
    });
  }

  // Each piece is a contiguous run of tasks (they cost the same but for a tail strip), so it
  // knows the strip it takes next and can fetch a packed one while it computes.
  ParallelFor(tasks, split.parallel, [&](int64_t t_begin, int64_t t_end) {
    const Scratch bpack(ref::kScratchGemmB, b_strip_bytes);
    alignas(64) float acc[kMrMax * kNr];
    const Scratch crow(ref::kScratchGemmC, 2 * kNr * 4);
    // The row tile of a_per_tile. The same slot as `apack`: that mode leaves `apack` unused,
    // and the others ask for 64 bytes, which never moves a slot's buffer (it only grows).
    const Scratch atile(ref::kScratchGemmA, a_per_tile ? kMrMax * g.k * 4 + 64 : 64);
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t bi = t / (strips * mgroups);
      const int64_t s = (t / mgroups) % strips, grp = t % mgroups;
      const int64_t j0 = s * kNr, nc = Min(kNr, g.n - j0);
      const void* b = Elem(g.b, g.type, g.b_offsets ? g.b_offsets[bi] : 0);
      const uint16_t* packed =
          g.b_packed != nullptr ? g.b_packed + s * PackedBStripElems(g.k) : nullptr;
      // The next task's strip of a packed weight, when it is another strip.
      const char* next_strip = nullptr;
      int64_t next_lines = 0;
      const int64_t s_next = ((t + 1) / mgroups) % strips;
      if (t + 1 < t_end && s_next != s) {
        if (g.b_packed != nullptr) {
          next_strip = reinterpret_cast<const char*>(g.b_packed + s_next * PackedBStripElems(g.k));
          next_lines = kp * kNr * 2 * 2 / 64;
        } else if (g.b_packed_f32 != nullptr) {
          next_strip =
              reinterpret_cast<const char*>(g.b_packed_f32 + s_next * PackedBStripElemsF32(g.k));
          next_lines = g.k * kNr * 4 / 64;
        } else if (g.b_packed_f16 != nullptr) {
          next_strip =
              reinterpret_cast<const char*>(g.b_packed_f16 + s_next * PackedBStripElemsF32(g.k));
          next_lines = g.k * kNr * 2 / 64;
        }
      }
      const int64_t t0 = grp * tiles_per_group, t1 = Min(mtiles, (grp + 1) * tiles_per_group);
      // A plain B with rows of unit stride, a full strip, fp32 values or bf16 pairs of an even
      // K: the task's first 6-row tile reads the strip from B's rows and packs it on the way,
      // instead of a pass of its own before the tiles (the packing pass took 11-13% of a
      // 128x3072x768 fp32 GEMM). The fp32 tiles then run from the first 6-row one on, the 7-row
      // ones before it last.
      const bool plain_b =
          packed == nullptr && g.b_packed_f32 == nullptr && g.b_packed_f16 == nullptr;
      int64_t first_tile = dot ? t0 : Min(t1, Max(t0, row_tiles.sevens));
      const bool pack_on_the_way = plain_b && g.b_cs == 1 && nc == kNr &&
                                   (dot ? g.k % 2 == 0 : g.type == GemmType::kF32) &&
                                   first_tile < t1 && row_tiles.rows(first_tile) == kMr;
      if (!pack_on_the_way) first_tile = t0;
      const uint16_t* bp16 = bpack.as<uint16_t>();  // the strip the dot kernels read
      const float* bp32 = bpack.as<float>();        // the strip the fp32 kernels read
      if (pack_on_the_way) {
        // the first tile packs it
      } else if (dot && packed != nullptr) {
        bp16 = packed;
      } else if (dot) {
        PackBStripBf16(g, b, j0, bpack.as<uint16_t>());
      } else if (packed != nullptr) {
        UnpackBStripF32(packed, g.k, bpack.as<float>());
      } else if (g.b_packed_f32 != nullptr) {
        bp32 = g.b_packed_f32 + s * PackedBStripElemsF32(g.k);
      } else if (g.b_packed_f16 != nullptr) {
        const uint16_t* src = g.b_packed_f16 + s * PackedBStripElemsF32(g.k);
        float* dst = bpack.as<float>();
        for (int64_t i = 0; i < g.k * kNr; i += 16) {
          // The strip streams from memory once: ask for it a few KB ahead of the loads.
          if (i % 32 == 0) _mm_prefetch(reinterpret_cast<const char*>(src + i + 2048), _MM_HINT_T0);
          _mm512_store_ps(
              dst + i,
              HalfToFloat16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
        }
      } else {
        PackBStripF32(g, b, j0, bpack.as<float>());
      }
      // The next strip's lines, spread over this task's row tiles (at most one per k step).
      const int64_t lines_per_tile = t1 > t0 ? CeilDiv(next_lines, t1 - t0) : 0;
      for (int64_t n_done = 0; n_done < t1 - t0; ++n_done) {
        const int64_t ti = t0 + (first_tile - t0 + n_done) % (t1 - t0);
        const int mr = row_tiles.rows(ti);
        const int64_t i0 = row_tiles.start(ti);
        const int64_t first = n_done * lines_per_tile;
        const int64_t lines = Min(lines_per_tile, next_lines - first);
        if (pack_on_the_way && n_done == 0 && dot) {
          KernelBf16SixPacking(kp, reinterpret_cast<const uint16_t*>(a_rows(bi)) + i0 * lda, lda,
                               reinterpret_cast<const uint16_t*>(Elem(b, g.type, j0)), g.b_rs * 2,
                               acc, bpack.as<uint16_t>());
        } else if (pack_on_the_way && n_done == 0) {
          KernelSix<false>(g.k, reinterpret_cast<const float*>(a_rows(bi)) + i0 * lda, lda,
                           Elem(b, g.type, j0), g.b_rs * 4, acc, nullptr, 0, bpack.as<float>());
        } else if (dot) {
          kKernelsBf16[mr](kp, reinterpret_cast<const uint16_t*>(a_rows(bi)) + i0 * lda, lda, bp16,
                           acc, lines > 0 ? next_strip + first * 64 : nullptr, Min(lines, kp));
        } else {
          const float* a_tile = atile.as<float>();
          if (a_per_tile) {
            const void* a = Elem(g.a, g.type, g.a_offsets ? g.a_offsets[bi] : 0);
            for (int r = 0; r < mr; ++r) {
              LoadRowF32(g.type, Elem(a, g.type, (i0 + r) * g.a_rs), 1, g.k,
                         atile.as<float>() + r * g.k);
            }
          } else {
            a_tile = reinterpret_cast<const float*>(a_rows(bi)) + i0 * lda;
          }
          kKernelsF32[mr](g.k, a_tile, lda, bp32, acc,
                          lines > 0 ? next_strip + first * 64 : nullptr, Min(lines, g.k));
        }
        StoreTile(g, bi, i0, mr, j0, nc, acc, crow.as<float>());
      }
    }
  });
}

}  // namespace kiln::kernels::cpu::avx512
