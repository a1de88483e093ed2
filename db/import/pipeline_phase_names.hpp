// Recognises the names training frameworks give pipeline-parallel compute phases, so an imported
// range becomes an F / B / W / BW span with its micro-batch instead of a plain Range.
//
// Recognised (anything else is not a phase):
//  - PiPPy's visualizer: "F_{stage},{mb}" forward, "B_{stage},{mb}" (full) backward,
//    "S_{stage},{mb}" its SYNC_BARRIER phase (-> Barrier).
//  - torch.distributed.pipelining record_function names "PP:{stage}{action}{mb}" (schedules.py
//    _get_profiler_function_name): F forward, I input backward (-> B), W weight backward (-> W),
//    B full backward (-> BW).
//  - Plain forward/backward ranges, optionally after a dotted module path (Megatron's
//    nvtx_range_push default message is "<module>.<function>[.<suffix>]"): "forward",
//    "forward-compute", "forward_step", "forward pass", "fwd", the same for backward/bwd, each
//    optionally followed by a micro-batch number ("forward_3", "backward-compute mb=2",
//    "Forward pass 3", "forward microbatch 1"). Case-insensitive. After a module path the bare
//    word is not enough ("model.mlp.forward" is a module's forward): "x.forward_step" is.
// Megatron-LM's own pipeline schedule ranges ("...forward_backward_pipelining_with_interleaving.
// warmup" / ".steady" / ".cooldown" / ".misc") are phases of the whole schedule, not of one
// micro-batch: they stay Range spans. "forward-backward" (the whole step) is not a phase either.
//
// A full backward (input and weight gradients together) maps to BW, the project's fused backward
// (the kind the GPipe and 1F1B generators emit), so imported and simulated traces line up.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "profiler/trace.hpp"

namespace pipetune::db {

struct PipelinePhase {
  profiler::SpanKind kind = profiler::SpanKind::F;
  std::int32_t microbatch = -1;  // -1 when the name carries none
  std::int32_t stage = -1;       // pipeline stage named by the range (PiPPy, PP:), else -1
};

std::optional<PipelinePhase> match_pipeline_phase(std::string_view name);

// Python function events (PyTorch profiler with_stack, category "python_function") that are
// pipeline phases: DeepSpeed's pipeline engine runs each forward and backward of its schedule in
// PipelineEngine._exec_forward_pass / _exec_backward_pass (deepspeed/runtime/pipe/engine.py),
// recorded as "deepspeed/runtime/pipe/engine.py(712): _exec_forward_pass" -> F / BW, micro-batch
// unknown. Other Python functions are not phases (a module's forward is not one).
std::optional<PipelinePhase> match_python_function_phase(std::string_view name);

}  // namespace pipetune::db
