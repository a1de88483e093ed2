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
  cmd->add_option("--hardware", a.hardware, "Hardware preset or TOML file")->required();
  // Given sizes are positive: 0 would silently mean "the default" (--seq, --nodes-of).
  cmd->add_option("--gpus", a.gpus, "Number of GPUs")->required()->check(kAtLeastOne);
  cmd->add_option("--nodes-of", a.nodes_of, "GPUs per node (default: the hardware's)")
      ->check(kAtLeastOne);
  cmd->add_option("--global-batch", a.global_batch, "Sequences per iteration")
      ->required()
      ->check(kAtLeastOne);
  cmd->add_option("--seq", a.seq, "Sequence length (default: the model's)")->check(kAtLeastOne);
}

}  // namespace pipetune::cli
