// DeepSpeed's own rules, checked on an exported DeepSpeed config (the JSON export_deepspeed
// writes) and the model code beside it (deepspeed_model_code: the PipelineModule's stages and
// layer split), as DeepSpeed 0.19.6 (deepspeedai/DeepSpeed@edaa722) reads them.
//
// Sources, all at edaa722: deepspeed/runtime/config.py (DeepSpeedConfig: world size,
// _initialize_params, _set_batch_related_parameters, _batch_assertion, _do_error_check,
// get_pipeline_config), deepspeed/runtime/config_utils.py (DeepSpeedConfigModel: sections refuse
// unknown keys), deepspeed/runtime/zero/config.py, deepspeed/runtime/precision_config.py,
// deepspeed/runtime/tensor_parallel/config.py, deepspeed/runtime/engine.py (AutoTP's mesh),
// deepspeed/module_inject/auto_ep_config.py and auto_ep_folding.py (AutoEP),
// deepspeed/runtime/pipe/module.py (PipelineModule) and pipe/engine.py (PipelineEngine); for
// offload, deepspeed/runtime/zero/offload_config.py (ZeRO-Offload), engine.py
// (_configure_optimizer: its CPU Adam) and runtime/activation_checkpointing/checkpointing.py
// (checkpoint_in_cpu).
#pragma once

#include <string>
#include <string_view>

#include "tuner/export/rule_violation.hpp"

namespace pipetune::tuner {

struct DeepspeedLaunch {
  int world_size = 0;      // the processes the launcher starts
  int decoder_layers = 0;  // the model's decoder layers; 0: the split's total is not checked
  // pipetune_deepspeed.py's text; empty: the model is no PipelineModule (one stage).
  std::string model_code;
};

// Throws InputError when the JSON is not JSON or the model code has no PIPELINE_STAGES.
RuleViolations check_deepspeed_config(std::string_view json, const DeepspeedLaunch& launch);

}  // namespace pipetune::tuner
