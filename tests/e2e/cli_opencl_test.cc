// The `kiln` binary with an OpenCL device (PoCL in CI): `kiln devices` lists it, `kiln build
// --device` places the nodes there and `kiln inspect` / `kiln run` show and run it, and what
// is missing (a device index, OpenCL itself) is a clear error with a non-zero exit.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cli_runner.h"
#include "tests/testing/onnx_models.h"

namespace {

using ::kiln::testing::AddReluMulModel;
using ::kiln::testing::CliResult;
using ::kiln::testing::Describe;
using ::kiln::testing::RunBinary;
using ::kiln::testing::SerializeModel;
using ::kiln::testing::TempDir;
using ::testing::HasSubstr;

TEST(CliOpenClTest, DevicesBuildInspectExplain) {
  TempDir dir;
  CliResult d = RunBinary(dir, KILN_BIN, {"devices"});
  ASSERT_TRUE(d.exited && d.exit_code == 0) << Describe(d);
  EXPECT_THAT(d.out, HasSubstr("cpu "));
  EXPECT_THAT(d.out, HasSubstr("opencl:0:0 ")) << Describe(d);

  const std::string model = dir.Write("m.onnx", SerializeModel(AddReluMulModel()));
  const std::string engine = dir.File("m.kiln");
  CliResult b = RunBinary(dir, KILN_BIN, {"build", model, "--device", "opencl", "-o", engine});
  ASSERT_TRUE(b.exited && b.exit_code == 0) << Describe(b);
  EXPECT_THAT(b.err, HasSubstr("placement: 3 kernel(s) on")) << Describe(b);
  CliResult i = RunBinary(dir, KILN_BIN, {"inspect", engine});
  ASSERT_TRUE(i.exited && i.exit_code == 0) << Describe(i);
  EXPECT_THAT(i.out, HasSubstr("device: OpenCL"));
  EXPECT_THAT(i.out, HasSubstr("3 kernel(s) on the device (100.0% of the estimated FLOPs)"));
  EXPECT_THAT(i.out, HasSubstr("opencl/opencl-c/f32"));
  CliResult e =
      RunBinary(dir, KILN_BIN, {"explain", model, "--device", "opencl", "--node", "relu"});
  ASSERT_TRUE(e.exited && e.exit_code == 0) << Describe(e);
  EXPECT_THAT(e.out, HasSubstr("device:      opencl"));
  // KILN_OPENCL_PROFILE=1: the device times of each kernel function, when the device closes.
  setenv("KILN_OPENCL_PROFILE", "1", 1);
  CliResult p = RunBinary(dir, KILN_BIN, {"bench", engine, "--runs", "3", "--warmup", "1"});
  unsetenv("KILN_OPENCL_PROFILE");
  ASSERT_TRUE(p.exited && p.exit_code == 0) << Describe(p);
  EXPECT_THAT(p.err, HasSubstr("OpenCL profile of ")) << Describe(p);
  // Relu's launches, by the elementwise kernels' function name.
  EXPECT_THAT(p.err, ::testing::ContainsRegex("\n  run +[0-9.]+ +[1-9][0-9]* ")) << Describe(p);
}

TEST(CliOpenClTest, MissingDevicesAreClearErrors) {
  TempDir dir;
  const std::string model = dir.Write("m.onnx", SerializeModel(AddReluMulModel()));
  CliResult b =
      RunBinary(dir, KILN_BIN, {"build", model, "--device", "opencl:9", "-o", dir.File("m.kiln")});
  ASSERT_TRUE(b.exited) << Describe(b);
  EXPECT_NE(b.exit_code, 0);
  EXPECT_THAT(b.err, HasSubstr("no OpenCL platform 9")) << Describe(b);
  CliResult f = RunBinary(dir, KILN_BIN, {"build", model, "--no-fallback", "-o", dir.File("x")});
  ASSERT_TRUE(f.exited) << Describe(f);
  EXPECT_EQ(f.exit_code, 2) << Describe(f);
  EXPECT_THAT(f.err, HasSubstr("--no-fallback needs --device"));
  // Without an ICD loader: the binary still starts and says what to install.
  setenv("KILN_OPENCL_LIBRARY", "/nonexistent/libOpenCL.so.1", 1);
  CliResult n = RunBinary(dir, KILN_BIN, {"devices"});
  CliResult nb =
      RunBinary(dir, KILN_BIN, {"build", model, "--device", "opencl", "-o", dir.File("y")});
  unsetenv("KILN_OPENCL_LIBRARY");
  ASSERT_TRUE(n.exited && n.exit_code == 0) << Describe(n);
  EXPECT_THAT(n.out, HasSubstr("ocl-icd-libopencl1"));
  ASSERT_TRUE(nb.exited) << Describe(nb);
  EXPECT_NE(nb.exit_code, 0);
  EXPECT_THAT(nb.err, HasSubstr("cannot load the OpenCL ICD loader")) << Describe(nb);
}

}  // namespace
