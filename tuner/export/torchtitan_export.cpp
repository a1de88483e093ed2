// torchtitan job config in its TOML schema before the 2026 dataclass refactor
// (torchtitan/config/job_config.py; keys in reference/engine_and_style.md A3).
#include <algorithm>
#include <sstream>

#include "tuner/export/export_common.hpp"

namespace pipetune::tuner {

using export_detail::require;

namespace {

constexpr std::string_view kFw = "torchtitan";

// torch.distributed.pipelining's schedule class for a pipetune schedule; empty when none.
std::string torchtitan_schedule(const std::string& name) {
  if (name == "gpipe") return "GPipe";
  if (name == "1f1b") return "1F1B";
  if (name == "interleaved-1f1b") return "Interleaved1F1B";
  if (name == "zb-v") return "ZBVZeroBubble";
  if (name == "dualpipe-v") return "DualPipeV";
  return "";
}

}  // namespace

std::string export_torchtitan(const ExportRequest& r) {
  export_detail::check_common(r, kFw);
  const spec::ParallelPlan& p = r.plan;
  const spec::ModelSpec& m = r.model;
  const std::string schedule = torchtitan_schedule(p.schedule);
  require(p.pp == 1 || !schedule.empty(), kFw,
          "schedule " + p.schedule +
              " has no torch.distributed.pipelining counterpart (gpipe, 1f1b, interleaved-1f1b, "
              "zb-v, dualpipe-v)");
  require(p.vocab == schedule::VocabMode::None, kFw,
          "vocabulary parallelism (" + std::string(schedule::vocab_mode_name(p.vocab)) +
              ") is not in torchtitan");
  const int stages_per_rank = p.chunks;
  const std::int64_t stages = static_cast<std::int64_t>(p.pp) * stages_per_rank;
  require(m.layers % stages == 0, kFw,
          "layers=" + std::to_string(m.layers) + " do not split evenly over " + std::to_string(stages) +
              " pipeline stages (pipeline_parallel_layers_per_stage)");
  // FSDP shards weights, gradients and optimizer state together: ZeRO 1-3 all become FSDP.
  const int replicate = p.zero_stage == 0 ? p.dp : 1;
  const int shard = p.zero_stage == 0 ? 1 : p.dp;
  // Experts borrow their ranks from the data-parallel shard dimension (with the TP ranks when
  // experts are not tensor-parallel).
  require(p.ep == 1 || (static_cast<std::int64_t>(shard) * p.tp) % p.ep == 0, kFw,
          "ep=" + std::to_string(p.ep) + " does not divide data_parallel_shard_degree x tp = " +
              std::to_string(static_cast<std::int64_t>(shard) * p.tp) + " (use ZeRO >= 1 for MoE)");
  const std::int64_t local_batch =
      static_cast<std::int64_t>(p.micro_batch_size) * export_detail::accumulation_steps(p);

  std::ostringstream o;
  o << "# torchtitan job config (TOML schema of torchtitan/config/job_config.py before the 2026\n"
    << "# dataclass refactor), written by `pipetune export --format torchtitan`.\n";
  if (!r.description.empty()) o << "# " << r.description << "\n";
  o << "# [model] name/flavor must name a model registered in torchtitan; this plan was tuned\n"
    << "# for " << m.name << ": " << m.layers << " layers, hidden " << m.hidden << ", " << m.heads
    << " heads (" << m.kv_heads << " kv), ffn " << m.ffn_hidden << ", vocabulary " << m.vocab
    << (spec::is_moe(m) ? ", " + std::to_string(m.experts) + " experts top-" + std::to_string(m.top_k) : "") << ".\n"
    << "# Launch: NGPU=" << p.world_size() << " ./run_train.sh --job.config_file <this file>\n\n"
    << "[job]\n"
    << "description = \"" << m.name << " tp=" << p.tp << " pp=" << p.pp << " dp=" << p.dp
    << " (pipetune)\"\n\n"
    << "[model]\n"
    << "name = \"" << (spec::is_moe(m) ? "deepseek_v3" : "llama3") << "\"\n"
    << "flavor = \"" << m.name << "\"\n\n"
    << "[optimizer]\nname = \"AdamW\"\nlr = 3e-4\neps = 1e-8\n\n"
    << "[lr_scheduler]\nwarmup_steps = " << std::max(1, r.train_iters / 100) << "\n\n"
    << "[training]\n"
    << "local_batch_size = " << local_batch << "\n"
    << "global_batch_size = " << p.global_batch << "\n"
    << "seq_len = " << m.seq_len << "\n"
    << "steps = " << r.train_iters << "\n"
    << "max_norm = 1.0\n"
    << "mixed_precision_param = \"bfloat16\"\n\n"
    << "[parallelism]\n"
    << "data_parallel_replicate_degree = " << replicate << "\n"
    << "data_parallel_shard_degree = " << shard << "\n"
    << "tensor_parallel_degree = " << p.tp << "\n"
    << "pipeline_parallel_degree = " << p.pp << "\n";
  if (p.pp > 1) {
    o << "pipeline_parallel_schedule = \"" << schedule << "\"\n"
      << "pipeline_parallel_microbatch_size = " << p.micro_batch_size << "\n"
      << "pipeline_parallel_layers_per_stage = " << m.layers / stages << "\n";
  }
  o << "context_parallel_degree = 1\n"
    << "expert_parallel_degree = " << p.ep << "\n\n"
    << "[activation_checkpoint]\n"
    << "mode = \""
    << (p.recompute == spec::Recompute::Full        ? "full"
        : p.recompute == spec::Recompute::Selective ? "selective"
                                                    : "none")
    << "\"\n";
  if (p.recompute == spec::Recompute::Selective) o << "selective_ac_option = \"op\"\n";
  return o.str();
}

}  // namespace pipetune::tuner
