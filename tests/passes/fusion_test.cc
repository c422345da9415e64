// Fusion under the precision guarantee: every fusion agrees with its unfused engine within the
// bound the precision implies, a pinned fp32 node is never computed lower inside a fused kernel,
// a fusion that would lower a pinned precision is refused, and --no-fuse is honoured.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/builder/builder.h"
#include "engine/plan/engine_blob.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"

namespace kiln::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kRows = 4, kCols = 64;

onnx::ModelProto NewModel(const std::vector<int64_t>& in_dims,
                          const std::vector<int64_t>& out_dims) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  m.mutable_graph()->set_name("fusion_test");
  AddTensorValueInfo(m.mutable_graph()->mutable_input(), "x", in_dims);
  AddTensorValueInfo(m.mutable_graph()->mutable_output(), "y", out_dims);
  return m;
}

void Scalar(onnx::GraphProto* g, const std::string& name, float v) {
  AddFloatInitializer(g, name, {}, {v});
}

std::vector<float> Ramp(int64_t n, float scale, float offset) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = offset + scale * std::sin(0.37f * i);
  return v;
}

// y = LayerNorm(x) decomposed, with gamma and beta.
onnx::ModelProto DecomposedLayerNorm() {
  onnx::ModelProto m = NewModel({kRows, kCols}, {kRows, kCols});
  auto* g = m.mutable_graph();
  AddFloatInitializer(g, "gamma", {kCols}, Ramp(kCols, 0.2f, 1.0f));
  AddFloatInitializer(g, "beta", {kCols}, Ramp(kCols, 0.1f, 0.0f));
  Scalar(g, "two", 2.0f);
  Scalar(g, "eps", 1e-5f);
  auto axes = [](onnx::NodeProto* n) {
    auto* a = n->add_attribute();
    a->set_name("axes");
    a->set_type(onnx::AttributeProto::INTS);
    a->add_ints(-1);
  };
  axes(AddOnnxNode(g, "ReduceMean", {"x"}, {"mean"}, "/ln/mean"));
  AddOnnxNode(g, "Sub", {"x", "mean"}, {"d"}, "/ln/sub");
  AddOnnxNode(g, "Pow", {"d", "two"}, {"sq"}, "/ln/pow");
  axes(AddOnnxNode(g, "ReduceMean", {"sq"}, {"var"}, "/ln/var"));
  AddOnnxNode(g, "Add", {"var", "eps"}, {"ve"}, "/ln/add_eps");
  AddOnnxNode(g, "Sqrt", {"ve"}, {"std"}, "/ln/sqrt");
  AddOnnxNode(g, "Div", {"d", "std"}, {"n"}, "/ln/div");
  AddOnnxNode(g, "Mul", {"n", "gamma"}, {"s"}, "/ln/mul");
  AddOnnxNode(g, "Add", {"s", "beta"}, {"y"}, "/ln/add");
  return m;
}

// A float Constant node (unnamed, as Paddle2ONNX writes them) with output `out`.
void ConstantNode(onnx::GraphProto* g, const std::string& out, const std::vector<int64_t>& dims,
                  const std::vector<float>& values) {
  auto* a = AddOnnxNode(g, "Constant", {}, {out}, "")->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto* t = a->mutable_t();
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float v : values) t->add_float_data(v);
}

// The decomposed LayerNorm of Paddle2ONNX's text recognizers (issue 28): gamma, beta, eps and the
// exponent from unnamed Constant nodes only the instance reads, and x of unknown shape (a Reshape
// whose target, from a Constant node, holds 0 dims). The fused LayerNormalization reads gamma and
// beta from their Constant nodes, which must stay in the engine.
onnx::ModelProto DecomposedLayerNormConstantNodes() {
  onnx::ModelProto m = NewModel({kRows, kCols}, {kRows, kCols});
  auto* g = m.mutable_graph();
  auto* shape = AddOnnxNode(g, "Constant", {}, {"shape"}, "")->add_attribute();
  shape->set_name("value");
  shape->set_type(onnx::AttributeProto::TENSOR);
  shape->mutable_t()->set_data_type(onnx::TensorProto::INT64);
  shape->mutable_t()->add_dims(2);
  shape->mutable_t()->add_int64_data(0);
  shape->mutable_t()->add_int64_data(0);
  AddOnnxNode(g, "Reshape", {"x", "shape"}, {"xr"}, "");
  ConstantNode(g, "gamma", {kCols}, Ramp(kCols, 0.2f, 1.0f));
  ConstantNode(g, "beta", {kCols}, Ramp(kCols, 0.1f, 0.0f));
  ConstantNode(g, "two", {}, {2.0f});
  ConstantNode(g, "eps", {}, {1e-5f});
  auto axes = [](onnx::NodeProto* n) { AddIntsAttribute(n, "axes", {-1}); };
  axes(AddOnnxNode(g, "ReduceMean", {"xr"}, {"mean"}, ""));
  AddOnnxNode(g, "Sub", {"xr", "mean"}, {"d"}, "");
  AddOnnxNode(g, "Pow", {"d", "two"}, {"sq"}, "");
  axes(AddOnnxNode(g, "ReduceMean", {"sq"}, {"var"}, ""));
  AddOnnxNode(g, "Add", {"var", "eps"}, {"ve"}, "");
  AddOnnxNode(g, "Sqrt", {"ve"}, {"std"}, "");
  AddOnnxNode(g, "Div", {"d", "std"}, {"n"}, "");
  AddOnnxNode(g, "Mul", {"n", "gamma"}, {"s"}, "");
  AddOnnxNode(g, "Add", {"s", "beta"}, {"y"}, "");
  return m;
}

// y = GELU(x), Erf form.
onnx::ModelProto DecomposedGelu() {
  onnx::ModelProto m = NewModel({kRows, kCols}, {kRows, kCols});
  auto* g = m.mutable_graph();
  Scalar(g, "sqrt2", 1.4142135f);
  Scalar(g, "one", 1.0f);
  Scalar(g, "half", 0.5f);
  AddOnnxNode(g, "Div", {"x", "sqrt2"}, {"a"}, "/gelu/div");
  AddOnnxNode(g, "Erf", {"a"}, {"b"}, "/gelu/erf");
  AddOnnxNode(g, "Add", {"b", "one"}, {"c"}, "/gelu/add");
  AddOnnxNode(g, "Mul", {"x", "c"}, {"d"}, "/gelu/mul");
  AddOnnxNode(g, "Mul", {"d", "half"}, {"y"}, "/gelu/mul_half");
  return m;
}

// y = Softmax(x) decomposed over the last axis.
onnx::ModelProto DecomposedSoftmax() {
  onnx::ModelProto m = NewModel({kRows, kCols}, {kRows, kCols});
  auto* g = m.mutable_graph();
  AddOnnxNode(g, "Exp", {"x"}, {"e"}, "/softmax/exp");
  auto* rs = AddOnnxNode(g, "ReduceSum", {"e"}, {"s"}, "/softmax/sum");
  auto* a = rs->add_attribute();
  a->set_name("keepdims");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(1);
  AddFloatInitializer(g, "axes", {}, {});  // replaced below by an int64 axes tensor
  g->mutable_initializer()->RemoveLast();
  auto* axes = g->add_initializer();
  axes->set_name("axes");
  axes->set_data_type(onnx::TensorProto::INT64);
  axes->add_dims(1);
  axes->add_int64_data(-1);
  rs->add_input("axes");
  AddOnnxNode(g, "Div", {"e", "s"}, {"y"}, "/softmax/div");
  return m;
}

// y = BatchNorm(Conv(x)).
onnx::ModelProto ConvBatchNorm() {
  onnx::ModelProto m = NewModel({1, 3, 8, 8}, {1, 4, 8, 8});
  auto* g = m.mutable_graph();
  AddFloatInitializer(g, "w", {4, 3, 3, 3}, Ramp(4 * 27, 0.3f, 0.0f));
  AddFloatInitializer(g, "b", {4}, {0.1f, -0.2f, 0.3f, 0.0f});
  AddFloatInitializer(g, "scale", {4}, {1.5f, 0.5f, 2.0f, 1.0f});
  AddFloatInitializer(g, "bias", {4}, {0.0f, 0.1f, -0.1f, 0.2f});
  AddFloatInitializer(g, "mean", {4}, {0.05f, -0.1f, 0.2f, 0.0f});
  AddFloatInitializer(g, "var", {4}, {0.9f, 1.1f, 0.5f, 2.0f});
  auto* conv = AddOnnxNode(g, "Conv", {"x", "w", "b"}, {"c"}, "/conv");
  auto* pads = conv->add_attribute();
  pads->set_name("pads");
  pads->set_type(onnx::AttributeProto::INTS);
  for (int i = 0; i < 4; ++i) pads->add_ints(1);
  AddOnnxNode(g, "BatchNormalization", {"c", "scale", "bias", "mean", "var"}, {"y"}, "/bn");
  return m;
}

// y = Conv(x) * s + t, s and t one value per channel ([C, 1, 1] and [1, C, 1, 1]): a scale layer.
onnx::ModelProto ConvScale() {
  onnx::ModelProto m = NewModel({1, 3, 8, 8}, {1, 4, 8, 8});
  auto* g = m.mutable_graph();
  AddFloatInitializer(g, "w", {4, 3, 3, 3}, Ramp(4 * 27, 0.3f, 0.0f));
  AddFloatInitializer(g, "b", {4}, {0.1f, -0.2f, 0.3f, 0.0f});
  AddFloatInitializer(g, "s", {4, 1, 1}, {1.5f, 0.5f, -2.0f, 1.0f});
  AddFloatInitializer(g, "t", {1, 4, 1, 1}, {0.0f, 0.1f, -0.1f, 0.2f});
  auto* conv = AddOnnxNode(g, "Conv", {"x", "w", "b"}, {"c"}, "/conv");
  auto* pads = conv->add_attribute();
  pads->set_name("pads");
  pads->set_type(onnx::AttributeProto::INTS);
  for (int i = 0; i < 4; ++i) pads->add_ints(1);
  AddOnnxNode(g, "Mul", {"s", "c"}, {"cs"}, "/scale/mul");
  AddOnnxNode(g, "Add", {"cs", "t"}, {"y"}, "/scale/add");
  return m;
}

// y = BatchNormalization(x) * s + t, s an Unsqueeze of a [C] initializer to [C, 1, 1] (as
// Caffe2 exports a scale layer after a BatchNormalization) and t a [1, C, 1, 1] constant.
onnx::ModelProto BatchNormScale() {
  onnx::ModelProto m = NewModel({1, 4, 5, 5}, {1, 4, 5, 5});
  auto* g = m.mutable_graph();
  AddFloatInitializer(g, "scale", {4}, {1.5f, 0.5f, 2.0f, 1.0f});
  AddFloatInitializer(g, "bias", {4}, {0.0f, 0.1f, -0.1f, 0.2f});
  AddFloatInitializer(g, "mean", {4}, {0.05f, -0.1f, 0.2f, 0.0f});
  AddFloatInitializer(g, "var", {4}, {0.9f, 1.1f, 0.5f, 2.0f});
  AddFloatInitializer(g, "s0", {4}, {0.7f, -1.2f, 0.4f, 2.5f});
  auto* axes = g->add_initializer();
  axes->set_name("axes");
  axes->set_data_type(onnx::TensorProto::INT64);
  axes->add_dims(2);
  axes->add_int64_data(1);
  axes->add_int64_data(2);
  AddFloatInitializer(g, "t", {1, 4, 1, 1}, {0.3f, 0.0f, -0.2f, 0.1f});
  AddOnnxNode(g, "BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"bn"}, "/bn");
  AddOnnxNode(g, "Unsqueeze", {"s0", "axes"}, {"s"}, "/scale/unsqueeze");
  AddOnnxNode(g, "Mul", {"bn", "s"}, {"bs"}, "/scale/mul");
  AddOnnxNode(g, "Add", {"bs", "t"}, {"y"}, "/scale/add");
  return m;
}

// y = Relu(x @ W + b).
onnx::ModelProto MatMulBiasRelu() {
  onnx::ModelProto m = NewModel({kRows, kCols}, {kRows, 32});
  auto* g = m.mutable_graph();
  AddFloatInitializer(g, "w", {kCols, 32}, Ramp(kCols * 32, 0.2f, 0.0f));
  AddFloatInitializer(g, "b", {32}, Ramp(32, 0.5f, 0.1f));
  AddOnnxNode(g, "MatMul", {"x", "w"}, {"mm"}, "/fc/MatMul");
  AddOnnxNode(g, "Add", {"mm", "b"}, {"z"}, "/fc/Add");
  AddOnnxNode(g, "Relu", {"z"}, {"y"}, "/fc/Relu");
  return m;
}

// y = Relu(Identity(b) + MatMul(x, w)): the bias first and through an Identity, as PyTorch
// exports shared (equal) biases.
onnx::ModelProto MatMulIdentityBiasRelu() {
  onnx::ModelProto m = NewModel({kRows, kCols}, {kRows, 32});
  auto* g = m.mutable_graph();
  AddFloatInitializer(g, "w", {kCols, 32}, Ramp(kCols * 32, 0.2f, 0.0f));
  AddFloatInitializer(g, "b", {32}, Ramp(32, 0.5f, 0.1f));
  AddOnnxNode(g, "Identity", {"b"}, {"b_shared"}, "/fc/Identity");
  AddOnnxNode(g, "MatMul", {"x", "w"}, {"mm"}, "/fc/MatMul");
  AddOnnxNode(g, "Add", {"b_shared", "mm"}, {"z"}, "/fc/Add");
  AddOnnxNode(g, "Relu", {"z"}, {"y"}, "/fc/Relu");
  return m;
}

// y = Relu(Conv(x)).
onnx::ModelProto ConvRelu() {
  onnx::ModelProto m = NewModel({1, 3, 8, 8}, {1, 4, 6, 6});
  auto* g = m.mutable_graph();
  AddFloatInitializer(g, "w", {4, 3, 3, 3}, Ramp(4 * 27, 0.3f, 0.0f));
  AddFloatInitializer(g, "b", {4}, {0.1f, -0.2f, 0.3f, 0.0f});
  AddOnnxNode(g, "Conv", {"x", "w", "b"}, {"c"}, "/conv");
  AddOnnxNode(g, "Relu", {"c"}, {"y"}, "/relu");
  return m;
}

// y = c * Sigmoid(c), c = Conv(x): SiLU as exporters write it (YOLO-style detectors).
onnx::ModelProto ConvSilu() {
  onnx::ModelProto m = NewModel({1, 3, 8, 8}, {1, 4, 6, 6});
  auto* g = m.mutable_graph();
  AddFloatInitializer(g, "w", {4, 3, 3, 3}, Ramp(4 * 27, 0.3f, 0.0f));
  AddFloatInitializer(g, "b", {4}, {0.1f, -0.2f, 0.3f, 0.0f});
  AddOnnxNode(g, "Conv", {"x", "w", "b"}, {"c"}, "/conv");
  AddOnnxNode(g, "Sigmoid", {"c"}, {"s"}, "/sigmoid");
  AddOnnxNode(g, "Mul", {"s", "c"}, {"y"}, "/mul");
  return m;
}

// ConvScale with every constant a Constant node (Paddle2ONNX's BatchNormalization as Mul, Add).
onnx::ModelProto ConvScaleConstantNodes() {
  onnx::ModelProto m = NewModel({1, 3, 8, 8}, {1, 4, 6, 6});
  auto* g = m.mutable_graph();
  ConstantNode(g, "w", {4, 3, 3, 3}, Ramp(4 * 27, 0.3f, 0.0f));
  ConstantNode(g, "b", {4}, {0.1f, -0.2f, 0.3f, 0.0f});
  ConstantNode(g, "s", {1, 4, 1, 1}, {1.5f, 0.5f, -2.0f, 1.0f});
  ConstantNode(g, "t", {1, 4, 1, 1}, {0.0f, 0.1f, -0.1f, 0.2f});
  AddOnnxNode(g, "Conv", {"x", "w", "b"}, {"c"}, "/conv");
  AddOnnxNode(g, "Mul", {"c", "s"}, {"cs"}, "/scale/mul");
  AddOnnxNode(g, "Add", {"cs", "t"}, {"y"}, "/scale/add");
  return m;
}

// HardSwish written out after a Conv, as Paddle2ONNX writes it, constants as Constant nodes:
// y = (c * Clip(c + 3, 0, 6)) / 6.
onnx::ModelProto ConvHardSwishWritten() {
  onnx::ModelProto m = NewModel({1, 3, 8, 8}, {1, 4, 6, 6});
  auto* g = m.mutable_graph();
  ConstantNode(g, "w", {4, 3, 3, 3}, Ramp(4 * 27, 1.2f, 0.0f));
  ConstantNode(g, "b", {4}, {0.1f, -0.2f, 0.3f, 0.0f});
  ConstantNode(g, "three", {1}, {3.0f});
  ConstantNode(g, "zero", {}, {0.0f});
  ConstantNode(g, "six", {}, {6.0f});
  ConstantNode(g, "six_again", {1}, {6.0f});
  AddOnnxNode(g, "Conv", {"x", "w", "b"}, {"c"}, "/conv");
  AddOnnxNode(g, "Add", {"c", "three"}, {"c3"}, "/hs/add");
  AddOnnxNode(g, "Clip", {"c3", "zero", "six"}, {"r6"}, "/hs/clip");
  AddOnnxNode(g, "Mul", {"c", "r6"}, {"p"}, "/hs/mul");
  AddOnnxNode(g, "Div", {"p", "six_again"}, {"y"}, "/hs/div");
  return m;
}

// y = c * HardSigmoid(c; alpha 1/6, beta 0.5): HardSwish by its definition.
onnx::ModelProto ConvHardSigmoidMul() {
  onnx::ModelProto m = NewModel({1, 3, 8, 8}, {1, 4, 6, 6});
  auto* g = m.mutable_graph();
  AddFloatInitializer(g, "w", {4, 3, 3, 3}, Ramp(4 * 27, 1.2f, 0.0f));
  AddOnnxNode(g, "Conv", {"x", "w"}, {"c"}, "/conv");
  onnx::NodeProto* hs = AddOnnxNode(g, "HardSigmoid", {"c"}, {"h"}, "/hsig");
  onnx::AttributeProto* alpha = hs->add_attribute();
  alpha->set_name("alpha");
  alpha->set_type(onnx::AttributeProto::FLOAT);
  alpha->set_f(1.0f / 6);
  AddOnnxNode(g, "Mul", {"h", "c"}, {"y"}, "/mul");
  return m;
}

// y = Relu(Conv(x) + Tanh(x)): a residual Add after a convolution.
onnx::ModelProto ConvResidualRelu() {
  onnx::ModelProto m = NewModel({1, 4, 8, 8}, {1, 4, 8, 8});
  auto* g = m.mutable_graph();
  AddFloatInitializer(g, "w", {4, 4, 3, 3}, Ramp(4 * 36, 0.3f, 0.0f));
  AddFloatInitializer(g, "b", {4}, {0.1f, -0.2f, 0.3f, 0.0f});
  AddOnnxNode(g, "Tanh", {"x"}, {"z"}, "/branch");
  auto* conv = AddOnnxNode(g, "Conv", {"x", "w", "b"}, {"c"}, "/conv");
  auto* pads = conv->add_attribute();
  pads->set_name("pads");
  pads->set_type(onnx::AttributeProto::INTS);
  for (int i = 0; i < 4; ++i) pads->add_ints(1);
  AddOnnxNode(g, "Add", {"z", "c"}, {"sum"}, "/residual/Add");
  AddOnnxNode(g, "Relu", {"sum"}, {"y"}, "/relu");
  return m;
}

// y = LayerNormalization(x + Sigmoid(x)): a residual Add feeding a LayerNorm.
onnx::ModelProto ResidualAddLayerNorm() {
  onnx::ModelProto m = NewModel({kRows, kCols}, {kRows, kCols});
  auto* g = m.mutable_graph();
  AddFloatInitializer(g, "gamma", {kCols}, Ramp(kCols, 0.2f, 1.0f));
  AddFloatInitializer(g, "beta", {kCols}, Ramp(kCols, 0.1f, 0.0f));
  AddOnnxNode(g, "Sigmoid", {"x"}, {"r"}, "/branch");
  AddOnnxNode(g, "Add", {"x", "r"}, {"sum"}, "/residual/Add");
  AddOnnxNode(g, "LayerNormalization", {"sum", "gamma", "beta"}, {"y"}, "/ln");
  return m;
}

// Scaled dot-product attention over [1, 2, 8, 4] (batch, heads, seq, head size), the way
// exporters write it: MatMul(Q, Transpose(K)) / sqrt(d) -> Softmax -> MatMul(., V).
onnx::ModelProto Attention() {
  onnx::ModelProto m = NewModel({1, 2, 8, 4}, {1, 2, 8, 4});
  auto* g = m.mutable_graph();
  Scalar(g, "sqrt_d", 2.0f);
  AddOnnxNode(g, "Sigmoid", {"x"}, {"k"}, "/k");
  AddOnnxNode(g, "Tanh", {"x"}, {"v"}, "/v");
  auto* tr = AddOnnxNode(g, "Transpose", {"k"}, {"kt"}, "/attn/Transpose");
  auto* perm = tr->add_attribute();
  perm->set_name("perm");
  perm->set_type(onnx::AttributeProto::INTS);
  for (int p : {0, 1, 3, 2}) perm->add_ints(p);
  AddOnnxNode(g, "MatMul", {"x", "kt"}, {"s"}, "/attn/MatMul");
  AddOnnxNode(g, "Div", {"s", "sqrt_d"}, {"sc"}, "/attn/Div");
  AddOnnxNode(g, "Softmax", {"sc"}, {"p"}, "/attn/Softmax");
  AddOnnxNode(g, "MatMul", {"p", "v"}, {"y"}, "/attn/MatMul_1");
  return m;
}

// The 3-D batched form (Paddle's exports): [batch * heads, seq, head size] = [6, 8, 4], K^T by a
// Transpose of the last two dims (perm [0, 2, 1]).
onnx::ModelProto BatchedAttention3d() {
  onnx::ModelProto m = NewModel({6, 8, 4}, {6, 8, 4});
  auto* g = m.mutable_graph();
  Scalar(g, "sqrt_d", 2.0f);
  AddOnnxNode(g, "Sigmoid", {"x"}, {"k"}, "/k");
  AddOnnxNode(g, "Tanh", {"x"}, {"v"}, "/v");
  auto* tr = AddOnnxNode(g, "Transpose", {"k"}, {"kt"}, "/attn/Transpose");
  ::kiln::testing::AddIntsAttribute(tr, "perm", {0, 2, 1});
  AddOnnxNode(g, "MatMul", {"x", "kt"}, {"s"}, "/attn/MatMul");
  AddOnnxNode(g, "Div", {"s", "sqrt_d"}, {"sc"}, "/attn/Div");
  AddOnnxNode(g, "Softmax", {"sc"}, {"p"}, "/attn/Softmax");
  AddOnnxNode(g, "MatMul", {"p", "v"}, {"y"}, "/attn/MatMul_1");
  return m;
}

// PyTorch's form: heads split out of [batch, seq, heads, head size] = [1, 8, 2, 4], K^T made by
// one Transpose (perm [0, 2, 3, 1]) of that view rather than a swap of K's last two dims.
onnx::ModelProto AttentionKeyFromSequenceMajor() {
  onnx::ModelProto m = NewModel({1, 8, 2, 4}, {1, 2, 8, 4});
  auto* g = m.mutable_graph();
  Scalar(g, "sqrt_d", 2.0f);
  AddOnnxNode(g, "Sigmoid", {"x"}, {"k"}, "/k");
  AddOnnxNode(g, "Tanh", {"x"}, {"v"}, "/v");
  ::kiln::testing::AddIntsAttribute(AddOnnxNode(g, "Transpose", {"x"}, {"q4"}, "/attn/q"), "perm",
                                    {0, 2, 1, 3});
  ::kiln::testing::AddIntsAttribute(AddOnnxNode(g, "Transpose", {"k"}, {"kt"}, "/attn/kt"), "perm",
                                    {0, 2, 3, 1});
  ::kiln::testing::AddIntsAttribute(AddOnnxNode(g, "Transpose", {"v"}, {"v4"}, "/attn/v"), "perm",
                                    {0, 2, 1, 3});
  AddOnnxNode(g, "MatMul", {"q4", "kt"}, {"s"}, "/attn/MatMul");
  AddOnnxNode(g, "Div", {"s", "sqrt_d"}, {"sc"}, "/attn/Div");
  AddOnnxNode(g, "Softmax", {"sc"}, {"p"}, "/attn/Softmax");
  AddOnnxNode(g, "MatMul", {"p", "v4"}, {"y"}, "/attn/MatMul_1");
  return m;
}

// SVTR's form: Q scaled before the product (MatMul(Q * c, K^T)), 4-D.
onnx::ModelProto AttentionQueryScaled() {
  onnx::ModelProto m = NewModel({1, 2, 8, 4}, {1, 2, 8, 4});
  auto* g = m.mutable_graph();
  Scalar(g, "scale", 0.5f);
  AddOnnxNode(g, "Sigmoid", {"x"}, {"k"}, "/k");
  AddOnnxNode(g, "Tanh", {"x"}, {"v"}, "/v");
  AddOnnxNode(g, "Mul", {"x", "scale"}, {"q"}, "/attn/Mul");
  auto* tr = AddOnnxNode(g, "Transpose", {"k"}, {"kt"}, "/attn/Transpose");
  ::kiln::testing::AddIntsAttribute(tr, "perm", {0, 1, 3, 2});
  AddOnnxNode(g, "MatMul", {"q", "kt"}, {"s"}, "/attn/MatMul");
  AddOnnxNode(g, "Softmax", {"s"}, {"p"}, "/attn/Softmax");
  AddOnnxNode(g, "MatMul", {"p", "v"}, {"y"}, "/attn/MatMul_1");
  return m;
}

struct Run {
  builder::BuildResult built;
  ir::Tensor y;
};

absl::StatusOr<Run> BuildRun(const onnx::ModelProto& m, const std::string& policy,
                             std::vector<std::string> rules, bool fusion,
                             std::vector<std::string> no_fuse = {}) {
  builder::BuildOptions o;
  o.policy = policy;
  o.rules = std::move(rules);
  o.fusion.enabled = fusion;
  o.fusion.no_fuse = std::move(no_fuse);
  Run r;
  ASSIGN_OR_RETURN(r.built, builder::BuildEngine(SerializeModel(m), o, nullptr));
  ASSIGN_OR_RETURN(auto engine,
                   plan::LoadEngineFromBytes(std::make_shared<std::string>(r.built.blob)));
  ASSIGN_OR_RETURN(auto session,
                   runtime::Session::Create(std::shared_ptr<plan::Engine>(std::move(engine))));
  const auto& in = m.graph().input(0).type().tensor_type().shape();
  std::vector<int64_t> dims;
  for (const auto& d : in.dim()) dims.push_back(d.dim_value());
  ASSIGN_OR_RETURN(ir::Tensor x, ir::Tensor::Allocate(DataType::kF32, dims));
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.5f, 2.0f);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = dist(rng);
  ASSIGN_OR_RETURN(auto out, session->Run({x}));
  r.y = out[0];
  return r;
}

double MaxAbsDiff(const ir::Tensor& a, const ir::Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    double d = std::fabs(ir::ElementAsDouble(a, i) - ir::ElementAsDouble(b, i));
    m = std::max(m, std::isnan(d) ? INFINITY : d);
  }
  return m;
}

struct FusionCase {
  const char* name;
  onnx::ModelProto (*make)();
  const char* fusion;  // expected fusion label
};

class FusionAgreementTest : public ::testing::TestWithParam<FusionCase> {};

TEST_P(FusionAgreementTest, FusedAgreesWithUnfused) {
  const FusionCase& c = GetParam();
  onnx::ModelProto m = c.make();
  for (const char* policy : {"fp32", "fp16", "bf16"}) {
    auto on = BuildRun(m, policy, {}, true);
    ASSERT_TRUE(on.ok()) << policy << ": " << on.status();
    auto off = BuildRun(m, policy, {}, false);
    ASSERT_TRUE(off.ok()) << policy << ": " << off.status();
    // Attention stays apart at bf16 (its MatMuls run on bf16 dot products, fusion.cc).
    const bool apart = std::string(c.fusion) == "attention" && std::string(policy) == "bf16";
    EXPECT_EQ(on->built.summary.fusions, apart ? 0 : 1) << policy;
    EXPECT_EQ(off->built.summary.fusions, 0) << policy;
    bool found = false;
    for (const auto& n : on->built.nodes) found = found || n.fusion() == c.fusion;
    EXPECT_EQ(found, !apart) << "provenance names the fusion " << c.fusion << " " << policy;
    // The bound the precision implies. fp32: the fused op evaluates the same formula in another
    // order (e.g. x * (1/sqrt(v)) for x / sqrt(v), folded BatchNorm weights): a few fp32 ulps
    // of values |y| <= ~10 -> 1e-4. fp16 / bf16: the unfused engine rounds every intermediate
    // (up to 9 roundings of 2^-11 resp. 2^-8 relative) and the fused one only its output, so
    // they may differ by ~10 half-ulps of the output scale: 2e-2 (fp16), 1.5e-1 (bf16).
    double bound = std::string(policy) == "fp32"   ? 1e-4
                   : std::string(policy) == "fp16" ? 2e-2
                                                   : 1.5e-1;
    EXPECT_LE(MaxAbsDiff(on->y, off->y), bound) << c.name << " " << policy;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fusions, FusionAgreementTest,
    ::testing::Values(
        FusionCase{"layernorm", DecomposedLayerNorm, "layernorm"},
        FusionCase{"layernorm_constant_nodes", DecomposedLayerNormConstantNodes, "layernorm"},
        FusionCase{"gelu", DecomposedGelu, "gelu"},
        FusionCase{"softmax", DecomposedSoftmax, "softmax"},
        FusionCase{"conv_batchnorm", ConvBatchNorm, "conv+batchnorm"},
        FusionCase{"conv_scale", ConvScale, "conv+scale"},
        FusionCase{"batchnorm_scale", BatchNormScale, "batchnorm+scale"},
        FusionCase{"conv_relu", ConvRelu, "conv+Relu"},
        FusionCase{"conv_silu", ConvSilu, "conv+Swish"},
        FusionCase{"conv_scale_constant_nodes", ConvScaleConstantNodes, "conv+scale"},
        FusionCase{"conv_hardswish_written", ConvHardSwishWritten, "conv+HardSwish"},
        FusionCase{"conv_hardsigmoid_mul", ConvHardSigmoidMul, "conv+HardSwish"},
        FusionCase{"conv_residual_relu", ConvResidualRelu, "conv+residual+Relu"},
        FusionCase{"matmul_bias_relu", MatMulBiasRelu, "matmul+bias+Relu"},
        FusionCase{"matmul_identity_bias_relu", MatMulIdentityBiasRelu, "matmul+bias+Relu"},
        FusionCase{"add_layernorm", ResidualAddLayerNorm, "add+layernorm"},
        FusionCase{"attention", Attention, "attention"},
        FusionCase{"attention_3d_batched", BatchedAttention3d, "attention"},
        FusionCase{"attention_query_scaled", AttentionQueryScaled, "attention"},
        FusionCase{"attention_key_from_sequence_major", AttentionKeyFromSequenceMajor,
                   "attention"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(FusionTest, PinnedFp32IsNeverComputedLowerInsideAFusedKernel) {
  onnx::ModelProto m = DecomposedLayerNorm();
  // Everything fp16 except the LayerNorm, pinned fp32.
  auto fused = BuildRun(m, "fp16", {"pattern:layernorm = fp32"}, true);
  ASSERT_TRUE(fused.ok()) << fused.status();
  auto fp32 = BuildRun(m, "fp32", {}, false);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  ASSERT_EQ(fused->built.summary.fusions, 1);
  for (const auto& n : fused->built.nodes) {
    EXPECT_EQ(n.assigned_precision(), "fp32") << n.node_name();
    EXPECT_EQ(n.effective_precision(), "fp32") << n.node_name();
    EXPECT_EQ(n.fusion(), "layernorm") << n.node_name();
  }
  // The whole graph is the pinned LayerNorm, so the fused engine must match the fp32 engine to
  // fp32 accuracy (an fp16 computation anywhere inside would differ by ~1e-3).
  EXPECT_LE(MaxAbsDiff(fused->y, fp32->y), 1e-4);
  // And the kernel itself runs on f32 tensors.
  auto engine = plan::LoadEngineFromBytes(std::make_shared<std::string>(fused->built.blob));
  ASSERT_TRUE(engine.ok());
  int ln_kernels = 0;
  for (const auto& k : (*engine)->metadata.kernels()) {
    if (k.op_type() == "LayerNormalization") {
      ++ln_kernels;
      EXPECT_EQ(k.dtype(), "f32");
      EXPECT_EQ(k.nodes_size(), 11 - 2);  // 9 nodes; exponent and epsilon are initializers here
    }
  }
  EXPECT_EQ(ln_kernels, 1);
}

TEST(FusionTest, FusionThatWouldLowerAPinnedNodeIsRefusedAndLogged) {
  onnx::ModelProto m = ConvBatchNorm();
  auto r = BuildRun(m, "fp16", {"op:BatchNormalization = fp32"}, true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->built.summary.fusions, 0);
  ASSERT_EQ(r->built.summary.fusion_refusals.size(), 1u);
  const std::string& why = r->built.summary.fusion_refusals[0];
  EXPECT_THAT(why, HasSubstr("'/conv'"));
  EXPECT_THAT(why, HasSubstr("'/bn'"));
  EXPECT_THAT(why, HasSubstr("op:BatchNormalization = fp32"));
  for (const auto& n : r->built.nodes) {
    if (n.op_type() == "BatchNormalization") {
      EXPECT_EQ(n.effective_precision(), "fp32");
    }
  }
}

TEST(FusionTest, ScaleFoldRefusedWhenTheShiftIsPinnedHigher) {
  auto r = BuildRun(ConvScale(), "fp16", {"op:Add = fp32"}, true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->built.summary.fusions, 0);
  ASSERT_EQ(r->built.summary.fusion_refusals.size(), 1u);
  const std::string& why = r->built.summary.fusion_refusals[0];
  EXPECT_THAT(why, HasSubstr("conv+scale"));
  EXPECT_THAT(why, HasSubstr("'/scale/add'"));
  EXPECT_THAT(why, HasSubstr("op:Add = fp32 (--rule 1)"));
  for (const auto& n : r->built.nodes) {
    if (n.op_type() == "Add") {
      EXPECT_EQ(n.effective_precision(), "fp32");
    }
  }
}

TEST(FusionTest, MatMulFusionRefusedWhenTheBiasAddIsPinnedHigher) {
  auto r = BuildRun(MatMulBiasRelu(), "bf16", {"op:Add = fp32"}, true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->built.summary.fusions, 0);
  ASSERT_EQ(r->built.summary.fusion_refusals.size(), 1u);
  EXPECT_THAT(r->built.summary.fusion_refusals[0], HasSubstr("'/fc/Add'"));
  EXPECT_THAT(r->built.summary.fusion_refusals[0], HasSubstr("op:Add = fp32 (--rule 1)"));
  for (const auto& n : r->built.nodes) {
    if (n.op_type() == "Add") {
      EXPECT_EQ(n.effective_precision(), "fp32");
    }
  }
}

TEST(FusionTest, NoFuseSelectorsAreHonoured) {
  for (std::vector<std::string> sel :
       {std::vector<std::string>{"op:Softmax"}, {"scope:/softmax/"}, {"pattern:softmax"}}) {
    auto r = BuildRun(DecomposedSoftmax(), "fp32", {}, true, sel);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->built.summary.fusions, 0) << sel[0];
  }
  auto other = BuildRun(DecomposedSoftmax(), "fp32", {}, true, {"scope:/other/"});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->built.summary.fusions, 1);
  auto bad = BuildRun(DecomposedSoftmax(), "fp32", {}, true, {"layer:x"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--no-fuse 'layer:x'"));
}

}  // namespace
}  // namespace kiln::testing
