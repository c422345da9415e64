// kiln-server against hostile clients (issue 27): one request, of any content, can at worst fail
// its own build. Each test sends what once crashed, hung or starved the service, then checks
// that the server still answers and builds a good model (the fixture's TearDown also checks
// that every build was released).
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/status.h"
#include "tests/server/server_fixture.h"

namespace kiln::server {
namespace {

using ::testing::HasSubstr;

class HostileTest : public ServerTest {
 protected:
  // A good model still builds: the request before did not hurt the service.
  void ExpectServesAGoodBuild() {
    EXPECT_TRUE(testing::ListPresets(channel_, config_.token).ok());
    BuildCall good =
        Call(kiln::testing::SerializeModel(kiln::testing::AddReluMulModel()), "good.onnx", "fp16");
    BuildOutcome out = RunBuild(channel_, good);
    EXPECT_TRUE(out.status.ok()) << out.status.error_message();
    EXPECT_FALSE(out.engine.empty());
  }

  // A model whose three nodes are named `name` + "_0", "_1", "_2" (distinct graph name per
  // call, so that no build joins another).
  static std::string ModelWithNodeNames(const std::string& name) {
    onnx::ModelProto m = kiln::testing::AddReluMulModel();
    for (int i = 0; i < m.graph().node_size(); ++i) {
      m.mutable_graph()->mutable_node(i)->set_name(name + "_" + std::to_string(i));
    }
    m.mutable_graph()->set_name("named_" + std::to_string(name.size()));
    return kiln::testing::SerializeModel(m);
  }
};

// A `re:` rule nested 20,000 groups deep (about 40 KB) overflowed the stack of the std::regex
// compiler in the server process itself (SIGSEGV, and the client's retry took down the next
// replica). As a rule, in policy text and in explain-like matching it is now a clean
// INVALID_ARGUMENT for that request alone.
TEST_F(HostileTest, DeeplyNestedRegexRuleFailsItsOwnBuild) {
  Start();
  const std::string deep = "re:" + std::string(20000, '(') + "a" + std::string(20000, ')');
  const std::string nested = "re:" + std::string(2000, '(') + "a" + std::string(2000, ')');
  BuildCall as_rule = Call(ModelWithNodeNames("n"), "deep.onnx", "fp16");
  as_rule.spec.add_rules(nested + " = fp32");
  BuildOutcome out = RunBuild(channel_, as_rule);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("nests deeper than 100 groups"));
  ExpectServesAGoodBuild();

  BuildCall as_text = Call(ModelWithNodeNames("n"), "deep.onnx");
  as_text.spec.set_policy_text("base = fp16\n" + deep + " = fp32\n");
  out = RunBuild(channel_, as_text);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("policy_text:2:1: rule 're:((("));
  EXPECT_THAT(out.status.error_message(), HasSubstr("is longer than 4096 bytes"));
  ExpectServesAGoodBuild();
}

// `re:(a+)+$` against a node named forty a's and a '!' backtracked for ever (a worker held up
// to --worker-cpu-seconds); `re:(a|b)*` on a 200,000-character name overflowed the matcher's
// stack. RE2 answers both at once: the first matches no node (a warning under prefer), the
// second every node.
TEST_F(HostileTest, CatastrophicRegexRulesAnswerAtOnce) {
  Start([](ServerConfig& c) { c.max_model_bytes = 8 << 20; });
  BuildCall backtrack = Call(ModelWithNodeNames(std::string(40, 'a') + "!"), "bt.onnx", "fp16");
  backtrack.spec.add_rules("re:(a+)+$ = fp32");
  backtrack.spec.set_constraints("prefer");
  // Far more than this build needs (well under a second), far less than backtracking 2^40.
  backtrack.deadline = std::chrono::milliseconds(60000);
  BuildOutcome out = RunBuild(channel_, backtrack);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_GT(out.Count(v1::BuildEvent::kWarning), 0);  // the rule matched no node
  ExpectServesAGoodBuild();

  BuildCall long_name = Call(ModelWithNodeNames(std::string(200000, 'a')), "long.onnx", "fp16");
  long_name.spec.add_rules("re:(a|b)*_[0-9] = fp32");
  long_name.deadline = std::chrono::milliseconds(60000);
  out = RunBuild(channel_, long_name);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  bool pinned = false;
  for (const auto& e : out.events) {
    pinned |= e.has_decision() && e.decision().assigned_precision() == "fp32" &&
              absl::StrContains(e.decision().rule(), "(a|b)*");
  }
  EXPECT_TRUE(pinned);
  ExpectServesAGoodBuild();
}

// The server quoted a client's input in its errors; past gRPC's metadata limit (8 KiB) the
// client saw RESOURCE_EXHAUSTED ("received trailing metadata size exceeds limit") instead of
// the real error. Every message now stays short and keeps its code.
TEST_F(HostileTest, ErrorsQuotingHugeInputsStayShort) {
  Start();
  // At most kMaxStatusMessageBytes of the message, plus the cut's "... (N bytes)" note.
  const size_t bound = kMaxStatusMessageBytes + 32;
  BuildCall huge_rule = Call(ModelWithNodeNames("n"), "m.onnx", "fp16");
  huge_rule.spec.add_rules("op:" + std::string(100000, 'x') + "! = fp32");
  BuildOutcome out = RunBuild(channel_, huge_rule);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LE(out.status.error_message().size(), bound);

  BuildCall huge_line = Call(ModelWithNodeNames("n"), "m.onnx");
  huge_line.spec.set_policy_text(std::string(500000, 'z') + "\n");
  out = RunBuild(channel_, huge_line);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LE(out.status.error_message().size(), bound);

  BuildCall huge_id = Call(ModelWithNodeNames("n"), "m.onnx", "fp16");
  huge_id.spec.set_request_id(std::string(100000, 'r'));
  out = RunBuild(channel_, huge_id);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("spec.request_id"));

  BuildCall huge_preset = Call(ModelWithNodeNames("n"), "m.onnx", std::string(100000, 'p'));
  out = RunBuild(channel_, huge_preset);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("unknown preset"));
  EXPECT_LE(out.status.error_message().size(), 1024u);

  testing::BuildOutcome watch = testing::Watch(channel_, std::string(200000, 'w'));
  EXPECT_EQ(watch.status.error_code(), grpc::StatusCode::NOT_FOUND);
  ExpectServesAGoodBuild();
}

// A reused request id returned another client's engine: the server matched on the id alone.
// Now the id rejoins only a build of the same spec; another model under that id is
// ALREADY_EXISTS with nothing of the first build's, during that build and after it.
TEST_F(HostileTest, ReusedRequestIdNeverReturnsAnotherModelsEngine) {
  Start();
  std::string model_a = ModelWithNodeNames("a");
  std::string model_b = ModelWithNodeNames("bb");
  BuildCall a = Call(model_a, "a.onnx", "fp16");
  a.spec.set_request_id("ci-job-7");
  BuildOutcome out_a = RunBuild(channel_, a);
  ASSERT_TRUE(out_a.status.ok()) << out_a.status.error_message();

  BuildCall b = Call(model_b, "b.onnx", "fp16");
  b.spec.set_request_id("ci-job-7");
  BuildOutcome out_b = RunBuild(channel_, b);
  EXPECT_EQ(out_b.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(out_b.status.error_message(), HasSubstr("request_id 'ci-job-7'"));
  EXPECT_TRUE(out_b.engine.empty());
  EXPECT_TRUE(out_b.build_id.empty());

  // Another policy for the same model is another spec too.
  BuildCall a_fp32 = Call(model_a, "a.onnx", "fp32");
  a_fp32.spec.set_request_id("ci-job-7");
  EXPECT_EQ(RunBuild(channel_, a_fp32).status.error_code(), grpc::StatusCode::ALREADY_EXISTS);

  // The same spec (a retry) still rejoins, without uploading again.
  BuildCall retry = a;
  retry.upload = false;
  BuildOutcome again = RunBuild(channel_, retry);
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.build_id, out_a.build_id);
  EXPECT_EQ(again.engine, out_a.engine);

  // While the first build is still running. (A finished build is released just after its
  // client sees the end of the stream: wait for that, so that the count below is the slow
  // build's.)
  ASSERT_TRUE(WaitFor([&] { return server_->LiveBuilds() == 0; }, 10));
  BuildCall slow = SlowCall(1500);
  slow.spec.set_request_id("ci-job-8");
  BuildOutcome out_slow;
  std::thread t([&] { out_slow = RunBuild(channel_, slow); });
  ASSERT_TRUE(WaitFor([&] { return server_->LiveBuilds() == 1; }, 10));
  BuildCall during = Call(model_b, "b.onnx", "fp16");
  during.spec.set_request_id("ci-job-8");
  BuildOutcome out_during = RunBuild(channel_, during);
  t.join();
  ASSERT_TRUE(out_slow.status.ok()) << out_slow.status.error_message();
  EXPECT_EQ(out_during.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_TRUE(out_during.engine.empty());
  ExpectServesAGoodBuild();
}

// Nine Build streams that sent a spec and then nothing held every place of a --workers 1
// --queue 8 server: every other build was RESOURCE_EXHAUSTED for as long as they stayed open.
// Uploads no longer take queue places, and an idle upload fails after --upload-idle-seconds.
TEST_F(HostileTest, IdleUploadsDoNotStarveTheService) {
  Start([](ServerConfig& c) {
    c.workers = 1;
    c.queue = 8;
    c.upload_idle_seconds = 2;
  });
  constexpr int kIdle = 9;
  std::vector<BuildOutcome> idle(kIdle);
  std::vector<std::thread> threads;
  for (int i = 0; i < kIdle; ++i) {
    BuildCall call = Call(ModelWithNodeNames("idle" + std::to_string(i)), "idle.onnx", "fp16");
    call.stop_after = 0;  // the spec, then nothing, with the stream held open
    call.after_stop = BuildCall::AfterStop::kHold;
    call.deadline = std::chrono::milliseconds(60000);
    threads.emplace_back([&, call, i] { idle[i] = RunBuild(channel_, call); });
  }
  ASSERT_TRUE(WaitFor([&] { return server_->LiveBuilds() == kIdle; }, 10));
  // While all nine hold their streams, a real build gets through.
  ExpectServesAGoodBuild();
  for (auto& t : threads) t.join();
  for (const BuildOutcome& o : idle) {
    EXPECT_EQ(o.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << o.status.error_message();
    EXPECT_THAT(o.status.error_message(), HasSubstr("--upload-idle-seconds"));
  }
}

// Uploads have a limit of their own (--max-uploads), and the places come back when idle
// uploads time out.
TEST_F(HostileTest, UploadLimitIsSeparateAndRecovers) {
  Start([](ServerConfig& c) {
    c.max_uploads = 2;
    c.upload_idle_seconds = 1;
  });
  std::vector<BuildOutcome> idle(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    BuildCall call = Call(ModelWithNodeNames("held" + std::to_string(i)), "held.onnx", "fp16");
    call.stop_after = 0;
    call.after_stop = BuildCall::AfterStop::kHold;
    threads.emplace_back([&, call, i] { idle[i] = RunBuild(channel_, call); });
  }
  ASSERT_TRUE(WaitFor([&] { return server_->LiveBuilds() == 2; }, 10));
  BuildOutcome refused =
      RunBuild(channel_, Call(ModelWithNodeNames("third"), "third.onnx", "fp16"));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.status.error_message(), HasSubstr("--max-uploads 2"));
  for (auto& t : threads) t.join();
  ExpectServesAGoodBuild();
}

}  // namespace
}  // namespace kiln::server
