// kiln-server builds for its OpenCL device (PoCL in CI): ListPresets lists the devices, a build
// with `device` places its nodes there and streams where each runs, the cache keeps device and
// CPU engines apart, and a bad or missing device is a clear status before any upload.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "engine/plan/engine_blob.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/server_fixture.h"

namespace kiln::server {
namespace {

using testing::BuildCall;
using testing::BuildOutcome;
using ::testing::HasSubstr;
using testing::RunBuild;

TEST_F(ServerTest, ListPresetsListsTheDevices) {
  Start();
  v1::ListPresetsResponse resp;
  ASSERT_TRUE(testing::ListPresets(channel_, "", &resp).ok());
  ASSERT_GE(resp.devices_size(), 2) << "the CPU and at least PoCL's device";
  EXPECT_EQ(resp.devices(0).name(), "cpu");
  EXPECT_TRUE(absl::StartsWith(resp.devices(1).name(), "opencl:")) << resp.devices(1).name();
  EXPECT_FALSE(resp.devices(1).description().empty());
}

TEST_F(ServerTest, BuildsForTheDeviceAndStreamsWhereNodesRun) {
  Start([&](ServerConfig& c) { c.cache_dir = work_.File("cache"); });
  const std::string model = testing::ReadRepoFile(kMobileNet);
  BuildCall call = Call(model, "m.onnx", "fp32");
  call.spec.set_device("opencl");
  BuildOutcome out = RunBuild(channel_, call);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  auto engine = plan::LoadEngineFromBytes(std::make_shared<const std::string>(out.engine));
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->metadata.device().kind(), "opencl");
  EXPECT_GT((*engine)->metadata.device().device_kernels(), 0);
  bool placement_logged = false;
  for (const v1::BuildEvent& e : out.events) {
    placement_logged |= e.has_log() && absl::StrContains(e.log().text(), "placement:");
  }
  EXPECT_TRUE(placement_logged) << "the client sees where the nodes run";

  // The same model for the CPU is another cache entry, not the device engine.
  BuildCall cpu = Call(model, "m.onnx", "fp32");
  BuildOutcome cpu_out = RunBuild(channel_, cpu);
  ASSERT_TRUE(cpu_out.status.ok()) << cpu_out.status.error_message();
  EXPECT_FALSE(cpu_out.cache_hit);
  EXPECT_NE(cpu_out.engine, out.engine);
  // The device build again: a cache hit of the device engine.
  BuildOutcome again = RunBuild(channel_, call);
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_TRUE(again.cache_hit);
  EXPECT_EQ(again.engine, out.engine);
}

TEST_F(ServerTest, BadAndMissingDevicesAreClearErrors) {
  Start();
  const std::string model = testing::ReadRepoFile(kMobileNet);
  BuildCall bad = Call(model, "m.onnx", "fp32");
  bad.spec.set_device("gpu");
  BuildOutcome out = RunBuild(channel_, bad);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("device"));
  BuildCall missing = Call(model, "m.onnx", "fp32");
  missing.spec.set_device("opencl:42");
  out = RunBuild(channel_, missing);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(out.status.error_message(), HasSubstr("no OpenCL platform 42"));
  BuildCall no_fallback = Call(model, "m.onnx", "fp32");
  no_fallback.spec.set_no_fallback(true);
  out = RunBuild(channel_, no_fallback);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("no_fallback"));
}

}  // namespace
}  // namespace kiln::server
