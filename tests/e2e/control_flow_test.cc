// If, Loop and Scan end to end: models with subgraphs built in C++, compiled by the builder
// (each subgraph its own engine inside the blob), loaded from the blob and run. The values are
// small integers in float, so every result is exact in fp32.
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/builder/builder.h"
#include "engine/ir/attribute.h"
#include "engine/plan/engine_blob.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"
#include "tests/testing/run_model.h"

namespace kiln {
namespace {

using testing::AddFloatInitializer;
using testing::AddOnnxNode;
using testing::AddSubgraph;
using testing::AddTensorValueInfo;
using testing::BuildAndRun;
using testing::Floats;
using ::testing::HasSubstr;
using testing::NewModel;
using testing::Scalar;
using testing::Values;

// A ValueInfo whose negative dims are the symbol `symbol` (known only at run time).
void AddDynamicValueInfo(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list,
                         const std::string& name, const std::vector<int64_t>& dims,
                         const std::string& symbol = "n") {
  onnx::ValueInfoProto* vi = AddTensorValueInfo(list, name, dims);
  auto* shape = vi->mutable_type()->mutable_tensor_type()->mutable_shape();
  for (auto& d : *shape->mutable_dim()) {
    if (d.dim_value() < 0) d.set_dim_param(symbol);
  }
}

void AddIntAttr(onnx::NodeProto* node, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = node->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

// y = If(c) then (x + h) else (x * h), with h = x + w computed outside: the branches capture
// both an outer activation (h) and a graph input (x).
onnx::ModelProto IfModel() {
  onnx::ModelProto m = NewModel();
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "c", {}, onnx::TensorProto::BOOL);
  AddTensorValueInfo(g->mutable_input(), "x", {3});
  AddFloatInitializer(g, "w", {3}, {1, 2, 3});
  AddOnnxNode(g, "Add", {"x", "w"}, {"h"}, "outer_add");
  onnx::NodeProto* iff = AddOnnxNode(g, "If", {"c"}, {"y"}, "If_0");
  onnx::GraphProto* then_g = AddSubgraph(iff, "then_branch");
  AddOnnxNode(then_g, "Add", {"x", "h"}, {"t"}, "add");
  AddTensorValueInfo(then_g->mutable_output(), "t", {3});
  onnx::GraphProto* else_g = AddSubgraph(iff, "else_branch");
  AddOnnxNode(else_g, "Mul", {"x", "h"}, {"e"}, "mul");
  AddTensorValueInfo(else_g->mutable_output(), "e", {3});
  AddTensorValueInfo(g->mutable_output(), "y", {3});
  return m;
}

TEST(ControlFlow, IfRunsTheBranchTakenWithCapturedValues) {
  const ir::Tensor x = Floats({3}, {1, 2, 3});  // h = {2, 4, 6}
  auto then_out = BuildAndRun(IfModel(), {Scalar(DataType::kBool, true), x});
  ASSERT_TRUE(then_out.ok()) << then_out.status();
  EXPECT_THAT(Values((*then_out)[0]), ::testing::ElementsAre(3, 6, 9));
  auto else_out = BuildAndRun(IfModel(), {Scalar(DataType::kBool, false), x});
  ASSERT_TRUE(else_out.ok()) << else_out.status();
  EXPECT_THAT(Values((*else_out)[0]), ::testing::ElementsAre(2, 8, 18));
}

TEST(ControlFlow, RulesReachSubgraphNodesByQualifiedName) {
  // A rule only a subgraph node matches has matched; the policy applies inside the branch
  // (fp16 holds these small integers exactly).
  builder::BuildOptions opts;
  opts.rules = {"name:If_0/then_branch/* = fp16", "op:Mul = fp16"};
  auto out = BuildAndRun(IfModel(), {Scalar(DataType::kBool, false), Floats({3}, {1, 2, 3})}, opts);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Values((*out)[0]), ::testing::ElementsAre(2, 8, 18));
  auto built = builder::BuildEngine(testing::SerializeModel(IfModel()), opts, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->summary.subgraphs, 2);
  // Provenance (kiln explain, kiln inspect) names the subgraph nodes as the rules do.
  std::map<std::string, std::string> precision_of;
  for (const auto& p : built->subgraph_nodes) {
    precision_of[p.node_name()] = p.assigned_precision();
  }
  EXPECT_EQ(precision_of["If_0/then_branch/add"], "fp16");
  EXPECT_EQ(precision_of["If_0/else_branch/mul"], "fp16");
  EXPECT_EQ(built->nodes.size(), 2u);  // outer_add, If_0
  // A rule that matches nothing anywhere still fails under obey.
  opts.rules = {"op:Tanh = fp16"};
  auto none = builder::BuildEngine(testing::SerializeModel(IfModel()), opts, nullptr);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("matches no node"));
}

// Wraps `inner` (a model whose graph maps x -> y) into `levels` nested Ifs, each branch the next
// level (then) or an Identity (else).
onnx::ModelProto NestedIfModel(int levels) {
  onnx::ModelProto m = NewModel();
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "c", {}, onnx::TensorProto::BOOL);
  AddTensorValueInfo(g->mutable_input(), "x", {2});
  onnx::GraphProto* at = g;
  std::string out = "y";
  for (int level = 0; level < levels; ++level) {
    onnx::NodeProto* iff = AddOnnxNode(at, "If", {"c"}, {out}, absl::StrCat("if", level));
    if (at != g) AddTensorValueInfo(at->mutable_output(), out, {2});
    onnx::GraphProto* else_g = AddSubgraph(iff, "else_branch");
    AddOnnxNode(else_g, "Identity", {"x"}, {absl::StrCat("e", level)}, "id");
    AddTensorValueInfo(else_g->mutable_output(), absl::StrCat("e", level), {2});
    at = AddSubgraph(iff, "then_branch");
    out = absl::StrCat("t", level);
  }
  AddOnnxNode(at, "Neg", {"x"}, {out}, "neg");
  AddTensorValueInfo(at->mutable_output(), out, {2});
  AddTensorValueInfo(g->mutable_output(), "y", {2});
  return m;
}

TEST(ControlFlow, SubgraphsNestUpToTheLimitAndNoFurther) {
  auto deep = BuildAndRun(NestedIfModel(ir::kMaxSubgraphDepth),
                          {Scalar(DataType::kBool, true), Floats({2}, {1, -2})});
  ASSERT_TRUE(deep.ok()) << deep.status();
  EXPECT_THAT(Values((*deep)[0]), ::testing::ElementsAre(-1, 2));
  auto too_deep = builder::BuildEngine(
      testing::SerializeModel(NestedIfModel(ir::kMaxSubgraphDepth + 1)), {}, nullptr);
  ASSERT_FALSE(too_deep.ok());
  EXPECT_EQ(too_deep.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_deep.status().message(),
              HasSubstr(absl::StrCat("deeper than ", ir::kMaxSubgraphDepth)));
}

// s_final, scan = Loop(M, cond) with body: s = s + x * i (x captured), scan output s; the body
// stops when s exceeds `stop` (cond output = s < stop).
onnx::ModelProto LoopModel(bool with_cond) {
  onnx::ModelProto m = NewModel();
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "M", {}, onnx::TensorProto::INT64);
  AddTensorValueInfo(g->mutable_input(), "x", {2});
  AddTensorValueInfo(g->mutable_input(), "s0", {2});
  AddFloatInitializer(g, "stop", {}, {100});
  onnx::NodeProto* loop =
      AddOnnxNode(g, "Loop", {"M", with_cond ? "c0" : "", "s0"}, {"s_final", "s_all"}, "loop");
  if (with_cond) {
    AddTensorValueInfo(g->mutable_input(), "c0", {}, onnx::TensorProto::BOOL);
  }
  onnx::GraphProto* body = AddSubgraph(loop, "body");
  AddTensorValueInfo(body->mutable_input(), "i", {}, onnx::TensorProto::INT64);
  AddTensorValueInfo(body->mutable_input(), "c_in", {}, onnx::TensorProto::BOOL);
  AddTensorValueInfo(body->mutable_input(), "s", {2});
  onnx::NodeProto* cast = AddOnnxNode(body, "Cast", {"i"}, {"fi"}, "cast");
  AddIntAttr(cast, "to", onnx::TensorProto::FLOAT);
  AddOnnxNode(body, "Mul", {"x", "fi"}, {"xi"}, "mul");
  AddOnnxNode(body, "Add", {"s", "xi"}, {"s_next"}, "add");
  AddOnnxNode(body, "ReduceMax", {"s_next"}, {"smax"}, "max");
  AddOnnxNode(body, "Less", {"smax", "stop"}, {"c_out"}, "less");
  AddOnnxNode(body, "Identity", {"s_next"}, {"s_scan"}, "scan_copy");
  AddTensorValueInfo(body->mutable_output(), "c_out", {}, onnx::TensorProto::BOOL);
  AddTensorValueInfo(body->mutable_output(), "s_next", {2});
  AddTensorValueInfo(body->mutable_output(), "s_scan", {2});
  AddTensorValueInfo(g->mutable_output(), "s_final", {2});
  AddDynamicValueInfo(g->mutable_output(), "s_all", {-1, 2});
  return m;
}

TEST(ControlFlow, LoopCarriesStateAndStacksScanOutputs) {
  // s after iteration i: x * (0 + 1 + ... + i); x = {1, 10}.
  auto out = BuildAndRun(LoopModel(false), {Scalar(DataType::kI64, int64_t{4}),
                                            Floats({2}, {1, 10}), Floats({2}, {0, 0})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Values((*out)[0]), ::testing::ElementsAre(6, 60));
  EXPECT_EQ((*out)[1].dims(), (std::vector<int64_t>{4, 2}));
  EXPECT_THAT(Values((*out)[1]), ::testing::ElementsAre(0, 0, 1, 10, 3, 30, 6, 60));
}

TEST(ControlFlow, LoopStopsOnItsCondition) {
  // A while-loop as exporters write it (M = INT64_MAX): max(s) = 10 * i(i+1)/2 passes 100 at
  // i = 4 (s = {10, 100}), whose cond ends the loop after 5 iterations.
  auto out = BuildAndRun(
      LoopModel(true), {Scalar(DataType::kI64, std::numeric_limits<int64_t>::max()),
                        Floats({2}, {1, 10}), Floats({2}, {0, 0}), Scalar(DataType::kBool, true)});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Values((*out)[0]), ::testing::ElementsAre(10, 100));
  EXPECT_EQ((*out)[1].dims(), (std::vector<int64_t>{5, 2}));
}

TEST(ControlFlow, LoopRefusesNegativeAndAbsurdTripCounts) {
  auto negative = BuildAndRun(LoopModel(false), {Scalar(DataType::kI64, int64_t{-3}),
                                                 Floats({2}, {1, 10}), Floats({2}, {0, 0})});
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.status().message(), HasSubstr("[node 'loop' (Loop)"));
  EXPECT_THAT(negative.status().message(), HasSubstr("negative: -3"));
  auto absurd = BuildAndRun(LoopModel(false), {Scalar(DataType::kI64, int64_t{1} << 50),
                                               Floats({2}, {1, 10}), Floats({2}, {0, 0})});
  ASSERT_FALSE(absurd.ok());
  EXPECT_EQ(absurd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(absurd.status().message(), HasSubstr("over the limit"));
}

// Scan-9+: running sum over the rows of x (and of a second scan input z), state [2].
onnx::ModelProto ScanModel() {
  onnx::ModelProto m = NewModel();
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "init", {2});
  AddDynamicValueInfo(g->mutable_input(), "x", {-1, 2});
  // Its own length symbol: the lengths are compared by the Scan, not by the input binding.
  AddDynamicValueInfo(g->mutable_input(), "z", {-1, 2}, "m");
  onnx::NodeProto* scan = AddOnnxNode(g, "Scan", {"init", "x", "z"}, {"sum", "sums"}, "scan");
  AddIntAttr(scan, "num_scan_inputs", 2);
  onnx::GraphProto* body = AddSubgraph(scan, "body");
  AddTensorValueInfo(body->mutable_input(), "s", {2});
  AddTensorValueInfo(body->mutable_input(), "row", {2});
  AddTensorValueInfo(body->mutable_input(), "zrow", {2});
  AddOnnxNode(body, "Add", {"s", "row"}, {"s1"}, "add");
  AddOnnxNode(body, "Add", {"s1", "zrow"}, {"s_next"}, "add2");
  AddOnnxNode(body, "Identity", {"s_next"}, {"s_out"}, "copy");
  AddTensorValueInfo(body->mutable_output(), "s_next", {2});
  AddTensorValueInfo(body->mutable_output(), "s_out", {2});
  AddTensorValueInfo(g->mutable_output(), "sum", {2});
  AddDynamicValueInfo(g->mutable_output(), "sums", {-1, 2});
  return m;
}

TEST(ControlFlow, ScanSumsRows) {
  auto out = BuildAndRun(ScanModel(), {Floats({2}, {0, 0}), Floats({3, 2}, {1, 2, 3, 4, 5, 6}),
                                       Floats({3, 2}, {0, 0, 0, 0, 10, 10})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(Values((*out)[0]), ::testing::ElementsAre(19, 22));
  EXPECT_THAT(Values((*out)[1]), ::testing::ElementsAre(1, 2, 4, 6, 19, 22));
}

TEST(ControlFlow, ScanRefusesScanInputsOfDifferentLengths) {
  auto out = BuildAndRun(ScanModel(), {Floats({2}, {0, 0}), Floats({3, 2}, {1, 2, 3, 4, 5, 6}),
                                       Floats({2, 2}, {0, 0, 0, 0})});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("[node 'scan' (Scan)"));
  EXPECT_THAT(out.status().message(), HasSubstr("must be as long"));
}

TEST(ControlFlow, ReducedPrecisionPoliciesBuildAndRunSubgraphs) {
  for (const char* policy : {"fp16", "bf16", "fp32-layernorm", "bf16-layernorm", "fp16-safe"}) {
    builder::BuildOptions opts;
    opts.policy = policy;
    // Small integers: exact in fp16 and bf16 (8 significant bits hold 0..60).
    auto out = BuildAndRun(
        LoopModel(false),
        {Scalar(DataType::kI64, int64_t{4}), Floats({2}, {1, 10}), Floats({2}, {0, 0})}, opts);
    ASSERT_TRUE(out.ok()) << policy << ": " << out.status();
    EXPECT_THAT(Values((*out)[0]), ::testing::ElementsAre(6, 60)) << policy;
  }
}

}  // namespace
}  // namespace kiln
