// DeepSpeed JSON config (keys of deepspeed/runtime/constants.py, zero/config.py; reference/
// engine_and_style.md A3). What the file cannot carry is refused, not dropped: expert parallelism
// is the MoE layer's ep_size in the model code (deepspeed/moe/layer.py MoE), and a pipeline's
// layers are split by PipelineModule's partition_method, which balances them ("uniform",
// "parameters", "type:REGEX"; deepspeed/runtime/pipe/module.py _partition_layers) and takes no
// explicit split.
#include <nlohmann/json.hpp>

#include "tuner/export/export_common.hpp"

namespace pipetune::tuner {

using export_detail::require;

std::string export_deepspeed(const ExportRequest& r) {
  constexpr std::string_view kFw = "deepspeed";
  export_detail::check_common(r, kFw);
  const spec::ParallelPlan& p = r.plan;
  require(p.pp == 1 || p.schedule == "1f1b", kFw,
          "schedule " + p.schedule + ": DeepSpeed's pipeline engine runs 1F1B only");
  require(p.pp == 1 || p.zero_stage <= 1, kFw,
          "ZeRO stage " + std::to_string(p.zero_stage) +
              " cannot be combined with pipeline parallelism "
              "(DeepSpeed's pipeline engine allows ZeRO 0 or 1)");
  require(p.vocab == schedule::VocabMode::None, kFw,
          "vocabulary parallelism (" + std::string(schedule::vocab_mode_name(p.vocab)) +
              ") is not in DeepSpeed");
  require(p.ep == 1, kFw,
          "expert parallelism (ep=" + std::to_string(p.ep) +
              ") cannot be written in a DeepSpeed config: it is the MoE layer's ep_size in the "
              "model code");
  // "uniform" gives the first stages one layer more when the layers do not divide evenly, as
  // spec::even_layer_split does; any other split has no partition method.
  const std::vector<int> split = spec::layer_split(r.model, p);
  require(p.pp == 1 || split == spec::even_layer_split(r.model.layers, p.layer_groups()), kFw,
          "the layer split " + export_detail::split_text(split) +
              " cannot be written: DeepSpeed's pipeline partition methods (uniform, parameters, "
              "type:REGEX) balance the layers and take no explicit split");

  nlohmann::ordered_json j;
  j["train_batch_size"] = p.global_batch;
  j["train_micro_batch_size_per_gpu"] = p.micro_batch_size;
  j["gradient_accumulation_steps"] = export_detail::accumulation_steps(p);
  j["gradient_clipping"] = 1.0;
  j["bf16"] = {{"enabled", true}};
  nlohmann::ordered_json zero;
  zero["stage"] = p.zero_stage;
  zero["overlap_comm"] = true;
  zero["contiguous_gradients"] = true;
  if (p.zero_stage >= 2) zero["reduce_scatter"] = true;
  j["zero_optimization"] = zero;
  if (p.pp > 1) {
    j["pipeline"] = {
        {"stages", p.pp},
        {"partition", "uniform"},
        {"activation_checkpoint_interval", p.recompute == spec::Recompute::Full ? 1 : 0}};
  }
  if (p.recompute != spec::Recompute::None) {
    j["activation_checkpointing"] = {{"partition_activations", p.tp > 1},
                                     {"contiguous_memory_optimization", false},
                                     {"cpu_checkpointing", false}};
  }
  if (p.tp > 1) j["tensor_parallel"] = {{"autotp_size", p.tp}};
  j["steps_per_print"] = 10;
  j["wall_clock_breakdown"] = false;
  return j.dump(2) + "\n";
}

}  // namespace pipetune::tuner
