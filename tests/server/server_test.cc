// kiln-server in-process (its workers are real child processes of the kiln-server binary), driven
// by a C++ gRPC client on loopback: successful builds, hostile uploads, cancellation, limits, the
// cache, WatchBuild and auth. Every test ends by checking that the server still answers and that
// every build was released (live builds back to zero).
#include "server/server.h"

#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "engine/builder/builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/server_fixture.h"
#include "tests/server/server_harness.h"
#include "tests/testing/onnx_models.h"

namespace kiln::server {
namespace {

using testing::BuildCall;
using testing::BuildOutcome;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using testing::RunBuild;
using testing::SpecFor;
using testing::WaitFor;

TEST_F(ServerTest, BuildMatchesLocalBuildBitForBit) {
  Start();
  std::string model = testing::ReadRepoFile(kLnModel);
  BuildCall call = Call(model, "ln.onnx", "fp32-layernorm");
  call.chunk_bytes = 50000;  // several chunks
  BuildOutcome out = RunBuild(channel_, call);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();

  builder::BuildOptions opts;
  opts.policy = "fp32-layernorm";
  auto local = builder::BuildEngine(model, opts, nullptr);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_TRUE(out.chunks_in_order);
  EXPECT_EQ(out.engine, local->blob);
  EXPECT_EQ(out.result.engine_sha256(), testing::Sha256Hex(local->blob));
  EXPECT_EQ(out.result.engine_size(), local->blob.size());
  EXPECT_EQ(out.result.model_sha256(), testing::Sha256Hex(model));
  EXPECT_EQ(out.result.build_id(), out.build_id);
  EXPECT_FALSE(out.result.cache_hit());
  EXPECT_THAT(out.result.summary(), HasSubstr("source nodes"));
  EXPECT_EQ(out.Count(v1::BuildEvent::kAccepted), 1);
  EXPECT_GT(out.Count(v1::BuildEvent::kStage), 2);
  EXPECT_GT(out.Count(v1::BuildEvent::kLog), 0);
  EXPECT_GT(out.Count(v1::BuildEvent::kDecision), 0);
  EXPECT_EQ(out.events.back().event_case(), v1::BuildEvent::kResult);
  // Some LayerNorm node is pinned to fp32 by the preset.
  bool fp32_ln = false;
  for (const auto& e : out.events) {
    fp32_ln |= e.has_decision() && e.decision().effective_precision() == "fp32" &&
               absl::StrContains(e.decision().rule(), "layernorm");
  }
  EXPECT_TRUE(fp32_ln);
}

TEST_F(ServerTest, ReportIsStreamed) {
  Start();
  BuildCall call = Call(testing::ReadRepoFile(kMobileNet), "m.onnx", "fp16");
  call.spec.set_report(true);
  call.spec.set_seed(3);
  BuildOutcome out = RunBuild(channel_, call);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_EQ(out.Count(v1::BuildEvent::kReport), 1);
  EXPECT_FALSE(out.engine.empty());
}

TEST_F(ServerTest, EmptyUploadIsInvalid) {
  Start();
  BuildOutcome out = RunBuild(channel_, Call("", "empty.onnx"));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("model_size"));
}

TEST_F(ServerTest, TruncatedModelIsInvalid) {
  Start();
  std::string model = testing::ReadRepoFile(kMobileNet);
  BuildOutcome out = RunBuild(channel_, Call(model.substr(0, model.size() / 2), "cut.onnx"));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr(out.build_id));
}

TEST_F(ServerTest, TextFileIsInvalid) {
  Start();
  BuildOutcome out = RunBuild(channel_, Call("this is not a model\n", "notes.txt"));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServerTest, DeclaredSizeOverLimitIsRefusedBeforeUpload) {
  Start();
  BuildCall call = Call(std::string(5 << 20, 'x'), "big.onnx");
  BuildOutcome out = RunBuild(channel_, call);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("model_size"));
  EXPECT_TRUE(out.build_id.empty());  // refused at the spec: no build was admitted
}

TEST_F(ServerTest, DigestMismatchIsInvalid) {
  Start();
  std::string model = testing::ReadRepoFile(kMobileNet);
  BuildCall call = Call(model, "m.onnx");
  call.spec.set_model_sha256(testing::Sha256Hex("something else"));
  BuildOutcome out = RunBuild(channel_, call);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("model_sha256"));
  EXPECT_THAT(out.status.error_message(), HasSubstr(out.build_id));
  // A malformed digest is refused at the spec.
  call.spec.set_model_sha256("XYZ");
  out = RunBuild(channel_, call);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("model_sha256"));
}

TEST_F(ServerTest, ShortUploadIsInvalid) {
  Start();
  std::string model = testing::ReadRepoFile(kMobileNet);
  BuildCall call = Call(model, "m.onnx");
  call.stop_after = 1000;
  BuildOutcome out = RunBuild(channel_, call);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("model_size"));
}

TEST_F(ServerTest, PolicySyntaxErrorHasLineAndColumn) {
  Start();
  BuildCall call = Call(testing::ReadRepoFile(kMobileNet), "m.onnx");
  call.spec.set_policy_text("base = fp16\nop:Conv fp32\n");
  BuildOutcome out = RunBuild(channel_, call);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), MatchesRegex(".*policy_text:2:[0-9]+.*"));
}

TEST_F(ServerTest, RuleMatchingNothingFailsUnderObey) {
  Start();
  BuildCall call = Call(testing::ReadRepoFile(kMobileNet), "m.onnx", "fp16");
  call.spec.add_rules("op:LayerNormalization = fp32");
  BuildOutcome out = RunBuild(channel_, call);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(out.status.error_message(), HasSubstr("matches no node"));
  // Under prefer it is a warning and the build succeeds.
  call.spec.set_constraints("prefer");
  out = RunBuild(channel_, call);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_GT(out.Count(v1::BuildEvent::kWarning), 0);
}

TEST_F(ServerTest, UnsupportedOpIsUnimplemented) {
  Start();
  onnx::ModelProto m = kiln::testing::AddReluMulModel();
  m.mutable_graph()->mutable_node(1)->set_op_type("Bernoulli");
  std::string model = kiln::testing::SerializeModel(m);
  BuildOutcome out = RunBuild(channel_, Call(model, "bernoulli.onnx"));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_THAT(out.status.error_message(), HasSubstr("Bernoulli"));
}

TEST_F(ServerTest, DisconnectMidUploadReleasesTheBuild) {
  Start();
  BuildCall call = Call(testing::ReadRepoFile(kLnModel), "ln.onnx");
  call.chunk_bytes = 10000;
  call.stop_after = 30000;
  call.after_stop = BuildCall::AfterStop::kCancel;
  BuildOutcome out = RunBuild(channel_, call);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor([&] { return server_->LiveBuilds() == 0; }, 5));
  // No staging left behind.
  EXPECT_TRUE(WaitFor([&] { return std::filesystem::is_empty(config_.work_dir); }, 5));
}

TEST_F(ServerTest, CancelMidBuildStopsTheWorker) {
  Start();
  BuildCall call = SlowCall();
  std::string id;
  std::atomic<bool> cancelled{false};
  std::thread canceller;
  call.on_event = [&](const v1::BuildEvent& e, grpc::ClientContext&) {
    if (e.has_accepted()) id = e.accepted().build_id();
    if (WorkerLogged(e) && !cancelled.exchange(true)) {
      EXPECT_EQ(server_->LiveBuilds(), 1);
      canceller = std::thread([&, id] {
        auto stub = v1::Converter::NewStub(channel_);
        grpc::ClientContext ctx;
        v1::CancelBuildRequest req;
        req.set_build_id(id);
        v1::CancelBuildResponse resp;
        EXPECT_TRUE(stub->CancelBuild(&ctx, req, &resp).ok());
        EXPECT_TRUE(resp.cancelled());
      });
    }
  };
  auto t0 = std::chrono::steady_clock::now();
  BuildOutcome out = RunBuild(channel_, call);
  canceller.join();
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_THAT(out.status.error_message(), HasSubstr("CancelBuild"));
  // Long before the hook's 60 s: the worker was killed, not waited for.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  EXPECT_TRUE(WaitFor([&] { return server_->LiveBuilds() == 0; }, 5));
  // Cancelling a finished build says so; an unknown id is NOT_FOUND.
  auto stub = v1::Converter::NewStub(channel_);
  v1::CancelBuildRequest req;
  v1::CancelBuildResponse resp;
  req.set_build_id(id);
  grpc::ClientContext c1;
  EXPECT_TRUE(stub->CancelBuild(&c1, req, &resp).ok());
  EXPECT_FALSE(resp.cancelled());
  req.set_build_id("b-nope");
  grpc::ClientContext c2;
  EXPECT_EQ(stub->CancelBuild(&c2, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServerTest, ClientCancelMidBuildStopsTheWorker) {
  Start();
  BuildCall call = SlowCall();
  call.on_event = [&](const v1::BuildEvent& e, grpc::ClientContext& ctx) {
    if (WorkerLogged(e)) ctx.TryCancel();
  };
  BuildOutcome out = RunBuild(channel_, call);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor([&] { return server_->LiveBuilds() == 0; }, 5));
}

TEST_F(ServerTest, DeadlineShorterThanTheBuild) {
  Start();
  BuildCall call = SlowCall();
  call.deadline = std::chrono::milliseconds(1500);
  BuildOutcome out = RunBuild(channel_, call);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(WaitFor([&] { return server_->LiveBuilds() == 0; }, 5));
}

TEST_F(ServerTest, MoreBuildsThanWorkersPlusQueue) {
  Start([](ServerConfig& c) {
    c.workers = 1;
    c.queue = 1;
  });
  constexpr int kCalls = 5;
  std::vector<BuildOutcome> outs(kCalls);
  std::vector<std::thread> threads;
  for (int i = 0; i < kCalls; ++i) {
    // Distinct models (graph names), so that no request joins another.
    onnx::ModelProto m = kiln::testing::AddReluMulModel();
    m.mutable_graph()->set_name("g" + std::to_string(i));
    BuildCall call = Call(kiln::testing::SerializeModel(m), "__kiln_test_slow_1500__");
    threads.emplace_back([&, call, i] { outs[i] = RunBuild(channel_, call); });
  }
  for (auto& t : threads) t.join();
  int ok = 0, exhausted = 0, queued = 0;
  for (const auto& o : outs) {
    ok += o.status.ok();
    exhausted += o.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
    queued += o.Count(v1::BuildEvent::kQueuePosition) > 0;
  }
  EXPECT_EQ(ok + exhausted, kCalls);  // none lost
  EXPECT_GE(ok, 2);                   // one running + one queued at least
  EXPECT_GE(exhausted, 1);
  EXPECT_GE(queued, 1);
}

TEST_F(ServerTest, WorkerCrashIsInternalAndTheServerKeepsServing) {
  Start();
  BuildOutcome out =
      RunBuild(channel_, Call(testing::ReadRepoFile(kMobileNet), "__kiln_test_crash__"));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_THAT(out.status.error_message(), HasSubstr("crashed"));
  out = RunBuild(channel_, Call(testing::ReadRepoFile(kMobileNet), "m.onnx"));
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();
}

TEST_F(ServerTest, WorkerMemoryLimitIsResourceExhausted) {
  Start([](ServerConfig& c) { c.worker_memory_mb = 512; });
  BuildOutcome out =
      RunBuild(channel_, Call(testing::ReadRepoFile(kMobileNet), "__kiln_test_memory__"));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(ServerTest, WorkerCpuLimitIsResourceExhausted) {
  Start([](ServerConfig& c) { c.worker_cpu_seconds = 1; });
  BuildOutcome out =
      RunBuild(channel_, Call(testing::ReadRepoFile(kMobileNet), "__kiln_test_spin__"));
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(out.status.error_message(), HasSubstr("CPU"));
}

TEST_F(ServerTest, CacheHitIsAnsweredBeforeTheUpload) {
  Start([&](ServerConfig& c) { c.cache_dir = work_.File("cache"); });
  std::string model = testing::ReadRepoFile(kLnModel);
  BuildOutcome first = RunBuild(channel_, Call(model, "ln.onnx", "fp32-layernorm"));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_FALSE(first.cache_hit);
  BuildCall again = Call(model, "ln.onnx", "fp32-layernorm");
  again.upload = false;  // only the spec
  BuildOutcome hit = RunBuild(channel_, again);
  ASSERT_TRUE(hit.status.ok()) << hit.status.error_message();
  EXPECT_TRUE(hit.cache_hit);
  EXPECT_TRUE(hit.result.cache_hit());
  EXPECT_EQ(hit.engine, first.engine);
  EXPECT_EQ(hit.result.engine_sha256(), first.result.engine_sha256());
}

TEST_F(ServerTest, CorruptCacheEntryIsEvictedAndRebuilt) {
  std::string cache = work_.File("cache");
  Start([&](ServerConfig& c) { c.cache_dir = cache; });
  std::string model = testing::ReadRepoFile(kLnModel);
  BuildOutcome first = RunBuild(channel_, Call(model, "ln.onnx", "fp32-layernorm"));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  // Flip one byte in the middle of the cached blob.
  std::string blob_path;
  for (const auto& f : std::filesystem::directory_iterator(cache)) {
    if (f.path().extension() == ".kiln") blob_path = f.path();
  }
  ASSERT_FALSE(blob_path.empty());
  {
    std::fstream f(blob_path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(first.engine.size() / 2);
    char c = first.engine[first.engine.size() / 2] ^ 0x5a;
    f.write(&c, 1);
  }
  BuildOutcome second = RunBuild(channel_, Call(model, "ln.onnx", "fp32-layernorm"));
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_FALSE(second.cache_hit);  // evicted, so built again
  EXPECT_EQ(second.engine, first.engine);
  // The entry is whole again and serves a hit.
  BuildOutcome third = RunBuild(channel_, Call(model, "ln.onnx", "fp32-layernorm"));
  ASSERT_TRUE(third.status.ok());
  EXPECT_TRUE(third.cache_hit);
  EXPECT_EQ(third.engine, first.engine);
}

TEST_F(ServerTest, IdenticalConcurrentRequestsBuildOnce) {
  Start();
  std::string model = testing::ReadRepoFile(kMobileNet);
  BuildCall call = Call(model, "__kiln_test_slow_1000__");
  BuildOutcome a, b;
  std::thread ta([&] { a = RunBuild(channel_, call); });
  ASSERT_TRUE(WaitFor([&] { return server_->LiveBuilds() == 1; }, 10));
  std::thread tb([&] { b = RunBuild(channel_, call); });
  ta.join();
  tb.join();
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  EXPECT_EQ(a.build_id, b.build_id);
  EXPECT_EQ(a.engine, b.engine);
  // The same request id joins too, even after the build finished.
  call.spec.set_request_id("req-1");
  BuildOutcome c = RunBuild(channel_, call);
  BuildCall retry = call;
  retry.upload = false;
  BuildOutcome d = RunBuild(channel_, retry);
  ASSERT_TRUE(d.status.ok()) << d.status.error_message();
  EXPECT_EQ(c.build_id, d.build_id);
  EXPECT_EQ(d.engine, a.engine);
}

TEST_F(ServerTest, WatchBuildReplaysAndFollows) {
  Start();
  std::string model = testing::ReadRepoFile(kMobileNet);
  BuildOutcome built = RunBuild(channel_, Call(model, "m.onnx", "fp16"));
  ASSERT_TRUE(built.status.ok()) << built.status.error_message();
  BuildOutcome replay = testing::Watch(channel_, built.build_id);
  ASSERT_TRUE(replay.status.ok()) << replay.status.error_message();
  EXPECT_EQ(replay.engine, built.engine);
  EXPECT_EQ(replay.events.size(), built.events.size());
  EXPECT_EQ(replay.result.engine_sha256(), built.result.engine_sha256());
  // Following a running build from another call.
  BuildCall slow = SlowCall(1500);
  std::string id;
  BuildOutcome followed;
  std::thread watcher;
  slow.on_event = [&](const v1::BuildEvent& e, grpc::ClientContext&) {
    if (e.has_accepted()) {
      id = e.accepted().build_id();
      watcher = std::thread([&, id] { followed = testing::Watch(channel_, id); });
    }
  };
  BuildOutcome original = RunBuild(channel_, slow);
  watcher.join();
  ASSERT_TRUE(original.status.ok()) << original.status.error_message();
  ASSERT_TRUE(followed.status.ok()) << followed.status.error_message();
  EXPECT_EQ(followed.engine, original.engine);
  EXPECT_EQ(testing::Watch(channel_, "b-unknown").status.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServerTest, SlowReaderDropsDebugLinesAndCountsThem) {
  Start([](ServerConfig& c) { c.event_buffer = 100; });
  BuildCall call = Call(testing::ReadRepoFile(kMobileNet), "__kiln_test_chatty__");
  bool slept = false;
  call.on_event = [&](const v1::BuildEvent&, grpc::ClientContext&) {
    // Stall on the first event while the worker logs 20000 debug lines.
    if (!slept) std::this_thread::sleep_for(std::chrono::seconds(2));
    slept = true;
  };
  BuildOutcome out = RunBuild(channel_, call);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  EXPECT_GT(out.result.dropped_log_lines(), 0u);
  int debug = 0, info = 0;
  for (const auto& e : out.events) {
    if (!e.has_log()) continue;
    debug += e.log().level() == "debug";
    info += e.log().level() == "info";
  }
  EXPECT_LE(debug, 100 + 1);
  EXPECT_GT(info, 0);  // info lines were kept
  // Every one of the hook's 20000 debug lines was either delivered or counted.
  EXPECT_GE(debug + out.result.dropped_log_lines(), 20000u);
}

TEST_F(ServerTest, BearerToken) {
  Start([](ServerConfig& c) { c.token = "s3cret"; });
  std::string model = testing::ReadRepoFile(kMobileNet);
  EXPECT_EQ(testing::ListPresets(channel_, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(testing::ListPresets(channel_, "wrong").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  v1::ListPresetsResponse presets;
  ASSERT_TRUE(testing::ListPresets(channel_, "s3cret", &presets).ok());
  EXPECT_GE(presets.presets_size(), 6);
  BuildCall call = Call(model, "m.onnx");
  call.token = "";
  EXPECT_EQ(RunBuild(channel_, call).status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  call.token = "s3cre";
  EXPECT_EQ(RunBuild(channel_, call).status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(testing::Watch(channel_, "b-x", "nope").status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  call.token = "s3cret";
  EXPECT_TRUE(RunBuild(channel_, call).status.ok());
}

}  // namespace
}  // namespace kiln::server
