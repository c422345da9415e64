// kiln-server builds for its OpenCL device (PoCL in CI): ListPresets lists the devices, a build
// with `device` places its nodes there and streams where each runs, the cache keeps device and
// CPU engines apart, and a bad or missing device is a clear status before any upload.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "engine/plan/engine_blob.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/device_probe.h"
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

// The devices are listed by a child process: no OpenCL driver is ever loaded into the server
// (a driver's threads, signal handlers and crashes stay in the processes that build).
bool ProcessHasLoaded(const std::string& what) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (absl::StrContains(line, what)) return true;
  }
  return false;
}

TEST_F(ServerTest, NoDriverIsLoadedIntoTheServer) {
  Start();
  v1::ListPresetsResponse resp;
  ASSERT_TRUE(testing::ListPresets(channel_, "", &resp).ok());
  ASSERT_GE(resp.devices_size(), 2);
  const std::string model = testing::ReadRepoFile(kMobileNet);
  BuildCall call = Call(model, "m.onnx", "fp32");
  call.spec.set_device("opencl");
  BuildOutcome out = RunBuild(channel_, call);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  // (The ICD loader libOpenCL itself may be there: Debian's oneDNN links it. It loads no driver
  // until a platform is asked for.)
  EXPECT_FALSE(ProcessHasLoaded("libpocl")) << "PoCL is in the server process";
}

// A device listing that fails or hangs leaves the server serving the CPU, with the reason.
TEST(DeviceProbeTest, FailedOrHungListingServesTheCpu) {
  const auto script = [](const std::string& body) {
    char tmpl[] = "/tmp/kiln-probe-XXXXXX";
    const int fd = mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    const std::string text = "#!/bin/sh\n" + body + "\n";
    EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    fchmod(fd, 0700);
    close(fd);
    return std::string(tmpl);
  };
  const std::string fails = script("exit 3");
  kernels::MachineDevices m = ProbeDevices(fails, absl::Seconds(20));
  EXPECT_TRUE(m.opencl.empty());
  EXPECT_EQ(m.status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(m.status.message()), HasSubstr("code 3"));
  const std::string hangs = script("exec sleep 60");
  const auto start = std::chrono::steady_clock::now();
  m = ProbeDevices(hangs, absl::Milliseconds(500));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_TRUE(m.opencl.empty());
  EXPECT_EQ(m.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(m.status.message()), HasSubstr("took longer than 500ms"));
  unlink(fails.c_str());
  unlink(hangs.c_str());
  // The server's own binary lists what this process would.
  m = ProbeDevices(KILN_SERVER_BIN, absl::Seconds(120));
  ASSERT_TRUE(m.status.ok()) << m.status;
  auto here = kernels::ListOpenClDevices();
  ASSERT_TRUE(here.ok()) << here.status();
  ASSERT_EQ(m.opencl.size(), here->size());
  for (size_t i = 0; i < m.opencl.size(); ++i) {
    EXPECT_EQ(m.opencl[i].Spec(), (*here)[i].Spec());
    EXPECT_EQ(m.opencl[i].Describe(), (*here)[i].Describe());
    EXPECT_EQ(m.opencl[i].capabilities, (*here)[i].capabilities);
  }
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
