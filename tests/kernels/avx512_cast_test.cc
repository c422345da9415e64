// The AVX-512 Cast kernel (kernels/cpu/avx512/cast.cc over convert.h) against the reference Cast
// on the same node, bit for bit: bool -> float (bytes other than 0 and 1 too), int32 -> float
// (values that round), and float <-> float16 <-> bfloat16 with NaN payloads, infinities,
// subnormals and ties, over lengths around the 16-lane vectors, the 64-byte bool blocks and the
// 16K-element chunks shared by the threads. Skipped on CPUs without AVX-512 and AVX512_BF16.
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

const uint64_t kAvx512Bf16 = kernels::IsaCpuFeatures(kernels::Isa::kAvx512) | kCpuAvx512Bf16;

// n elements of `t` of random bits (bool: random bytes; int32: wide values that round to float).
ir::Tensor RandomOf(DataType t, int64_t n, std::mt19937& gen) {
  ir::Tensor x = *ir::Tensor::Allocate(t, {n});
  auto* p = static_cast<uint8_t*>(x.raw_data());
  for (int64_t i = 0; i < x.byte_size(); ++i) p[i] = static_cast<uint8_t>(gen());
  if (t == DataType::kBool) {  // mostly 0 / 1, some other non-zero bytes (true as well)
    for (int64_t i = 0; i < n; ++i) p[i] = p[i] < 100 ? 0 : p[i] < 240 ? 1 : p[i];
  }
  return x;
}

TEST(Avx512Cast, MatchesTheReferenceBitForBit) {
  if ((DetectCpuFeatures() & kAvx512Bf16) != kAvx512Bf16) GTEST_SKIP() << "no AVX512_BF16";
  using DT = DataType;
  const std::vector<std::pair<DT, DT>> pairs = {
      {DT::kBool, DT::kF32}, {DT::kI32, DT::kF32},  {DT::kF32, DT::kF16},  {DT::kF16, DT::kF32},
      {DT::kF32, DT::kBF16}, {DT::kBF16, DT::kF32}, {DT::kF16, DT::kBF16}, {DT::kBF16, DT::kF16}};
  std::mt19937 gen(3);
  for (const auto& [from, to] : pairs) {
    for (int64_t n : {1, 15, 16, 17, 63, 64, 65, 127, 1000, 70001}) {
      NodeSpec spec;
      spec.op = ir::OpType::kCast;
      spec.since_version = 19;
      spec.attrs = {{"to", IntAttr(static_cast<int64_t>(to))}};
      spec.output_dtypes = {to};
      spec.inputs = {RandomOf(from, n, gen)};
      spec.cpu_features = kAvx512Bf16;
      const ir::Tensor fast = RunNodeOk0(spec);
      spec.cpu_features = 0;
      const ir::Tensor ref = RunNodeOk0(spec);
      const std::string what = std::string(DataTypeOnnxName(from)) + " -> " + DataTypeOnnxName(to) +
                               " n " + std::to_string(n);
      ASSERT_EQ(fast.dtype(), to) << what;
      ASSERT_EQ(fast.dims(), ref.dims()) << what;
      EXPECT_EQ(std::memcmp(fast.raw_data(), ref.raw_data(), ref.byte_size()), 0) << what;
    }
  }
}

}  // namespace
}  // namespace kiln::testing
