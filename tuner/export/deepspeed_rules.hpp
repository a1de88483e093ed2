// DeepSpeed's own rules, checked on an exported JSON config (the text export_deepspeed writes).
//
// Sources (deepspeedai/DeepSpeed, the stored versions read for this):
//   deepspeed/runtime/config.py@029f12b (DeepSpeedConfig: world size, _batch_assertion,
//     _do_error_check, _initialize_params)
//   deepspeed/runtime/pipe/engine.py@e787c16 (PipelineEngine.__init__)
#pragma once

#include <string_view>

#include "tuner/export/rule_violation.hpp"

namespace pipetune::tuner {

// world_size: the processes the launcher starts. DeepSpeed's batch rule counts data-parallel
// ranks only: with the pipeline engine (a PipelineModule's grid) and AutoTP, DP = world /
// (pipeline stages x autotp_size). Throws InputError when the text is not JSON.
RuleViolations check_deepspeed_config(std::string_view json, int world_size);

}  // namespace pipetune::tuner
