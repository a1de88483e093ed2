#include "cli/tuning_target.hpp"

#include "engine/errors.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/validate.hpp"

namespace pipetune::cli {

namespace {

// A count that must be given as 1 or more (0 would silently mean "the default").
const CLI::Validator kAtLeastOne(
    [](const std::string& text) -> std::string {
      long long v = 0;
      try {
        std::size_t used = 0;
        v = std::stoll(text, &used);
        if (used != text.size()) return "must be a whole number, not '" + text + "'";
      } catch (const std::exception&) {
        return "must be a whole number, not '" + text + "'";
      }
      return v >= 1 ? std::string() : "must be at least 1, not " + text;
    },
    "COUNT", "at least 1");

}  // namespace

void add_target_options(CLI::App* cmd, TargetArgs& a) {
  cmd->add_option("--model", a.model, "Model preset or TOML file")->required();
  CLI::Option* hardware = cmd->add_option("--hardware", a.hardware, "Hardware preset or TOML file");
  // Given sizes are positive: 0 would silently mean "the default" (--seq, --nodes-of).
  CLI::Option* gpus = cmd->add_option("--gpus", a.gpus, "Number of GPUs")->check(kAtLeastOne);
  CLI::Option* nodes =
      cmd->add_option("--nodes-of", a.nodes_of, "GPUs per node (default: the hardware's)")
          ->check(kAtLeastOne);
  // Either a cluster (its hardware, size and node groups) or hardware x GPUs.
  CLI::Option* cluster = cmd->add_option(
      "--cluster", a.cluster,
      "Cluster preset or TOML file (hardware, GPUs, node groups with their NICs) instead of "
      "--hardware/--gpus/--nodes-of");
  cluster->excludes(hardware)->excludes(gpus)->excludes(nodes);

  cmd->add_option("--global-batch", a.global_batch, "Sequences per iteration")
      ->required()
      ->check(kAtLeastOne);
  cmd->add_option("--seq", a.seq, "Sequence length (default: the model's)")->check(kAtLeastOne);
}

void require_target_options(const TargetArgs& a, const std::string& alternative) {
  if (!a.cluster.empty()) return;  // it gives the hardware and GPUs (resolve_target checks it)
  if (a.hardware.empty())
    throw InputError("--hardware is required (or --cluster" + alternative + ")");
  if (a.gpus == 0) throw InputError("--gpus is required (or --cluster" + alternative + ")");
}

}  // namespace pipetune::cli
