// kiln-server: the conversion service (DESIGN.md §9, §10), or with `--worker JOBDIR` one build's
// worker process (started by the server itself; see worker_main.h).
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "engine/runtime/threads.h"
#include "server/config.h"
#include "server/device_probe.h"
#include "server/server.h"
#include "server/trim.h"
#include "server/worker_main.h"

int main(int argc, char** argv) {
  // OpenMP threads that sleep while they wait: the server runs several builds and reports at
  // once, each on the cores' worth of threads, so its threads oversubscribe the cores by design
  // (its workers inherit the setting); may execute the server again, before any thread starts.
  kiln::runtime::UseBoundedOmpWait(argv, /*always_passive=*/true);
  if (argc >= 3 && std::string(argv[1]) == "--worker") {
    // As in `kiln`: big buffers are mapped and unmapped on their own.
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    bool hooks = argc >= 4 && std::string(argv[3]) == "--enable-test-hooks";
    return kiln::server::WorkerMain(argv[2], hooks);
  }
  if (argc == 2 && std::string(argv[1]) == "--list-devices") {
    return kiln::server::ListDevicesMain();
  }
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::cout << kiln::server::ServerUsage();
      return 0;
    }
  }
  auto config = kiln::server::ParseServerFlags(argc, argv);
  if (!config.ok()) {
    std::cerr << "kiln-server: " << config.status().message() << "\n\n"
              << kiln::server::ServerUsage();
    return 2;
  }
  // gRPC 1.51's "tcp_read_chunks" read path fills each connection's reads with 64 KiB slabs up
  // to a target that grows with the connection's traffic, and an idle connection keeps that
  // spare buffer: after bursts of uploads heaptrack found 0.6 to 3.8 MB of them live on an idle
  // server (10 clients connected), varying round to round. gRPC's other read path reads into one
  // slice clamped to GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE (server.cc), which bounds what an idle
  // connection keeps (live heap after each burst then ~0.5 MB, level). Set before gRPC reads its
  // experiments (on first use); an experiment list the user set is kept and extended.
  {
    const char* user = getenv("GRPC_EXPERIMENTS");
    std::string experiments =
        user && *user ? std::string(user) + ",-tcp_read_chunks" : std::string("-tcp_read_chunks");
    setenv("GRPC_EXPERIMENTS", experiments.c_str(), 1);
  }
  // One malloc arena: gRPC runs calls on many threads, and with glibc's default (8 per core) a
  // burst of builds leaves freed memory scattered over arenas that are never trimmed (measured:
  // RSS +75% after 5 bursts of 50 builds with the default, +8% with 2; a second arena still kept
  // ~0.9 MB after a burst, tests/client/load_test.py's per-mapping growth). The server allocates
  // little per call (builds run in workers), so one arena costs no measurable contention.
  mallopt(M_ARENA_MAX, 1);
  // Engine chunks, uploads and reports are buffers of up to a few MiB: mapped and unmapped on
  // their own instead of carving the heap (a fixed threshold also stops glibc from raising it
  // after the first free), so a burst leaves no fragmented heap behind.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  // SIGTERM and SIGINT are taken by sigwait below, so they are blocked before any thread starts
  // (threads inherit the mask; workers get a clean mask before exec).
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  kiln::server::KilnServer server(*config);
  if (absl::Status st = server.Start(); !st.ok()) {
    std::cerr << "kiln-server: " << st.message() << "\n";
    return 1;
  }
  // Wait for SIGTERM/SIGINT; every few seconds without builds, hand freed heap memory back to
  // the system, so the RSS of an idle server returns to its idle level after a burst whatever
  // thread freed the memory last.
  int sig = 0;
  for (;;) {
    struct timespec every = {2, 0};
    sig = sigtimedwait(&stop, nullptr, &every);
    if (sig > 0) break;
    if (server.LiveBuilds() == 0) kiln::server::TrimMalloc();
  }
  std::cerr << "kiln-server: " << strsignal(sig) << ": draining\n";
  server.Drain();
  return 0;
}
