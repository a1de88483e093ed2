// A closed stdout, through the binary: `pipetune train ... | head -c 10` must
// not kill the run. The run completes and is stored; then the command exits 1 with one line on
// stderr saying stdout failed and where the run is.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

// Runs pipetune with `stdout_fd` as its stdout (closed here once the child has it); stderr is
// captured, stdout is not.
ProcessResult run_with_stdout(int stdout_fd, const std::vector<std::string>& args) {
  char err_template[] = "/tmp/pipetune_err_XXXXXX";
  const int err_fd = ::mkstemp(err_template);
  if (err_fd < 0) throw std::runtime_error("mkstemp failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(stdout_fd, 1);
    ::dup2(err_fd, 2);
    if (::chdir(default_child_cwd().c_str()) != 0) ::_exit(127);
    std::string bin = PIPETUNE_BIN;
    std::vector<std::string> copy = args;
    std::vector<char*> argv = {bin.data()};
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(stdout_fd);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(err_fd);
  ProcessResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.err = slurp(err_template);
  ::unlink(err_template);
  return r;
}

// With stdout a pipe whose read end is already closed: every write to it fails with EPIPE (and
// raises SIGPIPE unless it is ignored).
ProcessResult run_with_closed_stdout(const std::vector<std::string>& args) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  ::close(pipe_fds[0]);
  return run_with_stdout(pipe_fds[1], args);
}

nlohmann::json runs_of(const std::string& db) {
  const ProcessResult r = run_pipetune({"runs", "--json", "--db", db});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out, nullptr, false);
}

TEST(ClosedStdout, TrainingCompletesAndIsStoredAndTheExitSaysStdoutFailed) {
  ScratchWorkspace s;
  const ProcessResult r = run_with_closed_stdout({"train", "--steps", "3", "--db", s.db});
  EXPECT_EQ(r.exit_code, 1) << r.err;  // not 141 (killed by SIGPIPE)
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("pipetune: stdout: Broken pipe; the run was stored as run 1 in " + s.db),
            std::string::npos)
      << r.err;
  const nlohmann::json runs = runs_of(s.db);
  ASSERT_EQ(runs.size(), 1u) << runs.dump();
  EXPECT_EQ(runs[0].at("status"), "complete");
  EXPECT_EQ(runs[0].at("kind"), "measured");
  const ProcessResult report = run_pipetune({"report", "1", "--json", "--db", s.db});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_EQ(nlohmann::json::parse(report.out).at("iterations"), 3);
}

TEST(ClosedStdout, EveryCommandFinishesItsWorkAndSaysStdoutFailed) {
  ScratchWorkspace s;
  const std::string trace = (s.dir / "t.json").string();
  const ProcessResult sim =
      run_with_closed_stdout({"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches",
                              "4", "--trace", trace, "--json", "--db", s.db});
  EXPECT_EQ(sim.exit_code, 1) << sim.err;
  EXPECT_EQ(count_lines(sim.err), 1) << sim.err;
  EXPECT_NE(sim.err.find("stdout: Broken pipe; the trace was written to " + trace +
                         "; the run was stored as run 1 in " + s.db),
            std::string::npos)
      << sim.err;
  EXPECT_EQ(runs_of(s.db).size(), 1u);
  // A command that only reads says so too (nothing kept to name).
  const ProcessResult runs = run_with_closed_stdout({"runs", "--db", s.db});
  EXPECT_EQ(runs.exit_code, 1) << runs.err;
  EXPECT_EQ(runs.err, "pipetune: stdout: Broken pipe\n");
}

// A full device as stdout: the reason is the device's, and the run is stored all the same.
TEST(ClosedStdout, AFullStdoutSaysWhyAndKeepsTheRun) {
  ScratchWorkspace s;
  const int full = ::open("/dev/full", O_WRONLY);
  if (full < 0) GTEST_SKIP() << "no /dev/full";
  const ProcessResult sim = run_with_stdout(full, {"simulate", "--schedule", "1f1b", "--stages",
                                                   "2", "--microbatches", "4", "--db", s.db});
  EXPECT_EQ(sim.exit_code, 1) << sim.err;
  EXPECT_EQ(sim.err, "pipetune: stdout: No space left on device; the run was stored as run 1 in " +
                         s.db + "\n");
  EXPECT_EQ(runs_of(s.db).size(), 1u);
}

}  // namespace
}  // namespace pipetune::testing
