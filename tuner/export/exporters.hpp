// Exporters: a tuned plan written as the launch file of the framework people train with.
//
//   megatron    a bash script running Megatron-LM's pretrain_gpt.py under torchrun, with the
//               parallelism, batch, recomputation and model-shape flags of the plan
//   torchtitan  a Python config module for torchtitan's current config system (b5bcd76: a
//               function returning a Trainer.Config, run with MODULE=... CONFIG=...
//               ./run_train.sh), deriving from torchtitan's own run of the registered model
//               flavor, with pipetune's own schedule order as a torch.distributed.pipelining CSV
//               beside it where torch has no class for it
//   torchtitan-toml  the same plan as a job config TOML for torchtitan 238fa99, the last commit
//               that reads TOML job files (before pytorch/torchtitan#2386)
//   deepspeed   a DeepSpeed JSON config (batch, ZeRO, AutoTP, AutoEP, the pipeline's
//               recomputation) and the Python that builds the model as the plan pipelines it
//               (a PipelineModule with the plan's stages and layer split), for DeepSpeed 0.19.6
//   pipetune    a pipetune run file that `pipetune train --config` (and `simulate`) reads
//
// Each exporter checks the rules its framework enforces before it writes anything and throws
// InputError naming the first rule the plan breaks ("megatron: global batch 96 is not divisible
// by micro-batch 4 x data-parallel 16"). The sources of the rules are in
// ../shared/reference/engine_and_style.md (A2: Megatron's validate_args, A3: torchtitan and
// DeepSpeed configs). The files they write are checked again, as text, against each
// framework's rules read from its source at a stated version: megatron_rules.hpp,
// torchtitan_rules.hpp, deepspeed_rules.hpp (tests/tuner/export).
//
// Placement: Megatron-LM takes the tp-pp-dp rank order as --use-tp-pp-dp-mapping, DeepSpeed as
// its PipelineModule's ProcessTopology (axes data, pipe); torchtitan, whose meshes order ranks
// tp-dp-pp, refuses it (where pp and dp are both above 1 and the orders differ). On a cluster of
// node groups every launch file says which nodes take which node ranks, in the plan's node group
// order (export_detail::placement_comment): launchers number nodes, they do not measure them.
//
// Offload (KARMA): Megatron-LM takes offload_activations as --cpu-offloading-num-layers (every
// layer but the last, which Megatron-LM keeps; one stage, no recomputation) and offload_optimizer
// as --optimizer-cpu-offload with the precision-aware distributed optimizer; DeepSpeed takes them
// as deepspeed.checkpointing's checkpoint_in_cpu (full recomputation: it moves what recomputed
// layers keep) and zero_optimization.offload_optimizer (ZeRO 1-3, its CPU Adam); torchtitan has
// neither and refuses both. ZeRO 0 with an offloaded optimizer exports as ZeRO-1 over one replica
// and is refused over more (both frameworks offload only a sharding optimizer).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::tuner {

enum class ExportFormat { Megatron, Torchtitan, TorchtitanToml, Deepspeed, Pipetune };
std::string_view export_format_name(ExportFormat f);
// Throws InputError listing the valid names.
ExportFormat parse_export_format(std::string_view name);
std::vector<std::string> export_format_names();

struct ExportRequest {
  spec::ModelSpec model;
  spec::ClusterSpec cluster;
  spec::ParallelPlan plan;  // apply_defaults'ed: microbatches and global_batch set
  // The search's name for the plan's vocabulary treatment ("redis": layers moved off the
  // vocabulary stages, a layer split); empty: the plan's vocabulary mode.
  std::string vocab_label;
  int train_iters = 100;
  std::string description;  // a comment line in the file, e.g. what the tuner predicted
};

// The file's text.
std::string export_plan(ExportFormat format, const ExportRequest& request);

// What a format writes beside its file, in the same folder: torchtitan's schedule CSV for
// pipetune's own schedules, DeepSpeed's model code (its JSON cannot hold the pipeline). Both
// front ends write it with the file; `text` is empty when there is none.
struct ExportSideFile {
  std::string name;  // file name, in the exported file's folder
  std::string text;
  std::string what;  // "its schedule (pipeline_parallel_schedule_csv)", for messages
};
ExportSideFile export_side_file(ExportFormat format, const ExportRequest& request);

std::string export_megatron(const ExportRequest& request);
// The Megatron-LM version export_megatron targets, as the script and `export --help` state it.
std::string_view megatron_export_target();
// The torchtitan config module (torchtitan_config_rules.hpp says what it holds); refuses
// (InputError naming the feature) vocabulary parallelism, schedules torch has no class or CSV for,
// ZeRO-1 over dp > 1, expert tensor parallelism, the tp-pp-dp rank order, offload and models
// torchtitan registers no flavor for.
std::string export_torchtitan(const ExportRequest& request);
// The torchtitan version export_torchtitan targets, as the file and `export --help` state it.
std::string_view torchtitan_export_target();
std::string export_torchtitan_toml(const ExportRequest& request);
// The torchtitan version export_torchtitan_toml targets, as `export --help` states it.
std::string_view torchtitan_toml_export_target();
// The schedule CSV a torchtitan export points pipeline_parallel_schedule_csv at, for schedules
// torch.distributed.pipelining has no class of its own for (zb-h1, zb-h2, zb-v, v-half, v-min):
// pipetune's predicted op order (pipelining_csv.hpp). "" when the plan runs a torch class or has
// no pipeline. export_torchtitan_toml embeds it in the TOML as "#csv " comment lines.
std::string torchtitan_schedule_csv(const ExportRequest& request);
// The CSV embedded in an exported torchtitan TOML; "" when there is none.
std::string embedded_schedule_csv(std::string_view torchtitan_toml);
// The DeepSpeed release and commit the DeepSpeed export is written for and checked against.
std::string_view deepspeed_target_version();
// The DeepSpeed JSON config. Refuses (InputError naming the feature) what DeepSpeed cannot run
// as planned: schedules other than 1F1B, virtual stages, vocabulary parallelism, ZeRO 2/3 or
// AutoTP with a pipeline, Megatron-style sequence parallelism, selective recomputation, expert
// parallelism AutoEP cannot take (with a pipeline, expert TP, a model it has no preset for),
// activation offload without full recomputation and optimizer offload with ZeRO 0 over dp > 1.
std::string export_deepspeed(const ExportRequest& request);
// The Python file written beside the JSON (deepspeed_model_code_file(), which the JSON names):
// the pipeline's stages and layer split as a PipelineModule, and recomputation. Refuses as
// export_deepspeed does.
std::string deepspeed_model_code(const ExportRequest& request);
std::string_view deepspeed_model_code_file();
std::string export_pipetune(const ExportRequest& request);

}  // namespace pipetune::tuner
