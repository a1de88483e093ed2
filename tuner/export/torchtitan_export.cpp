// torchtitan job config in the TOML schema of torchtitan 238fa99, the last commit that reads TOML
// job files (pytorch/torchtitan#2386 replaced them with a Python config registry); the rules
// and their sources are in torchtitan_rules.hpp and torchtitan_sources.hpp.
#include <algorithm>
#include <sstream>

#include "engine/schedule/generators.hpp"
#include "tuner/export/export_common.hpp"
#include "tuner/export/pipelining_csv.hpp"
#include "tuner/export/torchtitan_rules.hpp"
#include "tuner/export/torchtitan_sources.hpp"

namespace pipetune::tuner {

using export_detail::require;

namespace {

constexpr std::string_view kFw = "torchtitan";

// torch.distributed.pipelining's schedule class for a pipetune schedule it has (its own op
// order); empty when pipetune's order goes in a schedule CSV instead (schedule_class_for_csv).
std::string torchtitan_schedule(const std::string& name) {
  if (name == "gpipe") return "GPipe";
  if (name == "1f1b") return "1F1B";
  if (name == "interleaved-1f1b") return "Interleaved1F1B";
  if (name == "dualpipe-v") return "DualPipeV";
  return "";
}

// With a CSV, torchtitan runs _PipelineScheduleRuntime, but still builds the stages as the named
// class says (pipeline_parallel.py@238fa99 pipeline_llm / pipeline_module_split): one stage per
// rank for single-stage classes, V placement for ZBVZeroBubble.
std::string schedule_class_for_csv(const spec::ParallelPlan& p) {
  if (schedule::schedule_placement(p.schedule) == schedule::Placement::VShape)
    return "ZBVZeroBubble";
  return p.chunks == 1 ? "PipelineScheduleSingle" : "PipelineScheduleMulti";
}

// torchtitan's module names per stage for a layer split (pipeline_module_split: the embedding
// on the first stage, the final norm and output layer on the last), as a TOML array of arrays.
std::string module_fqns(const std::vector<int>& split) {
  std::string out = "[";
  int layer = 0;
  for (std::size_t g = 0; g < split.size(); ++g) {
    std::vector<std::string> names;
    if (g == 0) names.emplace_back("tok_embeddings");
    for (int i = 0; i < split[g]; ++i) names.push_back("layers." + std::to_string(layer++));
    if (g + 1 == split.size()) names.insert(names.end(), {"norm", "output"});
    out += g ? ", [" : "[";
    for (std::size_t i = 0; i < names.size(); ++i) out += (i ? ", \"" : "\"") + names[i] + "\"";
    out += "]";
  }
  return out + "]";
}

constexpr const char* kCsvFile = "pipetune_schedule.csv";
constexpr const char* kCsvPrefix = "#csv ";

// How the plan maps onto torchtitan's config: the schedule (a class, or pipetune's own order in
// a CSV), the layer split, the data-parallel degrees and the local batch.
struct TorchtitanLayout {
  TorchtitanFlavor flavor;  // the registered model flavor with the model's shape
  std::string csv;          // pipetune's order for a schedule CSV; empty when the class runs it
  std::string schedule;     // the schedule class named in the config
  std::vector<int> split;
  bool even_split = true;
  int replicate = 1;
  int shard = 1;
  int expert_tp = 1;
  std::int64_t local_batch = 0;
};

// ZeRO as torchtitan's FSDP (fully_shard) and the expert degrees, refusing what torchtitan has
// no counterpart for.
void check_data_and_expert_parallelism(const spec::ParallelPlan& p, const spec::ModelSpec& m,
                                       TorchtitanLayout& l) {
  // torchtitan shards optimizer state only together with the weights (FSDP); it has no
  // optimizer-only sharding. ZeRO-3 is FSDP resharding after forward; ZeRO-2 keeps the gathered
  // weights to the backward (reshard_after_forward never), the nearest FSDP comes to it.
  require(p.zero_stage != 1 || p.dp == 1, kFw,
          "ZeRO-1 (optimizer-state sharding alone) has no torchtitan counterpart: its data "
          "parallelism is replicate (DDP/HSDP) or FSDP, which shards the weights too "
          "(job_config.py@238fa99 Parallelism.data_parallel_shard_degree)");
  l.replicate = p.zero_stage == 0 ? p.dp : 1;
  l.shard = p.zero_stage == 0 ? 1 : p.dp;
  if (p.ep == 1) return;
  // Expert TP as Megatron's export writes it: TP for gated (SwiGLU) experts, 1 for biased ones.
  l.expert_tp = m.activation == spec::Activation::Swiglu ? p.tp : 1;
  // The expert mesh (pp, dp_replicate, efsdp, ep, etp) takes its ranks from dp_shard x tp.
  const std::int64_t borrowed = static_cast<std::int64_t>(l.shard) * p.tp;
  require(borrowed % (static_cast<std::int64_t>(l.expert_tp) * p.ep) == 0, kFw,
          "ep=" + std::to_string(p.ep) + " x expert tp=" + std::to_string(l.expert_tp) +
              " does not divide data_parallel_shard_degree x tp = " + std::to_string(borrowed) +
              " (" + torchtitan_sources::kExpertMesh + "; use ZeRO >= 2 for MoE)");
  require(!(p.schedule == "dualpipe-v" && p.recompute != spec::Recompute::None), kFw,
          "expert parallelism with DualPipeV and activation checkpointing raises "
          "NotImplementedError (" +
              std::string(torchtitan_sources::kDualPipeV) + ")");
}

// The registered flavor with the model's shape; refused (naming the model) when there is none:
// torchtitan builds the flavor's model, not the plan's.
TorchtitanFlavor registered_flavor(const spec::ModelSpec& m) {
  const std::optional<TorchtitanFlavor> flavor = torchtitan_flavor_for(m);
  std::string names;
  for (const TorchtitanFlavor& f : torchtitan_flavors())
    names += (names.empty() ? "" : ", ") + f.model + " " + f.flavor;
  require(flavor.has_value(), kFw,
          "torchtitan " + std::string(torchtitan_sources::kTargetCommit) +
              " registers no model flavor with " + m.name + "'s shape (" +
              std::to_string(m.layers) + " layers, dim " + std::to_string(m.hidden) + ", " +
              std::to_string(m.heads) + "/" + std::to_string(m.kv_heads) + " heads, ffn " +
              std::to_string(m.ffn_hidden) + ", vocab " + std::to_string(m.vocab) +
              (spec::is_moe(m) ? ", " + std::to_string(m.experts) + " experts" : "") +
              (m.activation == spec::Activation::Swiglu ? "" : ", not SwiGLU") +
              (m.tied_embeddings ? ", tied embeddings" : "") + "); registered: " + names + " (" +
              torchtitan_sources::kLlama3Flavors + ")");
  return *flavor;
}

// The layout, after checking the plan is one torchtitan can run.
TorchtitanLayout torchtitan_layout(const ExportRequest& r) {
  const spec::ParallelPlan& p = r.plan;
  const spec::ModelSpec& m = r.model;
  TorchtitanLayout l;
  require(p.vocab == schedule::VocabMode::None, kFw,
          "vocabulary parallelism (" + std::string(schedule::vocab_mode_name(p.vocab)) +
              ") is not in torchtitan");
  // pipetune's own orders (zb-h1, zb-h2, zb-v, v-half, v-min) run from a schedule CSV.
  l.csv = p.pp > 1 ? torchtitan_schedule_csv(r) : "";
  l.schedule = l.csv.empty() ? torchtitan_schedule(p.schedule) : schedule_class_for_csv(p);
  require(p.pp == 1 || !l.schedule.empty(), kFw,
          "schedule " + p.schedule + " has no torch.distributed.pipelining counterpart");
  // An even split is pipeline_parallel_layers_per_stage; any other is written module by module
  // (module_fqns_per_model_part, one list per stage in model order).
  l.split = spec::layer_split(m, p);
  l.even_split =
      std::all_of(l.split.begin(), l.split.end(), [&](int n) { return n == l.split.front(); });
  check_data_and_expert_parallelism(p, m, l);
  // local_batch_size is one forward/backward step's batch: with a pipeline it holds all the
  // pipeline's micro-batches (one step), without one each micro-batch is a gradient-accumulation
  // step (train.py@238fa99:196-215: steps = global / (local x DP)).
  l.local_batch = p.pp > 1 ? static_cast<std::int64_t>(p.micro_batch_size) *
                                 export_detail::accumulation_steps(p)
                           : p.micro_batch_size;
  l.flavor = registered_flavor(m);
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
    << "#   NGPU=" << p.world_size() << " CONFIG_FILE=<this file> ./run_train.sh\n\n"
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
  if (p.dp > 1 && p.zero_stage > 0)
    o << "fsdp_reshard_after_forward = \"" << (p.zero_stage == 3 ? "always" : "never") << "\"\n";
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
      o << "module_fqns_per_model_part = " << module_fqns(l.split) << "\n";
    }
    if (!l.csv.empty()) o << "pipeline_parallel_schedule_csv = \"" << kCsvFile << "\"\n";
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
  o << "\n# " << kCsvFile << ": pipetune's " << p.schedule << " order (the one it simulated),\n"
    << "# for torch.distributed.pipelining's _PipelineScheduleRuntime: one line per pipeline\n"
    << "# rank, <stage><F|I|W|B><micro-batch>. Write it where you launch:\n"
    << "#   sed -n 's/^" << kCsvPrefix << "//p' <this file> > " << kCsvFile << "\n";
  std::istringstream rows(csv);
  std::string row;
  while (std::getline(rows, row)) o << kCsvPrefix << row << "\n";
}

}  // namespace

std::string export_torchtitan_toml(const ExportRequest& r) {
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

std::string torchtitan_schedule_csv(const ExportRequest& r) {
  const spec::ParallelPlan& p = r.plan;
  if (p.pp <= 1 || !torchtitan_schedule(p.schedule).empty()) return "";
  if (p.vocab != schedule::VocabMode::None) return "";
  return pipelining_csv(predicted_schedule(r));
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
