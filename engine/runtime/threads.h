// Thread control of the runtime (DESIGN.md §3): the kernels' OpenMP thread count.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace kiln::runtime {

/// Sets the threads every following kernel run may use (`--threads`); 0 keeps the default
/// (OMP_NUM_THREADS, else one per core). InvalidArgument for a negative count.
absl::Status SetThreads(int threads);

/// The threads a kernel run may use now.
int Threads();

/// Makes waiting OpenMP threads spin briefly and then sleep, or sleep at once on a busy machine,
/// unless the user chose otherwise: when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, sets
/// GOMP_SPINCOUNT (omp_wait.cc gives the values and their measurements: 0 when
/// `always_passive` or another task keeps a CPU busy as the program starts, else a bounded spin)
/// and executes the program again (argv as given to main), since libgomp reads its environment
/// once, when it is loaded. Call first thing in an executable's main, before any thread starts;
/// returns when no new execution is needed, or when it cannot be done (exec fails; the program
/// was started through the dynamic loader, `ld-linux-x86-64.so.2 ... kiln`): the program then
/// runs with libgomp's defaults.
///
/// Why: libgomp's default lets a waiting thread spin up to 300,000 times at each fork and join;
/// on a busy machine (a CI farm, a server running several builds, one busy process beside a
/// 2-thread run on 2 cores) a thread spinning while its partner is descheduled stalls every
/// parallel kernel by up to a time slice (ResNet-50 at 2 threads: 1,120 ms where it runs in 60),
/// and a passive wait (a futex sleep at once) costs a wake-up per kernel on an idle one (PP-OCRv4
/// det at 2 threads: 27 ms against 11.5). Users who own the machine set OMP_WAIT_POLICY=active,
/// users of a busy one OMP_WAIT_POLICY=passive, or GOMP_SPINCOUNT. Embedders of the engine
/// library get libgomp's defaults unless they set these themselves.
void UseBoundedOmpWait(char** argv, bool always_passive = false);

/// How waiting OpenMP threads wait in this process: "spin 1000 then sleep (default)", "passive
/// (default: a busy machine)", the user's OMP_WAIT_POLICY / GOMP_SPINCOUNT setting, or
/// libgomp's default.
std::string WaitPolicy();

}  // namespace kiln::runtime
