// Where each torchtitan rule comes from: the file, version and function of pytorch/torchtitan or
// pytorch/pytorch that enforces it, named in each rule violation.
#pragma once

namespace pipetune::tuner::torchtitan_sources {

inline constexpr const char* kJobConfig =
    "pytorch/torchtitan torchtitan/config/job_config.py@6404b93";
inline constexpr const char* kParallelDims =
    "pytorch/torchtitan torchtitan/distributed/parallel_dims.py@0119de1 ParallelDims._validate";
inline constexpr const char* kTrain =
    "pytorch/torchtitan torchtitan/train.py@000204a Trainer.__init__";
inline constexpr const char* kPipelineLlm =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@02ef790 pipeline_llm";
inline constexpr const char* kBuildSchedule =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@02ef790 "
    "build_pipeline_schedule";
inline constexpr const char* kFqnSplit =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@02ef790 "
    "generate_llm_fqn_per_model_part";
inline constexpr const char* kModuleSplit =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@02ef790 "
    "pipeline_module_split";
inline constexpr const char* kScheduleClass =
    "pytorch/pytorch torch/distributed/pipelining/schedules.py@1fd7abc get_schedule_class";
inline constexpr const char* kValidateSchedule =
    "pytorch/pytorch torch/distributed/pipelining/schedules.py@1fd7abc _validate_schedule";
inline constexpr const char* kSendRecv =
    "pytorch/pytorch torch/distributed/pipelining/schedules.py@1fd7abc _add_send_recv";
inline constexpr const char* kActionFormat =
    "pytorch/pytorch torch/distributed/pipelining/schedules.py@1fd7abc _Action.from_str";

}  // namespace pipetune::tuner::torchtitan_sources
