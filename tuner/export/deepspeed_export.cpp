// DeepSpeed export, targeting DeepSpeed 0.19.6 (deepspeedai/DeepSpeed@edaa722): a JSON config
// (keys of deepspeed/runtime/config.py DeepSpeedConfig._initialize_params and the config
// classes it builds) and, beside it, pipetune_deepspeed.py, the Python that builds the model the
// way the plan splits it. DeepSpeed's JSON cannot carry the pipeline: the stages and the layer
// split are PipelineModule arguments (deepspeed/runtime/pipe/module.py), so the Python file
// carries them. What DeepSpeed cannot express is refused, naming the feature, never dropped.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tuner/export/export_common.hpp"

namespace pipetune::tuner {

using export_detail::require;

namespace {

constexpr std::string_view kFw = "deepspeed";

bool is_mixtral(const spec::ModelSpec& m) {
  return m.name.rfind("mixtral", 0) == 0;
}

// Experts are tensor-parallel over tp when they are gated (as the Megatron export's
// --expert-tensor-parallel-size says).
bool experts_tensor_parallel(const spec::ModelSpec& m, const spec::ParallelPlan& p) {
  return spec::is_moe(m) && export_detail::expert_tensor_parallel(m, p) > 1;
}

// Pipeline, tensor parallelism, recomputation, ZeRO.
void check_dense_features(const ExportRequest& r) {
  const spec::ParallelPlan& p = r.plan;
  // pipe/schedule.py TrainSchedule is DeepSpeed's one training schedule (1F1B, one stage per
  // rank).
  require(p.pp == 1 || p.schedule == "1f1b", kFw,
          "schedule " + p.schedule + ": DeepSpeed's pipeline engine runs 1F1B only");
  require(p.chunks == 1, kFw,
          "virtual pipeline stages (" + std::to_string(p.chunks) +
              " per rank): a PipelineModule places one stage per rank");
  require(p.vocab == schedule::VocabMode::None, kFw,
          "vocabulary parallelism (" + std::string(schedule::vocab_mode_name(p.vocab)) +
              ") is not in DeepSpeed");
  // pipe/engine.py PipelineEngine.__init__ asserts stage < ZeroStageEnum.gradients.
  require(p.pp == 1 || p.zero_stage <= 1, kFw,
          "ZeRO stage " + std::to_string(p.zero_stage) +
              " cannot be combined with pipeline parallelism "
              "(DeepSpeed's pipeline engine allows ZeRO 0 or 1)");
  // engine.py _configure_tensor_parallel_states: AutoTP builds its (data, tensor) mesh over
  // the whole world (utils/groups.py _init_tp_mesh_device), with no pipeline dimension.
  require(p.pp == 1 || p.tp == 1, kFw,
          "tensor parallelism (tp=" + std::to_string(p.tp) +
              ") with pipeline parallelism (pp=" + std::to_string(p.pp) +
              "): DeepSpeed's AutoTP mesh has no pipeline dimension, and a PipelineModule's "
              "grid takes no AutoTP");
  require(!(p.sequence_parallel && p.tp > 1), kFw,
          "sequence parallelism (activations split over the tp ranks): AutoTP has none "
          "(DeepSpeed's sequence parallelism is Ulysses, over ranks of its own)");
  require(p.recompute != spec::Recompute::Selective, kFw,
          "selective recomputation: DeepSpeed recomputes whole layers "
          "(activation_checkpoint_interval), not attention alone");
}

// Expert parallelism is DeepSpeed's AutoEP (the config's expert_parallel section,
// deepspeed/module_inject/auto_ep_config.py parse_autoep_config), which replaces a Hugging Face
// model's MoE blocks found by a preset's module pattern.
void check_experts(const ExportRequest& r) {
  const spec::ParallelPlan& p = r.plan;
  require(p.moe_chunks == 1, kFw,
          "moe_chunks=" + std::to_string(p.moe_chunks) +
              " (each MoE layer's all-to-all in chunks overlapped with the experts' GEMMs) is "
              "not among DeepSpeed's settings; export the plan with moe_chunks 1");
  if (p.ep == 1) return;
  const std::string what = "expert parallelism (ep=" + std::to_string(p.ep) + ")";
  require(p.pp == 1, kFw,
          what +
              " with pipeline parallelism: AutoEP finds MoE blocks by their Hugging Face "
              "module names (model.layers.N.mlp), which a PipelineModule's layer list renames");
  require(is_mixtral(r.model), kFw,
          what + " for " + r.model.name +
              ": DeepSpeed's AutoEP presets are mixtral, deepseek_v2, deepseek_v3, qwen3_moe "
              "and qwen3_5_moe");
  // module_inject/auto_ep_folding.py validate_folding_global.
  require(!experts_tensor_parallel(r.model, p), kFw,
          what + " with expert tensor parallelism (experts over tp=" + std::to_string(p.tp) +
              "): AutoEP takes expert_tensor_parallel_size 1 only");
  require(p.tp == 1 || p.zero_stage != 3, kFw,
          what + " with AutoTP and ZeRO stage 3: AutoEP+AutoTP folding allows ZeRO 0 to 2");
}

// Offload (KARMA) as DeepSpeed can run it. Activations: deepspeed.checkpointing moves to host
// memory only what a recomputed layer keeps, its input (checkpoint_in_cpu / cpu_checkpointing,
// runtime/activation_checkpointing/checkpointing.py@edaa722:608-614 CheckpointFunction.forward),
// which is what pipetune offloads under full recomputation; without recomputation DeepSpeed has
// nothing that offloads activations. Optimizer: zero_optimization.offload_optimizer acts only in
// a ZeRO optimizer, stage 1 to 3 (runtime/zero/offload_config.py@edaa722:55, engine.py@edaa722:1980
// _do_optimizer_sanity_check), which shards the state over dp.
void check_offload(const ExportRequest& r) {
  const spec::ParallelPlan& p = r.plan;
  if (p.offload_activations)
    require(p.recompute == spec::Recompute::Full, kFw,
            "offload_activations with recompute " + std::string(spec::recompute_name(p.recompute)) +
                ": DeepSpeed offloads only what a recomputed layer keeps, its input "
                "(deepspeed.checkpointing checkpoint_in_cpu, "
                "runtime/activation_checkpointing/checkpointing.py@edaa722:608-614); export with "
                "recompute full");
  if (p.offload_optimizer)
    require(p.zero_stage >= 1 || p.dp == 1, kFw,
            "offload_optimizer with zero_stage 0 over dp=" + std::to_string(p.dp) +
                ": DeepSpeed offloads the optimizer (zero_optimization.offload_optimizer) only in "
                "ZeRO stages 1-3, which shard its state over dp "
                "(runtime/zero/offload_config.py@edaa722:55, engine.py@edaa722:1980); export with "
                "zero_stage 1 or more");
}

void check_deepspeed_plan(const ExportRequest& r) {
  export_detail::check_common(r, kFw);
  // pipetune's own settings first: the plan's others (sequence parallelism among them) were
  // chosen with them.
  export_detail::refuse_pipetune_only_settings(r.plan, kFw);
  check_dense_features(r);
  check_experts(r);
  check_offload(r);
}

// The ZeRO stage the config runs: the plan's, but at least 1 when the optimizer is offloaded
// (check_offload allows that only over one replica, where ZeRO-1 shards nothing).
int deepspeed_zero_stage(const spec::ParallelPlan& p) {
  return p.offload_optimizer ? std::max(p.zero_stage, 1) : p.zero_stage;
}

// The world DeepSpeedConfig's batch rule counts (config.py DeepSpeedConfig.__init__): the
// PipelineModule grid's data-parallel size with a pipeline (deepspeed/__init__.py initialize
// passes model.mpu()), else every process (no mpu), AutoTP's tensor-parallel ranks included.
std::int64_t deepspeed_batch_world(const spec::ParallelPlan& p) {
  return p.pp > 1 ? p.dp : static_cast<std::int64_t>(p.tp) * p.dp;
}

nlohmann::ordered_json zero_section(const spec::ParallelPlan& p) {
  nlohmann::ordered_json zero;
  const int stage = deepspeed_zero_stage(p);
  zero["stage"] = stage;
  zero["overlap_comm"] = true;
  zero["contiguous_gradients"] = true;
  if (stage >= 2) zero["reduce_scatter"] = true;
  // ZeRO-Offload: the optimizer state in pinned host memory, the update in CPU Adam
  // (runtime/zero/offload_config.py@edaa722:55-75 DeepSpeedZeroOffloadOptimizerConfig).
  if (p.offload_optimizer) zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  return zero;
}

// With ZeRO-Offload DeepSpeed refuses a client optimizer other than its CPU Adam
// (engine.py@edaa722:2040-2045 _configure_optimizer) and builds DeepSpeedCPUAdam from the
// config's Adam / AdamW (engine.py@edaa722:2107-2131 _configure_basic_optimizer): the config
// names it, with the hyperparameters the Megatron-LM export uses.
nlohmann::ordered_json offload_optimizer_section() {
  nlohmann::ordered_json params;
  params["lr"] = 3.0e-4;
  params["betas"] = {0.9, 0.95};
  params["eps"] = 1.0e-8;
  params["weight_decay"] = 0.1;
  return {{"type", "AdamW"}, {"params", params}};
}

std::string python_list(const std::vector<int>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

// The PipelineModule subclass placing the plan's split (plan has pp > 1).
void write_pipeline_module(std::ostringstream& o) {
  o << R"(

class PipetuneSplitPipelineModule(PipelineModule):
    """A PipelineModule whose stages hold DECODER_LAYERS_PER_STAGE decoder layers, with the
    layers before them on the first stage and those after them on the last.

    PipelineModule.__init__ calls _partition_layers to set `parts` (stage boundaries in the layer
    list) and this rank's bounds; its methods ('uniform', 'parameters', 'type:') balance the
    whole list, embedding and head included, so the split is given here instead.
    """

    def __init__(self, pre_layers, decoder_layers, post_layers, **kwargs):
        assert len(decoder_layers) == sum(DECODER_LAYERS_PER_STAGE), "decoder layer count"
        parts = [0]
        for count in DECODER_LAYERS_PER_STAGE[:-1]:
            parts.append(parts[-1] + count)
        parts = [0] + [len(pre_layers) + b for b in parts[1:]]
        parts.append(len(pre_layers) + len(decoder_layers) + len(post_layers))
        self._pipetune_parts = parts
        super().__init__(layers=list(pre_layers) + list(decoder_layers) + list(post_layers),
                         num_stages=PIPELINE_STAGES, **kwargs)

    def _partition_layers(self, method="uniform"):
        self.parts = list(self._pipetune_parts)
        stage_id = self._topo.get_coord(self.global_rank).pipe
        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])

)";
}

// The function that builds the PipelineModule. Its default topology, PipeDataParallelTopology
// (axes pipe, data; ProcessTopology numbers ranks row-major, the last axis fastest), puts a
// stage's replicas on neighbouring ranks: tp-dp-pp (tp is 1 with a pipeline). tp-pp-dp puts a
// replica's stages there: a ProcessTopology with axes data, pipe (pipe/topology.py@edaa722), which
// PipelineModule takes instead of num_stages and PipelineParallelGrid reads by axis name.
void write_build_model(std::ostringstream& o, const spec::ParallelPlan& p) {
  const bool pp_dp = p.rank_order == spec::RankOrder::TpPpDp;
  o << "\ndef build_model(pre_layers, decoder_layers, post_layers, loss_fn):\n"
    << "    \"\"\"The model to pass to deepspeed.initialize(model=..., config=<the exported "
       "JSON>).\"\"\"\n";
  if (p.offload_activations) o << "    configure_activation_offload()\n";
  if (pp_dp)
    o << "    # Rank order tp-pp-dp: a replica's stages on neighbouring ranks (the last axis "
         "varies fastest).\n"
      << "    topology = ProcessTopology(axes=[\"data\", \"pipe\"], dims=[" << p.dp
      << ", PIPELINE_STAGES])\n";
  o << "    return PipetuneSplitPipelineModule(pre_layers, decoder_layers, post_layers, "
       "loss_fn=loss_fn,\n"
    << "                                       "
       "activation_checkpoint_interval=ACTIVATION_CHECKPOINT_INTERVAL"
    << (pp_dp ? ",\n                                       topology=topology)\n" : ")\n");
}

// Without a pipeline DeepSpeedEngine recomputes nothing itself: the layers checkpoint their
// forward (deepspeed.checkpointing.checkpoint, runtime/activation_checkpointing/checkpointing.py).
void write_plain_model(std::ostringstream& o, const spec::ParallelPlan& p) {
  o << R"(

class CheckpointedLayer(torch.nn.Module):
    """A layer whose activations are recomputed in the backward pass."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, *args):
        return deepspeed.checkpointing.checkpoint(self.layer, *args)


def build_decoder_layers(decoder_layers):
    """The decoder layers for the model passed to deepspeed.initialize (a DeepSpeedEngine)."""
)";
  if (p.offload_activations) o << "    configure_activation_offload()\n";
  o << R"(    if ACTIVATION_CHECKPOINT_INTERVAL == 0:
        return list(decoder_layers)
    return [CheckpointedLayer(layer) for layer in decoder_layers]
)";
}

// Activation offload: deepspeed.checkpointing's checkpoint_in_cpu (configure,
// runtime/activation_checkpointing/checkpointing.py@edaa722:1162-1230), set in the code because
// DeepSpeedEngine never reads the JSON's activation_checkpointing section: only configure(...,
// deepspeed_config=...) does (checkpointing.py@edaa722:1131-1141), and it checks the batch against
// every process, which a pipeline's config (counting the data-parallel ranks) fails.
void write_activation_offload(std::ostringstream& o) {
  o << R"(# 1: what each recomputed layer keeps (its input) goes to host memory after its forward and
# comes back for its backward, on a side stream (deepspeed.checkpointing's checkpoint_in_cpu; the
# last layer's input stays on the device, its backward comes first).
ACTIVATION_CPU_CHECKPOINTING = 1


def configure_activation_offload():
    """Turns on checkpoint_in_cpu for deepspeed.checkpointing.checkpoint, which recomputes the
    layers (ACTIVATION_CHECKPOINT_INTERVAL)."""
    deepspeed.init_distributed()
    deepspeed.checkpointing.configure(None, checkpoint_in_cpu=ACTIVATION_CPU_CHECKPOINTING == 1)
)";
}

}  // namespace

std::string_view deepspeed_target_version() {
  return "DeepSpeed 0.19.6 (deepspeedai/DeepSpeed@edaa722)";
}

// Per-stage layouts: DeepSpeed's tensor parallelism is one size (tensor_parallel.autotp_size), and
// its process topology is one grid with one size per axis.
constexpr const char* kOneTensorParallelSize =
    "tensor_parallel.autotp_size is one value for every pipeline stage "
    "(deepspeed/runtime/pipe/topology.py@edaa722 ProcessTopology: one size per axis)";

std::string_view deepspeed_model_code_file() {
  return "pipetune_deepspeed.py";
}

std::string export_deepspeed(const ExportRequest& request) {
  const ExportRequest r = export_detail::with_uniform_recompute(
      export_detail::with_uniform_stage_tp(request, kFw, kOneTensorParallelSize), kFw,
      "activation_checkpoint_interval is one setting for every stage");
  check_deepspeed_plan(r);
  const spec::ParallelPlan& p = r.plan;
  const std::int64_t gas = export_detail::accumulation_steps(p);
  nlohmann::ordered_json j;
  // A top-level key DeepSpeedConfig does not read (it takes keys by name) carries the target.
  j["pipetune_export"] = (r.description.empty() ? "" : r.description + "; ") + "targets " +
                         std::string(deepspeed_target_version()) + "; the model is built by " +
                         std::string(deepspeed_model_code_file());
  j["train_batch_size"] =
      static_cast<std::int64_t>(p.micro_batch_size) * gas * deepspeed_batch_world(p);
  j["train_micro_batch_size_per_gpu"] = p.micro_batch_size;
  j["gradient_accumulation_steps"] = gas;
  j["gradient_clipping"] = 1.0;
  j["bf16"] = {{"enabled", true}};
  if (p.offload_optimizer) j["optimizer"] = offload_optimizer_section();
  j["zero_optimization"] = zero_section(p);
  // PipelineEngine.__init__ applies the config's interval to the module.
  if (p.pp > 1 && p.recompute == spec::Recompute::Full)
    j["pipeline"] = {{"activation_checkpoint_interval", 1}};
  if (p.tp > 1) j["tensor_parallel"] = {{"autotp_size", p.tp}};
  if (p.ep > 1)
    j["expert_parallel"] = {{"enabled", true}, {"autoep_size", p.ep}, {"preset_model", "mixtral"}};
  j["steps_per_print"] = 10;
  j["wall_clock_breakdown"] = false;
  return j.dump(2) + "\n";
}

std::string deepspeed_model_code(const ExportRequest& request) {
  const ExportRequest r = export_detail::with_uniform_recompute(
      export_detail::with_uniform_stage_tp(request, kFw, kOneTensorParallelSize), kFw,
      "activation_checkpoint_interval is one setting for every stage");
  check_deepspeed_plan(r);
  const spec::ParallelPlan& p = r.plan;
  std::ostringstream o;
  o << "# The model for the DeepSpeed config exported with this file: "
    << (r.description.empty() ? "a pipetune plan" : r.description) << ".\n"
    << "# Targets " << deepspeed_target_version() << ".\n"
    << "# tp=" << p.tp << " pp=" << p.pp << " dp=" << p.dp << " ep=" << p.ep << ", micro-batch "
    << p.micro_batch_size << " x " << export_detail::accumulation_steps(p)
    << " per replica, recompute " << spec::recompute_name(p.recompute) << ", ZeRO " << p.zero_stage
    << (p.offload_activations ? ", activations offloaded" : "")
    << (p.offload_optimizer ? ", optimizer offloaded" : "") << ".\n"
    << export_detail::placement_comment(r, kFw, "# ",
                                        "List the hosts in the deepspeed hostfile in this order "
                                        "(its launcher numbers nodes so).");
  if (p.tp > 1 && p.pp == 1)
    o << "# train_batch_size counts every rank (DeepSpeedConfig has no mpu), the AutoTP ranks\n"
      << "# that share a batch included: " << p.global_batch << " sequences per step.\n";
  if (p.offload_optimizer)
    o << "# Optimizer: the config's AdamW, which DeepSpeed builds as its CPU Adam for "
         "ZeRO-Offload\n"
      << "# (zero_optimization.offload_optimizer): pass no optimizer to deepspeed.initialize.\n";
  if (p.ep > 1)
    o << "# Experts: the config's expert_parallel section makes AutoEP replace a Hugging Face\n"
      << "# Mixtral model's MoE blocks (its preset needs transformers >= 5.0.0).\n";
  o << "import deepspeed\n";
  o << (p.pp > 1 ? "from deepspeed.pipe import PipelineModule\n" : "import torch\n");
  if (p.pp > 1 && p.rank_order == spec::RankOrder::TpPpDp)
    o << "from deepspeed.runtime.pipe import ProcessTopology\n";
  o << "\nDEEPSPEED_TARGET = \"" << deepspeed_target_version() << "\"\n"
    << "PIPELINE_STAGES = " << p.pp << "\n"
    << "# Decoder layers per pipeline stage, model order.\n"
    << "DECODER_LAYERS_PER_STAGE = " << python_list(spec::layer_split(r.model, p)) << "\n"
    << "# 1: every layer recomputes its activations in the backward pass; 0: none.\n"
    << "ACTIVATION_CHECKPOINT_INTERVAL = " << (p.recompute == spec::Recompute::Full ? 1 : 0)
    << "\n";
  if (p.offload_activations) write_activation_offload(o);
  if (p.pp > 1) {
    write_pipeline_module(o);
    write_build_model(o, p);
  } else {
    write_plain_model(o, p);
  }
  return o.str();
}

}  // namespace pipetune::tuner
