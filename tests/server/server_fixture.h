// The in-process kiln-server fixture of the server tests: a server with test hooks on a free
// loopback port, a channel to it, and the checks every test ends with (the server still
// answers; every build was released).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/server/server_harness.h"
#include "tests/testing/onnx_models.h"

namespace kiln::server {

using testing::BuildCall;
using testing::BuildOutcome;
using testing::RunBuild;
using testing::SpecFor;
using testing::WaitFor;

constexpr char kLnModel[] = "tests/models/ln_overflow_classifier/model.onnx";
constexpr char kMobileNet[] = "tests/models/mobilenet_tiny/model.onnx";

class ServerTest : public ::testing::Test {
 protected:
  // Starts a server with test hooks, 2 workers and a queue of 4, plus `tweak`.
  void Start(const std::function<void(ServerConfig&)>& tweak = nullptr) {
    ServerConfig c;
    c.listen = "127.0.0.1:0";
    c.workers = 2;
    c.queue = 4;
    c.enable_test_hooks = true;
    c.worker_binary = KILN_SERVER_BIN;
    c.max_model_bytes = 4 << 20;
    c.work_dir = work_.File("work");
    c.worker_memory_mb = 2048;
    if (tweak) tweak(c);
    config_ = c;
    server_ = std::make_unique<KilnServer>(c);
    ASSERT_TRUE(server_->Start().ok());
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
  }

  void TearDown() override {
    if (!server_) return;
    // Still healthy, and everything released.
    EXPECT_TRUE(testing::ListPresets(channel_, config_.token).ok());
    EXPECT_TRUE(WaitFor([&] { return server_->LiveBuilds() == 0; }, 10))
        << server_->LiveBuilds() << " build(s) still live";
    server_.reset();
  }

  BuildCall Call(const std::string& model, const std::string& name,
                 const std::string& policy = "") {
    BuildCall call;
    call.model = model;
    call.spec = SpecFor(model, name, policy);
    call.token = config_.token;
    return call;
  }

  // A build that the worker stalls in (test hook) until cancelled or `ms` pass.
  BuildCall SlowCall(int ms = 60000) {
    return Call(testing::ReadRepoFile(kMobileNet), "__kiln_test_slow_" + std::to_string(ms) + "__");
  }

  // A worker of a running build is up: its test hook has logged.
  static bool WorkerLogged(const v1::BuildEvent& e) {
    return e.has_log() && absl::StrContains(e.log().text(), "test hook");
  }

  kiln::testing::TempDir work_;
  ServerConfig config_;
  std::unique_ptr<KilnServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace kiln::server
