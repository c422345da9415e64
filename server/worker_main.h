// The worker mode of kiln-server (`kiln-server --worker JOBDIR [--enable-test-hooks]`, started by
// WorkerProcess, never by hand): builds one job folder (job.h) and streams its events to the
// server over fd 3.
//
// Test hooks (only with --enable-test-hooks, which the server passes on when it runs with it),
// selected by the spec's model_name:
//   __kiln_test_crash__      abort() before building (the server answers INTERNAL)
//   __kiln_test_slow__       sleep 60 s before building, logging once a second; kill/cancel ends it
//   __kiln_test_slow_<MS>__  the same, sleeping MS milliseconds
//   __kiln_test_memory__     allocate and touch memory until RLIMIT_AS stops it
//                            (RESOURCE_EXHAUSTED)
//   __kiln_test_spin__       burn CPU until RLIMIT_CPU stops it (RESOURCE_EXHAUSTED)
//   __kiln_test_chatty__     log 20000 DEBUG lines before building (dropped-line accounting)
#pragma once

#include <string>

namespace kiln::server {

/// Runs the worker in the current process (working folder: `job_dir`). Returns the process exit
/// code: 0 after a successful build, 1 after a failed one (its status went over the pipe).
int WorkerMain(const std::string& job_dir, bool test_hooks);

}  // namespace kiln::server
