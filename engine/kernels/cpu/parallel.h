// Kiln's thread pool for its own kernels: loops split among the calling thread and workers, the
// caller taking whatever no worker has started. (oneDNN's primitives keep their OpenMP threads.)
//
// Why not an OpenMP `parallel for`: an OpenMP region ends at a barrier that waits for every
// thread of the team, also one that has not started yet. When a worker's CPU is taken by another
// process (a busy machine, a server running several builds) or answers slowly (a shared vCPU),
// every region waits for it, up to a time slice, and a model of a hundred small kernels pays
// that a hundred times. Here the caller runs its own share and then the pieces no worker has
// claimed, and waits only for pieces already running.
#pragma once

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace kiln::kernels::cpu {

/// Runs body(begin, end) over [0, n) in contiguous pieces and returns when every piece has run.
/// The team is the calling thread and up to omp_get_max_threads() - 1 workers of the calling
/// thread's own pool (started on first use, kept until the thread ends), never more than n.
/// Participant p first takes the pieces of [n * p / team, n * (p + 1) / team) in order (so the
/// split is that of a static schedule, and data stays with the core that wrote it in the kernel
/// before), then pieces of the other shares that nobody has started.
///
/// Runs body(0, n) on the calling thread when `parallel` is false, n < 2, one thread is allowed,
/// or the call is nested (from a body, or inside an OpenMP region). Bodies must give the same
/// numbers whatever the split (each element computed by one piece). An exception from a body (a
/// kernel's scratch out of memory) is rethrown here once the pieces running have ended (the
/// thread that threw takes no more; the kernel's output is then incomplete, its run failed).
///
/// Waiting workers spin and then sleep like the process's OpenMP threads: OMP_WAIT_POLICY and
/// GOMP_SPINCOUNT (runtime/threads.h sets the latter for Kiln's executables) are read when a pool
/// starts.
void ParallelFor(int64_t n, bool parallel,
                 absl::FunctionRef<void(int64_t begin, int64_t end)> body);
inline void ParallelFor(int64_t n, absl::FunctionRef<void(int64_t begin, int64_t end)> body) {
  ParallelFor(n, true, body);
}

/// The team ParallelFor(n, ...) would use from this thread now (1 when it would run serially).
int ParallelTeam(int64_t n, bool parallel = true);

using PieceBody = absl::FunctionRef<void(int64_t begin, int64_t end, int participant)>;

/// ParallelFor for kernels with state per participant: at most `max_team` participants (so
/// scratch sized for max_team suffices), each share taken in `pieces_per_share` pieces (1: a
/// share in one piece, for kernels that carry state from one item to the next), and body told
/// the participant running the piece: 0 (the caller) to team - 1, never two pieces at once.
/// Serially: body(0, n, 0).
void ParallelForTeam(int64_t n, int max_team, int pieces_per_share, const PieceBody& body);

/// While it lives (with `on`), ParallelFor and ParallelForTeam of this thread run their shares on
/// OpenMP teams, one share a thread, as OpenMP loops would. For engines whose other kernels open
/// OpenMP regions (KernelDef::openmp_regions) while OpenMP's threads spin between regions: two
/// sets of threads, each spinning while the other's kernel runs, take turns on the cores at
/// every change of kernel (MobileNetV2 at 8 threads on 16 cores: its two oneDNN convolutions
/// 0.10 -> 0.33 ms, the whole 1.81 -> 2.17 ms), where one set stays warm.
class ScopedOpenMpLoops {
 public:
  explicit ScopedOpenMpLoops(bool on);
  ~ScopedOpenMpLoops();
  ScopedOpenMpLoops(const ScopedOpenMpLoops&) = delete;
  ScopedOpenMpLoops& operator=(const ScopedOpenMpLoops&) = delete;

 private:
  bool saved_;
};

/// Whether KILN_THREAD_POOL=openmp runs every loop on OpenMP teams in this process.
bool ThreadPoolDisabled();

/// Whether waiting OpenMP threads of this process spin before they sleep (OMP_WAIT_POLICY and
/// GOMP_SPINCOUNT as libgomp reads them): false when they sleep at once (a passive wait, as
/// Kiln's executables choose on a busy machine and kiln-server always).
bool OpenMpThreadsSpin();

}  // namespace kiln::kernels::cpu
