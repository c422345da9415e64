// The thin-convolution GEMM route of the oneDNN convolution kernel and its GEMM routes'
// prepacked-W record (conv_thin_gemm.h).
//
// X [N, L, C] (NHWC bytes with one spatial dim 1) read with a row stride of stride * C is the
// im2col matrix itself: output position p's window, KL taps of C channels, is the KL * C
// contiguous floats from row p. On magika's [6, 512, 1, 256] by [512, 256, 5, 1] (one core):
// oneDNN 2-D 68 ms, oneDNN as H = 1 (conv_dnnl.cc's WidthTrivial) 28 ms, this GEMM 16 ms.
#include "engine/kernels/cpu/dnnl/conv_thin_gemm.h"

#include <algorithm>
#include <cstring>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/gemm.h"

namespace kiln::kernels::cpu::dnnl {
namespace {

constexpr int64_t kMinChannels = 32;  // C and M of the thin GEMM

}  // namespace

bool AxisTrivial(const ref::nn::ConvSetup& s, int axis) {
  const ref::nn::Window& win = s.win;
  return win.rank() == 2 && win.in[axis] == 1 && win.kernel[axis] == 1 && win.out[axis] == 1 &&
         win.pad_begin[axis] == 0 && win.pad_end[axis] == 0;
}

std::array<int64_t, 4> GemmWords(int64_t c, int64_t m, int64_t taps, bool line) {
  return {line ? 1 : 0, c, m, taps};
}

bool PrepackedGemmFits(const ir::Tensor* prepacked, const std::vector<int64_t>& words,
                       const std::array<int64_t, 4>& want, int64_t floats) {
  return prepacked != nullptr && prepacked->dtype() == DataType::kU8 &&
         std::equal(words.begin(), words.end(), want.begin(), want.end()) &&
         prepacked->byte_size() == static_cast<size_t>(floats) * sizeof(float) &&
         reinterpret_cast<uintptr_t>(prepacked->raw_data()) % 64 == 0;
}

int ThinConvGemm::Axis(const ref::nn::ConvSetup& s, int64_t group, bool channels_last) {
  static const bool cpu_ok = kernels::CpuHasIsa(Isa::kAvx512);
  if (!cpu_ok || !channels_last || s.in.x->dtype() != DataType::kF32 || group != 1 ||
      s.in.w->rank() != 4 || s.win.rank() != 2 || s.m < kMinChannels ||
      s.in.w->dim(1) < kMinChannels) {
    return -1;
  }
  for (int axis = 0; axis < 2; ++axis) {
    if (AxisTrivial(s, 1 - axis) && s.win.kernel[axis] >= 2 && s.win.dilations[axis] == 1) {
      return axis;
    }
  }
  return -1;
}

int64_t ThinConvGemm::PackedFloats(int64_t c, int64_t m, int64_t taps) {
  return avx512::PackedBElemsF32(taps * c, m);
}

float* ThinConvGemm::AlignedW() {
  const uintptr_t p = reinterpret_cast<uintptr_t>(w_.data());
  return reinterpret_cast<float*>((p + 63) / 64 * 64);
}

// W packed with its k index t * C + c (the order of A's row): B [k, M].
const float* ThinConvGemm::PackedW(const ref::nn::ConvSetup& s, int axis,
                                   const ir::Tensor* prepacked, const std::vector<int64_t>& words) {
  const ir::Tensor& w = *s.in.w;
  const int64_t c = w.dim(1), m = w.dim(0), taps = s.win.kernel[axis], k = taps * c;
  if (PrepackedGemmFits(prepacked, words, GemmWords(c, m, taps, /*line=*/true),
                        PackedFloats(c, m, taps))) {
    return static_cast<const float*>(prepacked->raw_data());
  }
  if (w_src_ != w.raw_data() || shape_ != std::array<int64_t, 3>{c, m, taps}) {
    std::vector<float> b(k * m);  // b[(t * C + ch) * M + j] = W[j][ch][t]
    const float* wp = w.data<float>();
    for (int64_t j = 0; j < m; ++j) {
      for (int64_t ch = 0; ch < c; ++ch) {
        for (int64_t t = 0; t < taps; ++t) b[(t * c + ch) * m + j] = wp[(j * c + ch) * taps + t];
      }
    }
    w_.assign(PackedFloats(c, m, taps) + 16, 0.0f);  // 16 floats of slack for 64-byte alignment
    avx512::PackBF32(b.data(), k, m, AlignedW());
    w_src_ = w.raw_data();
    shape_ = {c, m, taps};
  }
  return AlignedW();
}

void ThinConvGemm::Run(const ref::nn::ConvSetup& s, int axis, const float* packed, float* y) {
  const ir::Tensor& x = *s.in.x;  // NCHW dims over NHWC bytes
  const ref::nn::Window& win = s.win;
  const int64_t c = s.in.w->dim(1), m = s.in.w->dim(0), k = win.kernel[axis] * c;
  const int64_t batch = x.dim(0), len = win.in[axis], out_len = win.out[axis];
  const int64_t pb = win.pad_begin[axis], padded_len = len + pb + win.pad_end[axis];
  const float* a = x.data<float>();
  if (padded_len != len) {
    padded_.assign(batch * padded_len * c, 0.0f);
    for (int64_t n = 0; n < batch; ++n) {
      std::memcpy(padded_.data() + (n * padded_len + pb) * c, a + n * len * c,
                  len * c * sizeof(float));
    }
    a = padded_.data();
  }
  offsets_.resize(batch);
  for (int64_t n = 0; n < batch; ++n) offsets_[n] = n * padded_len * c;
  avx512::GemmArgs g;
  g.batch = batch;
  g.m = out_len;
  g.n = m;
  g.k = k;
  g.a = a;
  g.a_rs = win.strides[axis] * c;
  g.a_offsets = offsets_.data();
  g.b_packed_f32 = packed;
  g.y = y;
  g.y_rs = m;
  g.y_batch = out_len * m;
  if (s.in.b != nullptr) {  // 1 * sum + 1 * B: the one rounding of the bias addition
    g.scale = true;
    g.c = s.in.b->raw_data();
    g.c_rs = 0;
    g.c_cs = 1;
  }
  avx512::GemmAvx512(g);
}

}  // namespace kiln::kernels::cpu::dnnl
