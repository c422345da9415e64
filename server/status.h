// The one place where Kiln's absl::Status becomes a grpc::Status (CONVENTIONS.md, Errors).
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace kiln::server {

/// Converts `status` to a grpc::Status with the same code and message. The canonical codes of
/// absl and gRPC share their numbering; an unknown code becomes UNKNOWN.
grpc::Status ToGrpcStatus(const absl::Status& status);

/// The reverse mapping, for the server's own bookkeeping (the code and message are kept).
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace kiln::server
