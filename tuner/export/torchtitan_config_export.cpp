// torchtitan run config for torchtitan's current config system (read at b5bcd76): a Python
// module with one function returning a Trainer.Config, which run_train.sh selects with MODULE
// and CONFIG (pytorch/torchtitan#2386 replaced the TOML job files). The function derives from
// torchtitan's own run of the model's flavor (its tokenizer, data, optimizer and checkpoints)
// and sets the plan's model, batch, parallelism and recomputation. The rules and their sources
// are in torchtitan_config_rules.hpp and torchtitan_sources.hpp.
#include <sstream>

#include "tuner/export/export_common.hpp"
#include "tuner/export/torchtitan_config_rules.hpp"
#include "tuner/export/torchtitan_plan_layout.hpp"
#include "tuner/export/torchtitan_sources.hpp"

namespace pipetune::tuner {

using export_detail::require;
namespace sources = torchtitan_config_sources;

namespace {

constexpr std::string_view kFw = "torchtitan";

const torchtitan_detail::TorchtitanTarget& config_target() {
  static const torchtitan_detail::TorchtitanTarget t = {kFw,
                                                        &torchtitan_config_flavors(),
                                                        sources::kTargetCommit,
                                                        sources::kLlama3Configs,
                                                        sources::kParallelismConfig,
                                                        sources::kRankMesh,
                                                        sources::kCpuOffload};
  return t;
}

// The shared layout, plus the token counts the config system sizes batches in.
struct ConfigLayout : torchtitan_detail::TorchtitanPlanLayout {
  std::int64_t tokens_per_microbatch = 0;  // per data-parallel rank, one model forward
  std::int64_t pp_microbatches = 1;
  std::int64_t tokens_per_step = 0;  // global
};

// Expert parallelism as b5bcd76 has it: experts sharded over ep ranks borrowed from
// dp_shard x cp x tp, never tensor-parallel (its sparse mesh has no expert TP axis).
void check_expert_parallelism(const spec::ParallelPlan& p, const spec::ModelSpec& m,
                              const torchtitan_detail::TorchtitanPlanLayout& l) {
  if (p.ep == 1) return;
  const int expert_tp = export_detail::expert_tensor_parallel(m, p);
  require(expert_tp == 1, kFw,
          "expert tensor parallelism (tp=" + std::to_string(p.tp) +
              " over the SwiGLU experts) is not in torchtitan " + sources::kTargetCommit +
              ": its experts are sharded over ep alone (" + sources::kExpertMesh + ")");
  const std::int64_t borrowed = static_cast<std::int64_t>(l.shard) * p.tp;
  require(borrowed % p.ep == 0, kFw,
          "ep=" + std::to_string(p.ep) +
              " does not divide data_parallel_shard_degree x tp = " + std::to_string(borrowed) +
              " (" + sources::kParallelDims + "; use ZeRO >= 2 for MoE)");
}

ConfigLayout config_layout(const ExportRequest& r) {
  const spec::ParallelPlan& p = r.plan;
  ConfigLayout l;
  static_cast<torchtitan_detail::TorchtitanPlanLayout&>(l) =
      torchtitan_detail::torchtitan_plan_layout(r, config_target(), [&](const auto& layout) {
        check_expert_parallelism(p, r.model, layout);
      });
  // A micro-batch is micro_batch_size sequences per data-parallel rank; with a pipeline every
  // micro-batch of the iteration goes through it in one step (num_pp_microbatches), without one
  // each is a gradient-accumulation step (trainer.py@b5bcd76:409-428).
  l.tokens_per_microbatch = static_cast<std::int64_t>(p.micro_batch_size) * r.model.seq_len;
  l.pp_microbatches = p.pp > 1 ? export_detail::accumulation_steps(p) : 1;
  l.tokens_per_step = p.global_batch * r.model.seq_len;
  return l;
}

// module_fqns_per_model_part with one model part (stage) per line.
std::string one_part_per_line(const std::vector<int>& split) {
  const std::string one_line = torchtitan_detail::module_fqns_text(split, "lm_head");
  std::string out = "[\n            ";
  for (std::size_t i = 1; i + 1 < one_line.size(); ++i) {
    if (one_line.compare(i, 3, "], ") == 0) {
      out += "],\n            ";
      i += 2;
      continue;
    }
    out += one_line[i];
  }
  return out + ",\n        ]";
}

const char* py_bool(bool b) {
  return b ? "True" : "False";
}

// The header: what the file is, for which torchtitan, the model and how to launch it.
void write_header(std::ostream& o, const ExportRequest& r, const ConfigLayout& l) {
  const spec::ModelSpec& m = r.model;
  o << "# torchtitan run config for torchtitan " << sources::kTargetCommit
    << " (pytorch/torchtitan main, " << sources::kTargetDate << "): a config function for its\n"
    << "# Python config system (run_train.sh's MODULE and CONFIG; pytorch/torchtitan#2386).\n"
    << "# Written by `pipetune export --format torchtitan`.\n";
  if (!r.description.empty()) o << "# " << r.description << "\n";
  o << "# Model: " << m.name << " is torchtitan's " << l.flavor.model << " flavor "
    << l.flavor.flavor << " (same shape: " << m.layers << " layers, dim " << m.hidden << ", "
    << m.heads << " heads, " << m.kv_heads << " kv heads, ffn " << m.ffn_hidden << ", vocabulary "
    << m.vocab << ").\n"
    << "# Launch from a torchtitan " << sources::kTargetCommit
    << " checkout, with this file's folder on PYTHONPATH:\n"
    << "#   PYTHONPATH=<this file's folder> NGPU=" << r.plan.world_size()
    << " MODULE=<this file's name without .py> \\\n"
    << "#     CONFIG=" << kTorchtitanConfigFunction << " ./run_train.sh\n"
    << l.placement;
  if (!l.csv.empty())
    o << "# " << torchtitan_detail::kScheduleCsvFile << " (pipetune's " << r.plan.schedule
      << " order, the one it simulated) must be beside this file.\n";
  if (!l.csv.empty()) o << "import os\n\n";
  o << "from torchtitan.config import CompileConfig, ParallelismConfig\n";
  if (r.plan.recompute != spec::Recompute::None)
    o << "from torchtitan.distributed.activation_checkpoint import "
      << (r.plan.recompute == spec::Recompute::Full ? "FullAC" : "SelectiveAC") << "\n";
  o << "from torchtitan.models.llama3 import model_registry\n"
    << "from torchtitan.models.llama3.config_registry import " << l.flavor.base_config << "\n"
    << "from torchtitan.trainer import Trainer\n\n\n";
}

// The model and the training section: batch in tokens, steps, CUDA graphs off with a pipeline.
void write_model_and_training(std::ostream& o, const ExportRequest& r, const ConfigLayout& l) {
  o << "def " << kTorchtitanConfigFunction << "() -> Trainer.Config:\n"
    << "    # torchtitan's own " << l.flavor.flavor
    << " run (tokenizer, data, optimizer, checkpoints), with the plan's\n"
    << "    # model, batch, parallelism and recomputation.\n"
    << "    config = " << l.flavor.base_config << "()\n"
    << "    # The plain bf16 model pipetune predicted, run eagerly (no float8 converters, no\n"
    << "    # compile: turn those on yourself, they are not in the prediction).\n"
    << "    config.model_spec = model_registry(\"" << l.flavor.flavor << "\")\n"
    << "    config.compile = CompileConfig()\n"
    << "    config.training.max_context_length = " << r.model.seq_len << "\n"
    << "    config.training.num_tokens_per_microbatch_per_dp_rank = " << l.tokens_per_microbatch
    << "\n"
    << "    config.training.num_tokens_per_train_step = " << l.tokens_per_step << "\n"
    << "    config.training.steps = " << r.train_iters << "\n";
  // CUDA graphs do not support pipeline parallelism (Trainer.Config._validate_cuda_graphs).
  if (r.plan.pp > 1) o << "    config.training.disable_cuda_graphs = True\n";
}

// The parallelism, replaced whole so that the base run's degrees do not carry over.
void write_parallelism(std::ostream& o, const spec::ParallelPlan& p, const ConfigLayout& l) {
  o << "    config.parallelism = ParallelismConfig(\n"
    << "        data_parallel_replicate_degree=" << l.replicate << ",\n"
    << "        data_parallel_shard_degree=" << l.shard << ",\n";
  if (!l.reshard.empty()) o << "        fsdp_reshard_after_forward=\"" << l.reshard << "\",\n";
  o << "        tensor_parallel_degree=" << p.tp << ",\n"
    << "        enable_sequence_parallel=" << py_bool(p.tp > 1 && p.sequence_parallel) << ",\n"
    << "        pipeline_parallel_degree=" << p.pp << ",\n";
  if (p.pp > 1) {
    o << "        pipeline_parallel_schedule=\"" << l.schedule << "\",\n"
      << "        num_pp_microbatches=" << l.pp_microbatches
      << ",\n"
      // Every split, even or not, module by module: exactly the plan's stages in model order.
      << "        module_fqns_per_model_part=" << one_part_per_line(l.split) << ",\n";
    if (!l.csv.empty())
      o << "        pipeline_parallel_schedule_csv=" << kTorchtitanCsvBesideThisFile << ",\n";
  }
  o << "        context_parallel_degree=1,\n"
    << "        expert_parallel_degree=" << p.ep << ",\n"
    << "    )\n";
}

void write_activation_checkpoint(std::ostream& o, const spec::ParallelPlan& p) {
  o << "    config.activation_checkpoint = "
    << (p.recompute == spec::Recompute::Full        ? "FullAC.Config()"
        : p.recompute == spec::Recompute::Selective ? "SelectiveAC.Config()"
                                                    : "None")
    << "\n"
    << "    return config\n";
}

}  // namespace

std::string export_torchtitan(const ExportRequest& request) {
  const ExportRequest r = export_detail::with_uniform_recompute(
      export_detail::with_uniform_stage_tp(
          request, kFw,
          std::string("ParallelismConfig.tensor_parallel_degree is one value for every pipeline "
                      "stage (") +
              sources::kRankMesh + ")"),
      kFw, "activation_checkpoint is one setting for the whole model");
  export_detail::check_common(r, kFw);
  const ConfigLayout layout = config_layout(r);
  std::ostringstream o;
  write_header(o, r, layout);
  write_model_and_training(o, r, layout);
  write_parallelism(o, r.plan, layout);
  write_activation_checkpoint(o, r.plan);
  return o.str();
}

std::string_view torchtitan_export_target() {
  return "b5bcd76 (pytorch/torchtitan main, 2026-08-21): a Python config function run with "
         "MODULE=... CONFIG=... ./run_train.sh (the config system of #2386); "
         "--format torchtitan-toml writes 238fa99's TOML job file instead";
}

}  // namespace pipetune::tuner
