// What the command nsys launched says about the job's ranks (META_DATA_CAPTURE's PROCESS_0
// command and arguments): torchrun / python -m torch.distributed.run (--nnodes,
// --nproc_per_node / --nproc-per-node, --node_rank / --node-rank) and mpirun / mpiexec / srun
// (-np / -n / --ntasks). A capture of one node holds that node's worker processes: their local
// ranks follow the device (else PID) order, and their global ranks start at node_rank *
// nproc_per_node.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pipetune::db {

struct LaunchCommand {
  std::string launcher;                            // "torchrun", "mpirun", "srun"
  std::string text;                                // the command line as captured, for messages
  std::optional<std::int32_t> processes_per_node;  // torchrun --nproc_per_node
  std::optional<std::int32_t> nodes;               // torchrun --nnodes (a fixed count)
  std::optional<std::int32_t> node_rank;           // torchrun --node_rank
  std::optional<std::int32_t> world_size;          // nodes x per node, or mpirun -np
};

// nullopt when the command is none of the launchers above. `command` and `arguments` as nsys
// records them (PROCESS_0:COMMAND, PROCESS_0:ARGUMENT_i in order).
std::optional<LaunchCommand> parse_launch_command(const std::string& command,
                                                  const std::vector<std::string>& arguments);

}  // namespace pipetune::db
