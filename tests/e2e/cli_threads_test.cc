// The real `kiln` binary's OpenMP wait policy (runtime::UseBoundedOmpWait): a bounded spin (no
// spin on a busy machine) unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT, in which case
// theirs is kept, and `kiln bench` says which. libgomp's own report (OMP_DISPLAY_ENV) shows what it
// really read. And where the kernels' loops run (kernels/cpu/parallel.h), as `bench` says.
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/cli_runner.h"
#include "tests/testing/onnx_models.h"

#ifndef KILN_BIN
#error "KILN_BIN must be the path of the kiln binary"
#endif

namespace kiln {
namespace {

using ::kiln::testing::AddFloatInitializer;
using ::kiln::testing::AddOnnxNode;
using ::kiln::testing::AddReluMulModel;
using ::kiln::testing::AddTensorValueInfo;
using ::kiln::testing::CliResult;
using ::kiln::testing::Describe;
using ::kiln::testing::RunBinary;
using ::kiln::testing::SerializeModel;
using ::kiln::testing::TempDir;
using ::kiln::testing::Wave;
using ::testing::HasSubstr;
using ::testing::Not;

class CliThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    unsetenv("KILN_OMP_WAIT_DEFAULT");
    setenv("OMP_DISPLAY_ENV", "verbose", 1);
    const std::string model = dir_.Write("m.onnx", SerializeModel(AddReluMulModel()));
    CliResult b = RunBinary(dir_, KILN_BIN, {"build", model, "-o", dir_.File("m.kiln"), "--quiet"});
    ASSERT_TRUE(b.exited && b.exit_code == 0) << Describe(b);
  }
  void TearDown() override {
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
    unsetenv("OMP_DISPLAY_ENV");
  }
  CliResult Bench() {
    return RunBinary(
        dir_, KILN_BIN,
        {"bench", dir_.File("m.kiln"), "--seed", "1", "--runs", "2", "--threads", "2"});
  }
  TempDir dir_;
};

// Kiln's default: a bounded spin, or no spin when another task keeps a CPU busy at start (as
// other tests running beside this one may), said by `bench` and read by libgomp.
TEST_F(CliThreadsTest, BoundedSpinOrPassiveByDefault) {
  CliResult r = Bench();
  ASSERT_TRUE(r.exited && r.exit_code == 0) << Describe(r);
  const bool busy =
      r.out.find("(OpenMP wait passive (default: a busy machine);") != std::string::npos;
  if (!busy) {
    EXPECT_THAT(r.out, HasSubstr("threads 2 (OpenMP wait spin 1000 then sleep (default);"))
        << Describe(r);
  }
  // libgomp's report of the execution that runs the kernels (the first one, before the new
  // execution, reports its default).
  EXPECT_THAT(r.err, HasSubstr(busy ? "GOMP_SPINCOUNT = '0'" : "GOMP_SPINCOUNT = '1000'"))
      << Describe(r);
}

TEST_F(CliThreadsTest, UserPolicyKept) {
  setenv("OMP_WAIT_POLICY", "active", 1);
  CliResult r = Bench();
  ASSERT_TRUE(r.exited && r.exit_code == 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("(OpenMP wait OMP_WAIT_POLICY=active;")) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("OMP_WAIT_POLICY = 'ACTIVE'")) << Describe(r);
  EXPECT_THAT(r.err, Not(HasSubstr("GOMP_SPINCOUNT = '1000'"))) << Describe(r);
  EXPECT_THAT(r.err, Not(HasSubstr("GOMP_SPINCOUNT = '0'"))) << Describe(r);
}

TEST_F(CliThreadsTest, UserSpinCountKept) {
  setenv("GOMP_SPINCOUNT", "5000", 1);
  CliResult r = Bench();
  ASSERT_TRUE(r.exited && r.exit_code == 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("(OpenMP wait GOMP_SPINCOUNT=5000;")) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("GOMP_SPINCOUNT = '5000'")) << Describe(r);
}

// Started through the dynamic loader (as on a machine without the shared libraries installed):
// no new execution (/proc/self/exe is the loader), libgomp's defaults, said so.
TEST_F(CliThreadsTest, ThroughTheDynamicLoader) {
  const std::string loader = "/lib64/ld-linux-x86-64.so.2";
  if (access(loader.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << loader;
  CliResult r = RunBinary(
      dir_, loader,
      {KILN_BIN, "bench", dir_.File("m.kiln"), "--seed", "1", "--runs", "2", "--threads", "2"});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("(OpenMP wait libgomp's default (spinning);")) << Describe(r);
}

// Where the kernels' loops run: the pool for an engine of Kiln's own kernels; OpenMP's threads
// for one with a oneDNN convolution while those spin (here: a user's spin count, so that a busy
// machine's passive default cannot decide), the pool with passive waits; KILN_THREAD_POOL=openmp
// always OpenMP's.
TEST_F(CliThreadsTest, BenchSaysWhereTheLoopsRun) {
  onnx::ModelProto m = AddReluMulModel();
  onnx::GraphProto* g = m.mutable_graph();
  g->clear_input();
  g->clear_output();
  g->clear_node();
  g->clear_initializer();
  AddTensorValueInfo(g->mutable_input(), "x", {1, 3, 8, 8});
  AddFloatInitializer(g, "w", {4, 3, 3, 3}, Wave(4 * 3 * 3 * 3, 0.3f, 0.1f));
  onnx::NodeProto* conv = AddOnnxNode(g, "Conv", {"x", "w"}, {"y"}, "conv");
  ::kiln::testing::AddIntsAttribute(conv, "pads", {1, 1, 1, 1});
  AddTensorValueInfo(g->mutable_output(), "y", {1, 4, 8, 8});
  const std::string model = dir_.Write("conv.onnx", SerializeModel(m));
  CliResult b =
      RunBinary(dir_, KILN_BIN, {"build", model, "-o", dir_.File("conv.kiln"), "--quiet"});
  ASSERT_TRUE(b.exited && b.exit_code == 0) << Describe(b);
  auto bench = [&](const std::string& engine) {
    return RunBinary(dir_, KILN_BIN,
                     {"bench", dir_.File(engine), "--seed", "1", "--runs", "2", "--threads", "2"});
  };
  CliResult own = bench("m.kiln");
  ASSERT_TRUE(own.exited && own.exit_code == 0) << Describe(own);
  EXPECT_THAT(own.out, HasSubstr("kernel loops on the thread pool)")) << Describe(own);

  setenv("GOMP_SPINCOUNT", "1000", 1);
  CliResult spinning = bench("conv.kiln");
  ASSERT_TRUE(spinning.exited && spinning.exit_code == 0) << Describe(spinning);
  EXPECT_THAT(spinning.out, HasSubstr("(OpenMP wait GOMP_SPINCOUNT=1000; kernel loops on OpenMP's "
                                      "threads (oneDNN or recurrent kernels, spinning waits))"))
      << Describe(spinning);
  setenv("GOMP_SPINCOUNT", "0", 1);
  CliResult passive = bench("conv.kiln");
  ASSERT_TRUE(passive.exited && passive.exit_code == 0) << Describe(passive);
  EXPECT_THAT(passive.out, HasSubstr("kernel loops on the thread pool)")) << Describe(passive);

  setenv("KILN_THREAD_POOL", "openmp", 1);
  CliResult forced = bench("m.kiln");
  unsetenv("KILN_THREAD_POOL");
  ASSERT_TRUE(forced.exited && forced.exit_code == 0) << Describe(forced);
  EXPECT_THAT(forced.out, HasSubstr("kernel loops on OpenMP's threads (KILN_THREAD_POOL=openmp))"))
      << Describe(forced);
}

}  // namespace
}  // namespace kiln
