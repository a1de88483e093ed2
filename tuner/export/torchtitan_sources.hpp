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
inline constexpr const char* kRankMesh =
    "pytorch/torchtitan torchtitan/distributed/parallel_dims.py@238fa99:136-158 "
    "ParallelDims.build_mesh (every mesh (pp, ..., tp): pp outermost, tp innermost)";
inline constexpr const char* kCpuOffload =
    "pytorch/torchtitan torchtitan/config/job_config.py@238fa99:270 Training.enable_cpu_offload, "
    "torchtitan/models/llama3/infra/parallelize.py@238fa99:317 apply_fsdp (CPUOffloadPolicy)";
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

// The rules of torchtitan's current config system, read at b5bcd76 (main, 2026-08-21): a run is a
// Python function returning a Trainer.Config, selected with --module / --config
// (pytorch/torchtitan#2386 replaced the TOML job files).
namespace pipetune::tuner::torchtitan_config_sources {

inline constexpr const char* kTargetCommit = "b5bcd76";
inline constexpr const char* kTargetDate = "2026-08-21";

inline constexpr const char* kLoadConfig =
    "pytorch/torchtitan torchtitan/config/manager.py@b5bcd76:48-159 ConfigManager._load_config";
inline constexpr const char* kConfigExports =
    "pytorch/torchtitan torchtitan/config/__init__.py@b5bcd76 (from .configs import ...)";
inline constexpr const char* kTrainingConfig =
    "pytorch/torchtitan torchtitan/config/configs.py@b5bcd76:35-118 TrainingConfig";
inline constexpr const char* kParallelismConfig =
    "pytorch/torchtitan torchtitan/config/configs.py@b5bcd76:120-292 ParallelismConfig";
inline constexpr const char* kCompileConfig =
    "pytorch/torchtitan torchtitan/config/configs.py@b5bcd76:293-315 CompileConfig";
inline constexpr const char* kTrainerConfig =
    "pytorch/torchtitan torchtitan/trainer.py@b5bcd76:70-166 Trainer.Config.__post_init__";
inline constexpr const char* kCudaGraphs =
    "pytorch/torchtitan torchtitan/trainer.py@b5bcd76:168-200 "
    "Trainer.Config._validate_cuda_graphs";
inline constexpr const char* kSeqLenDivisor =
    "pytorch/torchtitan torchtitan/trainer.py@b5bcd76:296-307 Trainer.__init__ (token-count "
    "evenness)";
inline constexpr const char* kTokensPerStep =
    "pytorch/torchtitan torchtitan/trainer.py@b5bcd76:409-428 Trainer.__init__ (tokens per train "
    "step, gradient accumulation)";
inline constexpr const char* kParallelDims =
    "pytorch/torchtitan torchtitan/distributed/parallel_dims.py@b5bcd76:166-193 "
    "ParallelDims._validate";
inline constexpr const char* kExpertMesh =
    "pytorch/torchtitan torchtitan/distributed/parallel_dims.py@b5bcd76:280-330 "
    "ParallelDims.build_mesh (sparse mesh pp, dp_replicate, efsdp, ep: no expert TP axis)";
inline constexpr const char* kRankMesh =
    "pytorch/torchtitan torchtitan/distributed/parallel_dims.py@b5bcd76:280-330 "
    "ParallelDims.build_mesh (every mesh (pp, ..., tp): pp outermost, tp innermost)";
inline constexpr const char* kCpuOffload =
    "pytorch/torchtitan torchtitan/config/configs.py@b5bcd76:70 TrainingConfig.enable_cpu_offload, "
    "torchtitan/distributed/fsdp.py@b5bcd76:231-232 (CPUOffloadPolicy)";
inline constexpr const char* kActivationCheckpoint =
    "pytorch/torchtitan torchtitan/distributed/activation_checkpoint.py@b5bcd76:112-337 "
    "(FullAC, SelectiveAC, MemoryBudgetAC, ActivationCheckpointingConfig)";
inline constexpr const char* kLlama3Configs =
    "pytorch/torchtitan torchtitan/models/llama3/__init__.py@b5bcd76:114-366 llama3_configs, "
    "369-390 model_registry";
inline constexpr const char* kLlama3Registry =
    "pytorch/torchtitan torchtitan/models/llama3/config_registry.py@b5bcd76:38,194,267,305 "
    "llama3_debugmodel, llama3_8b, llama3_70b, llama3_405b";
inline constexpr const char* kFfnHidden =
    "pytorch/torchtitan torchtitan/models/common/feed_forward.py@b5bcd76:18-31 "
    "compute_ffn_hidden_dim";
inline constexpr const char* kPipelineLlm =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@b5bcd76:194-264 "
    "_get_pipeline_metadata";
inline constexpr const char* kFqnSplit =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@b5bcd76:357-467 "
    "_generate_llm_fqn_per_model_part";
inline constexpr const char* kModuleSplit =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@b5bcd76:470-640 "
    "_split_module, _get_pp_rank_to_stage_indices_mapping, _pipeline_module_split";
inline constexpr const char* kBuildSchedule =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@b5bcd76:267-354 "
    "_build_pipeline_schedule";

}  // namespace pipetune::tuner::torchtitan_config_sources
