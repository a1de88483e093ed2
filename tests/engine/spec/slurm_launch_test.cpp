// Slurm batch scripts from spec::sbatch_script: the expected text for CPU and GPU launches, the
// launches that cannot run refused, and every srun argument surviving bash intact.
#include "engine/spec/slurm_launch.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/spec.hpp"

namespace fs = std::filesystem;

namespace pipetune::spec {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void expect_lines(const std::string& script, const std::vector<std::string>& want) {
  const std::vector<std::string> got = lines_of(script);
  for (std::size_t i = 0; i < std::max(got.size(), want.size()); ++i) {
    EXPECT_EQ(i < got.size() ? got[i] : "(no line)", i < want.size() ? want[i] : "(no line)")
        << "line " << i + 1 << " of\n"
        << script;
  }
}

SlurmLaunch cpu_launch() {
  SlurmLaunch l;
  l.run_file = "/home/me/runs/tiny.toml";
  l.workspace = "/home/me/pipetune.db";
  l.run_name = "tiny-run";
  l.world_size = 16;
  l.ranks_per_process = 2;
  l.devices_per_node = 8;
  return l;
}

TEST(SlurmLaunch, CpuRanksAsThreadsOfProcesses) {
  expect_lines(
      sbatch_script(cpu_launch()),
      {"#!/bin/bash", "# Written by pipetune: trains a run file on Slurm; submit it with sbatch.",
       "#SBATCH --job-name=tiny-run", "#SBATCH --nodes=2", "#SBATCH --ntasks=8",
       "#SBATCH --ntasks-per-node=4", "#SBATCH --cpus-per-task=2", "",
       "srun --cpus-per-task=2 'pipetune' train --config '/home/me/runs/tiny.toml' --db "
       "'/home/me/pipetune.db' --name 'tiny-run' --ranks-per-process 2"});
}

TEST(SlurmLaunch, CpuOneRankPerProcessNoOptionalParts) {
  SlurmLaunch l;
  l.run_file = "run.toml";
  l.world_size = 3;
  l.devices_per_node = 2;
  expect_lines(
      sbatch_script(l),
      {"#!/bin/bash", "# Written by pipetune: trains a run file on Slurm; submit it with sbatch.",
       "#SBATCH --job-name=pipetune", "#SBATCH --nodes=2", "#SBATCH --ntasks=3",
       "#SBATCH --ntasks-per-node=2", "", "srun 'pipetune' train --config 'run.toml'"});
}

TEST(SlurmLaunch, GpusOneProcessPerGpu) {
  SlurmLaunch l;
  l.run_file = "/runs/llama.toml";
  l.workspace = "/ws/pipetune.db";
  l.run_name = "llama";
  l.job_name = "llama 8B";
  l.world_size = 16;
  l.gpus_per_node = 8;
  l.devices_per_node = 8;
  l.time_limit = "1-12:00:00";
  l.partition = "gpu";
  l.pipetune = "/opt/pipetune/bin/pipetune";
  expect_lines(
      sbatch_script(l),
      {"#!/bin/bash", "# Written by pipetune: trains a run file on Slurm; submit it with sbatch.",
       "#SBATCH --job-name=\"llama 8B\"", "#SBATCH --nodes=2", "#SBATCH --ntasks=16",
       "#SBATCH --ntasks-per-node=8", "#SBATCH --gpus-per-node=8", "#SBATCH --time=1-12:00:00",
       "#SBATCH --partition=gpu", "",
       "srun '/opt/pipetune/bin/pipetune' train --config '/runs/llama.toml' --db "
       "'/ws/pipetune.db' --name 'llama'"});
}

TEST(SlurmLaunch, FewerRanksThanANodesGpus) {
  SlurmLaunch l;
  l.run_file = "r.toml";
  l.world_size = 4;
  l.gpus_per_node = 8;
  l.devices_per_node = 8;
  const SlurmLayout layout = slurm_layout(l);
  EXPECT_EQ(layout.tasks, 4);
  EXPECT_EQ(layout.tasks_per_node, 4);
  EXPECT_EQ(layout.nodes, 1);
  const std::string script = sbatch_script(l);
  EXPECT_NE(script.find("#SBATCH --gpus-per-node=4\n"), std::string::npos) << script;
}

TEST(SlurmLaunch, FromARun) {
  RunSpec run = load_run("tiny-train");
  SlurmLaunch l = slurm_launch(run);
  EXPECT_EQ(l.world_size, 8);
  EXPECT_EQ(l.gpus_per_node, 0);
  EXPECT_EQ(l.devices_per_node, run.cluster.devices_per_node);
  run.backend = EngineBackend::cuda;
  l = slurm_launch(run);
  EXPECT_EQ(l.gpus_per_node, run.cluster.devices_per_node);
}

std::string input_error(const SlurmLaunch& l) {
  try {
    (void)sbatch_script(l);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST(SlurmLaunch, ImpossibleLaunchesAreRefused) {
  SlurmLaunch l = cpu_launch();
  l.ranks_per_process = 3;
  EXPECT_HAS(input_error(l), "3 ranks per process do not divide the 16 ranks");
  l = cpu_launch();
  l.gpus_per_node = 8;
  EXPECT_HAS(input_error(l), "one rank (one GPU per process), not 2");
  l = cpu_launch();
  l.world_size = 0;
  EXPECT_HAS(input_error(l), "world size must be at least 1");
  l = cpu_launch();
  l.run_file.clear();
  EXPECT_HAS(input_error(l), "run file");
  l = cpu_launch();
  l.time_limit = "2 hours";
  EXPECT_HAS(input_error(l), "time limit '2 hours'");
  for (const std::string ok :
       {"90", "90:30", "4:00:00", "2-12", "2-12:30", "2-12:30:15", "UNLIMITED", "infinite"}) {
    l.time_limit = ok;
    EXPECT_NO_THROW((void)sbatch_script(l)) << ok;
  }
  l = cpu_launch();
  l.partition = "gpu nodes";
  EXPECT_HAS(input_error(l), "partition 'gpu nodes'");
  l = cpu_launch();
  l.job_name = "two\nlines";
  EXPECT_HAS(input_error(l), "job name");
  l = cpu_launch();
  l.job_name = "job";
  l.run_name = std::string("nul") + '\0';
  EXPECT_HAS(input_error(l), "NUL");
}

TEST(SlurmLaunch, JobNameQuotedAsSbatchReadsIt) {
  SlurmLaunch l = cpu_launch();
  l.job_name = "my \"job\" #1 \\ 'x'";
  EXPECT_HAS(sbatch_script(l), "#SBATCH --job-name=\"my \\\"job\\\" #1 \\\\ 'x'\"\n");
}

// Runs a bash script; its exit status and what it wrote on stdout.
std::pair<int, std::string> run_bash(const std::string& arguments) {
  FILE* pipe = ::popen(("bash " + arguments).c_str(), "r");
  if (pipe == nullptr) return {-1, ""};
  std::string out;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(SlurmLaunch, EveryArgumentSurvivesBash) {
  const fs::path dir =
      fs::temp_directory_path() / ("pipetune_sbatch_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  SlurmLaunch l = cpu_launch();
  l.run_file = "/runs/it's \"my\" run $HOME `id` \\ *.toml";
  l.workspace = "/work space/a'b'c/pipetune.db";
  l.run_name = "run with  two  spaces, 'quotes' and \"doubles\" ; rm -rf x &";
  l.pipetune = "/opt/pipe tune/bin/pipetune";
  l.job_name = "job 'one'";
  l.train_arguments = {"--steps", "200", "--data", "/data/shards/*.bin"};
  const std::string script_path = (dir / "launch.sbatch").string();
  write_sbatch_script(l, script_path);
  EXPECT_NE(fs::status(script_path).permissions() & fs::perms::owner_exec, fs::perms::none);
  EXPECT_EQ(run_bash("-n '" + script_path + "' 2>&1").first, 0);

  std::ifstream in(script_path);
  std::stringstream text;
  text << in.rdbuf();
  std::string srun;
  for (const std::string& line : lines_of(text.str()))
    if (line.rfind("srun ", 0) == 0) srun = line;
  ASSERT_FALSE(srun.empty()) << text.str();
  const std::string printer = (dir / "print.sh").string();
  std::ofstream(printer) << "printf '%s\\0'" << srun.substr(4) << "\n";
  const auto [status, out] = run_bash("'" + printer + "'");
  EXPECT_EQ(status, 0);
  std::vector<std::string> args;
  for (std::size_t start = 0, end; (end = out.find('\0', start)) != std::string::npos;
       start = end + 1)
    args.push_back(out.substr(start, end - start));
  const std::vector<std::string> want = {"--cpus-per-task=2",
                                         l.pipetune,
                                         "train",
                                         "--config",
                                         l.run_file,
                                         "--db",
                                         l.workspace,
                                         "--name",
                                         l.run_name,
                                         "--ranks-per-process",
                                         "2",
                                         "--steps",
                                         "200",
                                         "--data",
                                         "/data/shards/*.bin"};
  EXPECT_EQ(args, want) << srun;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pipetune::spec
