// torchtitan job config in its TOML schema before the 2026 dataclass refactor
// (torchtitan/config/job_config.py; keys in reference/engine_and_style.md A3).
#include <algorithm>
#include <sstream>

#include "engine/schedule/generators.hpp"
#include "tuner/export/export_common.hpp"
#include "tuner/export/pipelining_csv.hpp"

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
// class says (pipeline_parallel.py@02ef790 pipeline_llm / pipeline_module_split): one stage per
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
  std::string csv;       // pipetune's order for a schedule CSV; empty when the class runs it
  std::string schedule;  // the schedule class named in the config
  std::vector<int> split;
  bool even_split = true;
  int replicate = 1;
  int shard = 1;
  std::int64_t local_batch = 0;
};

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
  // FSDP shards weights, gradients and optimizer state together: ZeRO 1-3 all become FSDP. ZeRO-3
  // frees each layer's gathered weights after its forward (reshard after forward); ZeRO 1 and 2
  // keep them to the backward, the nearest FSDP comes to sharding only gradients and optimizer
  // state.
  l.replicate = p.zero_stage == 0 ? p.dp : 1;
  l.shard = p.zero_stage == 0 ? 1 : p.dp;
  // Experts borrow their ranks from the data-parallel shard dimension (with the TP ranks when
  // experts are not tensor-parallel).
  // (parallel_dims.py@0119de1: with expert TP 1, EP takes all TP ranks and part of dp_shard.)
  require(p.ep == 1 || (static_cast<std::int64_t>(l.shard) * p.tp) % p.ep == 0, kFw,
          "ep=" + std::to_string(p.ep) + " does not divide data_parallel_shard_degree x tp = " +
              std::to_string(static_cast<std::int64_t>(l.shard) * p.tp) +
              " (use ZeRO >= 1 for MoE)");
  require(p.ep == 1 || p.ep % p.tp == 0, kFw,
          "tp=" + std::to_string(p.tp) + " does not divide ep=" + std::to_string(p.ep) +
              " (torchtitan's experts take all tensor-parallel ranks)");
  // local_batch_size is one forward/backward step's batch: with a pipeline it holds all the
  // pipeline's micro-batches (one step), without one each micro-batch is a gradient-accumulation
  // step (train.py@000204a: steps = global / (local x DP)).
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
  o << "# torchtitan job config (TOML schema of torchtitan/config/job_config.py before the 2026\n"
    << "# dataclass refactor), written by `pipetune export --format torchtitan`.\n";
  if (!r.description.empty()) o << "# " << r.description << "\n";
  o << "# [model] name/flavor must name a model registered in torchtitan; this plan was tuned\n"
    << "# for " << m.name << ": " << m.layers << " layers, hidden " << m.hidden << ", " << m.heads
    << " heads (" << m.kv_heads << " kv), ffn " << m.ffn_hidden << ", vocabulary " << m.vocab
    << (m.vocab_divisible_by > 1
            ? " (pipetune pads it to a multiple of " + std::to_string(m.vocab_divisible_by) +
                  " x tp; torchtitan runs the vocab_size its model says)"
            : "")
    << (spec::is_moe(m)
            ? ", " + std::to_string(m.experts) + " experts top-" + std::to_string(m.top_k)
            : "")
    << ".\n"
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
    << "expert_parallel_degree = " << p.ep << "\n\n";
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

std::string export_torchtitan(const ExportRequest& r) {
  export_detail::check_common(r, kFw);
  const TorchtitanLayout layout = torchtitan_layout(r);
  std::ostringstream o;
  write_header_and_training(o, r, layout);
  write_parallelism(o, r.plan, layout);
  write_activation_checkpoint(o, r.plan);
  if (!layout.csv.empty()) write_embedded_csv(o, r.plan, layout.csv);
  return o.str();
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
