#include "tests/testing/cli_runner.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace kiln::testing {

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

CliResult RunBinary(const TempDir& dir, const std::string& bin,
                    const std::vector<std::string>& args, int seconds) {
  std::string out_path = dir.File("stdout.txt"), err_path = dir.File("stderr.txt");
  std::vector<std::string> argv_s = {"timeout", "--kill-after=5", std::to_string(seconds), bin};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0) _exit(126);
    dup2(out, 1);
    dup2(err, 2);
    execvp("timeout", argv.data());
    _exit(127);
  }
  CliResult r;
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return r;
  r.exited = WIFEXITED(status);
  r.exit_code = r.exited ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  r.out = Slurp(out_path);
  r.err = Slurp(err_path);
  return r;
}

std::string Describe(const CliResult& r) {
  return absl::StrCat("exited=", r.exited, " code=", r.exit_code, " signal=", r.signal,
                      "\nstdout:\n", r.out, "\nstderr:\n", r.err);
}

}  // namespace kiln::testing
