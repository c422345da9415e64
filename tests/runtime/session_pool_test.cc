// The session's buffer pool: tensors outside the arena (sizes known at run time, graph outputs,
// omitted outputs) reuse buffers from run to run, never one a caller or observer still holds.
#include <cmath>
#include <memory>
#include <vector>

#include "engine/builder/builder.h"
#include "engine/plan/engine_blob.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"

namespace kiln::runtime {
namespace {

using ::kiln::testing::AddFloatInitializer;
using ::kiln::testing::AddOnnxNode;
using ::kiln::testing::AddTensorValueInfo;
using ::kiln::testing::SerializeModel;

const std::vector<float> kW = {0.5f, -2.0f, 3.0f};

// y = Relu(x + w) * w, x: float[n, 3] with n symbolic, w: float[3]: every activation is sized at
// run time.
std::unique_ptr<Session> MakeSession(bool use_arena = true) {
  onnx::ModelProto m;
  m.set_ir_version(10);
  auto* imp = m.add_opset_import();
  imp->set_domain("");
  imp->set_version(21);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("pool");
  auto set_n = [](onnx::ValueInfoProto* vi) {
    vi->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param("n");
  };
  set_n(AddTensorValueInfo(g->mutable_input(), "x", {1, 3}));
  AddFloatInitializer(g, "w", {3}, kW);
  AddOnnxNode(g, "Add", {"x", "w"}, {"a"}, "add");
  AddOnnxNode(g, "Relu", {"a"}, {"r"}, "relu");
  AddOnnxNode(g, "Mul", {"r", "w"}, {"y"}, "mul");
  set_n(AddTensorValueInfo(g->mutable_output(), "y", {1, 3}));
  auto built = builder::BuildEngine(SerializeModel(m), {}, nullptr);
  EXPECT_TRUE(built.ok()) << built.status();
  if (!built.ok()) return nullptr;
  auto engine = plan::LoadEngineFromBytes(std::make_shared<const std::string>(built->blob));
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return nullptr;
  auto s = Session::Create(std::shared_ptr<const plan::Engine>(std::move(*engine)), use_arena);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

ir::Tensor Input(int64_t n, float phase) {
  ir::Tensor x = *ir::Tensor::Allocate(DataType::kF32, {n, 3});
  for (int64_t i = 0; i < 3 * n; ++i) x.data<float>()[i] = 4.0f * std::sin(0.7f * i + phase);
  return x;
}

void ExpectY(const ir::Tensor& x, const ir::Tensor& y) {
  ASSERT_EQ(y.dims(), x.dims());
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const float w = kW[i % 3], a = x.data<float>()[i] + w;
    EXPECT_EQ(y.data<float>()[i], (a < 0 ? 0.0f : a) * w) << i;  // exact: one rounding each
  }
}

TEST(SessionPoolTest, RunsOfTheSameShapesTakeNoNewBuffersAfterTheFirstTwo) {
  auto s = MakeSession();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->arena_bytes(), 0u);  // nothing planned: all sized at run time
  const ir::Tensor x = Input(1000, 0.3f);
  size_t buffers = 0, bytes = 0;
  for (int run = 0; run < 8; ++run) {
    auto y = s->Run({x});
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectY(x, (*y)[0]);
    // The caller holds run r's output while run r + 1 makes its own: two sets at most.
    if (run == 2) {
      buffers = s->pool().buffers();
      bytes = s->pool().bytes();
    }
    if (run > 2) {
      EXPECT_EQ(s->pool().buffers(), buffers) << run;
      EXPECT_EQ(s->pool().bytes(), bytes) << run;
    }
  }
  // a, r and y of 12000 bytes each at most live at once, and y twice.
  EXPECT_GE(bytes, 2u * 12000);
  EXPECT_LE(bytes, 4u * 12032);
}

TEST(SessionPoolTest, AnOutputTheCallerKeepsIsNeverReused) {
  auto s = MakeSession();
  ASSERT_NE(s, nullptr);
  std::vector<ir::Tensor> inputs, outputs;
  for (int run = 0; run < 6; ++run) {
    inputs.push_back(Input(500, 0.9f * run));
    auto y = s->Run({inputs.back()});
    ASSERT_TRUE(y.ok()) << y.status();
    outputs.push_back((*y)[0]);
  }
  for (int run = 0; run < 6; ++run) ExpectY(inputs[run], outputs[run]);
}

TEST(SessionPoolTest, TensorsAnObserverKeepsAreNeverReused) {
  auto s = MakeSession(/*use_arena=*/false);
  ASSERT_NE(s, nullptr);
  std::vector<ir::Tensor> kept, copies;
  const NodeObserver keep = [&](const ir::Node&, const std::vector<const ir::Tensor*>&,
                                const std::vector<const ir::Tensor*>& outs) {
    for (const ir::Tensor* t : outs) {
      kept.push_back(*t);  // shares the bytes
      copies.push_back(t->Clone());
    }
  };
  for (int run = 0; run < 4; ++run) ASSERT_TRUE(s->Run({Input(300, 1.1f * run)}, keep).ok());
  ASSERT_EQ(kept.size(), 12u);
  for (size_t i = 0; i < kept.size(); ++i) {
    for (int64_t e = 0; e < kept[i].num_elements(); ++e) {
      ASSERT_EQ(kept[i].data<float>()[e], copies[i].data<float>()[e]) << i << " " << e;
    }
  }
}

TEST(SessionPoolTest, BuffersOfShapesNoLongerRunAreFreed) {
  auto s = MakeSession();
  ASSERT_NE(s, nullptr);
  for (int run = 0; run < 3; ++run) ASSERT_TRUE(s->Run({Input(20000, 0.1f)}).ok());
  const size_t big = s->pool().bytes();
  EXPECT_GE(big, 2u * 240000);  // a and r live at once; y takes a's buffer
  const ir::Tensor x = Input(10, 0.2f);
  for (int run = 0; run < 4; ++run) {
    auto y = s->Run({x});
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectY(x, (*y)[0]);
  }
  // The 240000-byte buffers untaken since two runs are gone; what is left serves n = 10.
  EXPECT_LT(s->pool().bytes(), 8u * 192);
}

}  // namespace
}  // namespace kiln::runtime
