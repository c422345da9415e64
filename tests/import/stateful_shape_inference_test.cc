// LinearAttention, CausalConvWithState and RotaryEmbedding at import
// (import/shape_inference_stateful.h): the state outputs' shapes and dtypes, which differ from
// input 0's, inferred from the inputs and attributes; mixed dtypes refused naming the node. (The
// kernels are tested in tests/kernels/nn_sequence_state_test.cc.)
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/import/onnx_importer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"

namespace kiln::testing {
namespace {

using ::testing::HasSubstr;

struct Io {
  std::string name;
  std::vector<int64_t> dims;
  int32_t type = onnx::TensorProto::FLOAT;
};

// An opset-27 model of one `op` node with the given inputs; outputs declared with a dtype only
// (no shape), so what the test reads is inference's.
onnx::ModelProto OneNode(const std::string& op, const std::vector<Io>& inputs,
                         const std::vector<std::string>& outputs, onnx::NodeProto** node) {
  onnx::ModelProto m;
  m.set_ir_version(10);
  auto* imp = m.add_opset_import();
  imp->set_version(27);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("stateful");
  std::vector<std::string> names;
  for (const Io& in : inputs) {
    names.push_back(in.name);
    if (!in.name.empty()) AddTensorValueInfo(g->mutable_input(), in.name, in.dims, in.type);
  }
  *node = AddOnnxNode(g, op, names, outputs, "n");
  for (const std::string& o : outputs) {
    onnx::ValueInfoProto* v = g->add_output();
    v->set_name(o);
  }
  return m;
}

const ir::Value* Out(const ir::Graph& g, const std::string& name) { return g.FindValue(name); }

TEST(StatefulShapeInferenceTest, LinearAttentionStateShapeAndType) {
  onnx::NodeProto* n;
  // q: 4 heads of d_k 3, k: 2 heads, v: 2 heads of d_v 5; an fp32 state with fp16 activations.
  auto m = OneNode("LinearAttention",
                   {{"q", {2, 7, 12}, onnx::TensorProto::FLOAT16},
                    {"k", {2, 7, 6}, onnx::TensorProto::FLOAT16},
                    {"v", {2, 7, 10}, onnx::TensorProto::FLOAT16},
                    {"s", {2, 2, 3, 5}}},
                   {"o", "s_out"}, &n);
  AddIntAttribute(n, "q_num_heads", 4);
  AddIntAttribute(n, "kv_num_heads", 2);
  auto* a = n->add_attribute();
  a->set_name("update_rule");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("linear");
  auto g = import::ImportModel(SerializeModel(m), {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Out(**g, "o")->dtype, DataType::kF16);
  EXPECT_EQ(Out(**g, "o")->shape.ToString(), ir::Shape::Of({2, 7, 20}).ToString());
  EXPECT_EQ(Out(**g, "s_out")->dtype, DataType::kF32);  // past_state's type S
  EXPECT_EQ(Out(**g, "s_out")->shape.ToString(), ir::Shape::Of({2, 2, 3, 5}).ToString());
}

TEST(StatefulShapeInferenceTest, LinearAttentionMixedActivationTypesAreRefused) {
  onnx::NodeProto* n;
  auto m =
      OneNode("LinearAttention",
              {{"q", {1, 1, 4}}, {"k", {1, 1, 4}, onnx::TensorProto::FLOAT16}, {"v", {1, 1, 4}}},
              {"o", "s_out"}, &n);
  AddIntAttribute(n, "q_num_heads", 1);
  AddIntAttribute(n, "kv_num_heads", 1);
  auto g = import::ImportModel(SerializeModel(m), {});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("[node 'n' (LinearAttention)"));
  EXPECT_THAT(g.status().message(), HasSubstr("input 1 is float16 but input 0 is float"));
}

TEST(StatefulShapeInferenceTest, CausalConvStateHasKernelMinusOnePositions) {
  onnx::NodeProto* n;
  auto m =
      OneNode("CausalConvWithState", {{"x", {3, 8, 11}}, {"w", {8, 1, 4}}}, {"y", "state"}, &n);
  auto g = import::ImportModel(SerializeModel(m), {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Out(**g, "y")->shape.ToString(), ir::Shape::Of({3, 8, 11}).ToString());
  EXPECT_EQ(Out(**g, "state")->shape.ToString(), ir::Shape::Of({3, 8, 3}).ToString());
}

TEST(StatefulShapeInferenceTest, RotaryEmbeddingKeepsTheShapeAndWantsInt64Positions) {
  onnx::NodeProto* n;
  auto m = OneNode(
      "RotaryEmbedding",
      {{"x", {1, 2, 3, 8}}, {"c", {5, 4}}, {"s", {5, 4}}, {"p", {1, 3}, onnx::TensorProto::INT64}},
      {"y"}, &n);
  auto g = import::ImportModel(SerializeModel(m), {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Out(**g, "y")->shape.ToString(), ir::Shape::Of({1, 2, 3, 8}).ToString());
  m.mutable_graph()->mutable_input(3)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::INT32);
  g = import::ImportModel(SerializeModel(m), {});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("position_ids is int32; int64 expected"));
}

}  // namespace
}  // namespace kiln::testing
