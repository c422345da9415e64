// Model-local functions inlined at import (engine/import/functions.h): models built in C++ for
// each rule (binding, renaming, attribute references and defaults, nesting, recursion, omitted
// inputs and outputs, overloads, subgraphs, opsets), and the committed exporter models of
// tests/models/functions built and run against ONNX Runtime's outputs.
#include "engine/import/functions.h"

#include <unistd.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/builder/builder.h"
#include "engine/import/onnx_importer.h"
#include "engine/import/tensor_proto.h"
#include "engine/ir/graph.h"
#include "engine/plan/engine_blob.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "google/protobuf/unknown_field_set.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "tests/testing/onnx_models.h"

namespace kiln::import {
namespace {

using ::kiln::testing::AddOnnxNode;
using ::kiln::testing::AddTensorValueInfo;
using ::kiln::testing::SerializeModel;
using ::testing::HasSubstr;

// An IR-10 model importing the default domain at `opset` and the function domain "custom".
onnx::ModelProto Model(int opset = 18) {
  onnx::ModelProto m;
  m.set_ir_version(10);
  auto* imp = m.add_opset_import();
  imp->set_version(opset);
  imp = m.add_opset_import();
  imp->set_domain("custom");
  imp->set_version(1);
  m.mutable_graph()->set_name("functions");
  return m;
}

onnx::FunctionProto* AddFunction(onnx::ModelProto& m, const std::string& name,
                                 const std::vector<std::string>& inputs,
                                 const std::vector<std::string>& outputs, int opset = 18) {
  onnx::FunctionProto* f = m.add_functions();
  f->set_name(name);
  f->set_domain("custom");
  for (const auto& s : inputs) f->add_input(s);
  for (const auto& s : outputs) f->add_output(s);
  auto* imp = f->add_opset_import();
  imp->set_version(opset);
  imp = f->add_opset_import();
  imp->set_domain("custom");
  imp->set_version(1);
  return f;
}

onnx::NodeProto* AddBodyNode(onnx::FunctionProto* f, const std::string& op,
                             const std::vector<std::string>& inputs,
                             const std::vector<std::string>& outputs, const std::string& name,
                             const std::string& domain = "") {
  onnx::NodeProto* n = f->add_node();
  n->set_op_type(op);
  n->set_name(name);
  n->set_domain(domain);
  for (const auto& s : inputs) n->add_input(s);
  for (const auto& s : outputs) n->add_output(s);
  return n;
}

onnx::NodeProto* AddCall(onnx::GraphProto* g, const std::string& fn,
                         const std::vector<std::string>& inputs,
                         const std::vector<std::string>& outputs, const std::string& name) {
  onnx::NodeProto* n = AddOnnxNode(g, fn, inputs, outputs, name);
  n->set_domain("custom");
  return n;
}

onnx::AttributeProto FloatAttribute(const std::string& name, float v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(v);
  return a;
}

// An attribute `name` of `n` whose value is the function's attribute `ref`.
void AddRef(onnx::NodeProto* n, const std::string& name, const std::string& ref) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_ref_attr_name(ref);
  a->set_type(onnx::AttributeProto::FLOAT);
}

// FunctionProto.attribute_proto (field 11) and the overload fields (13, NodeProto 8) are newer
// than Debian's onnx 1.12 protobuf: written as unknown fields, as a parser of a newer model
// keeps them.
void AddAttributeDefault(onnx::FunctionProto* f, const onnx::AttributeProto& a) {
  f->GetReflection()->MutableUnknownFields(f)->AddLengthDelimited(11, a.SerializeAsString());
}
void SetOverload(google::protobuf::Message* m, int field, const std::string& overload) {
  m->GetReflection()->MutableUnknownFields(m)->AddLengthDelimited(field, overload);
}

void Io(onnx::ModelProto& m, const std::vector<std::string>& inputs,
        const std::vector<std::string>& outputs, const std::vector<int64_t>& dims = {2, 3}) {
  for (const auto& s : inputs) AddTensorValueInfo(m.mutable_graph()->mutable_input(), s, dims);
  for (const auto& s : outputs) AddTensorValueInfo(m.mutable_graph()->mutable_output(), s, dims);
}

const ir::Node* FindNode(const ir::Graph& g, const std::string& name) {
  for (const auto& n : g.nodes()) {
    if (n->name == name) return n.get();
  }
  return nullptr;
}

ir::Tensor Floats(std::vector<int64_t> dims, const std::vector<float>& values) {
  auto t = ir::Tensor::Allocate(DataType::kF32, std::move(dims));
  EXPECT_TRUE(t.ok()) << t.status();
  for (size_t i = 0; i < values.size(); ++i) t->data<float>()[i] = values[i];
  return *t;
}

std::vector<float> FloatsOf(const ir::Tensor& t) {
  std::vector<float> out(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) out[i] = ir::ElementAsDouble(t, i);
  return out;
}

absl::StatusOr<std::vector<ir::Tensor>> BuildAndRun(const std::string& bytes,
                                                    const std::vector<ir::Tensor>& inputs) {
  auto built = builder::BuildEngine(bytes, builder::BuildOptions{}, nullptr);
  if (!built.ok()) return built.status();
  auto engine = plan::LoadEngineFromBytes(std::make_shared<std::string>(built->blob));
  if (!engine.ok()) return engine.status();
  auto session = runtime::Session::Create(std::shared_ptr<plan::Engine>(std::move(*engine)));
  if (!session.ok()) return session.status();
  return (*session)->Run(inputs);
}

const std::vector<float> kX = {-3, -1, 0, 1, 2, 4};
const std::vector<float> kW = {1, 1, 1, -1, -1, -1};

// custom.AddRelu(a, b) = Relu(a + b), called as "block".
onnx::ModelProto AddReluCallModel() {
  onnx::ModelProto m = Model();
  onnx::FunctionProto* f = AddFunction(m, "AddRelu", {"a", "b"}, {"y"});
  AddBodyNode(f, "Add", {"a", "b"}, {"t"}, "add");
  AddBodyNode(f, "Relu", {"t"}, {"y"}, "");
  Io(m, {"x", "w"}, {"out"});
  AddCall(m.mutable_graph(), "AddRelu", {"x", "w"}, {"out"}, "block");
  return m;
}

TEST(FunctionsTest, SimpleCallIsInlinedWithProvenance) {
  onnx::ModelProto m = AddReluCallModel();
  auto g = ImportModel(SerializeModel(m), {});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ((*g)->nodes().size(), 2u);
  const ir::Node* add = FindNode(**g, "block/add");
  const ir::Node* relu = FindNode(**g, "block/Relu_1");  // unnamed: "<op>_<index in body>"
  ASSERT_NE(add, nullptr);
  ASSERT_NE(relu, nullptr);
  EXPECT_EQ(add->inputs[0]->name, "x");
  EXPECT_EQ(add->inputs[1]->name, "w");
  EXPECT_EQ(add->outputs[0]->name, "block/t");
  EXPECT_EQ(relu->outputs[0]->name, "out");
  auto y = BuildAndRun(SerializeModel(m), {Floats({2, 3}, kX), Floats({2, 3}, kW)});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(FloatsOf((*y)[0]), (std::vector<float>{0, 0, 1, 0, 1, 3}));
}

TEST(FunctionsTest, InternalNamesNeverCollideWithGraphNames) {
  onnx::ModelProto m = AddReluCallModel();
  // The graph already has a value "block/t": the inlined one takes "block/t_1".
  m.mutable_graph()->mutable_node(0)->set_output(0, "mid");
  AddOnnxNode(m.mutable_graph(), "Identity", {"x"}, {"block/t"}, "pre");
  AddOnnxNode(m.mutable_graph(), "Add", {"mid", "block/t"}, {"out"}, "post");
  auto g = ImportModel(SerializeModel(m), {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(FindNode(**g, "block/add")->outputs[0]->name, "block/t_1");
}

// custom.Leaky(x) = LeakyRelu(x, alpha = @slope); `with_default` gives slope a default of 0.5.
onnx::ModelProto LeakyModel(bool with_default) {
  onnx::ModelProto m = Model();
  onnx::FunctionProto* f = AddFunction(m, "Leaky", {"x"}, {"y"});
  AddRef(AddBodyNode(f, "LeakyRelu", {"x"}, {"y"}, "act"), "alpha", "slope");
  if (with_default) {
    AddAttributeDefault(f, FloatAttribute("slope", 0.5f));
  } else {
    f->add_attribute("slope");
  }
  Io(m, {"x"}, {"y1", "y2"});
  *AddCall(m.mutable_graph(), "Leaky", {"x"}, {"y1"}, "set")->add_attribute() =
      FloatAttribute("slope", 0.125f);
  AddCall(m.mutable_graph(), "Leaky", {"x"}, {"y2"}, "unset");
  return m;
}

TEST(FunctionsTest, AttributeReferenceFromCallOrDefault) {
  auto g = ImportModel(SerializeModel(LeakyModel(true)), {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FLOAT_EQ(FindNode(**g, "set/act")->GetFloat("alpha", -1), 0.125f);
  EXPECT_FLOAT_EQ(FindNode(**g, "unset/act")->GetFloat("alpha", -1), 0.5f);  // the default
  auto y = BuildAndRun(SerializeModel(LeakyModel(true)), {Floats({2, 3}, kX)});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(FloatsOf((*y)[0]), (std::vector<float>{-0.375f, -0.125f, 0, 1, 2, 4}));
  EXPECT_EQ(FloatsOf((*y)[1]), (std::vector<float>{-1.5f, -0.5f, 0, 1, 2, 4}));
}

TEST(FunctionsTest, AttributeReferenceWithoutDefaultLeavesTheOpDefault) {
  auto g = ImportModel(SerializeModel(LeakyModel(false)), {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FLOAT_EQ(FindNode(**g, "set/act")->GetFloat("alpha", -1), 0.125f);
  // Not set, no default: the attribute is absent, so LeakyRelu's own default (0.01) applies.
  EXPECT_FALSE(FindNode(**g, "unset/act")->has_attr("alpha"));
}

TEST(FunctionsTest, UndeclaredCallAttributeIsRefused) {
  onnx::ModelProto m = LeakyModel(false);
  *m.mutable_graph()->mutable_node(1)->add_attribute() = FloatAttribute("gain", 2);
  auto g = ImportModel(SerializeModel(m), {});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("[node 'unset' (Leaky)]"));
  EXPECT_THAT(g.status().message(), HasSubstr("'gain', which the function does not declare"));
}

TEST(FunctionsTest, NestedCallsAndAttributePassThrough) {
  // custom.Outer(x) = Leaky(x, slope = @s) + x, where Leaky is as above with default 0.5.
  onnx::ModelProto m = LeakyModel(true);
  m.mutable_graph()->clear_node();
  m.mutable_graph()->clear_output();
  onnx::FunctionProto* outer = AddFunction(m, "Outer", {"x"}, {"y"});
  outer->add_attribute("s");
  AddRef(AddBodyNode(outer, "Leaky", {"x"}, {"l"}, "inner", "custom"), "slope", "s");
  AddBodyNode(outer, "Add", {"l", "x"}, {"y"}, "sum");
  *AddCall(m.mutable_graph(), "Outer", {"x"}, {"out"}, "outer")->add_attribute() =
      FloatAttribute("s", 0.25f);
  Io(m, {}, {"out"});
  auto g = ImportModel(SerializeModel(m), {});
  ASSERT_TRUE(g.ok()) << g.status();
  const ir::Node* act = FindNode(**g, "outer/inner/act");
  ASSERT_NE(act, nullptr);
  EXPECT_FLOAT_EQ(act->GetFloat("alpha", -1), 0.25f);
  EXPECT_EQ(act->outputs[0]->name, "outer/l");  // the inner call's output binds to Outer's value
  auto y = BuildAndRun(SerializeModel(m), {Floats({2, 3}, kX)});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(FloatsOf((*y)[0]), (std::vector<float>{-3.75f, -1.25f, 0, 2, 4, 8}));
}

TEST(FunctionsTest, RecursionIsRefused) {
  onnx::ModelProto m = Model();
  AddBodyNode(AddFunction(m, "Ping", {"x"}, {"y"}), "Pong", {"x"}, {"y"}, "p", "custom");
  AddBodyNode(AddFunction(m, "Pong", {"x"}, {"y"}), "Ping", {"x"}, {"y"}, "q", "custom");
  Io(m, {"x"}, {"y"});
  AddCall(m.mutable_graph(), "Ping", {"x"}, {"y"}, "start");
  auto g = ImportModel(SerializeModel(m), {});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("[node 'start/p/q' (Ping)]"));
  EXPECT_THAT(g.status().message(),
              HasSubstr("recursively (function 'custom.Ping' -> function 'custom.Pong' -> "
                        "function 'custom.Ping')"));
}

TEST(FunctionsTest, UnknownFunctionIsAnUnsupportedOp) {
  onnx::ModelProto m = AddReluCallModel();
  m.mutable_graph()->mutable_node(0)->set_op_type("AddTanh");
  auto g = ImportModel(SerializeModel(m), {});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(g.status().message(), HasSubstr("[node 'block' (AddTanh) #0]"));
  EXPECT_THAT(g.status().message(), HasSubstr("op AddTanh of domain 'custom'"));
}

TEST(FunctionsTest, OmittedOptionalInputAndOutput) {
  // custom.ClipBoth(x, lo, hi) = (Clip(x, lo, hi), Neg(x)); the call omits lo and the second
  // output.
  onnx::ModelProto m = Model();
  onnx::FunctionProto* f = AddFunction(m, "ClipBoth", {"x", "lo", "hi"}, {"c", "n"});
  AddBodyNode(f, "Clip", {"x", "lo", "hi"}, {"c"}, "clip");
  AddBodyNode(f, "Neg", {"x"}, {"n"}, "neg");
  Io(m, {"x"}, {"out"});
  auto* hi = m.mutable_graph()->add_initializer();
  hi->set_name("hi");
  hi->set_data_type(onnx::TensorProto::FLOAT);
  hi->add_float_data(1.5f);
  AddCall(m.mutable_graph(), "ClipBoth", {"x", "", "hi"}, {"out"}, "call");
  auto g = ImportModel(SerializeModel(m), {});
  ASSERT_TRUE(g.ok()) << g.status();
  const ir::Node* clip = FindNode(**g, "call/clip");
  ASSERT_EQ(clip->inputs.size(), 3u);
  EXPECT_EQ(clip->inputs[1], nullptr);
  EXPECT_EQ(clip->inputs[2]->name, "hi");
  EXPECT_EQ(FindNode(**g, "call/neg")->outputs[0]->name, "call/n");  // internal now
  auto y = BuildAndRun(SerializeModel(m), {Floats({2, 3}, kX)});
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->size(), 1u);
  EXPECT_EQ(FloatsOf((*y)[0]), (std::vector<float>{-3, -1, 0, 1, 1.5f, 1.5f}));
}

TEST(FunctionsTest, OverloadPicksTheFunction) {
  onnx::ModelProto m = Model();
  onnx::FunctionProto* neg = AddFunction(m, "Act", {"x"}, {"y"});
  AddBodyNode(neg, "Neg", {"x"}, {"y"}, "neg");
  SetOverload(neg, 13, "negate");
  onnx::FunctionProto* relu = AddFunction(m, "Act", {"x"}, {"y"});
  AddBodyNode(relu, "Relu", {"x"}, {"y"}, "relu");
  SetOverload(relu, 13, "rectify");
  Io(m, {"x"}, {"out"});
  SetOverload(AddCall(m.mutable_graph(), "Act", {"x"}, {"out"}, "call"), 8, "rectify");
  auto g = ImportModel(SerializeModel(m), {});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ((*g)->nodes().size(), 1u);
  EXPECT_EQ((*g)->nodes()[0]->name, "call/relu");
  // A call naming no overload matches none of them: an unsupported op.
  m.mutable_graph()->mutable_node(0)->mutable_unknown_fields()->Clear();
  EXPECT_EQ(ImportModel(SerializeModel(m), {}).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(FunctionsTest, SubgraphInsideTheBodySeesRenamedValues) {
  // custom.Pick(c, x) = If(c, then: x + x, else: Neg(x)), the branches using the function's x.
  onnx::ModelProto m = Model();
  onnx::FunctionProto* f = AddFunction(m, "Pick", {"c", "x"}, {"y"});
  AddBodyNode(f, "Identity", {"x"}, {"xi"}, "copy");
  onnx::NodeProto* iff = AddBodyNode(f, "If", {"c"}, {"y"}, "if");
  onnx::GraphProto* then_g = testing::AddSubgraph(iff, "then_branch");
  AddOnnxNode(then_g, "Add", {"xi", "xi"}, {"twice"}, "double");
  AddTensorValueInfo(then_g->mutable_output(), "twice", {2, 3});
  onnx::GraphProto* else_g = testing::AddSubgraph(iff, "else_branch");
  AddOnnxNode(else_g, "Neg", {"xi"}, {"neg"}, "negate");
  AddTensorValueInfo(else_g->mutable_output(), "neg", {2, 3});
  Io(m, {"x"}, {"out"});
  AddTensorValueInfo(m.mutable_graph()->mutable_input(), "c", {}, onnx::TensorProto::BOOL);
  AddCall(m.mutable_graph(), "Pick", {"c", "x"}, {"out"}, "pick");
  ir::Tensor c = *ir::Tensor::Allocate(DataType::kBool, {});
  c.data<bool>()[0] = true;
  auto y = BuildAndRun(SerializeModel(m), {Floats({2, 3}, kX), c});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(FloatsOf((*y)[0]), (std::vector<float>{-6, -2, 0, 2, 4, 8}));
  c.data<bool>()[0] = false;
  y = BuildAndRun(SerializeModel(m), {Floats({2, 3}, kX), c});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(FloatsOf((*y)[0]), (std::vector<float>{3, 1, 0, -1, -2, -4}));
}

TEST(FunctionsTest, CallInsideAnIfBranchOfTheGraph) {
  // The main graph's If calls custom.AddRelu in its then-branch: inlined there, under the branch.
  onnx::ModelProto m = Model();
  onnx::FunctionProto* f = AddFunction(m, "AddRelu", {"a", "b"}, {"y"});
  AddBodyNode(f, "Add", {"a", "b"}, {"t"}, "add");
  AddBodyNode(f, "Relu", {"t"}, {"y"}, "relu");
  Io(m, {"x", "w"}, {"out"});
  AddTensorValueInfo(m.mutable_graph()->mutable_input(), "c", {}, onnx::TensorProto::BOOL);
  onnx::NodeProto* iff = AddOnnxNode(m.mutable_graph(), "If", {"c"}, {"out"}, "if");
  onnx::GraphProto* then_g = testing::AddSubgraph(iff, "then_branch");
  AddCall(then_g, "AddRelu", {"x", "w"}, {"r"}, "call");
  AddTensorValueInfo(then_g->mutable_output(), "r", {2, 3});
  onnx::GraphProto* else_g = testing::AddSubgraph(iff, "else_branch");
  AddOnnxNode(else_g, "Neg", {"x"}, {"n"}, "neg");
  AddTensorValueInfo(else_g->mutable_output(), "n", {2, 3});
  ir::Tensor c = *ir::Tensor::Allocate(DataType::kBool, {});
  c.data<bool>()[0] = true;
  auto y = BuildAndRun(SerializeModel(m), {Floats({2, 3}, kX), Floats({2, 3}, kW), c});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(FloatsOf((*y)[0]), (std::vector<float>{0, 0, 1, 0, 1, 3}));
  auto g = ImportModel(SerializeModel(m), {});
  ASSERT_TRUE(g.ok()) << g.status();
  const ir::Attribute* branch = (*g)->nodes()[0]->attr("then_branch");
  ASSERT_NE(branch, nullptr);
  ASSERT_NE(FindNode(*branch->g, "if/then_branch/call/add"), nullptr);
}

TEST(FunctionsTest, FunctionOpsetMustMeanTheSameOpVersions) {
  // Relu is Relu-14 at opsets 14 and 18: accepted. ReduceSum is ReduceSum-11 at opset 12 but
  // ReduceSum-13 at 18 (axes attribute -> input): refused, naming both versions.
  onnx::ModelProto ok = Model(18);
  AddBodyNode(AddFunction(ok, "R", {"x"}, {"y"}, 14), "Relu", {"x"}, {"y"}, "relu");
  Io(ok, {"x"}, {"out"});
  AddCall(ok.mutable_graph(), "R", {"x"}, {"out"}, "call");
  EXPECT_TRUE(ImportModel(SerializeModel(ok), {}).ok());

  onnx::ModelProto bad = Model(18);
  AddBodyNode(AddFunction(bad, "S", {"x"}, {"y"}, 12), "ReduceSum", {"x"}, {"y"}, "sum");
  Io(bad, {"x"}, {"out"});
  AddCall(bad.mutable_graph(), "S", {"x"}, {"out"}, "call");
  auto g = ImportModel(SerializeModel(bad), {});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(g.status().message(), HasSubstr("function 'custom.S' imports default-domain opset "
                                              "12 but the model imports 18"));
  EXPECT_THAT(g.status().message(), HasSubstr("ReduceSum-11 at the function's opset but "
                                              "ReduceSum-13 at the model's"));
}

TEST(FunctionsTest, BodyUsingAnUndefinedValueIsRefused) {
  onnx::ModelProto m = AddReluCallModel();
  m.mutable_functions(0)->mutable_node(0)->set_input(1, "elsewhere");
  auto g = ImportModel(SerializeModel(m), {});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(),
              HasSubstr("uses 'elsewhere', which is neither a function input nor defined"));
}

TEST(FunctionsTest, ExponentialNestingHitsTheLimit) {
  // F0 calls F1 twice, ..., F24 calls F25 twice: 2^25 calls, beyond kMaxInlinedNodes.
  onnx::ModelProto m = Model();
  for (int i = 0; i < 25; ++i) {
    onnx::FunctionProto* f = AddFunction(m, absl::StrCat("F", i), {"x"}, {"y"});
    const std::string callee = absl::StrCat("F", i + 1);
    AddBodyNode(f, callee, {"x"}, {"a"}, "a", "custom");
    AddBodyNode(f, callee, {"a"}, {"y"}, "b", "custom");
  }
  AddBodyNode(AddFunction(m, "F25", {"x"}, {"y"}), "Relu", {"x"}, {"y"}, "relu");
  Io(m, {"x"}, {"out"});
  AddCall(m.mutable_graph(), "F0", {"x"}, {"out"}, "root");
  auto g = ImportModel(SerializeModel(m), {});
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("(the limit)"));
}

TEST(FunctionsTest, DeepCallChainIsRefused) {
  // F0 calls F1, ..., F9999 calls F10000: refused at the nesting limit, without recursing 10,000
  // deep.
  onnx::ModelProto m = Model();
  for (int i = 0; i < 10000; ++i) {
    AddBodyNode(AddFunction(m, absl::StrCat("F", i), {"x"}, {"y"}), absl::StrCat("F", i + 1), {"x"},
                {"y"}, "c", "custom");
  }
  AddBodyNode(AddFunction(m, "F10000", {"x"}, {"y"}), "Relu", {"x"}, {"y"}, "relu");
  Io(m, {"x"}, {"out"});
  AddCall(m.mutable_graph(), "F0", {"x"}, {"out"}, "root");
  auto g = ImportModel(SerializeModel(m), {});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("nests function calls deeper than 64 levels"));
}

// ---- Real exporters' output (tests/models/functions, made by make_models.py) against ONNX
// Runtime's outputs.

std::string ModelDir(const std::string& name) {
  return absl::StrCat(KILN_SOURCE_DIR, "/tests/models/functions/", name);
}

ir::Tensor ReadTensor(const std::string& path) {
  auto bytes = ReadFile(path, int64_t{1} << 30);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  auto t = ParseTensorProto(*bytes, path);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

class ExportedFunctionModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExportedFunctionModelTest, MatchesOnnxRuntime) {
  const std::string dir = ModelDir(GetParam());
  auto bytes = ReadFile(dir + "/model.onnx", int64_t{1} << 30);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(*bytes));
  ASSERT_GT(proto.functions_size(), 0) << "the model keeps no functions: nothing is tested";
  std::vector<ir::Tensor> inputs;
  for (int i = 0;; ++i) {
    std::string p = absl::StrCat(dir, "/test_data_set_0/input_", i, ".pb");
    if (access(p.c_str(), R_OK) != 0) break;
    inputs.push_back(ReadTensor(p));
  }
  auto outputs = BuildAndRun(*bytes, inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  ir::Tensor want = ReadTensor(dir + "/test_data_set_0/output_0.pb");
  ASSERT_EQ(outputs->size(), 1u);
  const ir::Tensor& got = (*outputs)[0];
  ASSERT_EQ(got.dims(), want.dims());
  // Both runtimes compute in fp32 on outputs of normal scale (|y| <= ~3) with dot products of
  // at most 16 terms, summed in different orders: a few fp32 ulps apart (~1e-6), never 1e-5.
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    EXPECT_NEAR(ir::ElementAsDouble(got, i), ir::ElementAsDouble(want, i), 1e-5) << "at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ExportedFunctionModelTest,
                         ::testing::Values("torchscript_modules", "onnxscript_nested"));

}  // namespace
}  // namespace kiln::import
