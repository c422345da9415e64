// Tests of the loss reference kernels: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
// NLL cases use small integers, so expected values are exact; softmax cases compare against
// the closed form computed in double.
#include <cmath>
#include <string>
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
using ::testing::Pointwise;

using Attrs = std::vector<std::pair<std::string, ir::Attribute>>;

Attrs Reduction(const char* r) { return {{"reduction", StringAttr(r)}}; }

// input[n][c] for N=2, C=3; targets pick input[0][2] = 3 and input[1][0] = 4.
const ir::Tensor kX = MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6});
const ir::Tensor kTarget = MakeInt64({2}, {2, 0});
const ir::Tensor kWeight = MakeFloat({3}, {0.5f, 1, 2});

// ---- NegativeLogLikelihoodLoss ----

TEST(NllLossTest, Reductions) {
  for (int version : {12, 13, 22}) {
    auto none = RunNodeOk(
        {OpType::kNegativeLogLikelihoodLoss, Reduction("none"), {kX, kTarget}, 1, version});
    EXPECT_EQ(none[0].dims(), (std::vector<int64_t>{2}));
    EXPECT_THAT(ToFloats(none[0]), ElementsAre(-3, -4)) << version;
    auto sum = RunNodeOk(
        {OpType::kNegativeLogLikelihoodLoss, Reduction("sum"), {kX, kTarget}, 1, version});
    EXPECT_TRUE(sum[0].dims().empty());
    EXPECT_THAT(ToFloats(sum[0]), ElementsAre(-7));
    // Default reduction is mean.
    auto mean = RunNodeOk({OpType::kNegativeLogLikelihoodLoss, {}, {kX, kTarget}, 1, version});
    EXPECT_THAT(ToFloats(mean[0]), ElementsAre(-3.5f));
  }
}

TEST(NllLossTest, WeightsMeanDividesByWeightSum) {
  auto none =
      RunNodeOk({OpType::kNegativeLogLikelihoodLoss, Reduction("none"), {kX, kTarget, kWeight}});
  EXPECT_THAT(ToFloats(none[0]), ElementsAre(-6, -2));
  auto mean = RunNodeOk({OpType::kNegativeLogLikelihoodLoss, {}, {kX, kTarget, kWeight}});
  EXPECT_THAT(ToFloats(mean[0]), ElementsAre(-8 / 2.5f));  // weights of targets: 2 + 0.5
}

TEST(NllLossTest, IgnoreIndex) {
  Attrs a = {{"ignore_index", IntAttr(0)}};
  auto none = RunNodeOk({OpType::kNegativeLogLikelihoodLoss,
                         {{"ignore_index", IntAttr(0)}, {"reduction", StringAttr("none")}},
                         {kX, kTarget}});
  EXPECT_THAT(ToFloats(none[0]), ElementsAre(-3, 0));
  // Mean over the one non-ignored target, with and without weights.
  EXPECT_THAT(ToFloats(RunNodeOk({OpType::kNegativeLogLikelihoodLoss, a, {kX, kTarget}})[0]),
              ElementsAre(-3));
  EXPECT_THAT(
      ToFloats(RunNodeOk({OpType::kNegativeLogLikelihoodLoss, a, {kX, kTarget, kWeight}})[0]),
      ElementsAre(-3));  // -6 / 2
  // An ignored target may be out of [0, C).
  auto neg = RunNodeOk({OpType::kNegativeLogLikelihoodLoss,
                        {{"ignore_index", IntAttr(-1)}, {"reduction", StringAttr("sum")}},
                        {kX, MakeInt64({2}, {-1, 1})}});
  EXPECT_THAT(ToFloats(neg[0]), ElementsAre(-5));
}

// N x C x d1 with int32 targets: input[0][c][d] = {{1, 2}, {3, 4}}, targets (1, 0).
TEST(NllLossTest, SpatialInt32Target) {
  auto out = RunNodeOk(
      {OpType::kNegativeLogLikelihoodLoss,
       Reduction("none"),
       {MakeFloat({1, 2, 2}, {1, 2, 3, 4}), MakeTensor<int32_t>({1, 2}, {1, 0}, DataType::kI32)}});
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{1, 2}));
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(-3, -2));
}

// fp16 sums accumulate in fp32: 1024 + 0.5 + 0.5 is 1025 (representable in fp16); an fp16
// accumulator would round 1024.5 to 1024 twice.
TEST(NllLossTest, Float16AccumulatesInFloat) {
  auto out = RunNodeOk({OpType::kNegativeLogLikelihoodLoss,
                        Reduction("sum"),
                        {MakeHalf({3, 1}, {1024.0f, 0.5f, 0.5f}), MakeInt64({3}, {0, 0, 0})}});
  EXPECT_EQ(out[0].dtype(), DataType::kF16);
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(-1025));
}

// bf16: 256 + 1 + 1 = 258 is representable; a bf16 accumulator would stay at 256.
TEST(NllLossTest, BFloat16AccumulatesInFloat) {
  auto out = RunNodeOk({OpType::kNegativeLogLikelihoodLoss,
                        Reduction("sum"),
                        {MakeBf16({3, 1}, {256.0f, 1.0f, 1.0f}), MakeInt64({3}, {0, 0, 0})}});
  EXPECT_EQ(out[0].dtype(), DataType::kBF16);
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(-258));
}

TEST(NllLossTest, Errors) {
  ExpectNodeError({OpType::kNegativeLogLikelihoodLoss, {}, {kX, MakeInt64({2}, {3, 0})}},
                  absl::StatusCode::kInvalidArgument, "out of range");
  ExpectNodeError({OpType::kNegativeLogLikelihoodLoss, {}, {kX, MakeInt64({2}, {-1, 0})}},
                  absl::StatusCode::kInvalidArgument, "out of range");
  ExpectNodeError({OpType::kNegativeLogLikelihoodLoss, Reduction("avg"), {kX, kTarget}},
                  absl::StatusCode::kInvalidArgument, "reduction");
  ExpectNodeError({OpType::kNegativeLogLikelihoodLoss, {}, {kX, MakeInt64({3}, {0, 0, 0})}},
                  absl::StatusCode::kInvalidArgument, "target shape");
  ExpectNodeError({OpType::kNegativeLogLikelihoodLoss, {}, {kX, kTarget, MakeFloat({2}, {1, 1})}},
                  absl::StatusCode::kInvalidArgument, "weight");
  ExpectNodeError({OpType::kNegativeLogLikelihoodLoss, {}, {MakeFloat({3}, {1, 2, 3}), kTarget}},
                  absl::StatusCode::kInvalidArgument, "rank >= 2");
  ExpectNodeError({OpType::kNegativeLogLikelihoodLoss, {}, {kX, MakeFloat({2}, {0, 0})}},
                  absl::StatusCode::kInvalidArgument, "int32 or int64");
}

// ---- SoftmaxCrossEntropyLoss ----

// log softmax of row `r` at class `k`, in double.
double LogSoftmax(const std::vector<double>& r, int k) {
  double s = 0;
  for (double v : r) s += std::exp(v);
  return r[k] - std::log(s);
}

// Rows {1, 2, 3} and {1, 1, 1}, labels 2 and 1.
TEST(SoftmaxCrossEntropyTest, LossAndLogProb) {
  const std::vector<double> r0 = {1, 2, 3}, r1 = {1, 1, 1};
  const double l0 = -LogSoftmax(r0, 2), l1 = -LogSoftmax(r1, 1);
  // One fp32 rounding of exp/log results of magnitude ~1: a few ulps.
  constexpr float kTol = 1e-6f;
  for (int version : {12, 13, 22}) {
    auto out = RunNodeOk({OpType::kSoftmaxCrossEntropyLoss,
                          Reduction("none"),
                          {MakeFloat({2, 3}, {1, 2, 3, 1, 1, 1}), MakeInt64({2}, {2, 1})},
                          2,
                          version});
    EXPECT_THAT(ToFloats(out[0]), Pointwise(FloatNear(kTol), {float(l0), float(l1)}));
    std::vector<float> lp;
    for (const auto* r : {&r0, &r1})
      for (int k = 0; k < 3; ++k) lp.push_back(static_cast<float>(LogSoftmax(*r, k)));
    EXPECT_EQ(out[1].dims(), (std::vector<int64_t>{2, 3}));
    EXPECT_THAT(ToFloats(out[1]), Pointwise(FloatNear(kTol), lp));
    auto mean = RunNodeOk({OpType::kSoftmaxCrossEntropyLoss,
                           {},
                           {MakeFloat({2, 3}, {1, 2, 3, 1, 1, 1}), MakeInt64({2}, {2, 1})},
                           1,
                           version});
    EXPECT_THAT(ToFloats(mean[0]), Pointwise(FloatNear(kTol), {float((l0 + l1) / 2)}));
  }
}

// Uniform scores over C classes give loss log(C) per element; weights and ignore_index follow the
// NLL rules: mean = sum(w * log C) / sum(w) over non-ignored targets.
TEST(SoftmaxCrossEntropyTest, WeightsAndIgnoreIndex) {
  const ir::Tensor x = MakeFloat({1, 2, 3}, {0, 0, 0, 0, 0, 0});  // N=1, C=2, d1=3
  const ir::Tensor t = MakeInt64({1, 3}, {0, 1, 1});
  const ir::Tensor w = MakeFloat({2}, {1, 3});
  const float ln2 = std::log(2.0f);
  constexpr float kTol = 1e-6f;  // one rounding of log(2)
  auto none = RunNodeOk({OpType::kSoftmaxCrossEntropyLoss, Reduction("none"), {x, t, w}});
  EXPECT_THAT(ToFloats(none[0]), Pointwise(FloatNear(kTol), {ln2, 3 * ln2, 3 * ln2}));
  auto mean = RunNodeOk({OpType::kSoftmaxCrossEntropyLoss, {{"ignore_index", IntAttr(1)}}, {x, t}});
  EXPECT_THAT(ToFloats(mean[0]), Pointwise(FloatNear(kTol), {ln2}));
  auto wsum = RunNodeOk({OpType::kSoftmaxCrossEntropyLoss, Reduction("sum"), {x, t, w}});
  EXPECT_THAT(ToFloats(wsum[0]), Pointwise(FloatNear(4 * kTol), {7 * ln2}));
}

// fp16: log_prob is rounded once to fp16 from the fp32 result.
TEST(SoftmaxCrossEntropyTest, Float16RoundsOnce) {
  auto out = RunNodeOk({OpType::kSoftmaxCrossEntropyLoss,
                        {},
                        {MakeHalf({1, 2}, {0.0f, 0.0f}), MakeInt64({1}, {0})},
                        2});
  const float ln2 = std::log(2.0f);
  EXPECT_THAT(ToFloats(out[0]), ElementsAre(static_cast<float>(Float16(ln2))));
  EXPECT_THAT(ToFloats(out[1]),
              ElementsAre(static_cast<float>(Float16(-ln2)), static_cast<float>(Float16(-ln2))));
}

TEST(SoftmaxCrossEntropyTest, Errors) {
  ExpectNodeError({OpType::kSoftmaxCrossEntropyLoss, {}, {kX, MakeInt64({2}, {5, 0})}},
                  absl::StatusCode::kInvalidArgument, "out of range");
  ExpectNodeError({OpType::kSoftmaxCrossEntropyLoss, Reduction("max"), {kX, kTarget}},
                  absl::StatusCode::kInvalidArgument, "reduction");
  ExpectNodeError({OpType::kSoftmaxCrossEntropyLoss, {}, {kX, MakeInt64({2, 1}, {0, 0})}},
                  absl::StatusCode::kInvalidArgument, "target shape");
}

}  // namespace
}  // namespace kiln::testing
