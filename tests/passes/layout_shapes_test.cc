// The channels-last layout pass (passes/layout.h) on the shapes of real models: symbolic batch and
// image sizes (squeeze-and-excitation, upsampling necks), the model's own Transposes next to a
// layout change, an NCHW stem, and ConvTranspose's inferred shapes.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/builder/builder.h"
#include "engine/common/cpu_features.h"
#include "engine/import/onnx_importer.h"
#include "engine/kernels/cpu/dnnl/register.h"
#include "engine/kernels/kernel.h"
#include "engine/kernels/registry.h"
#include "engine/plan/engine_blob.h"
#include "engine/report/analysis.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/passes/layout_test_models.h"
#include "tests/testing/node_runner.h"
#include "tests/testing/onnx_models.h"

namespace kiln::testing {
namespace {

using layout::Built;
using layout::Conv;
using layout::Input;
using layout::kC;
using layout::kH;
using layout::kW;

// A squeeze-and-excitation block with a symbolic batch (PP-OCR's LCNet, MobileNetV3):
// Conv -> Relu -> GlobalAveragePool -> Conv 1x1 -> HardSigmoid -> Mul(features, scale
// [N, C, 1, 1]) -> Div by a scalar -> Conv. Every node runs NHWC (the Mul broadcasts NHWC
// [N, 1, 1, C] over [N, H, W, C] as NCHW [N, C, 1, 1] over [N, C, H, W]), with one transpose in
// and one out, and the outputs are the NCHW engine's.
onnx::ModelProto SeBlock() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("se_block");
  for (auto* vi : {AddTensorValueInfo(g->mutable_input(), "x", {1, kC, kH, kW}),
                   AddTensorValueInfo(g->mutable_output(), "y", {1, kC, kH, kW})}) {
    vi->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param(
        "batch");
  }
  Conv(g, "/c0", "x", kC, kC, 3, "c0");
  AddOnnxNode(g, "Relu", {"c0"}, {"r0"}, "/relu");
  AddOnnxNode(g, "GlobalAveragePool", {"r0"}, {"gap"}, "/gap");
  Conv(g, "/se", "gap", kC, kC, 1, "se");
  AddOnnxNode(g, "HardSigmoid", {"se"}, {"hs"}, "/hsig");
  AddOnnxNode(g, "Mul", {"r0", "hs"}, {"scaled"}, "/scale");
  AddFloatInitializer(g, "two", {}, {2.0f});
  AddOnnxNode(g, "Div", {"scaled", "two"}, {"half"}, "/div");
  Conv(g, "/c1", "half", kC, kC, 3, "y");
  return m;
}

TEST(ChannelsLastTest, SqueezeExcitationWithASymbolicBatchStaysNhwc) {
  std::vector<ir::Tensor> outs[2];
  for (bool channels_last : {false, true}) {
    builder::BuildOptions o;
    o.channels_last = channels_last;
    auto r = builder::BuildEngine(SerializeModel(SeBlock()), o, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    if (channels_last) {
      EXPECT_EQ(r->summary.layout_convolutions, 3);
      EXPECT_EQ(r->summary.layout_transposes, 2);  // x in, y out
    }
    auto e = plan::LoadEngineFromBytes(std::make_shared<const std::string>(r->blob));
    ASSERT_TRUE(e.ok()) << e.status();
    auto s = runtime::Session::Create(*std::move(e));
    ASSERT_TRUE(s.ok()) << s.status();
    auto out = (*s)->Run(Input());
    ASSERT_TRUE(out.ok()) << out.status();
    outs[channels_last] = *std::move(out);
  }
  ASSERT_EQ(outs[0].size(), 1u);
  ASSERT_EQ(outs[1].size(), 1u);
  ASSERT_EQ(outs[0][0].dims(), outs[1][0].dims());
  const float* a = outs[0][0].data<float>();
  const float* b = outs[1][0].data<float>();
  float range = 0, diff = 0;
  for (int64_t i = 0; i < outs[0][0].num_elements(); ++i) {
    range = std::max(range, std::fabs(a[i]));
    diff = std::max(diff, std::fabs(a[i] - b[i]));
  }
  EXPECT_GT(range, 0.1f);
  // The elementwise nodes compute the same values in either layout; the convolutions sum the
  // same products in an order oneDNN chooses per layout: fp32 rounding of sums of 73 terms.
  EXPECT_LE(diff, 1e-5f * range);
}

// A decoder's upsampling between convolutions on an image of symbolic height and width
// (PP-OCR's detection neck): Conv -> nearest Resize by [1, 1, 2, 2] -> Add of another such Resize
// -> Conv. The Resizes' outputs have x's rank (their H and W known only at run time), so every
// node runs NHWC with one transpose in and one out, and the outputs are the NCHW engine's.
onnx::ModelProto UpsamplingNeck() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("upsampling_neck");
  for (auto* vi : {AddTensorValueInfo(g->mutable_input(), "x", {1, kC, kH, kW}),
                   AddTensorValueInfo(g->mutable_output(), "y", {1, kC, 2 * kH, 2 * kW})}) {
    auto* shape = vi->mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->mutable_dim(2)->set_dim_param("h");
    shape->mutable_dim(3)->set_dim_param("w");
  }
  AddFloatInitializer(g, "roi", {0}, {});
  AddFloatInitializer(g, "scales", {4}, {1.0f, 1.0f, 2.0f, 2.0f});
  Conv(g, "/c0", "x", kC, kC, 3, "c0");
  Conv(g, "/c1", "x", kC, kC, 1, "c1");
  for (const char* name : {"c0", "c1"}) {
    AddOnnxNode(g, "Resize", {name, "roi", "scales"}, {std::string(name) + "up"},
                std::string("/up_") + name);  // mode "nearest" by default
  }
  AddOnnxNode(g, "Add", {"c0up", "c1up"}, {"sum"}, "/sum");
  Conv(g, "/c2", "sum", kC, kC, 3, "y");
  return m;
}

TEST(ChannelsLastTest, ResizeOfSymbolicSizeBetweenConvolutionsStaysNhwc) {
  std::vector<ir::Tensor> outs[2];
  for (bool channels_last : {false, true}) {
    builder::BuildOptions o;
    o.channels_last = channels_last;
    auto r = builder::BuildEngine(SerializeModel(UpsamplingNeck()), o, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    if (channels_last) {
      EXPECT_EQ(r->summary.layout_convolutions, 3);
      EXPECT_EQ(r->summary.layout_transposes, 2);  // x in, y out
    }
    auto e = plan::LoadEngineFromBytes(std::make_shared<const std::string>(r->blob));
    ASSERT_TRUE(e.ok()) << e.status();
    auto s = runtime::Session::Create(*std::move(e));
    ASSERT_TRUE(s.ok()) << s.status();
    auto out = (*s)->Run(Input());
    ASSERT_TRUE(out.ok()) << out.status();
    outs[channels_last] = *std::move(out);
  }
  ASSERT_EQ(outs[0].size(), 1u);
  ASSERT_EQ(outs[1].size(), 1u);
  ASSERT_EQ(outs[0][0].dims(), (std::vector<int64_t>{1, kC, 2 * kH, 2 * kW}));
  ASSERT_EQ(outs[0][0].dims(), outs[1][0].dims());
  const float* a = outs[0][0].data<float>();
  const float* b = outs[1][0].data<float>();
  float range = 0, diff = 0;
  for (int64_t i = 0; i < outs[0][0].num_elements(); ++i) {
    range = std::max(range, std::fabs(a[i]));
    diff = std::max(diff, std::fabs(a[i] - b[i]));
  }
  EXPECT_GT(range, 0.1f);
  // Resize and Add move and add the same values in either layout; the convolutions sum the same
  // products in an order oneDNN chooses per layout: fp32 rounding of sums of at most 145 terms
  // (two 73-term convolutions added, then one more): well within 1e-5 of the range.
  EXPECT_LE(diff, 1e-5f * range);
}

// The model's own Transposes next to a layout change (magika's Conv input, YuNet's heads):
// x [1, kH, kW, kC] -> Transpose to NCHW -> Conv -> Transpose back to [1, kH, kW, kC] (y). The
// first Transpose writes the Conv's NHWC X directly and the last reads its NHWC Y: no transpose
// is inserted, and the outputs are the NCHW engine's.
onnx::ModelProto TransposedConv() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("transposed_conv");
  AddTensorValueInfo(g->mutable_input(), "x", {1, kH, kW, kC});
  AddTensorValueInfo(g->mutable_output(), "y", {1, kH, kW, kC});
  AddIntsAttribute(AddOnnxNode(g, "Transpose", {"x"}, {"xt"}, "/in"), "perm", {0, 3, 1, 2});
  Conv(g, "/c", "xt", kC, kC, 3, "c");
  AddIntsAttribute(AddOnnxNode(g, "Transpose", {"c"}, {"y"}, "/out"), "perm", {0, 2, 3, 1});
  return m;
}

TEST(ChannelsLastTest, ModelTransposesComposeWithTheLayoutChange) {
  std::vector<ir::Tensor> outs[2];
  auto in = ir::Tensor::Allocate(DataType::kF32, {1, kH, kW, kC});
  ASSERT_TRUE(in.ok());
  std::vector<float> v = Wave(kC * kH * kW, 1.0f, 0.0f);
  std::copy(v.begin(), v.end(), in->data<float>());
  for (bool channels_last : {false, true}) {
    builder::BuildOptions o;
    o.channels_last = channels_last;
    auto r = builder::BuildEngine(SerializeModel(TransposedConv()), o, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    if (channels_last) {
      EXPECT_EQ(r->summary.layout_convolutions, 1);
      EXPECT_EQ(r->summary.layout_transposes, 0);
    }
    auto e = plan::LoadEngineFromBytes(std::make_shared<const std::string>(r->blob));
    ASSERT_TRUE(e.ok()) << e.status();
    auto s = runtime::Session::Create(*std::move(e));
    ASSERT_TRUE(s.ok()) << s.status();
    auto out = (*s)->Run({*in});
    ASSERT_TRUE(out.ok()) << out.status();
    outs[channels_last] = *std::move(out);
  }
  ASSERT_EQ(outs[0].size(), 1u);
  ASSERT_EQ(outs[1].size(), 1u);
  ASSERT_EQ(outs[0][0].dims(), (std::vector<int64_t>{1, kH, kW, kC}));
  ASSERT_EQ(outs[0][0].dims(), outs[1][0].dims());
  const float* a = outs[0][0].data<float>();
  const float* b = outs[1][0].data<float>();
  float range = 0, diff = 0;
  for (int64_t i = 0; i < outs[0][0].num_elements(); ++i) {
    range = std::max(range, std::fabs(a[i]));
    diff = std::max(diff, std::fabs(a[i] - b[i]));
  }
  EXPECT_GT(range, 0.1f);
  // The transposes move values exactly; the convolution sums the same 73 products in an order
  // oneDNN chooses per layout.
  EXPECT_LE(diff, 1e-5f * range);
}

// x [1, 3, 12, 14] -> a 3 -> 16 stem (3 x 3, stride 2) + Relu -> a 16 -> 16 Conv -> y; x also
// -> a 3 -> 8 Conv -> side.
onnx::ModelProto StemNet() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("stem_test");
  AddTensorValueInfo(g->mutable_input(), "x", {1, 3, 12, 14});
  AddIntsAttribute(Conv(g, "/stem", "x", 3, 16, 3, "s"), "strides", {2, 2});
  AddOnnxNode(g, "Relu", {"s"}, {"sr"}, "/stem/relu");
  Conv(g, "/c2", "sr", 16, 16, 3, "y");
  Conv(g, "/side", "x", 3, 8, 3, "side");
  AddTensorValueInfo(g->mutable_output(), "y", {1, 16, 6, 7});
  AddTensorValueInfo(g->mutable_output(), "side", {1, 8, 12, 14});
  return m;
}

// A first convolution with 3 input channels and 16 outputs reads the NCHW graph input as it is
// (kChannelsLastYOnly) and writes NHWC: no transpose of x for it; a 3 -> 8 one reading the same x
// (no NCHW-X kernel for 8 outputs) gets the usual transposed copy. The outputs are the NCHW
// engine's within fp32 rounding (sums of at most 16 * 9 = 144 terms in another order: 1e-5 of
// the output range, as SameOutputsAsTheNchwEngine).
TEST(ChannelsLastTest, StemConvolutionReadsNchwInput) {
  Built built[2];
  for (int cl = 0; cl < 2; ++cl) {
    builder::BuildOptions o;
    o.policy = "fp32";
    o.channels_last = cl == 1;
    auto r = builder::BuildEngine(SerializeModel(StemNet()), o, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    built[cl].result = *std::move(r);
    auto e = plan::LoadEngineFromBytes(std::make_shared<const std::string>(built[cl].result.blob));
    ASSERT_TRUE(e.ok()) << e.status();
    built[cl].engine = *std::move(e);
  }
  EXPECT_EQ(built[1].result.summary.layout_convolutions, 3);
  const ir::Node* stem = nullptr;
  const ir::Node* side = nullptr;
  int to_nhwc = 0;
  for (const ir::Node* n : built[1].engine->order) {
    // The convolutions by their W: [16, 3, 3, 3] the stem's, [8, 3, 3, 3] the side's.
    const ir::Value* w = n->input(1);
    if ((n->op == ir::OpType::kConv || n->op == ir::OpType::kFusedConv) && w && w->constant) {
      if (w->constant->dims() == std::vector<int64_t>{16, 3, 3, 3}) stem = n;
      if (w->constant->dims() == std::vector<int64_t>{8, 3, 3, 3}) side = n;
    }
    if (n->op == ir::OpType::kTranspose && n->GetInts("perm") == std::vector<int64_t>{0, 2, 3, 1}) {
      ++to_nhwc;
      EXPECT_EQ(n->inputs[0]->name, "x");
    }
  }
  ASSERT_NE(stem, nullptr);
  ASSERT_NE(side, nullptr);
  EXPECT_EQ(stem->GetInt(kernels::kChannelsLastAttr, 0), kernels::cpu::dnnl::kChannelsLastYOnly);
  EXPECT_EQ(stem->inputs[0]->name, "x");
  EXPECT_TRUE(absl::EndsWith(stem->outputs[0]->name, "::nhwc"));
  EXPECT_EQ(side->GetInt(kernels::kChannelsLastAttr, 0), 1);
  EXPECT_EQ(side->inputs[0]->name, "x::nhwc");
  EXPECT_EQ(to_nhwc, 1);  // for the side convolution only

  auto t = ir::Tensor::Allocate(DataType::kF32, {1, 3, 12, 14});
  const std::vector<float> v = Wave(3 * 12 * 14, 1.0f, 0.0f);
  std::copy(v.begin(), v.end(), t->data<float>());
  std::vector<ir::Tensor> out[2];
  for (int cl = 0; cl < 2; ++cl) {
    auto s = runtime::Session::Create(built[cl].engine);
    ASSERT_TRUE(s.ok()) << s.status();
    auto o = (*s)->Run({*t});
    ASSERT_TRUE(o.ok()) << o.status();
    out[cl] = *std::move(o);
  }
  ASSERT_EQ(out[0].size(), 2u);
  ASSERT_EQ(out[1].size(), 2u);
  for (size_t o = 0; o < 2; ++o) {
    ASSERT_EQ(out[1][o].dims(), out[0][o].dims());
    const std::vector<float> a = ToFloats(out[1][o]), b = ToFloats(out[0][o]);
    float range = 0, diff = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      range = std::max(range, std::fabs(b[i]));
      diff = std::max(diff, std::fabs(a[i] - b[i]));
    }
    EXPECT_GT(range, 0.1f);
    EXPECT_LE(diff, 1e-5f * range) << "output " << o;
  }
}

// `y` (the ConvTranspose's output, of shape inferred) through a Relu to graph output `out` of
// rank `rank`, every dim symbolic.
void AddReluOutput(onnx::GraphProto* g, int rank) {
  AddOnnxNode(g, "Relu", {"y"}, {"out"}, "/relu");
  onnx::ValueInfoProto* o =
      AddTensorValueInfo(g->mutable_output(), "out", std::vector<int64_t>(rank, 1));
  for (int i = 0; i < rank; ++i) {
    o->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(i)->set_dim_param(
        "d" + std::to_string(i));
  }
}

// ConvTranspose's output shape (import/shape_inference.cc), which the layout pass needs a known
// rank of: rank and channels always (W constant), the spatial dims from the attributes when X's
// are static, unknown when symbolic.
TEST(ConvTransposeShapeTest, InferredFromTheAttributes) {
  struct Case {
    std::vector<int64_t> x;  // -1: symbolic
    std::vector<int64_t> w;
    std::vector<std::pair<std::string, std::vector<int64_t>>> ints;
    std::string auto_pad, want;
  };
  const std::vector<Case> cases = {
      // 2 * (5 - 1) + 2 = 10, 2 * (7 - 1) + 2 = 14: the 2x upsampling.
      {{1, 4, 5, 7}, {4, 3, 2, 2}, {{"strides", {2, 2}}}, "", "[1,3,10,14]"},
      // group 2: M = 2 * 3; 3 * (4 - 1) + 1 + (3 - 1) * 2 + 1 - 1 - 2 = 12;
      // 1 * (6 - 1) + 0 + (2 - 1) * 1 + 1 - 0 - 1 = 6.
      {{2, 4, 4, 6},
       {4, 3, 3, 2},
       {{"group", {2}},
        {"strides", {3, 1}},
        {"dilations", {2, 1}},
        {"pads", {1, 0, 2, 1}},
        {"output_padding", {1, 0}}},
       "",
       "[2,6,12,6]"},
      {{1, 2, 5, 3}, {2, 4, 3, 3}, {{"strides", {2, 2}}}, "SAME_UPPER", "[1,4,10,6]"},
      {{1, 2, 5, 3}, {2, 4, 3, 3}, {{"output_shape", {11, 8}}}, "", "[1,4,11,8]"},
      {{1, 2, 9}, {2, 5, 4}, {{"strides", {3}}}, "VALID", "[1,5,28]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.want);
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    g->set_name("deconv_shape");
    AddTensorValueInfo(g->mutable_input(), "x", c.x);
    int64_t wn = 1;
    for (int64_t d : c.w) wn *= d;
    AddFloatInitializer(g, "w", c.w, Wave(wn, 0.5f, 0.0f));
    auto* n = AddOnnxNode(g, "ConvTranspose", {"x", "w"}, {"y"}, "/up");
    for (const auto& [k, v] : c.ints) {
      if (k == "group") {
        AddIntAttribute(n, k, v[0]);
      } else {
        AddIntsAttribute(n, k, v);
      }
    }
    if (!c.auto_pad.empty()) {
      auto* a = n->add_attribute();
      a->set_name("auto_pad");
      a->set_type(onnx::AttributeProto::STRING);
      a->set_s(c.auto_pad);
    }
    AddReluOutput(g, static_cast<int>(c.x.size()));
    auto graph = import::ImportModel(SerializeModel(m), import::ImportOptions{});
    ASSERT_TRUE(graph.ok()) << graph.status();
    const ir::Value* y = (*graph)->FindValue("y");
    ASSERT_NE(y, nullptr);
    EXPECT_EQ(y->shape.ToString(), c.want);
  }
  // Symbolic H and W (PP-OCRv4 det's decoder): rank, batch and channels known, H and W not.
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("deconv_symbolic");
  AddTensorValueInfo(g->mutable_input(), "x", {1, 4, 5, 7});
  auto* shape = g->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  shape->mutable_dim(2)->set_dim_param("h");
  shape->mutable_dim(3)->set_dim_param("w");
  AddFloatInitializer(g, "w", {4, 3, 2, 2}, Wave(48, 0.5f, 0.0f));
  AddIntsAttribute(AddOnnxNode(g, "ConvTranspose", {"x", "w"}, {"y"}, "/up"), "strides", {2, 2});
  AddReluOutput(g, 4);
  auto graph = import::ImportModel(SerializeModel(m), import::ImportOptions{});
  ASSERT_TRUE(graph.ok()) << graph.status();
  const ir::Shape& y = (*graph)->FindValue("y")->shape;
  ASSERT_TRUE(y.rank_known);
  ASSERT_EQ(y.rank(), 4);
  EXPECT_EQ(y.dims[0].value, 1);
  EXPECT_EQ(y.dims[1].value, 3);
  EXPECT_FALSE(y.dims[2].is_static());
  EXPECT_FALSE(y.dims[3].is_static());
}

}  // namespace
}  // namespace kiln::testing