// Thread control of the runtime (DESIGN.md §3): the kernels' OpenMP thread count.
#pragma once

#include "absl/status/status.h"

namespace kiln::runtime {

/// Sets the threads every following kernel run may use (`--threads`); 0 keeps the default
/// (OMP_NUM_THREADS, else one per core). InvalidArgument for a negative count.
absl::Status SetThreads(int threads);

/// The threads a kernel run may use now.
int Threads();

}  // namespace kiln::runtime
