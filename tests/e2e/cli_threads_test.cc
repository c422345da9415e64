// The real `kiln` binary's OpenMP wait policy (runtime::UseBoundedOmpWait): a bounded spin (no
// spin on a busy machine) unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT, in which case
// theirs is kept, and `kiln bench` says which. libgomp's own report (OMP_DISPLAY_ENV) shows what it
// really read.
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

using ::kiln::testing::AddReluMulModel;
using ::kiln::testing::CliResult;
using ::kiln::testing::Describe;
using ::kiln::testing::RunBinary;
using ::kiln::testing::SerializeModel;
using ::kiln::testing::TempDir;
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
      r.out.find("(OpenMP wait passive (default: a busy machine))") != std::string::npos;
  if (!busy) {
    EXPECT_THAT(r.out, HasSubstr("threads 2 (OpenMP wait spin 1000 then sleep (default))"))
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
  EXPECT_THAT(r.out, HasSubstr("(OpenMP wait OMP_WAIT_POLICY=active)")) << Describe(r);
  EXPECT_THAT(r.err, HasSubstr("OMP_WAIT_POLICY = 'ACTIVE'")) << Describe(r);
  EXPECT_THAT(r.err, Not(HasSubstr("GOMP_SPINCOUNT = '1000'"))) << Describe(r);
  EXPECT_THAT(r.err, Not(HasSubstr("GOMP_SPINCOUNT = '0'"))) << Describe(r);
}

TEST_F(CliThreadsTest, UserSpinCountKept) {
  setenv("GOMP_SPINCOUNT", "5000", 1);
  CliResult r = Bench();
  ASSERT_TRUE(r.exited && r.exit_code == 0) << Describe(r);
  EXPECT_THAT(r.out, HasSubstr("(OpenMP wait GOMP_SPINCOUNT=5000)")) << Describe(r);
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
  EXPECT_THAT(r.out, HasSubstr("(OpenMP wait libgomp's default (spinning))")) << Describe(r);
}

}  // namespace
}  // namespace kiln
