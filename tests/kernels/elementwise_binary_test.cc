// Binary, variadic, Where, Clip and PRelu reference kernels: broadcasting, integer semantics
// (wrap, truncating division, Python-sign Mod, division by zero), the fp16/bf16 rule, errors.
#include <cmath>
#include <limits>

#include "tests/kernels/elementwise_testing.h"

namespace kiln::testing::ew {
namespace {

using ir::OpType;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(ElementwiseBinary, AddBroadcastsBothWays) {
  // [2,1] + [3] -> [2,3]
  auto out = RunOp(OpType::kAdd, {F32({2, 1}, {10, 20}), F32({3}, {1, 2, 3})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Values<float>(*out), (std::vector<float>{11, 12, 13, 21, 22, 23}));
  // [2,3,2] + [3,1]: middle-dim broadcast exercises the odometer.
  auto mid = RunOp(OpType::kAdd, {F32({2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}),
                                  F32({3, 1}, {100, 200, 300})});
  ASSERT_TRUE(mid.ok()) << mid.status();
  EXPECT_EQ(Values<float>(*mid),
            (std::vector<float>{100, 101, 202, 203, 304, 305, 106, 107, 208, 209, 310, 311}));
  // Scalar + tensor.
  auto sc = RunOp(OpType::kSub, {F32({}, {1}), F32({2}, {3, 5})});
  ASSERT_TRUE(sc.ok()) << sc.status();
  EXPECT_EQ(Values<float>(*sc), (std::vector<float>{-2, -4}));
}

/// Element of `in` (row-major, numpy-broadcast to `out`) for output flat index `flat`, computed
/// the slow obvious way, to check the coalescing broadcast iterator against.
int64_t NaiveOffset(const std::vector<int64_t>& in, const std::vector<int64_t>& out, int64_t flat) {
  int64_t off = 0, stride = 1;
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
    int64_t idx = flat % out[d];
    flat /= out[d];
    int in_d = d - static_cast<int>(out.size() - in.size());
    if (in_d >= 0) {
      if (in[in_d] != 1) off += idx * stride;
      stride *= in[in_d];
    }
  }
  return off;
}

// Double keeps every sum below exact, so each output identifies its three source elements.
std::vector<double> Iota(const std::vector<int64_t>& dims, double scale) {
  std::vector<double> v(ir::NumElementsOf(dims));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) * scale;
  return v;
}

TEST(ElementwiseBinary, BroadcastMatchesNaiveIndexing) {
  struct Case {
    std::vector<int64_t> a, b, c, out;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4}, {2, 3, 4}, {1}, {2, 3, 4}},
      {{2, 3, 4}, {4}, {3, 1}, {2, 3, 4}},
      {{2, 1, 4}, {1, 3, 1}, {}, {2, 3, 4}},
      {{1, 1, 5}, {3, 1, 1}, {1, 5}, {3, 1, 5}},
      {{4, 1, 3, 1}, {2, 1, 5}, {1, 1}, {4, 2, 3, 5}},
      {{2, 0, 3}, {3}, {1, 1, 1}, {2, 0, 3}},
      {{}, {}, {}, {}},
      {{1, 2, 1, 2}, {2, 1, 2, 1}, {2}, {2, 2, 2, 2}},
      {{3, 1, 1, 2}, {1, 4, 1, 1}, {1, 1, 5, 1}, {3, 4, 5, 2}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << ir::DimsToString(c.a) << " " << ir::DimsToString(c.b)
                                      << " " << ir::DimsToString(c.c));
    auto va = Iota(c.a, 1), vb = Iota(c.b, 1000), vc = Iota(c.c, 1e6);
    auto add = RunOp(OpType::kAdd, {F64(c.a, va), F64(c.b, vb)});
    auto sum = RunOp(OpType::kSum, {F64(c.a, va), F64(c.b, vb), F64(c.c, vc)});
    ASSERT_TRUE(add.ok() && sum.ok()) << add.status() << sum.status();
    ASSERT_EQ(sum->dims(), c.out);
    const int64_t n = ir::NumElementsOf(c.out);
    for (int64_t i = 0; i < n; ++i) {
      double ab = va[NaiveOffset(c.a, c.out, i)] + vb[NaiveOffset(c.b, c.out, i)];
      EXPECT_EQ(Values<double>(*sum)[i], ab + vc[NaiveOffset(c.c, c.out, i)]) << "element " << i;
      if (add->dims() == c.out) EXPECT_EQ(Values<double>(*add)[i], ab) << "element " << i;
    }
  }
}

TEST(ElementwiseBinary, IntegerArithmeticWraps) {
  auto mul = RunOp(OpType::kMul, {I8({2}, {100, -100}), I8({2}, {2, 2})});
  ASSERT_TRUE(mul.ok()) << mul.status();
  EXPECT_EQ(Values<int8_t>(*mul), (std::vector<int8_t>{-56, 56}));
  const int64_t kMax = std::numeric_limits<int64_t>::max();
  auto add = RunOp(OpType::kAdd, {I64({1}, {kMax}), I64({1}, {1})});
  ASSERT_TRUE(add.ok()) << add.status();
  EXPECT_EQ(Values<int64_t>(*add)[0], std::numeric_limits<int64_t>::min());
  auto sub = RunOp(OpType::kSub, {U8({1}, {1}), U8({1}, {2})});
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_EQ(Values<uint8_t>(*sub)[0], 255);
}

TEST(ElementwiseBinary, DivTruncatesTowardZero) {
  auto out = RunOp(OpType::kDiv, {I32({4}, {7, -7, 7, std::numeric_limits<int32_t>::min()}),
                                  I32({4}, {2, 2, -2, -1})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<int32_t>(*out),
            (std::vector<int32_t>{3, -3, -3, std::numeric_limits<int32_t>::min()}));
  auto f = RunOp(OpType::kDiv, {F32({2}, {1, -1}), F32({2}, {4, 0})});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(Values<float>(*f), (std::vector<float>{0.25f, -INFINITY}));
}

TEST(ElementwiseBinary, IntegerDivisionByZeroIsAnError) {
  ExpectStatusError(RunOp(OpType::kDiv, {I64({2}, {1, 2}), I64({2}, {1, 0})}).status(),
                    absl::StatusCode::kInvalidArgument);
  ExpectStatusError(RunOp(OpType::kMod, {U8({1}, {1}), U8({1}, {0})}).status(),
                    absl::StatusCode::kInvalidArgument);
  // No element is divided when the output is empty.
  EXPECT_TRUE(RunOp(OpType::kDiv, {I64({0}, {}), I64({1}, {0})}).ok());
}

TEST(ElementwiseBinary, ModFollowsSignRules) {
  auto a = I32({4}, {-7, 7, -7, 7});
  auto b = I32({4}, {3, -3, -3, 3});
  auto py = RunOp(OpType::kMod, {a, b});  // fmod=0: sign of the divisor
  ASSERT_TRUE(py.ok()) << py.status();
  EXPECT_EQ(Values<int32_t>(*py), (std::vector<int32_t>{2, -2, -1, 1}));
  auto c = RunOp(OpType::kMod, {a, b}, {{"fmod", IntAttr(1)}});  // sign of the dividend
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(Values<int32_t>(*c), (std::vector<int32_t>{-1, 1, -1, 1}));
  auto f = RunOp(OpType::kMod, {F32({2}, {5.5f, -5.5f}), F32({2}, {2, 2})}, {{"fmod", IntAttr(1)}});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(Values<float>(*f), (std::vector<float>{1.5f, -1.5f}));
  auto fpy = RunOp(OpType::kMod, {F32({2}, {5.5f, -5.5f}), F32({2}, {2, 2})});
  ASSERT_TRUE(fpy.ok()) << fpy.status();
  EXPECT_EQ(Values<float>(*fpy), (std::vector<float>{1.5f, 0.5f}));
  ExpectStatusError(RunOp(OpType::kMod, {a, b}, {{"fmod", IntAttr(2)}}).status(),
                    absl::StatusCode::kInvalidArgument);
}

TEST(ElementwiseBinary, PowMixedTypes) {
  auto ff = RunOp(OpType::kPow, {F32({2}, {2, 4}), F32({2}, {3, 0.5f})});
  ASSERT_TRUE(ff.ok()) << ff.status();
  EXPECT_EQ(Values<float>(*ff), (std::vector<float>{8, 2}));
  auto fi = RunOp(OpType::kPow, {F32({2}, {2, 4}), I64({2}, {2, -1})});
  ASSERT_TRUE(fi.ok()) << fi.status();
  EXPECT_EQ(fi->dtype(), DataType::kF32);
  EXPECT_EQ(Values<float>(*fi), (std::vector<float>{4, 0.25f}));
  auto ii = RunOp(OpType::kPow, {I64({3}, {2, 3, -2}), I64({3}, {10, 3, 3})});
  ASSERT_TRUE(ii.ok()) << ii.status();
  EXPECT_EQ(Values<int64_t>(*ii), (std::vector<int64_t>{1024, 27, -8}));
  auto ineg = RunOp(OpType::kPow, {I32({3}, {2, 1, -1}), I32({3}, {-1, -5, -3})});
  ASSERT_TRUE(ineg.ok()) << ineg.status();
  EXPECT_EQ(Values<int32_t>(*ineg), (std::vector<int32_t>{0, 1, -1}));
  auto ifl = RunOp(OpType::kPow, {I32({1}, {4}), F32({1}, {0.5f})});
  ASSERT_TRUE(ifl.ok()) << ifl.status();
  EXPECT_EQ(ifl->dtype(), DataType::kI32);
  EXPECT_EQ(Values<int32_t>(*ifl)[0], 2);
}

TEST(ElementwiseBinary, LogicalOpsBroadcast) {
  auto a = Bool({2, 1}, {0, 1});
  auto b = Bool({2}, {0, 1});
  auto land = RunOp(OpType::kAnd, {a, b});
  auto lor = RunOp(OpType::kOr, {a, b});
  auto lxor = RunOp(OpType::kXor, {a, b});
  ASSERT_TRUE(land.ok() && lor.ok() && lxor.ok());
  EXPECT_EQ(land->dtype(), DataType::kBool);
  EXPECT_EQ(Values<uint8_t>(*land), (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(Values<uint8_t>(*lor), (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(Values<uint8_t>(*lxor), (std::vector<uint8_t>{0, 1, 1, 0}));
}

TEST(ElementwiseBinary, Comparisons) {
  auto a = F32({4}, {1, 2, 3, kNaN});
  auto b = F32({4}, {2, 2, 2, kNaN});
  struct Case {
    OpType op;
    std::vector<uint8_t> want;
  };
  for (const Case& c :
       {Case{OpType::kEqual, {0, 1, 0, 0}}, Case{OpType::kGreater, {0, 0, 1, 0}},
        Case{OpType::kGreaterOrEqual, {0, 1, 1, 0}}, Case{OpType::kLess, {1, 0, 0, 0}},
        Case{OpType::kLessOrEqual, {1, 1, 0, 0}}}) {
    auto out = RunOp(c.op, {a, b});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->dtype(), DataType::kBool);
    EXPECT_EQ(Values<uint8_t>(*out), c.want) << ir::OpName(c.op);
  }
  auto eqb = RunOp(OpType::kEqual, {Bool({3}, {1, 0, 2}), Bool({3}, {1, 1, 1})});
  ASSERT_TRUE(eqb.ok()) << eqb.status();
  EXPECT_EQ(Values<uint8_t>(*eqb), (std::vector<uint8_t>{1, 0, 1}));
  auto lt = RunOp(OpType::kLess, {I64({2}, {-1, 5}), I64({}, {0})});
  ASSERT_TRUE(lt.ok()) << lt.status();
  EXPECT_EQ(Values<uint8_t>(*lt), (std::vector<uint8_t>{1, 0}));
}

// fp16/bf16 arithmetic happens in fp32 with one rounding to nearest even.
TEST(ElementwiseBinary, HalfPrecisionRoundsToNearestEven) {
  // fp16 spacing at 1024 is 1: 1024.5 ties to 1024, 1025.5 ties to 1026.
  auto h = RunOp(OpType::kAdd, {F16({2}, {1024, 1025}), F16({2}, {0.5f, 0.5f})});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(ToFloats(*h), (std::vector<float>{1024, 1026}));
  // bf16 spacing at 1 is 2^-7: 1 + 2^-8 ties to 1; 1 + 3 * 2^-8 ties to 1 + 2^-6.
  auto b = RunOp(OpType::kAdd, {BF16({2}, {1, 1}), BF16({2}, {0.00390625f, 0.01171875f})});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->dtype(), DataType::kBF16);
  EXPECT_EQ(ToFloats(*b), (std::vector<float>{1, 1.015625f}));
}

TEST(ElementwiseVariadic, MaxMinBroadcastAndPropagateNaN) {
  auto mx = RunOp(OpType::kMax, {F32({3}, {1, 5, kNaN}), F32({1}, {3}), F32({2, 1}, {0, 4})});
  ASSERT_TRUE(mx.ok()) << mx.status();
  EXPECT_EQ(mx->dims(), (std::vector<int64_t>{2, 3}));
  ExpectClose(Values<float>(*mx), {3, 5, kNaN, 4, 5, kNaN}, 0);
  auto mn = RunOp(OpType::kMin, {I32({2}, {1, 5}), I32({2}, {3, -2})});
  ASSERT_TRUE(mn.ok()) << mn.status();
  EXPECT_EQ(Values<int32_t>(*mn), (std::vector<int32_t>{1, -2}));
  auto one = RunOp(OpType::kMax, {F32({2}, {7, 8})});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(Values<float>(*one), (std::vector<float>{7, 8}));
}

TEST(ElementwiseVariadic, SumAndMeanAccumulateInFp32) {
  auto s = RunOp(OpType::kSum, {F32({2}, {1, 2}), F32({2}, {3, 4}), F32({}, {10})});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Values<float>(*s), (std::vector<float>{14, 16}));
  auto m = RunOp(OpType::kMean, {F32({2}, {1, 2}), F32({2}, {3, 5})});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(Values<float>(*m), (std::vector<float>{2, 3.5f}));
  // Rounding after each addition would give 1024 + 0.5 -> 1024, twice; fp32 accumulation gives
  // 1025, exact in fp16.
  auto h = RunOp(OpType::kSum, {F16({1}, {1024}), F16({1}, {0.5f}), F16({1}, {0.5f})});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(ToFloats(*h)[0], 1025);
  auto hm = RunOp(OpType::kMean, {BF16({1}, {256}), BF16({1}, {1}), BF16({1}, {1})});
  ASSERT_TRUE(hm.ok()) << hm.status();
  EXPECT_EQ(ToFloats(*hm)[0], 86);  // 258 / 3 = 86 exactly; stepwise bf16 sums would give 256/3
}

TEST(ElementwiseWhere, BroadcastsThreeWays) {
  auto out = RunOp(OpType::kWhere, {Bool({2, 1}, {1, 0}), F32({1, 3}, {1, 2, 3}), F32({}, {-1})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Values<float>(*out), (std::vector<float>{1, 2, 3, -1, -1, -1}));
  auto b = RunOp(OpType::kWhere, {Bool({2}, {0, 1}), Bool({2}, {1, 1}), Bool({2}, {0, 0})});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->dtype(), DataType::kBool);
  EXPECT_EQ(Values<uint8_t>(*b), (std::vector<uint8_t>{0, 1}));
  ExpectStatusError(RunOp(OpType::kWhere, {F32({1}, {1}), F32({1}, {1}), F32({1}, {2})}).status(),
                    absl::StatusCode::kInvalidArgument);
  ExpectStatusError(RunOp(OpType::kWhere, {Bool({1}, {1}), F32({1}, {1}), I64({1}, {2})}).status(),
                    absl::StatusCode::kInvalidArgument);
}

TEST(ElementwiseClip, AttributesBeforeOpset11) {
  auto out = RunOp(OpType::kClip, {F32({4}, {-2, 0, 2, 9})},
                   {{"min", FloatAttr(-1)}, {"max", FloatAttr(1)}}, 6);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<float>(*out), (std::vector<float>{-1, 0, 1, 1}));
  auto only_max = RunOp(OpType::kClip, {F32({2}, {-5, 5})}, {{"max", FloatAttr(0)}}, 6);
  ASSERT_TRUE(only_max.ok()) << only_max.status();
  EXPECT_EQ(Values<float>(*only_max), (std::vector<float>{-5, 0}));
}

TEST(ElementwiseClip, OptionalInputsFrom11) {
  auto both =
      RunOp(OpType::kClip, {F32({4}, {-2, 0, 2, kNaN}), F32({}, {-1}), F32({}, {1})}, {}, 13);
  ASSERT_TRUE(both.ok()) << both.status();
  ExpectClose(Values<float>(*both), {-1, 0, 1, kNaN}, 0);
  // Omitted min (empty name) and infinities pass through an omitted bound.
  auto no_min =
      RunOp(OpType::kClip, {F32({2}, {-INFINITY, 3}), ir::Tensor(), F32({}, {1})}, {}, 13);
  ASSERT_TRUE(no_min.ok()) << no_min.status();
  EXPECT_EQ(Values<float>(*no_min), (std::vector<float>{-INFINITY, 1}));
  auto ints = RunOp(OpType::kClip, {I64({3}, {-5, 5, 50}), I64({}, {0})}, {}, 13);
  ASSERT_TRUE(ints.ok()) << ints.status();
  EXPECT_EQ(Values<int64_t>(*ints), (std::vector<int64_t>{0, 5, 50}));
  // min > max: every element becomes max.
  auto crossed = RunOp(OpType::kClip, {F32({3}, {-5, 0, 5}), F32({}, {2}), F32({}, {1})}, {}, 13);
  ASSERT_TRUE(crossed.ok()) << crossed.status();
  EXPECT_EQ(Values<float>(*crossed), (std::vector<float>{1, 1, 1}));
  ExpectStatusError(RunOp(OpType::kClip, {F32({2}, {1, 2}), F32({2}, {0, 1})}, {}, 13).status(),
                    absl::StatusCode::kInvalidArgument);
  ExpectStatusError(RunOp(OpType::kClip, {F32({2}, {1, 2}), I64({}, {0})}, {}, 13).status(),
                    absl::StatusCode::kInvalidArgument);
  // fp16 input and bounds.
  auto h = RunOp(OpType::kClip, {F16({2}, {-3, 3}), F16({}, {-1.5f}), F16({}, {2.5f})}, {}, 13);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(ToFloats(*h), (std::vector<float>{-1.5f, 2.5f}));
}

TEST(ElementwisePRelu, SlopeBroadcastsToX) {
  auto out = RunOp(OpType::kPRelu, {F32({2, 2}, {-1, 2, -3, 4}), F32({2}, {0.5f, 0.25f})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Values<float>(*out), (std::vector<float>{-0.5f, 2, -1.5f, 4}));
  auto ints = RunOp(OpType::kPRelu, {I32({2}, {-3, 3}), I32({}, {2})});
  ASSERT_TRUE(ints.ok()) << ints.status();
  EXPECT_EQ(Values<int32_t>(*ints), (std::vector<int32_t>{-6, 3}));
  // The slope may not make the output larger than X.
  ExpectStatusError(RunOp(OpType::kPRelu, {F32({2}, {1, 2}), F32({2, 2}, {1, 1, 1, 1})}).status(),
                    absl::StatusCode::kInvalidArgument);
}

TEST(ElementwiseBinary, ShapeAndDtypeErrors) {
  ExpectStatusError(
      RunOp(OpType::kAdd, {F32({2, 3}, {1, 2, 3, 4, 5, 6}), F32({2}, {1, 2})}).status(),
      absl::StatusCode::kInvalidArgument);
  ExpectStatusError(RunOp(OpType::kMul, {F32({1}, {1}), F64({1}, {1})}).status(),
                    absl::StatusCode::kInvalidArgument);
  ExpectStatusError(RunOp(OpType::kSum, {F32({2}, {1, 2}), F32({3}, {1, 2, 3})}).status(),
                    absl::StatusCode::kInvalidArgument);
  ExpectStatusError(RunOp(OpType::kAnd, {F32({1}, {1}), F32({1}, {1})}).status(),
                    absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kiln::testing::ew
