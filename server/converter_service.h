// The kiln.v1.Converter service on gRPC's callback API: a ServerBidiReactor per Build call (the
// upload in, the build's events out, concurrently), a ServerWriteReactor per WatchBuild call,
// and unary reactors for CancelBuild and ListPresets. Every call checks the bearer token first.
#pragma once

#include <atomic>
#include <string>

#include "kiln/v1/service.grpc.pb.h"
#include "server/build_manager.h"
#include "server/config.h"

namespace kiln::server {

/// The service implementation; `manager` must outlive it.
class ConverterService final : public v1::Converter::CallbackService {
 public:
  ConverterService(BuildManager* manager, const ServerConfig& config)
      : manager_(manager), config_(config) {}

  grpc::ServerBidiReactor<v1::BuildRequest, v1::BuildEvent>* Build(
      grpc::CallbackServerContext* context) override;
  grpc::ServerWriteReactor<v1::BuildEvent>* WatchBuild(
      grpc::CallbackServerContext* context, const v1::WatchBuildRequest* request) override;
  grpc::ServerUnaryReactor* CancelBuild(grpc::CallbackServerContext* context,
                                        const v1::CancelBuildRequest* request,
                                        v1::CancelBuildResponse* response) override;
  grpc::ServerUnaryReactor* ListPresets(grpc::CallbackServerContext* context,
                                        const v1::ListPresetsRequest* request,
                                        v1::ListPresetsResponse* response) override;

  /// Build and WatchBuild streams not yet done (for a graceful shutdown).
  int open_streams() const { return open_streams_.load(); }

 private:
  std::atomic<int> open_streams_{0};
  BuildManager* manager_;
  const ServerConfig& config_;
};

}  // namespace kiln::server
