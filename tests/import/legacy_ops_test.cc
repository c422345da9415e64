// Models of default-domain opsets below 7 (engine/import/legacy_ops.h): each old op form is
// imported in its opset-7 form and, built and run, gives the numbers of a model written in the
// newer form; old forms that cannot be adapted fail naming the node, the op version and the
// opset. The models are IR 3, so Debian's onnx 1.12 checker checks them against the old schemas.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/builder/builder.h"
#include "engine/import/onnx_importer.h"
#include "engine/ir/graph.h"
#include "engine/plan/engine_blob.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/testing/onnx_models.h"

namespace kiln::import {
namespace {

using ::kiln::testing::AddFloatInitializer;
using ::kiln::testing::AddIntAttribute;
using ::kiln::testing::AddIntsAttribute;
using ::kiln::testing::AddOnnxNode;
using ::kiln::testing::AddTensorValueInfo;
using ::kiln::testing::SerializeModel;
using ::kiln::testing::Wave;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// An empty IR-3 model importing the default domain at `opset`.
onnx::ModelProto Model(int opset) {
  onnx::ModelProto m;
  m.set_ir_version(3);
  auto* imp = m.add_opset_import();
  imp->set_domain("");
  imp->set_version(opset);
  m.mutable_graph()->set_name("legacy");
  return m;
}

// A float graph input of shape `dims`.
void Input(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& dims) {
  AddTensorValueInfo(m.mutable_graph()->mutable_input(), name, dims);
}

// A float weight; IR < 4 lists initializers among the graph inputs too.
void Weight(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& dims,
            const std::vector<float>& values) {
  AddFloatInitializer(m.mutable_graph(), name, dims, values);
  Input(m, name, dims);
}

void Output(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& dims,
            int32_t elem_type = onnx::TensorProto::FLOAT) {
  AddTensorValueInfo(m.mutable_graph()->mutable_output(), name, dims, elem_type);
}

void FloatAttr(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

void StringAttr(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

ir::Tensor Floats(std::vector<int64_t> dims, const std::vector<float>& values) {
  auto t = ir::Tensor::Allocate(DataType::kF32, std::move(dims));
  EXPECT_TRUE(t.ok()) << t.status();
  for (size_t i = 0; i < values.size(); ++i) t->data<float>()[i] = values[i];
  return *t;
}

// Builds `m` with the default (fp32) policy and runs it on `inputs`.
absl::StatusOr<std::vector<ir::Tensor>> BuildAndRun(const onnx::ModelProto& m,
                                                    const std::vector<ir::Tensor>& inputs) {
  auto built = builder::BuildEngine(SerializeModel(m), builder::BuildOptions{}, nullptr);
  if (!built.ok()) return built.status();
  auto engine = plan::LoadEngineFromBytes(std::make_shared<std::string>(built->blob));
  if (!engine.ok()) return engine.status();
  auto session = runtime::Session::Create(std::shared_ptr<plan::Engine>(std::move(*engine)));
  if (!session.ok()) return session.status();
  return (*session)->Run(inputs);
}

std::vector<double> Values(const ir::Tensor& t) {
  std::vector<double> out(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) out[i] = ir::ElementAsDouble(t, i);
  return out;
}

// Runs the old-form model and the newer-form model on the same inputs and expects the same
// outputs, exactly: after the rewrite both run the same kernels on the same values in the same
// order (a Reshape only relabels dims), so any difference is a wrong rewrite, not rounding.
void ExpectSameNumbers(const onnx::ModelProto& legacy, const onnx::ModelProto& modern,
                       const std::vector<ir::Tensor>& inputs) {
  auto old_out = BuildAndRun(legacy, inputs);
  ASSERT_TRUE(old_out.ok()) << old_out.status();
  auto new_out = BuildAndRun(modern, inputs);
  ASSERT_TRUE(new_out.ok()) << new_out.status();
  ASSERT_EQ(old_out->size(), new_out->size());
  for (size_t o = 0; o < old_out->size(); ++o) {
    EXPECT_EQ((*old_out)[o].dtype(), (*new_out)[o].dtype()) << "output " << o;
    EXPECT_EQ((*old_out)[o].dims(), (*new_out)[o].dims()) << "output " << o;
    EXPECT_EQ(Values((*old_out)[o]), Values((*new_out)[o])) << "output " << o;
  }
}

const ir::Node* FindNode(const ir::Graph& g, const std::string& name) {
  for (const auto& n : g.nodes()) {
    if (n->name == name) return n.get();
  }
  return nullptr;
}

// Add-6 with broadcast=1, axis=1: B [3] is aligned with A's axis 1 (A [2,3,4]), where numpy
// broadcasting would align it with the last axis (and fail: 4 != 3). As B [3,1] it broadcasts.
onnx::ModelProto AddAtAxis(int opset, bool b_is_weight) {
  onnx::ModelProto m = Model(opset);
  Input(m, "a", {2, 3, 4});
  if (b_is_weight) {
    Weight(m, "b", {3}, {10, 20, 30});
  } else {
    Input(m, "b", {3});
  }
  auto* add = AddOnnxNode(m.mutable_graph(), "Add", {"a", "b"}, {"y"}, "add");
  AddIntAttribute(add, "broadcast", 1);
  AddIntAttribute(add, "axis", 1);
  Output(m, "y", {2, 3, 4});
  return m;
}

TEST(LegacyOpsTest, AddBroadcastAtAxisOfAWeight) {
  onnx::ModelProto legacy = AddAtAxis(6, /*b_is_weight=*/true);
  auto g = ImportModel(SerializeModel(legacy), {});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ((*g)->nodes().size(), 1u);  // a weight is reshaped, no node inserted
  const ir::Node* add = FindNode(**g, "add");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->id, 0);
  EXPECT_EQ(add->since_version, 7);
  EXPECT_FALSE(add->has_attr("broadcast"));
  EXPECT_FALSE(add->has_attr("axis"));
  ASSERT_TRUE(add->input(1)->constant.has_value());
  EXPECT_THAT(add->input(1)->constant->dims(), ElementsAre(3, 1));
  EXPECT_EQ((*g)->opset(), 6);  // the model's opset, as it says
  ASSERT_EQ((*g)->import_warnings().size(), 1u);
  EXPECT_THAT((*g)->import_warnings()[0],
              HasSubstr("[node 'add' (Add) #0] Add-6 -> Add-7 (B aligned at axis 1: 1 trailing 1 "
                        "dim(s) added)"));

  // y[i][j][k] = a[i][j][k] + b[j].
  std::vector<float> a = Wave(24, 1.0f, 0.3f);
  auto out = BuildAndRun(legacy, {Floats({2, 3, 4}, a)});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 1u);
  const float b[3] = {10, 20, 30};
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ((*out)[0].data<float>()[i], a[i] + b[(i / 4) % 3]) << i;
  }

  onnx::ModelProto modern = Model(7);
  Input(modern, "a", {2, 3, 4});
  Weight(modern, "b", {3, 1}, {10, 20, 30});
  AddOnnxNode(modern.mutable_graph(), "Add", {"a", "b"}, {"y"}, "add");
  Output(modern, "y", {2, 3, 4});
  ExpectSameNumbers(legacy, modern, {Floats({2, 3, 4}, a)});
}

TEST(LegacyOpsTest, AddBroadcastAtAxisOfAnInputInsertsAReshape) {
  onnx::ModelProto legacy = AddAtAxis(6, /*b_is_weight=*/false);
  auto g = ImportModel(SerializeModel(legacy), {});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ((*g)->nodes().size(), 2u);
  const ir::Node* add = FindNode(**g, "add");
  const ir::Node* reshape = FindNode(**g, "add/legacy_broadcast");
  ASSERT_NE(add, nullptr);
  ASSERT_NE(reshape, nullptr);
  EXPECT_EQ(add->id, 0);      // the ONNX node keeps its import index
  EXPECT_EQ(reshape->id, 1);  // the inserted node comes after the ONNX nodes
  EXPECT_EQ(reshape->op, ir::OpType::kReshape);
  EXPECT_EQ(add->input(1), reshape->outputs[0]);
  EXPECT_EQ(reshape->input(0)->name, "b");
  ASSERT_TRUE(add->input(1)->shape.is_static());
  EXPECT_THAT(add->input(1)->shape.StaticDims(), ElementsAre(3, 1));

  onnx::ModelProto modern = Model(7);
  Input(modern, "a", {2, 3, 4});
  Input(modern, "b", {3});
  AddOnnxNode(modern.mutable_graph(), "Unsqueeze", {"b"}, {"b3"}, "unsqueeze");
  AddIntsAttribute(modern.mutable_graph()->mutable_node(0), "axes", {1});
  AddOnnxNode(modern.mutable_graph(), "Add", {"a", "b3"}, {"y"}, "add");
  Output(modern, "y", {2, 3, 4});
  ExpectSameNumbers(legacy, modern, {Floats({2, 3, 4}, Wave(24, 1, 0.1f)), Floats({3}, {1, 2, 3})});
}

// Mul-1 (opset 1) with consumed_inputs and suffix broadcasting (no axis): B [4] on A [2,4].
TEST(LegacyOpsTest, MulVersion1SuffixBroadcastAndConsumedInputs) {
  onnx::ModelProto legacy = Model(1);
  Input(legacy, "a", {2, 4});
  Weight(legacy, "b", {4}, {1, -2, 3, -4});
  auto* mul = AddOnnxNode(legacy.mutable_graph(), "Mul", {"a", "b"}, {"y"}, "mul");
  AddIntAttribute(mul, "broadcast", 1);
  AddIntsAttribute(mul, "consumed_inputs", {0, 0});
  Output(legacy, "y", {2, 4});
  auto g = ImportModel(SerializeModel(legacy), {});
  ASSERT_TRUE(g.ok()) << g.status();
  const ir::Node* n = FindNode(**g, "mul");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->since_version, 7);
  EXPECT_TRUE(n->attrs.empty());

  onnx::ModelProto modern = Model(7);
  Input(modern, "a", {2, 4});
  Weight(modern, "b", {4}, {1, -2, 3, -4});
  AddOnnxNode(modern.mutable_graph(), "Mul", {"a", "b"}, {"y"}, "mul");
  Output(modern, "y", {2, 4});
  ExpectSameNumbers(legacy, modern, {Floats({2, 4}, Wave(8, 2, 0.5f))});
}

// PRelu-6: a 1-D slope of size C applies along axis 1 (per channel).
TEST(LegacyOpsTest, PReluPerChannelSlope) {
  onnx::ModelProto legacy = Model(6);
  Input(legacy, "x", {2, 3, 2, 2});
  Weight(legacy, "slope", {3}, {0.5f, 0.25f, 2});
  AddOnnxNode(legacy.mutable_graph(), "PRelu", {"x", "slope"}, {"y"}, "prelu");
  Output(legacy, "y", {2, 3, 2, 2});
  std::vector<float> x = Wave(24, 3, 0.2f);
  auto out = BuildAndRun(legacy, {Floats({2, 3, 2, 2}, x)});
  ASSERT_TRUE(out.ok()) << out.status();
  const float slope[3] = {0.5f, 0.25f, 2};
  for (int i = 0; i < 24; ++i) {
    const float want = x[i] >= 0 ? x[i] : x[i] * slope[(i / 4) % 3];
    EXPECT_EQ((*out)[0].data<float>()[i], want) << i;
  }

  onnx::ModelProto modern = Model(7);
  Input(modern, "x", {2, 3, 2, 2});
  Weight(modern, "slope", {3, 1, 1}, {0.5f, 0.25f, 2});
  AddOnnxNode(modern.mutable_graph(), "PRelu", {"x", "slope"}, {"y"}, "prelu");
  Output(modern, "y", {2, 3, 2, 2});
  ExpectSameNumbers(legacy, modern, {Floats({2, 3, 2, 2}, x)});
}

// Reshape-1 (opset 4): the shape is an attribute; it becomes a constant input.
TEST(LegacyOpsTest, ReshapeShapeAttributeBecomesAnInput) {
  onnx::ModelProto legacy = Model(4);
  Input(legacy, "x", {2, 3, 4});
  auto* r = AddOnnxNode(legacy.mutable_graph(), "Reshape", {"x"}, {"y"}, "reshape");
  AddIntsAttribute(r, "shape", {0, -1});
  AddIntsAttribute(r, "consumed_inputs", {0});
  Output(legacy, "y", {2, 12});
  auto g = ImportModel(SerializeModel(legacy), {});
  ASSERT_TRUE(g.ok()) << g.status();
  const ir::Node* n = FindNode(**g, "reshape");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->since_version, 5);
  ASSERT_EQ(n->num_inputs(), 2);
  ASSERT_TRUE(n->input(1)->constant.has_value());
  EXPECT_EQ(n->input(1)->name, "reshape::shape");
  ASSERT_TRUE(n->outputs[0]->shape.is_static());
  EXPECT_THAT(n->outputs[0]->shape.StaticDims(), ElementsAre(2, 12));

  onnx::ModelProto modern = Model(5);
  Input(modern, "x", {2, 3, 4});
  ::kiln::testing::AddInt64Initializer(modern.mutable_graph(), "shape", {0, -1});
  AddTensorValueInfo(modern.mutable_graph()->mutable_input(), "shape", {2},
                     onnx::TensorProto::INT64);
  AddOnnxNode(modern.mutable_graph(), "Reshape", {"x", "shape"}, {"y"}, "reshape");
  Output(modern, "y", {2, 12});
  ExpectSameNumbers(legacy, modern, {Floats({2, 3, 4}, Wave(24, 1, 0))});
}

// Concat-1 (opset 3) without axis concatenates along axis 1.
TEST(LegacyOpsTest, ConcatWithoutAxisUsesAxisOne) {
  onnx::ModelProto legacy = Model(3);
  Input(legacy, "a", {2, 1});
  Input(legacy, "b", {2, 2});
  AddOnnxNode(legacy.mutable_graph(), "Concat", {"a", "b"}, {"y"}, "concat");
  Output(legacy, "y", {2, 3});
  auto out = BuildAndRun(legacy, {Floats({2, 1}, {1, 2}), Floats({2, 2}, {3, 4, 5, 6})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Values((*out)[0]), ElementsAre(1, 3, 4, 2, 5, 6));
}

// Gemm-6 with broadcast=1: C [N] broadcasts over the rows, as Gemm-7 always does.
TEST(LegacyOpsTest, GemmBroadcastAttributeIsDropped) {
  auto gemm_model = [](int opset) {
    onnx::ModelProto m = Model(opset);
    Input(m, "a", {2, 3});
    Weight(m, "b", {3, 4}, Wave(12, 1, 0.7f));
    Weight(m, "c", {4}, {1, 2, 3, 4});
    auto* n = AddOnnxNode(m.mutable_graph(), "Gemm", {"a", "b", "c"}, {"y"}, "gemm");
    if (opset < 7) AddIntAttribute(n, "broadcast", 1);
    FloatAttr(n, "beta", 0.5f);
    Output(m, "y", {2, 4});
    return m;
  };
  auto g = ImportModel(SerializeModel(gemm_model(6)), {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FALSE(FindNode(**g, "gemm")->has_attr("broadcast"));
  ExpectSameNumbers(gemm_model(6), gemm_model(7), {Floats({2, 3}, Wave(6, 1, 0.9f))});
}

// BatchNormalization-6 with is_test=1 and only Y is BatchNormalization-7 in inference mode; with
// is_test=0 and only Y (training mode, batch statistics) it stays version 6, which the kernels
// implement.
TEST(LegacyOpsTest, BatchNormIsTest) {
  auto bn_model = [](int opset, int is_test) {
    onnx::ModelProto m = Model(opset);
    Input(m, "x", {2, 2, 3});
    Weight(m, "scale", {2}, {1.5f, 0.5f});
    Weight(m, "bias", {2}, {0.1f, -0.2f});
    Weight(m, "mean", {2}, {0.3f, -0.4f});
    Weight(m, "var", {2}, {2, 0.5f});
    auto* n = AddOnnxNode(m.mutable_graph(), "BatchNormalization",
                          {"x", "scale", "bias", "mean", "var"}, {"y"}, "bn");
    if (opset < 7) AddIntAttribute(n, "is_test", is_test);
    Output(m, "y", {2, 2, 3});
    return m;
  };
  auto g = ImportModel(SerializeModel(bn_model(6, 1)), {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(FindNode(**g, "bn")->since_version, 7);
  EXPECT_FALSE(FindNode(**g, "bn")->has_attr("is_test"));
  ExpectSameNumbers(bn_model(6, 1), bn_model(7, 0), {Floats({2, 2, 3}, Wave(12, 2, 0.4f))});

  auto training = ImportModel(SerializeModel(bn_model(6, 0)), {});
  ASSERT_TRUE(training.ok()) << training.status();
  EXPECT_EQ(FindNode(**training, "bn")->since_version, 6);
  EXPECT_EQ(FindNode(**training, "bn")->GetInt("is_test", 1), 0);
  ASSERT_EQ((*training)->import_warnings().size(), 1u);
  EXPECT_THAT((*training)->import_warnings()[0],
              HasSubstr("BatchNormalization-6 kept as BatchNormalization-6"));
}

// Split-1 (opset 1) with the split lengths as a constant second input (typed like the data).
TEST(LegacyOpsTest, SplitInputBecomesAnAttribute) {
  onnx::ModelProto legacy = Model(1);
  Input(legacy, "x", {5, 2});
  Weight(legacy, "split", {2}, {2, 3});
  auto* n = AddOnnxNode(legacy.mutable_graph(), "Split", {"x", "split"}, {"y0", "y1"}, "split");
  AddIntAttribute(n, "axis", 0);
  Output(legacy, "y0", {2, 2});
  Output(legacy, "y1", {3, 2});
  auto g = ImportModel(SerializeModel(legacy), {});
  ASSERT_TRUE(g.ok()) << g.status();
  const ir::Node* split = FindNode(**g, "split");
  EXPECT_EQ(split->since_version, 2);
  EXPECT_EQ(split->num_inputs(), 1);
  EXPECT_THAT(split->GetInts("split"), ElementsAre(2, 3));
  auto out = BuildAndRun(legacy, {Floats({5, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Values((*out)[0]), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(Values((*out)[1]), ElementsAre(4, 5, 6, 7, 8, 9));
}

// Cast-1 names the target type as a string.
TEST(LegacyOpsTest, CastTargetTypeString) {
  onnx::ModelProto legacy = Model(1);
  Input(legacy, "x", {4});
  auto* n = AddOnnxNode(legacy.mutable_graph(), "Cast", {"x"}, {"y"}, "cast");
  StringAttr(n, "to", "INT32");
  Output(legacy, "y", {4}, onnx::TensorProto::INT32);
  auto out = BuildAndRun(legacy, {Floats({4}, {1.75f, -2.5f, 3, 0.25f})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dtype(), DataType::kI32);
  EXPECT_THAT(Values((*out)[0]), ElementsAre(1, -2, 3, 0));  // truncation toward zero
}

// Pad-1 calls the pads `paddings`; Tile-1 takes one count and one axis.
TEST(LegacyOpsTest, PadPaddingsAndTileCountAndAxis) {
  onnx::ModelProto legacy = Model(1);
  Input(legacy, "x", {1, 2});
  Weight(legacy, "tiles", {1}, {3});
  Weight(legacy, "axis", {1}, {1});
  auto* pad = AddOnnxNode(legacy.mutable_graph(), "Pad", {"x"}, {"p"}, "pad");
  AddIntsAttribute(pad, "paddings", {1, 0, 0, 1});
  FloatAttr(pad, "value", 9);
  AddOnnxNode(legacy.mutable_graph(), "Tile", {"x", "tiles", "axis"}, {"t"}, "tile");
  Output(legacy, "p", {2, 3});
  Output(legacy, "t", {1, 6});
  auto g = ImportModel(SerializeModel(legacy), {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(FindNode(**g, "pad")->GetInts("pads"), ElementsAre(1, 0, 0, 1));
  EXPECT_FALSE(FindNode(**g, "pad")->has_attr("paddings"));
  const ir::Node* tile = FindNode(**g, "tile");
  ASSERT_EQ(tile->num_inputs(), 2);
  ASSERT_TRUE(tile->input(1)->constant.has_value());
  EXPECT_THAT(Values(*tile->input(1)->constant), ElementsAre(1, 3));

  auto out = BuildAndRun(legacy, {Floats({1, 2}, {1, 2})});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_THAT((*out)[0].dims(), ElementsAre(2, 3));
  EXPECT_THAT(Values((*out)[0]), ElementsAre(9, 9, 9, 1, 2, 9));
  ASSERT_THAT((*out)[1].dims(), ElementsAre(1, 6));
  EXPECT_THAT(Values((*out)[1]), ElementsAre(1, 2, 1, 2, 1, 2));
}

// Dropout-6 with is_test=0 runs as in an inference run of Dropout-7: output = input.
TEST(LegacyOpsTest, DropoutIsTestIsDropped) {
  onnx::ModelProto legacy = Model(6);
  Input(legacy, "x", {3});
  auto* n = AddOnnxNode(legacy.mutable_graph(), "Dropout", {"x"}, {"y"}, "dropout");
  AddIntAttribute(n, "is_test", 0);
  FloatAttr(n, "ratio", 0.5f);
  Output(legacy, "y", {3});
  auto out = BuildAndRun(legacy, {Floats({3}, {1, -2, 3})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Values((*out)[0]), ElementsAre(1, -2, 3));
}

// Upsample-1's height_scale / width_scale become Upsample-7's scales.
TEST(LegacyOpsTest, UpsampleScales) {
  auto up_model = [](int opset) {
    onnx::ModelProto m = Model(opset);
    Input(m, "x", {1, 1, 2, 2});
    auto* n = AddOnnxNode(m.mutable_graph(), "Upsample", {"x"}, {"y"}, "up");
    if (opset < 7) {
      FloatAttr(n, "height_scale", 2);
      FloatAttr(n, "width_scale", 3);
    } else {
      auto* a = n->add_attribute();
      a->set_name("scales");
      a->set_type(onnx::AttributeProto::FLOATS);
      for (float s : {1.0f, 1.0f, 2.0f, 3.0f}) a->add_floats(s);
    }
    Output(m, "y", {1, 1, 4, 6});
    return m;
  };
  auto out = BuildAndRun(up_model(6), {Floats({1, 1, 2, 2}, {1, 2, 3, 4})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Values((*out)[0]), ElementsAre(1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,  //
                                             3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4));
  ExpectSameNumbers(up_model(6), up_model(7), {Floats({1, 1, 2, 2}, {1, 2, 3, 4})});
}

// Nodes inside subgraphs are rewritten too: Reshape-1 in both branches of an If-1 (opset 4).
TEST(LegacyOpsTest, SubgraphNodesAreRewritten) {
  onnx::ModelProto m = Model(4);
  AddTensorValueInfo(m.mutable_graph()->mutable_input(), "cond", {}, onnx::TensorProto::BOOL);
  Input(m, "x", {2, 3});
  auto* if_node = AddOnnxNode(m.mutable_graph(), "If", {"cond"}, {"y"}, "if");
  for (const char* branch : {"then_branch", "else_branch"}) {
    onnx::GraphProto* sub = ::kiln::testing::AddSubgraph(if_node, branch);
    const bool then = std::string(branch) == "then_branch";
    auto* r = AddOnnxNode(sub, "Reshape", {"x"}, {"r"}, "reshape");
    AddIntsAttribute(r, "shape", then ? std::vector<int64_t>{3, 2} : std::vector<int64_t>{6, 1});
    AddTensorValueInfo(sub->mutable_output(), "r",
                       then ? std::vector<int64_t>{3, 2} : std::vector<int64_t>{6, 1});
  }
  AddTensorValueInfo(m.mutable_graph()->mutable_output(), "y", {});
  m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  ImportOptions no_checker;
  no_checker.use_onnx_checker = false;  // it requires a shape on graph outputs; If's differs
  auto g = ImportModel(SerializeModel(m), no_checker);
  ASSERT_TRUE(g.ok()) << g.status();
  const ir::Node* n = FindNode(**g, "if");
  ASSERT_NE(n, nullptr);
  const ir::Attribute* then_branch = n->attr("then_branch");
  ASSERT_NE(then_branch, nullptr);
  const ir::Node* r = FindNode(*then_branch->g, "if/then_branch/reshape");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->since_version, 5);
  ASSERT_EQ(r->num_inputs(), 2);
  ASSERT_TRUE(r->input(1)->constant.has_value());
  EXPECT_THAT(Values(*r->input(1)->constant), ElementsAre(3, 2));
  EXPECT_FALSE(r->has_attr("shape"));
}

// Old forms that cannot be adapted fail naming the node, the op version and the opset.
TEST(LegacyOpsTest, UnadaptableFormsNameTheNode) {
  // Legacy broadcasting at an axis needs A's rank, which a rank-less input does not give.
  onnx::ModelProto unranked = AddAtAxis(6, /*b_is_weight=*/true);
  unranked.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  ImportOptions no_checker;
  no_checker.use_onnx_checker = false;  // it requires a shape on graph inputs
  auto st = ImportModel(SerializeModel(unranked), no_checker).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_THAT(st.message(), HasSubstr("[node 'add' (Add) #0]"));
  EXPECT_THAT(st.message(), HasSubstr("Add-6 (opset 6)"));
  EXPECT_THAT(st.message(), HasSubstr("needs the ranks of A and B"));

  // B of rank 2 at axis 2 of a rank-3 A runs past A's last axis: a bad model.
  onnx::ModelProto misfit = AddAtAxis(6, /*b_is_weight=*/true);
  misfit.mutable_graph()->mutable_node(0)->mutable_attribute(1)->set_i(2);
  misfit.mutable_graph()->mutable_initializer(0)->add_dims(1);
  misfit.mutable_graph()
      ->mutable_input(1)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->add_dim()
      ->set_dim_value(1);
  st = ImportModel(SerializeModel(misfit), no_checker).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("[node 'add' (Add) #0] Add-6: B of rank 2 does not fit A"));

  // Split-1 whose lengths are computed at run time: Split-2 takes them only as an attribute.
  onnx::ModelProto split = Model(1);
  Input(split, "x", {4});
  Input(split, "s", {2});
  AddOnnxNode(split.mutable_graph(), "Split", {"x", "s"}, {"y0", "y1"}, "split");
  Output(split, "y0", {2});
  Output(split, "y1", {2});
  st = ImportModel(SerializeModel(split), {}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_THAT(st.message(), HasSubstr("[node 'split' (Split) #0] unsupported op version: "
                                      "Split-1 (opset 1)"));
  EXPECT_THAT(st.message(), HasSubstr("'split' is not a constant"));
}

// An op that did not exist yet at the model's opset is refused, as at any opset.
TEST(LegacyOpsTest, OpNewerThanTheOpsetIsRefused) {
  onnx::ModelProto m = Model(6);
  Input(m, "x", {3});
  AddOnnxNode(m.mutable_graph(), "Acos", {"x"}, {"y"}, "acos");  // since opset 7
  Output(m, "y", {3});
  auto st = ImportModel(SerializeModel(m), {}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("[node 'acos' (Acos) #0] op Acos does not exist at opset 6"));
}

}  // namespace
}  // namespace kiln::import
