// 1-D convolutions in a build: the oneDNN kernel (kernels/cpu/dnnl/conv_dnnl.cc) is the one the
// build records and lays W out for, whether W is an initializer or the output of a Constant node
// (as inside silero-vad's If branches), which only becomes a constant when the build folds it.
#include <string>
#include <vector>

#include "engine/builder/builder.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"

namespace kiln::testing {
namespace {

// y = Conv(x, w, b) with x float[1, 4, 9], w float[6, 4, 3], pads 1 and stride 2: w an
// initializer, or with `constant_node` the output of a Constant node.
onnx::ModelProto Conv1dModel(bool constant_node) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("kiln-tests");
  auto* imp = m.add_opset_import();
  imp->set_domain("");
  imp->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("conv1d");
  AddTensorValueInfo(g->mutable_input(), "x", {1, 4, 9});
  const std::vector<float> w = Wave(6 * 4 * 3, 0.5f, 0.3f);
  if (constant_node) {
    onnx::NodeProto* c = AddOnnxNode(g, "Constant", {}, {"w"}, "w_constant");
    onnx::AttributeProto* a = c->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    onnx::TensorProto* t = a->mutable_t();
    t->set_name("w");
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : {6, 4, 3}) t->add_dims(d);
    for (float v : w) t->add_float_data(v);
  } else {
    AddFloatInitializer(g, "w", {6, 4, 3}, w);
  }
  AddFloatInitializer(g, "b", {6}, Wave(6, 0.1f, 1.0f));
  onnx::NodeProto* conv = AddOnnxNode(g, "Conv", {"x", "w", "b"}, {"y"}, "conv1d");
  AddIntsAttribute(conv, "pads", {1, 1});
  AddIntsAttribute(conv, "strides", {2});
  AddTensorValueInfo(g->mutable_output(), "y", {1, 6, 5});
  return m;
}

TEST(Conv1dBuildTest, OneDnnKernelIsRecordedAndItsWeightsLaidOut) {
  for (bool constant_node : {false, true}) {
    SCOPED_TRACE(constant_node ? "W from a Constant node" : "W an initializer");
    builder::BuildOptions opts;
    auto built = builder::BuildEngine(SerializeModel(Conv1dModel(constant_node)), opts, nullptr);
    ASSERT_TRUE(built.ok()) << built.status();
    // PrepackConvolutions lays out the W of the nodes whose recorded kernel is the oneDNN one
    // (the fp32 oneDNN convolution needs no more than SSE4.2): one, in both models.
    EXPECT_EQ(built->summary.prepacked_convolutions, 1);
  }
}

}  // namespace
}  // namespace kiln::testing
