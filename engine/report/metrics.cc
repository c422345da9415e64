#include "engine/report/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/cpu_features.h"
#include "engine/common/half.h"
#include "engine/common/status.h"
#include "engine/kernels/cpu/avx512/convert.h"
#include "engine/kernels/registry.h"
#include "engine/report/metrics_block.h"

namespace kiln::report {

namespace {

// Elements per block: a block of finite pairs takes the vectorized path (metrics_block.cc); a
// block holding a NaN or an Inf goes element by element.
constexpr int64_t kBlock = 4096;
// Tensors of fewer blocks are not worth waking the other threads for.
constexpr int64_t kParallelBlocks = 16;

// The AVX-512 conversions (bit-identical to engine/common/half.h) and error sums
// (metrics_block_avx512.cc) when the CPU has them.
struct Vector {
  bool avx512 = false, bf16 = false;
};
const Vector& VectorPaths() {
  static const Vector v = [] {
    const uint64_t f = DetectCpuFeatures();
    const uint64_t avx512 = kernels::IsaCpuFeatures(kernels::Isa::kAvx512);
    Vector out;
    out.avx512 = (f & avx512) == avx512;
    out.bf16 = out.avx512 && (f & kCpuAvx512Bf16) != 0;
    return out;
  }();
  return v;
}

// dst[i] = the float of 16-bit src[i] (fp16 or bf16), i < m.
void Widen(const uint16_t* src, bool half, float* dst, int64_t m) {
  const Vector& v = VectorPaths();
  if (half && v.avx512) return kernels::cpu::avx512::HalfToFloat(src, dst, m);
  if (!half && v.avx512) return kernels::cpu::avx512::Bf16ToFloat(src, dst, m);
  for (int64_t j = 0; j < m; ++j)
    dst[j] = half ? HalfBitsToFloat(src[j]) : BFloat16BitsToFloat(src[j]);
}

// dst[i] = src[i] rounded to fp16 or bf16 (to nearest even), i < m.
void Narrow(const float* src, bool half, uint16_t* dst, int64_t m) {
  const Vector& v = VectorPaths();
  if (half && v.avx512) return kernels::cpu::avx512::FloatToHalf(src, dst, m);
  if (!half && v.bf16) return kernels::cpu::avx512::FloatToBf16(src, dst, m);
  for (int64_t j = 0; j < m; ++j)
    dst[j] = half ? FloatToHalfBits(src[j]) : FloatToBFloat16Bits(src[j]);
}

// x[i] for i in [begin, begin + m) as floats: a pointer into x itself (f32) or into `buf`.
const float* FloatsOf(const ir::Tensor& x, int64_t begin, int64_t m, float* buf) {
  switch (x.dtype()) {
    case DataType::kF16:
    case DataType::kBF16:
      Widen(x.data<uint16_t>() + begin, x.dtype() == DataType::kF16, buf, m);
      return buf;
    case DataType::kF64:
      for (int64_t j = 0; j < m; ++j) buf[j] = static_cast<float>(x.data<double>()[begin + j]);
      return buf;
    default:
      return x.data<float>() + begin;
  }
}

// Reads x's blocks as floats (FloatsOf), for AddBlocks.
std::function<const float*(int64_t, int64_t, float*)> LoadOf(const ir::Tensor& x) {
  return [&x](int64_t begin, int64_t m, float* buf) { return FloatsOf(x, begin, m, buf); };
}

}  // namespace

void ErrorAccumulator::Add(const float* x, const float* ref, int64_t n, const Tolerance& tol) {
  AddBlocks(ref, n, tol, [x](int64_t begin, int64_t, float*) { return x + begin; });
}

// The blocks' sums are computed in parallel, each from zero, and merged in block order, so the
// result does not depend on the thread count. With `second`, its pairs (load2) are summed in the
// same pass, each block of `ref` read once for both: the same numbers as two separate calls.
void ErrorAccumulator::AddBlocks(const float* ref, int64_t n, const Tolerance& tol,
                                 const Load& load, ErrorAccumulator* second, const Load* load2) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int ways = second ? 2 : 1;
  std::vector<internal::BlockSums> sums(blocks * ways);
  std::vector<char> finite(blocks * ways, 0);
  const float atol = static_cast<float>(tol.atol), rtol = static_cast<float>(tol.rtol);
  const bool avx512 = VectorPaths().avx512;
#pragma omp parallel if (blocks >= kParallelBlocks)
  {
    std::vector<float> buf(2 * kBlock);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t begin = b * kBlock, m = std::min(kBlock, n - begin);
      const float* x[2];
      for (int w = 0; w < ways; ++w) {
        x[w] = (w == 0 ? load : *load2)(begin, m, buf.data() + w * kBlock);
      }
      if (avx512) {
        bool ok[2];
        internal::AddFiniteBlocksAvx512(x, ways, ref + begin, m, atol, rtol, &sums[b * ways], ok);
        for (int w = 0; w < ways; ++w) finite[b * ways + w] = ok[w] ? 1 : 0;
        continue;
      }
      for (int w = 0; w < ways; ++w) {
        finite[b * ways + w] =
            internal::AddFiniteBlock(x[w], ref + begin, m, atol, rtol, sums[b * ways + w]) ? 1 : 0;
      }
    }
  }
  for (int w = 0; w < ways; ++w) {
    ErrorAccumulator& acc = w == 0 ? *this : *second;
    const Load& ld = w == 0 ? load : *load2;
    std::vector<float> buf;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t begin = b * kBlock, m = std::min(kBlock, n - begin);
      if (!finite[b * ways + w]) {
        buf.resize(kBlock);
        const float* x = ld(begin, m, buf.data());
        for (int64_t i = 0; i < m; ++i) acc.AddOne(x[i], ref[begin + i], tol);
        continue;
      }
      const internal::BlockSums& s = sums[b * ways + w];
      acc.elements_ += m;
      acc.finite_ += m;
      acc.outside_ += s.outside;
      acc.max_abs_ = std::max<double>(acc.max_abs_, s.max_abs);
      acc.max_rel_ = std::max<double>(acc.max_rel_, s.max_rel);
      acc.sum_abs_ += s.sum_abs;
      acc.xx_ += s.xx;
      acc.rr_ += s.rr;
      acc.ee_ += s.ee;
    }
  }
}

void ErrorAccumulator::Merge(const ErrorAccumulator& o) {
  elements_ += o.elements_;
  finite_ += o.finite_;
  nan_ += o.nan_;
  inf_ += o.inf_;
  ref_nan_ += o.ref_nan_;
  ref_inf_ += o.ref_inf_;
  nonfinite_mismatch_ += o.nonfinite_mismatch_;
  outside_ += o.outside_;
  max_abs_ = std::max(max_abs_, o.max_abs_);
  max_rel_ = std::max(max_rel_, o.max_rel_);
  sum_abs_ += o.sum_abs_;
  xx_ += o.xx_;
  rr_ += o.rr_;
  ee_ += o.ee_;
}

void ErrorAccumulator::AddOne(float xv, float rv, const Tolerance& tol) {
  const double r = rv;
  const double v = xv;
  ++elements_;
  if (!std::isfinite(r)) {
    // A reference that is itself NaN or Inf (the fp32 model overflows, divides 0 by 0, ...) is
    // still something to compare with: the engine must reproduce it. Inf == Inf compares the
    // sign too; NaN payloads and signs do not matter.
    const bool nan = std::isnan(r);
    ++(nan ? ref_nan_ : ref_inf_);
    if (nan ? !std::isnan(v) : v != r) {
      ++nonfinite_mismatch_;
      ++outside_;
    }
    return;
  }
  if (!std::isfinite(v)) {
    if (std::isnan(v)) {
      ++nan_;
    } else {
      ++inf_;
    }
    ++outside_;
    return;
  }
  ++finite_;
  const double e = std::fabs(v - r);
  const double ar = std::fabs(r);
  max_abs_ = std::max(max_abs_, e);
  sum_abs_ += e;
  max_rel_ = std::max(max_rel_, e / std::max(ar, 1e-6));
  if (e > tol.atol + tol.rtol * ar) ++outside_;
  xx_ += v * v;
  rr_ += r * r;
  ee_ += e * e;
}

namespace {

// Why `x` cannot be compared with `ref` (f32, as many elements), or OK.
absl::Status CheckComparable(const ir::Tensor& x, const ir::Tensor& ref) {
  if (ref.dtype() != DataType::kF32 || ref.num_elements() != x.num_elements()) {
    return absl::InternalError("compared tensors differ in dtype or size");
  }
  if (!IsFloating(x.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot compare a ", DataTypeOnnxName(x.dtype()), " tensor as floats"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ErrorAccumulator::AddTensor(const ir::Tensor& x, const ir::Tensor& ref,
                                         const Tolerance& tol) {
  RETURN_IF_ERROR(CheckComparable(x, ref));
  AddBlocks(ref.data<float>(), ref.num_elements(), tol, LoadOf(x));
  return absl::OkStatus();
}

absl::Status ErrorAccumulator::AddTensorPair(const ir::Tensor& x, ErrorAccumulator& second,
                                             const ir::Tensor& x2, const ir::Tensor& ref,
                                             const Tolerance& tol) {
  RETURN_IF_ERROR(CheckComparable(x, ref));
  RETURN_IF_ERROR(CheckComparable(x2, ref));
  const Load load2 = LoadOf(x2);
  AddBlocks(ref.data<float>(), ref.num_elements(), tol, LoadOf(x), &second, &load2);
  return absl::OkStatus();
}

v1::ErrorStats ErrorAccumulator::Finish() const {
  v1::ErrorStats s;
  s.set_elements(elements_);
  s.set_max_abs(max_abs_);
  s.set_mean_abs(finite_ > 0 ? sum_abs_ / static_cast<double>(finite_) : 0.0);
  s.set_max_rel(max_rel_);
  if (xx_ == 0 && rr_ == 0) {
    s.set_cosine(1.0);
  } else if (xx_ == 0 || rr_ == 0) {
    s.set_cosine(0.0);
  } else {
    // x.r from x.x + r.r - (x - r).(x - r): near a match (cosine ~1) the error sum carries the
    // difference the dot product would lose to cancellation. Clamped: rounding in the sums may
    // put an exact match a hair above 1.
    const double dot = (xx_ + rr_ - ee_) / 2;
    s.set_cosine(std::clamp(dot / (std::sqrt(xx_) * std::sqrt(rr_)), -1.0, 1.0));
  }
  if (ee_ == 0) {
    s.set_snr_db(std::numeric_limits<double>::infinity());
  } else {
    s.set_snr_db(10.0 * std::log10(rr_ / ee_));
  }
  s.set_nan_count(nan_);
  s.set_inf_count(inf_);
  s.set_ref_nan_count(ref_nan_);
  s.set_ref_inf_count(ref_inf_);
  s.set_nonfinite_mismatch_count(nonfinite_mismatch_);
  s.set_fraction_outside(elements_ > 0 ? static_cast<double>(outside_) / elements_ : 0.0);
  return s;
}

int64_t NonFiniteErrors(const v1::ErrorStats& s) {
  return s.nan_count() + s.inf_count() + s.nonfinite_mismatch_count();
}

double MaxAbsFinite(const float* ref, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  float m = 0;  // max is exact in any order
#pragma omp parallel for schedule(static) reduction(max : m) if (blocks >= kParallelBlocks)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock;
    m = std::max(m, internal::MaxAbsOfFinite(ref + begin, std::min(kBlock, n - begin)));
  }
  return m;
}

absl::StatusOr<ir::Tensor> ToF32(const ir::Tensor& t) {
  // Sequences and optionals run at their authored types in both runs: nothing to convert (and
  // no elements of their own to compare: num_elements() is 0).
  if (t.dtype() == DataType::kF32 || t.kind() != ir::TensorKind::kDense) return t;
  if (!IsFloating(t.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot compare a ", DataTypeOnnxName(t.dtype()), " tensor as floats"));
  }
  ASSIGN_OR_RETURN(ir::Tensor out, ir::Tensor::AllocateUninitialized(DataType::kF32, t.dims()));
  float* o = out.data<float>();
  const int64_t n = t.num_elements();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks >= kParallelBlocks)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock;
    FloatsOf(t, begin, std::min(kBlock, n - begin), o + begin);
  }
  return out;
}

absl::StatusOr<ir::Tensor> FromF32(const ir::Tensor& t, DataType dtype) {
  if (dtype == DataType::kF32 || t.kind() != ir::TensorKind::kDense) return t;
  if (dtype != DataType::kF16 && dtype != DataType::kBF16 && dtype != DataType::kF64) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot convert floats to ", DataTypeOnnxName(dtype)));
  }
  ASSIGN_OR_RETURN(ir::Tensor out, ir::Tensor::AllocateUninitialized(dtype, t.dims()));
  const float* x = t.data<float>();
  const int64_t n = t.num_elements();
  const bool parallel = n >= kParallelBlocks * kBlock;
  if (dtype == DataType::kF64) {
    double* o = out.data<double>();
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t i = 0; i < n; ++i) o[i] = x[i];
    return out;
  }
  const bool half = dtype == DataType::kF16;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, m = std::min(kBlock, n - begin);
    Narrow(x + begin, half, out.data<uint16_t>() + begin, m);
  }
  return out;
}

absl::Status RoundF32InPlace(ir::Tensor& t, DataType dtype) {
  if (t.dtype() != DataType::kF32) {
    return absl::InternalError("rounding in place needs an f32 tensor");
  }
  if (dtype != DataType::kF16 && dtype != DataType::kBF16) return absl::OkStatus();  // exact
  const bool half = dtype == DataType::kF16;
  float* x = t.data<float>();
  const int64_t n = t.num_elements();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks >= kParallelBlocks)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, m = std::min(kBlock, n - begin);
    uint16_t narrow[kBlock];
    Narrow(x + begin, half, narrow, m);
    Widen(narrow, half, x + begin, m);
  }
  return absl::OkStatus();
}

absl::StatusOr<ir::Tensor> RoundedF32(const ir::Tensor& t, DataType dtype) {
  if (!IsFloating(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot convert floats to ", DataTypeOnnxName(dtype)));
  }
  ASSIGN_OR_RETURN(ir::Tensor f, ToF32(t));
  // Already representable: the dtype itself, or fp32 and fp64, which hold every fp32 value.
  if (t.dtype() == dtype || (dtype != DataType::kF16 && dtype != DataType::kBF16)) return f;
  if (f.raw_data() == t.raw_data()) f = f.Clone();  // rounded in a buffer of its own
  RETURN_IF_ERROR(RoundF32InPlace(f, dtype));
  return f;
}

}  // namespace kiln::report
