#include "engine/spec/slurm_launch.hpp"

#include <algorithm>
#include <regex>
#include <sstream>

#include "engine/errors.hpp"
#include "engine/spec/spec_file.hpp"

namespace pipetune::spec {

namespace {

bool has_control_character(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7F;
  });
}

// An #SBATCH value: bare when it holds only plain characters, else in double quotes with " and
// \ escaped (sbatch's own parsing of script lines: quotes group, a backslash escapes).
std::string sbatch_value(const std::string& value, const std::string& what) {
  if (has_control_character(value))
    throw InputError(what +
                     " holds a control character (a line break?), which an #SBATCH line "
                     "cannot carry");
  static const std::regex plain("[A-Za-z0-9._+:/,=@%-]+");
  if (std::regex_match(value, plain)) return value;
  std::string out = "\"";
  for (const char c : value) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Slurm's time formats: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
// days-hours:minutes, days-hours:minutes:seconds; or no limit (UNLIMITED, INFINITE).
void check_time_limit(const std::string& time) {
  static const std::regex format("[0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+(:[0-9]+){0,2}");
  static const std::regex unlimited("unlimited|infinite", std::regex::icase);
  if (std::regex_match(time, format) || std::regex_match(time, unlimited)) return;
  throw InputError("time limit '" + time +
                   "' is not one of Slurm's formats (minutes, minutes:seconds, "
                   "hours:minutes:seconds, days-hours, days-hours:minutes, "
                   "days-hours:minutes:seconds)");
}

void check_partition(const std::string& partition) {
  static const std::regex name("[A-Za-z0-9._+:@,-]+");
  if (!std::regex_match(partition, name))
    throw InputError(
        "partition '" + partition +
        "' is not a partition name (letters, digits and . _ - + : @, comma-separated)");
}

void check_sizes(const SlurmLaunch& l) {
  const auto at_least = [](int value, int least, const char* what) {
    if (value < least)
      throw InputError(std::string(what) + " must be at least " + std::to_string(least) + ", not " +
                       std::to_string(value));
  };
  at_least(l.world_size, 1, "the world size");
  at_least(l.ranks_per_process, 1, "ranks per process");
  at_least(l.gpus_per_node, 0, "GPUs per node");
  at_least(l.devices_per_node, 1, "devices per node");
  if (l.world_size % l.ranks_per_process != 0)
    throw InputError(std::to_string(l.ranks_per_process) + " ranks per process do not divide the " +
                     std::to_string(l.world_size) + " ranks of the world");
  if (l.gpus_per_node > 0 && l.ranks_per_process > 1)
    throw InputError("on GPUs each process runs one rank (one GPU per process), not " +
                     std::to_string(l.ranks_per_process));
}

}  // namespace

SlurmLaunch slurm_launch(const RunSpec& run) {
  SlurmLaunch launch;
  launch.world_size = run.plan.world_size();
  launch.devices_per_node = run.cluster.devices_per_node;
  launch.gpus_per_node = run.backend == EngineBackend::cuda ? run.cluster.devices_per_node : 0;
  return launch;
}

SlurmLayout slurm_layout(const SlurmLaunch& l) {
  check_sizes(l);
  if (l.run_file.empty()) throw InputError("the run file's path is empty");
  if (l.pipetune.empty()) throw InputError("the pipetune binary's path is empty");
  if (!l.time_limit.empty()) check_time_limit(l.time_limit);
  if (!l.partition.empty()) check_partition(l.partition);
  SlurmLayout layout;
  layout.tasks = l.world_size / l.ranks_per_process;
  const int per_node =
      l.gpus_per_node > 0 ? l.gpus_per_node : std::max(1, l.devices_per_node / l.ranks_per_process);
  layout.tasks_per_node = std::min(per_node, layout.tasks);
  layout.nodes = (layout.tasks + layout.tasks_per_node - 1) / layout.tasks_per_node;
  return layout;
}

std::string shell_quote(const std::string& value) {
  if (value.find('\0') != std::string::npos)
    throw InputError("a shell argument cannot hold a NUL character");
  std::string out = "'";
  for (const char c : value) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string sbatch_script(const SlurmLaunch& l) {
  const SlurmLayout layout = slurm_layout(l);
  const std::string job_name = !l.job_name.empty()   ? l.job_name
                               : !l.run_name.empty() ? l.run_name
                                                     : "pipetune";
  std::ostringstream out;
  out << "#!/bin/bash\n";
  out << "# Written by pipetune: trains a run file on Slurm; submit it with sbatch.\n";
  out << "#SBATCH --job-name=" << sbatch_value(job_name, "the job name") << "\n";
  out << "#SBATCH --nodes=" << layout.nodes << "\n";
  out << "#SBATCH --ntasks=" << layout.tasks << "\n";
  out << "#SBATCH --ntasks-per-node=" << layout.tasks_per_node << "\n";
  if (l.ranks_per_process > 1) out << "#SBATCH --cpus-per-task=" << l.ranks_per_process << "\n";
  if (l.gpus_per_node > 0) out << "#SBATCH --gpus-per-node=" << layout.tasks_per_node << "\n";
  if (!l.time_limit.empty()) out << "#SBATCH --time=" << l.time_limit << "\n";
  if (!l.partition.empty()) out << "#SBATCH --partition=" << l.partition << "\n";
  out << "\n";
  // srun is given the CPUs per task again: Slurm 22.05 and 23.02 do not pass sbatch's on to it.
  out << "srun";
  if (l.ranks_per_process > 1) out << " --cpus-per-task=" << l.ranks_per_process;
  out << " " << shell_quote(l.pipetune) << " train --config " << shell_quote(l.run_file);
  if (!l.workspace.empty()) out << " --db " << shell_quote(l.workspace);
  if (!l.run_name.empty()) out << " --name " << shell_quote(l.run_name);
  if (l.ranks_per_process > 1) out << " --ranks-per-process " << l.ranks_per_process;
  for (const std::string& argument : l.train_arguments) out << " " << shell_quote(argument);
  out << "\n";
  return out.str();
}

void write_sbatch_script(const SlurmLaunch& launch, const std::string& path) {
  write_spec_file(path, sbatch_script(launch), true);
}

}  // namespace pipetune::spec
