#include "engine/runtime/threads.h"

#include <omp.h>

#include "absl/strings/str_cat.h"

namespace kiln::runtime {

absl::Status SetThreads(int threads) {
  if (threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("thread count ", threads, " is negative"));
  }
  if (threads > 0) omp_set_num_threads(threads);
  return absl::OkStatus();
}

int Threads() { return omp_get_max_threads(); }

}  // namespace kiln::runtime
