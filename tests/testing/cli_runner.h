// Runs a command-line program under `timeout` with its output captured, for tests of the real
// binaries: how it exited (code, signal, timeout) and what it printed.
#pragma once

#include <string>
#include <vector>

#include "tests/testing/onnx_models.h"

namespace kiln::testing {

/// How a command ended and what it printed.
struct CliResult {
  bool exited = false;  // false: killed by a signal
  int exit_code = -1;   // 124: `timeout` killed it
  int signal = 0;
  std::string out, err;
};

/// Runs `timeout --kill-after=5 SECONDS BIN ARGS...`, stdout and stderr captured in files of
/// `dir`.
CliResult RunBinary(const TempDir& dir, const std::string& bin,
                    const std::vector<std::string>& args, int seconds = 60);

/// "exited=1 code=0 signal=0" and both outputs, for failure messages.
std::string Describe(const CliResult& r);

/// The whole contents of a file ("" when missing).
std::string Slurp(const std::string& path);

}  // namespace kiln::testing
