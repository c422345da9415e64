// BitCast and TensorScatter through the whole build (import, shape inference, precision,
// kernels, run), and the errors for ONNX dtypes Kiln does not have: they name the type
// ("float6e2m3", "complex64") and the tensor or node, not a number.
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/builder/builder.h"
#include "engine/common/status.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"

namespace kiln::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// An empty model of IR 13 and default-domain opset `opset`.
onnx::ModelProto EmptyModel(int64_t opset) {
  onnx::ModelProto m;
  m.set_ir_version(13);
  m.add_opset_import()->set_version(opset);
  m.mutable_graph()->set_name("g");
  return m;
}

// x: float[4] -> Relu "relu" -> BitCast "bits" (to int32) -> y: int32[4].
onnx::ModelProto ReluBitCastModel() {
  onnx::ModelProto m = EmptyModel(26);
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "x", {4});
  AddOnnxNode(g, "Relu", {"x"}, {"r"}, "relu");
  AddIntAttribute(AddOnnxNode(g, "BitCast", {"r"}, {"y"}, "bits"), "to", onnx::TensorProto::INT32);
  AddTensorValueInfo(g->mutable_output(), "y", {4}, onnx::TensorProto::INT32);
  return m;
}

absl::StatusOr<std::vector<ir::Tensor>> BuildAndRun(const onnx::ModelProto& m,
                                                    builder::BuildOptions opts,
                                                    const std::vector<ir::Tensor>& inputs,
                                                    builder::BuildResult* result = nullptr) {
  opts.in_memory = true;
  ASSIGN_OR_RETURN(builder::BuildResult built,
                   builder::BuildEngine(SerializeModel(m), opts, nullptr));
  ASSIGN_OR_RETURN(auto session, runtime::Session::Create(built.engine));
  ASSIGN_OR_RETURN(std::vector<ir::Tensor> out, session->Run(inputs));
  if (result != nullptr) *result = std::move(built);
  return out;
}

ir::Tensor Floats(std::vector<int64_t> dims, const std::vector<float>& v) {
  ir::Tensor t = *ir::Tensor::Allocate(DataType::kF32, std::move(dims));
  std::memcpy(t.raw_data(), v.data(), v.size() * sizeof(float));
  return t;
}

std::vector<uint32_t> Bits32(const ir::Tensor& t) {
  const uint32_t* p = t.data<uint32_t>();
  return std::vector<uint32_t>(p, p + t.num_elements());
}

TEST(BitCastBuildTest, Fp32RunsTheExactBits) {
  auto out = BuildAndRun(ReluBitCastModel(), {}, {Floats({4}, {0.1f, -3, 1, 2.5f})});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].dtype(), DataType::kI32);
  // binary32 0.1 = 0x3DCCCCCD, Relu(-3) = 0, 1 = 0x3F800000, 2.5 = 0x40200000.
  EXPECT_THAT(Bits32((*out)[0]), ElementsAre(0x3DCCCCCDu, 0u, 0x3F800000u, 0x40200000u));
}

TEST(BitCastBuildTest, Fp16PolicyNeverLowersIt) {
  builder::BuildOptions opts;
  opts.policy = "fp16";
  builder::BuildResult built;
  auto out = BuildAndRun(ReluBitCastModel(), opts, {Floats({4}, {0.1f, -3, 1, 2.5f})}, &built);
  ASSERT_TRUE(out.ok()) << out.status();
  // Relu runs in fp16; BitCast reads its input at the authored float (the fp16 Relu output
  // widened exactly) and writes int32: fp16(0.1) = 0.0999755859375 = 0x3DCCC000 as a float.
  EXPECT_EQ((*out)[0].dtype(), DataType::kI32);
  EXPECT_THAT(Bits32((*out)[0]), ElementsAre(0x3DCCC000u, 0u, 0x3F800000u, 0x40200000u));
  ASSERT_EQ(built.nodes.size(), 2u);
  EXPECT_EQ(built.nodes[0].effective_precision(), "fp16");
  EXPECT_EQ(built.nodes[1].node_name(), "bits");
  // No precision at all (as for integer nodes): nothing a policy could lower.
  EXPECT_EQ(built.nodes[1].effective_precision(), "");
  EXPECT_THAT(built.nodes[1].rule(), HasSubstr("not floating"));
}

TEST(BitCastBuildTest, WeakTypingKeepsAnAuthoredHalfInput) {
  // x: float16[2] -> BitCast to int16. Weak typing re-types every floating slot to the policy's
  // dtype, but not BitCast's: fp32 bits would not fit an int16.
  onnx::ModelProto m = EmptyModel(26);
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "x", {2}, onnx::TensorProto::FLOAT16);
  AddIntAttribute(AddOnnxNode(g, "BitCast", {"x"}, {"y"}, "bits"), "to", onnx::TensorProto::INT16);
  AddTensorValueInfo(g->mutable_output(), "y", {2}, onnx::TensorProto::INT16);
  ir::Tensor x = *ir::Tensor::Allocate(DataType::kF16, {2});
  x.data<uint16_t>()[0] = 0x3C00;  // 1.0
  x.data<uint16_t>()[1] = 0xC000;  // -2.0
  for (const char* policy : {"fp32", "fp16", "bf16"}) {
    builder::BuildOptions opts;
    opts.policy = policy;
    opts.typing = precision::Typing::kWeak;
    auto out = BuildAndRun(m, opts, {x});
    ASSERT_TRUE(out.ok()) << policy << ": " << out.status();
    const int16_t* y = (*out)[0].data<int16_t>();
    EXPECT_EQ(y[0], 0x3C00) << policy;
    EXPECT_EQ(y[1], static_cast<int16_t>(0xC000)) << policy;
  }
}

TEST(BitCastBuildTest, WidthMismatchFailsTheBuildNamingTheNode) {
  onnx::ModelProto m = ReluBitCastModel();
  m.mutable_graph()->mutable_node(1)->mutable_attribute(0)->set_i(onnx::TensorProto::INT64);
  m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::INT64);
  auto built = builder::BuildEngine(SerializeModel(m), {}, nullptr);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument) << built.status();
  EXPECT_THAT(built.status().message(), HasSubstr("[node 'bits' (BitCast)"));
  EXPECT_THAT(built.status().message(), HasSubstr("float (32 bits) as int64 (64 bits)"));
}

TEST(UnsupportedDtypeTest, NamesTheOnnxTypeAndTheTensorOrNode) {
  // A graph input of float6e2m3 (27).
  onnx::ModelProto in = ReluBitCastModel();
  in.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(27);
  auto a = builder::BuildEngine(SerializeModel(in), {}, nullptr);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(a.status().message(), HasSubstr("'x' has unsupported dtype float6e2m3"));
  // BitCast to float6e3m2 (28): the node and the attribute.
  onnx::ModelProto to = ReluBitCastModel();
  to.mutable_graph()->mutable_node(1)->mutable_attribute(0)->set_i(28);
  to.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->clear_elem_type();
  auto b = builder::BuildEngine(SerializeModel(to), {}, nullptr);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(
      b.status().message(),
      HasSubstr("[node 'bits' (BitCast) #1] unsupported dtype float6e3m2: attribute 'to' = 28"));
  // Cast to complex64 (14).
  onnx::ModelProto cast = EmptyModel(26);
  onnx::GraphProto* g = cast.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "x", {4});
  AddIntAttribute(AddOnnxNode(g, "Cast", {"x"}, {"y"}, "to_c64"), "to", 14);
  g->add_output()->set_name("y");
  auto c = builder::BuildEngine(SerializeModel(cast), {}, nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(c.status().message(), HasSubstr("[node 'to_c64' (Cast)"));
  EXPECT_THAT(c.status().message(), HasSubstr("unsupported dtype complex64"));
  // An initializer of float6e2m3 (27): the tensor is named.
  onnx::ModelProto init = ReluBitCastModel();
  onnx::TensorProto* w = init.mutable_graph()->add_initializer();
  w->set_name("w2");
  w->set_data_type(27);
  w->add_dims(1);
  w->add_int32_data(1);
  auto d = builder::BuildEngine(SerializeModel(init), {}, nullptr);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(d.status().message(), HasSubstr("w2"));
  EXPECT_THAT(d.status().message(), HasSubstr("unsupported dtype float6e2m3"));
}

// past: float[2, 4, 2], update: float[2, 1, 2], write_indices: int64[2] -> TensorScatter "kv".
onnx::ModelProto KvModel() {
  onnx::ModelProto m = EmptyModel(24);
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorValueInfo(g->mutable_input(), "past", {2, 4, 2});
  AddTensorValueInfo(g->mutable_input(), "update", {2, 1, 2});
  AddTensorValueInfo(g->mutable_input(), "wi", {2}, onnx::TensorProto::INT64);
  AddOnnxNode(g, "TensorScatter", {"past", "update", "wi"}, {"present"}, "kv");
  g->add_output()->set_name("present");
  return m;
}

TEST(TensorScatterBuildTest, InfersTheShapeAndRunsUnderFp16) {
  std::vector<float> past(16);
  for (int i = 0; i < 16; ++i) past[i] = 0.5f * i;
  ir::Tensor wi = *ir::Tensor::Allocate(DataType::kI64, {2});
  wi.data<int64_t>()[0] = 3;
  wi.data<int64_t>()[1] = 0;
  const std::vector<ir::Tensor> inputs = {Floats({2, 4, 2}, past), Floats({2, 1, 2}, {9, 8, 7, 6}),
                                          wi};
  for (const char* policy : {"", "fp16", "bf16"}) {
    builder::BuildOptions opts;
    opts.policy = policy;
    auto out = BuildAndRun(KvModel(), opts, inputs);
    ASSERT_TRUE(out.ok()) << policy << ": " << out.status();
    const ir::Tensor& y = (*out)[0];
    EXPECT_EQ(y.dtype(), DataType::kF32);
    EXPECT_THAT(y.dims(), ElementsAre(2, 4, 2));
    // Halves of small integers are exact in fp16 and bf16: every policy gives the same values.
    std::vector<float> want = past;
    want[6] = 9, want[7] = 8;  // batch 0, position 3
    want[8] = 7, want[9] = 6;  // batch 1, position 0
    EXPECT_EQ(std::vector<float>(y.data<float>(), y.data<float>() + 16), want) << policy;
  }
}

TEST(TensorScatterBuildTest, StaticShapeErrorsAtBuildTime) {
  onnx::ModelProto axis0 = KvModel();
  AddIntAttribute(axis0.mutable_graph()->mutable_node(0), "axis", 0);
  auto a = builder::BuildEngine(SerializeModel(axis0), {}, nullptr);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("[node 'kv' (TensorScatter)"));
  EXPECT_THAT(a.status().message(), HasSubstr("batch axis"));
  onnx::ModelProto longer = KvModel();
  longer.mutable_graph()
      ->mutable_input(1)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(1)
      ->set_dim_value(5);
  auto b = builder::BuildEngine(SerializeModel(longer), {}, nullptr);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("along the sequence axis 1"));
  onnx::ModelProto wi3 = KvModel();
  wi3.mutable_graph()
      ->mutable_input(2)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_value(3);
  auto c = builder::BuildEngine(SerializeModel(wi3), {}, nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("write_indices [3] must be 1-D of the batch size"));
}

}  // namespace
}  // namespace kiln::testing
