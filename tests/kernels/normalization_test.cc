// Tests of the normalization reference kernels: BatchNormalization, InstanceNormalization,
// LayerNormalization, GroupNormalization, RMSNormalization. Most cases use epsilon = 0 and
// inputs whose statistics are exact, so expected values are exact too.
#include <cmath>
#include <vector>

#include "engine/common/half.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

// NodeSpec literals leave output_dtypes (unused here) to its default.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace kiln::testing {
namespace {

using ir::OpType;
using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

// A few fp32 ulps around 1: results of one sqrt, one division and a multiply-add.
constexpr float kTol = 1e-6f;

const std::pair<std::string, ir::Attribute> kEps0 = {"epsilon", FloatAttr(0)};

// ---- BatchNormalization ----

TEST(BatchNormTest, Inference) {
  const ir::Tensor x = MakeFloat({1, 2, 1, 2}, {1, 2, 3, 5});
  std::vector<ir::Tensor> in = {x, MakeFloat({2}, {2, 1}), MakeFloat({2}, {0, 1}),
                                MakeFloat({2}, {1.5f, 4}), MakeFloat({2}, {0.25f, 1})};
  for (int version : {7, 9, 14, 15}) {
    auto out = RunNodeOk({OpType::kBatchNormalization, {kEps0}, in, 1, version});
    EXPECT_THAT(ToFloats(out[0]), ElementsAre(-2, 2, 0, 2)) << "opset " << version;
  }
}

// Batch statistics of [1, 2, 3, 6] (one channel): mean 3, population variance 3.5.
TEST(BatchNormTest, TrainingModeOpset15) {
  std::vector<ir::Tensor> in = {MakeFloat({2, 1, 2}, {1, 2, 3, 6}), MakeFloat({1}, {1}),
                                MakeFloat({1}, {0}), MakeFloat({1}, {0}), MakeFloat({1}, {1})};
  auto out = RunNodeOk({OpType::kBatchNormalization,
                        {kEps0, {"training_mode", IntAttr(1)}, {"momentum", FloatAttr(0.5f)}},
                        in,
                        3,
                        15});
  const float s = std::sqrt(3.5f);
  EXPECT_THAT(ToFloats(out[0]), Pointwise(FloatNear(kTol), {-2 / s, -1 / s, 0.0f, 3 / s}));
  EXPECT_THAT(ToFloats(out[1]), ElementsAre(1.5f));   // 0 * 0.5 + 3 * 0.5
  EXPECT_THAT(ToFloats(out[2]), ElementsAre(2.25f));  // 1 * 0.5 + 3.5 * 0.5
}

// Before opset 14, extra outputs select training mode and add the saved batch statistics.
TEST(BatchNormTest, TrainingModeOpset9FiveOutputs) {
  std::vector<ir::Tensor> in = {MakeFloat({2, 1, 2}, {1, 2, 3, 6}), MakeFloat({1}, {1}),
                                MakeFloat({1}, {0}), MakeFloat({1}, {0}), MakeFloat({1}, {1})};
  auto out =
      RunNodeOk({OpType::kBatchNormalization, {kEps0, {"momentum", FloatAttr(0.5f)}}, in, 5, 9});
  EXPECT_THAT(ToFloats(out[1]), ElementsAre(1.5f));
  EXPECT_THAT(ToFloats(out[2]), ElementsAre(2.25f));
  EXPECT_THAT(ToFloats(out[3]), ElementsAre(3));
  EXPECT_THAT(ToFloats(out[4]), ElementsAre(3.5f));
}

// Opset 7 spatial=0: per-activation parameters of shape (C x D).
TEST(BatchNormTest, NonSpatialOpset7) {
  std::vector<ir::Tensor> in = {MakeFloat({2, 1, 2}, {1, 2, 3, 6}), MakeFloat({1, 2}, {1, 1}),
                                MakeFloat({1, 2}, {0, 0}), MakeFloat({1, 2}, {1, 2}),
                                MakeFloat({1, 2}, {1, 4})};
  auto out = RunNodeOk({OpType::kBatchNormalization, {kEps0, {"spatial", IntAttr(0)}}, in, 1, 7});
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(0, 0, 2, 2));
}

// fp16 X with fp32 parameters (opset 15 allows mixed types): computed in fp32, rounded once.
TEST(BatchNormTest, HalfInputFloatParams) {
  std::vector<ir::Tensor> in = {MakeHalf({1, 1, 3}, {1, 2, 4}), MakeFloat({1}, {1}),
                                MakeFloat({1}, {0}), MakeFloat({1}, {0}), MakeFloat({1}, {3})};
  auto out = RunNodeOk({OpType::kBatchNormalization, {kEps0}, in, 1, 15});
  EXPECT_EQ(out[0].dtype(), DataType::kF16);
  const float s = std::sqrt(3.0f);
  EXPECT_THAT(ToFloats(out[0]),
              ElementsAre(static_cast<float>(Float16(1 / s)), static_cast<float>(Float16(2 / s)),
                          static_cast<float>(Float16(4 / s))));
}

TEST(BatchNormTest, Errors) {
  const ir::Tensor x = MakeFloat({1, 2, 2}, {1, 2, 3, 4});
  const ir::Tensor p2 = MakeFloat({2}, {1, 1});
  const ir::Tensor p3 = MakeFloat({3}, {1, 1, 1});
  auto st = RunNode({OpType::kBatchNormalization, {}, {x, p2, p2, p3, p2}, 1, 15}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("mean"));
  st = RunNode({OpType::kBatchNormalization, {}, {x, p2, p2, p2, p2}, 3, 15}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  st = RunNode({OpType::kBatchNormalization, {}, {x, p2, p2, p2}, 1, 15}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  st = RunNode({OpType::kBatchNormalization, {}, {MakeFloat({2}, {1, 2}), p2, p2, p2, p2}, 1, 15})
           .status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

// ---- InstanceNormalization ----

TEST(InstanceNormTest, PerInstancePerChannel) {
  auto out = RunNodeOk(
      {OpType::kInstanceNormalization,
       {kEps0},
       {MakeFloat({1, 2, 2}, {1, 3, 0, 4}), MakeFloat({2}, {1, 2}), MakeFloat({2}, {0, 1})}});
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(-1, 1, -1, 3));
}

TEST(InstanceNormTest, ScaleSizeMismatch) {
  auto st = RunNode({OpType::kInstanceNormalization,
                     {},
                     {MakeFloat({1, 2, 2}, {1, 3, 0, 4}), MakeFloat({3}, {1, 2, 3}),
                      MakeFloat({2}, {0, 1})}})
                .status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

// ---- LayerNormalization ----

TEST(LayerNormTest, LastAxisWithMeanAndInvStdDev) {
  auto out =
      RunNodeOk({OpType::kLayerNormalization,
                 {kEps0},
                 {MakeFloat({2, 2}, {1, 3, 2, 6}), MakeFloat({2}, {1, 2}), MakeFloat({2}, {0, 1})},
                 3,
                 17});
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(-1, 3, -1, 3));
  EXPECT_THAT(out[1].dims(), ElementsAre(2, 1));
  EXPECT_EQ(out[1].dtype(), DataType::kF32);
  EXPECT_THAT(ToFloats(out[1]), ElementsAre(2, 4));
  EXPECT_THAT(ToFloats(out[2]), ElementsAre(1, 0.5f));
}

TEST(LayerNormTest, Axis0AndBroadcastScale) {
  // Whole tensor: mean 3, variance 3.5; scale of shape [1] broadcasts, bias omitted.
  auto out = RunNodeOk({OpType::kLayerNormalization,
                        {kEps0, {"axis", IntAttr(0)}},
                        {MakeFloat({2, 2}, {1, 3, 2, 6}), MakeFloat({1}, {2})},
                        1,
                        17});
  const float s = std::sqrt(3.5f);
  EXPECT_THAT(ToFloats(out[0]), Pointwise(FloatNear(kTol), {-4 / s, 0.0f, -2 / s, 6 / s}));
  // Per-row scale of shape [2, 1] with axis -1 (broadcast across the leading dim too).
  out = RunNodeOk({OpType::kLayerNormalization,
                   {kEps0},
                   {MakeFloat({2, 2}, {1, 3, 2, 6}), MakeFloat({2, 1}, {1, 10})},
                   1,
                   17});
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(-1, 1, -10, 10));
}

// fp16 input, fp32 stash: stage one in fp32, each output rounded once to fp16.
TEST(LayerNormTest, HalfRoundsOnce) {
  auto out =
      RunNodeOk({OpType::kLayerNormalization,
                 {},
                 {MakeHalf({3}, {0, 1, 2}), MakeHalf({3}, {1, 1, 1}), MakeHalf({3}, {0, 0, 0})},
                 1,
                 17});
  EXPECT_EQ(out[0].dtype(), DataType::kF16);
  const float inv = 1.0f / std::sqrt(2.0f / 3.0f + 1e-5f);
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(static_cast<float>(Float16(-inv)), 0.0f,
                                            static_cast<float>(Float16(inv))));
}

TEST(LayerNormTest, Bf16StashTypesStatistics) {
  auto out = RunNodeOk({OpType::kLayerNormalization,
                        {kEps0, {"stash_type", IntAttr(16)}},
                        {MakeFloat({1, 2}, {1, 3}), MakeFloat({2}, {1, 1})},
                        3,
                        17});
  EXPECT_EQ(out[1].dtype(), DataType::kBF16);
  EXPECT_THAT(ToFloats(out[1]), ElementsAre(2));
  EXPECT_THAT(ToFloats(out[2]), ElementsAre(1));
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(-1, 1));
}

TEST(LayerNormTest, EmptyRowsGiveNanStatistics) {
  auto out = RunNodeOk(
      {OpType::kLayerNormalization, {}, {MakeFloat({2, 0}, {}), MakeFloat({0}, {})}, 3, 17});
  EXPECT_EQ(out[0].num_elements(), 0);
  EXPECT_THAT(out[1].dims(), ElementsAre(2, 1));
  EXPECT_THAT(ToFloats(out[1]), ::testing::Each(::testing::IsNan()));
  EXPECT_THAT(ToFloats(out[2]), ::testing::Each(::testing::IsNan()));
}

TEST(LayerNormTest, Errors) {
  const ir::Tensor x = MakeFloat({2, 2}, {1, 3, 2, 6});
  auto st =
      RunNode({OpType::kLayerNormalization, {}, {x, MakeFloat({3}, {1, 1, 1})}, 1, 17}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("scale"));
  st =
      RunNode(
          {OpType::kLayerNormalization, {{"axis", IntAttr(2)}}, {x, MakeFloat({2}, {1, 1})}, 1, 17})
          .status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  st = RunNode({OpType::kLayerNormalization,
                {{"stash_type", IntAttr(7)}},
                {x, MakeFloat({2}, {1, 1})},
                1,
                17})
           .status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

// ---- GroupNormalization ----

// Two groups of two channels: [1, 3] and [2, 6] both normalise to [-1, 1].
TEST(GroupNormTest, Opset18PerGroupParams) {
  auto out = RunNodeOk(
      {OpType::kGroupNormalization,
       {kEps0, {"num_groups", IntAttr(2)}},
       {MakeFloat({1, 4, 1}, {1, 3, 2, 6}), MakeFloat({2}, {2, 3}), MakeFloat({2}, {0, 1})},
       1,
       18});
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(-2, 2, -2, 4));
}

TEST(GroupNormTest, Opset21PerChannelParams) {
  auto out = RunNodeOk({OpType::kGroupNormalization,
                        {kEps0, {"num_groups", IntAttr(2)}},
                        {MakeFloat({1, 4, 1}, {1, 3, 2, 6}), MakeFloat({4}, {1, 2, 3, 4}),
                         MakeFloat({4}, {0, 0, 0, 1})},
                        1,
                        21});
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(-1, 2, -3, 5));
}

TEST(GroupNormTest, Errors) {
  const ir::Tensor x = MakeFloat({1, 4, 1}, {1, 3, 2, 6});
  const ir::Tensor p4 = MakeFloat({4}, {1, 1, 1, 1});
  auto st = RunNode({OpType::kGroupNormalization,
                     {{"num_groups", IntAttr(3)}},
                     {x, MakeFloat({3}, {1, 1, 1}), MakeFloat({3}, {1, 1, 1})},
                     1,
                     18})
                .status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  st = RunNode({OpType::kGroupNormalization, {{"num_groups", IntAttr(2)}}, {x, p4, p4}, 1, 18})
           .status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  st = RunNode({OpType::kGroupNormalization, {}, {x, p4, p4}, 1, 21}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

// ---- RMSNormalization ----

TEST(RmsNormTest, LastAxisAndAxis0) {
  // Rows [3, -3] and [1, 1] have RMS 3 and 1.
  auto out = RunNodeOk({OpType::kRMSNormalization,
                        {kEps0},
                        {MakeFloat({2, 2}, {3, -3, 1, 1}), MakeFloat({2}, {1, 2})},
                        1,
                        23});
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(1, -2, 1, 2));
  // Over everything: mean square (9 + 9 + 1 + 1) / 4 = 5.
  out = RunNodeOk({OpType::kRMSNormalization,
                   {kEps0, {"axis", IntAttr(0)}},
                   {MakeFloat({2, 2}, {3, -3, 1, 1}), MakeFloat({1}, {1})},
                   1,
                   23});
  const float r = std::sqrt(5.0f);
  EXPECT_THAT(ToFloats(out[0]), Pointwise(FloatNear(kTol), {3 / r, -3 / r, 1 / r, 1 / r}));
}

TEST(RmsNormTest, HalfRoundsOnceAndBadScale) {
  auto out = RunNodeOk(
      {OpType::kRMSNormalization, {}, {MakeHalf({2}, {1, 2}), MakeFloat({2}, {1, 1})}, 1, 23});
  EXPECT_EQ(out[0].dtype(), DataType::kF16);
  const float rms = std::sqrt(2.5f + 1e-5f);
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(static_cast<float>(Float16(1 / rms)),
                                            static_cast<float>(Float16(2 / rms))));
  auto st = RunNode({OpType::kRMSNormalization,
                     {},
                     {MakeFloat({2}, {1, 2}), MakeFloat({3}, {1, 1, 1})},
                     1,
                     23})
                .status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::testing
