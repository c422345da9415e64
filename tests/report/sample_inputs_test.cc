// Sample inputs for the accuracy report: flag parsing, deterministic generation (same seed ->
// same bytes), ranges, token ids below the embedding's row count, attention masks, symbolic dim
// binding, the errors users see, and reading --inputs folders.
#include "engine/report/sample_inputs.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/common/half.h"
#include "engine/import/onnx_importer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"
#include "tools/cli_io.h"

namespace kiln::report {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// ---- Graph building -----------------------------------------------------------------------------

ir::Dim S(int64_t v) { return ir::Dim::Static(v); }
ir::Dim Sym(const std::string& s) { return ir::Dim::Symbol(s); }

ir::Value* AddInput(ir::Graph& g, const std::string& name, DataType dtype,
                    std::vector<ir::Dim> dims) {
  ir::Value* v = *g.AddValue(name);
  v->dtype = dtype;
  v->shape.rank_known = true;
  v->shape.dims = std::move(dims);
  g.inputs().push_back(v);
  return v;
}

ir::Value* AddConstant(ir::Graph& g, const std::string& name, std::vector<int64_t> dims) {
  ir::Value* v = *g.AddValue(name);
  v->dtype = DataType::kF32;
  v->shape = ir::Shape::Of(dims);
  v->constant = *ir::Tensor::Allocate(DataType::kF32, dims);
  return v;
}

// A node reading `inputs` (by name) and writing a new value `output`.
ir::Node* AddNode(ir::Graph& g, ir::OpType op, const std::string& name,
                  const std::vector<std::string>& inputs, const std::string& output) {
  ir::Node* n = g.AddNode(op, name);
  for (const std::string& in : inputs) n->inputs.push_back(g.FindValue(in));
  n->outputs.push_back(*g.AddValue(output));
  return n;
}

void MarkOutput(ir::Graph& g, const std::string& name) {
  g.outputs().push_back(g.FindValue(name));
  g.RebuildEdges();
}

// x: f32 [2,3,4], n: i64 [5,7], b: bool [64]; all static.
std::unique_ptr<ir::Graph> MixedGraph() {
  auto g = std::make_unique<ir::Graph>();
  AddInput(*g, "x", DataType::kF32, {S(2), S(3), S(4)});
  AddInput(*g, "n", DataType::kI64, {S(5), S(7)});
  AddInput(*g, "b", DataType::kBool, {S(64)});
  AddNode(*g, ir::OpType::kRelu, "relu", {"x"}, "y");
  MarkOutput(*g, "y");
  return g;
}

// One f-typed input "x" of `n` elements.
std::unique_ptr<ir::Graph> FloatGraph(DataType dtype, int64_t n) {
  auto g = std::make_unique<ir::Graph>();
  AddInput(*g, "x", dtype, {S(n)});
  AddNode(*g, ir::OpType::kRelu, "relu", {"x"}, "y");
  MarkOutput(*g, "y");
  return g;
}

// A BERT-like front: input_ids [batch, seq] gathers from tok (50 rows) and, through
// Cast -> Unsqueeze, from pos (20 rows); attention_mask [batch, seq] is an int64 mask.
std::unique_ptr<ir::Graph> BertLikeGraph() {
  auto g = std::make_unique<ir::Graph>();
  AddInput(*g, "input_ids", DataType::kI64, {Sym("batch"), Sym("seq")});
  AddInput(*g, "attention_mask", DataType::kI64, {Sym("batch"), Sym("seq")});
  AddConstant(*g, "tok", {50, 8});
  AddConstant(*g, "pos", {20, 8});
  AddNode(*g, ir::OpType::kGather, "tok_gather", {"tok", "input_ids"}, "e1");
  AddNode(*g, ir::OpType::kCast, "cast", {"input_ids"}, "ids32")->attrs["to"] =
      ir::Attribute::Int(static_cast<int64_t>(DataType::kI32));
  AddNode(*g, ir::OpType::kUnsqueeze, "unsq", {"ids32"}, "ids4");
  AddNode(*g, ir::OpType::kGather, "pos_gather", {"pos", "ids4"}, "e2");
  AddNode(*g, ir::OpType::kCast, "mask_cast", {"attention_mask"}, "mf")->attrs["to"] =
      ir::Attribute::Int(static_cast<int64_t>(DataType::kF32));
  MarkOutput(*g, "e1");
  return g;
}

Samples Generate(const ir::Graph& g, const SampleOptions& o) {
  absl::StatusOr<Samples> s = GenerateSamples(g, o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : Samples{};
}

std::string Bytes(const ir::Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), t.byte_size());
}

std::string AllBytes(const Samples& s) {
  std::string out;
  for (const auto& set : s.sets) {
    for (const ir::Tensor& t : set) out += Bytes(t);
  }
  return out;
}

std::vector<double> Values(const ir::Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.num_elements(); ++i) v.push_back(ir::ElementAsDouble(t, i));
  return v;
}

// ---- Flag parsing -------------------------------------------------------------------------------

TEST(ParseInputRangeTest, ParsesNameAndBounds) {
  SampleOptions o;
  ASSERT_TRUE(ParseInputRange("x=-2,3.5", o).ok());
  ASSERT_TRUE(ParseInputRange("pixel=0,255", o).ok());
  ASSERT_TRUE(ParseInputRange("a=b=1,1", o).ok());  // names may hold '='; the last one splits
  EXPECT_EQ(o.ranges.at("x"), std::make_pair(-2.0, 3.5));
  EXPECT_EQ(o.ranges.at("pixel"), std::make_pair(0.0, 255.0));
  EXPECT_EQ(o.ranges.at("a=b"), std::make_pair(1.0, 1.0));
  ASSERT_TRUE(ParseInputRange("x=0,1", o).ok());  // a later flag replaces an earlier one
  EXPECT_EQ(o.ranges.at("x"), std::make_pair(0.0, 1.0));
}

TEST(ParseInputRangeTest, RejectsBadValuesNamingTheFlagAndPart) {
  struct Case {
    std::string value, part;
  };
  for (const Case& c : std::vector<Case>{{"x=1", "'1'"},
                                         {"x", "no '='"},
                                         {"=0,1", "NAME is empty"},
                                         {"x=a,1", "'a'"},
                                         {"x=0,1,2", "'1,2'"},
                                         {"x=2,1", "greater"},
                                         {"x=0,inf", "'inf'"},
                                         {"x=nan,1", "'nan'"}}) {
    SampleOptions o;
    absl::Status s = ParseInputRange(c.value, o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.value;
    EXPECT_THAT(s.message(), AllOf(HasSubstr("--input-range"), HasSubstr(c.part))) << c.value;
    EXPECT_TRUE(o.ranges.empty()) << c.value;
  }
}

TEST(ParseShapeTest, ParsesDims) {
  SampleOptions o;
  ASSERT_TRUE(ParseShape("ids=1x128", o).ok());
  ASSERT_TRUE(ParseShape("v=7", o).ok());
  EXPECT_THAT(o.shapes.at("ids"), ElementsAre(1, 128));
  EXPECT_THAT(o.shapes.at("v"), ElementsAre(7));
}

TEST(ParseShapeTest, RejectsBadValuesNamingTheFlagAndPart) {
  struct Case {
    std::string value, part;
  };
  for (const Case& c : std::vector<Case>{{"x=1xa", "'a'"},
                                         {"x=", "no dims"},
                                         {"x=1xx2", "empty dim"},
                                         {"x=2x-1", "'-1'"},
                                         {"x=1,128", "'1,128'"},
                                         {"1x2", "no '='"}}) {
    SampleOptions o;
    absl::Status s = ParseShape(c.value, o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.value;
    EXPECT_THAT(s.message(), AllOf(HasSubstr("--shape"), HasSubstr(c.part))) << c.value;
    EXPECT_TRUE(o.shapes.empty()) << c.value;
  }
}

// ---- Determinism --------------------------------------------------------------------------------

TEST(GenerateSamplesTest, SameSeedGivesSameBytesOtherSeedOrSampleDiffers) {
  auto g = MixedGraph();
  SampleOptions o;
  o.seed = 7;
  o.count = 3;
  Samples a = Generate(*g, o);
  Samples b = Generate(*g, o);
  ASSERT_EQ(a.sets.size(), 3u);
  ASSERT_EQ(a.sets[0].size(), 3u);
  EXPECT_EQ(AllBytes(a), AllBytes(b));
  o.seed = 8;
  Samples c = Generate(*g, o);
  ASSERT_EQ(c.sets.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_NE(Bytes(a.sets[0][k]), Bytes(c.sets[0][k])) << "input " << k;
    EXPECT_NE(Bytes(a.sets[0][k]), Bytes(a.sets[1][k])) << "input " << k;
    EXPECT_NE(Bytes(a.sets[1][k]), Bytes(a.sets[2][k])) << "input " << k;
  }
  EXPECT_EQ(a.source, "generated (seed 7, 3 samples)");
  o.count = 1;
  EXPECT_EQ(Generate(*g, o).source, "generated (seed 8, 1 sample)");
}

TEST(GenerateSamplesTest, FirstSampleOfSeedZeroIsPinned) {
  // Every build's report depends on these values: a change of PRNG, stream derivation or
  // mapping must be deliberate (and this golden updated), never an accident of a refactor or a
  // standard library. Integers are pinned rather than floats so the check is exact. The values
  // were checked against an independent Python implementation of the documented algorithm
  // (mt19937_64 seeded with Mix64(Mix64(Mix64(0) + sample 0) + input 1), value = (draw * 10) >>
  // 64).
  auto g = MixedGraph();
  Samples s = Generate(*g, SampleOptions{});
  ASSERT_EQ(s.sets.size(), 1u);
  std::vector<double> n = Values(s.sets[0][1]);
  std::vector<double> first(n.begin(), n.begin() + 8);
  EXPECT_THAT(first, ElementsAre(6, 5, 8, 7, 2, 0, 2, 6));
}

TEST(GenerateSamplesTest, AnInputsValuesDoNotDependOnOtherInputs) {
  auto g = BertLikeGraph();
  SampleOptions o;
  o.shapes["input_ids"] = {2, 6};
  Samples a = Generate(*g, o);
  o.ranges["attention_mask"] = {0, 1};
  Samples b = Generate(*g, o);
  ASSERT_EQ(a.sets.size(), 1u);
  ASSERT_EQ(b.sets.size(), 1u);
  EXPECT_EQ(Bytes(a.sets[0][0]), Bytes(b.sets[0][0]));
  EXPECT_NE(Bytes(a.sets[0][1]), Bytes(b.sets[0][1]));
}

// ---- Values and ranges --------------------------------------------------------------------------

TEST(GenerateSamplesTest, FloatsRespectDefaultAndExplicitRanges) {
  auto g = FloatGraph(DataType::kF32, 4096);
  Samples d = Generate(*g, SampleOptions{});
  std::vector<double> v = Values(d.sets[0][0]);
  double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
  EXPECT_GE(lo, -1.0);
  EXPECT_LE(hi, 1.0);
  // 4096 uniform draws: the extremes lie within 0.01 of the bounds except with probability
  // about 2 * 0.995^4096 ~ 3e-9 (and the seed is fixed).
  EXPECT_LT(lo, -0.99);
  EXPECT_GT(hi, 0.99);

  SampleOptions o;
  o.ranges["x"] = {2.0, 5.0};
  v = Values(Generate(*g, o).sets[0][0]);
  lo = *std::min_element(v.begin(), v.end());
  hi = *std::max_element(v.begin(), v.end());
  EXPECT_GE(lo, 2.0);
  EXPECT_LE(hi, 5.0);
  EXPECT_LT(lo, 2.05);
  EXPECT_GT(hi, 4.95);
  std::set<double> distinct(v.begin(), v.end());
  EXPECT_GT(distinct.size(), 4000u);  // f32 has ~2^22 values in [2, 5]: collisions are rare

  o.float_lo = -3;
  o.float_hi = -2;
  o.ranges.clear();
  v = Values(Generate(*g, o).sets[0][0]);
  EXPECT_GE(*std::min_element(v.begin(), v.end()), -3.0);
  EXPECT_LE(*std::max_element(v.begin(), v.end()), -2.0);
}

TEST(GenerateSamplesTest, HalfInputsAreValidAndInsideUnrepresentableBounds) {
  for (DataType dtype : {DataType::kF16, DataType::kBF16}) {
    SCOPED_TRACE(DataTypeName(dtype));
    auto g = FloatGraph(dtype, 20000);
    SampleOptions o;
    // Neither bound is representable, and each lies less than half a step past a
    // representable value: rounding to nearest alone would put some values outside (f16 0.1
    // steps are 2^-14, bf16 ones 2^-11); the generator keeps them inside.
    bool f16 = dtype == DataType::kF16;
    double lo = 0.09, hi = f16 ? 0.10003 : 0.1;
    o.ranges["x"] = {lo, hi};
    Samples s = Generate(*g, o);
    const ir::Tensor& t = s.sets[0][0];
    ASSERT_EQ(t.dtype(), dtype);
    const uint16_t* bits = t.data<uint16_t>();
    double min = 1, max = 0;
    std::set<uint16_t> distinct;
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      uint16_t exp_mask = f16 ? 0x7c00 : 0x7f80;
      ASSERT_NE(bits[i] & exp_mask, exp_mask) << "inf or NaN at " << i;
      float f = f16 ? HalfBitsToFloat(bits[i]) : BFloat16BitsToFloat(bits[i]);
      ASSERT_GE(f, lo) << i;
      ASSERT_LE(f, hi) << i;
      min = std::min<double>(min, f);
      max = std::max<double>(max, f);
      distinct.insert(bits[i]);
    }
    // The extreme representable values inside the range are reached.
    EXPECT_EQ(min, f16 ? 1475 * 0x1p-14 : 0.09033203125);
    EXPECT_EQ(max, f16 ? 0.0999755859375 : 0.099609375);
    // Every representable value in between appears: (hi - lo) / step of them.
    EXPECT_GT(distinct.size(), f16 ? 160u : 19u);

    // A single-value range whose value is not representable gives the nearest value.
    o.ranges["x"] = {0.1, 0.1};
    Samples c = Generate(*g, o);
    uint16_t want = dtype == DataType::kF16 ? FloatToHalfBits(0.1f) : FloatToBFloat16Bits(0.1f);
    EXPECT_EQ(c.sets[0][0].data<uint16_t>()[0], want);
    EXPECT_EQ(c.sets[0][0].data<uint16_t>()[19999], want);
  }
}

TEST(GenerateSamplesTest, FloatRangeBeyondTheDtypeIsAnError) {
  auto g = FloatGraph(DataType::kF16, 4);
  SampleOptions o;
  o.ranges["x"] = {0, 70000};
  absl::StatusOr<Samples> s = GenerateSamples(*g, o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), AllOf(HasSubstr("'x'"), HasSubstr("65504")));
}

TEST(GenerateSamplesTest, IntegersAndBoolsCoverTheirInclusiveRange) {
  auto g = MixedGraph();
  SampleOptions o;
  o.count = 30;  // 30 x 35 draws of n
  Samples s = Generate(*g, o);
  std::set<double> n_values, b_values;
  for (const auto& set : s.sets) {
    for (double v : Values(set[1])) n_values.insert(v);
    for (double v : Values(set[2])) b_values.insert(v);
  }
  EXPECT_THAT(n_values, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
  EXPECT_THAT(b_values, ElementsAre(0, 1));

  o.ranges["n"] = {-3, -1};  // inclusive
  o.ranges["b"] = {1, 1};
  s = Generate(*g, o);
  n_values.clear();
  b_values.clear();
  for (const auto& set : s.sets) {
    for (double v : Values(set[1])) n_values.insert(v);
    for (double v : Values(set[2])) b_values.insert(v);
  }
  EXPECT_THAT(n_values, ElementsAre(-3, -2, -1));
  EXPECT_THAT(b_values, ElementsAre(1));
}

TEST(GenerateSamplesTest, IntegerRangeMustBeIntegralAndFitTheDtype) {
  auto g = std::make_unique<ir::Graph>();
  AddInput(*g, "u", DataType::kU8, {S(4)});
  MarkOutput(*g, "u");
  for (std::pair<double, double> r :
       {std::make_pair(0.0, 300.0), std::make_pair(-1.0, 3.0), std::make_pair(0.5, 3.0)}) {
    SampleOptions o;
    o.ranges["u"] = r;
    absl::StatusOr<Samples> s = GenerateSamples(*g, o);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << r.first << "," << r.second;
    EXPECT_THAT(s.status().message(), HasSubstr("'u'"));
  }
  SampleOptions o;
  o.ranges["u"] = {250, 255};
  std::vector<double> v = Values(Generate(*g, o).sets[0][0]);
  for (double x : v) {
    EXPECT_GE(x, 250);
    EXPECT_LE(x, 255);
  }
}

// ---- Token ids and masks ------------------------------------------------------------------------

TEST(GenerateSamplesTest, TokenIdsStayBelowTheSmallestEmbeddingTable) {
  auto g = BertLikeGraph();
  SampleOptions o;
  o.shapes["input_ids"] = {4, 64};
  Samples s = Generate(*g, o);
  std::vector<double> ids = Values(s.sets[0][0]);
  ASSERT_EQ(ids.size(), 256u);
  double hi = *std::max_element(ids.begin(), ids.end());
  EXPECT_GE(*std::min_element(ids.begin(), ids.end()), 0);
  EXPECT_LT(hi, 20);  // pos has 20 rows, tok 50: the smaller bounds the ids
  EXPECT_GE(hi, 19);  // and the range is used up to its top
  EXPECT_THAT(s.notes,
              Contains(AllOf(HasSubstr("'input_ids'"), HasSubstr("[0, 20)"), HasSubstr("pos"))));
}

TEST(GenerateSamplesTest, TokenTableDetectionUsesTheGatherAxisAndNeedsAConstant) {
  auto g = std::make_unique<ir::Graph>();
  AddInput(*g, "ids", DataType::kI32, {S(512)});
  AddInput(*g, "other", DataType::kI64, {S(512)});
  AddInput(*g, "table", DataType::kF32, {S(1000), S(4)});
  AddConstant(*g, "emb_t", {4, 300});
  AddNode(*g, ir::OpType::kReshape, "reshape", {"ids", "ids"}, "ids2");  // data path only
  AddNode(*g, ir::OpType::kGather, "g", {"emb_t", "ids2"}, "e")->attrs["axis"] =
      ir::Attribute::Int(-1);
  // Indices into a non-constant table are not token ids.
  AddNode(*g, ir::OpType::kGather, "g2", {"table", "other"}, "e2");
  MarkOutput(*g, "e");
  Samples s = Generate(*g, SampleOptions{});
  std::vector<double> ids = Values(s.sets[0][0]);
  EXPECT_LT(*std::max_element(ids.begin(), ids.end()), 300);
  EXPECT_GE(*std::max_element(ids.begin(), ids.end()), 250);  // not the default [0, 10)
  std::vector<double> other = Values(s.sets[0][1]);
  EXPECT_LE(*std::max_element(other.begin(), other.end()), 9);
}

TEST(GenerateSamplesTest, TokenIdsOfAnImportedGpt2StayBelowTheVocabulary) {
  auto g =
      import::ImportModelFile(std::string(KILN_SOURCE_DIR) + "/tests/models/gpt2_causal/model.onnx",
                              import::ImportOptions{});
  ASSERT_TRUE(g.ok()) << g.status();
  const ir::Value* tok = (*g)->FindValue("tok.weight");
  ASSERT_NE(tok, nullptr);
  ASSERT_TRUE(tok->constant.has_value());
  int64_t vocab = tok->constant->dim(0);
  SampleOptions o;
  o.count = 2;
  o.shapes["ids"] = {2, 8};
  Samples s = Generate(**g, o);
  ASSERT_EQ(s.sets.size(), 2u);
  for (const auto& set : s.sets) {
    ASSERT_EQ(set.size(), 1u);
    EXPECT_THAT(set[0].dims(), ElementsAre(2, 8));
    for (double v : Values(set[0])) {
      EXPECT_GE(v, 0);
      EXPECT_LT(v, vocab);
    }
  }
}

TEST(GenerateSamplesTest, MasksAreOnesThenZerosWithAtLeastOneOnePerRow) {
  auto g = std::make_unique<ir::Graph>();
  AddInput(*g, "Attention_MASK", DataType::kI32, {S(64), S(16)});
  MarkOutput(*g, "Attention_MASK");
  Samples s = Generate(*g, SampleOptions{});
  const ir::Tensor& m = s.sets[0][0];
  int padded_rows = 0;
  for (int r = 0; r < 64; ++r) {
    int ones = 0;
    for (int j = 0; j < 16; ++j) {
      int64_t v = ir::ElementAsInt64(m, r * 16 + j);
      ASSERT_TRUE(v == 0 || v == 1) << r << "," << j;
      if (j == 0) {
        EXPECT_EQ(v, 1) << "row " << r << " has no token";
      } else if (v == 1) {
        EXPECT_EQ(ir::ElementAsInt64(m, r * 16 + j - 1), 1) << "a one after a zero in row " << r;
      }
      ones += v;
    }
    padded_rows += ones < 16;
  }
  // Padding lengths vary: most rows are padded (a row is unpadded with probability 1/16).
  EXPECT_GT(padded_rows, 40);
  EXPECT_LT(padded_rows, 64);
  EXPECT_THAT(s.notes, Contains(HasSubstr("'Attention_MASK': attention mask")));

  SampleOptions o;
  o.ranges["Attention_MASK"] = {1, 1};  // an explicit range wins
  for (double v : Values(Generate(*g, o).sets[0][0])) EXPECT_EQ(v, 1);
}

// ---- Dims ---------------------------------------------------------------------------------------

TEST(GenerateSamplesTest, SymbolicDimsDefaultToOneWithOneNote) {
  auto g = BertLikeGraph();
  Samples s = Generate(*g, SampleOptions{});
  EXPECT_THAT(s.sets[0][0].dims(), ElementsAre(1, 1));
  EXPECT_THAT(s.sets[0][1].dims(), ElementsAre(1, 1));
  int dim_notes = 0;
  for (const std::string& n : s.notes) dim_notes += n.find("bound to 1") != std::string::npos;
  EXPECT_EQ(dim_notes, 1);  // the mask shares the symbols: no second note
  EXPECT_THAT(s.notes,
              Contains(HasSubstr("input 'input_ids': symbolic dims 'batch', 'seq' bound to 1 (use "
                                 "--shape input_ids=<batch>x<seq>)")));
}

TEST(GenerateSamplesTest, ShapeOnOneInputBindsSharedSymbolsForTheOthers) {
  for (const char* flagged : {"input_ids", "attention_mask"}) {
    auto g = BertLikeGraph();
    SampleOptions o;
    o.shapes[flagged] = {3, 11};
    Samples s = Generate(*g, o);
    EXPECT_THAT(s.sets[0][0].dims(), ElementsAre(3, 11)) << flagged;
    EXPECT_THAT(s.sets[0][1].dims(), ElementsAre(3, 11)) << flagged;
    for (const std::string& n : s.notes) EXPECT_THAT(n, Not(HasSubstr("bound to 1")));
  }
}

TEST(GenerateSamplesTest, PartlyStaticAndUnknownDims) {
  auto g = std::make_unique<ir::Graph>();
  AddInput(*g, "x", DataType::kF32, {Sym("batch"), S(3), ir::Dim{}});
  AddInput(*g, "y", DataType::kF32, {Sym("batch")});
  ir::Value* r = *g->AddValue("r");  // rank unknown
  r->dtype = DataType::kF32;
  g->inputs().push_back(r);
  MarkOutput(*g, "x");

  SampleOptions o;
  o.shapes["r"] = {2, 2};
  o.shapes["y"] = {5};
  Samples s = Generate(*g, o);
  EXPECT_THAT(s.sets[0][0].dims(), ElementsAre(5, 3, 1));
  EXPECT_THAT(s.sets[0][1].dims(), ElementsAre(5));
  EXPECT_THAT(s.sets[0][2].dims(), ElementsAre(2, 2));
  EXPECT_THAT(s.notes, ElementsAre("input 'x': unknown dim at axis 2 bound to 1 (use --shape "
                                   "x=5x3x<d2>)"));

  o.shapes["x"] = {5, 3, 9};
  s = Generate(*g, o);
  EXPECT_THAT(s.sets[0][0].dims(), ElementsAre(5, 3, 9));
  EXPECT_TRUE(s.notes.empty());
}

TEST(GenerateSamplesTest, ShapeErrorsNameTheInput) {
  auto g = std::make_unique<ir::Graph>();
  AddInput(*g, "input_ids", DataType::kI64, {Sym("batch"), Sym("seq")});
  AddInput(*g, "attention_mask", DataType::kI64, {Sym("batch"), Sym("seq")});
  AddInput(*g, "pixels", DataType::kF32, {Sym("batch"), S(3)});
  ir::Value* r = *g->AddValue("r");
  r->dtype = DataType::kF32;
  g->inputs().push_back(r);
  MarkOutput(*g, "pixels");

  struct Case {
    std::map<std::string, std::vector<int64_t>> shapes;
    std::vector<std::string> parts;
  };
  std::vector<Case> cases = {
      {{{"r", {1}}, {"input_ids", {1, 2, 3}}}, {"'input_ids'", "rank 2"}},
      {{{"r", {1}}, {"pixels", {2, 4}}}, {"'pixels'", "static 3"}},
      {{{"r", {1}}, {"input_ids", {2, 7}}, {"attention_mask", {2, 8}}},
       {"'seq'", "'attention_mask'", "input_ids"}},
      {{{"r", {1}}, {"input_ids", {2, 7}}, {"pixels", {3, 3}}}, {"'batch'"}},
      {{}, {"'r'", "unknown rank", "--shape r="}},
      {{{"r", {1}}, {"image", {1}}}, {"'image'", "'input_ids', 'attention_mask', 'pixels', 'r'"}},
  };
  for (const Case& c : cases) {
    SampleOptions o;
    o.shapes = c.shapes;
    absl::StatusOr<Samples> s = GenerateSamples(*g, o);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.parts[0];
    for (const std::string& p : c.parts) EXPECT_THAT(s.status().message(), HasSubstr(p));
  }
}

// ---- Other errors -------------------------------------------------------------------------------

TEST(GenerateSamplesTest, RangeNamingNoInputListsTheInputs) {
  auto g = MixedGraph();
  SampleOptions o;
  ASSERT_TRUE(ParseInputRange("pixel_values=0,1", o).ok());
  absl::StatusOr<Samples> s = GenerateSamples(*g, o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), AllOf(HasSubstr("--input-range"), HasSubstr("'pixel_values'"),
                                          HasSubstr("'x', 'n', 'b'")));
}

TEST(GenerateSamplesTest, StringInputIsUnimplementedNamingTheInput) {
  auto g = std::make_unique<ir::Graph>();
  AddInput(*g, "text", DataType::kString, {S(2)});
  MarkOutput(*g, "text");
  absl::StatusOr<Samples> s = GenerateSamples(*g, SampleOptions{});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.status().message(), AllOf(HasSubstr("'text'"), HasSubstr("string")));
}

TEST(GenerateSamplesTest, BadCountAndHugeShapesAreErrors) {
  auto g = BertLikeGraph();
  SampleOptions o;
  o.count = 0;
  EXPECT_EQ(GenerateSamples(*g, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.count = 1;
  o.shapes["input_ids"] = {1000000, 1000000};
  absl::StatusOr<Samples> s = GenerateSamples(*g, o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("'input_ids'"));
}

TEST(GenerateSamplesTest, ConstantsAreNotInputs) {
  // IR < 4 models list initializers among the inputs; a constant in inputs() is skipped.
  auto g = MixedGraph();
  ir::Value* w = AddConstant(*g, "w", {2});
  g->inputs().push_back(w);
  Samples s = Generate(*g, SampleOptions{});
  EXPECT_EQ(s.sets[0].size(), 3u);
}

// ---- --inputs folders ---------------------------------------------------------------------------

ir::Tensor Scalar(float v) {
  ir::Tensor t = *ir::Tensor::Allocate(DataType::kF32, {1});
  t.data<float>()[0] = v;
  return t;
}

TEST(ReadSampleSetsTest, ReadsTheFolderItselfOrItsTestDataSetsInNumericOrder) {
  kiln::testing::TempDir dir;
  auto write = [&](const std::string& sub, float v) {
    ASSERT_TRUE(
        tools::WriteTensorDir(dir.File(sub), "input", {Scalar(v), Scalar(-v)}, {"a", "b"}).ok());
  };
  write("test_data_set_10", 10);
  write("test_data_set_2", 2);
  write("test_data_set_x", 99);  // not a numbered set
  ASSERT_TRUE(tools::WriteTensorDir(dir.File("test_data_set_3"), "output", {Scalar(3)}, {"y"})
                  .ok());  // no input_0.pb: skipped
  auto sets = tools::ReadSampleSets(dir.path());
  ASSERT_TRUE(sets.ok()) << sets.status();
  ASSERT_EQ(sets->size(), 2u);
  ASSERT_EQ((*sets)[0].size(), 2u);
  EXPECT_EQ((*sets)[0][0].data<float>()[0], 2);
  EXPECT_EQ((*sets)[0][1].data<float>()[0], -2);
  EXPECT_EQ((*sets)[1][0].data<float>()[0], 10);

  // A folder holding input_0.pb is one set by itself.
  auto one = tools::ReadSampleSets(dir.File("test_data_set_10"));
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0][0].data<float>()[0], 10);

  // The repository's model folders use the backend-test layout.
  auto gpt2 = tools::ReadSampleSets(std::string(KILN_SOURCE_DIR) + "/tests/models/gpt2_causal");
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  ASSERT_EQ(gpt2->size(), 1u);
  EXPECT_EQ((*gpt2)[0][0].dtype(), DataType::kI64);
}

TEST(ReadSampleSetsTest, NotFoundNamingTheFolder) {
  kiln::testing::TempDir dir;
  auto empty = tools::ReadSampleSets(dir.path());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(empty.status().message(), HasSubstr(dir.path()));
  auto missing = tools::ReadSampleSets(dir.File("nope"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr(dir.File("nope")));
}

}  // namespace
}  // namespace kiln::report
