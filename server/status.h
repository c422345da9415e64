// The one place where Kiln's absl::Status becomes a grpc::Status (CONVENTIONS.md, Errors).
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace kiln::server {

/// The longest status message sent to a client, in bytes (longer ones are cut, saying so).
inline constexpr size_t kMaxStatusMessageBytes = 2048;

/// Converts `status` to a grpc::Status with the same code and message (at most
/// kMaxStatusMessageBytes of it). The canonical codes of absl and gRPC share their numbering;
/// an unknown code becomes UNKNOWN.
grpc::Status ToGrpcStatus(const absl::Status& status);

/// The reverse mapping, for the server's own bookkeeping (the code and message are kept).
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace kiln::server
