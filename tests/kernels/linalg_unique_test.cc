// Tests of the Det, Unique and Scatter (opset 9-10) reference kernels.
#include <cmath>
#include <limits>
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

// ---- Det ----

TEST(DetTest, BatchOfMatricesIncludingSingularOnes) {
  // [[1, 2], [3, 4]] -> -2; [[2, 4], [1, 2]] (rank 1) -> 0; [[0, 1], [1, 0]] (a swap) -> -1.
  ir::Tensor y = RunNodeOk0(
      {OpType::kDet, {}, {MakeFloat({3, 2, 2}, {1, 2, 3, 4, 2, 4, 1, 2, 0, 1, 1, 0})}, 1, 22});
  EXPECT_THAT(y.dims(), ElementsAre(3));
  // 1e-6: LU in double, rounded once to float; -2 and -1 come out exact or within an ulp.
  EXPECT_THAT(ToFloats(y), Pointwise(FloatNear(1e-6), std::vector<float>{-2, 0, -1}));
}

TEST(DetTest, ThreeByThreeAndZeroColumn) {
  ir::Tensor y =
      RunNodeOk0({OpType::kDet, {}, {MakeFloat({3, 3}, {2, 0, 1, 1, 3, 2, 1, 1, 1})}, 1, 22});
  EXPECT_TRUE(y.dims().empty());
  // 2(3 - 2) - 0 + 1(1 - 3) = 0: singular without a zero row or column; 1e-6 for the rounding
  // of the elimination (the exact result is 0, a tiny residual may remain).
  EXPECT_THAT(ToFloats(y), Pointwise(FloatNear(1e-6), std::vector<float>{0}));
  ir::Tensor z =
      RunNodeOk0({OpType::kDet, {}, {MakeFloat({2, 2}, {0, 5, 0, 7})}, 1, 22});  // zero column
  EXPECT_THAT(ToFloats(z), ElementsAre(0.0f));
}

TEST(DetTest, EmptyShapesAndErrors) {
  ir::Tensor empty = RunNodeOk0({OpType::kDet, {}, {MakeFloat({0, 3, 3}, {})}, 1, 22});
  EXPECT_THAT(empty.dims(), ElementsAre(0));
  ir::Tensor zero = RunNodeOk0({OpType::kDet, {}, {MakeFloat({0, 0}, {})}, 1, 22});
  EXPECT_THAT(ToFloats(zero), ElementsAre(1.0f));  // det of a 0x0 matrix: the empty product
  ExpectNodeError({OpType::kDet, {}, {MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6})}, 1, 22},
                  absl::StatusCode::kInvalidArgument, "square matrices");
  ExpectNodeError({OpType::kDet, {}, {MakeFloat({4}, {1, 2, 3, 4})}, 1, 22},
                  absl::StatusCode::kInvalidArgument, "[*, M, M]");
}

// ---- Unique ----

NodeSpec Unique(ir::Tensor x, std::vector<std::pair<std::string, ir::Attribute>> attrs) {
  return {OpType::kUnique, std::move(attrs), {std::move(x)}, 4, 11};
}

TEST(UniqueTest, TiesSortedAndUnsorted) {
  // The spec's example 1: X = [2, 1, 1, 3, 4, 3].
  const ir::Tensor x = MakeInt64({6}, {2, 1, 1, 3, 4, 3});
  auto s = RunNodeOk(Unique(x, {}));
  EXPECT_THAT(Values<int64_t>(s[0]), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(Values<int64_t>(s[1]), ElementsAre(1, 0, 3, 4));  // first occurrences
  EXPECT_THAT(Values<int64_t>(s[2]), ElementsAre(1, 0, 0, 2, 3, 2));
  EXPECT_THAT(Values<int64_t>(s[3]), ElementsAre(2, 1, 2, 1));
  auto u = RunNodeOk(Unique(x, {{"sorted", IntAttr(0)}}));
  EXPECT_THAT(Values<int64_t>(u[0]), ElementsAre(2, 1, 3, 4));
  EXPECT_THAT(Values<int64_t>(u[1]), ElementsAre(0, 1, 3, 4));
  EXPECT_THAT(Values<int64_t>(u[2]), ElementsAre(0, 1, 1, 2, 3, 2));
  EXPECT_THAT(Values<int64_t>(u[3]), ElementsAre(1, 2, 2, 1));
}

TEST(UniqueTest, FlattensWithoutAxisAndCollapsesNaNs) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto o = RunNodeOk(Unique(MakeFloat({2, 3}, {nan, 1, -0.0f, 0.0f, nan, 1}), {}));
  ASSERT_EQ(o[0].num_elements(), 3);
  const std::vector<float> y = ToFloats(o[0]);
  EXPECT_EQ(y[0], 0.0f);  // -0.0 and 0.0 are one value (first occurrence: -0.0)
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_TRUE(std::isnan(y[2]));  // NaNs are one value, sorted last
  EXPECT_THAT(Values<int64_t>(o[1]), ElementsAre(2, 1, 0));
  EXPECT_THAT(Values<int64_t>(o[2]), ElementsAre(2, 1, 0, 0, 2, 1));
  EXPECT_THAT(Values<int64_t>(o[3]), ElementsAre(2, 2, 2));
}

TEST(UniqueTest, AlongAnAxis) {
  // The spec's example 4: slices along axis 1 of a [2, 4, 2] tensor.
  const ir::Tensor x = MakeFloat({2, 4, 2}, {1, 1, 0, 1, 2, 1, 0, 1, 1, 1, 0, 1, 2, 1, 0, 1});
  auto o = RunNodeOk(Unique(x, {{"axis", IntAttr(-2)}}));
  EXPECT_THAT(o[0].dims(), ElementsAre(2, 3, 2));
  EXPECT_THAT(ToFloats(o[0]), ElementsAre(0, 1, 1, 1, 2, 1, 0, 1, 1, 1, 2, 1));
  EXPECT_THAT(Values<int64_t>(o[1]), ElementsAre(1, 0, 2));
  EXPECT_THAT(Values<int64_t>(o[2]), ElementsAre(1, 0, 2, 0));
  EXPECT_THAT(Values<int64_t>(o[3]), ElementsAre(2, 1, 1));
}

TEST(UniqueTest, EmptyAndErrors) {
  auto o = RunNodeOk(Unique(MakeFloat({0}, {}), {}));
  EXPECT_THAT(o[0].dims(), ElementsAre(0));
  EXPECT_THAT(o[2].dims(), ElementsAre(0));
  ExpectNodeError(Unique(MakeFloat({2}, {1, 2}), {{"axis", IntAttr(1)}}),
                  absl::StatusCode::kInvalidArgument, "axis 1 is out of range");
  ExpectNodeError(Unique(MakeFloat({2}, {1, 2}), {{"sorted", IntAttr(2)}}),
                  absl::StatusCode::kInvalidArgument, "'sorted' must be 0 or 1");
}

// ---- Scatter ----

TEST(ScatterTest, WritesAlongTheAxisLastWriteWins) {
  // data zeros [2, 3]; axis 1; indices [[2, -3], [1, 1]]: row 1 writes column 1 twice.
  ir::Tensor y = RunNodeOk0({OpType::kScatter,
                             {{"axis", IntAttr(1)}},
                             {MakeFloat({2, 3}, {0, 0, 0, 0, 0, 0}),
                              MakeInt64({2, 2}, {2, -3, 1, 1}), MakeFloat({2, 2}, {5, 6, 7, 8})},
                             1,
                             9});
  EXPECT_THAT(ToFloats(y), ElementsAre(6, 0, 5, 0, 8, 0));
  ExpectNodeError({OpType::kScatter,
                   {},
                   {MakeFloat({2}, {0, 0}), MakeInt64({1}, {2}), MakeFloat({1}, {1})},
                   1,
                   9},
                  absl::StatusCode::kInvalidArgument, "index 2");
  ExpectNodeError({OpType::kScatter,
                   {},
                   {MakeFloat({2}, {0, 0}), MakeInt64({1}, {0}), MakeFloat({2}, {1, 2})},
                   1,
                   9},
                  absl::StatusCode::kInvalidArgument, "must have one shape");
}

}  // namespace
}  // namespace kiln::testing
