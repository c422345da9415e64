// Convolution kernels at MobileNetV2's shapes: the fp32 inverted-residual chain kernel
// (FusedConvChain) called directly, one benchmark per block shape. Reports GFLOP/s as a counter
// (the three convolutions' multiply-adds, 2 flops each).
//
//   kiln_conv_bench [--benchmark_filter=...]
//
// Benchmark names: ConvChain/<h>x<w>x<c0>-<c1>-<c2>/s<stride>[/no_expansion] and
// Depthwise/<h>x<w>x<c>/s<stride> (the chain kernel running a depthwise convolution alone).
// Kernels use OMP_NUM_THREADS threads.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/conv_chain.h"

namespace kiln::bench {
namespace {

struct Block {
  int64_t h, w, c0, c1, c2, stride;
  bool expand = true, project = true;
};

// MobileNetV2's inverted-residual blocks at 224x224 (expansion 6), batch 1 (the first one has
// no expansion), then depthwise convolutions alone.
constexpr Block kBlocks[] = {
    {112, 112, 16, 96, 24, 2},
    {56, 56, 24, 144, 24, 1},
    {56, 56, 24, 144, 32, 2},
    {28, 28, 32, 192, 32, 1},
    {14, 14, 64, 384, 64, 1},
    {14, 14, 96, 576, 96, 1},
    {7, 7, 160, 960, 160, 1},
    {112, 112, 32, 32, 16, 1, false},
    {112, 112, 32, 32, 32, 1, false, false},
    {28, 28, 192, 192, 192, 1, false, false},
    {14, 14, 576, 576, 576, 1, false, false},
    {7, 7, 960, 960, 960, 1, false, false},
};

std::vector<float> Random(int64_t n, unsigned seed) {
  std::vector<float> v(n);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
  for (float& x : v) x = dist(gen);
  return v;
}

int64_t Pad16(int64_t c) { return (c + 15) / 16 * 16; }

void RunChain(benchmark::State& state, Block b) {
  namespace x = kernels::cpu::avx512;
  x::ConvChainArgs a;
  a.n = 1;
  a.h = b.h;
  a.w = b.w;
  a.c0 = b.c0;
  a.c1 = b.c1;
  a.c2 = b.c2;
  a.kh = a.kw = 3;
  a.sh = a.sw = b.stride;
  a.pad_top = a.pad_left = 1;
  a.oh = (b.h + 2 - 3) / b.stride + 1;
  a.ow = (b.w + 2 - 3) / b.stride + 1;
  a.act0.kind = a.act1.kind = x::ChainActivation::kClip;
  a.act0.hi = a.act1.hi = 6.0f;
  const int64_t cp1 = Pad16(b.c1), cp2 = Pad16(b.c2);
  const std::vector<float> xv = Random(b.h * b.w * b.c0, 1), w0 = Random(cp1 * b.c0, 2),
                           b0 = Random(cp1, 3), w1 = Random(9 * cp1, 4), b1 = Random(cp1, 5),
                           w2 = Random(cp2 * b.c1, 6), b2 = Random(cp2, 7);
  std::vector<float> y(a.oh * a.ow * b.c2);
  a.x = xv.data();
  a.w0 = w0.data();
  a.b0 = b0.data();
  a.w1 = w1.data();
  a.b1 = b1.data();
  a.w2 = w2.data();
  a.b2 = b2.data();
  a.y = y.data();
  if (!b.expand) a.w0 = nullptr;
  if (!b.project) a.w2 = nullptr;
  a.threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), a.oh));
  std::vector<float> scratch(static_cast<size_t>(x::ConvChainScratchFloats(a) + 16));
  // 64-byte aligned, as the kernel class hands it.
  a.scratch = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) & ~63);
  for (auto _ : state) x::ConvChainAvx512(a);
  benchmark::DoNotOptimize(y.data());
  const double flops = 2.0 * ((b.expand ? b.h * b.w * b.c0 * b.c1 : 0) + a.oh * a.ow * b.c1 * 9 +
                              (b.project ? a.oh * a.ow * b.c1 * b.c2 : 0));
  state.counters["GFLOPS"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void RegisterAll() {
  if (!(DetectCpuFeatures() & kCpuAvx512F)) return;
  for (const Block& b : kBlocks) {
    const std::string name =
        b.project ? absl::StrCat("ConvChain/", b.h, "x", b.w, "x", b.c0, "-", b.c1, "-", b.c2, "/s",
                                 b.stride, b.expand ? "" : "/no_expansion")
                  : absl::StrCat("Depthwise/", b.h, "x", b.w, "x", b.c1, "/s", b.stride);
    benchmark::RegisterBenchmark(name.c_str(), RunChain, b)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime()
        ->MinTime(0.3);
  }
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  kiln::bench::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
