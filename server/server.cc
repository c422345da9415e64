#include "server/server.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "server/auth.h"
#include "server/files.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

std::shared_ptr<spdlog::logger> ServerLogger() {
  auto log = spdlog::get("kiln-server");
  if (!log) {
    log = spdlog::stderr_color_mt("kiln-server");
    log->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] %^%l%$ %v");
  }
  return log;
}

}  // namespace

KilnServer::KilnServer(ServerConfig config) : config_(std::move(config)), log_(ServerLogger()) {
  if (config_.worker_binary.empty()) {
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n > 0) config_.worker_binary.assign(buf, n);
  }
}

KilnServer::~KilnServer() { Shutdown(); }

absl::Status KilnServer::Start() {
  manager_ = std::make_unique<BuildManager>(config_, log_);
  if (absl::Status st = manager_->Init(); !st.ok()) return st;
  auto creds = MakeServerCredentials(config_);
  if (!creds.ok()) return creds.status();
  if (config_.reflection) {
    // Debian's libgrpc++_reflection registers its plugin from a static initializer as soon as it
    // is loaded, so it is loaded only when asked for (it is not linked).
    if (!dlopen("libgrpc++_reflection.so.1.51", RTLD_NOW | RTLD_GLOBAL)) {
      return absl::FailedPreconditionError(
          absl::StrCat("--reflection: cannot load libgrpc++_reflection: ", dlerror()));
    }
  }
  grpc::EnableDefaultHealthCheckService(true);
  service_ = std::make_unique<ConverterService>(manager_.get(), config_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config_.listen, *creds, &port_);
  builder.RegisterService(service_.get());
  // Model chunks are at most 1 MiB; a sample set is one message of at most --max-sample-bytes.
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::max<int64_t>(config_.max_sample_bytes, kMaxChunkBytes) + (64 << 10)));
  // Each read is one slice of at most 16 KiB (a 1 MiB chunk in 64 reads): what an idle
  // connection keeps as its next read buffer (main.cc turns off the read path that ignores it).
  builder.AddChannelArgument(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 16 << 10);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", config_.listen));
  }
  server_->GetHealthCheckService()->SetServingStatus(true);
  if (!config_.port_file.empty()) {
    if (absl::Status st =
            WriteFileAtomic(config_.port_file, absl::StrCat(port_, "\n"), kPrivateFileMode);
        !st.ok()) {
      return st;
    }
  }
  log_->info("serving kiln.v1.Converter on {} (port {}), {} worker(s), queue {}{}{}",
             config_.listen, port_, config_.workers, config_.queue,
             config_.tls_cert.empty() ? "" : ", TLS", config_.token.empty() ? "" : ", token auth");
  return absl::OkStatus();
}

void KilnServer::Drain() {
  if (!server_) return;
  log_->info("draining: refusing new builds, waiting up to {} s for {} live build(s)",
             config_.drain_seconds, manager_->LiveBuilds());
  server_->GetHealthCheckService()->SetServingStatus(false);
  manager_->SetDraining();
  if (!manager_->WaitIdle(absl::Now() + absl::Seconds(config_.drain_seconds))) {
    log_->warn("drain deadline reached: cancelling {} build(s)", manager_->LiveBuilds());
    manager_->CancelAll(absl::UnavailableError("cancelled: the server is shutting down"));
    manager_->WaitIdle(absl::Now() + absl::Seconds(10));
  }
  Shutdown();
}

void KilnServer::Shutdown() {
  if (manager_) {
    manager_->SetDraining();
    manager_->CancelAll(absl::UnavailableError("cancelled: the server is shutting down"));
  }
  if (server_) {
    // Streams still open (a client reading the last engine chunks slowly) get up to 5 s to
    // finish; then the server stops at once. (gRPC's own Shutdown(deadline) waits out the whole
    // deadline whenever a client is merely connected, so it gets no grace of its own.)
    auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (service_ && service_->open_streams() > 0 && std::chrono::steady_clock::now() < grace) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    server_.reset();
    log_->info("stopped");
  }
  service_.reset();
  manager_.reset();
}

}  // namespace kiln::server
