#include "tuner/export/deepspeed_rules.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <vector>

#include "engine/errors.hpp"

namespace pipetune::tuner {

namespace {

// Where each rule is stated (deepspeedai/DeepSpeed at edaa722, DeepSpeed 0.19.6).
constexpr const char* kInitParams =
    "deepspeedai/DeepSpeed deepspeed/runtime/config.py@edaa722 DeepSpeedConfig._initialize_params";
constexpr const char* kBatch =
    "deepspeedai/DeepSpeed deepspeed/runtime/config.py@edaa722 DeepSpeedConfig._batch_assertion "
    "(world size: DeepSpeedConfig.__init__; pipe/engine.py PipelineEngine.__init__ asserts the "
    "same with the grid's data-parallel size)";
constexpr const char* kErrorCheck =
    "deepspeedai/DeepSpeed deepspeed/runtime/config.py@edaa722 DeepSpeedConfig._do_error_check";
constexpr const char* kSection =
    "deepspeedai/DeepSpeed deepspeed/runtime/config_utils.py@edaa722 DeepSpeedConfigModel "
    "(extra=\"forbid\")";
constexpr const char* kPipeConfig =
    "deepspeedai/DeepSpeed deepspeed/runtime/config.py@edaa722 get_pipeline_config, read by "
    "pipe/engine.py PipelineEngine.__init__";
constexpr const char* kAutoTpMesh =
    "deepspeedai/DeepSpeed deepspeed/runtime/engine.py@edaa722 "
    "DeepSpeedEngine._configure_tensor_parallel_states (utils/groups.py _init_tp_mesh_device)";
constexpr const char* kAutoEp =
    "deepspeedai/DeepSpeed deepspeed/module_inject/auto_ep_config.py@edaa722 "
    "parse_autoep_config, validate_autoep_config";
constexpr const char* kFolding =
    "deepspeedai/DeepSpeed deepspeed/module_inject/auto_ep_folding.py@edaa722 "
    "build_folding_spec, validate_folding_global";
constexpr const char* kInitialize =
    "deepspeedai/DeepSpeed deepspeed/__init__.py@edaa722 initialize";
constexpr const char* kPipeModule =
    "deepspeedai/DeepSpeed deepspeed/runtime/pipe/module.py@edaa722 PipelineModule.__init__";
constexpr const char* kGrid =
    "deepspeedai/DeepSpeed deepspeed/runtime/pipe/topology.py@edaa722 "
    "PipelineParallelGrid._is_grid_valid";
constexpr const char* kOffloadConfig =
    "deepspeedai/DeepSpeed deepspeed/runtime/zero/offload_config.py@edaa722:55 "
    "DeepSpeedZeroOffloadOptimizerConfig (extra=\"forbid\"), read by engine.py "
    "_do_optimizer_sanity_check (ZeRO stage > 0) and _configure_basic_optimizer";
constexpr const char* kCpuOptimizer =
    "deepspeedai/DeepSpeed deepspeed/runtime/engine.py@edaa722:2040-2045,2107-2131 "
    "DeepSpeedEngine._configure_optimizer, _configure_basic_optimizer";
constexpr const char* kCheckpointing =
    "deepspeedai/DeepSpeed deepspeed/runtime/activation_checkpointing/checkpointing.py@edaa722 "
    "configure, CheckpointFunction.forward";
constexpr const char* kPipeEngine =
    "deepspeedai/DeepSpeed deepspeed/runtime/pipe/engine.py@edaa722 PipelineEngine.__init__";

std::string n(std::int64_t v) {
  return std::to_string(v);
}

enum class Kind { Bool, Int, Number, String, Object, Any };

bool has_kind(const nlohmann::json& v, Kind k) {
  switch (k) {
    case Kind::Bool:
      return v.is_boolean();
    case Kind::Int:
      return v.is_number_integer();
    case Kind::Number:
      return v.is_number();
    case Kind::String:
      return v.is_string();
    case Kind::Object:
      return v.is_object();
    case Kind::Any:
      return true;
  }
  return false;
}

struct Field {
  const char* key;
  Kind kind;
};

// The top-level keys pipetune may write, each read by name by _initialize_params (or, for
// "pipetune_export", deliberately by nothing: a key DeepSpeedConfig does not read is ignored).
const std::vector<Field>& top_level_fields() {
  static const std::vector<Field> fields = {{"pipetune_export", Kind::String},
                                            {"train_batch_size", Kind::Int},
                                            {"train_micro_batch_size_per_gpu", Kind::Int},
                                            {"gradient_accumulation_steps", Kind::Int},
                                            {"gradient_clipping", Kind::Number},
                                            {"bf16", Kind::Object},
                                            {"fp16", Kind::Object},
                                            {"optimizer", Kind::Object},
                                            {"zero_optimization", Kind::Object},
                                            {"pipeline", Kind::Object},
                                            {"tensor_parallel", Kind::Object},
                                            {"expert_parallel", Kind::Object},
                                            {"activation_checkpointing", Kind::Object},
                                            {"steps_per_print", Kind::Int},
                                            {"wall_clock_breakdown", Kind::Bool}};
  return fields;
}

// Section fields (pydantic models refuse others; the pipeline and AutoEP dicts ignore others,
// so a key there that nothing reads is reported too: it would do nothing).
const std::vector<Field>& section_fields(const std::string& section) {
  static const std::vector<Field> none;
  // zero/config.py DeepSpeedZeroConfig (the fields pipetune writes, and the stage).
  static const std::vector<Field> zero = {{"stage", Kind::Int},
                                          {"overlap_comm", Kind::Bool},
                                          {"contiguous_gradients", Kind::Bool},
                                          {"reduce_scatter", Kind::Bool},
                                          {"reduce_bucket_size", Kind::Int},
                                          {"allgather_partitions", Kind::Bool},
                                          {"allgather_bucket_size", Kind::Int},
                                          {"round_robin_gradients", Kind::Bool},
                                          {"offload_optimizer", Kind::Object}};
  // precision_config.py DeepSpeedBF16Config / DeepSpeedFP16Config.
  static const std::vector<Field> bf16 = {{"enabled", Kind::Bool},
                                          {"immediate_grad_update", Kind::Bool},
                                          {"check_grad_overflow", Kind::Bool},
                                          {"bf16_master_weights_and_grads", Kind::Bool},
                                          {"bf16_optimizer_states", Kind::Bool}};
  static const std::vector<Field> fp16 = {
      {"enabled", Kind::Bool}, {"loss_scale", Kind::Number}, {"initial_scale_power", Kind::Int}};
  // tensor_parallel/config.py TPTrainingConfig.
  static const std::vector<Field> tp = {{"autotp_size", Kind::Int},
                                        {"tp_overlap_comm", Kind::Bool},
                                        {"partition_config", Kind::Object},
                                        {"preset_model", Kind::String}};
  // The keys pipe/engine.py reads of get_pipeline_config's dict; "stages", "partition" and
  // "seed_layers" are in its defaults but nothing reads them.
  static const std::vector<Field> pipe = {{"activation_checkpoint_interval", Kind::Int},
                                          {"pipe_partitioned", Kind::Bool},
                                          {"grad_partitioned", Kind::Bool},
                                          {"use_reentrant", Kind::Bool}};
  // auto_ep_config.py parse_autoep_config (the keys pipetune writes and the expert TP size).
  static const std::vector<Field> ep = {{"enabled", Kind::Bool},
                                        {"autoep_size", Kind::Int},
                                        {"expert_tensor_parallel_size", Kind::Int},
                                        {"preset_model", Kind::String}};
  // zero/offload_config.py DeepSpeedZeroOffloadOptimizerConfig (the fields pipetune writes).
  static const std::vector<Field> offload = {{"device", Kind::String}, {"pin_memory", Kind::Bool}};
  // config.py get_optimizer_name / get_optimizer_params.
  static const std::vector<Field> optimizer = {{"type", Kind::String}, {"params", Kind::Object}};
  if (section == "zero_optimization") return zero;
  if (section == "zero_optimization.offload_optimizer") return offload;
  if (section == "optimizer") return optimizer;
  if (section == "bf16") return bf16;
  if (section == "fp16") return fp16;
  if (section == "tensor_parallel") return tp;
  if (section == "pipeline") return pipe;
  if (section == "expert_parallel") return ep;
  return none;
}

const Field* find_field(const std::vector<Field>& fields, const std::string& key) {
  for (const Field& f : fields)
    if (key == f.key) return &f;
  return nullptr;
}

// A section's keys against the fields DeepSpeed reads in it, and their types.
void check_section_keys(const std::string& section, const nlohmann::json& value, const char* source,
                        RuleViolations& out) {
  for (const auto& [sub, v] : value.items()) {
    const Field* g = find_field(section_fields(section), sub);
    if (!g)
      out.push_back({"a key DeepSpeed reads in " + section, source, section + "." + sub});
    else if (!has_kind(v, g->kind))
      out.push_back({section + "." + sub + " has the type DeepSpeed reads", source, v.dump()});
  }
}

void check_keys(const nlohmann::json& j, RuleViolations& out) {
  for (const auto& [key, value] : j.items()) {
    const Field* f = find_field(top_level_fields(), key);
    if (!f) {
      out.push_back({"a top-level key DeepSpeed reads", kInitParams, key});
      continue;
    }
    if (!has_kind(value, f->kind)) {
      out.push_back({key + " has the type DeepSpeed reads", kInitParams, value.dump()});
      continue;
    }
    if (!value.is_object() || key == "activation_checkpointing") continue;
    const char* source = key == "pipeline"          ? kPipeConfig
                         : key == "expert_parallel" ? kAutoEp
                         : key == "optimizer"       ? kInitParams
                                                    : kSection;
    check_section_keys(key, value, source, out);
    if (key == "zero_optimization" && value.contains("offload_optimizer") &&
        value["offload_optimizer"].is_object())
      check_section_keys("zero_optimization.offload_optimizer", value["offload_optimizer"],
                         kOffloadConfig, out);
  }
}

std::int64_t section_int(const nlohmann::json& j, const char* section, const char* key,
                         std::int64_t fallback) {
  if (!j.contains(section) || !j[section].is_object()) return fallback;
  const nlohmann::json& s = j[section];
  return s.contains(key) && s[key].is_number_integer() ? s[key].get<std::int64_t>() : fallback;
}

bool enabled(const nlohmann::json& j, const char* section) {
  return j.contains(section) && j[section].is_object() && j[section].contains("enabled") &&
         j[section]["enabled"] == true;
}

std::optional<std::int64_t> integer(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number_integer()) return std::nullopt;
  return j[key].get<std::int64_t>();
}

// The model code: PIPELINE_STAGES, DECODER_LAYERS_PER_STAGE and whether it builds a
// PipelineModule.
struct ModelCode {
  std::int64_t stages = 1;
  std::vector<std::int64_t> split;
  bool pipeline_module = false;
  // A tp-pp-dp plan's ProcessTopology(axes=["data", "pipe"], dims=[D, PIPELINE_STAGES]): D;
  // 0 without one (the PipelineModule's own PipeDataParallelTopology).
  std::int64_t topology_data = 0;
  std::int64_t checkpoint_interval = 0;  // ACTIVATION_CHECKPOINT_INTERVAL
  bool cpu_checkpointing = false;        // ACTIVATION_CPU_CHECKPOINTING = 1 (checkpoint_in_cpu)
};

ModelCode read_model_code(const std::string& code) {
  ModelCode m;
  if (code.empty()) return m;
  std::smatch match;
  if (!std::regex_search(code, match, std::regex(R"((^|\n)PIPELINE_STAGES = (\d+))")))
    throw InputError("not pipetune's DeepSpeed model code: no PIPELINE_STAGES");
  m.stages = std::stoll(match[2].str());
  if (std::regex_search(code, match,
                        std::regex(R"((^|\n)DECODER_LAYERS_PER_STAGE = \[([^\]]*)\])"))) {
    const std::string list = match[2].str();
    const std::regex number(R"(\d+)");
    for (auto it = std::sregex_iterator(list.begin(), list.end(), number);
         it != std::sregex_iterator(); ++it)
      m.split.push_back(std::stoll(it->str()));
  }
  if (std::regex_search(code, match, std::regex(R"(dims=\[(\d+), PIPELINE_STAGES\])")))
    m.topology_data = std::stoll(match[1].str());
  if (std::regex_search(code, match, std::regex(R"((^|\n)ACTIVATION_CHECKPOINT_INTERVAL = (\d+))")))
    m.checkpoint_interval = std::stoll(match[2].str());
  m.cpu_checkpointing =
      std::regex_search(code, std::regex(R"((^|\n)ACTIVATION_CPU_CHECKPOINTING = 1)"));
  m.pipeline_module = code.find("(PipelineModule)") != std::string::npos ||
                      code.find("PipelineModule(") != std::string::npos;
  return m;
}

// _set_batch_related_parameters derives a missing one of the three; _batch_assertion: all
// positive and train_batch_size = micro x accumulation x the world DeepSpeedConfig counts.
void check_batch(const nlohmann::json& j, std::int64_t world, RuleViolations& out) {
  std::optional<std::int64_t> train = integer(j, "train_batch_size");
  std::optional<std::int64_t> micro = integer(j, "train_micro_batch_size_per_gpu");
  std::optional<std::int64_t> gas = integer(j, "gradient_accumulation_steps");
  if (!train && !micro) {
    out.push_back(
        {"train_batch_size or train_micro_batch_size_per_gpu is given", kBatch, "neither given"});
    return;
  }
  if (world <= 0) return;
  if (!gas && train && micro) gas = *train / *micro / world;
  if (!micro && train && gas && *gas > 0) micro = *train / world / *gas;
  if (!train && micro) train = *micro * gas.value_or(1) * world;
  if (!gas) gas = 1;
  if (!micro && train) micro = *train / world;
  auto require = [&](bool ok, const char* rule, const std::string& detail) {
    if (!ok) out.push_back({rule, kBatch, detail});
  };
  require(*train > 0, "train_batch_size > 0", n(*train));
  require(*micro > 0, "train_micro_batch_size_per_gpu > 0", n(*micro));
  require(*gas > 0, "gradient_accumulation_steps > 0", n(*gas));
  require(*train == *micro * *gas * world,
          "train_batch_size = micro-batch x gradient accumulation x data-parallel world",
          n(*train) + " != " + n(*micro) + " x " + n(*gas) + " x " + n(world));
}

// The pipeline (the model code's PipelineModule) and its split.
void check_pipeline(const ModelCode& code, const DeepspeedLaunch& launch, RuleViolations& out) {
  if (code.stages > 1 && !code.pipeline_module)
    out.push_back(
        {"a pipeline is a PipelineModule (else deepspeed.initialize builds no "
         "PipelineEngine)",
         kInitialize, n(code.stages) + " stages"});
  if (code.stages < 1 || launch.world_size % code.stages != 0)
    out.push_back({"num_stages divides the world size", kPipeModule,
                   "world " + n(launch.world_size) + ", stages " + n(code.stages)});
  // The grid's axes multiply to the world size (an "Invalid Grid" assertion otherwise).
  if (code.topology_data > 0 && code.topology_data * code.stages != launch.world_size)
    out.push_back({"the topology's data x pipe sizes are the world size", kGrid,
                   "data " + n(code.topology_data) + " x pipe " + n(code.stages) + ", world " +
                       n(launch.world_size)});
  if (code.split.empty()) return;
  if (static_cast<std::int64_t>(code.split.size()) != code.stages)
    out.push_back({"one layer count per pipeline stage", kPipeModule,
                   n(static_cast<std::int64_t>(code.split.size())) + " counts, " + n(code.stages) +
                       " stages"});
  std::int64_t total = 0;
  for (std::int64_t c : code.split) total += c;
  if (launch.decoder_layers > 0 && total != launch.decoder_layers)
    out.push_back({"the stages hold every decoder layer once", kPipeModule,
                   n(total) + " placed, the model has " + n(launch.decoder_layers)});
}

// AutoTP and AutoEP against the pipeline and ZeRO.
void check_parallelism(const nlohmann::json& j, const ModelCode& code, std::int64_t world,
                       RuleViolations& out) {
  const std::int64_t autotp = section_int(j, "tensor_parallel", "autotp_size", 0);
  const std::int64_t zero = section_int(j, "zero_optimization", "stage", 0);
  if (autotp > 1 && code.stages > 1)
    out.push_back({"AutoTP is not combined with a pipeline (its mesh has no pipeline dimension)",
                   kAutoTpMesh, "autotp_size " + n(autotp) + ", " + n(code.stages) + " stages"});
  if (autotp > 1 && world % autotp != 0)
    out.push_back({"autotp_size divides the world size", kAutoTpMesh,
                   "world " + n(world) + ", autotp_size " + n(autotp)});
  if (code.stages > 1 && zero >= 2)
    out.push_back({"ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism", kPipeEngine,
                   "ZeRO stage " + n(zero) + " with " + n(code.stages) + " pipeline stages"});
  if (!enabled(j, "expert_parallel")) return;
  const std::int64_t ep = section_int(j, "expert_parallel", "autoep_size", 1);
  const std::int64_t etp = section_int(j, "expert_parallel", "expert_tensor_parallel_size", 1);
  const std::int64_t tp = std::max<std::int64_t>(autotp, 1);
  const std::int64_t stage_size = code.stages > 0 ? world / code.stages : 0;
  const std::set<std::string> presets = {"mixtral", "deepseek_v2", "deepseek_v3", "qwen3_moe",
                                         "qwen3_5_moe"};
  const nlohmann::json& s = j["expert_parallel"];
  if (s.contains("preset_model") && s["preset_model"].is_string() &&
      presets.count(s["preset_model"].get<std::string>()) == 0)
    out.push_back(
        {"AutoEP's preset_model is one of its presets", kAutoEp, s["preset_model"].dump()});
  if (ep < 1 || etp < 1 || stage_size % tp != 0 || stage_size % (ep * etp) != 0)
    out.push_back(
        {"autotp_size and autoep_size x expert_tensor_parallel_size divide the stage "
         "size (world / pipeline stages)",
         kFolding,
         "stage size " + n(stage_size) + ", autotp " + n(tp) + ", autoep " + n(ep) + ", etp " +
             n(etp)});
  if (etp != 1) out.push_back({"expert_tensor_parallel_size is 1", kFolding, n(etp)});
  if (code.pipeline_module)
    out.push_back(
        {"AutoEP is not used in a PipelineModule (its presets find MoE blocks by "
         "Hugging Face module names)",
         kAutoEp, n(code.stages) + " stages"});
  if (tp > 1 && (code.stages > 1 || ep == 1 || zero == 3))
    out.push_back({"AutoEP+AutoTP folding: one pipeline stage, autoep_size > 1, ZeRO below 3",
                   kFolding,
                   "stages " + n(code.stages) + ", autoep " + n(ep) + ", ZeRO " + n(zero)});
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Offload. ZeRO-Offload (zero_optimization.offload_optimizer): a device DeepSpeed knows, a ZeRO
// optimizer to act in (stage 1 to 3; stage 0 ignores the section), and the config's Adam or AdamW
// for DeepSpeedCPUAdam (a client optimizer other than it is refused). Activation offload
// (checkpoint_in_cpu): it moves what deepspeed.checkpointing.checkpoint keeps, so the layers must
// be recomputed.
void check_offload(const nlohmann::json& j, const ModelCode& code, RuleViolations& out) {
  const nlohmann::json* offload = nullptr;
  if (j.contains("zero_optimization") && j["zero_optimization"].is_object() &&
      j["zero_optimization"].contains("offload_optimizer"))
    offload = &j["zero_optimization"]["offload_optimizer"];
  if (offload && offload->is_object() && offload->contains("device")) {
    const nlohmann::json& device = (*offload)["device"];
    const std::string name = device.is_string() ? device.get<std::string>() : device.dump();
    if (name != "none" && name != "cpu" && name != "nvme")
      out.push_back({"offload_optimizer.device is none, cpu or nvme", kOffloadConfig, name});
    if (name == "cpu" || name == "nvme") {
      const std::int64_t zero = section_int(j, "zero_optimization", "stage", 0);
      if (zero < 1)
        out.push_back({"offload_optimizer acts in ZeRO stages 1-3 only", kOffloadConfig,
                       "ZeRO stage " + n(zero)});
      const std::string type = j.contains("optimizer") && j["optimizer"].is_object() &&
                                       j["optimizer"].contains("type") &&
                                       j["optimizer"]["type"].is_string()
                                   ? lower(j["optimizer"]["type"].get<std::string>())
                                   : "";
      if (type != "adam" && type != "adamw")
        out.push_back({"ZeRO-Offload builds DeepSpeedCPUAdam from the config's Adam or AdamW",
                       kCpuOptimizer, "optimizer.type '" + type + "'"});
    }
  }
  if (code.cpu_checkpointing && code.checkpoint_interval < 1)
    out.push_back({"checkpoint_in_cpu offloads what recomputed layers keep: the layers recompute",
                   kCheckpointing,
                   "ACTIVATION_CHECKPOINT_INTERVAL = " + n(code.checkpoint_interval)});
}

}  // namespace

RuleViolations check_deepspeed_config(std::string_view text, const DeepspeedLaunch& launch) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("not a DeepSpeed JSON config: ") + e.what());
  }
  if (!j.is_object()) throw InputError("not a DeepSpeed JSON config: not an object");
  const ModelCode code = read_model_code(launch.model_code);
  RuleViolations out;
  check_keys(j, out);
  check_pipeline(code, launch, out);
  // The world DeepSpeedConfig counts: the PipelineModule grid's data-parallel size (initialize
  // passes model.mpu(); the grid is PipeDataParallelTopology(stages, world / stages), or a
  // tp-pp-dp plan's ProcessTopology of the same sizes), else every process (no mpu).
  const std::int64_t batch_world = code.stages > 1 && launch.world_size % code.stages == 0
                                       ? launch.world_size / code.stages
                                       : launch.world_size;
  if (code.stages <= 1 || launch.world_size % code.stages == 0) check_batch(j, batch_world, out);
  check_parallelism(j, code, launch.world_size, out);
  check_offload(j, code, out);
  // _do_error_check: ZeRO at most ZeroStageEnum.max_stage (3).
  const std::int64_t zero = section_int(j, "zero_optimization", "stage", 0);
  if (zero < 0 || zero > 3) out.push_back({"ZeRO stage is 0..3", kErrorCheck, n(zero)});
  // _initialize_params asserts bf16 and fp16 are not both enabled.
  if (enabled(j, "bf16") && enabled(j, "fp16"))
    out.push_back({"bf16 and fp16 are not both enabled", kInitParams, "both enabled"});
  return out;
}

}  // namespace pipetune::tuner
