#include "server/status.h"

#include <string>

#include "engine/common/status.h"

namespace kiln::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  int code = static_cast<int>(status.code());
  // absl::StatusCode and grpc::StatusCode both follow google.rpc.Code (0..16).
  grpc::StatusCode g =
      (code >= 0 && code <= 16) ? static_cast<grpc::StatusCode>(code) : grpc::StatusCode::UNKNOWN;
  // The message travels in the trailing metadata (grpc-message, percent-encoded: up to three
  // bytes a byte), whose size a client limits (8 KiB by default); past it the client sees
  // RESOURCE_EXHAUSTED "received trailing metadata size exceeds limit" instead of the error.
  // Errors quote what clients send in excerpts; this bound holds whatever a message holds.
  return grpc::Status(g, Excerpt(status.message(), kMaxStatusMessageBytes));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  int code = static_cast<int>(status.error_code());
  absl::StatusCode a =
      (code >= 0 && code <= 16) ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kUnknown;
  return absl::Status(a, status.error_message());
}

}  // namespace kiln::server
