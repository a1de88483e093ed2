// torchtitan job config in the TOML schema of torchtitan 238fa99, the last commit that reads TOML
// job files (pytorch/torchtitan#2386 replaced them with a Python config registry); the rules
// and their sources are in torchtitan_rules.hpp and torchtitan_sources.hpp.
#include <algorithm>
#include <sstream>

#include "engine/schedule/generators.hpp"
#include "tuner/export/export_common.hpp"
#include "tuner/export/pipelining_csv.hpp"
#include "tuner/export/torchtitan_plan_layout.hpp"
#include "tuner/export/torchtitan_rules.hpp"
#include "tuner/export/torchtitan_sources.hpp"

namespace pipetune::tuner {

using export_detail::require;

namespace {

constexpr std::string_view kFw = "torchtitan";

constexpr const char* kCsvPrefix = "#csv ";

// The TOML target's flavors and sources for the shared layout.
const torchtitan_detail::TorchtitanTarget& toml_target() {
  static const torchtitan_detail::TorchtitanTarget t = {
      kFw,
      &torchtitan_flavors(),
      torchtitan_sources::kTargetCommit,
      torchtitan_sources::kLlama3Flavors,
      "job_config.py@238fa99 Parallelism.data_parallel_shard_degree",
      torchtitan_sources::kRankMesh,
      torchtitan_sources::kCpuOffload};
  return t;
}

// The shared layout, plus what the TOML adds: expert tensor parallelism and the local batch.
struct TorchtitanLayout : torchtitan_detail::TorchtitanPlanLayout {
  int expert_tp = 1;
  std::int64_t local_batch = 0;
};

// The expert degrees, refusing what torchtitan 238fa99 has no counterpart for.
void check_expert_parallelism(const spec::ParallelPlan& p, const spec::ModelSpec& m,
                              const torchtitan_detail::TorchtitanPlanLayout& l) {
  if (p.ep == 1) return;
  const int expert_tp = export_detail::expert_tensor_parallel(m, p);
  // The expert mesh (pp, dp_replicate, efsdp, ep, etp) takes its ranks from dp_shard x tp.
  const std::int64_t borrowed = static_cast<std::int64_t>(l.shard) * p.tp;
  require(borrowed % (static_cast<std::int64_t>(expert_tp) * p.ep) == 0, kFw,
          "ep=" + std::to_string(p.ep) + " x expert tp=" + std::to_string(expert_tp) +
              " does not divide data_parallel_shard_degree x tp = " + std::to_string(borrowed) +
              " (" + torchtitan_sources::kExpertMesh + "; use ZeRO >= 2 for MoE)");
  require(!(p.schedule == "dualpipe-v" && p.recompute != spec::Recompute::None), kFw,
          "expert parallelism with DualPipeV and activation checkpointing raises "
          "NotImplementedError (" +
              std::string(torchtitan_sources::kDualPipeV) + ")");
}

// The layout, after checking the plan is one torchtitan 238fa99 can run.
TorchtitanLayout torchtitan_layout(const ExportRequest& r) {
  const spec::ParallelPlan& p = r.plan;
  TorchtitanLayout l;
  static_cast<torchtitan_detail::TorchtitanPlanLayout&>(l) =
      torchtitan_detail::torchtitan_plan_layout(r, toml_target(), [&](const auto& layout) {
        check_expert_parallelism(p, r.model, layout);
      });
  l.expert_tp = p.ep == 1 ? 1 : export_detail::expert_tensor_parallel(r.model, p);
  // local_batch_size is one forward/backward step's batch: with a pipeline it holds all the
  // pipeline's micro-batches (one step), without one each micro-batch is a gradient-accumulation
  // step (train.py@238fa99:196-215: steps = global / (local x DP)).
  l.local_batch = p.pp > 1 ? static_cast<std::int64_t>(p.micro_batch_size) *
                                 export_detail::accumulation_steps(p)
                           : p.micro_batch_size;
  return l;
}

// The opening comments (the model the plan was tuned for, how to launch) and the job, model,
// optimizer, learning-rate and training sections.
void write_header_and_training(std::ostream& o, const ExportRequest& r, const TorchtitanLayout& l) {
  const spec::ParallelPlan& p = r.plan;
  const spec::ModelSpec& m = r.model;
  o << "# torchtitan job config for torchtitan " << torchtitan_sources::kTargetCommit
    << " (pytorch/torchtitan, 2026-02-23): the TOML job file\n"
    << "# format of the last commit before pytorch/torchtitan#2386, which replaced TOML job files\n"
    << "# with a Python config registry (--module/--config); later torchtitan does not read it.\n"
    << "# Written by `pipetune export --format torchtitan`.\n";
  if (!r.description.empty()) o << "# " << r.description << "\n";
  o << "# Model: " << m.name << " is torchtitan's " << l.flavor.model << " flavor "
    << l.flavor.flavor << " (same shape: " << m.layers << " layers, dim " << m.hidden << ", "
    << m.heads << " heads, " << m.kv_heads << " kv heads, ffn " << m.ffn_hidden << ", vocabulary "
    << m.vocab << ").\n"
    << "# Launch from a torchtitan " << torchtitan_sources::kTargetCommit << " checkout:\n"
    << "#   NGPU=" << p.world_size() << " CONFIG_FILE=<this file> ./run_train.sh\n"
    << l.placement << "\n"
    << "[job]\n"
    << "description = \"" << m.name << " tp=" << p.tp << " pp=" << p.pp << " dp=" << p.dp
    << " (pipetune)\"\n\n"
    << "[model]\n"
    << "name = \"" << l.flavor.model << "\"\n"
    << "flavor = \"" << l.flavor.flavor << "\"\n"
    << "# The tokenizer torchtitan's own " << l.flavor.flavor << " config reads (download it with\n"
    << "# scripts/download_hf_assets.py).\n"
    << "hf_assets_path = \"" << l.flavor.hf_assets_path << "\"\n\n"
    << "[optimizer]\nname = \"AdamW\"\nlr = 3e-4\neps = 1e-8\n\n"
    << "[lr_scheduler]\nwarmup_steps = " << std::max(1, r.train_iters / 100) << "\n\n"
    << "[training]\n"
    << "local_batch_size = " << l.local_batch << "\n"
    << "global_batch_size = " << p.global_batch << "\n"
    << "seq_len = " << m.seq_len << "\n"
    << "steps = " << r.train_iters << "\n"
    << "max_norm = 1.0\n"
    << "mixed_precision_param = \"bfloat16\"\n\n";
}

// The parallelism section: degrees, FSDP resharding and the pipeline's schedule and split.
void write_parallelism(std::ostream& o, const spec::ParallelPlan& p, const TorchtitanLayout& l) {
  o << "[parallelism]\n"
    << "data_parallel_replicate_degree = " << l.replicate << "\n"
    << "data_parallel_shard_degree = " << l.shard << "\n"
    << "tensor_parallel_degree = " << p.tp << "\n"
    << "pipeline_parallel_degree = " << p.pp << "\n";
  if (!l.reshard.empty()) o << "fsdp_reshard_after_forward = \"" << l.reshard << "\"\n";
  if (p.pp > 1) {
    o << "pipeline_parallel_schedule = \"" << l.schedule << "\"\n"
      << "pipeline_parallel_microbatch_size = " << p.micro_batch_size << "\n";
    if (l.even_split) {
      o << "pipeline_parallel_layers_per_stage = " << l.split.front()
        << "\n"
        // torchtitan counts the embedding and output layers as these many layers when it turns
        // layers per stage into stages (default 1 each, which would add stages); pipetune's layer
        // groups hold transformer layers only.
        << "pipeline_parallel_first_stage_less_layers = 0\n"
        << "pipeline_parallel_last_stage_less_layers = 0\n";
    } else {
      o << "module_fqns_per_model_part = " << torchtitan_detail::module_fqns_text(l.split, "output")
        << "\n";
    }
    if (!l.csv.empty())
      o << "pipeline_parallel_schedule_csv = \"" << torchtitan_detail::kScheduleCsvFile << "\"\n";
  }
  o << "context_parallel_degree = 1\n"
    << "expert_parallel_degree = " << p.ep << "\n"
    << "expert_tensor_parallel_degree = " << l.expert_tp << "\n\n";
}

// The activation checkpointing section, from the plan's recomputation.
void write_activation_checkpoint(std::ostream& o, const spec::ParallelPlan& p) {
  o << "[activation_checkpoint]\n"
    << "mode = \""
    << (p.recompute == spec::Recompute::Full        ? "full"
        : p.recompute == spec::Recompute::Selective ? "selective"
                                                    : "none")
    << "\"\n";
  if (p.recompute == spec::Recompute::Selective) o << "selective_ac_option = \"op\"\n";
}

// The schedule CSV embedded as comment lines, with the command that writes it out.
void write_embedded_csv(std::ostream& o, const spec::ParallelPlan& p, const std::string& csv) {
  o << "\n# " << torchtitan_detail::kScheduleCsvFile << ": pipetune's " << p.schedule
    << " order (the one it simulated),\n"
    << "# for torch.distributed.pipelining's _PipelineScheduleRuntime: one line per pipeline\n"
    << "# rank, <stage><F|I|W|B><micro-batch>. Write it where you launch:\n"
    << "#   sed -n 's/^" << kCsvPrefix << "//p' <this file> > "
    << torchtitan_detail::kScheduleCsvFile << "\n";
  std::istringstream rows(csv);
  std::string row;
  while (std::getline(rows, row)) o << kCsvPrefix << row << "\n";
}

}  // namespace

std::string export_torchtitan_toml(const ExportRequest& request) {
  const ExportRequest r = export_detail::with_uniform_recompute(
      export_detail::with_uniform_stage_tp(
          request, kFw,
          std::string("[parallelism] tensor_parallel_degree is one value for every pipeline "
                      "stage (") +
              torchtitan_sources::kRankMesh + ")"),
      kFw, "[activation_checkpoint] mode is one setting for the whole model");
  export_detail::check_common(r, kFw);
  const TorchtitanLayout layout = torchtitan_layout(r);
  std::ostringstream o;
  write_header_and_training(o, r, layout);
  write_parallelism(o, r.plan, layout);
  write_activation_checkpoint(o, r.plan);
  if (!layout.csv.empty()) write_embedded_csv(o, r.plan, layout.csv);
  return o.str();
}

std::string_view torchtitan_toml_export_target() {
  return "238fa99 (pytorch/torchtitan, 2026-02-23): the TOML job file format, the last commit "
         "before #2386 replaced it with a Python config registry; later torchtitan does not "
         "read these files";
}

std::string embedded_schedule_csv(std::string_view torchtitan_toml) {
  std::istringstream in{std::string(torchtitan_toml)};
  std::string line;
  std::string out;
  while (std::getline(in, line))
    if (line.rfind(kCsvPrefix, 0) == 0)
      out += line.substr(std::string_view(kCsvPrefix).size()) + "\n";
  return out;
}

}  // namespace pipetune::tuner
