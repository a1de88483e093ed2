// Runs the pipetune binary as a child process and captures its exit code, stdout and stderr, so
// CLI tests check exactly what a user sees.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace pipetune::testing {

struct ProcessResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The working directory of children started without one: a directory of this test process
// (removed when it exits), so that the workspace the CLI writes by default (pipetune.db) and any
// relative output land there and nowhere else.
inline const std::string& default_child_cwd() {
  struct Dir {
    std::string path;
    Dir() {
      char tmpl[] = "/tmp/pipetune_cli_XXXXXX";
      if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
      path = tmpl;
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

// Runs `program` with `args` (argv[0] is the program), capturing stdout and stderr.
inline ProcessResult run_program(const std::string& program, const std::vector<std::string>& args,
                                 const std::string& cwd) {
  char out_tmpl[] = "/tmp/pipetune_out_XXXXXX";
  char err_tmpl[] = "/tmp/pipetune_err_XXXXXX";
  const int out_fd = ::mkstemp(out_tmpl);
  const int err_fd = ::mkstemp(err_tmpl);
  if (out_fd < 0 || err_fd < 0) throw std::runtime_error("mkstemp failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(127);
    std::vector<char*> argv;
    std::string bin = program;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ProcessResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  ::close(out_fd);
  ::close(err_fd);
  r.out = slurp(out_tmpl);
  r.err = slurp(err_tmpl);
  ::unlink(out_tmpl);
  ::unlink(err_tmpl);
  return r;
}

inline ProcessResult run_pipetune(const std::vector<std::string>& args,
                                  const std::string& cwd = default_child_cwd()) {
  return run_program(PIPETUNE_BIN, args, cwd);
}

// A fresh folder for one test, with the path of a workspace in it; removed at the end.
struct ScratchWorkspace {
  std::filesystem::path dir;
  std::string db;
  ScratchWorkspace() {
    char tmpl[] = "/tmp/pipetune_test_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir = tmpl;
    db = (dir / "w.db").string();
  }
  ~ScratchWorkspace() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  ScratchWorkspace(const ScratchWorkspace&) = delete;
  ScratchWorkspace& operator=(const ScratchWorkspace&) = delete;

  // A file in the folder.
  std::string path(const std::string& name) const { return (dir / name).string(); }
  // pipetune with `args` on this workspace (--db appended).
  ProcessResult run(std::vector<std::string> args) const {
    args.push_back("--db");
    args.push_back(db);
    return run_pipetune(args);
  }
};

inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace pipetune::testing
