// Recognises the names training frameworks give pipeline-parallel compute phases, so an imported
// range becomes an F / B / W / BW span with its micro-batch instead of a plain Range.
//
// Recognised (anything else is not a phase). Each source is given with the release or commit its
// names were read at; "release not established" means no stored copy tied the code to a version.
//  - PiPPy (pytorch/PiPPy): "F_{stage},{mb}" forward, "B_{stage},{mb}" (full) backward,
//    "S_{stage},{mb}" its SYNC_BARRIER phase (-> Barrier). The names are made in
//    pippy/PipelineDriver.py ({F|B|S}_{rank},{mb} at b39beba, the 2022-04-08 initial commit; the
//    later event_name() uses the stage id) and written by pippy/visualizer.py events_to_json.
//    Later PipelineDriver versions add "A_{stage},{mb}" (ACCUMULATE_GRAD), not a phase here.
//    Releases: torchpippy 0.2.0 (PR #936, the PyTorch 2 tracer) lists neither file. PipelineDriver
//    was still in the tree after February 2023 (beside pippy.compile, PR #749) and was taken out
//    from December 2023 (PR #919), so 0.1.0 (frozen 2023-04-18, PR #783) and 0.1.1 (PR #798) very
//    likely make these names; no stored commit is pinned to them, so that was not read.
//  - torch.distributed.pipelining record_function names "PP:{stage}{action}{mb}": schedules.py
//    _get_profiler_function_name returns "PP:" + str(_Action), and _PipelineScheduleRuntime wraps
//    every action of its schedule in it. Added by pytorch/pytorch PR #160753 (opened 2025-08-15):
//    absent at 1fd7abc, present in later copies. First release 2.9.0, not 2.8.0: ROCm/pytorch's
//    release/2.9 merges 10b22ea and 6aedb8a carry it on the 2.9.0 side of their conflicts. Compute
//    actions: F forward, I input backward (-> B), W weight backward (-> W), B full backward
//    (-> BW). The other actions (UNSHARD, RESHARD, SEND_F/RECV_F/SEND_B/RECV_B, REDUCE_GRAD, and
//    DualPipeV's "(a;b)OVERLAP_F_B" pair) are not phases. In the 2.4 release the action letters
//    were F and B only and _Action printed "F3_s1"; no PP: names existed then. torchtitan runs
//    torch's classes, so whether its trace has PP: names depends on the torch it runs, not on
//    torchtitan's version. At 1fd7abc the multi-stage classes (Interleaved1F1B, zero bubble) still
//    derive from PipelineScheduleMulti and emit no PP: names; later copies run them through
//    _PipelineScheduleRuntime.
//  - Plain forward/backward ranges: "forward", "forward-compute", "forward_step", "forward pass",
//    "fwd", the same for backward/bwd, each optionally followed by a micro-batch number
//    ("forward_3", "backward-compute mb=2", "Forward pass 3", "forward microbatch 1").
//    Case-insensitive. torch.distributed.pipelining's ScheduleGPipe names its ranges
//    "Forward {i}" / "Backward {i}" (_ScheduleForwardOnly "Forward {i}"; Schedule1F1B none),
//    at 1fd7abc and after. "forward-compute" / "backward-compute" are Megatron-LM's timer
//    names (config.timers in megatron/core/pipeline_parallel/schedules.py), not NVTX ranges, so
//    they match only ranges a user labels the same way. Megatron emits no per-micro-batch
//    forward/backward NVTX range itself (read at core 0.12.1, 0.14.0rc6 and NVIDIA 00611e6).
//    The name may follow a dotted module path, as Megatron's nvtx_range_push (no message) and
//    nvtx_decorator() name a function "<module>.<function>[.<suffix>]" (megatron/core/utils.py,
//    read at core 0.14.0rc6). After a module path the bare word is not enough:
//    "model.mlp.forward", or Megatron's decorated
//    "megatron.core.fusions.fused_bias_swiglu.forward", is a module's forward. "x.forward_step" is
//    a phase.
// Megatron-LM's interleaved schedule ranges ("...forward_backward_pipelining_with_interleaving.
// warmup" / ".steady" / ".cooldown" / ".misc") are phases of the whole schedule, not of one
// micro-batch: they stay Range spans. They are pushed only after configure_nvtx_profiling(True)
// (--nvtx-ranges). They appear in megatron-core 0.14.0rc6 (ssb233/Megatron-LM@f3e5a3a) and at
// NVIDIA/Megatron-LM@00611e6. They are absent from 0.12.1 (eileenzhujuan/AnchorVLA4D@8cee81d,
// whose schedules.py has no NVTX) and from a 0.12.2-based fork; 0.13 was not read.
// "forward-backward" (the whole step, also a Megatron timer name) is not a phase either.
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
// The two methods came with the pipeline engine (deepspeedai/DeepSpeed PR #392; DeepSpeedExamples'
// pipeline example, PR #50, was approved 2020-09-10). They were read at samyam/DeepSpeed@f095c7d
// and deepspeedai/DeepSpeed@e787c16. They shipped as version 0.3.0 (September 2020, "DeepSpeed
// v0.3 includes new support for pipeline parallelism", docs/_tutorials/pipeline.md at 0bec105);
// the first release installable with pip was 0.3.1 (PR #496, 2020-10-30).
// DeepSpeed's own NVTX ranges (deepspeed/utils/nvtx.py instrument_w_nvtx, named by __qualname__:
// "DeepSpeedEngine.forward", "DeepSpeedEngine.backward") are not matched. In the pipeline engine
// every stage's _exec_forward_pass calls DeepSpeedEngine.forward, but only the last stage's
// backward goes through DeepSpeedEngine.backward.
std::optional<PipelinePhase> match_python_function_phase(std::string_view name);

}  // namespace pipetune::db
