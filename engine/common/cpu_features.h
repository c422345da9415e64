// Run-time CPU feature detection (CPUID). Kernels are chosen from these at run time, and the
// engine blob records the features its kernels require.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

/// Bit flags of CPU features Kiln's kernels can use.
enum CpuFeature : uint64_t {
  kCpuSse42 = 1ull << 0,
  kCpuAvx = 1ull << 1,
  kCpuAvx2 = 1ull << 2,
  kCpuFma = 1ull << 3,
  kCpuF16c = 1ull << 4,
  kCpuAvx512F = 1ull << 5,
  kCpuAvx512Bw = 1ull << 6,
  kCpuAvx512Vl = 1ull << 7,
  kCpuAvx512Dq = 1ull << 8,
  kCpuAvx512Bf16 = 1ull << 9,
  kCpuAvx512Vnni = 1ull << 10,
  kCpuAvx512Fp16 = 1ull << 11,
  kCpuAmxTile = 1ull << 12,
};

/// Features of the CPU this process runs on (detected once, cached).
uint64_t DetectCpuFeatures();

/// Names of the set bits, e.g. {"avx2", "fma", "f16c"}.
std::vector<std::string> CpuFeatureNames(uint64_t features);

/// Comma-separated names, "none" when empty.
std::string CpuFeatureString(uint64_t features);

}  // namespace kiln
