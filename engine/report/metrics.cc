#include "engine/report/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/half.h"
#include "engine/common/status.h"
#include "engine/report/metrics_block.h"

namespace kiln::report {

void ErrorAccumulator::Add(const float* x, const float* ref, int64_t n, const Tolerance& tol) {
  // Blocks of finite pairs take the vectorized path; a block holding a NaN or an Inf goes
  // element by element. Sums are kept in double across blocks.
  constexpr int64_t kBlock = 4096;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    if (internal::AllFinite(x + b, ref + b, m)) {
      internal::BlockSums s;
      s.max_abs = static_cast<float>(max_abs_);
      s.max_rel = static_cast<float>(max_rel_);
      internal::AddFiniteBlock(x + b, ref + b, m, static_cast<float>(tol.atol),
                               static_cast<float>(tol.rtol), s);
      elements_ += m;
      finite_ += m;
      outside_ += s.outside;
      max_abs_ = std::max<double>(max_abs_, s.max_abs);
      max_rel_ = std::max<double>(max_rel_, s.max_rel);
      sum_abs_ += s.sum_abs;
      dot_ += s.dot;
      xx_ += s.xx;
      rr_ += s.rr;
      ee_ += s.ee;
      continue;
    }
    for (int64_t i = b; i < b + m; ++i) AddOne(x[i], ref[i], tol);
  }
}

void ErrorAccumulator::AddOne(float xv, float rv, const Tolerance& tol) {
  const double r = rv;
  if (!std::isfinite(r)) return;
  ++elements_;
  const double v = xv;
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
  dot_ += v * r;
  xx_ += v * v;
  rr_ += r * r;
  ee_ += e * e;
}

absl::Status ErrorAccumulator::AddTensor(const ir::Tensor& x, const ir::Tensor& ref,
                                         const Tolerance& tol) {
  const int64_t n = x.num_elements();
  if (ref.dtype() != DataType::kF32 || ref.num_elements() != n) {
    return absl::InternalError("compared tensors differ in dtype or size");
  }
  const float* r = ref.data<float>();
  if (x.dtype() == DataType::kF32) {
    Add(x.data<float>(), r, n, tol);
    return absl::OkStatus();
  }
  constexpr int64_t kChunk = 1024;
  float buf[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    switch (x.dtype()) {
      case DataType::kF16:
        for (int64_t j = 0; j < m; ++j) buf[j] = HalfBitsToFloat(x.data<uint16_t>()[i + j]);
        break;
      case DataType::kBF16:
        for (int64_t j = 0; j < m; ++j) buf[j] = BFloat16BitsToFloat(x.data<uint16_t>()[i + j]);
        break;
      case DataType::kF64:
        for (int64_t j = 0; j < m; ++j) buf[j] = static_cast<float>(x.data<double>()[i + j]);
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("cannot compare a ", DataTypeOnnxName(x.dtype()), " tensor as floats"));
    }
    Add(buf, r + i, m, tol);
  }
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
    // Clamped: rounding in the sums may put an exact match a hair above 1.
    s.set_cosine(std::clamp(dot_ / (std::sqrt(xx_) * std::sqrt(rr_)), -1.0, 1.0));
  }
  if (ee_ == 0) {
    s.set_snr_db(std::numeric_limits<double>::infinity());
  } else {
    s.set_snr_db(10.0 * std::log10(rr_ / ee_));
  }
  s.set_nan_count(nan_);
  s.set_inf_count(inf_);
  s.set_fraction_outside(elements_ > 0 ? static_cast<double>(outside_) / elements_ : 0.0);
  return s;
}

double MaxAbsFinite(const float* ref, int64_t n) { return internal::MaxAbsOfFinite(ref, n); }

absl::StatusOr<ir::Tensor> ToF32(const ir::Tensor& t) {
  if (t.dtype() == DataType::kF32) return t;
  ASSIGN_OR_RETURN(ir::Tensor out, ir::Tensor::AllocateUninitialized(DataType::kF32, t.dims()));
  float* o = out.data<float>();
  const int64_t n = t.num_elements();
  switch (t.dtype()) {
    case DataType::kF16:
      for (int64_t i = 0; i < n; ++i) o[i] = HalfBitsToFloat(t.data<uint16_t>()[i]);
      break;
    case DataType::kBF16:
      for (int64_t i = 0; i < n; ++i) o[i] = BFloat16BitsToFloat(t.data<uint16_t>()[i]);
      break;
    case DataType::kF64:
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(t.data<double>()[i]);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("cannot compare a ", DataTypeOnnxName(t.dtype()), " tensor as floats"));
  }
  return out;
}

absl::StatusOr<ir::Tensor> FromF32(const ir::Tensor& t, DataType dtype) {
  if (dtype == DataType::kF32) return t;
  ASSIGN_OR_RETURN(ir::Tensor out, ir::Tensor::AllocateUninitialized(dtype, t.dims()));
  const float* x = t.data<float>();
  const int64_t n = t.num_elements();
  switch (dtype) {
    case DataType::kF16:
      for (int64_t i = 0; i < n; ++i) out.data<uint16_t>()[i] = FloatToHalfBits(x[i]);
      break;
    case DataType::kBF16:
      for (int64_t i = 0; i < n; ++i) out.data<uint16_t>()[i] = FloatToBFloat16Bits(x[i]);
      break;
    case DataType::kF64:
      for (int64_t i = 0; i < n; ++i) out.data<double>()[i] = x[i];
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("cannot convert floats to ", DataTypeOnnxName(dtype)));
  }
  return out;
}

}  // namespace kiln::report
