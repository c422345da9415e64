#include "server/worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/job.h"

extern char** environ;

namespace kiln::server {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Spawn(const std::string& binary,
                                                                    const std::string& job_dir,
                                                                    const WorkerLimits& limits,
                                                                    bool test_hooks) {
  std::vector<std::string> args = {"--worker", job_dir};
  if (test_hooks) args.push_back("--enable-test-hooks");
  return Start(binary, std::move(args), limits);
}

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Start(const std::string& binary,
                                                                    std::vector<std::string> args,
                                                                    const WorkerLimits& limits) {
  // Everything the child needs is prepared before fork: between fork and exec of a multi-threaded
  // parent only async-signal-safe calls are allowed.
  args.insert(args.begin(), binary);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // glibc reserves 64 MiB of address space per malloc arena and thread; under RLIMIT_AS that
  // would count against the build, so the worker uses two arenas.
  // Workers share the cores with each other and with the server: an OpenMP thread spinning at a
  // barrier would burn a time slice its partner needs (and CPU seconds the limit counts), so
  // idle threads sleep unless the operator chose otherwise.
  std::vector<std::string> env_store;
  bool wait_policy = false;
  for (char** e = environ; *e; ++e) {
    if (strncmp(*e, "MALLOC_ARENA_MAX=", 17) != 0) env_store.push_back(*e);
    wait_policy |= strncmp(*e, "OMP_WAIT_POLICY=", 16) == 0;
  }
  env_store.push_back("MALLOC_ARENA_MAX=2");
  if (!wait_policy) env_store.push_back("OMP_WAIT_POLICY=PASSIVE");
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  struct rlimit as_limit = {static_cast<rlim_t>(limits.memory_mb) << 20,
                            static_cast<rlim_t>(limits.memory_mb) << 20};
  struct rlimit cpu_limit = {static_cast<rlim_t>(limits.cpu_seconds),
                             static_cast<rlim_t>(limits.cpu_seconds + 2)};
  struct rlimit no_core = {0, 0};

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot create a pipe: ", strerror(errno)));
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::ResourceExhaustedError(absl::StrCat("cannot fork a worker: ", strerror(errno)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, nullptr);
    // An AddressSanitizer build (KILN_SANITIZE, the sanitizer tests) reserves terabytes of
    // shadow address space at start-up and could not start under any RLIMIT_AS; there the
    // memory limit is left to ASan's own allocator checks. Release builds always set it.
    if (!kAddressSanitizer) setrlimit(RLIMIT_AS, &as_limit);
    setrlimit(RLIMIT_CPU, &cpu_limit);
    setrlimit(RLIMIT_CORE, &no_core);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0 && devnull != 0) dup2(devnull, 0);
    if (fds[1] == job::kEventFd) {
      fcntl(fds[1], F_SETFD, 0);
    } else {
      dup2(fds[1], job::kEventFd);
    }
    syscall(SYS_close_range, 4u, ~0u, 0u);
    execve(binary.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  setpgid(pid, pid);  // also in the parent, so Kill() works even before the child ran setpgid
  close(fds[1]);
  return std::unique_ptr<WorkerProcess>(new WorkerProcess(pid, fds[0]));
}

WorkerProcess::~WorkerProcess() {
  bool running;
  {
    std::lock_guard<std::mutex> l(mu_);
    running = !reaped_;
  }
  if (running) {
    Kill();
    Wait();
  }
  close(event_fd_);
}

void WorkerProcess::Kill() {
  std::lock_guard<std::mutex> l(mu_);
  // The pid (and so the group id) cannot have been reused: the child is reaped only under this
  // lock, after waitid(WNOWAIT) saw it exit.
  if (!reaped_) kill(-pid_, SIGKILL);
}

WorkerExit WorkerProcess::Wait() {
  siginfo_t info;
  while (waitid(P_PID, pid_, &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
  }
  WorkerExit out;
  int status = 0;
  struct rusage ru = {};
  {
    std::lock_guard<std::mutex> l(mu_);
    // Kill the rest of the group too (anything the worker forked).
    kill(-pid_, SIGKILL);
    while (wait4(pid_, &status, 0, &ru) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }
  out.signaled = WIFSIGNALED(status);
  out.code = out.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
  out.cpu_seconds =
      ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  return out;
}

absl::Status WorkerProcess::ExitStatus(const WorkerExit& exit, const WorkerLimits& limits) {
  if (exit.signaled) {
    if (exit.code == SIGXCPU || (exit.code == SIGKILL && exit.cpu_seconds >= limits.cpu_seconds)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the build exceeded the worker CPU limit of ", limits.cpu_seconds, " s"));
    }
    return absl::InternalError(
        absl::StrCat("the worker crashed (signal ", exit.code, ", ", strsignal(exit.code), ")"));
  }
  return absl::InternalError(
      absl::StrCat("the worker exited with code ", exit.code, " without a result"));
}

}  // namespace kiln::server
