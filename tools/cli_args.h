// Command-line parsing shared by the kiln commands.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::tools {

/// Usage errors are InvalidArgument statuses carrying this payload key, so Main can print
/// usage and exit 2 instead of 1.
inline constexpr char kUsagePayload[] = "kiln.usage";

/// An InvalidArgument status marked as a usage error.
absl::Status UsageError(const std::string& message);

/// Parsed command line: positional arguments and --flags (with or without a value).
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;             // last value of each flag
  std::map<std::string, std::vector<std::string>> all;  // every value, for repeatable flags
};

/// Parses argv[first..]; `known` lists the flags a command takes, `true` when it takes a value.
absl::StatusOr<Args> Parse(int argc, char** argv, int first,
                           const std::map<std::string, bool>& known);

}  // namespace kiln::tools
