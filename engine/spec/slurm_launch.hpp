// A Slurm batch script that trains a run file on a cluster: `sbatch` allocates the nodes and
// `srun pipetune train --config <run file>` starts one process per task there, each running
// its share of the ranks (one rank per GPU on cuda; K rank threads per process on the cpu).
#pragma once

#include <string>
#include <vector>

#include "engine/spec/run_spec.hpp"

namespace pipetune::spec {

struct SlurmLaunch {
  // What srun runs. Relative paths are taken from the folder the job is submitted from (sbatch's
  // working directory), so absolute ones are safest.
  std::string run_file;               // `train --config`
  std::string workspace;              // `train --db`; empty: train's default
  std::string run_name;               // `train --name`; empty: train's default
  std::string pipetune = "pipetune";  // the binary on the cluster's nodes
  int world_size = 1;                 // the plan's ranks (tp * pp * dp)
  int ranks_per_process = 1;          // rank threads per task (`train --ranks-per-process`)
  int gpus_per_node = 0;              // GPUs of a node the job may use; 0: the cpu backend
  int devices_per_node = 1;           // the cluster's devices per node (cpu ranks per node)
  std::string job_name;               // empty: the run name, else "pipetune"
  std::string time_limit;             // Slurm's formats ("90", "4:00:00", "1-12"); empty: none
  std::string partition;              // empty: the cluster's default partition
  // More `train` arguments, one word each ({"--steps", "200", "--seed", "7"}), after the others.
  std::vector<std::string> train_arguments;
};

// The launch's world size and per-node figures for a run (its plan's world, cuda's GPUs per
// node: the cluster's devices per node); the paths and names are left for the caller.
SlurmLaunch slurm_launch(const RunSpec& run);

// How a launch spreads over the nodes: `tasks` processes (world / ranks per process), at most
// `tasks_per_node` on a node (its GPUs on cuda, else its devices / ranks per process), `nodes`
// nodes.
struct SlurmLayout {
  int tasks = 0;
  int tasks_per_node = 0;
  int nodes = 0;
};
// InputError for a launch that cannot run: a world that ranks per process does not divide, more
// than one rank per process on GPUs (the engine runs one rank per GPU process), sizes below 1, an
// empty run file or binary, a time limit or partition Slurm would not take.
SlurmLayout slurm_layout(const SlurmLaunch& launch);

// The script: `#!/bin/bash`, the #SBATCH options (job name, nodes, tasks, tasks per node, cpus
// per task with rank threads, GPUs per node on cuda, time limit and partition when given) and the
// srun line (train_arguments last), every value single-quoted for the shell. InputError as
// slurm_layout.
std::string sbatch_script(const SlurmLaunch& launch);

// sbatch_script written as an executable file by write_spec_file's rule.
void write_sbatch_script(const SlurmLaunch& launch, const std::string& path);

// `value` as one bash word: in single quotes, each ' as '\''. InputError for a NUL character.
std::string shell_quote(const std::string& value);

}  // namespace pipetune::spec
