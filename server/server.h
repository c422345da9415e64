// kiln-server as an object: the gRPC server, the health service, the build manager. main.cc runs
// one in a process; tests may run one in-process (its workers are still child processes of the
// worker binary named in the config).
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "grpcpp/server.h"
#include "server/build_manager.h"
#include "server/config.h"
#include "server/converter_service.h"
#include "spdlog/logger.h"

namespace kiln::server {

/// A running kiln-server.
class KilnServer {
 public:
  explicit KilnServer(ServerConfig config);
  ~KilnServer();

  /// Binds --listen (writes --port-file), starts serving and marks the health service SERVING.
  absl::Status Start();
  /// The bound port.
  int port() const { return port_; }
  /// Graceful stop: health NOT_SERVING, new builds refused with UNAVAILABLE, running builds may
  /// finish for --drain-seconds, then the rest are cancelled; then the server shuts down.
  void Drain();
  /// Immediate stop (cancels all builds).
  void Shutdown();
  /// Builds admitted and not yet fully released (for tests and logs).
  int LiveBuilds() { return manager_ ? manager_->LiveBuilds() : 0; }
  BuildManager* manager() { return manager_.get(); }

 private:
  ServerConfig config_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<BuildManager> manager_;
  std::unique_ptr<ConverterService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace kiln::server
