// FftPlan (signal_fft.h): radix-2, direct and Bluestein complex DFTs in double precision.
#include "engine/kernels/cpu/ref/signal_fft.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kiln::kernels::cpu::ref::signal {
namespace {

// Lengths up to this that are not powers of two are summed directly: n^2 complex products cost
// less there than Bluestein's three FFTs of 2n - 1 points or more.
constexpr int64_t kDirectMax = 32;

bool IsPowerOfTwo(int64_t n) { return (n & (n - 1)) == 0; }

// exp(-2 pi i k / n) for k < count; k < n keeps the angle in (-2 pi, 0], where cos and sin are
// correctly rounded to within an ulp or so.
std::vector<Complex> Twiddles(int64_t n, int64_t count) {
  std::vector<Complex> tw(count);
  for (int64_t k = 0; k < count; ++k) {
    const double angle = -2.0 * std::numbers::pi * static_cast<double>(k) / static_cast<double>(n);
    tw[k] = Complex(std::cos(angle), std::sin(angle));
  }
  return tw;
}

// In-place iterative radix-2 FFT of a power-of-two length n; `tw` holds exp(-2 pi i k / n) for
// k < n / 2, conjugated on the fly for the inverse.
void Radix2(Complex* x, int64_t n, const std::vector<Complex>& tw, bool inverse) {
  for (int64_t i = 1, j = 0; i < n; ++i) {  // bit-reversal permutation
    int64_t bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) std::swap(x[i], x[j]);
  }
  for (int64_t len = 2; len <= n; len <<= 1) {
    const int64_t half = len / 2, step = n / len;
    for (int64_t i = 0; i < n; i += len) {
      for (int64_t k = 0; k < half; ++k) {
        const Complex w = inverse ? std::conj(tw[k * step]) : tw[k * step];
        const Complex u = x[i + k];
        const Complex v = x[i + k + half] * w;
        x[i + k] = u + v;
        x[i + k + half] = u - v;
      }
    }
  }
}

}  // namespace

FftPlan::FftPlan(int64_t n) : n_(std::max<int64_t>(n, 1)) {
  if (IsPowerOfTwo(n_)) {
    kind_ = Kind::kRadix2;
    twiddles_ = Twiddles(n_, n_ / 2);
    return;
  }
  if (n_ <= kDirectMax) {
    kind_ = Kind::kDirect;
    twiddles_ = Twiddles(n_, n_);
    scratch_ = n_;
    return;
  }
  // Bluestein: 2jk = j^2 + k^2 - (k - j)^2 turns the DFT into a circular convolution of
  // x[j] c[j] with conj(c) (c[t] = exp(-pi i t^2 / n)), done by FFTs of a power-of-two m.
  kind_ = Kind::kBluestein;
  m_ = 1;
  while (m_ < 2 * n_ - 1) m_ <<= 1;
  m_twiddles_ = Twiddles(m_, m_ / 2);
  chirp_.resize(n_);
  for (int64_t k = 0; k < n_; ++k) {
    // t^2 mod 2n first: the angle stays in [0, 2 pi) however large k grows, so its error does not.
    const int64_t r = (k * k) % (2 * n_);
    const double angle = -std::numbers::pi * static_cast<double>(r) / static_cast<double>(n_);
    chirp_[k] = Complex(std::cos(angle), std::sin(angle));
  }
  filter_.assign(m_, Complex(0, 0));
  filter_[0] = std::conj(chirp_[0]);
  for (int64_t t = 1; t < n_; ++t) filter_[t] = filter_[m_ - t] = std::conj(chirp_[t]);
  Radix2(filter_.data(), m_, m_twiddles_, false);
  scratch_ = m_;
}

void FftPlan::Transform(Complex* x, bool inverse, Complex* scratch) const {
  switch (kind_) {
    case Kind::kRadix2:
      Radix2(x, n_, twiddles_, inverse);
      return;
    case Kind::kDirect: {
      for (int64_t k = 0; k < n_; ++k) {
        Complex sum(0, 0);
        int64_t idx = 0;  // j * k mod n, stepped without a product
        for (int64_t j = 0; j < n_; ++j) {
          sum += x[j] * (inverse ? std::conj(twiddles_[idx]) : twiddles_[idx]);
          idx += k;
          if (idx >= n_) idx -= n_;
        }
        scratch[k] = sum;
      }
      std::copy(scratch, scratch + n_, x);
      return;
    }
    case Kind::kBluestein: {
      // The inverse is the conjugate of the forward transform of the conjugate.
      for (int64_t j = 0; j < n_; ++j) {
        scratch[j] = (inverse ? std::conj(x[j]) : x[j]) * chirp_[j];
      }
      std::fill(scratch + n_, scratch + m_, Complex(0, 0));
      Radix2(scratch, m_, m_twiddles_, false);
      for (int64_t i = 0; i < m_; ++i) scratch[i] *= filter_[i];
      Radix2(scratch, m_, m_twiddles_, true);
      const double scale = 1.0 / static_cast<double>(m_);
      for (int64_t k = 0; k < n_; ++k) {
        const Complex v = scratch[k] * chirp_[k] * scale;
        x[k] = inverse ? std::conj(v) : v;
      }
      return;
    }
  }
}

}  // namespace kiln::kernels::cpu::ref::signal
