// Transport security and bearer-token authentication of kiln-server.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"
#include "server/config.h"

namespace kiln::server {

/// Compares two tokens in time that depends only on their lengths, not on where they differ.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

/// Checks the call's `authorization: Bearer TOKEN` metadata against `token`. An empty `token`
/// disables authentication. UNAUTHENTICATED (missing or wrong token) or OK.
absl::Status CheckBearerToken(const grpc::ServerContextBase& context, const std::string& token);

/// Insecure credentials, or TLS from the config's PEM files (requiring and verifying client
/// certificates when --tls-client-ca is given). InvalidArgument naming an unreadable file.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerConfig& config);

}  // namespace kiln::server
