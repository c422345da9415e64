#include "engine/common/cpu_features.h"

#include <cpuid.h>

#include "absl/strings/str_join.h"

namespace kiln {
namespace {

struct FeatureName {
  CpuFeature bit;
  const char* name;
};
constexpr FeatureName kNames[] = {
    {kCpuSse42, "sse4.2"},
    {kCpuAvx, "avx"},
    {kCpuAvx2, "avx2"},
    {kCpuFma, "fma"},
    {kCpuF16c, "f16c"},
    {kCpuAvx512F, "avx512f"},
    {kCpuAvx512Bw, "avx512bw"},
    {kCpuAvx512Vl, "avx512vl"},
    {kCpuAvx512Dq, "avx512dq"},
    {kCpuAvx512Bf16, "avx512_bf16"},
    {kCpuAvx512Vnni, "avx512_vnni"},
    {kCpuAvx512Fp16, "avx512_fp16"},
    {kCpuAmxTile, "amx_tile"},
};

uint64_t Detect() {
  unsigned a, b, c, d;
  uint64_t f = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  if (c & bit_SSE4_2) f |= kCpuSse42;
  if (c & bit_FMA) f |= kCpuFma;
  if (c & bit_F16C) f |= kCpuF16c;
  bool osxsave = c & bit_OSXSAVE;
  bool avx_ok = false, avx512_ok = false;
  if (osxsave && (c & bit_AVX)) {
    unsigned xcr0_lo, xcr0_hi;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    avx_ok = (xcr0_lo & 0x6) == 0x6;
    avx512_ok = avx_ok && (xcr0_lo & 0xe0) == 0xe0;
  }
  if (avx_ok)
    f |= kCpuAvx;
  else
    f &= ~(kCpuFma | kCpuF16c);
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    if (avx_ok && (b & bit_AVX2)) f |= kCpuAvx2;
    if (avx512_ok) {
      if (b & bit_AVX512F) f |= kCpuAvx512F;
      if (b & bit_AVX512BW) f |= kCpuAvx512Bw;
      if (b & bit_AVX512VL) f |= kCpuAvx512Vl;
      if (b & bit_AVX512DQ) f |= kCpuAvx512Dq;
      if (c & bit_AVX512VNNI) f |= kCpuAvx512Vnni;
      if (d & (1u << 23)) f |= kCpuAvx512Fp16;
    }
    if (d & (1u << 24)) f |= kCpuAmxTile;
    unsigned a1, b1, c1, d1;
    if (avx512_ok && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 & (1u << 5))) {
      f |= kCpuAvx512Bf16;
    }
  }
  return f;
}

}  // namespace

uint64_t DetectCpuFeatures() {
  static const uint64_t features = Detect();
  return features;
}

std::vector<std::string> CpuFeatureNames(uint64_t features) {
  std::vector<std::string> out;
  for (const auto& n : kNames) {
    if (features & n.bit) out.emplace_back(n.name);
  }
  return out;
}

std::string CpuFeatureString(uint64_t features) {
  auto names = CpuFeatureNames(features);
  return names.empty() ? "none" : absl::StrJoin(names, ",");
}

}  // namespace kiln
