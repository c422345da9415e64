// Tests of the signal reference kernels: DFT (opsets 17 and 20), STFT, the window ops and
// MelWeightMatrix. Transforms are checked against a direct O(n^2) sum in long double over the
// same (float-rounded) inputs, for lengths well beyond the conformance data: powers of two,
// primes and other composites (the FFT's three code paths), 16000-sample signals.
#include <cmath>
#include <complex>
#include <numbers>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

// NodeSpec literals leave the trailing fields to their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace kiln::testing {
namespace {

using ir::OpType;
using ::testing::ElementsAre;
using LComplex = std::complex<long double>;

// A deterministic test signal: scale * sin(a i + b), rounded to float.
std::vector<float> Wave(int64_t n, double a, double b, double scale = 1.0) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * std::sin(a * i + b));
  return v;
}

// The DFT of x (zero-padded or cut to n points) by the defining sum, in long double; the
// inverse has the +i sign and the 1/n factor.
std::vector<LComplex> DirectDft(const std::vector<LComplex>& x, int64_t n, bool inverse = false) {
  std::vector<LComplex> out(n);
  const long double sign = inverse ? 1.0L : -1.0L;
  for (int64_t k = 0; k < n; ++k) {
    LComplex sum = 0;
    for (int64_t j = 0; j < n && j < static_cast<int64_t>(x.size()); ++j) {
      const long double angle =
          sign * 2.0L * std::numbers::pi_v<long double> * static_cast<long double>((j * k) % n) / n;
      sum += x[j] * LComplex(std::cos(angle), std::sin(angle));
    }
    out[k] = inverse ? sum / static_cast<long double>(n) : sum;
  }
  return out;
}

// Interleaved (re, im) floats as complex values.
std::vector<LComplex> AsComplex(const std::vector<float>& v, int comps) {
  std::vector<LComplex> out(v.size() / comps);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = LComplex(v[i * comps], comps == 2 ? v[i * comps + 1] : 0.0f);
  }
  return out;
}

long double MaxAbs(const std::vector<LComplex>& v) {
  long double m = 0;
  for (const LComplex& c : v) m = std::max(m, std::abs(c));
  return m;
}

// Expects interleaved float results `got` (complex pairs, or reals when `comps` is 1) within
// `tol` of `want` element-wise.
void ExpectClose(const std::vector<float>& got, const std::vector<LComplex>& want, int comps,
                 long double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size() * comps) << what;
  int bad = 0;
  for (size_t k = 0; k < want.size() && bad < 5; ++k) {
    const long double re = got[k * comps], im = comps == 2 ? got[k * comps + 1] : 0.0L;
    if (std::abs(re - want[k].real()) > tol ||
        (comps == 2 && std::abs(im - want[k].imag()) > tol)) {
      ADD_FAILURE() << what << " bin " << k << ": got (" << re << ", " << im << "), want "
                    << want[k].real() << ", " << want[k].imag() << ") tol " << tol;
      ++bad;
    }
  }
}

// The outputs are fp32 roundings of double-precision FFTs: each value is within half an fp32 ulp
// (6e-8 relative) of the double result, whose own error is about 1e-16 * log2(n) of the
// largest magnitude. 1e-6 of the largest magnitude bounds both with room, and still fails on
// any wrong twiddle, sign or index (errors of the order of the values themselves).
constexpr long double kRelTol = 1e-6L;

NodeSpec Dft20(ir::Tensor x, std::vector<std::pair<std::string, ir::Attribute>> attrs = {},
               ir::Tensor dft_length = {}, ir::Tensor axis = {}) {
  return {OpType::kDFT,
          std::move(attrs),
          {std::move(x), std::move(dft_length), std::move(axis)},
          1,
          20};
}

ir::Tensor Scalar(int64_t v) { return MakeInt64({}, {v}); }

// ---------------------------------------------------------------- DFT

TEST(DftTest, LengthOneIsTheIdentity) {
  EXPECT_THAT(ToFloats(RunNodeOk0(Dft20(MakeFloat({1, 1, 2}, {3, -2})))), ElementsAre(3, -2));
  EXPECT_THAT(ToFloats(RunNodeOk0(Dft20(MakeFloat({1, 1, 2}, {3, -2}), {{"inverse", IntAttr(1)}}))),
              ElementsAre(3, -2));
  ir::Tensor y = RunNodeOk0(Dft20(MakeFloat({1, 1, 1}, {5})));  // real in, complex out
  EXPECT_THAT(y.dims(), ElementsAre(1, 1, 2));
  EXPECT_THAT(ToFloats(y), ElementsAre(5, 0));
}

TEST(DftTest, MatchesTheDirectSumForManyLengths) {
  // Powers of two (radix 2), short others (direct sums), primes and composites (Bluestein).
  for (int64_t n : {2, 3, 7, 16, 31, 97, 400, 1009, 1024}) {
    for (int comps : {1, 2}) {
      const std::vector<float> x = Wave(2 * n * comps, 0.731, 0.2);
      ir::Tensor y = RunNodeOk0(Dft20(MakeFloat({2, n, comps}, x)));
      ASSERT_THAT(y.dims(), ElementsAre(2, n, 2));
      const std::vector<float> got = ToFloats(y);
      for (int b = 0; b < 2; ++b) {
        const std::vector<float> xb(x.begin() + b * n * comps, x.begin() + (b + 1) * n * comps);
        const std::vector<LComplex> want = DirectDft(AsComplex(xb, comps), n);
        const std::vector<float> gb(got.begin() + b * n * 2, got.begin() + (b + 1) * n * 2);
        ExpectClose(gb, want, 2, kRelTol * MaxAbs(want),
                    "n=" + std::to_string(n) + " comps=" + std::to_string(comps));
      }
    }
  }
}

TEST(DftTest, AxisAsAttributeOrInput) {
  // [2, 5, 3, 2]: transform along axis 1, for each of the 2 x 3 lines.
  const std::vector<float> x = Wave(2 * 5 * 3 * 2, 0.37, 0.9);
  auto check = [&](const ir::Tensor& y, const std::string& what) {
    ASSERT_THAT(y.dims(), ElementsAre(2, 5, 3, 2)) << what;
    const std::vector<float> got = ToFloats(y);
    for (int b = 0; b < 2; ++b) {
      for (int i = 0; i < 3; ++i) {
        std::vector<LComplex> line, got_line;
        std::vector<float> g;
        for (int j = 0; j < 5; ++j) {
          const int at = ((b * 5 + j) * 3 + i) * 2;
          line.emplace_back(x[at], x[at + 1]);
          g.push_back(got[at]);
          g.push_back(got[at + 1]);
        }
        const std::vector<LComplex> want = DirectDft(line, 5);
        ExpectClose(g, want, 2, kRelTol * MaxAbs(want), what);
      }
    }
  };
  // Opset 17: the attribute; opset 20: input 2, positive or negative.
  check(RunNodeOk0({OpType::kDFT, {{"axis", IntAttr(1)}}, {MakeFloat({2, 5, 3, 2}, x)}, 1, 17}),
        "opset 17 axis=1");
  check(RunNodeOk0(Dft20(MakeFloat({2, 5, 3, 2}, x), {}, {}, Scalar(1))), "opset 20 axis 1");
  check(RunNodeOk0(Dft20(MakeFloat({2, 5, 3, 2}, x), {}, {}, Scalar(-3))), "opset 20 axis -3");
}

TEST(DftTest, InverseUndoesForward) {
  const int64_t n = 1000;
  const std::vector<float> x = Wave(n * 2, 1.37, 0.4);
  ir::Tensor spectrum = RunNodeOk0(Dft20(MakeFloat({1, n, 2}, x)));
  ir::Tensor back = RunNodeOk0(Dft20(spectrum, {{"inverse", IntAttr(1)}}));
  // The spectrum was rounded to fp32 (6e-8 of each bin); the inverse averages those errors over
  // n bins, so the round trip stays within 1e-6 of the signal's magnitude (1).
  ExpectClose(ToFloats(back), AsComplex(x, 2), 2, 1e-6L, "round trip");
}

TEST(DftTest, OnesidedForwardAndInverse) {
  for (int64_t n : {16, 15}) {
    const std::vector<float> x = Wave(n, 0.9, 0.1);
    ir::Tensor half = RunNodeOk0(Dft20(MakeFloat({1, n, 1}, x), {{"onesided", IntAttr(1)}}));
    ASSERT_THAT(half.dims(), ElementsAre(1, n / 2 + 1, 2));
    std::vector<LComplex> want = DirectDft(AsComplex(x, 1), n);
    want.resize(n / 2 + 1);
    ExpectClose(ToFloats(half), want, 2, kRelTol * MaxAbs(want), "rfft n=" + std::to_string(n));
    // IRFFT: the default length is 2 (bins - 1), right for even n; odd n must be given.
    const NodeSpec irfft = Dft20(half, {{"onesided", IntAttr(1)}, {"inverse", IntAttr(1)}},
                                 n % 2 == 0 ? ir::Tensor() : Scalar(n));
    ir::Tensor back = RunNodeOk0(irfft);
    ASSERT_THAT(back.dims(), ElementsAre(1, n, 1));
    ExpectClose(ToFloats(back), AsComplex(x, 1), 1, 1e-6L, "irfft n=" + std::to_string(n));
  }
}

TEST(DftTest, DftLengthPadsOrCuts) {
  const std::vector<float> x = {1, -2, 3, 0.5f, 4};
  for (int64_t n : {8, 3}) {
    ir::Tensor y = RunNodeOk0(Dft20(MakeFloat({1, 5, 1}, x), {}, Scalar(n)));
    ASSERT_THAT(y.dims(), ElementsAre(1, n, 2));
    const std::vector<LComplex> want = DirectDft(AsComplex(x, 1), n);  // pads or cuts x
    ExpectClose(ToFloats(y), want, 2, kRelTol * MaxAbs(want), "dft_length " + std::to_string(n));
  }
}

TEST(DftTest, HalfPrecision) {
  const std::vector<float> x = Wave(64, 0.3, 0.0);
  ir::Tensor xh = MakeHalf({1, 64, 1}, x);
  ir::Tensor y = RunNodeOk0(Dft20(xh));
  EXPECT_EQ(y.dtype(), DataType::kF16);
  const std::vector<LComplex> want = DirectDft(AsComplex(ToFloats(xh), 1), 64);
  // Each output is rounded once to fp16: within 2^-11 (4.9e-4) of its magnitude, so 1e-3 of
  // the largest.
  ExpectClose(ToFloats(y), want, 2, 1e-3L * MaxAbs(want), "fp16");
}

TEST(DftTest, Errors) {
  const auto code = absl::StatusCode::kInvalidArgument;
  ExpectNodeError(Dft20(MakeFloat({4}, {1, 2, 3, 4})), code, "rank >= 2");
  ExpectNodeError(Dft20(MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6})), code, "dim of 1 (real) or 2");
  ExpectNodeError(Dft20(MakeFloat({1, 2, 2}, {1, 2, 3, 4}), {}, {}, Scalar(2)), code,
                  "axis 2 is out of range");
  ExpectNodeError(Dft20(MakeFloat({1, 2, 2}, {1, 2, 3, 4}), {}, {}, Scalar(-1)), code,
                  "axis -1 is out of range");
  ExpectNodeError(Dft20(MakeFloat({1, 2, 2}, {1, 2, 3, 4}), {{"onesided", IntAttr(1)}}), code,
                  "takes a real input");
  ExpectNodeError(
      Dft20(MakeFloat({1, 2, 1}, {1, 2}), {{"onesided", IntAttr(1)}, {"inverse", IntAttr(1)}}),
      code, "takes a complex input");
  ExpectNodeError(Dft20(MakeFloat({1, 2, 1}, {1, 2}), {}, Scalar(0)), code,
                  "dft_length must be positive");
  ExpectNodeError(Dft20(MakeFloat({1, 2, 1}, {1, 2}), {}, MakeInt64({2}, {2, 2})), code,
                  "dft_length must be a scalar");
  ExpectNodeError(Dft20(MakeFloat({1, 2, 1}, {1, 2}), {{"inverse", IntAttr(2)}}), code,
                  "'inverse' must be 0 or 1");
  // The IRFFT's default length 2 (1 - 1) is 0.
  ExpectNodeError(
      Dft20(MakeFloat({1, 1, 2}, {1, 2}), {{"onesided", IntAttr(1)}, {"inverse", IntAttr(1)}}),
      code, "default dft_length");
}

// ---------------------------------------------------------------- STFT

NodeSpec Stft(ir::Tensor signal, int64_t step, ir::Tensor window, ir::Tensor frame_length,
              std::vector<std::pair<std::string, ir::Attribute>> attrs = {}) {
  return {OpType::kSTFT,
          std::move(attrs),
          {std::move(signal), Scalar(step), std::move(window), std::move(frame_length)},
          1,
          17};
}

TEST(StftTest, HannFramesOf16000Samples) {
  // A 1 s audio front end at 16 kHz: 25 ms frames (400) every 10 ms (160), Hann window.
  const int64_t len = 16000, frame = 400, step = 160;
  const std::vector<float> x = Wave(len, 0.0123, 0.3, 0.8);
  std::vector<float> w(frame);
  for (int64_t i = 0; i < frame; ++i) {
    w[i] = static_cast<float>(0.5 - 0.5 * std::cos(2 * std::numbers::pi * i / frame));
  }
  ir::Tensor y =
      RunNodeOk0(Stft(MakeFloat({1, len, 1}, x), step, MakeFloat({frame}, w), ir::Tensor()));
  const int64_t frames = (len - frame) / step + 1, bins = frame / 2 + 1;
  ASSERT_THAT(y.dims(), ElementsAre(1, frames, bins, 2));
  const std::vector<float> got = ToFloats(y);
  for (int64_t f : {int64_t{0}, int64_t{37}, frames - 1}) {
    std::vector<LComplex> windowed(frame);
    for (int64_t j = 0; j < frame; ++j) {
      windowed[j] = static_cast<long double>(x[f * step + j]) * static_cast<long double>(w[j]);
    }
    std::vector<LComplex> want = DirectDft(windowed, frame);
    want.resize(bins);
    const std::vector<float> g(got.begin() + f * bins * 2, got.begin() + (f + 1) * bins * 2);
    ExpectClose(g, want, 2, kRelTol * MaxAbs(want), "frame " + std::to_string(f));
  }
}

TEST(StftTest, RectangularTwoSidedAndComplex) {
  // No window: a rectangular one of frame_length; onesided=0 keeps every bin; a complex signal.
  const std::vector<float> x = Wave(2 * 10 * 2, 0.5, 0.7);
  ir::Tensor y = RunNodeOk0(
      Stft(MakeFloat({2, 10, 2}, x), 3, ir::Tensor(), Scalar(4), {{"onesided", IntAttr(0)}}));
  ASSERT_THAT(y.dims(), ElementsAre(2, 3, 4, 2));  // frames (10 - 4) / 3 + 1
  const std::vector<float> got = ToFloats(y);
  for (int b = 0; b < 2; ++b) {
    for (int f = 0; f < 3; ++f) {
      const std::vector<float> seg(x.begin() + (b * 10 + f * 3) * 2,
                                   x.begin() + (b * 10 + f * 3 + 4) * 2);
      const std::vector<LComplex> want = DirectDft(AsComplex(seg, 2), 4);
      const std::vector<float> g(got.begin() + (b * 3 + f) * 8, got.begin() + (b * 3 + f + 1) * 8);
      ExpectClose(g, want, 2, kRelTol * MaxAbs(want), "frame");
    }
  }
}

TEST(StftTest, Errors) {
  const auto code = absl::StatusCode::kInvalidArgument;
  const ir::Tensor x = MakeFloat({1, 8, 1}, Wave(8, 1, 0));
  ExpectNodeError(Stft(MakeFloat({8, 1}, Wave(8, 1, 0)), 2, {}, Scalar(4)), code, "rank 3");
  ExpectNodeError(Stft(x, 0, {}, Scalar(4)), code, "frame_step must be positive");
  ExpectNodeError(Stft(x, 2, MakeFloat({3}, {1, 1, 1}), Scalar(4)), code,
                  "window has 3 values but frame_length is 4");
  ExpectNodeError(Stft(x, 2, MakeFloat({1, 4}, {1, 1, 1, 1}), {}), code, "window must be 1-D");
  ExpectNodeError(Stft(x, 2, {}, Scalar(9)), code, "exceeds the signal length 8");
  ExpectNodeError(Stft(MakeFloat({1, 4, 2}, Wave(8, 1, 0)), 2, {}, Scalar(2)), code,
                  "onesided=1 takes a real signal");
}

// ---------------------------------------------------------------- windows

NodeSpec Window(OpType op, int64_t size,
                std::vector<std::pair<std::string, ir::Attribute>> attrs = {},
                DataType out = DataType::kF32) {
  return {OpType(op), std::move(attrs), {Scalar(size)}, 1, 17, {out}};
}

// Window values are cosines evaluated in double and rounded to fp32 once: within 6e-8 (half
// an ulp at 1), so 1e-7 in absolute terms.
constexpr float kWindowTol = 1e-7f;

TEST(WindowTest, ClosedForms) {
  struct Case {
    OpType op;
    double a0, a1, a2;
  };
  for (const Case& c : {Case{OpType::kHannWindow, 0.5, 0.5, 0},
                        Case{OpType::kHammingWindow, 25.0 / 46, 21.0 / 46, 0},
                        Case{OpType::kBlackmanWindow, 0.42, 0.5, 0.08}}) {
    for (int periodic : {1, 0}) {
      const int64_t size = 10, period = periodic ? size : size - 1;
      ir::Tensor y = RunNodeOk0(Window(c.op, size, {{"periodic", IntAttr(periodic)}}));
      ASSERT_THAT(y.dims(), ElementsAre(size));
      const std::vector<float> got = ToFloats(y);
      for (int64_t n = 0; n < size; ++n) {
        const double x = 2 * std::numbers::pi * n / period;
        EXPECT_NEAR(got[n], c.a0 - c.a1 * std::cos(x) + c.a2 * std::cos(2 * x), kWindowTol)
            << ir::OpName(c.op) << " periodic=" << periodic << " n=" << n;
      }
    }
  }
}

TEST(WindowTest, EdgeSizesAndOutputTypes) {
  EXPECT_THAT(RunNodeOk0(Window(OpType::kHannWindow, 0)).dims(), ElementsAre(0));
  // One symmetric point is [1] (numpy, torch); one periodic point is w[0] = a0 - a1 + a2.
  EXPECT_THAT(ToFloats(RunNodeOk0(Window(OpType::kHannWindow, 1, {{"periodic", IntAttr(0)}}))),
              ElementsAre(1.0f));
  EXPECT_THAT(ToFloats(RunNodeOk0(Window(OpType::kHannWindow, 1))), ElementsAre(0.0f));
  // output_datatype: int64 truncates (a symmetric Hann of 3 is [0, 1, 0]); double keeps more.
  ir::Tensor i = RunNodeOk0(Window(OpType::kHannWindow, 3,
                                   {{"periodic", IntAttr(0)}, {"output_datatype", IntAttr(7)}},
                                   DataType::kI64));
  EXPECT_EQ(i.dtype(), DataType::kI64);
  EXPECT_THAT(Values<int64_t>(i), ElementsAre(0, 1, 0));
  ir::Tensor d = RunNodeOk0(
      Window(OpType::kHammingWindow, 4, {{"output_datatype", IntAttr(11)}}, DataType::kF64));
  EXPECT_EQ(d.dtype(), DataType::kF64);
  EXPECT_NEAR(Values<double>(d)[1], 25.0 / 46 - 21.0 / 46 * std::cos(std::numbers::pi / 2), 1e-15);
}

TEST(WindowTest, Errors) {
  ExpectNodeError(Window(OpType::kHannWindow, -1), absl::StatusCode::kInvalidArgument,
                  "size must not be negative");
  ExpectNodeError(Window(OpType::kBlackmanWindow, 4, {{"periodic", IntAttr(2)}}),
                  absl::StatusCode::kInvalidArgument, "'periodic' must be 0 or 1");
  ExpectNodeError({OpType::kHammingWindow, {}, {MakeInt64({2}, {3, 4})}, 1, 17, {DataType::kF32}},
                  absl::StatusCode::kInvalidArgument, "size must be a scalar");
  // A string output_datatype is a type Kiln does not have.
  ExpectNodeError(Window(OpType::kHannWindow, 4, {{"output_datatype", IntAttr(8)}}),
                  absl::StatusCode::kUnimplemented, "output_datatype");
}

// ---------------------------------------------------------------- MelWeightMatrix

NodeSpec Mel(int64_t mels, int64_t dft, int64_t rate, float low, float high) {
  return {OpType::kMelWeightMatrix,
          {},
          {Scalar(mels), Scalar(dft), Scalar(rate), MakeFloat({}, {low}), MakeFloat({}, {high})},
          1,
          17,
          {DataType::kF32}};
}

TEST(MelWeightMatrixTest, MatchesOnnxRuntime) {
  // 4 bands of a 40-point DFT at 8 kHz between 60 and 3800 Hz; the table is ONNX Runtime's
  // output (equal to the ONNX reference's). Every weight is a ratio of small integers.
  ir::Tensor y = RunNodeOk0(Mel(4, 40, 8000, 60, 3800));
  ASSERT_THAT(y.dims(), ElementsAre(21, 4));
  std::vector<float> want(21 * 4, 0.0f);
  const float rows[13][4] = {{0, 0, 0, 0},         {1, 0, 0, 0},       {0.5f, 0.5f, 0, 0},
                             {0, 1, 0, 0},         {0, 0.5f, 0.5f, 0}, {0, 0, 1, 0},
                             {0, 0, 0.75f, 0.25f}, {0, 0, 0.5f, 0.5f}, {0, 0, 0.25f, 0.75f},
                             {0, 0, 0, 1},         {0, 0, 0, 0.75f},   {0, 0, 0, 0.5f},
                             {0, 0, 0, 0.25f}};
  for (int r = 0; r < 13; ++r) {
    for (int c = 0; c < 4; ++c) want[r * 4 + c] = rows[r][c];
  }
  EXPECT_EQ(ToFloats(y), want);
}

TEST(MelWeightMatrixTest, Errors) {
  const auto code = absl::StatusCode::kInvalidArgument;
  // 8 kHz is beyond the 4 kHz Nyquist frequency of an 8 kHz sample rate.
  ExpectNodeError(Mel(4, 16, 8000, 0, 8000), code, "falls outside the 9 spectrogram bins");
  ExpectNodeError(Mel(4, 16, 0, 0, 4000), code, "sample_rate must be positive");
  ExpectNodeError(Mel(4, 0, 8000, 0, 4000), code, "dft_length must be positive");
  ExpectNodeError(Mel(-1, 16, 8000, 0, 4000), code, "num_mel_bins must not be negative");
}

}  // namespace
}  // namespace kiln::testing
