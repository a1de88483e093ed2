// torchtitan's own rules, checked on an exported run config for torchtitan's current config
// system (the Python module export_torchtitan writes) and, when it names one, the schedule CSV
// it points torch.distributed.pipelining at.
//
// The module is read the way torchtitan b5bcd76 runs it: ConfigManager._load_config imports it
// and calls the function CONFIG names; the function calls torchtitan's own run of a flavor
// (config_registry.py), sets fields of its Trainer.Config (slots dataclasses: a field that does
// not exist raises), builds a ParallelismConfig (keyword-only: an unknown keyword raises) and
// returns it. Then the checks torchtitan makes at start-up: the dataclasses' __post_init__, the
// flavor lookup (a plain dict access), ParallelDims._validate, the trainer's token counts and
// the pipeline's stages (torchtitan_pipeline_rules.hpp). Sources, with lines, are in
// torchtitan_sources.hpp (torchtitan_config_sources).
//
// The reader knows the statements pipetune writes; any other is reported, not skipped, so a
// check never passes a file it did not read.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "tuner/export/rule_violation.hpp"
#include "tuner/export/torchtitan_rules.hpp"

namespace pipetune::tuner {

// The function an exported module defines (run_train.sh's CONFIG).
inline constexpr const char* kTorchtitanConfigFunction = "pipetune_plan";
// The schedule CSV's path as the module writes it: the file beside the module.
inline constexpr const char* kTorchtitanCsvBesideThisFile =
    "os.path.join(os.path.dirname(os.path.abspath(__file__)), \"pipetune_schedule.csv\")";

// The module's statements as keys: "import.<name>" -> module, "function" -> the function's
// name, "base" -> the run it calls, "model.flavor", "compile", "training.<field>",
// "parallelism.<field>", "activation_checkpoint" -> value text (strings unquoted; a list of
// lists on one line; the CSV path beside the file as "pipetune_schedule.csv"), and
// "unread.<line>" -> a statement the reader does not know. Throws InputError for a file that is
// not a module of this shape at all (no function).
std::map<std::string, std::string> parse_torchtitan_config_module(std::string_view module);

// Every torchtitan / torch.distributed.pipelining rule the module (and CSV) break. Of `launch`,
// world_size, schedule_csv and model_shape are used (the layer count is the flavor's).
RuleViolations check_torchtitan_config_module(std::string_view module,
                                              const TorchtitanLaunch& launch);

}  // namespace pipetune::tuner
