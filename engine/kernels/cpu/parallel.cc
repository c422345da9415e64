#include "engine/kernels/cpu/parallel.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln::kernels::cpu {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Pieces per share of ParallelFor: a share is taken in this many pieces, so that the caller can
// take the part of a late worker's share that it has not started. More pieces cost an atomic add
// each.
constexpr int kPiecesPerShare = 4;

// Spins before a waiting worker sleeps, as libgomp counts them (one pause each): passive 0,
// active without end, GOMP_SPINCOUNT as given, and libgomp's default otherwise.
int64_t SpinCount() {
  if (const char* policy = getenv("OMP_WAIT_POLICY")) {
    if (strcasecmp(policy, "passive") == 0) return 0;
    if (strcasecmp(policy, "active") == 0) return INT64_MAX;
  }
  if (const char* spin = getenv("GOMP_SPINCOUNT")) {
    if (strcasecmp(spin, "infinite") == 0 || strcasecmp(spin, "infinity") == 0) return INT64_MAX;
    char* end = nullptr;
    const long long v = strtoll(spin, &end, 10);
    if (end != spin && v >= 0) {
      int64_t scale = 1;  // libgomp's suffixes
      switch (*end) {
        case 'k':
        case 'K':
          scale = 1000;
          break;
        case 'M':
          scale = 1000000;
          break;
        case 'G':
          scale = 1000000000;
          break;
        default:
          break;
      }
      return v > INT64_MAX / scale ? INT64_MAX : v * scale;
    }
  }
  return 300000;
}

// Set on a pool's workers and on a caller while its loop runs: nested loops run serially.
thread_local bool t_in_loop = false;

// ScopedOpenMpLoops of this thread.
thread_local bool t_openmp_loops = false;

// The first exception a piece threw (std::bad_alloc from a kernel's scratch), rethrown on the
// calling thread once every piece has ended: the kernel's error (the session turns it into the
// run's), never std::terminate from a worker.
class FirstError {
 public:
  void Catch() {
    const std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
  }
  void RethrowIfAny() {
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  std::mutex mu_;
  std::exception_ptr error_;
};

struct alignas(64) Share {
  std::atomic<int64_t> next{0};  // the next piece of the share to take
};

// The job's state word: epoch (bits 32-63), team (bits 24-31), closed (bit 23: no worker may
// join), joined workers (bits 0-22). A worker joins by a compare-exchange on the epoch it saw, so
// it reads the job only while the caller cannot have moved on to the next one.
constexpr uint64_t kClosed = uint64_t{1} << 23;
constexpr uint64_t kJoinedMask = kClosed - 1;
inline uint32_t EpochOf(uint64_t s) { return static_cast<uint32_t>(s >> 32); }
inline int TeamInState(uint64_t s) { return static_cast<int>((s >> 24) & 0xff); }

class Pool {
 public:
  Pool() : spin_(SpinCount()) {}

  ~Pool() {
    stop_.store(true, std::memory_order_seq_cst);
    wake_.fetch_add(1, std::memory_order_seq_cst);
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  // The most participants a job may have (one byte of the state word).
  static constexpr int kMaxTeam = 255;

  void Run(int team, int64_t n, int pieces, const PieceBody& body) {
    Grow(team);
    body_ = &body;
    n_ = n;
    team_ = team;
    pieces_ = pieces;
    for (int p = 0; p < team; ++p) shares_[p].next.store(0, std::memory_order_relaxed);
    const uint32_t epoch = EpochOf(state_.load(std::memory_order_relaxed)) + 1;
    state_.store((uint64_t{epoch} << 32) | (uint64_t(team) << 24), std::memory_order_seq_cst);
    wake_.store(epoch, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) wake_.notify_all();
    try {
      Work(0);
    } catch (...) {
      error_.Catch();
    }
    // No worker joins from now on; those that did may still be running a piece.
    uint64_t s = state_.fetch_or(kClosed, std::memory_order_acq_rel) | kClosed;
    for (int64_t i = 0; (s & kJoinedMask) != 0; ++i) {
      if (i < 4096) {
        CpuRelax();
      } else {
        sched_yield();  // a worker that holds a piece may need this CPU
      }
      s = state_.load(std::memory_order_acquire);
    }
    error_.RethrowIfAny();
  }

 private:
  // Participant p's share, then the others' pieces that nobody has taken.
  void Work(int p) {
    const int team = team_;
    const int64_t n = n_;
    for (int k = 0; k < team; ++k) {
      const int share = (p + k) % team;
      const int64_t begin = n * share / team, len = n * (share + 1) / team - begin;
      const int64_t pieces = std::min<int64_t>(pieces_, len);
      for (;;) {
        const int64_t piece = shares_[share].next.fetch_add(1, std::memory_order_relaxed);
        if (piece >= pieces) break;
        (*body_)(begin + len * piece / pieces, begin + len * (piece + 1) / pieces, p);
      }
    }
  }

  void Grow(int team) {
    if (shares_ == nullptr) shares_ = std::make_unique<Share[]>(kMaxTeam);
    while (static_cast<int>(workers_.size()) < team - 1) {
      const int id = static_cast<int>(workers_.size()) + 1;
      const uint32_t epoch = EpochOf(state_.load(std::memory_order_relaxed));
      workers_.emplace_back([this, id, epoch] { WorkerLoop(id, epoch); });
    }
  }

  void WorkerLoop(int id, uint32_t seen) {
    t_in_loop = true;
    omp_set_num_threads(1);  // an OpenMP region a body might open stays on this thread
    for (;;) {
      uint64_t s = WaitForEpoch(seen);
      if (stop_.load(std::memory_order_acquire)) return;
      seen = EpochOf(s);
      // Join the job of that epoch while it is open and needs this worker.
      bool joined = false;
      while (EpochOf(s) == seen && (s & kClosed) == 0 && id < TeamInState(s)) {
        if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) {
          joined = true;
          break;
        }
      }
      if (!joined) continue;
      try {
        Work(id);
      } catch (...) {
        error_.Catch();
      }
      state_.fetch_sub(1, std::memory_order_release);
    }
  }

  // Spins, then sleeps, until a job newer than `seen` is published (or the pool stops).
  uint64_t WaitForEpoch(uint32_t seen) {
    for (int64_t i = 0; i < spin_; ++i) {
      const uint64_t s = state_.load(std::memory_order_acquire);
      if (EpochOf(s) != seen || stop_.load(std::memory_order_relaxed)) return s;
      CpuRelax();
    }
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    for (;;) {
      if (stop_.load(std::memory_order_seq_cst)) break;
      const uint32_t w = wake_.load(std::memory_order_seq_cst);
      if (w != seen) break;
      wake_.wait(w, std::memory_order_seq_cst);
    }
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    return state_.load(std::memory_order_acquire);
  }

  const int64_t spin_;
  std::vector<std::thread> workers_;
  std::unique_ptr<Share[]> shares_;
  std::atomic<uint64_t> state_{0};
  std::atomic<uint32_t> wake_{0};  // the newest epoch, for sleeping workers (a futex word)
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  // The job, written by the caller before it publishes the epoch.
  const PieceBody* body_ = nullptr;
  int64_t n_ = 0;
  int team_ = 0;
  int pieces_ = 1;
  FirstError error_;
};

thread_local std::unique_ptr<Pool> t_pool;

int TeamOf(int64_t n, int max_team) {
  if (max_team < 2 || n < 2 || t_in_loop || omp_in_parallel()) return 1;
  const int threads = std::min({omp_get_max_threads(), max_team, Pool::kMaxTeam});
  return static_cast<int>(std::min<int64_t>(threads, n));
}

// KILN_THREAD_POOL=openmp: the shares on an OpenMP team instead, one per thread, each thread's
// share in one piece (how the kernels ran before the pool; for comparing the two).
bool UseOpenMp() {
  static const bool openmp = [] {
    const char* v = getenv("KILN_THREAD_POOL");
    return v != nullptr && strcmp(v, "openmp") == 0;
  }();
  return openmp;
}

void Run(int64_t n, int team, int pieces, const PieceBody& body) {
  if (t_openmp_loops || UseOpenMp()) {
    // The whole team, as oneDNN's regions take it, the threads past `team` idle: a region of
    // another size makes libgomp dock and release its threads (fp16 ResNet-50 at 16 threads,
    // teams of 7 between oneDNN's of 16: 20-32 ms against 11).
    FirstError error;
#pragma omp parallel
    {
      const int t = omp_get_thread_num(), nt = std::min(omp_get_num_threads(), team);
      try {
        if (t < nt) body(n * t / nt, n * (t + 1) / nt, t);
      } catch (...) {
        error.Catch();
      }
    }
    error.RethrowIfAny();
    return;
  }
  if (t_pool == nullptr) t_pool = std::make_unique<Pool>();
  struct InLoop {
    InLoop() { t_in_loop = true; }
    ~InLoop() { t_in_loop = false; }
  } in_loop;
  t_pool->Run(team, n, pieces, body);
}

}  // namespace

int ParallelTeam(int64_t n, bool parallel) { return TeamOf(n, parallel ? INT32_MAX : 1); }

void ParallelFor(int64_t n, bool parallel, absl::FunctionRef<void(int64_t, int64_t)> body) {
  if (n <= 0) return;
  const int team = ParallelTeam(n, parallel);
  if (team <= 1) {
    body(0, n);
    return;
  }
  Run(n, team, kPiecesPerShare, [&](int64_t begin, int64_t end, int) { body(begin, end); });
}

ScopedOpenMpLoops::ScopedOpenMpLoops(bool on) : saved_(t_openmp_loops) {
  t_openmp_loops = saved_ || on;
}

ScopedOpenMpLoops::~ScopedOpenMpLoops() { t_openmp_loops = saved_; }

bool ThreadPoolDisabled() { return UseOpenMp(); }

bool OpenMpThreadsSpin() {
  static const bool spin = SpinCount() > 0;
  return spin;
}

void ParallelForTeam(int64_t n, int max_team, int pieces_per_share, const PieceBody& body) {
  if (n <= 0) return;
  const int team = TeamOf(n, max_team);
  if (team <= 1) {
    body(0, n, 0);
    return;
  }
  Run(n, team, std::max(pieces_per_share, 1), body);
}

}  // namespace kiln::kernels::cpu
