// Reference kernels of the nn family: Conv, ConvTranspose and the pools. Random cases are checked
// against direct-loop convolutions written here independently of the im2col/GEMM kernels.
#include <cmath>

#include "tests/kernels/nn_test_util.h"

namespace kiln::testing::nn {
namespace {

using ir::OpType;
using Dims = std::vector<int64_t>;

int64_t Prod(const Dims& d) {
  int64_t p = 1;
  for (int64_t v : d) p *= v;
  return p;
}

// Flat index `p` of `dims` -> coordinates.
Dims Unflatten(int64_t p, const Dims& dims) {
  Dims c(dims.size());
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    c[d] = p % dims[d];
    p /= dims[d];
  }
  return c;
}

// Flat index of coordinates, or -1 when outside.
int64_t Flatten(const Dims& c, const Dims& dims) {
  int64_t idx = 0;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (c[d] < 0 || c[d] >= dims[d]) return -1;
    idx = idx * dims[d] + c[d];
  }
  return idx;
}

struct ConvCase {
  Dims x, w;  // full shapes
  int64_t group = 1;
  Dims strides, dilations, pads, output_padding;  // spatial (pads: begin..., end...)
};

// Direct convolution: out[n, m, o] = b[m] + sum_{c, k} x[n, g*Cg + c, o*s - pb + k*d] w[m, c, k].
std::vector<float> NaiveConv(const ConvCase& cs, const std::vector<float>& x,
                             const std::vector<float>& w, const std::vector<float>& b,
                             Dims* out_dims) {
  const int nd = static_cast<int>(cs.x.size()) - 2;
  Dims in(cs.x.begin() + 2, cs.x.end()), k(cs.w.begin() + 2, cs.w.end()), out(nd);
  for (int d = 0; d < nd; ++d) {
    out[d] =
        (in[d] + cs.pads[d] + cs.pads[nd + d] - (k[d] - 1) * cs.dilations[d] - 1) / cs.strides[d] +
        1;
  }
  const int64_t n_batch = cs.x[0], c = cs.x[1], m = cs.w[0], cg = cs.w[1], mg = m / cs.group;
  *out_dims = {n_batch, m};
  out_dims->insert(out_dims->end(), out.begin(), out.end());
  std::vector<float> y(Prod(*out_dims));
  for (int64_t n = 0; n < n_batch; ++n)
    for (int64_t oc = 0; oc < m; ++oc)
      for (int64_t p = 0; p < Prod(out); ++p) {
        Dims o = Unflatten(p, out);
        double sum = b.empty() ? 0 : b[oc];
        const int64_t g = oc / mg;
        for (int64_t ic = 0; ic < cg; ++ic)
          for (int64_t kp = 0; kp < Prod(k); ++kp) {
            Dims kc = Unflatten(kp, k), ic_coord(nd);
            for (int d = 0; d < nd; ++d) {
              ic_coord[d] = o[d] * cs.strides[d] - cs.pads[d] + kc[d] * cs.dilations[d];
            }
            const int64_t xi = Flatten(ic_coord, in);
            if (xi < 0) continue;
            sum += x[(n * c + g * cg + ic) * Prod(in) + xi] * w[(oc * cg + ic) * Prod(k) + kp];
          }
        y[(n * m + oc) * Prod(out) + p] = static_cast<float>(sum);
      }
  return y;
}

// Direct transposed convolution: every x[n, c, i] * w[c, m, k] lands on o = i*s - pb + k*d.
std::vector<float> NaiveConvTranspose(const ConvCase& cs, const std::vector<float>& x,
                                      const std::vector<float>& w, const std::vector<float>& b,
                                      Dims* out_dims) {
  const int nd = static_cast<int>(cs.x.size()) - 2;
  Dims in(cs.x.begin() + 2, cs.x.end()), k(cs.w.begin() + 2, cs.w.end()), out(nd);
  for (int d = 0; d < nd; ++d) {
    out[d] = cs.strides[d] * (in[d] - 1) + cs.output_padding[d] + (k[d] - 1) * cs.dilations[d] + 1 -
             cs.pads[d] - cs.pads[nd + d];
  }
  const int64_t n_batch = cs.x[0], c = cs.x[1], mg = cs.w[1], m = mg * cs.group;
  const int64_t cg = c / cs.group;
  *out_dims = {n_batch, m};
  out_dims->insert(out_dims->end(), out.begin(), out.end());
  std::vector<double> y(Prod(*out_dims));
  for (int64_t n = 0; n < n_batch; ++n)
    for (int64_t oc = 0; oc < m; ++oc)
      for (int64_t p = 0; p < Prod(out); ++p)
        y[(n * m + oc) * Prod(out) + p] = b.empty() ? 0 : b[oc];
  for (int64_t n = 0; n < n_batch; ++n)
    for (int64_t ic = 0; ic < c; ++ic)
      for (int64_t p = 0; p < Prod(in); ++p) {
        Dims i = Unflatten(p, in);
        const int64_t g = ic / cg;
        for (int64_t om = 0; om < mg; ++om)
          for (int64_t kp = 0; kp < Prod(k); ++kp) {
            Dims kc = Unflatten(kp, k), o(nd);
            for (int d = 0; d < nd; ++d) {
              o[d] = i[d] * cs.strides[d] - cs.pads[d] + kc[d] * cs.dilations[d];
            }
            const int64_t yi = Flatten(o, out);
            if (yi < 0) continue;
            y[(n * m + g * mg + om) * Prod(out) + yi] +=
                x[(n * c + ic) * Prod(in) + p] * w[(ic * mg + om) * Prod(k) + kp];
          }
      }
  return std::vector<float>(y.begin(), y.end());
}

Attrs ConvAttrs(const ConvCase& cs) {
  Attrs a = {{"group", IntAttr(cs.group)},
             {"strides", IntsAttr(cs.strides)},
             {"dilations", IntsAttr(cs.dilations)},
             {"pads", IntsAttr(cs.pads)}};
  if (!cs.output_padding.empty()) a.push_back({"output_padding", IntsAttr(cs.output_padding)});
  return a;
}

void CheckConv(const ConvCase& cs, bool with_bias, unsigned seed) {
  auto x = RandomFloats(Prod(cs.x), seed), w = RandomFloats(Prod(cs.w), seed + 1);
  auto b = with_bias ? RandomFloats(cs.w[0], seed + 2) : std::vector<float>();
  Dims want_dims, got_dims;
  auto want = NaiveConv(cs, x, w, b, &want_dims);
  std::vector<ir::Tensor> ins = {MakeFloat(cs.x, x), MakeFloat(cs.w, w)};
  if (with_bias) ins.push_back(MakeFloat({cs.w[0]}, b));
  auto got = RunFloats(OpType::kConv, ins, ConvAttrs(cs), &got_dims);
  EXPECT_EQ(got_dims, want_dims);
  // Sums of up to ~600 products of values in [-1, 1], fp32 vs double: well below 1e-4.
  ExpectNear(got, want, 1e-4f);
}

void CheckConvTranspose(const ConvCase& cs, bool with_bias, unsigned seed) {
  auto x = RandomFloats(Prod(cs.x), seed), w = RandomFloats(Prod(cs.w), seed + 1);
  const int64_t m = cs.w[1] * cs.group;
  auto b = with_bias ? RandomFloats(m, seed + 2) : std::vector<float>();
  Dims want_dims, got_dims;
  auto want = NaiveConvTranspose(cs, x, w, b, &want_dims);
  std::vector<ir::Tensor> ins = {MakeFloat(cs.x, x), MakeFloat(cs.w, w)};
  if (with_bias) ins.push_back(MakeFloat({m}, b));
  auto got = RunFloats(OpType::kConvTranspose, ins, ConvAttrs(cs), &got_dims);
  EXPECT_EQ(got_dims, want_dims);
  ExpectNear(got, want, 1e-4f);  // short sums of products in [-1, 1]
}

// ---------------------------------------------------------------- Conv

TEST(ConvTest, HandComputed2x2) {
  auto x = MakeFloat({1, 1, 3, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8});
  auto w = MakeFloat({1, 1, 2, 2}, {1, 1, 1, 1});
  ExpectNear(RunFloats(OpType::kConv, {x, w, MakeFloat({1}, {1})}), {9, 13, 21, 25});
  // kernel_shape given explicitly and matching W is fine.
  ExpectNear(RunFloats(OpType::kConv, {x, w}, {{"kernel_shape", IntsAttr({2, 2})}}),
             {8, 12, 20, 24});
}

TEST(ConvTest, AutoPadSameUpperAndLower) {
  auto x = MakeFloat({1, 1, 4}, {1, 2, 3, 4});
  auto w = MakeFloat({1, 1, 2}, {1, 1});
  ExpectNear(RunFloats(OpType::kConv, {x, w}, {{"auto_pad", StringAttr("SAME_UPPER")}}),
             {3, 5, 7, 4});
  ExpectNear(RunFloats(OpType::kConv, {x, w}, {{"auto_pad", StringAttr("SAME_LOWER")}}),
             {1, 3, 5, 7});
  std::vector<int64_t> dims;
  ExpectNear(RunFloats(OpType::kConv, {x, w},
                       {{"auto_pad", StringAttr("VALID")}, {"pads", IntsAttr({5, 5})}}, &dims),
             {3, 5, 7});
}

TEST(ConvTest, Random2dGroupsStridesDilationsAsymmetricPads) {
  CheckConv({{2, 4, 7, 6}, {6, 2, 3, 2}, 2, {2, 1}, {1, 2}, {1, 0, 2, 1}, {}}, true, 10);
}

TEST(ConvTest, Random1dAnd3dDepthwise) {
  CheckConv({{1, 3, 10}, {2, 3, 3}, 1, {3}, {1}, {2, 1}, {}}, true, 20);
  CheckConv({{1, 3, 4, 5, 4}, {3, 1, 2, 3, 2}, 3, {1, 2, 1}, {1, 1, 2}, {1, 1, 0, 0, 1, 1}, {}},
            false, 30);
}

TEST(ConvTest, RandomPointwiseAndChunkedColumns) {
  CheckConv({{2, 5, 3, 3}, {4, 5, 1, 1}, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, {}}, true, 40);
  // 64 * 3 * 3 rows x 64 * 64 positions exceeds one column buffer: several chunks.
  CheckConv({{1, 64, 64, 64}, {4, 64, 3, 3}, 1, {1, 1}, {1, 1}, {1, 1, 1, 1}, {}}, true, 50);
}

TEST(ConvTest, Fp16AccumulatesInFp32AndRoundsOnce) {
  const float e = std::ldexp(1.0f, -11);
  auto y =
      RunFloats(OpType::kConv, {MakeHalf({1, 1, 3}, {1, e, e}), MakeHalf({1, 1, 3}, {1, 1, 1})});
  ExpectNear(y, {1.0f + 2 * e});
  y = RunFloats(OpType::kConv,
                {MakeBf16({1, 1, 3}, {1, e * 8, e * 8}), MakeBf16({1, 1, 3}, {1, 1, 1})});
  ExpectNear(y, {1.0f + 16 * e});
}

TEST(ConvTest, Errors) {
  auto x = MakeFloat({1, 2, 3, 3}, std::vector<float>(18));
  auto w = MakeFloat({1, 1, 2, 2}, std::vector<float>(4));
  ExpectInvalid(RunOp(OpType::kConv, {x, w}).status());  // 2 channels vs 1 (group 1)
  auto w2 = MakeFloat({1, 2, 2, 2}, std::vector<float>(8));
  ExpectInvalid(RunOp(OpType::kConv, {x, w2}, {{"kernel_shape", IntsAttr({3, 3})}}).status());
  ExpectInvalid(RunOp(OpType::kConv, {x, w2}, {{"auto_pad", StringAttr("SAME")}}).status());
  ExpectInvalid(RunOp(OpType::kConv, {x, w2, MakeFloat({2}, {0, 0})}).status());  // B size
  ExpectInvalid(
      RunOp(OpType::kConv, {x, MakeFloat({1, 2, 4, 4}, std::vector<float>(32))}).status());
  ExpectInvalid(RunOp(OpType::kConv, {x, w2}, {{"strides", IntsAttr({0, 1})}}).status());
  ExpectInvalid(RunOp(OpType::kConv, {x, w2}, {{"pads", IntsAttr({1, 1})}}).status());
}

// ---------------------------------------------------------------- ConvTranspose

TEST(ConvTransposeTest, HandComputed1d) {
  auto x = MakeFloat({1, 1, 2}, {1, 2});
  auto w = MakeFloat({1, 1, 3}, {1, 1, 1});
  ExpectNear(RunFloats(OpType::kConvTranspose, {x, w}, {{"strides", IntsAttr({2})}}),
             {1, 1, 3, 2, 2});
  ExpectNear(RunFloats(OpType::kConvTranspose, {x, w},
                       {{"strides", IntsAttr({2})}, {"auto_pad", StringAttr("SAME_UPPER")}}),
             {1, 1, 3, 2});
  ExpectNear(RunFloats(OpType::kConvTranspose, {x, w},
                       {{"strides", IntsAttr({2})}, {"auto_pad", StringAttr("SAME_LOWER")}}),
             {1, 3, 2, 2});
  // output_shape one past the natural size equals output_padding 1: the extra position gets
  // only the bias.
  ExpectNear(RunFloats(OpType::kConvTranspose, {x, w, MakeFloat({1}, {10})},
                       {{"strides", IntsAttr({2})}, {"output_shape", IntsAttr({6})}}),
             {11, 11, 13, 12, 12, 10});
  ExpectNear(RunFloats(OpType::kConvTranspose, {x, w, MakeFloat({1}, {10})},
                       {{"strides", IntsAttr({2})}, {"output_padding", IntsAttr({1})}}),
             {11, 11, 13, 12, 12, 10});
}

TEST(ConvTransposeTest, RandomAgainstDirectScatter) {
  CheckConvTranspose({{2, 4, 3, 4}, {4, 3, 3, 2}, 2, {2, 3}, {2, 1}, {1, 0, 0, 2}, {1, 2}}, true,
                     60);
  CheckConvTranspose(
      {{1, 2, 2, 3, 2}, {2, 2, 2, 2, 3}, 1, {1, 2, 2}, {1, 1, 1}, {0, 1, 0, 0, 1, 1}, {0, 1, 0}},
      false, 70);
}

TEST(ConvTransposeTest, Errors) {
  auto x = MakeFloat({1, 2, 3}, std::vector<float>(6));
  ExpectInvalid(RunOp(OpType::kConvTranspose, {x, MakeFloat({1, 1, 3}, {1, 1, 1})}).status());
  auto w = MakeFloat({2, 1, 3}, std::vector<float>(6));
  ExpectInvalid(
      RunOp(OpType::kConvTranspose, {x, w}, {{"output_padding", IntsAttr({1})}}).status());
  ExpectInvalid(RunOp(OpType::kConvTranspose, {x, w}, {{"pads", IntsAttr({3, 3})}}).status());
  ExpectInvalid(RunOp(OpType::kConvTranspose, {x, w}, {{"group", IntAttr(0)}}).status());
}

// ---------------------------------------------------------------- pools

TEST(MaxPoolTest, IndicesRowAndColumnMajor) {
  std::vector<float> v(18);
  for (int i = 0; i < 18; ++i) v[i] = static_cast<float>(i);
  auto x = MakeFloat({1, 2, 3, 3}, v);
  for (int order : {0, 1}) {
    auto r = RunOp(OpType::kMaxPool, {x},
                   {{"kernel_shape", IntsAttr({2, 2})}, {"storage_order", IntAttr(order)}}, 2);
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectNear(ToFloats((*r)[0]), {4, 5, 7, 8, 13, 14, 16, 17});
    const int64_t* idx = (*r)[1].data<int64_t>();
    std::vector<int64_t> want = order == 0 ? std::vector<int64_t>{4, 5, 7, 8, 13, 14, 16, 17}
                                           : std::vector<int64_t>{4, 7, 5, 8, 13, 16, 14, 17};
    EXPECT_EQ(std::vector<int64_t>(idx, idx + 8), want) << "storage_order " << order;
  }
}

TEST(MaxPoolTest, CeilModeDilationsAndInt8) {
  auto x = MakeFloat({1, 1, 5}, {1, 2, 3, 4, 5});
  Attrs a = {{"kernel_shape", IntsAttr({2})}, {"strides", IntsAttr({2})}};
  ExpectNear(RunFloats(OpType::kMaxPool, {x}, a), {2, 4});
  a.push_back({"ceil_mode", IntAttr(1)});
  ExpectNear(RunFloats(OpType::kMaxPool, {x}, a), {2, 4, 5});
  // VALID keeps the floor size even with ceil_mode (spec: ceil((5 - 2 + 1) / 2) = 2).
  a.push_back({"auto_pad", StringAttr("VALID")});
  ExpectNear(RunFloats(OpType::kMaxPool, {x}, a), {2, 4});
  ExpectNear(RunFloats(OpType::kMaxPool, {x},
                       {{"kernel_shape", IntsAttr({2})}, {"dilations", IntsAttr({3})}}),
             {4, 5});
  auto r = RunOp(OpType::kMaxPool, {MakeTensor<int8_t>({1, 1, 3}, {-128, -5, -7}, DataType::kI8)},
                 {{"kernel_shape", IntsAttr({2})}, {"pads", IntsAttr({1, 0})}});
  ASSERT_TRUE(r.ok()) << r.status();
  const int8_t* y = (*r)[0].data<int8_t>();
  EXPECT_EQ(std::vector<int>(y, y + 3), (std::vector<int>{-128, -5, -5}));
  r = RunOp(OpType::kMaxPool, {MakeTensor<uint8_t>({1, 1, 2}, {7, 250}, DataType::kU8)},
            {{"kernel_shape", IntsAttr({2})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].data<uint8_t>()[0], 250);
}

TEST(AveragePoolTest, PadsCountIncludePad) {
  auto x = MakeFloat({1, 1, 2, 2}, {1, 2, 3, 4});
  Attrs a = {{"kernel_shape", IntsAttr({2, 2})}, {"pads", IntsAttr({1, 1, 1, 1})}};
  ExpectNear(RunFloats(OpType::kAveragePool, {x}, a), {1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4});
  a.push_back({"count_include_pad", IntAttr(1)});
  ExpectNear(RunFloats(OpType::kAveragePool, {x}, a),
             {0.25, 0.75, 0.5, 1, 2.5, 1.5, 0.75, 1.75, 1});
}

TEST(AveragePoolTest, CeilModeAutoPadAndDilations) {
  auto x = MakeFloat({1, 1, 5}, {1, 2, 3, 4, 5});
  // ceil_mode adds a last window hanging past the end; it averages only the cells it covers,
  // even with count_include_pad (no explicit pad there).
  for (int cip : {0, 1}) {
    ExpectNear(RunFloats(OpType::kAveragePool, {x},
                         {{"kernel_shape", IntsAttr({2})},
                          {"strides", IntsAttr({2})},
                          {"ceil_mode", IntAttr(1)},
                          {"count_include_pad", IntAttr(cip)}}),
               {1.5, 3.5, 5});
  }
  ExpectNear(RunFloats(OpType::kAveragePool, {x},
                       {{"kernel_shape", IntsAttr({2})}, {"dilations", IntsAttr({2})}}),
             {2, 3, 4});
  auto x3 = MakeFloat({1, 1, 3}, {1, 2, 3});
  ExpectNear(RunFloats(OpType::kAveragePool, {x3},
                       {{"kernel_shape", IntsAttr({2})}, {"auto_pad", StringAttr("SAME_UPPER")}}),
             {1.5, 2.5, 3});
  ExpectNear(RunFloats(OpType::kAveragePool, {x3},
                       {{"kernel_shape", IntsAttr({2})}, {"auto_pad", StringAttr("SAME_LOWER")}}),
             {1, 1.5, 2.5});
}

TEST(GlobalPoolTest, AverageAndMax) {
  auto x = MakeFloat({1, 2, 2, 2}, {1, 2, 3, 4, -1, -2, -3, -4});
  std::vector<int64_t> dims;
  ExpectNear(RunFloats(OpType::kGlobalAveragePool, {x}, {}, &dims), {2.5, -2.5});
  EXPECT_EQ(dims, (std::vector<int64_t>{1, 2, 1, 1}));
  ExpectNear(RunFloats(OpType::kGlobalMaxPool, {x}), {4, -1});
}

TEST(PoolTest, Fp16AveragesInFp32AndRoundsOnce) {
  // fp16 step-wise: 2048 + 1 rounds back to 2048 (ulp 2), giving 512; in fp32 the mean is
  // 2050 / 4 = 512.5, exactly representable in fp16.
  auto x = MakeHalf({1, 1, 4}, {2048, 1, 1, 0});
  ExpectNear(RunFloats(OpType::kGlobalAveragePool, {x}), {512.5f});
  ExpectNear(RunFloats(OpType::kAveragePool, {x}, {{"kernel_shape", IntsAttr({4})}}), {512.5f});
  auto b = MakeBf16({1, 1, 2}, {1, std::ldexp(1.0f, -7)});
  ExpectNear(RunFloats(OpType::kMaxPool, {b}, {{"kernel_shape", IntsAttr({2})}}), {1});
}

TEST(PoolTest, Errors) {
  auto x = MakeFloat({1, 1, 3}, {1, 2, 3});
  ExpectInvalid(RunOp(OpType::kMaxPool, {x}).status());  // kernel_shape missing
  ExpectInvalid(RunOp(OpType::kAveragePool, {x}, {{"kernel_shape", IntsAttr({4})}}).status());
  ExpectInvalid(RunOp(OpType::kMaxPool, {x}, {{"kernel_shape", IntsAttr({2, 2})}}).status());
  ExpectInvalid(
      RunOp(OpType::kMaxPool, {x}, {{"kernel_shape", IntsAttr({2})}, {"storage_order", IntAttr(2)}})
          .status());
  ExpectInvalid(
      RunOp(OpType::kMaxPool, {MakeFloat({3}, {1, 2, 3})}, {{"kernel_shape", IntsAttr({2})}})
          .status());
  ExpectInvalid(RunOp(OpType::kGlobalMaxPool, {MakeFloat({3}, {1, 2, 3})}).status());
}

}  // namespace
}  // namespace kiln::testing::nn
