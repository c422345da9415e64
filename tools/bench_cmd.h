// `kiln bench ENGINE`: engine latency (min, median, p90) over N runs after warm-up, with the
// thread count, and the engine's load time; and the `--threads` flag of the run commands.
#pragma once

#include "absl/status/status.h"
#include "tools/cli_args.h"

namespace kiln::tools {

/// `kiln bench ENGINE [--inputs DIR | --seed N ...] [--runs N] [--warmup N]
/// [--threads N]`.
absl::Status Bench(int argc, char** argv);

/// Applies `--threads N` (when given) to the kernels' thread count.
absl::Status ApplyThreads(const Args& args);

}  // namespace kiln::tools
