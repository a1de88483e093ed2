#include "tuner/export/torchtitan_rules.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <optional>
#include <sstream>

#include "engine/errors.hpp"
#include "tuner/export/torchtitan_pipeline_rules.hpp"
#include "tuner/export/torchtitan_sources.hpp"

namespace pipetune::tuner {

namespace {

using namespace torchtitan_sources;
using namespace torchtitan_detail;

// The keys of the JobConfig sections a pipetune export writes (job_config.py@238fa99: Job l.18,
// Model l.100, Optimizer l.134, LRScheduler l.169, Training l.243, Parallelism l.312,
// ActivationCheckpoint l.651); a key outside them is not a field and the loader rejects it.
struct Section {
  const char* name;
  std::vector<const char*> keys;
};
const std::vector<Section>& sections() {
  static const std::vector<Section> s = {
      {"job",
       {"config_file", "dump_folder", "description", "print_config", "save_config_file",
        "custom_config_module"}},
      {"model",
       {"name", "flavor", "hf_assets_path", "tokenizer_path", "converters",
        "print_after_conversion"}},
      {"optimizer",
       {"name", "lr", "beta1", "beta2", "eps", "weight_decay", "implementation",
        "early_step_in_backward"}},
      {"lr_scheduler",
       {"warmup_steps", "total_steps", "decay_ratio", "decay_type", "min_lr_factor"}},
      {"training",
       {"dataset", "dataset_path", "local_batch_size", "global_batch_size", "seq_len", "max_norm",
        "steps", "enable_cpu_offload", "dtype", "mixed_precision_param", "mixed_precision_reduce",
        "gc_freq", "gc_debug", "dataloader"}},
      {"parallelism",
       {"data_parallel_replicate_degree",
        "data_parallel_shard_degree",
        "fsdp_reshard_after_forward",
        "tensor_parallel_degree",
        "disable_loss_parallel",
        "enable_async_tensor_parallel",
        "pipeline_parallel_degree",
        "module_fqns_per_model_part",
        "pipeline_parallel_first_stage_less_layers",
        "pipeline_parallel_last_stage_less_layers",
        "pipeline_parallel_layers_per_stage",
        "pipeline_parallel_schedule",
        "pipeline_parallel_schedule_csv",
        "pipeline_parallel_microbatch_size",
        "pipeline_parallel_expert_parallel_overlap",
        "context_parallel_degree",
        "context_parallel_load_balancer",
        "context_parallel_rotate_method",
        "expert_parallel_degree",
        "expert_tensor_parallel_degree",
        "expert_parallel_comm_backend"}},
      {"activation_checkpoint",
       {"mode", "selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop",
        "memory_budget", "visualize_memory_budget_pareto", "preserve_rng_state",
        "determinism_check", "debug"}},
  };
  return s;
}
// Sections JobConfig has whose keys pipetune never writes (not checked key by key).
constexpr std::array kOtherSections = {
    "profiling",         "metrics",         "checkpoint",   "compile",    "quantize", "comm",
    "memory_estimation", "fault_tolerance", "experimental", "validation", "debug"};

// The TrainSpecs torchtitan registers (torchtitan/models/__init__.py@238fa99:7-9).
constexpr std::array kTrainSpecs = {"deepseek_v3", "flux",   "gpt_oss", "llama3",
                                    "llama3_ft",   "llama4", "qwen3"};

// Every key is a JobConfig field.
void check_known_keys(Checker& c, const std::map<std::string, std::string>& keys) {
  for (const auto& [full, value] : keys) {
    const std::size_t dot = full.find('.');
    const std::string section = dot == std::string::npos ? "" : full.substr(0, dot);
    const std::string key = dot == std::string::npos ? full : full.substr(dot + 1);
    bool known = false;
    bool checked = false;
    for (const Section& s : sections()) {
      if (section != s.name) continue;
      checked = true;
      for (const char* k : s.keys) known = known || key == k;
    }
    for (const char* other : kOtherSections) known = known || (!checked && section == other);
    c.require(known, "every key is a JobConfig field", kTomlLoader, "[" + section + "] " + key);
  }
}

// Literal-typed fields.
void check_literal_fields(Checker& c) {
  const std::string ac = c.str("activation_checkpoint.mode", "selective");
  c.require(ac == "selective" || ac == "full" || ac == "memory_budget" || ac == "none",
            "activation_checkpoint.mode is selective, full, memory_budget or none", kJobConfig,
            "'" + ac + "'");
  if (ac == "selective") {
    const std::string opt = c.str("activation_checkpoint.selective_ac_option", "2");
    c.require(
        opt == "op" || (!opt.empty() && opt.find_first_not_of("0123456789") == std::string::npos),
        "selective_ac_option is 'op' or an integer", kJobConfig, "'" + opt + "'");
  }
  const std::string reshard = c.str("parallelism.fsdp_reshard_after_forward", "default");
  c.require(reshard == "default" || reshard == "always" || reshard == "never",
            "parallelism.fsdp_reshard_after_forward is default, always or never", kJobConfig,
            "'" + reshard + "'");
  const std::string mp = c.str("training.mixed_precision_param", "bfloat16");
  c.require(mp == "bfloat16" || mp == "float32",
            "training.mixed_precision_param is bfloat16 or float32", kJobConfig, "'" + mp + "'");
}

// ParallelDims._validate (the shared degree rules), and at 238fa99 its expert tensor parallelism:
// with EP, expert TP is TP or 1. Returns the degrees and expert TP; nullopt when a degree is
// below 1 (nothing further can be derived).
std::optional<std::pair<Degrees, std::int64_t>> check_toml_degrees(Checker& c, std::int64_t world) {
  const std::int64_t etp = c.integer("parallelism.expert_tensor_parallel_degree", 1);
  c.require(etp >= 1, "parallel degrees >= 1", kParallelDims,
            "expert_tensor_parallel_degree = " + n(etp));
  const std::optional<Degrees> degrees = check_parallel_degrees(c, world, kParallelDims);
  if (!degrees || etp < 1) return std::nullopt;
  const Degrees& d = *degrees;
  if (d.ep > 1) {
    c.require(etp == d.tp || etp == 1, "with EP, expert TP is TP or 1", kParallelDims,
              "ETP " + n(etp) + ", TP " + n(d.tp));
    // The expert mesh (pp, dp_replicate, efsdp, ep, etp) must cover the world: efsdp is
    // dp_shard x cp x tp / (etp x ep), an integer.
    c.require((d.shard * d.cp * d.tp) % (etp * d.ep) == 0,
              "dp_shard x CP x TP divisible by ETP x EP (the expert mesh)", kExpertMesh,
              "dp_shard " + n(d.shard) + ", CP " + n(d.cp) + ", TP " + n(d.tp) + ", ETP " + n(etp) +
                  ", EP " + n(d.ep));
  }
  return std::pair{d, etp};
}

// get_train_spec and the trainer's flavor lookup: [model] name is a registered TrainSpec and
// flavor a key of its model_args (a plain dict access: KeyError otherwise); its shape is the
// plan's model. Returns the flavor's layer count (what pipeline_llm splits), or the launch's
// when the flavor is unknown.
std::int64_t check_model(Checker& c, const TorchtitanLaunch& launch) {
  const std::string name = c.str("model.name", "llama3");
  const std::string flavor = c.str("model.flavor", "debugmodel");
  const bool registered =
      std::find(kTrainSpecs.begin(), kTrainSpecs.end(), name) != kTrainSpecs.end();
  c.require(registered, "[model] name is a registered TrainSpec", kTrainSpecLookup,
            "'" + name + "'");
  if (!registered) return launch.num_layers;
  const auto& flavors = torchtitan_flavors();
  const auto it = std::find_if(flavors.begin(), flavors.end(), [&](const TorchtitanFlavor& f) {
    return f.model == name && f.flavor == flavor;
  });
  c.require(it != flavors.end(), "[model] flavor is a key of the TrainSpec's model_args",
            kFlavorLookup,
            name + " '" + flavor + "'" +
                (name == "llama3" ? "" : " (pipetune's flavor table holds llama3's only)"));
  if (it == flavors.end()) return launch.num_layers;
  if (launch.model_shape)
    c.require(*launch.model_shape == it->shape, "the flavor's shape is the plan's model",
              kLlama3Flavors, name + " " + flavor);
  else if (launch.num_layers > 0)
    c.require(launch.num_layers == it->shape.n_layers, "the flavor's shape is the plan's model",
              kLlama3Flavors,
              flavor + " has " + n(it->shape.n_layers) + " layers, the plan's model " +
                  n(launch.num_layers));
  return it->shape.n_layers;
}

// get_dual_pipe_v_flag: EP with the DualPipeV schedule (and its EP overlap, on by default) and
// any activation checkpointing raises NotImplementedError.
void check_dual_pipe_v(Checker& c, const Degrees& d) {
  if (d.ep <= 1 || d.pp <= 1) return;
  std::string schedule = c.str("parallelism.pipeline_parallel_schedule", "1F1B");
  for (char& ch : schedule) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const bool overlap =
      c.str("parallelism.pipeline_parallel_expert_parallel_overlap", "true") == "true";
  const std::string ac = c.str("activation_checkpoint.mode", "selective");
  c.require(!(overlap && schedule == "dualpipev" && ac != "none"),
            "EP with DualPipeV and activation checkpointing cannot be used together", kDualPipeV,
            "EP " + n(d.ep) + ", activation_checkpoint.mode '" + ac + "'");
}

// Trainer: global batch (-1: local x DP) > 0 and divisible by local batch x DP degree.
// Returns the local batch.
std::int64_t check_global_batch(Checker& c, std::int64_t dp) {
  const std::int64_t local = c.integer("training.local_batch_size", 8);
  std::int64_t global = c.integer("training.global_batch_size", -1);
  if (global < 0) global = local * dp;
  c.require(local > 0 && global > 0 && global % (local * dp) == 0,
            "global batch divisible by local batch x data-parallel degree", kTrain,
            "global " + n(global) + ", local " + n(local) + ", DP " + n(dp));
  return local;
}

// The pipeline rules at 238fa99 (the output layer is `output` there).
constexpr PipelineRuleSources kPipelineSources = {
    kJobConfig, kPipelineLlm, kFqnSplit, kModuleSplit, kBuildSchedule, kScheduleClass, "output"};

// Pipeline parallelism: the local batch holds pipeline_parallel_microbatch_size-sized
// micro-batches (build_pipeline_schedule), then the shared pipeline rules.
void check_toml_pipeline(Checker& c, const TorchtitanLaunch& launch, std::int64_t layers,
                         std::int64_t pp, std::int64_t local) {
  const std::int64_t mbs = c.integer("parallelism.pipeline_parallel_microbatch_size", 1);
  c.require(mbs > 0 && local % mbs == 0, "local batch divisible by the pipeline micro-batch size",
            kBuildSchedule, "local " + n(local) + ", micro-batch " + n(mbs));
  torchtitan_detail::check_pipeline(c, kPipelineSources, launch.schedule_csv, layers, pp,
                                    mbs > 0 ? local / mbs : 0);
}

}  // namespace

std::map<std::string, std::string> parse_torchtitan_toml(std::string_view toml) {
  std::map<std::string, std::string> out;
  std::istringstream in{std::string(toml)};
  std::string line;
  std::string section;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos)
      throw InputError("torchtitan TOML line " + std::to_string(number) + ": '" + line +
                       "' is not key = value");
    const std::string key = trim(line.substr(0, eq));
    std::string value = trim(line.substr(eq + 1));
    if (!value.empty() && value[0] == '"') {
      const std::size_t close = value.find('"', 1);
      if (close == std::string::npos)
        throw InputError("torchtitan TOML line " + std::to_string(number) +
                         ": unterminated string");
      value = value.substr(1, close - 1);
    } else {
      const std::size_t hash = value.find('#');
      if (hash != std::string::npos) value = trim(value.substr(0, hash));
    }
    out[section.empty() ? key : section + "." + key] = value;
  }
  return out;
}

RuleViolations check_torchtitan_config(std::string_view toml, const TorchtitanLaunch& launch) {
  const std::map<std::string, std::string> keys = parse_torchtitan_toml(toml);
  Checker c(keys, kJobConfig);
  check_known_keys(c, keys);
  check_literal_fields(c);
  const std::int64_t layers = check_model(c, launch);
  const auto degrees = check_toml_degrees(c, launch.world_size);
  if (!degrees) return c.take();
  const Degrees* d = &degrees->first;
  check_dual_pipe_v(c, *d);
  const std::int64_t local = check_global_batch(c, d->rep * d->shard);
  if (d->pp > 1) check_toml_pipeline(c, launch, layers, d->pp, local);
  return c.take();
}

}  // namespace pipetune::tuner
