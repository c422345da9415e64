// convert-client's command line: flags, durations, targets, and the usage errors naming the flag.
#include "client/client_options.h"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "client/convert.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::client {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<ClientOptions> Parse(std::vector<std::string> args) {
  std::vector<const char*> argv = {"convert-client"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return ParseArgs(static_cast<int>(argv.size()), argv.data());
}

std::vector<std::string> Minimal() {
  return {"--server", "127.0.0.1:50051", "--model", "m.onnx", "-o", "m.kiln"};
}

// A usage error whose message contains `needle`.
void ExpectUsageError(std::vector<std::string> args, const std::string& needle) {
  auto o = Parse(args);
  ASSERT_FALSE(o.ok()) << "parsed: " << needle;
  EXPECT_TRUE(IsUsageError(o.status())) << o.status();
  EXPECT_THAT(std::string(o.status().message()), HasSubstr(needle));
}

TEST(ParseArgsTest, MinimalCommandLine) {
  unsetenv("KILN_TOKEN");
  auto o = Parse(Minimal());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->servers, std::vector<std::string>{"127.0.0.1:50051"});
  EXPECT_EQ(o->model_path, "m.onnx");
  EXPECT_EQ(o->output_path, "m.kiln");
  EXPECT_EQ(o->timeout, absl::Hours(1));
  EXPECT_EQ(o->max_attempts, 4);
  EXPECT_TRUE(o->token.empty());
  EXPECT_FALSE(o->WantsReport());
  EXPECT_FALSE(o->fail_on_accuracy);
}

TEST(ParseArgsTest, EveryFlag) {
  std::vector<std::string> args = Minimal();
  for (const char* a : {"--server",
                        "127.0.0.1:2",
                        "--policy",
                        "fp32-layernorm",
                        "--rule",
                        "op:Softmax=fp32",
                        "--rule=name:conv*=fp16",
                        "--report",
                        "r.json",
                        "--html",
                        "r.html",
                        "--seed",
                        "7",
                        "--samples",
                        "3",
                        "--timeout",
                        "10m",
                        "--token",
                        "secret",
                        "--tls-ca",
                        "ca.pem",
                        "--fail-on-accuracy",
                        "--request-id",
                        "abc",
                        "--retries",
                        "2",
                        "--atol=0.5",
                        "--rtol",
                        "0.25",
                        "--constraints",
                        "prefer",
                        "--fusion",
                        "off",
                        "--quiet"}) {
    args.push_back(a);
  }
  auto o = Parse(args);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->servers.size(), 2u);
  EXPECT_EQ(o->policy, "fp32-layernorm");
  EXPECT_EQ(o->rules, (std::vector<std::string>{"op:Softmax=fp32", "name:conv*=fp16"}));
  EXPECT_EQ(o->report_path, "r.json");
  EXPECT_EQ(o->html_path, "r.html");
  ASSERT_TRUE(o->seed.has_value());
  EXPECT_EQ(*o->seed, 7u);
  EXPECT_EQ(o->samples, 3);
  EXPECT_EQ(o->timeout, absl::Minutes(10));
  EXPECT_EQ(o->token, "secret");
  EXPECT_EQ(o->tls_ca, "ca.pem");
  EXPECT_TRUE(o->fail_on_accuracy);
  EXPECT_EQ(o->request_id, "abc");
  EXPECT_EQ(o->max_attempts, 3);
  EXPECT_DOUBLE_EQ(o->atol, 0.5);
  EXPECT_DOUBLE_EQ(o->rtol, 0.25);
  EXPECT_EQ(o->constraints, "prefer");
  EXPECT_EQ(o->fusion, "off");
  EXPECT_TRUE(o->quiet);
  EXPECT_TRUE(o->WantsReport());
}

TEST(ParseArgsTest, DeviceAndNoFallback) {
  auto o = Parse(Minimal());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->device.empty());  // the server's default, the CPU
  EXPECT_FALSE(o->no_fallback);
  std::vector<std::string> args = Minimal();
  for (const char* a : {"--device", "opencl:0:1", "--no-fallback"}) args.push_back(a);
  o = Parse(args);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->device, "opencl:0:1");
  EXPECT_TRUE(o->no_fallback);
  std::vector<std::string> alone = Minimal();
  alone.push_back("--no-fallback");
  ExpectUsageError(alone, "--no-fallback needs --device");
  std::vector<std::string> cpu = Minimal();
  for (const char* a : {"--device", "cpu", "--no-fallback"}) cpu.push_back(a);
  ExpectUsageError(cpu, "--no-fallback needs --device");
  std::vector<std::string> empty = Minimal();
  for (const char* a : {"--device", ""}) empty.push_back(a);
  ExpectUsageError(empty, "--device is empty");
}

TEST(ParseArgsTest, TokenFromEnvironmentUnlessGiven) {
  setenv("KILN_TOKEN", "from-env", 1);
  auto o = Parse(Minimal());
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->token, "from-env");
  std::vector<std::string> args = Minimal();
  args.insert(args.end(), {"--token", "flag"});
  o = Parse(args);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->token, "flag");
  unsetenv("KILN_TOKEN");
}

TEST(ParseArgsTest, HelpNeedsNothingElse) {
  auto o = Parse({"--help"});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->help);
}

TEST(ParseArgsTest, ReportWantedByAnyReportFlag) {
  for (std::vector<std::string> extra :
       std::vector<std::vector<std::string>>{{"--report", "r.json"},
                                             {"--html", "r.html"},
                                             {"--inputs", "dir"},
                                             {"--seed", "1"},
                                             {"--fail-on-accuracy"}}) {
    std::vector<std::string> args = Minimal();
    args.insert(args.end(), extra.begin(), extra.end());
    auto o = Parse(args);
    ASSERT_TRUE(o.ok()) << extra[0] << ": " << o.status();
    EXPECT_TRUE(o->WantsReport()) << extra[0];
  }
}

TEST(ParseArgsTest, UsageErrorsNameTheFlag) {
  ExpectUsageError({"--model", "m.onnx", "-o", "x"}, "--server");
  ExpectUsageError({"--server", "h:1", "-o", "x"}, "--model");
  ExpectUsageError({"--server", "h:1", "--model", "m"}, "-o");
  auto with = [](std::vector<std::string> extra) {
    std::vector<std::string> args = Minimal();
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  ExpectUsageError(with({"--bogus"}), "unknown flag --bogus");
  ExpectUsageError(with({"stray.onnx"}), "unexpected argument 'stray.onnx'");
  ExpectUsageError(with({"--timeout"}), "--timeout needs a value");
  ExpectUsageError(with({"--timeout", "soon"}), "--timeout");
  ExpectUsageError(with({"--timeout", "0s"}), "--timeout");
  ExpectUsageError(with({"--timeout", "-5m"}), "--timeout");
  ExpectUsageError(with({"--seed", "-1"}), "--seed");
  ExpectUsageError(with({"--seed", "x"}), "--seed");
  ExpectUsageError(with({"--samples", "0"}), "--samples");
  ExpectUsageError(with({"--inputs", "d", "--samples", "2"}), "--samples");
  ExpectUsageError(with({"--inputs", "d", "--seed", "2"}), "--seed and --inputs");
  ExpectUsageError(with({"--atol", "-1"}), "--atol");
  ExpectUsageError(with({"--rtol", "nan"}), "--rtol");
  ExpectUsageError(with({"--rule", "op:Softmax"}), "--rule 'op:Softmax'");
  ExpectUsageError(with({"--policy", "fp16", "--policy-file", "p.txt"}), "exclusive");
  ExpectUsageError(with({"--policy", "a", "--policy", "b"}), "--policy given 2 times");
  ExpectUsageError(with({"--constraints", "maybe"}), "--constraints");
  ExpectUsageError(with({"--fusion", "yes"}), "--fusion");
  ExpectUsageError(with({"--retries", "99"}), "--retries");
  ExpectUsageError(with({"--token", ""}), "--token is empty");
  ExpectUsageError(with({"--quiet=1"}), "--quiet takes no value");
  ExpectUsageError(with({"--request-id", std::string(200, 'x')}), "--request-id");
  ExpectUsageError(with({"--server", "dns:///farm:50051"}), "dns:///farm:50051");
}

TEST(ParseDurationTest, UnitsAndBareSeconds) {
  EXPECT_EQ(*ParseDuration("30s"), absl::Seconds(30));
  EXPECT_EQ(*ParseDuration("10m"), absl::Minutes(10));
  EXPECT_EQ(*ParseDuration("1h"), absl::Hours(1));
  EXPECT_EQ(*ParseDuration("1h30m"), absl::Minutes(90));
  EXPECT_EQ(*ParseDuration("1.5h"), absl::Minutes(90));
  EXPECT_EQ(*ParseDuration("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseDuration("45"), absl::Seconds(45));
  EXPECT_EQ(*ParseDuration(" 2m "), absl::Minutes(2));
}

TEST(ParseDurationTest, RejectsNonsense) {
  for (const char* bad : {"", "m", "10x", "ten minutes", "0", "0s", "-1s", "inf", "1h-", "s10"}) {
    auto d = ParseDuration(bad);
    EXPECT_FALSE(d.ok()) << "'" << bad << "' parsed as " << *d;
    if (!d.ok()) {
      EXPECT_TRUE(IsUsageError(d.status()));
    }
  }
}

TEST(ChannelTargetTest, OneAddressIsUsedAsGiven) {
  EXPECT_EQ(*ChannelTarget({"127.0.0.1:50051"}), "127.0.0.1:50051");
  EXPECT_EQ(*ChannelTarget({"build-farm.internal:443"}), "build-farm.internal:443");
  EXPECT_EQ(*ChannelTarget({"dns:///kiln.default.svc:50051"}), "dns:///kiln.default.svc:50051");
  EXPECT_EQ(*ChannelTarget({"[::1]:7"}), "[::1]:7");
  EXPECT_FALSE(WantsRoundRobin({"127.0.0.1:1"}));
  EXPECT_TRUE(WantsRoundRobin({"dns:///kiln:1"}));
}

TEST(ChannelTargetTest, SeveralAddressesBecomeOneStaticList) {
  EXPECT_EQ(*ChannelTarget({"127.0.0.1:1", "127.0.0.1:2"}), "ipv4:127.0.0.1:1,127.0.0.1:2");
  EXPECT_EQ(*ChannelTarget({"[::1]:1", "[::1]:2"}), "ipv6:[::1]:1,[::1]:2");
  // localhost resolves here to its IPv4 address(es).
  auto t = ChannelTarget({"localhost:5", "127.0.0.2:6"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(*t, HasSubstr("ipv4:127.0.0.1:5"));
  EXPECT_THAT(*t, HasSubstr(",127.0.0.2:6"));
  EXPECT_TRUE(WantsRoundRobin({"127.0.0.1:1", "127.0.0.1:2"}));
}

TEST(ChannelTargetTest, BadAddressesNameTheServerFlag) {
  for (std::vector<std::string> bad :
       std::vector<std::vector<std::string>>{{"localhost"},
                                             {"h:0"},
                                             {"h:70000"},
                                             {"h:port"},
                                             {"127.0.0.1:1", "[::1]:2"},
                                             {"127.0.0.1:1", "no-such-host.invalid:2"},
                                             {"[::1:5"}}) {
    auto t = ChannelTarget(bad);
    ASSERT_FALSE(t.ok()) << bad[0];
    EXPECT_THAT(std::string(t.status().message()), HasSubstr("--server")) << bad[0];
    EXPECT_TRUE(IsUsageError(t.status()));
  }
}

// A local file that cannot be read is exit code 1 (README: "1 local file error"), not 2 (usage):
// the command line itself was right. No server is contacted: the files are read first.
TEST(RunConvertTest, UnreadableLocalFilesExitOne) {
  const std::string missing = "/nonexistent-kiln-test/model.onnx";
  auto o = Parse({"--server", "127.0.0.1:1", "--model", missing, "-o", "/tmp/unused.kiln"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(RunConvert(*o), kExitLocalError);

  // The model is there but --policy-file, --inputs or --tls-ca is not.
  char model[] = "/tmp/kiln-client-test-XXXXXX";
  int fd = mkstemp(model);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "onnx", 4), 4);
  close(fd);
  for (const char* flag : {"--policy-file", "--inputs", "--tls-ca"}) {
    auto with = Parse({"--server", "127.0.0.1:1", "--model", model, "-o", "/tmp/unused.kiln", flag,
                       "/nonexistent-kiln-test/file"});
    ASSERT_TRUE(with.ok()) << with.status();
    EXPECT_EQ(RunConvert(*with), kExitLocalError) << flag;
  }
  unlink(model);
}

}  // namespace
}  // namespace kiln::client
