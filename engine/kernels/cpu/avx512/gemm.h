// The AVX-512 GEMM core behind the fast Gemm and MatMul kernels (gemm_avx512.cc).
//
// Y[b] = epilogue(A[b] * B[b]) for b < batch, on fp32, fp16 or bf16 storage, where every output
// element is one fp32 dot product rounded once to the storage type. The accumulation order is
// part of the contract (tests reproduce it bit for bit with scalar code):
//
// - fp32 and fp16 (fp16 converted to fp32 exactly on packing): acc = 0, then for k = 0 .. K-1
//   acc = fma(a[k], b[k], acc), one rounding per step.
// - bf16 when neither A nor B holds a subnormal bf16 value ("dot" path, vdpbf16ps): acc = 0, then
//   for each pair p = 0 .. ceil(K/2)-1: acc = ftz(fma(a[2p+1], b[2p+1], acc)), then
//   acc = ftz(fma(a[2p], b[2p], acc)) (a[K] = b[K] = 0 when K is odd), where ftz() flushes a
//   subnormal fp32 result to zero of the same sign: vdpbf16ps adds the odd product first and
//   flushes subnormal results. Products of bf16 values are exact in fp32.
// - bf16 dot path on a CPU with AMX-BF16 (GemmUsesAmx): the same pair products, accumulated in
//   fp32 by TDPBF16PS with subnormals read as zero and flushed, in the tile unit's own order
//   and rounding within a block of 16 pairs; not reproduced bit for bit, it stays within the
//   fp32 accumulation bound of any order (tests check both paths; KILN_NO_AMX=1 forces
//   vdpbf16ps).
// - bf16 with a subnormal value in A or B: the fp32 order above (vdpbf16ps would read those
//   inputs as zero, which the precision contract does not allow).
//
// Epilogue (Gemm; `scale` set): v = alpha * acc, then v = v + beta * C (when C is given), each
// step rounded to fp32, as the reference kernel does; MatMul: v = acc. v is rounded once to the
// output storage type (round to nearest even, as engine/common/half.h). With `gelu`, that
// stored value (exact in fp32) becomes GELU(v) in fp32 and is rounded once more: the bits of an
// unfused GELU reading the stored sum.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <type_traits>

namespace kiln::kernels::cpu::avx512 {

enum class GemmType { kF32, kF16, kBF16 };

/// Operands of one batched GEMM. Element (i, j) of a matrix M is p[i * rs + j * cs] in elements
/// of the storage type; batch b of A starts at a + a_offsets[b] (b_offsets, c likewise).
struct GemmArgs {
  GemmType type = GemmType::kF32;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t a_rs = 0, a_cs = 1;
  const int64_t* a_offsets = nullptr;  // nullptr: 0 for every batch
  const void* b = nullptr;
  int64_t b_rs = 0, b_cs = 1;
  const int64_t* b_offsets = nullptr;
  void* y = nullptr;  // batch b, row i starts at y + b * y_batch + i * y_rs; unit column stride
  int64_t y_rs = 0, y_batch = 0;
  bool scale = false;  // Gemm epilogue
  float alpha = 1.0f, beta = 1.0f;
  const void* c = nullptr;  // optional (Gemm only), broadcast through its strides (0 allowed)
  int64_t c_rs = 0, c_cs = 0;
  /// bf16 only: take the vdpbf16ps path; the caller sets it to Bf16DotPathAllowed(A) &&
  /// Bf16DotPathAllowed(B) over the whole input tensors.
  bool bf16_dot = false;
  /// Optional interior tap: each output element's fp32 accumulator (before the epilogue), batch
  /// b row i at acc + (b * m + i) * n.
  float* acc = nullptr;
  /// bf16 only: B already packed by PackBBf16 (a weight packed at build time); `b` is unused and
  /// must be the same matrix for every batch. The numbers are those of the unpacked B.
  const uint16_t* b_packed = nullptr;
  /// fp32 only: B already packed by PackBF32 (64-byte aligned), as b_packed for bf16.
  const float* b_packed_f32 = nullptr;
  /// fp16 only: B already packed by PackBHalf, as b_packed for bf16.
  const uint16_t* b_packed_f16 = nullptr;
  /// The epilogue's stored value v becomes GELU(v) (GeluF32 of math.h, see above) while the
  /// tile is in cache; `acc` still gets the dot products.
  bool gelu = false;
};

/// bf16 values of one strip (64 columns) of a packed B with `k` rows.
int64_t PackedBStripElems(int64_t k);

/// Packs bf16 B [k, n] (row-major) for GemmArgs::b_packed: ceil(n / 64) strips of
/// PackedBStripElems(k) values, the layout the bf16 GEMM paths read, zero padded.
void PackBBf16(const uint16_t* b, int64_t k, int64_t n, uint16_t* out);

/// PackBBf16 of a B whose element (i, j) is b[i * b_rs + j * b_cs] (e.g. Gemm's transB).
void PackBBf16Strided(const uint16_t* b, int64_t k, int64_t n, int64_t b_rs, int64_t b_cs,
                      uint16_t* out);

/// fp32 values of one strip (64 columns) of a packed fp32 B with `k` rows.
int64_t PackedBStripElemsF32(int64_t k);

/// Packs fp32 B [k, n] (row-major) for GemmArgs::b_packed_f32: ceil(n / 64) strips of
/// PackedBStripElemsF32(k) values ([k][64], zero padded past n), the layout the fp32 kernels read.
/// `out` needs no alignment; GemmArgs::b_packed_f32 does (64 bytes).
void PackBF32(const float* b, int64_t k, int64_t n, float* out);

/// PackBF32 of a B whose element (i, j) is b[i * b_rs + j * b_cs] (e.g. Gemm's transB).
void PackBF32Strided(const float* b, int64_t k, int64_t n, int64_t b_rs, int64_t b_cs, float* out);

/// A constant B packed once for GemmArgs::b_packed_f32 (kType kF32, float values),
/// b_packed_f16 (kF16) or b_packed (kBF16, uint16_t values), and kept while its source stays the
/// same (buffer, shape, strides): the weight of a kernel that packs it at its first run. Defined
/// in gemm_ops.cc (no ISA code).
template <GemmType kType>
class PackedWeight {
 public:
  using T = std::conditional_t<kType == GemmType::kF32, float, uint16_t>;
  /// The packed copy of `count` matrices k x n whose element (i, j) is
  /// b[c * offset + i * b_rs + j * b_cs] (a convolution's kernel taps: count = taps, offset 1),
  /// one after another, Elems(k, n) values apart (64-byte aligned); made at the first call for
  /// this source. nullptr when the memory cannot be had.
  const T* Get(const T* b, int64_t k, int64_t n, int64_t b_rs, int64_t b_cs, int64_t count = 1,
               int64_t offset = 0);
  /// Values of one packed k x n matrix.
  static int64_t Elems(int64_t k, int64_t n);

 private:
  struct Free {
    void operator()(T* p) const;
  };
  std::unique_ptr<T, Free> packed_;
  const T* source_ = nullptr;
  std::array<int64_t, 6> key_ = {};  // k, n, b_rs, b_cs, count, offset
};
using PackedWeightF32 = PackedWeight<GemmType::kF32>;
using PackedWeightF16 = PackedWeight<GemmType::kF16>;
using PackedWeightBf16 = PackedWeight<GemmType::kBF16>;

/// fp32 values of a whole packed fp32 B of k x n: ceil(n / 64) strips.
int64_t PackedBElemsF32(int64_t k, int64_t n);

/// Packs fp16 B [k, n] (row-major) for GemmArgs::b_packed_f16: ceil(n / 64) strips of
/// PackedBStripElemsF32(k) fp16 values ([k][64], zero padded past n). Each run widens a strip to
/// fp32 (exactly) with contiguous loads instead of gathering its rows from the whole matrix.
void PackBHalf(const uint16_t* b, int64_t k, int64_t n, uint16_t* out);

/// PackBHalf of a B whose element (i, j) is b[i * b_rs + j * b_cs] (e.g. Gemm's transB).
void PackBHalfStrided(const uint16_t* b, int64_t k, int64_t n, int64_t b_rs, int64_t b_cs,
                      uint16_t* out);

/// Runs the GEMM with OpenMP over the available threads. Needs the kAvx512 CPU features, and
/// kCpuAvx512Bf16 for GemmType::kBF16.
void GemmAvx512(const GemmArgs& args);

/// The fp32 micro-kernel GemmAvx512 runs for nearly every row of a large M, alone:
/// out[r][0..63] = sum over k of a[r * lda + k] * bp[k][0..63] for r < 6, bp a [k][64] strip
/// (64-byte aligned, as PackBF32 lays out one), out [6][64] (64-byte aligned). For the GEMM
/// benchmark's ceiling: the rate of the tile loop with its operands in L1, against which the
/// whole GEMM's rate can be read.
void GemmTileF32(int64_t k, const float* a, int64_t lda, const float* bp, float* out);

/// Whether the bf16 dot path runs on AMX tiles on this CPU (see gemm_avx512.cc); the results
/// then differ from the vdpbf16ps order above by the hardware's rounding within a pair.
bool GemmUsesAmx();

/// Whether a bf16 GEMM takes the vdpbf16ps ("dot") path: no subnormal among the `n` values.
bool Bf16DotPathAllowed(const uint16_t* values, int64_t n);

}  // namespace kiln::kernels::cpu::avx512
