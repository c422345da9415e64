// Tests of the ai.onnx.preview FlexAttention reference kernel without modifier subgraphs (those
// run in sessions only: the conformance cases test_flexattention_*_mod cover them).
#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace kiln::testing {
namespace {

using ir::OpType;
using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::Pointwise;

TEST(FlexAttentionTest, SoftmaxWeightsTheValues) {
  // scale 1: scores = [0, ln 3] -> probs [1/4, 3/4] -> Y = 4/4 + 3 * 8/4 = 7.
  const float ln3 = std::log(3.0f);
  ir::Tensor y = RunNodeOk0({OpType::kFlexAttention,
                             {{"scale", FloatAttr(1.0f)}},
                             {MakeFloat({1, 1, 1, 1}, {1}), MakeFloat({1, 1, 2, 1}, {0, ln3}),
                              MakeFloat({1, 1, 2, 1}, {4, 8})},
                             1,
                             1});
  EXPECT_THAT(y.dims(), ElementsAre(1, 1, 1, 1));
  // 1e-5: ln 3 rounded to float moves the probabilities by ~1e-8 relative, Y by far less.
  EXPECT_THAT(ToFloats(y), Pointwise(FloatNear(1e-5), std::vector<float>{7}));
}

TEST(FlexAttentionTest, DefaultScaleAndGroupedHeads) {
  // E = 4: default scale 1/2. Two query heads share one K/V head; head 0's q = 0 gives equal
  // weights (mean of V), head 1's q = (2 ln 3, 0, 0, 0) gives scores [0, ln 3] as above.
  const float l = 2 * std::log(3.0f);
  ir::Tensor y = RunNodeOk0(
      {OpType::kFlexAttention,
       {},
       {MakeFloat({1, 2, 1, 4}, {0, 0, 0, 0, l, 0, 0, 0}),
        MakeFloat({1, 1, 2, 4}, {0, 0, 0, 0, 1, 0, 0, 0}), MakeFloat({1, 1, 2, 2}, {4, 0, 8, 1})},
       1,
       1});
  EXPECT_THAT(y.dims(), ElementsAre(1, 2, 1, 2));
  // 1e-5 as above.
  EXPECT_THAT(ToFloats(y), Pointwise(FloatNear(1e-5), std::vector<float>{6, 0.5f, 7, 0.75f}));
}

TEST(FlexAttentionTest, HalfInputsAndErrors) {
  ir::Tensor y = RunNodeOk0({OpType::kFlexAttention,
                             {{"scale", FloatAttr(1.0f)}},
                             {MakeHalf({1, 1, 1, 1}, {1}), MakeHalf({1, 1, 2, 1}, {0, 0}),
                              MakeHalf({1, 1, 2, 1}, {4, 8})},
                             1,
                             1});
  EXPECT_EQ(y.dtype(), DataType::kF16);
  EXPECT_THAT(ToFloats(y), ElementsAre(6.0f));  // equal weights; 6 is exact in fp16
  ExpectNodeError({OpType::kFlexAttention,
                   {},
                   {MakeFloat({1, 3, 1, 1}, {1, 1, 1}), MakeFloat({1, 2, 1, 1}, {1, 1}),
                    MakeFloat({1, 2, 1, 1}, {1, 1})},
                   1,
                   1},
                  absl::StatusCode::kInvalidArgument, "multiple of kv_num_heads");
  ExpectNodeError(
      {OpType::kFlexAttention,
       {},
       {MakeFloat({1, 1, 1}, {1}), MakeFloat({1, 1, 1, 1}, {1}), MakeFloat({1, 1, 1, 1}, {1})},
       1,
       1},
      absl::StatusCode::kInvalidArgument, "rank 4");
  ExpectNodeError(
      {OpType::kFlexAttention,
       {{"softmax_precision", IntAttr(7)}},
       {MakeFloat({1, 1, 1, 1}, {1}), MakeFloat({1, 1, 1, 1}, {1}), MakeFloat({1, 1, 1, 1}, {1})},
       1,
       1},
      absl::StatusCode::kInvalidArgument, "softmax_precision");
}

}  // namespace
}  // namespace kiln::testing
