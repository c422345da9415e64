// Statically invalid ops with constant operands (hardening issue, defect 10f): a model whose
// Reshape, TopK, Resize or Expand must fail whatever its inputs, or whose static shapes describe
// a tensor or an arena no machine can hold, fails its build with an error naming the node,
// instead of building fine and failing at every run. The same ops with valid operands build.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/builder/builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"

namespace kiln {
namespace {

using ::kiln::testing::AddFloatInitializer;
using ::kiln::testing::AddInt64Initializer;
using ::kiln::testing::AddIntAttribute;
using ::kiln::testing::AddOnnxNode;
using ::kiln::testing::AddTensorValueInfo;
using ::kiln::testing::SerializeModel;
using ::testing::HasSubstr;

// An empty opset-`opset` model with one float input "x" of `dims`.
onnx::ModelProto ModelWithInput(const std::vector<int64_t>& dims, int64_t opset = 21) {
  onnx::ModelProto m;
  m.set_ir_version(10);
  m.set_producer_name("kiln-tests");
  auto* imp = m.add_opset_import();
  imp->set_domain("");
  imp->set_version(opset);
  m.mutable_graph()->set_name("static_shape_errors");
  AddTensorValueInfo(m.mutable_graph()->mutable_input(), "x", dims);
  return m;
}

// The graph output "y" (float, shape left to inference).
void AddOutput(onnx::GraphProto* g, const std::string& name = "y") {
  onnx::ValueInfoProto* v = g->add_output();
  v->set_name(name);
  v->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
}

absl::Status Build(const onnx::ModelProto& m) {
  return builder::BuildEngine(SerializeModel(m), {}, nullptr).status();
}

void ExpectInvalid(const absl::Status& st, const std::vector<std::string>& parts) {
  ASSERT_FALSE(st.ok()) << "the build succeeded";
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  for (const auto& p : parts) EXPECT_THAT(st.message(), HasSubstr(p)) << st;
}

onnx::ModelProto ReshapeModel(const std::vector<int64_t>& shape) {
  onnx::ModelProto m = ModelWithInput({2, 3});
  AddInt64Initializer(m.mutable_graph(), "shape", shape);
  AddOnnxNode(m.mutable_graph(), "Reshape", {"x", "shape"}, {"y"}, "reshape");
  AddOutput(m.mutable_graph());
  return m;
}

TEST(StaticShapeErrorsTest, Reshape) {
  ExpectInvalid(Build(ReshapeModel({-5, 4})), {"[node 'reshape' (Reshape)", "-5"});
  ExpectInvalid(Build(ReshapeModel({-1, -1})), {"'reshape'", "more than one -1"});
  ExpectInvalid(Build(ReshapeModel({4, 2})), {"'reshape'", "[2,3]", "[4,2]"});
  ExpectInvalid(Build(ReshapeModel({-1, 4})), {"'reshape'", "6 elements", "[-1,4]"});
  ExpectInvalid(Build(ReshapeModel({2, 3, 0})), {"'reshape'", "copies dim 2"});
  for (const auto& ok :
       std::vector<std::vector<int64_t>>{{3, 2}, {-1, 3}, {0, -1}, {6}, {1, -1, 1}}) {
    EXPECT_TRUE(Build(ReshapeModel(ok)).ok()) << Build(ReshapeModel(ok));
  }
}

onnx::ModelProto TopKModel(int64_t k, int64_t axis) {
  onnx::ModelProto m = ModelWithInput({2, 4});
  AddInt64Initializer(m.mutable_graph(), "k", {k});
  onnx::NodeProto* n = AddOnnxNode(m.mutable_graph(), "TopK", {"x", "k"}, {"y", "indices"}, "topk");
  AddIntAttribute(n, "axis", axis);
  AddOutput(m.mutable_graph());
  onnx::ValueInfoProto* idx = m.mutable_graph()->add_output();
  idx->set_name("indices");
  idx->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
  return m;
}

TEST(StaticShapeErrorsTest, TopK) {
  ExpectInvalid(Build(TopKModel(10, 1)), {"[node 'topk' (TopK)", "k = 10", "size 4"});
  ExpectInvalid(Build(TopKModel(3, 0)), {"'topk'", "k = 3", "size 2"});
  ExpectInvalid(Build(TopKModel(-1, 1)), {"'topk'", "negative"});
  ExpectInvalid(Build(TopKModel(1, 2)), {"'topk'", "axis 2"});
  EXPECT_TRUE(Build(TopKModel(4, 1)).ok());
  EXPECT_TRUE(Build(TopKModel(2, -2)).ok());
  EXPECT_TRUE(Build(TopKModel(0, 1)).ok());
}

onnx::ModelProto ResizeModel(const std::vector<float>& scales) {
  onnx::ModelProto m = ModelWithInput({1, 1, 2, 2});
  AddFloatInitializer(m.mutable_graph(), "scales", {static_cast<int64_t>(scales.size())}, scales);
  AddOnnxNode(m.mutable_graph(), "Resize", {"x", "", "scales"}, {"y"}, "resize");
  AddOutput(m.mutable_graph());
  return m;
}

TEST(StaticShapeErrorsTest, Resize) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  ExpectInvalid(Build(ResizeModel({1, 1, 0, 2})), {"[node 'resize' (Resize)", "scales", "0"});
  ExpectInvalid(Build(ResizeModel({1, 1, nan, 2})), {"'resize'", "nan"});
  ExpectInvalid(Build(ResizeModel({1, 1, 2, inf})), {"'resize'", "inf"});
  ExpectInvalid(Build(ResizeModel({1, 1, -2, 2})), {"'resize'", "-2"});
  ExpectInvalid(Build(ResizeModel({1, 2, 2})), {"'resize'", "3 values for 4 axes"});
  // 2 x 2 scaled by 1e10 each way: 4e20 elements.
  ExpectInvalid(Build(ResizeModel({1, 1, 1e10f, 1e10f})), {"'resize'", "limit"});
  EXPECT_TRUE(Build(ResizeModel({1, 1, 2, 2})).ok());
  EXPECT_TRUE(Build(ResizeModel({1, 1, 0.5f, 1.5f})).ok());
  // Sizes instead of scales.
  onnx::ModelProto m = ModelWithInput({1, 1, 2, 2});
  AddInt64Initializer(m.mutable_graph(), "sizes", {1, 1, -4, 4});
  AddOnnxNode(m.mutable_graph(), "Resize", {"x", "", "", "sizes"}, {"y"}, "resize_sizes");
  AddOutput(m.mutable_graph());
  ExpectInvalid(Build(m), {"'resize_sizes'", "sizes must be >= 0"});
}

onnx::ModelProto ExpandModel(const std::vector<int64_t>& x_dims,
                             const std::vector<int64_t>& shape) {
  onnx::ModelProto m = ModelWithInput(x_dims);
  AddInt64Initializer(m.mutable_graph(), "shape", shape);
  AddOnnxNode(m.mutable_graph(), "Expand", {"x", "shape"}, {"y"}, "expand");
  AddOutput(m.mutable_graph());
  return m;
}

TEST(StaticShapeErrorsTest, Expand) {
  ExpectInvalid(Build(ExpandModel({1}, {1000000000000000000})),
                {"[node 'expand' (Expand)", "1e+18 elements", "limit"});
  ExpectInvalid(Build(ExpandModel({3}, {2, 4})), {"'expand'", "cannot expand [3] to [2,4]"});
  ExpectInvalid(Build(ExpandModel({3}, {-2, 3})), {"'expand'", "negative"});
  EXPECT_TRUE(Build(ExpandModel({3}, {2, 3})).ok());
  EXPECT_TRUE(Build(ExpandModel({2, 1}, {2, 5})).ok());
  EXPECT_TRUE(Build(ExpandModel({2, 3}, {1})).ok());
}

// Any static tensor over 2^40 bytes, whatever op makes it, and a graph input declared so.
TEST(StaticShapeErrorsTest, TensorsOverTheSizeLimit) {
  onnx::ModelProto m = ModelWithInput({1});
  AddInt64Initializer(m.mutable_graph(), "dims", {int64_t{1} << 30, int64_t{1} << 30});
  AddOnnxNode(m.mutable_graph(), "ConstantOfShape", {"dims"}, {"big"}, "fill");
  AddOnnxNode(m.mutable_graph(), "Add", {"x", "big"}, {"y"}, "add");
  AddOutput(m.mutable_graph());
  ExpectInvalid(Build(m), {"[node 'fill' (ConstantOfShape)", "'big'", "limit"});

  // 2^62 elements times 4 bytes overflows int64.
  ExpectInvalid(Build(ExpandModel({1}, {int64_t{1} << 31, int64_t{1} << 31})), {"'expand'"});

  onnx::ModelProto in = ModelWithInput({int64_t{1} << 20, int64_t{1} << 20, 1024});
  AddOnnxNode(in.mutable_graph(), "Relu", {"x"}, {"y"}, "relu");
  AddOutput(in.mutable_graph());
  ExpectInvalid(Build(in), {"graph input 'x'", "limit"});
}

// Tensors each within the limit whose arena is not: three activations of 2^39 bytes (512 GiB)
// live at once. Nothing is allocated at build time (no constant to fold).
TEST(StaticShapeErrorsTest, ArenaOverTheLimit) {
  onnx::ModelProto m = ModelWithInput({int64_t{1} << 37});
  AddOnnxNode(m.mutable_graph(), "Relu", {"x"}, {"a"}, "relu");
  AddOnnxNode(m.mutable_graph(), "Neg", {"x"}, {"b"}, "neg");
  AddOnnxNode(m.mutable_graph(), "Abs", {"x"}, {"c"}, "abs");
  AddOnnxNode(m.mutable_graph(), "Sum", {"a", "b", "c"}, {"y"}, "sum");
  AddOutput(m.mutable_graph());
  builder::BuildOptions opts;
  opts.fusion.enabled = false;  // three separate kernels, three live activations
  absl::Status st = builder::BuildEngine(SerializeModel(m), opts, nullptr).status();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_THAT(st.message(), HasSubstr("arena")) << st;
}

}  // namespace
}  // namespace kiln
