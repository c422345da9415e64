// The convolution chain with its MaxPool taken in (conv_chain.h `pool`): Y is the reference
// MaxPool (2 x 2, stride 2, floor) of the same chain's output without the pool, to the bit, in
// fp32, fp16 and bf16, on 1, 2 and 5 threads, for odd and even heights and widths, with and
// without an expansion, a projection and a residual, and NaN outputs (skipped by the maxima).
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/kernel_test_helpers.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using Dims = std::vector<int64_t>;

struct Case {
  const char* name;
  int64_t n, c0, h, w, c1, k, stride, c2;
  bool expand, project, residual;
};

const Case kCases[] = {
    {"block_even", 1, 16, 20, 24, 48, 3, 1, 16, true, true, true},
    {"block_odd_stride2", 2, 8, 23, 29, 24, 3, 2, 12, true, true, false},
    {"expand_depthwise_odd", 1, 16, 35, 33, 16, 3, 1, 16, true, false, false},
    {"depthwise_alone", 1, 40, 17, 18, 40, 5, 1, 40, false, false, false},
    {"depthwise_project_tall", 1, 24, 64, 9, 24, 3, 1, 20, false, true, false},
};

ir::Tensor Random(const Dims& dims, DataType dt, std::mt19937& rng) {
  return RandomNormal(dims, dt, rng);
}

bool HasAvx512() { return CpuHas(kernels::IsaCpuFeatures(kernels::Isa::kAvx512)); }

// The chain node over NHWC X (and Z), with `pool` or without.
NodeSpec ChainSpec(const Case& c, const std::vector<ir::Tensor>& in, bool pool) {
  NodeSpec s{ir::OpType::kFusedConvChain, {}, in};
  s.constant_inputs = {1, 2, 3, 4, 5, 6};
  s.since_version = 1;
  s.attrs = {{"strides", IntsAttr({c.stride, c.stride})},
             {"pads", IntsAttr({c.k / 2, c.k / 2, c.k / 2, c.k / 2})},
             {"expand_activation", StringAttr("Relu")},
             {"depthwise_activation", StringAttr("Clip")},
             {"depthwise_activation_min", FloatAttr(0.0f)},
             {"depthwise_activation_max", FloatAttr(6.0f)},
             {kernels::kChannelsLastAttr, IntAttr(1)}};
  if (pool) s.attrs.push_back({"pool", IntAttr(1)});
  return s;
}

// MaxPool 2 x 2, stride 2 by the reference kernel, of NHWC `y` (an NHWC result).
ir::Tensor ReferencePool(const ir::Tensor& y) {
  NodeSpec s{ir::OpType::kMaxPool,
             {{"kernel_shape", IntsAttr({2, 2})}, {"strides", IntsAttr({2, 2})}},
             {*ir::ChannelsLastCopy(y, false)}};
  s.since_version = 22;
  s.cpu_features = 0;
  const ir::Tensor p = RunNodeOk0(s);
  return p.defined() ? *ir::ChannelsLastCopy(p, true) : p;
}

void Check(const Case& c, DataType dt, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << c.name << " " << DataTypeName(dt));
  const int64_t oh = (c.h + 2 * (c.k / 2) - c.k) / c.stride + 1;
  const int64_t ow = (c.w + 2 * (c.k / 2) - c.k) / c.stride + 1;
  std::vector<ir::Tensor> in(8);
  in[0] = Random({c.n, c.h, c.w, c.c0}, dt, rng);
  if (c.expand) {
    in[1] = Random({c.c1, c.c0, 1, 1}, dt, rng);
    in[2] = Random({c.c1}, dt, rng);
  }
  in[3] = Random({c.c1, 1, c.k, c.k}, dt, rng);
  in[4] = Random({c.c1}, dt, rng);
  if (c.project) {
    in[5] = Random({c.c2, c.c1, 1, 1}, dt, rng);
    in[6] = Random({c.c2}, dt, rng);
  }
  if (c.residual) in[7] = Random({c.n, oh, ow, c.c2}, dt, rng);
  if (!c.residual) in.resize(7);
  for (int threads : {1, 2, 5}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    omp_set_num_threads(threads);
    const ir::Tensor y = RunNodeOk0(ChainSpec(c, in, false));
    const ir::Tensor pooled = RunNodeOk0(ChainSpec(c, in, true));
    omp_set_num_threads(1);
    ASSERT_TRUE(y.defined() && pooled.defined());
    const ir::Tensor want = ReferencePool(y);
    ASSERT_TRUE(want.defined());
    ASSERT_EQ(pooled.dtype(), dt);
    ASSERT_EQ(pooled.dims(), (Dims{c.n, oh / 2, ow / 2, c.c2}));
    ASSERT_EQ(want.dims(), pooled.dims());
    EXPECT_EQ(std::memcmp(pooled.raw_data(), want.raw_data(), want.byte_size()), 0);
  }
}

void CheckAll(DataType dt) {
  std::mt19937 rng(31);
  for (const Case& c : kCases) Check(c, dt, rng);
}

TEST(ConvChainPoolTest, Fp32IsTheReferenceMaxPoolOfTheChain) {
  if (!HasAvx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  CheckAll(DataType::kF32);
}

TEST(ConvChainPoolTest, Fp16IsTheReferenceMaxPoolOfTheChain) {
  if (!HasAvx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  CheckAll(DataType::kF16);
}

TEST(ConvChainPoolTest, Bf16IsTheReferenceMaxPoolOfTheChain) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  // bf16 chains take the kernel only where it pays unless KILN_CHAIN_BF16_DOT names a path.
  setenv("KILN_CHAIN_BF16_DOT", "1", /*overwrite=*/0);
  CheckAll(DataType::kBF16);
}

// NaN in the chain's output (from NaN in X, which Relu passes and no Clip follows) is skipped by
// the maxima as the MaxPool kernel skips it.
TEST(ConvChainPoolTest, NanOutputsPoolAsTheMaxPoolKernelPoolsThem) {
  if (!HasAvx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(7);
  const Case c = {"nan", 1, 16, 12, 14, 16, 3, 1, 16, true, false, false};
  std::vector<ir::Tensor> in(5);
  std::vector<float> x(c.h * c.w * c.c0);
  std::normal_distribution<float> nd;
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = i % 37 == 5 ? std::numeric_limits<float>::quiet_NaN() : nd(rng);
  }
  in[0] = MakeFloat({1, c.h, c.w, c.c0}, x);
  in[1] = Random({c.c1, c.c0, 1, 1}, DataType::kF32, rng);
  in[2] = Random({c.c1}, DataType::kF32, rng);
  in[3] = Random({c.c1, 1, c.k, c.k}, DataType::kF32, rng);
  in[4] = Random({c.c1}, DataType::kF32, rng);
  NodeSpec plain = ChainSpec(c, in, false), pooled = ChainSpec(c, in, true);
  for (NodeSpec* s : {&plain, &pooled}) {
    for (auto& [name, value] : s->attrs) {
      if (name == "depthwise_activation") value = StringAttr("");
    }
  }
  const ir::Tensor y = RunNodeOk0(plain), p = RunNodeOk0(pooled);
  ASSERT_TRUE(y.defined() && p.defined());
  int nans = 0;
  for (int64_t i = 0; i < y.num_elements(); ++i) nans += std::isnan(y.data<float>()[i]);
  ASSERT_GT(nans, 0);
  const ir::Tensor want = ReferencePool(y);
  ASSERT_EQ(want.dims(), p.dims());
  EXPECT_EQ(std::memcmp(p.raw_data(), want.raw_data(), want.byte_size()), 0);
}

// Ties decide by cell order: in each window (0, 0) = -1 and (0, 1) = -2 lose to (1, 0) = -0 and
// (1, 1) = +0, which compare equal; the MaxPool kernel keeps the first, -0. A depthwise 1x1
// step of weight 1 and bias -0 hands X on exactly (x + -0 is x, signed zeros included), in full
// vectors (16 channels) and a masked tail (20).
TEST(ConvChainPoolTest, SignedZeroTiesKeepTheFirstCellAsTheMaxPoolKernel) {
  if (!HasAvx512()) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (int64_t c : {16, 20}) {
    SCOPED_TRACE(::testing::Message() << c << " channels");
    const Case cs = {"ties", 1, c, 4, 6, c, 1, 1, c, false, false, false};
    const float cell[2][2] = {{-1.0f, -2.0f}, {-0.0f, 0.0f}};
    std::vector<float> x(4 * 6 * c);
    for (int64_t y = 0; y < 4; ++y) {
      for (int64_t w = 0; w < 6; ++w) {
        for (int64_t ch = 0; ch < c; ++ch) x[(y * 6 + w) * c + ch] = cell[y % 2][w % 2];
      }
    }
    std::vector<ir::Tensor> in(5);
    in[0] = MakeFloat({1, 4, 6, c}, x);
    in[3] = MakeFloat({c, 1, 1, 1}, std::vector<float>(c, 1.0f));
    in[4] = MakeFloat({c}, std::vector<float>(c, -0.0f));
    NodeSpec plain = ChainSpec(cs, in, false), pooled = ChainSpec(cs, in, true);
    for (NodeSpec* s : {&plain, &pooled}) {
      for (auto& [name, value] : s->attrs) {
        if (name == "depthwise_activation") value = StringAttr("");
      }
    }
    const ir::Tensor y = RunNodeOk0(plain), p = RunNodeOk0(pooled);
    ASSERT_TRUE(y.defined() && p.defined());
    ASSERT_EQ(std::memcmp(y.raw_data(), x.data(), y.byte_size()), 0);  // X handed on exactly
    const ir::Tensor want = ReferencePool(y);
    ASSERT_EQ(want.dims(), p.dims());
    EXPECT_EQ(std::memcmp(p.raw_data(), want.raw_data(), want.byte_size()), 0);
    for (int64_t i = 0; i < p.num_elements(); ++i) {
      ASSERT_TRUE(std::signbit(p.data<float>()[i]) && p.data<float>()[i] == 0.0f) << i;
    }
  }
}

}  // namespace
}  // namespace kiln::testing
