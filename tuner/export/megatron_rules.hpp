// Megatron-LM's own argument rules, checked on an exported launch script (the text
// export_megatron writes, not the plan behind it): the script is parsed back into its flags,
// environment and launch size, and each rule Megatron-LM enforces at start-up is re-checked.
//
// Sources (NVIDIA/Megatron-LM, each at the version it was read at; the export targets
// kMegatronTarget, against which an audit of nine exported scripts found them right, but the
// rules below not cited at it have not all been re-read there):
//   megatron/training/arguments.py@000c4ac (validate_args)
//   megatron/core/num_microbatches_calculator.py@00caa53 (ConstantNumMicroBatchesCalculator)
//   megatron/core/transformer/transformer_config.py@002526d (TransformerConfig.__post_init__)
//   megatron/core/model_parallel_config.py@02aa3ee (ModelParallelConfig.__post_init__)
//   megatron/core/transformer/pipeline_parallel_layer_layout.py@d98e8a6
//     (PipelineParallelLayerLayout: parse_str_to_list, validate_layer_layout)
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "tuner/export/rule_violation.hpp"

namespace pipetune::tuner {

// The Megatron-LM version the export writes for (said in every script it writes).
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
