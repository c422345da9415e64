// LSTM, GRU and RNN at import (import/shape_inference_recurrent.h): output shapes for both
// layouts, the directions, a hidden size from R's dims and symbolic sequence lengths; attribute,
// weight-shape and dtype errors as InvalidArgument naming the node. (The kernels are tested in
// tests/kernels/recurrent_test.cc.)
#include <memory>
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

void AddStrings(onnx::NodeProto* n, const std::string& name, const std::vector<std::string>& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRINGS);
  for (const std::string& s : v) a->add_strings(s);
}

void AddString(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

// An opset-22 model of one `op` node: X input of `x_dims`, W and R initializers of `gates` *
// `hidden` rows per direction, outputs Y, Y_h (and Y_c for LSTM) with shapes left to inference.
onnx::ModelProto RecurrentModel(const std::string& op, std::vector<int64_t> x_dims, int64_t hidden,
                                int dirs, int64_t w_rows = -1) {
  const int gates = op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
  if (w_rows < 0) w_rows = gates * hidden;
  onnx::ModelProto m;
  m.set_ir_version(10);
  m.set_producer_name("kiln-tests");
  auto* imp = m.add_opset_import();
  imp->set_domain("");
  imp->set_version(22);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("recurrent");
  AddTensorValueInfo(g->mutable_input(), "X", x_dims);
  const int64_t input = x_dims.back();
  AddFloatInitializer(g, "W", {dirs, w_rows, input}, Wave(dirs * w_rows * input, 0.3f, 0));
  AddFloatInitializer(g, "R", {dirs, w_rows, hidden}, Wave(dirs * w_rows * hidden, 0.3f, 1));
  std::vector<std::string> outs = {"Y", "Y_h"};
  if (op == "LSTM") outs.push_back("Y_c");
  onnx::NodeProto* n = AddOnnxNode(g, op, {"X", "W", "R"}, outs, "rec");
  for (const std::string& o : outs) {
    onnx::ValueInfoProto* v = g->add_output();
    v->set_name(o);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  }
  (void)n;
  return m;
}

onnx::NodeProto* Node(onnx::ModelProto& m) { return m.mutable_graph()->mutable_node(0); }

absl::StatusOr<std::unique_ptr<ir::Graph>> Import(const onnx::ModelProto& m) {
  return import::ImportModel(SerializeModel(m), import::ImportOptions{});
}

std::string ShapeOf(const ir::Graph& g, const std::string& name) {
  const ir::Value* v = g.FindValue(name);
  return v ? v->shape.ToString() : "(no value)";
}

TEST(RecurrentImport, InfersShapesForLayoutsAndDirections) {
  onnx::ModelProto m = RecurrentModel("LSTM", {7, 2, 5}, 3, 2);
  AddIntAttribute(Node(m), "hidden_size", 3);
  AddString(Node(m), "direction", "bidirectional");
  auto g = Import(m);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(ShapeOf(**g, "Y"), "[7,2,2,3]");
  EXPECT_EQ(ShapeOf(**g, "Y_h"), "[2,2,3]");
  EXPECT_EQ(ShapeOf(**g, "Y_c"), "[2,2,3]");
  EXPECT_EQ((*g)->FindValue("Y")->dtype, DataType::kF32);

  // layout 1: X [batch, seq, input]; hidden_size left out: from R's dims.
  m = RecurrentModel("GRU", {2, 7, 5}, 4, 1);
  AddIntAttribute(Node(m), "layout", 1);
  g = Import(m);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(ShapeOf(**g, "Y"), "[2,7,1,4]");
  EXPECT_EQ(ShapeOf(**g, "Y_h"), "[2,1,4]");

  // A symbolic sequence length stays symbolic.
  m = RecurrentModel("RNN", {7, 2, 5}, 6, 1);
  onnx::TensorShapeProto_Dimension* d0 = m.mutable_graph()
                                             ->mutable_input(0)
                                             ->mutable_type()
                                             ->mutable_tensor_type()
                                             ->mutable_shape()
                                             ->mutable_dim(0);
  d0->clear_dim_value();
  d0->set_dim_param("T");
  g = Import(m);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(ShapeOf(**g, "Y_h"), "[1,2,6]");
  const ir::Shape& y = (*g)->FindValue("Y")->shape;
  ASSERT_EQ(y.rank(), 4);
  EXPECT_FALSE(y.dims[0].is_static());
  EXPECT_EQ(y.dims[3].value, 6);
}

void ExpectImportError(const onnx::ModelProto& m, const std::string& fragment) {
  auto g = Import(m);
  ASSERT_FALSE(g.ok()) << "imported; expected: " << fragment;
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("[node 'rec'")) << g.status();
  EXPECT_THAT(std::string(g.status().message()), HasSubstr(fragment)) << g.status();
}

TEST(RecurrentImport, AttributeErrorsNameTheNode) {
  onnx::ModelProto m = RecurrentModel("LSTM", {7, 2, 5}, 3, 1);
  AddString(Node(m), "direction", "both");
  ExpectImportError(m, "direction must be forward, reverse or bidirectional, got 'both'");

  m = RecurrentModel("GRU", {7, 2, 5}, 3, 1);
  AddStrings(Node(m), "activations", {"Sigmoid"});
  ExpectImportError(m, "activations has 1 functions, expected 2");

  m = RecurrentModel("RNN", {7, 2, 5}, 3, 1);
  AddStrings(Node(m), "activations", {"Swish"});
  ExpectImportError(m, "unknown activation function 'Swish'");

  m = RecurrentModel("LSTM", {7, 2, 5}, 3, 1);
  AddIntAttribute(Node(m), "hidden_size", 4);  // W and R hold 3 units
  ExpectImportError(m, "W has shape [1,12,5], expected [1,16,5]");

  m = RecurrentModel("RNN", {7, 2, 5}, 3, 1);
  AddIntAttribute(Node(m), "layout", 3);
  ExpectImportError(m, "layout must be 0 or 1, got 3");

  m = RecurrentModel("LSTM", {7, 2, 5}, 3, 2);  // two directions of weights, direction forward
  ExpectImportError(m, "W has shape [2,12,5], expected [1,12,5]");

  m = RecurrentModel("GRU", {7, 2, 5}, 3, 1, /*w_rows=*/10);  // not 3 * hidden rows
  AddIntAttribute(Node(m), "hidden_size", 3);
  ExpectImportError(m, "W has shape [1,10,5], expected [1,9,5]");

  // sequence_lens is int32 (tensor(int32) in every version).
  m = RecurrentModel("RNN", {7, 2, 5}, 3, 1);
  AddTensorValueInfo(m.mutable_graph()->mutable_input(), "L", {2}, onnx::TensorProto::INT64);
  Node(m)->add_input("");
  Node(m)->add_input("L");
  ExpectImportError(m, "sequence_lens is int64, expected int32");
  // ... of the batch's size.
  m = RecurrentModel("RNN", {7, 2, 5}, 3, 1);
  AddTensorValueInfo(m.mutable_graph()->mutable_input(), "L", {3}, onnx::TensorProto::INT32);
  Node(m)->add_input("");
  Node(m)->add_input("L");
  ExpectImportError(m, "sequence_lens has shape [3], expected [2]");
}

}  // namespace
}  // namespace kiln::testing
