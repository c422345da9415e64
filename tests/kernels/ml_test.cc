// Tests of the ai.onnx.ml reference kernels: ArrayFeatureExtractor, Binarizer, LabelEncoder and
// TreeEnsemble. Expected values are worked by hand (or with the ONNX reference evaluator where
// a comment says so); they are exact unless a tolerance says why.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
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

ir::Attribute StringsAttr(std::vector<std::string> v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kStrings;
  a.strings = std::move(v);
  return a;
}

ir::Tensor U8(std::vector<uint8_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return MakeTensor<uint8_t>({n}, v, DataType::kU8);
}

// ---- ArrayFeatureExtractor ----

TEST(ArrayFeatureExtractorTest, PicksColumnsOfTheLastAxis) {
  ir::Tensor z = RunNodeOk0({OpType::kArrayFeatureExtractor,
                             {},
                             {MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6}), MakeInt64({3}, {2, 0, 2})},
                             1,
                             1});
  EXPECT_THAT(z.dims(), ElementsAre(2, 3));
  EXPECT_THAT(ToFloats(z), ElementsAre(3, 1, 3, 6, 4, 6));
}

TEST(ArrayFeatureExtractorTest, OneDimensionalInputGivesOneRow) {
  ir::Tensor z = RunNodeOk0({OpType::kArrayFeatureExtractor,
                             {},
                             {MakeInt64({4}, {10, 20, 30, 40}), MakeInt64({1, 2}, {3, 1})},
                             1,
                             1});
  EXPECT_EQ(z.dtype(), DataType::kI64);
  EXPECT_THAT(z.dims(), ElementsAre(1, 2));
  EXPECT_THAT(Values<int64_t>(z), ElementsAre(40, 20));
}

TEST(ArrayFeatureExtractorTest, EmptyIndicesAndBadIndices) {
  ir::Tensor z = RunNodeOk0({OpType::kArrayFeatureExtractor,
                             {},
                             {MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6}), MakeInt64({0}, {})},
                             1,
                             1});
  EXPECT_THAT(z.dims(), ElementsAre(2, 0));
  ExpectNodeError({OpType::kArrayFeatureExtractor,
                   {},
                   {MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6}), MakeInt64({1}, {3})},
                   1,
                   1},
                  absl::StatusCode::kInvalidArgument, "out of range");
  ExpectNodeError(
      {OpType::kArrayFeatureExtractor, {}, {MakeFloat({3}, {1, 2, 3}), MakeInt64({1}, {-1})}, 1, 1},
      absl::StatusCode::kInvalidArgument, "index Y[0] = -1");
}

// ---- Binarizer ----

TEST(BinarizerTest, StrictlyAboveThresholdAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ir::Tensor y = RunNodeOk0({OpType::kBinarizer,
                             {{"threshold", FloatAttr(1.0f)}},
                             {MakeFloat({5}, {0.5f, 1.0f, 1.5f, -3.0f, nan})},
                             1,
                             1});
  EXPECT_THAT(ToFloats(y), ElementsAre(0, 0, 1, 0, 0));
  ir::Tensor yi = RunNodeOk0(
      {OpType::kBinarizer, {}, {MakeInt64({3}, {-2, 0, 7})}, 1, 1});  // default threshold 0
  EXPECT_THAT(Values<int64_t>(yi), ElementsAre(0, 0, 1));
  ExpectNodeError({OpType::kBinarizer, {{"threshold", IntAttr(1)}}, {MakeFloat({1}, {1})}, 1, 1},
                  absl::StatusCode::kInvalidArgument, "'threshold' must be a float");
}

// ---- LabelEncoder ----

TEST(LabelEncoderTest, IntToFloatWithDefault) {
  ir::Tensor y = RunNodeOk0({OpType::kLabelEncoder,
                             {{"keys_int64s", IntsAttr({1, 2, 3})},
                              {"values_floats", FloatsAttr({0.5f, 1.5f, 2.5f})},
                              {"default_float", FloatAttr(-9.0f)}},
                             {MakeInt64({2, 2}, {3, 1, 7, 2})},
                             1,
                             2});
  EXPECT_EQ(y.dtype(), DataType::kF32);
  EXPECT_THAT(y.dims(), ElementsAre(2, 2));
  EXPECT_THAT(ToFloats(y), ElementsAre(2.5f, 0.5f, -9.0f, 1.5f));
}

TEST(LabelEncoderTest, FloatToIntDefaultsToMinusOneAndMatchesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ir::Tensor y =
      RunNodeOk0({OpType::kLabelEncoder,
                  {{"keys_floats", FloatsAttr({0.0f, nan})}, {"values_int64s", IntsAttr({10, 20})}},
                  {MakeFloat({4}, {-0.0f, nan, 5.0f, 0.0f})},
                  1,
                  2});
  EXPECT_EQ(y.dtype(), DataType::kI64);
  EXPECT_THAT(Values<int64_t>(y), ElementsAre(10, 20, -1, 10));  // -0.0 is the key 0.0
}

TEST(LabelEncoderTest, TensorAttributesOfOpset4) {
  ir::Tensor y = RunNodeOk0(
      {OpType::kLabelEncoder,
       {{"keys_tensor", TensorAttr(MakeTensor<int32_t>({3}, {5, 6, 7}, DataType::kI32))},
        {"values_tensor", TensorAttr(MakeTensor<int16_t>({3}, {-1, -2, -3}, DataType::kI16))},
        {"default_tensor", TensorAttr(MakeTensor<int16_t>({1}, {42}, DataType::kI16))}},
       {MakeTensor<int32_t>({4}, {7, 5, 0, 6}, DataType::kI32)},
       1,
       4});
  EXPECT_EQ(y.dtype(), DataType::kI16);
  EXPECT_THAT(Values<int16_t>(y), ElementsAre(-3, -1, 42, -2));
  ir::Tensor empty = RunNodeOk0({OpType::kLabelEncoder,
                                 {{"keys_int64s", IntsAttr({1})}, {"values_int64s", IntsAttr({2})}},
                                 {MakeInt64({0}, {})},
                                 1,
                                 2});
  EXPECT_THAT(empty.dims(), ElementsAre(0));
}

TEST(LabelEncoderTest, BadAttributesAndStrings) {
  const ir::Tensor x = MakeInt64({1}, {1});
  ExpectNodeError({OpType::kLabelEncoder,
                   {{"keys_int64s", IntsAttr({1, 2})}, {"values_int64s", IntsAttr({1})}},
                   {x},
                   1,
                   2},
                  absl::StatusCode::kInvalidArgument, "2 keys but 1 values");
  ExpectNodeError({OpType::kLabelEncoder, {{"keys_int64s", IntsAttr({1})}}, {x}, 1, 2},
                  absl::StatusCode::kInvalidArgument, "exactly one keys_* and one values_*");
  ExpectNodeError({OpType::kLabelEncoder,
                   {{"keys_int64s", IntsAttr({1})}, {"values_strings", StringsAttr({"a"})}},
                   {x},
                   1,
                   2},
                  absl::StatusCode::kUnimplemented, "unsupported dtype string");
  ExpectNodeError({OpType::kLabelEncoder,
                   {{"keys_floats", FloatsAttr({1})}, {"values_int64s", IntsAttr({1})}},
                   {x},
                   1,
                   2},
                  absl::StatusCode::kInvalidArgument, "keys are floating-point");
  ExpectNodeError({OpType::kLabelEncoder, {{"classes_strings", StringsAttr({"a"})}}, {x}, 1, 1},
                  absl::StatusCode::kUnimplemented, "unsupported dtype string");
}

// ---- TreeEnsemble ----

// Two trees on X [N, 2], both splitting feature 0 at 1.0 (LEQ): tree 0 gives leaf 0 (weight 1,
// target 0) when true and leaf 1 (weight 2, target 1) when false; tree 1 gives leaf 2 (weight
// 10, target 0) when true, leaf 3 (weight 20, target 0) when false.
std::vector<std::pair<std::string, ir::Attribute>> TwoTrees(int64_t aggregate, int64_t post) {
  return {{"nodes_featureids", IntsAttr({0, 0})},
          {"nodes_splits", TensorAttr(MakeFloat({2}, {1.0f, 1.0f}))},
          {"nodes_modes", TensorAttr(U8({0, 0}))},
          {"nodes_truenodeids", IntsAttr({0, 2})},
          {"nodes_trueleafs", IntsAttr({1, 1})},
          {"nodes_falsenodeids", IntsAttr({1, 3})},
          {"nodes_falseleafs", IntsAttr({1, 1})},
          {"leaf_targetids", IntsAttr({0, 1, 0, 0})},
          {"leaf_weights", TensorAttr(MakeFloat({4}, {1, 2, 10, 20}))},
          {"tree_roots", IntsAttr({0, 1})},
          {"n_targets", IntAttr(2)},
          {"aggregate_function", IntAttr(aggregate)},
          {"post_transform", IntAttr(post)}};
}

std::vector<float> RunTrees(int64_t aggregate, int64_t post) {
  // Row 0: x0 = 0.5 (true in both trees); row 1: x0 = 3 (false in both).
  return ToFloats(RunNodeOk0({OpType::kTreeEnsemble,
                              TwoTrees(aggregate, post),
                              {MakeFloat({2, 2}, {0.5f, 9, 3, 9})},
                              1,
                              5}));
}

TEST(TreeEnsembleTest, AggregateModes) {
  const float max = std::numeric_limits<float>::max();
  // Row 0: target 0 gets 1 and 10, target 1 nothing. Row 1: target 0 gets 20, target 1 gets 2.
  EXPECT_THAT(RunTrees(1, 0), ElementsAre(11, 0, 20, 2));     // SUM
  EXPECT_THAT(RunTrees(0, 0), ElementsAre(5.5f, 0, 10, 1));   // AVERAGE: divided by 2 trees
  EXPECT_THAT(RunTrees(2, 0), ElementsAre(1, max, 20, 2));    // MIN: unreached target = max
  EXPECT_THAT(RunTrees(3, 0), ElementsAre(10, -max, 20, 2));  // MAX: unreached target = -max
}

TEST(TreeEnsembleTest, PostTransforms) {
  // 1e-6: the transforms are computed in double and rounded once to float.
  auto logistic = [](double v) { return static_cast<float>(1 / (1 + std::exp(-v))); };
  EXPECT_THAT(RunTrees(1, 2),
              Pointwise(FloatNear(1e-6),
                        std::vector<float>{logistic(11), logistic(0), logistic(20), logistic(2)}));
  const double e = std::exp(-11.0);  // softmax of (11, 0) = (1, e^-11) / (1 + e^-11)
  const std::vector<float> soft = {static_cast<float>(1 / (1 + e)), static_cast<float>(e / (1 + e)),
                                   static_cast<float>(1 / (1 + std::exp(-18.0))),
                                   static_cast<float>(std::exp(-18.0) / (1 + std::exp(-18.0)))};
  EXPECT_THAT(RunTrees(1, 1), Pointwise(FloatNear(1e-6), soft));
  // SOFTMAX_ZERO: row 0's zero stays zero and leaves the sum; row 1 as SOFTMAX.
  EXPECT_THAT(RunTrees(1, 3),
              Pointwise(FloatNear(1e-6), std::vector<float>{1, 0, soft[2], soft[3]}));
}

TEST(TreeEnsembleTest, ProbitIsTheNormalQuantile) {
  // One single-leaf tree (both branches to leaf 0) of weight 0.975: probit = 1.959964 (z_0.975).
  ir::Tensor y = RunNodeOk0({OpType::kTreeEnsemble,
                             {{"nodes_featureids", IntsAttr({0})},
                              {"nodes_splits", TensorAttr(MakeFloat({1}, {0}))},
                              {"nodes_modes", TensorAttr(U8({0}))},
                              {"nodes_truenodeids", IntsAttr({0})},
                              {"nodes_trueleafs", IntsAttr({1})},
                              {"nodes_falsenodeids", IntsAttr({0})},
                              {"nodes_falseleafs", IntsAttr({1})},
                              {"leaf_targetids", IntsAttr({0})},
                              {"leaf_weights", TensorAttr(MakeFloat({1}, {0.975f}))},
                              {"tree_roots", IntsAttr({0})},
                              {"post_transform", IntAttr(4)}},
                             {MakeFloat({1, 1}, {5})},
                             1,
                             5});
  // 1e-5: 0.975f itself is 0.97500002, whose quantile differs from z_0.975 by ~1.7e-6.
  EXPECT_THAT(ToFloats(y), Pointwise(FloatNear(1e-5), std::vector<float>{1.959964f}));
}

TEST(TreeEnsembleTest, MembershipAndMissingValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Node 0: x0 in {1, 4}? -> leaf 0 (weight 1) else leaf 1 (weight 2); NaN tracks true.
  auto attrs = std::vector<std::pair<std::string, ir::Attribute>>{
      {"nodes_featureids", IntsAttr({0})},
      {"nodes_splits", TensorAttr(MakeFloat({1}, {0}))},
      {"nodes_modes", TensorAttr(U8({6}))},
      {"nodes_truenodeids", IntsAttr({0})},
      {"nodes_trueleafs", IntsAttr({1})},
      {"nodes_falsenodeids", IntsAttr({1})},
      {"nodes_falseleafs", IntsAttr({1})},
      {"nodes_missing_value_tracks_true", IntsAttr({1})},
      {"membership_values", TensorAttr(MakeFloat({3}, {4, 1, nan}))},
      {"leaf_targetids", IntsAttr({0, 0})},
      {"leaf_weights", TensorAttr(MakeFloat({2}, {1, 2}))},
      {"tree_roots", IntsAttr({0})}};
  ir::Tensor y =
      RunNodeOk0({OpType::kTreeEnsemble, attrs, {MakeFloat({4, 1}, {1, 2, 4, nan})}, 1, 5});
  EXPECT_THAT(y.dims(), ElementsAre(4, 1));  // n_targets defaults to max(leaf_targetids) + 1
  EXPECT_THAT(ToFloats(y), ElementsAre(1, 2, 1, 1));
  // Empty batch.
  ir::Tensor empty = RunNodeOk0({OpType::kTreeEnsemble, attrs, {MakeFloat({0, 1}, {})}, 1, 5});
  EXPECT_THAT(empty.dims(), ElementsAre(0, 1));
}

TEST(TreeEnsembleTest, BadAttributes) {
  auto with = [](std::string key, ir::Attribute v) {
    auto a = TwoTrees(1, 0);
    for (auto& [k, val] : a) {
      if (k == key) val = v;
    }
    return NodeSpec{OpType::kTreeEnsemble, a, {MakeFloat({1, 2}, {0, 0})}, 1, 5};
  };
  ExpectNodeError(with("aggregate_function", IntAttr(7)), absl::StatusCode::kInvalidArgument,
                  "aggregate_function must be 0..3");
  ExpectNodeError(with("post_transform", IntAttr(-1)), absl::StatusCode::kInvalidArgument,
                  "post_transform must be 0..4");
  ExpectNodeError(with("nodes_truenodeids", IntsAttr({9, 2})), absl::StatusCode::kInvalidArgument,
                  "nodes_truenodeids[0] = 9 is out of range");
  ExpectNodeError(with("leaf_targetids", IntsAttr({0, 5, 0, 0})),
                  absl::StatusCode::kInvalidArgument, "leaf_targetids[1] = 5");
  ExpectNodeError(with("nodes_modes", TensorAttr(U8({0, 9}))), absl::StatusCode::kInvalidArgument,
                  "nodes_modes[1]");
  ExpectNodeError(with("nodes_featureids", IntsAttr({0})), absl::StatusCode::kInvalidArgument,
                  "has 2 entries but nodes_featureids has 1");
  // Node 0's false branch goes to interior node 1, whose true branch goes back to node 0.
  auto cyclic = with("nodes_falseleafs", IntsAttr({0, 1}));
  for (auto& [k, v] : cyclic.attrs) {
    if (k == "nodes_trueleafs") v = IntsAttr({1, 0});
    if (k == "nodes_truenodeids") v = IntsAttr({0, 0});
    if (k == "tree_roots") v = IntsAttr({0});
  }
  ExpectNodeError(cyclic, absl::StatusCode::kInvalidArgument, "cycle");
  // A feature id past X's columns fails at run time, naming the attribute.
  ExpectNodeError(with("nodes_featureids", IntsAttr({0, 5})), absl::StatusCode::kInvalidArgument,
                  "nodes_featureids[1] = 5 is out of range for X with 2 features");
}

}  // namespace
}  // namespace kiln::testing
