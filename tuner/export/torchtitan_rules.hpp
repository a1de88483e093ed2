// torchtitan's own rules, checked on an exported job config (the TOML export_torchtitan writes)
// and, when it names one, the schedule CSV it points torch.distributed.pipelining at.
//
// Sources (the stored versions read for this):
//   pytorch/torchtitan torchtitan/config/job_config.py@6404b93 (the TOML schema: sections, keys,
//     literal values) -- the schema before the 2026 dataclass refactor
//   pytorch/torchtitan torchtitan/distributed/parallel_dims.py@0119de1 (ParallelDims._validate)
//   pytorch/torchtitan torchtitan/train.py@000204a (Trainer: batch sizes)
//   pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@02ef790 (pipeline_llm,
//     build_pipeline_schedule, generate_llm_fqn_per_model_part, pipeline_module_split: the
//     module lists of module_fqns_per_model_part)
//   pytorch/pytorch torch/distributed/pipelining/schedules.py@1fd7abc (get_schedule_class,
//     _Action, _validate_schedule, _add_send_recv); DualPipeV is the class torchtitan@02ef790
//     imports from it in later torch releases
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "tuner/export/rule_violation.hpp"

namespace pipetune::tuner {

// What the launch supplies besides the file: the number of processes (NGPU) and the model's
// layer count (torchtitan takes it from the registered model flavor, not from the TOML).
struct TorchtitanLaunch {
  int world_size = 0;
  int num_layers = 0;
  // The schedule CSV's text when the config names one (pipeline_parallel_schedule_csv); empty
  // when there is none or it was not supplied.
  std::string schedule_csv;
};

// The TOML's keys as "section.key" -> value text (strings unquoted, a one-line array as written).
// Throws InputError for a line that is neither a section, a key = value, a comment nor blank.
std::map<std::string, std::string> parse_torchtitan_toml(std::string_view toml);

// Every torchtitan / torch.distributed.pipelining rule the config (and CSV) break.
RuleViolations check_torchtitan_config(std::string_view toml, const TorchtitanLaunch& launch);

// The CSV rules alone: rows, stage placement, action counts and order, and that torch's lowering
// to send/recv actions can schedule every action (no rank waits forever).
//   v_placement: the config's schedule class places stages V-shaped (ZBVZeroBubble, DualPipeV)
RuleViolations check_pipelining_csv(std::string_view csv, int pp, int stages, int microbatches,
                                    bool v_placement);

}  // namespace pipetune::tuner
