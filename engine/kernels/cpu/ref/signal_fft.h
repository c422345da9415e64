// The fast Fourier transform behind the DFT and STFT reference kernels (signal_dft.cc): one plan
// per transform length, in double precision.
#pragma once

#include <complex>
#include <cstdint>
#include <vector>

namespace kiln::kernels::cpu::ref::signal {

using Complex = std::complex<double>;

/// An unnormalised complex DFT of one length n >= 1, computed in double:
/// radix-2 for powers of two, direct sums for short other lengths, and Bluestein's chirp-z
/// transform (three power-of-two FFTs of at least 2n - 1 points) for longer ones, so every
/// length costs O(n log n). Immutable once built: threads may share a plan, each with its own
/// scratch.
class FftPlan {
 public:
  /// The longest length a kernel may ask for: 16M points (17 minutes of 16 kHz audio), where a
  /// plan and one line's buffers already take about 1.5 GB.
  static constexpr int64_t kMaxLength = int64_t{1} << 24;

  explicit FftPlan(int64_t n);

  int64_t size() const { return n_; }
  /// Complex values of scratch that Transform needs.
  int64_t scratch_size() const { return scratch_; }

  /// In place: x[k] = sum_j x[j] exp(-+2 pi i j k / n), the minus sign forward, plus when
  /// `inverse` (no 1/n factor). `scratch` holds scratch_size() values.
  void Transform(Complex* x, bool inverse, Complex* scratch) const;

 private:
  enum class Kind { kRadix2, kDirect, kBluestein };

  int64_t n_;
  Kind kind_;
  int64_t scratch_ = 0;
  // kRadix2: exp(-2 pi i k / n) for k < n / 2. kDirect: the same for k < n.
  std::vector<Complex> twiddles_;
  // kBluestein: the power-of-two length m >= 2n - 1 and its twiddles, the chirp
  // exp(-pi i k^2 / n) for k < n, and the FFT of the conjugate chirp's circular filter.
  int64_t m_ = 0;
  std::vector<Complex> m_twiddles_;
  std::vector<Complex> chirp_;
  std::vector<Complex> filter_;
};

}  // namespace kiln::kernels::cpu::ref::signal
