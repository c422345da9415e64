// MatMul kernels at the BERT-base shapes (sequence 128, hidden 768, 12 heads, FFN 3072) in fp32,
// fp16 and bf16, through the kernel registry exactly as the engine runs them: the fastest kernel
// the CPU supports, and the reference kernel for comparison. Reports GFLOP/s as a counter.
// Also the fastest fp32 and bf16 MatMul at large shapes, and the machine's fp32 peak measured by
// an AVX-512 FMA-throughput loop, so GEMM rates can be read as a fraction of peak (run_all.py).
//
//   kiln_bench [--benchmark_filter=...] [--benchmark_format=json]
//
// Benchmark names: MatMul/<dtype>/<isa>/<shape name> (BERT-base shapes),
// Gemm/<dtype>/<M>x<K>x<N> (large shapes; GemmPacked/... with B a weight packed as the build
// stores it), FmaPeak/threads:<N>, GemmTile/float/threads:<N> (the fp32 micro-kernel alone).
// Kernels use OMP_NUM_THREADS threads (default one per core); FmaPeak and GemmTile run 1 .. cores
// threads whatever OMP_NUM_THREADS says.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/fma_peak.h"
#include "engine/common/cpu_features.h"
#include "engine/common/half.h"
#include "engine/ir/graph.h"
#include "engine/kernels/cpu/avx512/gemm.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/registry.h"

namespace kiln::bench {
namespace {

// Inputs held by the benchmark; output 0 reused across iterations (allocated on the first run).
class BenchContext final : public kernels::KernelContext {
 public:
  explicit BenchContext(std::vector<ir::Tensor> in) : in_(std::move(in)) {}
  int num_inputs() const override { return static_cast<int>(in_.size()); }
  const ir::Tensor* input(int i) const override { return &in_[i]; }
  int num_outputs() const override { return 1; }
  absl::StatusOr<ir::Tensor*> output(int i, DataType dtype, std::vector<int64_t> dims) override {
    if (!out_.defined() || out_.dims() != dims || out_.dtype() != dtype) {
      auto t = ir::Tensor::Allocate(dtype, std::move(dims));
      if (!t.ok()) return t.status();
      out_ = std::move(*t);
    }
    return &out_;
  }
  bool output_requested(int i) const override { return true; }

 private:
  std::vector<ir::Tensor> in_;
  ir::Tensor out_;
};

ir::Tensor RandomTensor(DataType t, std::vector<int64_t> dims, unsigned seed) {
  ir::Tensor x = *ir::Tensor::Allocate(t, dims);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const float v = dist(gen);
    if (t == DataType::kF32) x.data<float>()[i] = v;
    if (t == DataType::kF16) x.data<uint16_t>()[i] = FloatToHalfBits(v);
    if (t == DataType::kBF16) x.data<uint16_t>()[i] = FloatToBFloat16Bits(v);
  }
  return x;
}

struct Shape {
  const char* name;
  int64_t batch, m, k, n;
};

// One encoder layer's matrix products at sequence 128.
constexpr Shape kShapes[] = {
    {"qkv_out_768x768", 1, 128, 768, 768},
    {"ffn_up_768x3072", 1, 128, 768, 3072},
    {"ffn_down_3072x768", 1, 128, 3072, 768},
    {"attn_scores_12x128x64x128", 12, 128, 64, 128},
    {"attn_context_12x128x128x64", 12, 128, 128, 64},
};

// `packed`: B is a weight stored as the build stores it for the AVX-512 GEMM (builder
// PackWeights: kPackedBAttr), the way an engine runs every constant fp32 and bf16 weight.
void RunMatMul(benchmark::State& state, DataType t, uint64_t features, Shape s, bool packed) {
  ir::Graph g;
  ir::Node* n = g.AddNode(ir::OpType::kMatMul, "bench");
  std::vector<int64_t> ad = {s.m, s.k}, bd = {s.k, s.n};
  if (s.batch > 1) {
    ad.insert(ad.begin(), s.batch);
    bd.insert(bd.begin(), s.batch);
  }
  for (const char* name : {"a", "b"}) {
    ir::Value* v = *g.AddValue(name);
    v->dtype = t;
    n->inputs.push_back(v);
  }
  n->outputs.push_back(*g.AddValue("y"));
  auto def = kernels::Registry::Default().Find(*n, features);
  if (!def.ok()) {
    state.SkipWithError(std::string(def.status().message()).c_str());
    return;
  }
  ir::Tensor b = RandomTensor(t, bd, 2);
  if (packed) {
    namespace x = kernels::cpu::avx512;
    const bool f32 = t == DataType::kF32;
    const int64_t strip = f32 ? x::PackedBStripElemsF32(s.k) : x::PackedBStripElems(s.k);
    ir::Tensor p = *ir::Tensor::Allocate(t, {(s.n + 63) / 64, strip});
    if (f32) {
      x::PackBF32(b.data<float>(), s.k, s.n, p.data<float>());
    } else {
      x::PackBBf16(b.data<uint16_t>(), s.k, s.n, p.data<uint16_t>());
    }
    b = std::move(p);
    n->attrs[kernels::kPackedBAttr] = ir::Attribute::Ints({s.k, s.n});
  }
  auto kernel = (*def)->factory(*n);
  BenchContext ctx({RandomTensor(t, ad, 1), std::move(b)});
  for (auto _ : state) {
    absl::Status st = (*kernel)->Run(ctx);
    if (!st.ok()) {
      state.SkipWithError(std::string(st.message()).c_str());
      return;
    }
  }
  const double flops = 2.0 * s.batch * s.m * s.k * s.n;
  state.counters["GFLOPS"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(kernels::IsaName((*def)->isa));
}

// Shapes large enough (M >= 128) for a GEMM to approach the machine's peak.
constexpr Shape kLargeShapes[] = {
    {"128x768x768", 1, 128, 768, 768},       {"128x768x3072", 1, 128, 768, 3072},
    {"128x3072x768", 1, 128, 3072, 768},     {"512x1024x1024", 1, 512, 1024, 1024},
    {"1024x1024x1024", 1, 1024, 1024, 1024},
};

void RunFmaPeak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  constexpr int64_t kIterations = 1 << 20;
  float sink = 0.0f;
  for (auto _ : state) sink += FmaPeakLoop(threads, kIterations);
  benchmark::DoNotOptimize(sink);
  state.counters["GFLOPS"] = benchmark::Counter(threads * FmaPeakFlopsPerThread(kIterations) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// The 6 x 64 fp32 tile alone (GemmTileF32), each thread on its own operands in L1: k = 64, so
// the B strip (16 KB), A's six rows and the output stay there. The ceiling of the tile loop on
// this CPU, against which the Gemm rates can be read (what the blocking around it costs).
void RunGemmTile(benchmark::State& state) {
  namespace x = kernels::cpu::avx512;
  const int threads = static_cast<int>(state.range(0));
  constexpr int64_t kK = 64, kCalls = 1 << 14;
  std::vector<ir::Tensor> buffers;
  for (int t = 0; t < threads; ++t) {
    buffers.push_back(RandomTensor(DataType::kF32, {kK, 64}, 10 + t));  // B strip (aligned)
    buffers.push_back(RandomTensor(DataType::kF32, {6, kK}, 20 + t));   // A rows
    buffers.push_back(RandomTensor(DataType::kF32, {6, 64}, 30 + t));   // out
  }
  for (auto _ : state) {
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; ++t) {
      const float* b = buffers[3 * t].data<float>();
      const float* a = buffers[3 * t + 1].data<float>();
      float* out = buffers[3 * t + 2].data<float>();
      for (int64_t i = 0; i < kCalls; ++i) x::GemmTileF32(kK, a, kK, b, out);
    }
  }
  const double flops = 2.0 * threads * kCalls * 6 * kK * 64;
  state.counters["GFLOPS"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void RegisterAll() {
  const uint64_t cpu = DetectCpuFeatures();
  if (cpu & kCpuAvx512F) {
    benchmark::RegisterBenchmark("FmaPeak", RunFmaPeak)
        ->ArgName("threads")
        ->DenseRange(1, omp_get_num_procs())
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(0.3);
    benchmark::RegisterBenchmark("GemmTile/float", RunGemmTile)
        ->ArgName("threads")
        ->DenseRange(1, omp_get_num_procs())
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(0.3);
  }
  for (DataType t : {DataType::kF32, DataType::kBF16}) {
    for (const Shape& s : kLargeShapes) {
      for (bool packed : {false, true}) {
        if (packed && !(cpu & kCpuAvx512F)) continue;
        const std::string name =
            absl::StrCat(packed ? "GemmPacked/" : "Gemm/", DataTypeOnnxName(t), "/", s.name);
        benchmark::RegisterBenchmark(name.c_str(), RunMatMul, t, cpu, s, packed)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->MinTime(0.3);
      }
    }
  }
  for (DataType t : {DataType::kF32, DataType::kBF16, DataType::kF16}) {
    for (const Shape& s : kShapes) {
      for (bool fast : {true, false}) {
        const std::string name =
            absl::StrCat("MatMul/", DataTypeOnnxName(t), "/", fast ? "best" : "ref", "/", s.name);
        benchmark::RegisterBenchmark(name.c_str(), RunMatMul, t, fast ? cpu : 0, s, false)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->MinTime(0.3);
      }
    }
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
