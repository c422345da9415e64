// The build function: attribute errors surface at build time, naming the node.
#include "engine/builder/builder.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"

namespace kiln::testing {
namespace {

using ::testing::HasSubstr;

TEST(BuilderTest, BadAttributeFailsTheBuildNamingTheNode) {
  onnx::ModelProto m = AddReluMulModel();
  // LRN with size 0: the importer accepts the node, the kernel factory
  // rejects it, and the build must report that instead of leaving it to `kiln run`.
  onnx::NodeProto* n = AddOnnxNode(m.mutable_graph(), "LRN", {"y"}, {"z"}, "bad_lrn");
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name("size");
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(0);
  m.mutable_graph()->mutable_output(0)->set_name("z");
  auto built = builder::BuildEngine(SerializeModel(m), builder::BuildOptions{}, nullptr);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument) << built.status();
  EXPECT_THAT(std::string(built.status().message()), HasSubstr("bad_lrn"));
  EXPECT_THAT(std::string(built.status().message()), HasSubstr("size"));
}

TEST(BuilderTest, ValidModelBuilds) {
  auto built =
      builder::BuildEngine(SerializeModel(AddReluMulModel()), builder::BuildOptions{}, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->summary.source_nodes, 3);
  EXPECT_EQ(built->summary.kernels, 3);
}

TEST(BuilderTest, UnknownPolicyNamesThePresets) {
  builder::BuildOptions opts;
  opts.policy = "fp8";
  auto built = builder::BuildEngine(SerializeModel(AddReluMulModel()), opts, nullptr);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(built.status().message()), HasSubstr("fp32-layernorm"));
}

TEST(BuilderTest, Fp16PolicyRetypesAndKeepsTheInterface) {
  builder::BuildOptions opts;
  opts.policy = "fp16";
  auto built = builder::BuildEngine(SerializeModel(AddReluMulModel()), opts, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->summary.nodes_fp16, 3);
  EXPECT_GT(built->summary.dtype_changes, 0);
  // Input x is converted once; the weight w is stored in fp16; the output y goes back to fp32.
  EXPECT_EQ(built->summary.inserted_conversions, 2);
  EXPECT_EQ(built->summary.converted_weights, 1);
}

// AddReluMulModel with w scaled so that one weight is 2e5, beyond fp16's 65504.
onnx::ModelProto HugeWeightModel() {
  onnx::ModelProto m = AddReluMulModel();
  onnx::TensorProto* w = m.mutable_graph()->mutable_initializer(0);
  w->set_float_data(2, 2e5f);
  return m;
}

TEST(BuilderTest, WeightBeyondFp16RunsItsNodesInFp32WithAWarning) {
  builder::BuildOptions opts;
  opts.policy = "fp16";
  auto built = builder::BuildEngine(SerializeModel(HugeWeightModel()), opts, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  // add and mul read w: both run in fp32 (w stored as fp16 would be Inf); relu stays fp16.
  EXPECT_EQ(built->summary.nodes_fp32, 2);
  EXPECT_EQ(built->summary.nodes_fp16, 1);
  ASSERT_EQ(built->summary.warnings.size(), 2u);
  EXPECT_THAT(built->summary.warnings[0], HasSubstr("[node 'add' (Add)"));
  EXPECT_THAT(built->summary.warnings[0], HasSubstr("weight 'w' (max |x| 2e+05)"));
  EXPECT_THAT(built->summary.warnings[0], HasSubstr("beyond the fp16 range: it runs in fp32"));
  for (const auto& p : built->nodes) {
    if (p.node_name() != "relu") {
      EXPECT_EQ(p.effective_precision(), "fp32") << p.node_name();
      EXPECT_THAT(p.rule(), HasSubstr("beyond the fp16 range")) << p.node_name();
    }
  }
  // bf16 holds 2e5.
  opts.policy = "bf16";
  built = builder::BuildEngine(SerializeModel(HugeWeightModel()), opts, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->summary.nodes_bf16, 3);
  EXPECT_TRUE(built->summary.warnings.empty());
}

TEST(BuilderTest, WeightBeyondFp16UnderAUserRuleFailsUnderObey) {
  builder::BuildOptions opts;
  opts.rules = {"op:Mul = fp16"};
  auto built = builder::BuildEngine(SerializeModel(HugeWeightModel()), opts, nullptr);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(built.status().message()), HasSubstr("[node 'mul' (Mul)"));
  EXPECT_THAT(std::string(built.status().message()), HasSubstr("--constraints prefer"));
  opts.constraints = precision::Constraints::kPrefer;
  built = builder::BuildEngine(SerializeModel(HugeWeightModel()), opts, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->summary.warnings.size(), 1u);
}

}  // namespace
}  // namespace kiln::testing
