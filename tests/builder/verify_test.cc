// The build's check of the kernel graph before it is written (builder/verify.h): hand-built
// kernel graphs broken the ways a pass can break them fail naming the node, with Internal for
// what only Kiln can have done; sound graphs pass.
#include "engine/builder/verify.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/kernels/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::builder {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kRows = 2, kCols = 8;

// A kernel graph under construction: values and nodes of one graph, the live list in the order
// added, and the kernel each node gets from the registry (the reference one: cpu features 0).
class KernelGraph {
 public:
  ir::Value* Input(const std::string& name, DataType t, std::vector<int64_t> dims) {
    ir::Value* v = Value(name, t, std::move(dims));
    v->is_graph_input = true;
    g_.inputs().push_back(v);
    return v;
  }
  ir::Value* Constant(const std::string& name, std::vector<int64_t> dims, float fill) {
    ir::Value* v = Value(name, DataType::kF32, dims);
    auto t = ir::Tensor::Allocate(DataType::kF32, dims);
    EXPECT_TRUE(t.ok()) << t.status();
    for (int64_t i = 0; i < t->num_elements(); ++i) t->data<float>()[i] = fill;
    v->constant = *std::move(t);
    return v;
  }
  ir::Value* Value(const std::string& name, DataType t, std::vector<int64_t> dims) {
    auto v = g_.AddValue(name);
    EXPECT_TRUE(v.ok()) << v.status();
    (*v)->dtype = t;
    (*v)->shape = ir::Shape::Of(dims);
    return *v;
  }
  // A node as imported (its own source), live unless `live` is false.
  ir::Node* Node(ir::OpType op, const std::string& name, std::vector<ir::Value*> in,
                 std::vector<ir::Value*> out, bool live = true) {
    ir::Node* n = g_.AddNode(op, name);
    n->sources = {n->id};
    n->since_version = 17;
    n->inputs = std::move(in);
    n->outputs = std::move(out);
    g_.RebuildEdges();
    if (live) live_.push_back(n);
    return n;
  }
  void Output(ir::Value* v) {
    v->is_graph_output = true;
    g_.outputs().push_back(v);
  }
  // Chooses every node's kernel (before a test breaks the graph, as the build chooses them
  // before its later passes).
  void SelectKernels() {
    defs_.assign(g_.nodes().size(), nullptr);
    for (const auto& n : g_.nodes()) {
      auto def = kernels::Registry::Default().Find(*n, 0);
      ASSERT_TRUE(def.ok()) << def.status();
      defs_[n->id] = *def;
    }
  }
  absl::Status Verify() { return VerifyKernelGraph(g_, live_, defs_); }

  ir::Graph& graph() { return g_; }
  std::vector<ir::Node*>& live() { return live_; }
  std::vector<const kernels::KernelDef*>& defs() { return defs_; }

 private:
  ir::Graph g_;
  std::vector<ir::Node*> live_;
  std::vector<const kernels::KernelDef*> defs_;
};

// x -> LayerNormalization(x, gamma, beta) -> y, fused from a decomposed LayerNorm (sources 0..8),
// gamma and beta computed by Constant nodes as Paddle2ONNX writes them.
struct FusedLayerNorm {
  KernelGraph k;
  ir::Node* gamma_node;
  ir::Node* ln;
};

std::unique_ptr<FusedLayerNorm> MakeFusedLayerNorm() {
  auto f = std::make_unique<FusedLayerNorm>();
  KernelGraph& k = f->k;
  ir::Value* x = k.Input("x", DataType::kF32, {kRows, kCols});
  ir::Value* gamma = k.Value("layer_norm_0.w_0", DataType::kF32, {kCols});
  ir::Value* beta = k.Value("layer_norm_0.b_0", DataType::kF32, {kCols});
  ir::Value* y = k.Value("y", DataType::kF32, {kRows, kCols});
  for (ir::Value* v : {gamma, beta}) {
    ir::Node* c = k.Node(ir::OpType::kConstant, absl::StrCat("Constant_", v->name), {}, {v});
    auto t = ir::Tensor::Allocate(DataType::kF32, {kCols});
    EXPECT_TRUE(t.ok()) << t.status();
    ir::Attribute value;
    value.type = ir::Attribute::Type::kTensor;
    value.t = *std::move(t);
    c->attrs["value"] = std::move(value);
    if (v == gamma) f->gamma_node = c;
  }
  f->ln =
      k.Node(ir::OpType::kLayerNormalization, "p2o.Add.234/fused_layernorm", {x, gamma, beta}, {y});
  f->ln->sources = {2, 3, 4, 5, 6, 7, 8, 9, 10};
  f->ln->fusion = "layernorm";
  f->ln->attrs["epsilon"] = ir::Attribute::Float(1e-5f);
  k.Output(y);
  k.SelectKernels();
  return f;
}

TEST(VerifyKernelGraphTest, SoundFusedLayerNormPasses) {
  auto f = MakeFusedLayerNorm();
  EXPECT_TRUE(f->k.Verify().ok()) << f->k.Verify();
}

// The failure of issue 28: the fusion absorbed gamma's Constant node, so the fused LayerNorm
// reads a value nothing computes; `kiln run` then failed with "input 1 is required but missing".
TEST(VerifyKernelGraphTest, InputOfARemovedNodeIsInternalNamingTheNode) {
  auto f = MakeFusedLayerNorm();
  auto& live = f->k.live();
  live.erase(std::find(live.begin(), live.end(), f->gamma_node));
  absl::Status s = f->k.Verify();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), HasSubstr(f->ln->Label()));
  EXPECT_THAT(s.message(), HasSubstr("input 1 'layer_norm_0.w_0'"));
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(f->gamma_node->Label(), ", which is not in")));
}

TEST(VerifyKernelGraphTest, ValueComputedByNoNodeIsInternal) {
  auto f = MakeFusedLayerNorm();
  auto& live = f->k.live();
  live.erase(std::find(live.begin(), live.end(), f->gamma_node));
  f->k.graph().RemoveNodes({true, false, false});  // the Constant node gone from the graph too
  f->k.defs().erase(f->k.defs().begin());          // defs stay indexed by (renumbered) node id
  absl::Status s = f->k.Verify();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), HasSubstr("[node 'p2o.Add.234/fused_layernorm' (LayerNormalization)"));
  EXPECT_THAT(s.message(), HasSubstr("computed by no node of the engine"));
}

TEST(VerifyKernelGraphTest, MissingRequiredInputOfAFusedNodeIsInternal) {
  auto f = MakeFusedLayerNorm();
  f->ln->inputs[1] = nullptr;  // LayerNormalization-17 requires its scale
  absl::Status s = f->k.Verify();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), HasSubstr(f->ln->Label()));
  EXPECT_THAT(s.message(), HasSubstr("input 1 is required but missing"));
}

TEST(VerifyKernelGraphTest, MissingRequiredInputOfAKilnOpIsInternal) {
  KernelGraph k;
  ir::Value* a = k.Input("a", DataType::kF32, {kRows, kCols});
  ir::Value* b = k.Input("b", DataType::kF32, {kRows, kCols});
  ir::Value* y = k.Value("y", DataType::kF32, {kRows, kCols});
  ir::Value* gamma = k.Constant("gamma", {kCols}, 1.0f);
  ir::Node* n = k.Node(ir::OpType::kAddLayerNorm, "ln/fused_add", {a, b, gamma}, {y});
  n->since_version = 1;
  n->fusion = "add+layernorm";
  k.Output(y);
  k.SelectKernels();
  ASSERT_TRUE(k.Verify().ok()) << k.Verify();
  n->inputs[2] = nullptr;  // AddLayerNorm reads its scale unconditionally
  absl::Status s = k.Verify();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), HasSubstr("[node 'ln/fused_add' (AddLayerNorm)"));
  EXPECT_THAT(s.message(), HasSubstr("input 2 is required"));
}

// The importer keeps an empty input name where the model writes one; a required input so left
// out is the model's error, found before the engine is written.
TEST(VerifyKernelGraphTest, RequiredInputTheModelLeavesOutIsInvalidArgument) {
  KernelGraph k;
  ir::Value* x = k.Input("x", DataType::kF32, {kRows, kCols});
  ir::Value* y = k.Value("y", DataType::kF32, {kRows, kCols});
  ir::Node* n = k.Node(ir::OpType::kAdd, "add", {x, nullptr}, {y});
  k.Output(y);
  k.SelectKernels();
  absl::Status s = k.Verify();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(n->Label()));
  EXPECT_THAT(s.message(), HasSubstr("input 1 is required by Add-"));
}

TEST(VerifyKernelGraphTest, InputComputedLaterIsInternal) {
  KernelGraph k;
  ir::Value* x = k.Input("x", DataType::kF32, {kRows, kCols});
  ir::Value* a = k.Value("a", DataType::kF32, {kRows, kCols});
  ir::Value* y = k.Value("y", DataType::kF32, {kRows, kCols});
  ir::Node* relu = k.Node(ir::OpType::kRelu, "relu", {x}, {a});
  ir::Node* sig = k.Node(ir::OpType::kSigmoid, "sigmoid", {a}, {y});
  k.Output(y);
  k.SelectKernels();
  k.live() = {sig, relu};
  absl::Status s = k.Verify();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), HasSubstr(sig->Label()));
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("computed later, by ", relu->Label())));
}

// Lowering retyped a node after its kernel was chosen, to a dtype no kernel of the op takes.
TEST(VerifyKernelGraphTest, DtypeWithoutKernelIsInternal) {
  KernelGraph k;
  ir::Value* x = k.Input("x", DataType::kF32, {kRows, kCols});
  ir::Value* y = k.Value("y", DataType::kF32, {kRows, kCols});
  ir::Node* n = k.Node(ir::OpType::kSqrt, "sqrt", {x}, {y});
  k.Output(y);
  k.SelectKernels();
  ASSERT_TRUE(k.Verify().ok()) << k.Verify();
  x->dtype = y->dtype = DataType::kBool;
  ASSERT_FALSE(kernels::Registry::Default().Find(*n, 0).ok()) << "no Sqrt kernel for bool";
  absl::Status s = k.Verify();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), HasSubstr(n->Label()));
  EXPECT_THAT(s.message(), HasSubstr("its dtype is bool (no kernel for it)"));
}

TEST(VerifyKernelGraphTest, NodeWithoutKernelIsInternal) {
  KernelGraph k;
  ir::Value* x = k.Input("x", DataType::kF32, {kRows, kCols});
  ir::Value* y = k.Value("y", DataType::kF32, {kRows, kCols});
  ir::Node* n = k.Node(ir::OpType::kRelu, "relu", {x}, {y});
  k.Output(y);
  k.SelectKernels();
  k.defs()[n->id] = nullptr;
  absl::Status s = k.Verify();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(n->Label(), " has no kernel")));
}

TEST(VerifyKernelGraphTest, GraphOutputComputedByNoKernelIsInternal) {
  KernelGraph k;
  ir::Value* x = k.Input("x", DataType::kF32, {kRows, kCols});
  ir::Value* a = k.Value("a", DataType::kF32, {kRows, kCols});
  ir::Value* y = k.Value("y", DataType::kF32, {kRows, kCols});
  k.Node(ir::OpType::kRelu, "relu", {x}, {a});
  k.Node(ir::OpType::kSigmoid, "sigmoid", {x}, {y}, /*live=*/false);
  k.Output(a);
  k.Output(y);
  k.SelectKernels();
  absl::Status s = k.Verify();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), HasSubstr("graph output #1 'y' is computed by no kernel"));
}

// Static shapes: the kernel itself runs on them. A model whose MatMul cannot multiply its static
// operands fails the build (the model's error), not its first run.
TEST(VerifyKernelGraphTest, KernelRefusingTheStaticShapesFailsTheBuild) {
  KernelGraph k;
  ir::Value* x = k.Input("x", DataType::kF32, {kRows, kCols});
  ir::Value* w = k.Constant("w", {kCols + 1, 4}, 0.5f);
  ir::Value* y = k.Value("y", DataType::kF32, {kRows, 4});
  ir::Node* n = k.Node(ir::OpType::kMatMul, "matmul", {x, w}, {y});
  k.Output(y);
  k.SelectKernels();
  absl::Status s = k.Verify();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(n->Label()));
  EXPECT_THAT(s.message(), HasSubstr("(inputs (float[2,8], float[9,4]))"));
  // The same made by a fusion is Kiln's error.
  n->fusion = "matmul+bias";
  s = k.Verify();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
}

// The graph records a shape the kernel does not give: the memory plan would size the tensor's
// slot from the wrong one.
TEST(VerifyKernelGraphTest, OutputShapeTheKernelDoesNotGiveIsInternal) {
  KernelGraph k;
  ir::Value* x = k.Input("x", DataType::kF32, {kRows, kCols});
  ir::Value* y = k.Value("y", DataType::kF32, {kRows, kCols + 1});
  ir::Node* n = k.Node(ir::OpType::kRelu, "relu", {x}, {y});
  k.Output(y);
  k.SelectKernels();
  absl::Status s = k.Verify();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_THAT(s.message(), HasSubstr(n->Label()));
  EXPECT_THAT(s.message(), HasSubstr("output 0 'y' is float[2,8] but the graph says float[2,9]"));
}

// Where a shape is not static the kernel is not run (its checks happen at run time): an
// unknown-shaped input passes whatever the recorded output shape.
TEST(VerifyKernelGraphTest, DynamicShapesAreNotProbed) {
  KernelGraph k;
  ir::Value* x = k.Input("x", DataType::kF32, {kRows, kCols});
  x->shape = ir::Shape::Unknown();
  ir::Value* y = k.Value("y", DataType::kF32, {kRows, kCols + 1});
  k.Node(ir::OpType::kRelu, "relu", {x}, {y});
  k.Output(y);
  k.SelectKernels();
  EXPECT_TRUE(k.Verify().ok()) << k.Verify();
}

}  // namespace
}  // namespace kiln::builder
