// Megatron-LM's own argument rules, checked on an exported launch script (the text
// export_megatron writes, not the plan behind it): the script is parsed back into its flags,
// environment and launch size, and each rule Megatron-LM enforces at start-up is re-checked.
//
// Sources (NVIDIA/Megatron-LM at kMegatronTarget, the version the export targets; each rule
// cites its file and function, and what became a warning there is no longer a violation):
//   megatron/training/arguments.py@d98e8a6 (validate_args)
//   megatron/core/num_microbatches_calculator.py@d98e8a6 (ConstantNumMicroBatchesCalculator)
//   megatron/core/transformer/transformer_config.py@d98e8a6 (TransformerConfig.__post_init__)
//   megatron/core/model_parallel_config.py@d98e8a6 (ModelParallelConfig.__post_init__)
//   megatron/core/transformer/pipeline_parallel_layer_layout.py@d98e8a6
//     (PipelineParallelLayerLayout: parse_str_to_list, validate_layer_layout)
//   megatron/core/parallel_state.py@d98e8a6 (initialize_model_parallel: the tp-pp-dp order's
//     expert grid)
//   megatron/core/optimizer/__init__.py@d98e8a6 (get_megatron_optimizer: the precision-aware
//     optimizer that optimizer CPU offload runs in needs the distributed optimizer)
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "tuner/export/rule_violation.hpp"

namespace pipetune::tuner {

// The Megatron-LM version the export writes for (said in every script) and the rules are read at.
inline constexpr const char* kMegatronTarget =
    "NVIDIA/Megatron-LM commit d98e8a6 (main, 2026-08-22)";

// What the launch script says: its flags (name -> value, "" for a switch; the last one wins, as
// in argparse), the launch size and CUDA_DEVICE_MAX_CONNECTIONS as the script leaves it.
struct MegatronLaunch {
  std::map<std::string, std::string> flags;
  int gpus_per_node = 0;
  int nodes = 0;
  std::string cuda_device_max_connections;  // "" when the script unsets it or never sets it
  int world_size() const { return gpus_per_node * nodes; }
};

// Throws InputError when the text is not a script of export_megatron's shape (no flag blocks,
// no GPUS_PER_NODE / NNODES).
MegatronLaunch parse_megatron_script(std::string_view script);

// Every Megatron-LM rule the launch breaks (empty: Megatron-LM accepts it).
RuleViolations check_megatron_launch(const MegatronLaunch& launch);
RuleViolations check_megatron_script(std::string_view script);

}  // namespace pipetune::tuner
