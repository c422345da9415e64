// The AVX-512 broadcasting elementwise kernels (kernels/cpu/avx512/elementwise_ops.cc,
// compare_ops.cc over broadcast.h): Add, Sub, Mul, Div, Sum, Max, Min, PRelu, Pow by a scalar,
// the comparisons and Where, each against the reference kernel on the same node, bit for bit
// (special values included), over broadcast forms that cover every branch of the plan (full,
// scalar, row, column, middle-dim and both-operand broadcasts, inner runs around the 16-lane
// tail, outputs above the parallel threshold, empty outputs) and every dtype; registry selection
// for dynamic shapes; the reference's errors. Skipped on CPUs without AVX-512 and AVX512_BF16.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/common/cpu_features.h"
#include "engine/kernels/cpu/avx512/broadcast.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/registry.h"
#include "gtest/gtest.h"
#include "tests/testing/node_runner.h"

namespace kiln::testing {
namespace {

using ir::OpType;
using kernels::Isa;

const uint64_t kAvx512Bf16 = kernels::IsaCpuFeatures(Isa::kAvx512) | kCpuAvx512Bf16;

#define SKIP_WITHOUT_AVX512()                                                             \
  if ((DetectCpuFeatures() & kAvx512Bf16) != kAvx512Bf16) {                               \
    GTEST_SKIP() << "CPU lacks " << CpuFeatureString(kAvx512Bf16 & ~DetectCpuFeatures()); \
  }

using Dims = std::vector<int64_t>;

// `v` as a tensor of dtype `t` (fp16 / bf16 rounded to nearest even, integers truncated).
ir::Tensor MakeOf(DataType t, const Dims& dims, const std::vector<float>& v) {
  switch (t) {
    case DataType::kF16:
      return MakeHalf(dims, v);
    case DataType::kBF16:
      return MakeBf16(dims, v);
    case DataType::kI32:
      return MakeTensor<int32_t>(dims, std::vector<int32_t>(v.begin(), v.end()), t);
    case DataType::kI64: {
      // Values far apart in the high word too, so a 32-bit comparison would be caught.
      std::vector<int64_t> w(v.size());
      for (size_t i = 0; i < v.size(); ++i) w[i] = static_cast<int64_t>(v[i]) * (int64_t{1} << 33);
      return MakeTensor<int64_t>(dims, w, t);
    }
    default:
      return MakeFloat(dims, v);
  }
}

// Random values in [-4, 4) with the special values spread in (NaN, +-Inf, +-0, subnormals, a
// value that rounds on output); `small_ints` draws from a few integers instead, so that
// comparisons meet ties.
std::vector<float> Values(std::mt19937& gen, const Dims& dims, bool small_ints = false) {
  std::uniform_real_distribution<float> dist(-4, 4);
  std::vector<float> v(std::max<int64_t>(1, ir::NumElementsOf(dims)));
  for (float& e : v) e = small_ints ? std::floor(dist(gen) / 2) : dist(gen);
  if (small_ints) return v;
  const std::vector<float> special = {NAN,    INFINITY, -INFINITY, 0.0f,  -0.0f,
                                      1e-40f, -3e-39f,  65504.0f,  1e-8f, 3.0f + 0x1p-20f};
  for (size_t j = 0; j < special.size() && 3 * j < v.size(); ++j) v[3 * j] = special[j];
  return v;
}

// Runs `spec` on the fast kernel (which it must pick) and the reference; expects the same dims
// and bytes.
void ExpectSameAsReference(NodeSpec spec, const std::string& what) {
  spec.cpu_features = kAvx512Bf16;
  const ir::Tensor fast = RunNodeOk0(spec);
  spec.cpu_features = 0;
  const ir::Tensor ref = RunNodeOk0(spec);
  ASSERT_EQ(fast.dtype(), ref.dtype()) << what;
  ASSERT_EQ(fast.dims(), ref.dims()) << what;
  EXPECT_EQ(std::memcmp(fast.raw_data(), ref.raw_data(), ref.byte_size()), 0) << what;
}

std::string Describe(OpType op, DataType t, const std::vector<Dims>& dims) {
  std::string s = std::string(ir::OpName(op)) + " " + DataTypeOnnxName(t);
  for (const Dims& d : dims) s += " " + ir::DimsToString(d);
  return s;
}

// Operand shapes: every plan branch. Rows of 1, 15, 16, 17, 33 elements (the lane tail), middle
// broadcasts, both operands broadcast, rank-0, an output of over 64K elements (the threads),
// and an empty output.
const std::vector<std::pair<Dims, Dims>> kPairs = {{{2, 3, 5, 7}, {1, 3, 1, 1}},
                                                   {{2, 3, 17, 19}, {2, 3, 1, 1}},
                                                   {{4, 1, 33}, {1, 5, 1}},
                                                   {{3, 1, 16}, {1, 4, 1}},
                                                   {{1}, {5, 33}},
                                                   {{700, 130}, {130}},
                                                   {{700, 130}, {700, 1}},
                                                   {{2, 3, 40}, {}},
                                                   {{6, 1, 1, 17}, {1, 5, 3, 1}},
                                                   {{4, 5, 15}, {4, 1, 15}},
                                                   {{2, 7, 1, 9}, {7, 3, 1}},
                                                   {{8, 64, 20, 20}, {1, 64, 1, 1}},
                                                   {{3, 0, 4}, {1, 1, 4}},
                                                   {{5, 17}, {5, 17}},
                                                   {{}, {}}};

TEST(Avx512Broadcast, ArithmeticMatchesTheReferenceBitForBit) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 gen(11);
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (const auto& [da, db] : kPairs) {
      for (OpType op : {OpType::kAdd, OpType::kSub, OpType::kMul, OpType::kDiv, OpType::kMax,
                        OpType::kMin, OpType::kSum}) {
        for (int swap = 0; swap < 2; ++swap) {
          const Dims& a = swap ? db : da;
          const Dims& b = swap ? da : db;
          NodeSpec spec;
          spec.op = op;
          spec.since_version = 13;
          spec.inputs = {MakeOf(t, a, Values(gen, a)), MakeOf(t, b, Values(gen, b))};
          ExpectSameAsReference(spec, Describe(op, t, {a, b}));
        }
      }
    }
  }
}

// One operand repeated along short rows (inner runs of at most 256 elements) against one read
// contiguously: the NHWC gates and biases ([.., H*W, C] op [.., 1, C]) that the kernel streams
// across rows from a tile. Periods below, at and above 16 and 64, the last short one (256) and
// the first long one (257), an outer dim that moves the repeated row, and outputs over 64K
// elements whose 16K-element pieces start in the middle of a row (16384 % 24 == 16).
TEST(Avx512Broadcast, RepeatedShortRowsMatchTheReferenceBitForBit) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 gen(17);
  const std::vector<std::pair<Dims, Dims>> cases = {{{1, 80, 120, 24}, {1, 1, 1, 24}},
                                                    {{1, 40, 30, 96}, {96}},
                                                    {{2, 30, 96}, {2, 1, 96}},
                                                    {{3000, 7}, {7}},
                                                    {{500, 33}, {1, 33}},
                                                    {{40, 64}, {64}},
                                                    {{300, 256}, {256}},
                                                    {{300, 257}, {257}},
                                                    {{3, 5, 48}, {3, 1, 48}},
                                                    {{9, 17}, {17}}};
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (const auto& [dense, rep] : cases) {
      for (OpType op :
           {OpType::kAdd, OpType::kSub, OpType::kMul, OpType::kDiv, OpType::kMax, OpType::kPRelu}) {
        for (int swap = 0; swap < (op == OpType::kPRelu ? 1 : 2); ++swap) {
          const Dims& a = swap ? rep : dense;
          const Dims& b = swap ? dense : rep;
          NodeSpec spec;
          spec.op = op;
          spec.since_version = op == OpType::kPRelu ? 16 : 13;
          spec.inputs = {MakeOf(t, a, Values(gen, a)), MakeOf(t, b, Values(gen, b))};
          ExpectSameAsReference(spec, Describe(op, t, {a, b}));
        }
      }
    }
  }
}

// Sum, Max and Min of three and four inputs, each broadcast differently (the N-input loop).
TEST(Avx512Broadcast, VariadicOpsFoldLeftToRightAsTheReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 gen(12);
  const std::vector<std::vector<Dims>> cases = {{{2, 3, 17}, {3, 1}, {1, 1, 17}},
                                                {{4, 1, 20}, {1, 6, 1}, {20}, {4, 6, 20}},
                                                {{3, 5}, {3, 5}, {3, 5}}};
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (const auto& dims : cases) {
      for (OpType op : {OpType::kSum, OpType::kMax, OpType::kMin}) {
        NodeSpec spec;
        spec.op = op;
        spec.since_version = 13;
        for (const Dims& d : dims) spec.inputs.push_back(MakeOf(t, d, Values(gen, d)));
        ExpectSameAsReference(spec, Describe(op, t, dims));
      }
    }
  }
}

TEST(Avx512Broadcast, PReluMatchesTheReferenceAndKeepsItsErrors) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 gen(13);
  const std::vector<std::pair<Dims, Dims>> cases = {{{2, 8, 5, 5}, {8, 1, 1}},
                                                    {{2, 8, 17}, {1, 8, 1}},
                                                    {{3, 33}, {33}},
                                                    {{3, 33}, {1}},
                                                    {{4, 7}, {4, 7}}};
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (const auto& [x, slope] : cases) {
      NodeSpec spec;
      spec.op = OpType::kPRelu;
      spec.since_version = 16;
      spec.inputs = {MakeOf(t, x, Values(gen, x)), MakeOf(t, slope, Values(gen, slope))};
      ExpectSameAsReference(spec, Describe(OpType::kPRelu, t, {x, slope}));
    }
  }
  // A slope that would widen X: the reference's error, through the fast kernel.
  NodeSpec bad;
  bad.op = OpType::kPRelu;
  bad.since_version = 16;
  bad.inputs = {MakeFloat({3}, {1, 2, 3}), MakeFloat({2, 3}, {1, 2, 3, 4, 5, 6})};
  bad.cpu_features = kAvx512Bf16;
  ExpectNodeError(bad, absl::StatusCode::kInvalidArgument, "slope");
}

TEST(Avx512Broadcast, ComparisonsMatchTheReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 gen(14);
  for (DataType t :
       {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kI32, DataType::kI64}) {
    for (const auto& [da, db] : kPairs) {
      for (OpType op : {OpType::kEqual, OpType::kLess, OpType::kLessOrEqual, OpType::kGreater,
                        OpType::kGreaterOrEqual}) {
        for (int special = 0; special < 2; ++special) {
          NodeSpec spec;
          spec.op = op;
          spec.since_version = 16;
          // Small integers make ties; the float specials (NaN, +-0, +-Inf) check the ordered
          // predicates.
          const bool ints = special == 0 || !IsF32OrHalf(t);
          spec.inputs = {MakeOf(t, da, Values(gen, da, ints)),
                         MakeOf(t, db, Values(gen, db, ints))};
          ExpectSameAsReference(spec, Describe(op, t, {da, db}));
        }
      }
    }
  }
  // Magika's one-hot: i32 [N, 2048, 1] against [1, 1, 257].
  NodeSpec hot;
  hot.op = OpType::kEqual;
  hot.since_version = 13;
  std::vector<float> ids(2 * 2048), classes(257);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<float>((i * 37) % 257);
  for (int i = 0; i < 257; ++i) classes[i] = static_cast<float>(i);
  hot.inputs = {MakeOf(DataType::kI32, {2, 2048, 1}, ids),
                MakeOf(DataType::kI32, {1, 1, 257}, classes)};
  ExpectSameAsReference(hot, "one-hot Equal");
}

TEST(Avx512Broadcast, WhereCopiesEveryElementSizeAsTheReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 gen(15);
  const std::vector<std::vector<Dims>> cases = {{{2, 3, 17}, {2, 3, 17}, {2, 3, 17}},
                                                {{1, 1, 33}, {4, 1, 1}, {}},
                                                {{5, 1}, {1}, {5, 40}},
                                                {{3, 1, 16}, {1, 4, 1}, {3, 4, 16}},
                                                {{}, {7, 9}, {9}},
                                                {{8, 1, 90, 90}, {8, 1, 90, 90}, {}},
                                                {{2, 0, 3}, {1, 3}, {3}}};
  for (DataType t : {DataType::kBool, DataType::kF16, DataType::kF32, DataType::kI64}) {
    for (const auto& dims : cases) {
      NodeSpec spec;
      spec.op = OpType::kWhere;
      spec.since_version = 16;
      std::vector<uint8_t> cond(std::max<int64_t>(1, ir::NumElementsOf(dims[0])));
      // Any non-zero byte is true: 0, 1 and 2 all appear.
      for (uint8_t& c : cond) c = static_cast<uint8_t>(gen() % 3);
      spec.inputs.push_back(MakeTensor<uint8_t>(dims[0], cond, DataType::kBool));
      for (int k = 1; k < 3; ++k) {
        std::vector<float> v = Values(gen, dims[k], t == DataType::kI64);
        if (t == DataType::kBool) {
          std::vector<uint8_t> b(v.size());
          for (size_t i = 0; i < v.size(); ++i) b[i] = v[i] > 0;
          spec.inputs.push_back(MakeTensor<uint8_t>(dims[k], b, DataType::kBool));
        } else {
          spec.inputs.push_back(MakeOf(t, dims[k], v));
        }
      }
      ExpectSameAsReference(spec, Describe(OpType::kWhere, t, dims));
    }
  }
}

// fp32 bit patterns: every 65537th one (all exponents, both signs, NaNs) plus the squares that
// are exact rounding ties (x with few significant bits: 1 + 2^-12 squares to a tie) and the
// inputs whose squares are subnormal, tiny or overflow.
std::vector<float> PowSample() {
  std::vector<uint32_t> bits;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 65537) bits.push_back(static_cast<uint32_t>(u));
  for (uint32_t e = 0; e < 255; ++e) {
    for (uint32_t m :
         {0x000800u, 0x001000u, 0x001800u, 0x400800u, 0x7ff800u, 0x200000u, 0x000001u, 0x7fffffu}) {
      bits.push_back(e << 23 | m);
      bits.push_back(0x80000000u | e << 23 | m);
    }
  }
  std::vector<float> out(bits.size());
  std::memcpy(out.data(), bits.data(), bits.size() * 4);
  return out;
}

// Pow by a scalar (powf per element), exponents of every accepted dtype: the reference's bits,
// on inputs whose squares are rounding ties or tiny (where x * x would differ from powf).
TEST(Avx512Broadcast, PowByAScalarMatchesTheReferenceBitForBit) {
  SKIP_WITHOUT_AVX512();
  const std::vector<float> sample = PowSample();
  const int64_t n = static_cast<int64_t>(sample.size());
  for (DataType t : {DataType::kF32, DataType::kF16, DataType::kBF16}) {
    for (float e : {2.0f, 3.0f, 0.5f, -1.0f, 1.0f, -2.5f}) {
      for (DataType te : {DataType::kF32, t, DataType::kI64}) {
        if (te == DataType::kI64 && e != std::floor(e)) continue;
        NodeSpec spec;
        spec.op = OpType::kPow;
        spec.since_version = 15;
        spec.inputs = {MakeOf(t, {n}, sample), te == DataType::kI64
                                                   ? MakeInt64({}, {static_cast<int64_t>(e)})
                                                   : MakeOf(te, {}, {e})};
        ExpectSameAsReference(spec, Describe(OpType::kPow, t, {{n}}) + " ^ " + std::to_string(e) +
                                        " " + DataTypeOnnxName(te));
      }
    }
  }
  // A one-element exponent of higher rank widens the output; a tensor exponent is the
  // reference's (the fast kernel hands it over).
  NodeSpec spec;
  spec.op = OpType::kPow;
  spec.since_version = 15;
  spec.inputs = {MakeFloat({3}, {1.5f, -2, 3}), MakeFloat({1, 1}, {2})};
  ExpectSameAsReference(spec, "Pow [3] ^ [1,1]");
  spec.inputs = {MakeFloat({2, 3}, {1.5f, -2, 3, 4, 5, 6}), MakeFloat({3}, {2, 0.5f, 3})};
  ExpectSameAsReference(spec, "Pow [2,3] ^ [3]");
}

// Shapes that do not broadcast: the reference's error (naming the node) through the fast kernel.
TEST(Avx512Broadcast, ShapesThatDoNotBroadcastGiveTheReferenceError) {
  SKIP_WITHOUT_AVX512();
  for (OpType op : {OpType::kAdd, OpType::kMax, OpType::kEqual}) {
    NodeSpec spec;
    spec.op = op;
    spec.since_version = 13;
    spec.inputs = {MakeFloat({2, 3}, Iota(6, 0)), MakeFloat({2, 2}, Iota(4, 0))};
    spec.cpu_features = kAvx512Bf16;
    ExpectNodeError(spec, absl::StatusCode::kInvalidArgument, "");
  }
}

// Integer Add, Sub and Mul (int32, int64) over every operand pair: the reference's bytes,
// wrapping around in two's complement (operands near the type's extremes).
TEST(Avx512Broadcast, IntegerArithmeticWrapsAsTheReference) {
  SKIP_WITHOUT_AVX512();
  std::mt19937 gen(11);
  for (DataType t : {DataType::kI32, DataType::kI64}) {
    for (OpType op : {OpType::kAdd, OpType::kSub, OpType::kMul}) {
      for (const auto& [a, b] : kPairs) {
        NodeSpec spec;
        spec.op = op;
        for (const Dims& d : {a, b}) {
          std::uniform_int_distribution<int64_t> dist(std::numeric_limits<int64_t>::min(),
                                                      std::numeric_limits<int64_t>::max());
          std::vector<int64_t> v(std::max<int64_t>(1, ir::NumElementsOf(d)));
          for (int64_t& e : v) e = dist(gen);
          if (t == DataType::kI64) {
            spec.inputs.push_back(MakeTensor<int64_t>(d, v, t));
          } else {
            spec.inputs.push_back(
                MakeTensor<int32_t>(d, std::vector<int32_t>(v.begin(), v.end()), t));
          }
        }
        spec.output_dtypes = {t};
        ExpectSameAsReference(spec, Describe(op, t, {a, b}));
      }
    }
  }
}

// The fast kernels are picked for dynamic shapes (a symbolic batch dim, an unknown rank).
TEST(Avx512Broadcast, DynamicShapesTakeTheFastKernel) {
  static ir::Graph* g = new ir::Graph();
  auto pick = [&](OpType op, std::vector<DataType> dtypes, bool unknown_rank) {
    ir::Node* n = g->AddNode(op, "pick");
    for (size_t i = 0; i <= dtypes.size(); ++i) {
      auto v = g->AddValue("v" + std::to_string(g->values().size()));
      EXPECT_TRUE(v.ok());
      (*v)->dtype = i < dtypes.size() ? dtypes[i] : DataType::kBool;
      if (!unknown_rank) {
        (*v)->shape.rank_known = true;
        (*v)->shape.dims = {ir::Dim::Symbol("N"), ir::Dim::Static(512), ir::Dim::Static(1)};
      }
      (i < dtypes.size() ? n->inputs : n->outputs).push_back(*v);
    }
    auto def = kernels::Registry::Default().Find(*n, kAvx512Bf16);
    EXPECT_TRUE(def.ok()) << def.status();
    return def.ok() ? (*def)->isa : Isa::kRef;
  };
  using DT = DataType;
  for (bool unknown : {false, true}) {
    EXPECT_EQ(pick(OpType::kAdd, {DT::kF32, DT::kF32}, unknown), Isa::kAvx512);
    EXPECT_EQ(pick(OpType::kMul, {DT::kF16, DT::kF16}, unknown), Isa::kAvx512);
    EXPECT_EQ(pick(OpType::kMax, {DT::kBF16, DT::kBF16, DT::kBF16}, unknown), Isa::kAvx512);
    EXPECT_EQ(pick(OpType::kPRelu, {DT::kF32, DT::kF32}, unknown), Isa::kAvx512);
    EXPECT_EQ(pick(OpType::kPow, {DT::kF32, DT::kI64}, unknown), Isa::kAvx512);
    EXPECT_EQ(pick(OpType::kEqual, {DT::kI32, DT::kI32}, unknown), Isa::kAvx512);
    EXPECT_EQ(pick(OpType::kLess, {DT::kI64, DT::kI64}, unknown), Isa::kAvx512);
    EXPECT_EQ(pick(OpType::kWhere, {DT::kBool, DT::kF32, DT::kF32}, unknown), Isa::kAvx512);
    EXPECT_EQ(pick(OpType::kAdd, {DT::kI32, DT::kI32}, unknown), Isa::kAvx512);
    EXPECT_EQ(pick(OpType::kMul, {DT::kI64, DT::kI64}, unknown), Isa::kAvx512);
  }
  EXPECT_EQ(pick(OpType::kDiv, {DT::kI32, DT::kI32}, false), Isa::kRef);  // division by zero
  EXPECT_EQ(pick(OpType::kAdd, {DT::kI32, DT::kI64}, false), Isa::kRef);
  // Outside the fast kernels' dtypes: the reference.
  EXPECT_EQ(pick(OpType::kAdd, {DT::kF64, DT::kF64}, false), Isa::kRef);
  EXPECT_EQ(pick(OpType::kEqual, {DT::kU8, DT::kU8}, false), Isa::kRef);
  EXPECT_EQ(pick(OpType::kPow, {DT::kF32, DT::kF64}, false), Isa::kRef);
  EXPECT_EQ(pick(OpType::kAdd, {DT::kF32, DT::kF16}, false), Isa::kRef);
}

}  // namespace
}  // namespace kiln::testing
