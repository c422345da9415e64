// The kernels' thread pool (kernels/cpu/parallel.h): every index exactly once, the caller taking
// what a late worker has not started, nested and concurrent callers, sleeping workers woken.
#include "engine/kernels/cpu/parallel.h"

#include <omp.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::kernels::cpu {
namespace {

// Runs ParallelFor(n) with `threads` allowed and checks that the pieces cover [0, n) exactly
// once, each a non-empty range inside it.
void ExpectCoveredOnce(int threads, int64_t n) {
  omp_set_num_threads(threads);
  std::vector<std::atomic<int>> hits(n);
  std::atomic<int> bad{0};
  ParallelFor(n, [&](int64_t begin, int64_t end) {
    if (begin < 0 || end > n || begin >= end) bad.fetch_add(1);
    for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
  });
  EXPECT_EQ(bad.load(), 0) << threads << " threads, n " << n;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(hits[i].load(), 1) << "index " << i << ", " << threads << " threads, n " << n;
  }
}

TEST(ParallelFor, CoversEveryIndexOnce) {
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3, 4, 8}) {
    for (int64_t n : {1, 2, 3, 5, 7, 8, 9, 31, 64, 1000, 4097}) ExpectCoveredOnce(threads, n);
  }
  omp_set_num_threads(saved);
}

TEST(ParallelFor, EmptyAndSerialRuns) {
  int calls = 0;
  ParallelFor(0, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
  // Not parallel: one call over everything, on this thread.
  const std::thread::id me = std::this_thread::get_id();
  ParallelFor(100, /*parallel=*/false, [&](int64_t begin, int64_t end) {
    ++calls;
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 100);
    EXPECT_EQ(std::this_thread::get_id(), me);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(ParallelTeam(100, false), 1);
  EXPECT_EQ(ParallelTeam(1), 1);
}

TEST(ParallelFor, TeamFollowsTheThreadCount) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(3);
  EXPECT_EQ(ParallelTeam(100), 3);
  EXPECT_EQ(ParallelTeam(2), 2);
  omp_set_num_threads(1);
  EXPECT_EQ(ParallelTeam(100), 1);
  omp_set_num_threads(saved);
}

TEST(ParallelFor, NestedLoopsRunSerially) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(4);
  std::vector<std::atomic<int>> hits(64 * 64);
  std::atomic<int> nested_teams{0};
  ParallelFor(64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      nested_teams.fetch_add(ParallelTeam(64) == 1 ? 0 : 1);
      ParallelFor(64, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) hits[i * 64 + j].fetch_add(1);
      });
    }
  });
  EXPECT_EQ(nested_teams.load(), 0);
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  // Inside an OpenMP region too.
  int in_omp = 0;
#pragma omp parallel num_threads(2) reduction(+ : in_omp)
  in_omp += ParallelTeam(64) == 1 ? 0 : 1;
  EXPECT_EQ(in_omp, 0);
  omp_set_num_threads(saved);
}

// The caller does not wait for a worker's share: while the one piece a worker took sleeps, the
// caller runs every other piece, its own share and the worker's alike.
TEST(ParallelFor, CallerTakesPiecesNoWorkerStarted) {
  if (const char* v = getenv("KILN_THREAD_POOL"); v != nullptr && std::string(v) == "openmp") {
    GTEST_SKIP() << "KILN_THREAD_POOL=openmp: an OpenMP team waits for every thread";
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  const std::thread::id me = std::this_thread::get_id();
  for (int round = 0; round < 5; ++round) {
    std::atomic<int> worker_pieces{0}, caller_pieces{0};
    std::vector<std::atomic<int>> hits(64);
    ParallelFor(64, [&](int64_t begin, int64_t end) {
      if (std::this_thread::get_id() != me) {
        worker_pieces.fetch_add(1);
        // Far longer than the caller needs for all the other pieces.
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      } else {
        caller_pieces.fetch_add(1);
      }
      for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
    });
    EXPECT_LE(worker_pieces.load(), 1) << "round " << round;
    EXPECT_GE(caller_pieces.load(), 7) << "round " << round;  // 8 pieces in all (2 shares x 4)
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
  omp_set_num_threads(saved);
}

// ScopedOpenMpLoops: the shares on an OpenMP team, every index once; off again after the scope.
TEST(ParallelFor, ScopedOpenMpLoopsRunOnAnOpenMpTeam) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  std::vector<std::atomic<int>> hits(100);
  std::atomic<int> outside_omp{0};
  {
    const ScopedOpenMpLoops loops(true);
    const ScopedOpenMpLoops nested(false);  // an inner scope without `on` keeps it on
    ParallelFor(100, [&](int64_t begin, int64_t end) {
      if (!omp_in_parallel()) outside_omp.fetch_add(1);
      for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
    });
  }
  EXPECT_EQ(outside_omp.load(), 0);
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  bool in_omp = false;
  ParallelFor(100, [&](int64_t, int64_t) {
    if (omp_in_parallel()) in_omp = true;
  });
  const char* env = getenv("KILN_THREAD_POOL");
  EXPECT_EQ(in_omp, env != nullptr && std::string(env) == "openmp");
  omp_set_num_threads(saved);
}

// A body's exception (a kernel's scratch out of memory) reaches the caller once every running
// piece has ended, whichever thread ran the piece, and the pool runs loops as before afterwards.
TEST(ParallelFor, ABodysExceptionReachesTheCaller) {
  const int saved = omp_get_max_threads();
  for (int round = 0; round < 20; ++round) {
    omp_set_num_threads(3);
    const int64_t bad = round % 2 == 0 ? 0 : 50;  // in the caller's share, or a worker's
    std::atomic<int> pieces{0};
    EXPECT_THROW(ParallelFor(64,
                             [&](int64_t begin, int64_t end) {
                               pieces.fetch_add(1);
                               if (begin <= bad && bad < end) throw std::bad_alloc();
                             }),
                 std::bad_alloc)
        << "round " << round;
    // The thread that threw runs no more pieces; nobody waits on a piece that never starts.
    EXPECT_LE(pieces.load(), 12) << "round " << round;
    ExpectCoveredOnce(3, 1000);
  }
  omp_set_num_threads(saved);
}

// Many short loops back to back, from two threads at once (each with a pool of its own).
TEST(ParallelFor, ManyLoopsFromTwoCallers) {
  auto caller = [](int64_t* sum) {
    omp_set_num_threads(3);
    int64_t total = 0;
    for (int round = 0; round < 3000; ++round) {
      std::atomic<int64_t> s{0};
      ParallelFor(round % 17 + 1, [&](int64_t begin, int64_t end) {
        int64_t local = 0;
        for (int64_t i = begin; i < end; ++i) local += i + 1;
        s.fetch_add(local);
      });
      total += s.load();
    }
    *sum = total;
  };
  int64_t a = 0, b = 0;
  std::thread ta(caller, &a), tb(caller, &b);
  ta.join();
  tb.join();
  int64_t expect = 0;
  for (int round = 0; round < 3000; ++round) {
    const int64_t n = round % 17 + 1;
    expect += n * (n + 1) / 2;
  }
  EXPECT_EQ(a, expect);
  EXPECT_EQ(b, expect);
}

// Workers that sleep at once (a passive wait, read when the pool starts: a new thread's pool)
// are woken for later loops: they take pieces, not only the caller.
TEST(ParallelFor, PassiveWorkersAreWoken) {
  if (const char* v = getenv("KILN_THREAD_POOL"); v != nullptr && std::string(v) == "openmp") {
    GTEST_SKIP() << "KILN_THREAD_POOL=openmp: no pool";
  }
  setenv("OMP_WAIT_POLICY", "passive", 1);
  std::atomic<int> worker_pieces{0};
  std::thread t([&] {
    omp_set_num_threads(2);
    const std::thread::id me = std::this_thread::get_id();
    for (int round = 0; round < 50; ++round) {
      ParallelFor(8, [&](int64_t, int64_t) {
        if (std::this_thread::get_id() != me) worker_pieces.fetch_add(1);
        // Long enough for a sleeping worker to wake and take a piece.
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      });
    }
  });
  t.join();
  unsetenv("OMP_WAIT_POLICY");
  EXPECT_GT(worker_pieces.load(), 0);
}

}  // namespace
}  // namespace kiln::kernels::cpu
