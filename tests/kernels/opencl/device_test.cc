// The OpenCL runtime: device names, discovery, clear errors for what is missing, programs built
// once and cached on disk (a corrupt entry rebuilt, never a crash). Runs on whatever OpenCL the
// machine has; `make test` installs PoCL (scripts/install-deps.sh).
#include "engine/kernels/opencl/device.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "engine/kernels/device.h"
#include "engine/kernels/opencl/program_cache.h"
#include "gtest/gtest.h"

namespace kiln::kernels::opencl {
namespace {

// Every program of this test binary goes to a cache of its own (ProgramCache::Default reads
// KILN_OPENCL_CACHE once, at the first program built).
class CacheEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-opencl-cache-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("KILN_OPENCL_CACHE", dir_.c_str(), 1);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};
::testing::Environment* const kCacheEnv = ::testing::AddGlobalTestEnvironment(new CacheEnv);

TEST(DeviceSpecTest, ParsesTheForms) {
  auto cpu = ParseDeviceSpec("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(cpu->opencl);
  auto any = ParseDeviceSpec("opencl");
  ASSERT_TRUE(any.ok());
  EXPECT_TRUE(any->opencl);
  EXPECT_EQ(any->platform, -1);
  EXPECT_EQ(any->device, -1);
  auto both = ParseDeviceSpec("opencl:1:2");
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->platform, 1);
  EXPECT_EQ(both->device, 2);
  EXPECT_EQ(both->ToString(), "opencl:1:2");
  EXPECT_EQ(ParseDeviceSpec("opencl:3")->ToString(), "opencl:3");
  for (const char* bad : {"", "gpu", "opencl:", "opencl:x", "opencl:-1", "opencl:0:1:2", "OpenCL",
                          "opencl:0:", "cpu:0", "opencl:99999999"}) {
    auto s = ParseDeviceSpec(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    if (!s.ok()) {
      EXPECT_TRUE(absl::StrContains(s.status().message(), "expected cpu, opencl")) << bad;
    }
  }
}

TEST(DeviceTest, ListsTheMachinesDevices) {
  auto devices = ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_FALSE(devices->empty()) << "no OpenCL device: scripts/install-deps.sh installs PoCL";
  for (const DeviceInfo& d : *devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_FALSE(d.platform_name.empty());
    EXPECT_GT(d.compute_units, 0u) << d.Describe();
    EXPECT_GT(d.global_mem_bytes, 0u) << d.Describe();
    EXPECT_GT(d.max_work_group_size, 0u) << d.Describe();
    EXPECT_TRUE(absl::StrContains(d.opencl_c_version, "OpenCL C")) << d.opencl_c_version;
    // The capabilities follow the extension string.
    EXPECT_EQ(d.fp16, absl::StrContains(d.extensions, "cl_khr_fp16")) << d.Describe();
  }
}

TEST(DeviceTest, OpensTheDefaultDeviceOnce) {
  auto spec = ParseDeviceSpec("opencl");
  ASSERT_TRUE(spec.ok());
  auto a = Device::Open(*spec);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = Device::Open(*spec);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->get(), b->get());  // one context per device and process
  auto resolved = ResolveDevice(*spec);
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(resolved->name, (*a)->info().name);
  // The indices it resolved to open the same device.
  DeviceSpec exact{true, (*a)->info().platform, (*a)->info().device};
  auto c = Device::Open(exact);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->get(), a->get());
}

TEST(DeviceTest, MissingIndicesNameWhatExists) {
  auto p = Device::Open(DeviceSpec{true, 57, -1});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(p.status().message(), "no OpenCL platform 57")) << p.status();
  EXPECT_TRUE(absl::StrContains(p.status().message(), "this machine has 0 '")) << p.status();
  auto d = Device::Open(DeviceSpec{true, 0, 31});
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(d.status().message(), "no OpenCL device 31 on platform 0"))
      << d.status();
  EXPECT_TRUE(absl::StrContains(d.status().message(), "opencl:0:31")) << d.status();
}

// The choice among devices listed before (what kiln-server does with the list its child made)
// follows Device::Open's: the first GPU by default, else device 0 of platform 0.
TEST(DeviceTest, ResolvesAmongListedDevices) {
  MachineDevices m;
  const auto add = [&](int p, int d, const char* platform, const char* name, const char* type) {
    DeviceDescription& x = m.opencl.emplace_back();
    x.opencl = true;
    x.platform = p;
    x.device = d;
    x.platform_name = platform;
    x.name = name;
    x.type = type;
  };
  add(0, 0, "Portable Computing Language", "cpu-zen5", "CPU");
  add(1, 0, "Vendor", "Accelerator A", "accelerator");
  add(1, 1, "Vendor", "GPU B", "GPU");
  auto d = ResolveDeviceIn("opencl", m);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->Spec(), "opencl:1:1");
  EXPECT_EQ(ResolveDeviceIn("opencl:0", m)->name, "cpu-zen5");
  EXPECT_EQ(ResolveDeviceIn("opencl:1", m)->name, "GPU B");
  EXPECT_EQ(ResolveDeviceIn("opencl:1:0", m)->name, "Accelerator A");
  EXPECT_FALSE(ResolveDeviceIn("cpu", m)->opencl);
  auto p = ResolveDeviceIn("opencl:2", m);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(
      absl::StrContains(p.status().message(), "0 'Portable Computing Language', 1 'Vendor'"))
      << p.status();
  auto q = ResolveDeviceIn("opencl:1:2", m);
  EXPECT_EQ(q.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(q.status().message(), "it has 0 'Accelerator A', 1 'GPU B'"))
      << q.status();
  EXPECT_EQ(ResolveDeviceIn("gpu", m).status().code(), absl::StatusCode::kInvalidArgument);
  // Without a GPU the default is device 0 of platform 0.
  m.opencl.pop_back();
  EXPECT_EQ(ResolveDeviceIn("opencl", m)->Spec(), "opencl:0:0");
  // A listing that failed answers with its own error; one that found nothing says so.
  MachineDevices failed;
  failed.status = absl::UnavailableError("libOpenCL.so.1 not found");
  EXPECT_EQ(ResolveDeviceIn("opencl", failed).status(), failed.status);
  EXPECT_EQ(ResolveDeviceIn("opencl", MachineDevices{}).status().code(),
            absl::StatusCode::kUnavailable);
  // The listing agrees with what this machine's OpenCL chooses.
  auto listed = ListOpenClDevices();
  ASSERT_TRUE(listed.ok()) << listed.status();
  auto here = DescribeDevice("opencl");
  ASSERT_TRUE(here.ok()) << here.status();
  EXPECT_EQ(ResolveDeviceIn("opencl", MachineDevices{*listed, absl::OkStatus()})->Spec(),
            here->Spec());
}

// A program that does not compile is an InvalidArgument naming the kernel, with the compiler's
// log; one that does runs.
TEST(DeviceTest, BuildsProgramsAndReportsCompileErrors) {
  auto dev = Device::Open(DeviceSpec{true, -1, -1});
  ASSERT_TRUE(dev.ok()) << dev.status();
  auto bad = (*dev)->Program("the test's broken kernel",
                             "__kernel void k(__global float* x) { x[0] = undefined_name; }", "");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "the test's broken kernel"))
      << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "undefined_name")) << bad.status();

  const std::string src = "__kernel void twice(__global float* x) { x[get_global_id(0)] *= 2.0f; }";
  auto prog = (*dev)->Program("twice", src, "-cl-std=CL1.2");
  ASSERT_TRUE(prog.ok()) << prog.status();
  const ClApi& cl = (*dev)->cl();
  cl_int rc = CL_SUCCESS;
  cl_kernel k = cl.clCreateKernel(*prog, "twice", &rc);
  ASSERT_EQ(rc, CL_SUCCESS);
  float host[64];
  for (int i = 0; i < 64; ++i) host[i] = static_cast<float>(i) - 20.5f;
  cl_mem buf = cl.clCreateBuffer((*dev)->context(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                 sizeof(host), host, &rc);
  ASSERT_EQ(rc, CL_SUCCESS);
  ASSERT_EQ(cl.clSetKernelArg(k, 0, sizeof(buf), &buf), CL_SUCCESS);
  const size_t global = 64;
  ASSERT_EQ(cl.clEnqueueNDRangeKernel((*dev)->queue(), k, 1, nullptr, &global, nullptr, 0, nullptr,
                                      nullptr),
            CL_SUCCESS);
  float out[64];
  ASSERT_EQ(cl.clEnqueueReadBuffer((*dev)->queue(), buf, CL_TRUE, 0, sizeof(out), out, 0, nullptr,
                                   nullptr),
            CL_SUCCESS);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out[i], 2.0f * host[i]) << i;
  cl.clReleaseMemObject(buf);
  cl.clReleaseKernel(k);
}

TEST(ProgramCacheTest, StoresLoadsAndRefusesCorruptEntries) {
  char tmpl[] = "/tmp/kiln-cache-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  ProgramCache cache(std::string(tmpl) + "/nested/dir");
  DeviceInfo dev;
  dev.name = "dev";
  dev.driver_version = "1.0";
  const std::string key = ProgramCache::Key("src", "-O", dev);
  EXPECT_EQ(cache.Load(key).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(cache.Store(key, std::string("binary\0bytes", 12)).ok());
  auto got = cache.Load(key);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::string("binary\0bytes", 12));
  // Every part of the identity changes the key.
  DeviceInfo other = dev;
  other.driver_version = "1.1";
  EXPECT_NE(ProgramCache::Key("src", "-O", other), key);
  EXPECT_NE(ProgramCache::Key("src", "-O2", dev), key);
  EXPECT_NE(ProgramCache::Key("src2", "-O", dev), key);
  EXPECT_NE(ProgramCache::Key("sr", "c-O", dev), key);  // fields are delimited
  // A flipped payload byte, a truncation, a foreign file: DataLoss, never a crash.
  const std::string path = cache.PathOf(key);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto write = [&](const std::string& b) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << b;
  };
  std::string flipped = bytes;
  flipped.back() ^= 1;
  write(flipped);
  EXPECT_EQ(cache.Load(key).status().code(), absl::StatusCode::kDataLoss);
  write(bytes.substr(0, 20));
  EXPECT_EQ(cache.Load(key).status().code(), absl::StatusCode::kDataLoss);
  write(std::string(100, 'x'));
  EXPECT_EQ(cache.Load(key).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ProgramCache("").Load(key).status().code(), absl::StatusCode::kNotFound);
  std::filesystem::remove_all(tmpl);
}

// The device's programs go to the cache; a later process (here: a program not yet built in this
// one) loads the entry, and a corrupt entry is rebuilt and written again.
TEST(ProgramCacheTest, DeviceProgramsUseTheCacheAndSurviveCorruption) {
  auto dev = Device::Open(DeviceSpec{true, -1, -1});
  ASSERT_TRUE(dev.ok()) << dev.status();
  const std::string src = "__kernel void add1(__global float* x) { x[get_global_id(0)] += 1.0f; }";
  const std::string key = ProgramCache::Key(src, "", (*dev)->info());
  const std::string path = ProgramCache::Default().PathOf(key);
  // A corrupt entry before the first build: rebuilt from the source.
  std::filesystem::create_directories(ProgramCache::Default().dir());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "KILNCLP1 garbage";
  auto prog = (*dev)->Program("add1", src, "");
  ASSERT_TRUE(prog.ok()) << prog.status();
  auto entry = ProgramCache::Default().Load(key);
  ASSERT_TRUE(entry.ok()) << "the rebuilt program was not written back: " << entry.status();
  EXPECT_FALSE(entry->empty());
}

// Without an ICD loader, asking for OpenCL says what to install (a fresh process: the loader is
// loaded once per process).
TEST(DeviceDeathTest, MissingLoaderIsAClearError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("KILN_OPENCL_LIBRARY", "/nonexistent/libOpenCL.so.1", 1);
        auto d = Device::Open(DeviceSpec{true, -1, -1});
        std::fprintf(stderr, "%s\n", d.status().ToString().c_str());
        std::_Exit(d.status().code() == absl::StatusCode::kUnavailable ? 3 : 4);
      },
      ::testing::ExitedWithCode(3), "cannot load the OpenCL ICD loader.*ocl-icd-libopencl1");
}

}  // namespace
}  // namespace kiln::kernels::opencl
