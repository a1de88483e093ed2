#include "cli/tuning_target.hpp"

#include "engine/errors.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/validate.hpp"

namespace pipetune::cli {

void add_target_options(CLI::App* cmd, TargetArgs& a) {
  cmd->add_option("--model", a.model, "Model preset or TOML file")->required();
  cmd->add_option("--hardware", a.hardware, "Hardware preset or TOML file")->required();
  cmd->add_option("--gpus", a.gpus, "Number of GPUs")->required();
  cmd->add_option("--nodes-of", a.nodes_of, "GPUs per node (default: the hardware's)");
  cmd->add_option("--global-batch", a.global_batch, "Sequences per iteration")->required();
  cmd->add_option("--seq", a.seq, "Sequence length (default: the model's)");
}

}  // namespace pipetune::cli
