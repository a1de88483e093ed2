// Storage faults, through the binary: a file-size limit hit while `train`
// writes its workspace (what a full disk does to a write: the call fails), and SIGKILL at random
// points of 200 training runs into one workspace. After each: the workspace opens, every run
// reads back, a killed run is interrupted, a failed one failed (or interrupted), and every step
// the process printed is in the workspace (steps are printed after their commit).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "support/run_process.hpp"

namespace pipetune {
namespace {

namespace fs = std::filesystem;
using testing::run_pipetune;

using Dir = testing::ScratchWorkspace;  // dir, db

// Starts `pipetune train --steps 100000 --db db` with stdout to `out`, stderr to `err`, and (when
// > 0) a file-size limit of `fsize_limit` bytes; returns its pid.
pid_t start_training(const std::string& db, const std::string& out, const std::string& err,
                     rlim_t fsize_limit = 0) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  if (fsize_limit > 0) {
    const rlimit limit{fsize_limit, fsize_limit};
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  std::string bin = PIPETUNE_BIN;
  std::vector<std::string> args = {bin, "train", "--steps", "100000", "--db", db};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(bin.c_str(), argv.data());
  ::_exit(127);
}

int last_printed_step(const std::string& out) {
  std::ifstream in(out);
  std::string line;
  int last = 0;
  while (std::getline(in, line))
    if (line.rfind("step ", 0) == 0) last = std::stoi(line.substr(5));
  return last;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The workspace opens and lists its runs; returns them.
nlohmann::json runs_of(const std::string& db) {
  const testing::ProcessResult r = run_pipetune({"runs", "--json", "--db", db});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::array();
}

// A file-size limit crossed while the run writes: the write fails, `train` says so in one line and
// exits 1; the workspace opens; the run is failed (or interrupted, when even marking it failed
// could not be written); the steps printed before are in it.
TEST(StorageFaults, FileSizeLimitWhileWritingFailsTheRunCleanly) {
  Dir d;
  const std::string out = (d.dir / "out").string(), err = (d.dir / "err").string();
  const pid_t pid = start_training(d.db, out, err, 768 * 1024);
  ASSERT_GT(pid, 0);
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 1200 && !exited; ++i) {  // up to 120 s
    exited = ::waitpid(pid, &status, WNOHANG) == pid;
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL() << "train kept running past a 768 KiB file-size limit";
  }
  ASSERT_TRUE(WIFEXITED(status)) << "train died of signal " << WTERMSIG(status);
  const std::string message = slurp(err);
  EXPECT_EQ(WEXITSTATUS(status), 1) << message;
  EXPECT_EQ(std::count(message.begin(), message.end(), '\n'), 1) << message;
  EXPECT_NE(message.find("a write failed (disk full"), std::string::npos) << message;

  const nlohmann::json runs = runs_of(d.db);
  ASSERT_EQ(runs.size(), 1u) << runs.dump(2);
  const std::string st = runs[0].at("status");
  EXPECT_TRUE(st == "failed" || st == "interrupted") << st;
  const int printed = last_printed_step(out);
  if (printed > 0) {
    const testing::ProcessResult rep = run_pipetune({"report", "1", "--json", "--db", d.db});
    ASSERT_EQ(rep.exit_code, 0) << rep.err;
    EXPECT_GE(nlohmann::json::parse(rep.out).at("iterations").get<int>(), printed);
  }
}

// SIGKILL at random points (workspace creation, run start, mid-step, mid-commit) of 200 runs into
// one workspace: once created it always opens, every run reads back, every killed run is
// interrupted, and every step a run printed is in it.
TEST(StorageFaults, TwoHundredKillsAtRandomPoints) {
  Dir d;
  std::mt19937 random(20261125);
  std::uniform_int_distribution<int> delay_ms(0, 700);
  const std::string out = (d.dir / "out").string(), err = (d.dir / "err").string();
  int printed_total = 0;
  for (int i = 0; i < 200; ++i) {
    const int wait = delay_ms(random);
    const pid_t pid = start_training(d.db, out, err);
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(wait));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    const int printed = last_printed_step(out);
    printed_total += printed;

    // Killed before its new workspace was linked into place (db/store/schema.cpp creates it
    // under a temporary name): there is no file, never an empty database.
    if (!fs::exists(d.db)) {
      ASSERT_EQ(printed, 0) << "kill " << i << ": steps printed but no workspace";
      const testing::ProcessResult r = run_pipetune({"runs", "--json", "--db", d.db});
      ASSERT_EQ(r.exit_code, 2) << r.err;
      continue;
    }
    const nlohmann::json runs = runs_of(d.db);
    ASSERT_FALSE(HasFailure()) << "kill " << i << " after " << wait << " ms";
    for (const auto& run : runs)
      ASSERT_NE(run.at("status"), "running")
          << "kill " << i << ": a dead run still shows as running\n"
          << runs.dump(2);
    if (printed > 0) {  // the killed run got as far as storing steps: it is the last one
      ASSERT_FALSE(runs.empty());
      const auto id = std::to_string(runs.back().at("id").get<std::int64_t>());
      EXPECT_EQ(runs.back().at("status"), "interrupted") << "kill " << i;
      const testing::ProcessResult rep = run_pipetune({"report", id, "--json", "--db", d.db});
      ASSERT_EQ(rep.exit_code, 0) << "kill " << i << " after " << wait << " ms: " << rep.err;
      EXPECT_GE(nlohmann::json::parse(rep.out).at("iterations").get<int>(), printed)
          << "kill " << i << " after " << wait << " ms";
    }
  }
  // Every run the workspace holds still loads.
  for (const auto& run : runs_of(d.db)) {
    const auto id = std::to_string(run.at("id").get<std::int64_t>());
    if (run.at("spans").get<std::int64_t>() == 0) continue;  // killed before its first commit
    const testing::ProcessResult rep = run_pipetune({"report", id, "--db", d.db});
    EXPECT_EQ(rep.exit_code, 0) << "run " << id << ": " << rep.err;
  }
  std::printf("200 kills: %d steps printed and found in the workspace\n", printed_total);
}

}  // namespace
}  // namespace pipetune
