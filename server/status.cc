#include "server/status.h"

#include <string>

namespace kiln::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  int code = static_cast<int>(status.code());
  // absl::StatusCode and grpc::StatusCode both follow google.rpc.Code (0..16).
  grpc::StatusCode g =
      (code >= 0 && code <= 16) ? static_cast<grpc::StatusCode>(code) : grpc::StatusCode::UNKNOWN;
  return grpc::Status(g, std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  int code = static_cast<int>(status.error_code());
  absl::StatusCode a =
      (code >= 0 && code <= 16) ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kUnknown;
  return absl::Status(a, status.error_message());
}

}  // namespace kiln::server
