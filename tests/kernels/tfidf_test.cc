// Tests of the TfIdfVectorizer reference kernel (integer pools).
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace kiln::testing {
namespace {

using ir::OpType;
using ::testing::ElementsAre;

// Pool: unigrams 2, 3, 5, 4 (columns 0..3), bigrams (5, 6), (7, 8), (6, 7) (columns 4..6).
std::vector<std::pair<std::string, ir::Attribute>> Attrs(const char* mode, int64_t min_gram,
                                                         int64_t max_gram, int64_t skip) {
  return {{"mode", StringAttr(mode)},
          {"min_gram_length", IntAttr(min_gram)},
          {"max_gram_length", IntAttr(max_gram)},
          {"max_skip_count", IntAttr(skip)},
          {"ngram_counts", IntsAttr({0, 4})},
          {"ngram_indexes", IntsAttr({0, 1, 2, 3, 4, 5, 6})},
          {"pool_int64s", IntsAttr({2, 3, 5, 4, 5, 6, 7, 8, 6, 7})}};
}

const std::vector<int64_t> kRow = {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8};

TEST(TfIdfVectorizerTest, UniAndBigramsWithSkips) {
  // Unigrams: 3 x3, 5 x1. Bigrams without skip: (5,6), (7,8), (6,7) once each; with skip 2
  // (items 3 apart) (7,8) once more, at positions 8 and 11. (Checked with the ONNX reference.)
  ir::Tensor y =
      RunNodeOk0({OpType::kTfIdfVectorizer, Attrs("TF", 1, 2, 2), {MakeInt64({12}, kRow)}, 1, 9});
  EXPECT_THAT(y.dims(), ElementsAre(7));
  EXPECT_THAT(ToFloats(y), ElementsAre(0, 3, 1, 0, 1, 2, 1));
  // Only bigrams, batched: row 0 holds (7, 8); row 1 "5 _ 6" matches (5, 6) at skip 1 only.
  ir::Tensor b = RunNodeOk0({OpType::kTfIdfVectorizer,
                             Attrs("TF", 2, 2, 1),
                             {MakeTensor<int32_t>({2, 3}, {7, 8, 0, 5, 1, 6}, DataType::kI32)},
                             1,
                             9});
  EXPECT_THAT(b.dims(), ElementsAre(2, 7));
  EXPECT_THAT(ToFloats(b), ElementsAre(0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0));
}

TEST(TfIdfVectorizerTest, IdfAndTfIdfWeights) {
  auto attrs = Attrs("IDF", 1, 1, 0);
  attrs.push_back({"weights", FloatsAttr({1, 2, 3, 4, 5, 6, 7})});
  ir::Tensor idf = RunNodeOk0({OpType::kTfIdfVectorizer, attrs, {MakeInt64({12}, kRow)}, 1, 9});
  EXPECT_THAT(ToFloats(idf), ElementsAre(0, 2, 3, 0, 0, 0, 0));  // weight where count > 0
  attrs[0].second = StringAttr("TFIDF");
  ir::Tensor tfidf = RunNodeOk0({OpType::kTfIdfVectorizer, attrs, {MakeInt64({12}, kRow)}, 1, 9});
  EXPECT_THAT(ToFloats(tfidf), ElementsAre(0, 6, 3, 0, 0, 0, 0));  // weight * count
}

TEST(TfIdfVectorizerTest, EmptyInputAndErrors) {
  ir::Tensor y =
      RunNodeOk0({OpType::kTfIdfVectorizer, Attrs("TF", 1, 2, 0), {MakeInt64({0}, {})}, 1, 9});
  EXPECT_THAT(ToFloats(y), ElementsAre(0, 0, 0, 0, 0, 0, 0));
  ExpectNodeError({OpType::kTfIdfVectorizer, Attrs("COUNT", 1, 2, 0), {MakeInt64({1}, {1})}, 1, 9},
                  absl::StatusCode::kInvalidArgument, "mode must be");
  ExpectNodeError({OpType::kTfIdfVectorizer, Attrs("TF", 3, 2, 0), {MakeInt64({1}, {1})}, 1, 9},
                  absl::StatusCode::kInvalidArgument, "min_gram_length");
  auto strings = Attrs("TF", 1, 1, 0);
  ir::Attribute pool;
  pool.type = ir::Attribute::Type::kStrings;
  pool.strings = {"a"};
  strings.push_back({"pool_strings", pool});
  ExpectNodeError({OpType::kTfIdfVectorizer, strings, {MakeInt64({1}, {1})}, 1, 9},
                  absl::StatusCode::kUnimplemented, "unsupported dtype string");
  ExpectNodeError(
      {OpType::kTfIdfVectorizer, Attrs("TF", 1, 1, 0), {MakeInt64({1, 1, 1}, {1})}, 1, 9},
      absl::StatusCode::kInvalidArgument, "[C] or [B, C]");
}

}  // namespace
}  // namespace kiln::testing
