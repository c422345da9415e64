// Builds for an OpenCL device (on the machine's OpenCL; PoCL in CI): placement puts each node
// the device has a kernel for there and says why each other node stays on the CPU; the engine
// records its device; a session runs it with the copies between the two and matches the CPU
// engine; a missing device, a missing index and --no-fallback are clear errors.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/builder/accuracy.h"
#include "engine/builder/builder.h"
#include "engine/plan/engine_blob.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"
#include "tests/testing/onnx_models.h"

namespace kiln::testing {
namespace {

// y = r * r, r = CumSum(Sigmoid(x + w), axis 1); x float[2, 3, 4]. (CumSum has no OpenCL
// kernel: it stays on the CPU.)
onnx::ModelProto Model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("kiln-tests");
  auto* imp = m.add_opset_import();
  imp->set_domain("");
  imp->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("opencl_placement");
  AddTensorValueInfo(g->mutable_input(), "x", {2, 3, 4});
  AddFloatInitializer(g, "w", {3, 4}, Wave(12, 2.0f, 0.4f));
  AddInt64Initializer(g, "axis", {1});
  AddOnnxNode(g, "Add", {"x", "w"}, {"a"}, "add");
  AddOnnxNode(g, "Sigmoid", {"a"}, {"s"}, "sigmoid");
  AddOnnxNode(g, "CumSum", {"s", "axis"}, {"r"}, "cumsum");
  AddOnnxNode(g, "Mul", {"r", "r"}, {"y"}, "square");
  AddTensorValueInfo(g->mutable_output(), "y", {2, 3, 4});
  return m;
}

const v1::Kernel* KernelOf(const v1::EngineMetadata& m, const std::string& node) {
  for (const v1::Kernel& k : m.kernels()) {
    for (const v1::NodeProvenance& p : k.nodes()) {
      if (p.node_name() == node) return &k;
    }
  }
  return nullptr;
}

absl::StatusOr<std::vector<ir::Tensor>> RunBlob(const std::string& blob,
                                                const runtime::NodeObserver& observer = nullptr) {
  ASSIGN_OR_RETURN(std::unique_ptr<plan::Engine> e,
                   plan::LoadEngineFromBytes(std::make_shared<const std::string>(blob)));
  ASSIGN_OR_RETURN(auto session,
                   runtime::Session::Create(std::shared_ptr<plan::Engine>(std::move(e))));
  ir::Tensor x = *ir::Tensor::Allocate(DataType::kF32, {2, 3, 4});
  const std::vector<float> v = Wave(24, 3.0f, 0.9f);
  std::copy(v.begin(), v.end(), x.data<float>());
  return session->Run({x}, observer);
}

TEST(OpenClBuildTest, PlacesRecordsAndRunsLikeTheCpuEngine) {
  builder::BuildOptions cpu_opts;
  auto cpu = builder::BuildEngine(SerializeModel(Model()), cpu_opts, nullptr);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  builder::BuildOptions opts;
  opts.device = "opencl";
  auto dev = builder::BuildEngine(SerializeModel(Model()), opts, nullptr);
  ASSERT_TRUE(dev.ok()) << dev.status();

  auto engine = plan::LoadEngineFromBytes(std::make_shared<const std::string>(dev->blob));
  ASSERT_TRUE(engine.ok()) << engine.status();
  const v1::EngineMetadata& m = (*engine)->metadata;
  EXPECT_EQ(m.device().kind(), "opencl");
  EXPECT_FALSE(m.device().name().empty());
  EXPECT_FALSE(m.device().driver_version().empty());
  EXPECT_EQ(m.device().device_kernels(), 3);
  EXPECT_EQ(m.device().cpu_kernels(), 1);
  // x up, s down to the CumSum, r up again, y down.
  EXPECT_EQ(m.device().transfers(), 4);
  for (const char* node : {"add", "sigmoid", "square"}) {
    const v1::Kernel* k = KernelOf(m, node);
    ASSERT_NE(k, nullptr) << node;
    EXPECT_EQ(k->backend(), "opencl") << node;
    EXPECT_EQ(k->isa(), "opencl-c") << node;
    EXPECT_EQ(k->nodes(0).device(), "opencl") << node;
    EXPECT_TRUE(k->nodes(0).fallback_reason().empty()) << node;
  }
  const v1::Kernel* cumsum = KernelOf(m, "cumsum");
  ASSERT_NE(cumsum, nullptr);
  EXPECT_EQ(cumsum->backend(), "cpu");
  EXPECT_EQ(cumsum->nodes(0).device(), "cpu");
  EXPECT_TRUE(
      absl::StrContains(cumsum->nodes(0).fallback_reason(), "no kernel for CumSum on OpenCL"))
      << cumsum->nodes(0).fallback_reason();

  auto want = RunBlob(cpu->blob);
  ASSERT_TRUE(want.ok()) << want.status();
  // The observer sees each device tensor on the host.
  int observed = 0;
  auto got = RunBlob(dev->blob, [&](const ir::Node& n, const std::vector<const ir::Tensor*>& ins,
                                    const std::vector<const ir::Tensor*>& outs) {
    for (const ir::Tensor* t : outs) {
      ASSERT_NE(t, nullptr);
      EXPECT_FALSE(t->on_device()) << n.name;
      EXPECT_NE(t->raw_data(), nullptr) << n.name;
    }
    for (const ir::Tensor* t : ins) EXPECT_TRUE(t == nullptr || !t->on_device()) << n.name;
    ++observed;
  });
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(observed, 4);
  ASSERT_EQ(got->size(), 1u);
  const ir::Tensor& y = (*got)[0];
  EXPECT_FALSE(y.on_device());
  ASSERT_EQ(y.dims(), (*want)[0].dims());
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    const float w = (*want)[0].data<float>()[i], g = y.data<float>()[i];
    // The Add and the Mul are exact on both; the device's exp is within 3 ulps (OpenCL C 1.2,
    // table 7.1) and the division 2.5, so s within ~6 ulps, the 3-term CumSum of values in
    // (0, 1) within ~8 and its square within ~17: 24 ulps of y.
    EXPECT_LE(std::fabs(w - g), 24 * std::ldexp(1.0f, std::ilogb(w) - 23)) << i;
  }
}

TEST(OpenClBuildTest, NoFallbackNamesTheNodesTheDeviceCannotRun) {
  builder::BuildOptions opts;
  opts.device = "opencl";
  opts.no_fallback = true;
  auto built = builder::BuildEngine(SerializeModel(Model()), opts, nullptr);
  ASSERT_FALSE(built.ok());
  EXPECT_EQ(built.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(built.status().message(), "'cumsum'")) << built.status();
  EXPECT_TRUE(absl::StrContains(built.status().message(), "--no-fallback")) << built.status();
}

TEST(OpenClBuildTest, MissingDevicesAreClearErrors) {
  builder::BuildOptions opts;
  opts.device = "opencl:41";
  auto built = builder::BuildEngine(SerializeModel(Model()), opts, nullptr);
  EXPECT_EQ(built.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(built.status().message(), "no OpenCL platform 41"))
      << built.status();
  opts.device = "gpu";
  built = builder::BuildEngine(SerializeModel(Model()), opts, nullptr);
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);

  // An engine of a device this machine lacks: the session names it and what the machine has.
  opts.device = "opencl";
  built = builder::BuildEngine(SerializeModel(Model()), opts, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  auto e = plan::LoadEngineFromBytes(std::make_shared<const std::string>(built->blob));
  ASSERT_TRUE(e.ok());
  (*e)->metadata.mutable_device()->set_name("Imaginary GPU 9000");
  auto session = runtime::Session::Create(std::shared_ptr<plan::Engine>(*std::move(e)));
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(session.status().message(), "Imaginary GPU 9000"))
      << session.status();
  EXPECT_TRUE(absl::StrContains(session.status().message(), "kiln devices")) << session.status();
}

// The accuracy report of a device engine: every tensor says where it ran (and the CPU's node
// why), and the error each kernel introduces is measured on the device too (its inputs uploaded,
// its outputs read back).
TEST(OpenClBuildTest, TheReportSaysWhereEachNodeRan) {
  builder::BuildOptions opts;
  opts.device = "opencl";
  opts.keep_reference = true;
  const std::string bytes = SerializeModel(Model());
  auto built = builder::BuildEngine(bytes, opts, nullptr);
  ASSERT_TRUE(built.ok()) << built.status();
  auto engine = builder::TakeKeptEngine(*built);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ir::Tensor x = *ir::Tensor::Allocate(DataType::kF32, {2, 3, 4});
  const std::vector<float> v = Wave(24, 3.0f, 0.9f);
  std::copy(v.begin(), v.end(), x.data<float>());
  auto report = builder::BuildAccuracyReport(bytes, opts, *built, *engine,
                                             std::move(built->reference), {{x}}, {}, nullptr);
  ASSERT_TRUE(report.ok()) << report.status();
  int seen = 0;
  for (const v1::TensorReport& t : report->tensors()) {
    SCOPED_TRACE(t.node_name());
    ++seen;
    if (t.node_name() == "cumsum") {
      EXPECT_EQ(t.device(), "cpu");
      EXPECT_TRUE(absl::StrContains(t.fallback_reason(), "CumSum")) << t.fallback_reason();
    } else {
      EXPECT_EQ(t.device(), "opencl");
      EXPECT_TRUE(t.fallback_reason().empty());
    }
    // Run alone on the reference's inputs: the Add and the Mul are exact; the Sigmoid within
    // a few ulps of values below 1.
    EXPECT_TRUE(t.has_introduced());
    EXPECT_LE(t.introduced().max_abs(), 1e-6);
  }
  EXPECT_EQ(seen, 4);
}

}  // namespace
}  // namespace kiln::testing
