// Where each torchtitan rule comes from: the file, commit, lines and function of
// pytorch/torchtitan or pytorch/pytorch that enforces it, named in each rule violation.
// torchtitan rules are read at 238fa99 (2026-02-23), the last commit whose job configs are TOML
// files (pytorch/torchtitan#2386 replaced them with a Python config registry).
#pragma once

namespace pipetune::tuner::torchtitan_sources {

// The torchtitan commit the export targets, named in the file and in `export --help`.
inline constexpr const char* kTargetCommit = "238fa99";

inline constexpr const char* kJobConfig =
    "pytorch/torchtitan torchtitan/config/job_config.py@238fa99 JobConfig (l.1000)";
inline constexpr const char* kTomlLoader =
    "pytorch/torchtitan torchtitan/config/manager.py@238fa99:160-171 "
    "ConfigManager._dict_to_dataclass";
inline constexpr const char* kTrainSpecLookup =
    "pytorch/torchtitan torchtitan/protocols/train_spec.py@238fa99:71-87 get_train_spec "
    "(torchtitan/models/__init__.py@238fa99:7-9 _supported_models)";
inline constexpr const char* kFlavorLookup =
    "pytorch/torchtitan torchtitan/train.py@238fa99:138 "
    "train_spec.model_args[job_config.model.flavor]";
inline constexpr const char* kLlama3Flavors =
    "pytorch/torchtitan torchtitan/models/llama3/__init__.py@238fa99:29-100 llama3_args";
inline constexpr const char* kLlama3FfnHidden =
    "pytorch/torchtitan torchtitan/models/llama3/model/model.py@238fa99:307-338,378 "
    "FeedForward (hidden_dim=4*dim)";
inline constexpr const char* kParallelDims =
    "pytorch/torchtitan torchtitan/distributed/parallel_dims.py@238fa99:35-59 "
    "ParallelDims._validate";
inline constexpr const char* kExpertMesh =
    "pytorch/torchtitan torchtitan/distributed/parallel_dims.py@238fa99:138 "
    "ParallelDims.build_mesh (efsdp = fsdp * tp // (etp * ep))";
inline constexpr const char* kDualPipeV =
    "pytorch/torchtitan torchtitan/distributed/dual_pipe_v.py@238fa99:32-51 "
    "get_dual_pipe_v_flag";
inline constexpr const char* kTensorParallel =
    "pytorch/torchtitan torchtitan/models/llama3/infra/parallelize.py@238fa99:161-233 apply_tp";
inline constexpr const char* kTrain =
    "pytorch/torchtitan torchtitan/train.py@238fa99:196-215 Trainer.__init__";
inline constexpr const char* kPipelineLlm =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@238fa99:43-157 "
    "pipeline_llm";
inline constexpr const char* kBuildSchedule =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@238fa99:158-235 "
    "build_pipeline_schedule";
inline constexpr const char* kFqnSplit =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@238fa99:236-346 "
    "generate_llm_fqn_per_model_part";
inline constexpr const char* kModuleSplit =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@238fa99:347-480 "
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
