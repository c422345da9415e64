// Building is linear in the model size: a 10,000-node model imports, builds and runs well
// inside the ctest timeout (no wall-clock assertion: machines are shared and noisy).
#include "absl/strings/str_cat.h"
#include "engine/builder/builder.h"
#include "engine/plan/engine_blob.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace kiln {
namespace {

// x -> [Relu -> Add(bias) -> Neg -> Mul(scale)] x 2500 = 10,000 nodes, with a side branch every
// few nodes so values have real fan-out.
std::string MakeModel(int groups) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("scale");
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(16);
  auto* c = g->add_initializer();
  c->set_name("c");
  c->set_data_type(1);
  c->add_dims(16);
  for (int i = 0; i < 16; ++i) c->add_float_data(0.5f);
  std::string prev = "x";
  int id = 0;
  auto node = [&](const char* op, std::vector<std::string> ins) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(absl::StrCat("/layer", id / 4, "/", op, "_", id));
    for (auto& s : ins) n->add_input(s);
    std::string out = absl::StrCat("t", id++);
    n->add_output(out);
    return out;
  };
  for (int i = 0; i < groups; ++i) {
    std::string a = node("Relu", {prev});
    std::string b = node("Add", {a, "c"});
    std::string d = node("Neg", {b});
    prev = node("Mul", {d, i % 3 == 0 ? a : std::string("c")});
  }
  auto* out = g->add_output();
  out->set_name(prev);
  out->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  out->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(16);
  return m.SerializeAsString();
}

TEST(ScaleTest, TenThousandNodesBuildAndRun) {
  std::string model = MakeModel(2500);
  auto built = builder::BuildEngine(model, builder::BuildOptions{}, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(built->summary.source_nodes, 10000);
  EXPECT_EQ(built->summary.kernels, 10000);
  // Liveness reuse: a handful of 64-byte slots, not one per activation.
  EXPECT_LE(built->summary.arena_bytes, 8u * 64);
  EXPECT_GE(built->summary.total_activation_bytes, 9999u * 64);
  auto engine = plan::LoadEngineFromBytes(std::make_shared<std::string>(built->blob));
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto session = runtime::Session::Create(std::shared_ptr<plan::Engine>(std::move(*engine)));
  ASSERT_TRUE(session.ok()) << session.status();
  auto x = ir::Tensor::Allocate(DataType::kF32, {16});
  ASSERT_TRUE(x.ok());
  for (int i = 0; i < 16; ++i) x->data<float>()[i] = i - 8.0f;
  auto out = (*session)->Run({*x});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ((*out)[0].num_elements(), 16);
}

}  // namespace
}  // namespace kiln
