// Tests of the opset-24..28 reference kernels and versions: Swish, CumProd, SpaceToDepth's CRD
// mode (opset 28), Range's stash_type (opset 27), Attention's nonpad_kv_seqlen (opset 24) and
// sliding window (opset 25).
#include <cmath>
#include <cstdint>
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
using ::testing::FloatNear;
using ::testing::Pointwise;

TEST(SwishTest, AlphaAndDefault) {
  const ir::Tensor x = MakeFloat({4}, {-2, 0, 1, 3});
  auto swish = [](float v, float a) { return v / (1 + std::exp(-a * v)); };
  // fp32 exp plus one division: within a few ulps of the double formula.
  EXPECT_THAT(
      ToFloats(RunNodeOk0({OpType::kSwish, {}, {x}, 1, 24})),
      Pointwise(FloatNear(1e-6f), std::vector<float>{swish(-2, 1), 0, swish(1, 1), swish(3, 1)}));
  EXPECT_THAT(ToFloats(RunNodeOk0({OpType::kSwish, {{"alpha", FloatAttr(2.5f)}}, {x}, 1, 24})),
              Pointwise(FloatNear(1e-6f),
                        std::vector<float>{swish(-2, 2.5f), 0, swish(1, 2.5f), swish(3, 2.5f)}));
  // fp16: computed in fp32 and rounded once; swish(3) = 2.857722 -> fp16 2.857421875.
  ir::Tensor y = RunNodeOk0({OpType::kSwish, {}, {MakeHalf({1}, {3})}, 1, 24});
  EXPECT_EQ(y.dtype(), DataType::kF16);
  EXPECT_THAT(ToFloats(y), ElementsAre(2.857421875f));
}

TEST(CumProdTest, Modes) {
  const ir::Tensor x = MakeFloat({3}, {2, 3, 4});
  const ir::Tensor axis = MakeInt64({}, {0});
  auto run = [&](int exclusive, int reverse) {
    return ToFloats(RunNodeOk0({OpType::kCumProd,
                                {{"exclusive", IntAttr(exclusive)}, {"reverse", IntAttr(reverse)}},
                                {x, axis},
                                1,
                                26}));
  };
  EXPECT_THAT(run(0, 0), ElementsAre(2, 6, 24));
  EXPECT_THAT(run(1, 0), ElementsAre(1, 2, 6));
  EXPECT_THAT(run(0, 1), ElementsAre(24, 12, 4));
  EXPECT_THAT(run(1, 1), ElementsAre(12, 4, 1));
}

TEST(CumProdTest, AxesIntsAndErrors) {
  const ir::Tensor x = MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_THAT(ToFloats(RunNodeOk0({OpType::kCumProd, {}, {x, MakeInt64({}, {0})}, 1, 26})),
              ElementsAre(1, 2, 3, 4, 10, 18));
  EXPECT_THAT(ToFloats(RunNodeOk0({OpType::kCumProd, {}, {x, MakeInt64({1}, {-1})}, 1, 26})),
              ElementsAre(1, 2, 6, 4, 20, 120));
  // int32 products wrap (two's complement) instead of being undefined: 65536 * 65536 = 2^32.
  ir::Tensor y =
      RunNodeOk0({OpType::kCumProd,
                  {},
                  {MakeTensor<int32_t>({3}, {65536, 65536, 3}, DataType::kI32), MakeInt64({}, {0})},
                  1,
                  26});
  EXPECT_EQ(y.dtype(), DataType::kI32);
  EXPECT_THAT(Values<int32_t>(y), ElementsAre(65536, 0, 0));
  ExpectNodeError({OpType::kCumProd, {}, {x, MakeInt64({}, {2})}, 1, 26},
                  absl::StatusCode::kInvalidArgument, "axis");
}

TEST(SpaceToDepthTest, CrdModeOpset28) {
  // x[0, 0] = 4x4 values 0..15, blocksize 2. CRD: channel = c * 4 + row * 2 + col.
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(i);
  const ir::Tensor x = MakeFloat({1, 1, 4, 4}, v);
  ir::Tensor y = RunNodeOk0({OpType::kSpaceToDepth,
                             {{"blocksize", IntAttr(2)}, {"mode", StringAttr("CRD")}},
                             {x},
                             1,
                             28});
  EXPECT_THAT(y.dims(), ElementsAre(1, 4, 2, 2));
  EXPECT_THAT(ToFloats(y), ElementsAre(0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15));
  // With one input channel DCR and CRD agree; two channels tell them apart.
  std::vector<float> w(32);
  for (int i = 0; i < 32; ++i) w[i] = static_cast<float>(i);
  const ir::Tensor x2 = MakeFloat({1, 2, 4, 4}, w);
  auto first_pixel = [&](const char* mode) {
    ir::Tensor t = RunNodeOk0({OpType::kSpaceToDepth,
                               {{"blocksize", IntAttr(2)}, {"mode", StringAttr(mode)}},
                               {x2},
                               1,
                               28});
    std::vector<float> f = ToFloats(t), out;
    for (int c = 0; c < 8; ++c) out.push_back(f[c * 4]);
    return out;
  };
  EXPECT_THAT(first_pixel("DCR"), ElementsAre(0, 16, 1, 17, 4, 20, 5, 21));
  EXPECT_THAT(first_pixel("CRD"), ElementsAre(0, 1, 4, 5, 16, 17, 20, 21));
  ExpectNodeError(
      {OpType::kSpaceToDepth, {{"blocksize", IntAttr(2)}, {"mode", StringAttr("CRD")}}, {x}, 1, 13},
      absl::StatusCode::kInvalidArgument, "before opset 28");
  ExpectNodeError(
      {OpType::kSpaceToDepth, {{"blocksize", IntAttr(2)}, {"mode", StringAttr("XYZ")}}, {x}, 1, 28},
      absl::StatusCode::kInvalidArgument, "mode must be DCR or CRD");
}

TEST(RangeTest, StashType) {
  auto h = [](float v) { return MakeHalf({}, {v}); };
  // stash_type 1 (float, the default) is how fp16 ranges are computed: each start + i * delta
  // is rounded once, 2049 -> 2048 and 2051 -> 2052 (ties to even; fp16 spacing is 2 here).
  ir::Tensor y =
      RunNodeOk0({OpType::kRange, {{"stash_type", IntAttr(1)}}, {h(2048), h(2052), h(1)}, 1, 27});
  EXPECT_THAT(ToFloats(y), ElementsAre(2048, 2048, 2050, 2052));
  ExpectNodeError({OpType::kRange, {{"stash_type", IntAttr(10)}}, {h(0), h(3), h(1)}, 1, 27},
                  absl::StatusCode::kUnimplemented, "stash_type 10");
  ExpectNodeError({OpType::kRange, {{"stash_type", IntAttr(1)}}, {h(0), h(3), h(1)}, 1, 11},
                  absl::StatusCode::kInvalidArgument, "before opset 27");
}

// One query row against 4 keys with equal scores: each output is the mean of the values of the
// keys left unmasked, which tells exactly which keys were masked.
TEST(AttentionTest, NonpadKvSeqlenAndWindow) {
  const ir::Tensor q = MakeFloat({2, 1, 1, 1}, {0, 0});  // zero query: all scores equal
  const ir::Tensor k = MakeFloat({2, 1, 4, 1}, {1, 1, 1, 1, 1, 1, 1, 1});
  const ir::Tensor v = MakeFloat({2, 1, 4, 1}, {1, 2, 4, 8, 1, 2, 4, 8});
  const ir::Tensor nonpad = MakeInt64({2}, {2, 3});
  const ir::Tensor none;
  // Batch 0 keeps keys 0..1 (mean 1.5), batch 1 keys 0..2 (mean 7/3). fp32 softmax of equal
  // logits and a 3-term dot product: a few ulps.
  ir::Tensor y = RunNodeOk0({OpType::kAttention, {}, {q, k, v, none, none, none, nonpad}, 1, 24});
  EXPECT_THAT(ToFloats(y), Pointwise(FloatNear(1e-6f), std::vector<float>{1.5f, 7.0f / 3}));
  // Causal aligns the query to the end of the valid keys (offset = nonpad - q_len): the one
  // query sits at position nonpad - 1, which sees every valid key; same result.
  y = RunNodeOk0({OpType::kAttention,
                  {{"is_causal", IntAttr(1)}},
                  {q, k, v, none, none, none, nonpad},
                  1,
                  24});
  EXPECT_THAT(ToFloats(y), Pointwise(FloatNear(1e-6f), std::vector<float>{1.5f, 7.0f / 3}));
  // left_window_size 1: the query (position nonpad - 1) sees itself and one key before it:
  // batch 0 keys 0..1 (1.5), batch 1 keys 1..2 (3).
  y = RunNodeOk0({OpType::kAttention,
                  {{"left_window_size", IntAttr(1)}},
                  {q, k, v, none, none, none, nonpad},
                  1,
                  25});
  EXPECT_THAT(ToFloats(y), Pointwise(FloatNear(1e-6f), std::vector<float>{1.5f, 3.0f}));
  // Without nonpad_kv_seqlen the query is at position 0: right_window_size 1 keeps keys 0..1.
  y = RunNodeOk0({OpType::kAttention, {{"right_window_size", IntAttr(1)}}, {q, k, v}, 1, 25});
  EXPECT_THAT(ToFloats(y), Pointwise(FloatNear(1e-6f), std::vector<float>{1.5f, 1.5f}));
  ExpectNodeError(
      {OpType::kAttention, {}, {q, k, v, none, none, none, MakeInt64({2}, {2, 5})}, 1, 24},
      absl::StatusCode::kInvalidArgument, "nonpad_kv_seqlen[1] = 5");
  ExpectNodeError({OpType::kAttention, {{"left_window_size", IntAttr(1)}}, {q, k, v}, 1, 24},
                  absl::StatusCode::kInvalidArgument, "not defined before opset 25");
}

}  // namespace
}  // namespace kiln::testing
