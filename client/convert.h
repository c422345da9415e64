// The conversion itself: one Build call (with bounded retries on UNAVAILABLE before any event),
// the engine and reports written, the summary printed. Speaks only the kiln.v1 proto.
#pragma once

#include <string>

#include "client/client_options.h"
#include "grpcpp/support/status.h"

namespace kiln::client {

/// The name of a gRPC status code ("RESOURCE_EXHAUSTED").
const char* StatusCodeName(grpc::StatusCode code);

/// Runs the conversion the options describe; returns the process exit code (ExitCode) and has
/// printed the reason of any failure on stderr.
int RunConvert(const ClientOptions& options);

}  // namespace kiln::client
