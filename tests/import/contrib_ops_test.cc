// ONNX Runtime contrib ops (com.microsoft) expanded at import (engine/import/contrib_ops.h): the
// nodes an expansion makes (names, op versions newer than the model's opset, provenance, the
// contrib outputs' names kept), the numbers of an op ORT's CPU provider cannot run (BiasAdd), and
// the errors: unsupported ops and bad attributes or inputs name the node. The numbers of every
// other op against ONNX Runtime are in tests/e2e/contrib_models_test.cc.
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
using ::testing::HasSubstr;

// An empty IR-8 model importing the default domain at `opset` and com.microsoft 1.
onnx::ModelProto Model(int opset = 13) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* imp = m.add_opset_import();
  imp->set_domain("");
  imp->set_version(opset);
  imp = m.add_opset_import();
  imp->set_domain("com.microsoft");
  imp->set_version(1);
  m.mutable_graph()->set_name("contrib");
  return m;
}

onnx::NodeProto* Contrib(onnx::ModelProto& m, const std::string& op,
                         const std::vector<std::string>& in, const std::vector<std::string>& out,
                         const std::string& name) {
  onnx::NodeProto* n = AddOnnxNode(m.mutable_graph(), op, in, out, name);
  n->set_domain("com.microsoft");
  return n;
}

void Input(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& dims) {
  AddTensorValueInfo(m.mutable_graph()->mutable_input(), name, dims);
}

void Output(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& dims) {
  AddTensorValueInfo(m.mutable_graph()->mutable_output(), name, dims);
}

absl::StatusOr<std::unique_ptr<ir::Graph>> Import(const onnx::ModelProto& m) {
  return ImportModel(SerializeModel(m), ImportOptions{});
}

const ir::Node* Find(const ir::Graph& g, const std::string& name) {
  for (const auto& n : g.nodes()) {
    if (n->name == name) return n.get();
  }
  return nullptr;
}

// SkipLayerNormalization in an opset-13 model (older than LayerNormalization-17).
onnx::ModelProto SkipLayerNormModel() {
  onnx::ModelProto m = Model(13);
  Input(m, "x", {2, 3, 4});
  Input(m, "skip", {2, 3, 4});
  AddFloatInitializer(m.mutable_graph(), "gamma", {4}, Wave(4, 1, 0));
  AddFloatInitializer(m.mutable_graph(), "beta", {4}, Wave(4, 0.5f, 1));
  AddFloatInitializer(m.mutable_graph(), "bias", {4}, Wave(4, 0.2f, 2));
  Contrib(m, "SkipLayerNormalization", {"x", "skip", "gamma", "beta", "bias"}, {"y", "", "", "sum"},
          "sln");
  Output(m, "y", {2, 3, 4});
  Output(m, "sum", {2, 3, 4});
  return m;
}

TEST(ContribOps, SkipLayerNormalizationExpandsIntoAddsAndLayerNormalization) {
  auto g = Import(SkipLayerNormModel());
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ((*g)->nodes().size(), 3u);
  const ir::Node* add = Find(**g, "sln/skip_add");
  const ir::Node* bias = Find(**g, "sln/bias_add");
  const ir::Node* ln = Find(**g, "sln/LayerNormalization");
  ASSERT_NE(add, nullptr);
  ASSERT_NE(bias, nullptr);
  ASSERT_NE(ln, nullptr);
  // The first part keeps the contrib node's import index; every part is its own source.
  EXPECT_EQ(add->id, 0);
  for (const ir::Node* n : {add, bias, ln}) EXPECT_EQ(n->sources, std::vector<int>{n->id});
  EXPECT_EQ(ln->op, ir::OpType::kLayerNormalization);
  EXPECT_EQ(ln->since_version, 17);                     // newer than the model's opset 13
  EXPECT_FLOAT_EQ(ln->GetFloat("epsilon", 0), 1e-12f);  // ORT's default
  // The contrib node's outputs keep their names: the sum is the bias Add's, y the norm's.
  EXPECT_EQ(bias->outputs[0]->name, "sum");
  EXPECT_EQ(ln->outputs[0]->name, "y");
  EXPECT_EQ(ln->inputs[0], bias->outputs[0]);
  EXPECT_EQ((*g)->FindValue("y")->dtype, DataType::kF32);
  bool warned = false;
  for (const std::string& w : (*g)->import_warnings()) warned |= w.find("com.microsoft") != w.npos;
  EXPECT_TRUE(warned);
}

TEST(ContribOps, FastGeluIsGeluTanhAndGeluIsGelu20) {
  onnx::ModelProto m = Model(13);
  Input(m, "x", {2, 4});
  AddFloatInitializer(m.mutable_graph(), "b", {4}, Wave(4, 1, 0));
  Contrib(m, "FastGelu", {"x", "b"}, {"f"}, "fg");
  Contrib(m, "Gelu", {"f"}, {"y"}, "g");
  Output(m, "y", {2, 4});
  auto g = Import(m);
  ASSERT_TRUE(g.ok()) << g.status();
  const ir::Node* fast = Find(**g, "fg/Gelu");
  const ir::Node* gelu = Find(**g, "g/Gelu");
  ASSERT_NE(fast, nullptr);
  ASSERT_NE(gelu, nullptr);
  EXPECT_EQ(fast->GetString("approximate", ""), "tanh");
  EXPECT_EQ(gelu->GetString("approximate", "none"), "none");
  EXPECT_EQ(gelu->since_version, 20);
  EXPECT_NE(Find(**g, "fg/bias_add"), nullptr);
}

// BiasAdd has no ORT CPU kernel (CUDA only), so no ORT reference: X + bias + skip by hand.
TEST(ContribOps, BiasAddComputesXPlusBiasPlusSkip) {
  onnx::ModelProto m = Model(17);
  Input(m, "x", {1, 2, 3});
  Input(m, "skip", {1, 2, 3});
  const std::vector<float> bias = {0.5f, -1.0f, 2.0f};
  AddFloatInitializer(m.mutable_graph(), "bias", {3}, bias);
  Contrib(m, "BiasAdd", {"x", "bias", "skip"}, {"y"}, "ba");
  Output(m, "y", {1, 2, 3});
  ::kiln::testing::TempDir dir;
  const std::string path = dir.path() + "/m.onnx";
  {
    std::string bytes = SerializeModel(m);
    FILE* f = fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    fwrite(bytes.data(), 1, bytes.size(), f);
    fclose(f);
  }
  builder::BuildOptions o;
  o.policy = "fp32";
  auto built = builder::BuildEngineFromFile(path, o, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  auto engine = plan::LoadEngineFromBytes(std::make_shared<std::string>(built->blob));
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto session = runtime::Session::Create(std::shared_ptr<plan::Engine>(std::move(*engine)));
  ASSERT_TRUE(session.ok()) << session.status();
  auto x = ir::Tensor::Allocate(DataType::kF32, {1, 2, 3});
  auto s = ir::Tensor::Allocate(DataType::kF32, {1, 2, 3});
  ASSERT_TRUE(x.ok() && s.ok());
  const std::vector<float> xv = Wave(6, 1, 0), sv = Wave(6, 2, 1);
  for (int i = 0; i < 6; ++i) {
    x->data<float>()[i] = xv[i];
    s->data<float>()[i] = sv[i];
  }
  auto outs = (*session)->Run({*x, *s});
  ASSERT_TRUE(outs.ok()) << outs.status();
  for (int i = 0; i < 6; ++i) {
    // Two fp32 additions in ORT's order ((x + bias) + skip): the same float, exactly.
    EXPECT_EQ((*outs)[0].data<float>()[i], (xv[i] + bias[i % 3]) + sv[i]) << i;
  }
}

TEST(ContribOps, UnsupportedContribOpNamesOpDomainAndNode) {
  onnx::ModelProto m = Model();
  Input(m, "x", {2, 2});
  Contrib(m, "Inverse", {"x"}, {"y"}, "inv");  // not expanded by Kiln
  Output(m, "y", {2, 2});
  auto g = Import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(g.status().message(), HasSubstr("[node 'inv' (Inverse) #0]"));
  EXPECT_THAT(g.status().message(), HasSubstr("op Inverse of domain 'com.microsoft'"));
}

TEST(ContribOps, AttentionWithoutNumHeadsNamesTheNode) {
  onnx::ModelProto m = Model();
  Input(m, "x", {1, 2, 4});
  AddFloatInitializer(m.mutable_graph(), "w", {4, 12}, Wave(48, 0.3f, 0));
  Contrib(m, "Attention", {"x", "w"}, {"y"}, "att");
  Output(m, "y", {1, 2, 4});
  auto g = Import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(),
              HasSubstr("[node 'att' (com.microsoft.Attention) #0] attribute num_heads"));
}

TEST(ContribOps, AttentionQkvHiddenSizesMustMatchTheWeights) {
  onnx::ModelProto m = Model();
  Input(m, "x", {1, 2, 4});
  AddFloatInitializer(m.mutable_graph(), "w", {4, 12}, Wave(48, 0.3f, 0));
  onnx::NodeProto* n = Contrib(m, "Attention", {"x", "w"}, {"y"}, "att");
  AddIntAttribute(n, "num_heads", 2);
  AddIntsAttribute(n, "qkv_hidden_sizes", {4, 4, 6});
  Output(m, "y", {1, 2, 6});
  auto g = Import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("qkv_hidden_sizes sum to 14"));
  EXPECT_THAT(g.status().message(), HasSubstr("(com.microsoft.Attention)"));
}

TEST(ContribOps, MatMulNBitsNeedsConstantWeights) {
  onnx::ModelProto m = Model();
  Input(m, "a", {1, 16});
  AddTensorValueInfo(m.mutable_graph()->mutable_input(), "b", {2, 1, 8}, onnx::TensorProto::UINT8);
  AddFloatInitializer(m.mutable_graph(), "s", {2}, {0.1f, 0.2f});
  onnx::NodeProto* n = Contrib(m, "MatMulNBits", {"a", "b", "s"}, {"y"}, "mm");
  AddIntAttribute(n, "K", 16);
  AddIntAttribute(n, "N", 2);
  AddIntAttribute(n, "bits", 4);
  AddIntAttribute(n, "block_size", 16);
  Output(m, "y", {1, 2});
  auto g = Import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(g.status().message(), HasSubstr("[node 'mm' (com.microsoft.MatMulNBits) #0]"));
  EXPECT_THAT(g.status().message(), HasSubstr("input 1 (B) 'b' must be a constant"));
}

TEST(ContribOps, QLinearConcatChecksItsInputTriples) {
  onnx::ModelProto m = Model();
  Input(m, "ys", {});
  Input(m, "a", {2});
  Contrib(m, "QLinearConcat", {"ys", "ys", "a", "ys"}, {"y"}, "qc");
  Output(m, "y", {2});
  auto g = Import(m);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("[node 'qc' (com.microsoft.QLinearConcat) #0]"));
  EXPECT_THAT(g.status().message(), HasSubstr("triple"));
}

TEST(ContribOps, PackedMultiHeadAttentionSplitsQkvIntoTheOnnxAttention) {
  onnx::ModelProto m = Model(17);
  Input(m, "qkv", {1, 3, 2, 3, 4});
  onnx::NodeProto* n = Contrib(m, "MultiHeadAttention", {"qkv"}, {"y"}, "mha");
  AddIntAttribute(n, "num_heads", 2);
  Output(m, "y", {1, 3, 8});
  auto g = Import(m);
  ASSERT_TRUE(g.ok()) << g.status();
  const ir::Node* att = Find(**g, "mha/Attention");
  ASSERT_NE(att, nullptr);
  EXPECT_EQ(att->since_version, 23);
  EXPECT_EQ(att->GetInt("q_num_heads", 0), 2);
  ASSERT_TRUE((*g)->FindValue("y")->shape.rank_known);
  EXPECT_EQ((*g)->FindValue("y")->shape.ToString(), ir::Shape::Of({1, 3, 8}).ToString());
}

}  // namespace
}  // namespace kiln::import
