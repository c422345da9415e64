// OpenMP wait policy of the executables (threads.h: UseBoundedOmpWait says why).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/runtime/threads.h"

namespace kiln::runtime {
namespace {

// Set beside GOMP_SPINCOUNT when Kiln chose it, so that WaitPolicy can say so.
constexpr char kChosenByKiln[] = "KILN_OMP_WAIT_DEFAULT";

// Spins (pause instructions, some 10-40 us) before a waiting thread sleeps: long enough to span
// the gap between two kernels of a run, so on an idle machine a run forks as fast as with
// spinning threads; short enough that on a busy one a spinning thread soon gives its core to the
// partner it waits for. Measured at 2 threads on 2 cores (bench/RESULTS.md), PP-OCRv4 det idle:
// 11.5 ms at 1000 as with active spinning (10.9-11.7), 27 ms passive (a futex wake per kernel),
// 15 ms at 300; beside one busy process 41 ms at 1000, 24 passive, 157 active, 350 at 100,000.
constexpr char kSpinCount[] = "1000";

// Whether another task keeps a CPU busy now: the fewest runnable tasks (/proc/stat's
// procs_running, this one included) over up to eight samples 10 ms apart, less this process. A
// single sample also catches short-lived tasks (the shell, a monitor) and the workers of another
// thread pool spinning down after its last parallel region (ONNX Runtime's, in a benchmark
// process that just ran a model: runnable for ~35 ms after its last run, when a 10 ms window
// took the machine for busy and shufflenet ran at 3.5 ms on two threads against 1.3); a busy
// process is in every one. A sample of this process alone ends it: an idle machine costs one
// read at start-up, a busy one 70 ms.
bool MachineBusy() {
  int fewest = 1 << 30;
  for (int i = 0; i < 8 && fewest > 1; ++i) {
    if (i > 0) usleep(10000);
    FILE* f = fopen("/proc/stat", "r");
    if (f == nullptr) return false;
    char line[256];
    int running = -1;
    while (fgets(line, sizeof(line), f) != nullptr) {
      if (sscanf(line, "procs_running %d", &running) == 1) break;
    }
    fclose(f);
    if (running < 0) return false;
    fewest = running < fewest ? running : fewest;
  }
  return fewest - 1 >= 1;
}

}  // namespace

void UseBoundedOmpWait(char** argv, bool always_passive) {
  if (getenv("OMP_WAIT_POLICY") != nullptr || getenv("GOMP_SPINCOUNT") != nullptr) return;
  // Started through the dynamic loader (`ld-linux-x86-64.so.2 --library-path LIBS kiln ...`):
  // /proc/self/exe is the loader, which would take argv[1] for the program. Run on as is.
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0) return;
  exe[len] = '\0';
  const char* base = strrchr(exe, '/');
  if (strncmp(base != nullptr ? base + 1 : exe, "ld-", 3) == 0) return;
  // A busy machine: sleep at once (a spinning thread would hold a core its partner needs).
  const bool passive = always_passive || MachineBusy();
  setenv("GOMP_SPINCOUNT", passive ? "0" : kSpinCount, 1);
  setenv(kChosenByKiln, passive ? "passive" : "spin", 1);
  execv("/proc/self/exe", argv);
  // No /proc (or no exec): run on with libgomp's defaults, which WaitPolicy reports.
  unsetenv("GOMP_SPINCOUNT");
  unsetenv(kChosenByKiln);
}

std::string WaitPolicy() {
  const char* spin = getenv("GOMP_SPINCOUNT");
  const char* chosen = getenv(kChosenByKiln);
  if (spin != nullptr && chosen != nullptr) {
    return std::string(chosen) == "passive" ? "passive (default: a busy machine)"
                                            : std::string("spin ") + spin + " then sleep (default)";
  }
  if (const char* policy = getenv("OMP_WAIT_POLICY")) {
    return std::string("OMP_WAIT_POLICY=") + policy;
  }
  if (spin != nullptr) return std::string("GOMP_SPINCOUNT=") + spin;
  return "libgomp's default (spinning)";
}

}  // namespace kiln::runtime
