// Error metrics of the accuracy report (DESIGN.md §7), accumulated element by element so a
// tensor's error over many samples needs no copy of the samples.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/types/span.h"
#include "engine/ir/tensor.h"
#include "kiln/v1/report.pb.h"

namespace kiln::report {

/// Tolerances of the verdict: an element passes when |x - ref| <= atol + rtol * |ref|.
struct Tolerance {
  // Defaults sized for reduced-precision engines: one fp16 rounding is a relative error of at
  // most 2^-11 (~4.9e-4), and an output of a network of a few dozen layers carries a few dozen
  // such roundings, so 1e-2 relative (and 1e-2 absolute for values near zero) separates normal
  // fp16 drift from a real accuracy problem (an overflow, a lost mantissa). bf16 (2^-8 per
  // rounding) usually needs --rtol 5e-2.
  double atol = 1e-2;
  double rtol = 1e-2;
};

/// Streams (x, ref) pairs of one tensor and produces its ErrorStats.
class ErrorAccumulator {
 public:
  /// Adds `n` pairs. A non-finite x where the reference is finite counts as NaN/Inf and as
  /// outside. A non-finite reference element (counted as reference NaN/Inf) matches only the
  /// same value in x (NaN for NaN, an Inf of the same sign); any other x is a non-finite
  /// mismatch and counts as outside. Only finite pairs enter max_abs, cosine and the other sums.
  void Add(const float* x, const float* ref, int64_t n, const Tolerance& tol);
  /// Adds every element of `x` (any floating dtype, converted in small chunks without a copy
  /// of the tensor) against `ref` (f32, same element count). Large tensors are split over all
  /// threads; the sums are merged in a fixed order, so the result does not depend on how many.
  absl::Status AddTensor(const ir::Tensor& x, const ir::Tensor& ref, const Tolerance& tol);
  /// AddTensor(x, ref) here and AddTensor(x2, ref) into `second` in one pass over `ref`.
  absl::Status AddTensorPair(const ir::Tensor& x, ErrorAccumulator& second, const ir::Tensor& x2,
                             const ir::Tensor& ref, const Tolerance& tol);
  /// Adds what `other` gathered (counts and sums added, maxima kept).
  void Merge(const ErrorAccumulator& other);
  v1::ErrorStats Finish() const;
  int64_t elements() const { return elements_; }

 private:
  void AddOne(float x, float ref, const Tolerance& tol);
  using Load = std::function<const float*(int64_t, int64_t, float*)>;
  // Adds the n pairs (load(begin, m, buf) -> x[begin, begin + m), into buf if it must convert);
  // with `second`, also its pairs (load2) into it.
  void AddBlocks(const float* ref, int64_t n, const Tolerance& tol, const Load& load,
                 ErrorAccumulator* second = nullptr, const Load* load2 = nullptr);

  int64_t elements_ = 0;
  int64_t finite_ = 0;
  int64_t nan_ = 0, inf_ = 0, outside_ = 0;
  int64_t ref_nan_ = 0, ref_inf_ = 0, nonfinite_mismatch_ = 0;
  double max_abs_ = 0, sum_abs_ = 0, max_rel_ = 0;
  double xx_ = 0, rr_ = 0, ee_ = 0;  // sums of x^2, ref^2 and (x - ref)^2
};

/// Elements of `s` whose non-finite values disagree with the reference: NaN/Inf where the
/// reference is finite, plus non-finite reference elements that x does not reproduce. Zero for a
/// tensor whose NaN/Inf (if any) are exactly the reference's.
int64_t NonFiniteErrors(const v1::ErrorStats& s);

/// Max |ref| over the finite elements.
double MaxAbsFinite(const float* ref, int64_t n);

/// `t` (any floating dtype) as an f32 tensor: `t` itself when already f32, else a converted copy.
absl::StatusOr<ir::Tensor> ToF32(const ir::Tensor& t);

/// `t` (f32) converted to floating `dtype` (round to nearest even), or `t` itself when f32.
absl::StatusOr<ir::Tensor> FromF32(const ir::Tensor& t, DataType dtype);

/// `t` (f32, its buffer the caller's alone) rounded to floating `dtype` in place: RoundedF32
/// without a copy.
absl::Status RoundF32InPlace(ir::Tensor& t, DataType dtype);

/// `t` (any floating dtype) rounded to floating `dtype` and held as f32: the values a kernel
/// at that precision holds. Large tensors are converted by all threads.
absl::StatusOr<ir::Tensor> RoundedF32(const ir::Tensor& t, DataType dtype);

}  // namespace kiln::report
