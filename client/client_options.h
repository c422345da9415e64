// Command line of convert-client (DESIGN.md §10): parsing, validation and the gRPC target built
// from one or several --server addresses. No I/O beyond reading the environment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kiln::client {

/// Process exit codes of convert-client.
enum ExitCode : int {
  kExitOk = 0,
  kExitLocalError = 1,    // a local file could not be read or written
  kExitUsage = 2,         // bad command line
  kExitBuildFailed = 3,   // the server ended the build with an error status
  kExitAccuracyGate = 4,  // --fail-on-accuracy and the report's verdict is FAIL
  kExitUnreachable = 5,   // no replica answered (UNAVAILABLE after the retries)
};

/// Usage errors are InvalidArgument statuses carrying this payload key, so main exits 2.
inline constexpr char kUsagePayload[] = "kiln.client.usage";

/// An InvalidArgument status marked as a usage error; `message` names the flag.
absl::Status UsageError(const std::string& message);

/// True for a status made by UsageError.
bool IsUsageError(const absl::Status& status);

/// Everything the command line says, validated.
struct ClientOptions {
  std::vector<std::string> servers;         // --server (repeatable), as given
  std::string model_path;                   // --model
  std::string output_path;                  // -o
  std::string policy;                       // --policy PRESET
  std::string policy_file;                  // --policy-file F (its text is sent)
  std::vector<std::string> rules;           // --rule, in order
  std::string constraints;                  // --constraints obey|prefer
  std::string fusion;                       // --fusion on|off
  std::string device;                       // --device (empty: the server's default, cpu)
  bool no_fallback = false;                 // --no-fallback
  std::string report_path;                  // --report R.json
  std::string html_path;                    // --html R.html
  std::string inputs_dir;                   // --inputs DIR
  std::optional<uint64_t> seed;             // --seed N
  int32_t samples = 0;                      // --samples N (0: the server's default)
  double atol = 0;                          // --atol (0: the server's default)
  double rtol = 0;                          // --rtol
  absl::Duration timeout = absl::Hours(1);  // --timeout: deadline of the whole call
  std::string token;                        // --token, or $KILN_TOKEN
  std::string tls_ca;                       // --tls-ca CA.pem: TLS with this root
  bool fail_on_accuracy = false;            // --fail-on-accuracy
  std::string request_id;                   // --request-id (generated when empty)
  int max_attempts = 4;  // --retries N + 1: attempts on UNAVAILABLE before any event
  bool quiet = false;    // --quiet: no log lines, only errors and the summary
  bool help = false;     // --help

  /// True when the server should compute the accuracy report.
  bool WantsReport() const {
    return !report_path.empty() || !html_path.empty() || !inputs_dir.empty() || seed.has_value() ||
           samples > 0 || fail_on_accuracy;
  }
};

/// The usage text printed on --help and on usage errors.
const char* UsageText();

/// Parses argv[1..]. Flags take their value as the next argument or after '='
/// (`--timeout=10m`). Errors are usage errors naming the flag.
absl::StatusOr<ClientOptions> ParseArgs(int argc, const char* const* argv);

/// Parses a duration: a positive number with a unit, or several (`90s`, `10m`, `1h30m`,
/// `1.5h`, `500ms`); a bare number is seconds.
absl::StatusOr<absl::Duration> ParseDuration(const std::string& text);

/// The gRPC target for the --server list: one address as given (`HOST:PORT`, `dns:///...`,
/// `ipv4:...`); several addresses as one `ipv4:` / `ipv6:` target, hostnames resolved here.
absl::StatusOr<std::string> ChannelTarget(const std::vector<std::string>& servers);

/// True when the target names several backends (several addresses or a dns:/// name), so the
/// channel should balance with round_robin.
bool WantsRoundRobin(const std::vector<std::string>& servers);

}  // namespace kiln::client
