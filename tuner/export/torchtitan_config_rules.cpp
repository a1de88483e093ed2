#include "tuner/export/torchtitan_config_rules.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <sstream>
#include <vector>

#include "engine/errors.hpp"
#include "tuner/export/torchtitan_pipeline_rules.hpp"
#include "tuner/export/torchtitan_sources.hpp"

namespace pipetune::tuner {

namespace {

using namespace torchtitan_config_sources;
using torchtitan_detail::check_parallel_degrees;
using torchtitan_detail::Checker;
using torchtitan_detail::Degrees;
using torchtitan_detail::n;
using torchtitan_detail::trim;

// Python's str.strip(): spaces, tabs and line ends.
std::string strip(const std::string& s) {
  const std::size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

bool starts_with(const std::string& s, std::string_view prefix) {
  return s.rfind(prefix, 0) == 0;
}

// ---- reading the module ----

// Python's top-level commas of a call's arguments (not those inside brackets or strings).
std::vector<std::string> top_level_items(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  int depth = 0;
  bool quoted = false;
  for (char ch : text) {
    if (ch == '"') quoted = !quoted;
    if (!quoted && (ch == '[' || ch == '(')) ++depth;
    if (!quoted && (ch == ']' || ch == ')')) --depth;
    if (!quoted && depth == 0 && ch == ',') {
      out.push_back(strip(item));
      item.clear();
      continue;
    }
    item += ch;
  }
  if (!strip(item).empty()) out.push_back(strip(item));
  return out;
}

// A value as one line: runs of whitespace (newlines too) become one space, and the trailing
// commas Python allows before a closing bracket go.
std::string one_line(const std::string& text) {
  std::string out;
  for (char ch : text) {
    const bool space = ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r';
    if (space) {
      if (!out.empty() && out.back() != ' ') out += ' ';
      continue;
    }
    if (ch == ']') {
      while (!out.empty() && (out.back() == ' ' || out.back() == ',')) out.pop_back();
    }
    out += ch;
  }
  return trim(out);
}

// The keyword arguments of `config.parallelism = ParallelismConfig(...)`, from the lines after
// the opening one up to the closing parenthesis. Returns the index of the closing line.
std::size_t read_parallelism(const std::vector<std::string>& lines, std::size_t open,
                             std::map<std::string, std::string>& out) {
  std::string args;
  std::size_t i = open + 1;
  for (; i < lines.size() && trim(lines[i]) != ")"; ++i) args += lines[i] + "\n";
  if (i == lines.size()) out["unread." + n(static_cast<std::int64_t>(open + 1))] = lines[open];
  for (const std::string& item : top_level_items(args)) {
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) {
      out["unread.ParallelismConfig(" + item + ")"] = item;
      continue;
    }
    out["parallelism." + strip(item.substr(0, eq))] = one_line(item.substr(eq + 1));
  }
  return i;
}

// One statement of the function's body.
void read_statement(const std::string& s, const std::string& line_key,
                    std::map<std::string, std::string>& out) {
  const auto assigned = [&](std::string_view target) -> std::optional<std::string> {
    const std::string prefix = std::string(target) + " = ";
    if (!starts_with(s, prefix)) return std::nullopt;
    return trim(s.substr(prefix.size()));
  };
  if (auto v = assigned("config"); v && v->size() > 2 && v->substr(v->size() - 2) == "()") {
    out["base"] = v->substr(0, v->size() - 2);
  } else if (auto m = assigned("config.model_spec");
             m && starts_with(*m, "model_registry(") && m->back() == ')') {
    out["model.flavor"] = m->substr(15, m->size() - 16);
  } else if (auto c = assigned("config.compile")) {
    out["compile"] = *c;
  } else if (auto a = assigned("config.activation_checkpoint")) {
    out["activation_checkpoint"] = *a;
  } else if (starts_with(s, "config.training.") && s.find(" = ") != std::string::npos) {
    const std::size_t eq = s.find(" = ");
    out["training." + s.substr(16, eq - 16)] = trim(s.substr(eq + 3));
  } else if (s == "return config") {
    out["return"] = "config";
  } else {
    out["unread." + line_key] = s;
  }
}

// ---- what b5bcd76 has ----

enum class FieldType { Int, IntOrNone, Number, Bool, Str, StrOrNone, Lists };
struct Field {
  const char* name;
  FieldType type;
  std::vector<const char*> literals;  // a Literal[...] field's values; empty: any
};

// TrainingConfig (configs.py@b5bcd76:35-118).
const std::vector<Field>& training_fields() {
  static const std::vector<Field> f = {
      {"num_tokens_per_microbatch_per_dp_rank", FieldType::Int, {}},
      {"num_tokens_per_train_step", FieldType::Int, {}},
      {"max_context_length", FieldType::Int, {}},
      {"max_norm", FieldType::Number, {}},
      {"steps", FieldType::Int, {}},
      {"enable_cpu_offload", FieldType::Bool, {}},
      {"disable_cuda_graphs", FieldType::Bool, {}},
      {"dtype", FieldType::Str, {"bfloat16", "float32"}},
      {"mixed_precision_param", FieldType::Str, {"bfloat16", "float32"}},
      {"mixed_precision_reduce", FieldType::Str, {"float32"}},
      {"gc_freq", FieldType::Int, {}},
      {"gc_debug", FieldType::Bool, {}},
  };
  return f;
}

// ParallelismConfig (configs.py@b5bcd76:120-292).
const std::vector<Field>& parallelism_fields() {
  static const std::vector<Field> f = {
      {"data_parallel_replicate_degree", FieldType::Int, {}},
      {"data_parallel_shard_degree", FieldType::Int, {}},
      {"fsdp_reshard_after_forward", FieldType::Str, {"default", "always", "never"}},
      {"enable_fsdp_symm_mem", FieldType::Bool, {}},
      {"tensor_parallel_degree", FieldType::Int, {}},
      {"enable_sequence_parallel", FieldType::Bool, {}},
      {"spmd_backend", FieldType::Str, {"partial_dtensor", "spmd_types"}},
      {"pipeline_parallel_degree", FieldType::Int, {}},
      {"module_fqns_per_model_part", FieldType::Lists, {}},
      {"pipeline_parallel_first_stage_less_layers", FieldType::Int, {}},
      {"pipeline_parallel_last_stage_less_layers", FieldType::Int, {}},
      {"pipeline_parallel_layers_per_stage", FieldType::IntOrNone, {}},
      {"pipeline_parallel_schedule", FieldType::Str, {}},
      {"pipeline_parallel_schedule_csv", FieldType::StrOrNone, {}},
      {"num_pp_microbatches", FieldType::Int, {}},
      {"context_parallel_degree", FieldType::Int, {}},
      {"context_parallel_load_balancer", FieldType::StrOrNone, {}},
      {"context_parallel_ptrr_mask_key", FieldType::StrOrNone, {}},
      {"expert_parallel_degree", FieldType::Int, {}},
  };
  return f;
}

// The names a module can import from torchtitan (each module's definitions or re-exports).
struct ImportableModule {
  const char* module;
  std::vector<const char*> names;
};
const std::vector<ImportableModule>& importable() {
  static const std::vector<ImportableModule> m = {
      // config/__init__.py@b5bcd76 (from .configs import ...)
      {"torchtitan.config",
       {"CommConfig", "CompileConfig", "DebugConfig", "ParallelismConfig", "TrainingConfig",
        "Configurable", "ConfigManager"}},
      // distributed/activation_checkpoint.py@b5bcd76:112-337
      {"torchtitan.distributed.activation_checkpoint",
       {"ActivationCheckpointing", "FullAC", "SelectiveAC", "MemoryBudgetAC",
        "ActivationCheckpointingConfig"}},
      // models/llama3/__init__.py@b5bcd76:359-390
      {"torchtitan.models.llama3", {"llama3_configs", "model_registry", "Llama3Model"}},
      // models/llama3/config_registry.py@b5bcd76 (the runs of the flavors)
      {"torchtitan.models.llama3.config_registry",
       {"llama3_debugmodel", "llama3_8b", "llama3_70b", "llama3_405b"}},
      // trainer.py@b5bcd76:68
      {"torchtitan.trainer", {"Trainer"}},
  };
  return m;
}

// torchtitan's own run of a flavor (config_registry.py@b5bcd76) as far as the checks read it:
// what a config derived from it keeps unless it sets it.
struct BaseRun {
  const char* function;
  const char* flavor;
  std::int64_t tokens_per_microbatch;
  std::int64_t max_context_length;
  const char* activation_checkpoint;
  std::map<std::string, std::string> parallelism;  // its ParallelismConfig's arguments
  bool compiled;
};
const std::vector<BaseRun>& base_runs() {
  static const std::vector<BaseRun> runs = {
      {"llama3_debugmodel",
       "debugmodel",
       8 * 2048,
       2048,
       "SelectiveAC.Config()",
       {{"pipeline_parallel_schedule", "Interleaved1F1B"}},
       false},                                                             // l.38-80
      {"llama3_8b", "8B", 8192, 8192, "SelectiveAC.Config()", {}, false},  // l.194-226
      {"llama3_70b",
       "70B",
       8 * 8192,
       8192,
       "FullAC.Config()",  // l.267-302
       {{"tensor_parallel_degree", "8"}},
       false},
      {"llama3_405b",
       "405B",
       2 * 8192,
       8192,
       "FullAC.Config()",  // l.305-356
       {{"tensor_parallel_degree", "8"}},
       true},
  };
  return runs;
}

// llama3_configs' keys (__init__.py@b5bcd76:359-366).
constexpr std::array kLlama3ConfigKeys = {"debugmodel", "1B", "3B", "8B", "70B", "405B"};

std::string unquoted(const std::string& v) {
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') return v.substr(1, v.size() - 2);
  return v;
}

bool is_int(const std::string& v) {
  const std::size_t start = !v.empty() && v[0] == '-' ? 1 : 0;
  return v.size() > start && v.find_first_not_of("0123456789", start) == std::string::npos;
}

bool has_type(const std::string& v, FieldType t) {
  const bool str = v.size() >= 2 && v.front() == '"' && v.back() == '"';
  switch (t) {
    case FieldType::Int:
      return is_int(v);
    case FieldType::IntOrNone:
      return is_int(v) || v == "None";
    case FieldType::Number: {
      std::istringstream in(v);
      double d = 0;
      return (in >> d) && in.eof();
    }
    case FieldType::Bool:
      return v == "True" || v == "False";
    case FieldType::Str:
      return str;
    case FieldType::StrOrNone:
      return str || v == "None" || v == kTorchtitanCsvBesideThisFile;
    case FieldType::Lists:
      return v == "None" || torchtitan_detail::string_lists(v).has_value();
  }
  return false;
}

// ---- the checks ----

// Fields of a dataclass: each exists (slots / keyword-only: AttributeError or TypeError
// otherwise) and holds a value of its type (and of its Literal's values).
void check_fields(Checker& c, const std::map<std::string, std::string>& raw,
                  const std::string& section, const std::vector<Field>& fields,
                  const char* source) {
  for (const auto& [key, value] : raw) {
    if (!starts_with(key, section + ".")) continue;
    const std::string name = key.substr(section.size() + 1);
    const auto f =
        std::find_if(fields.begin(), fields.end(), [&](const Field& x) { return name == x.name; });
    c.require(f != fields.end(), "every field set is a field of the dataclass", source, key);
    if (f == fields.end()) continue;
    c.require(has_type(value, f->type), "every value has its field's type", source,
              key + " = " + value);
    if (!f->literals.empty() && has_type(value, FieldType::Str)) {
      const std::string v = unquoted(value);
      const bool listed = std::any_of(f->literals.begin(), f->literals.end(),
                                      [&](const char* l) { return v == l; });
      c.require(listed, "a Literal field holds one of its values", source, key + " = " + value);
    }
  }
}

// The module as _load_config runs it: every statement read, every name imported from where it
// exists, the function CONFIG names defined and returning the config.
void check_statements(Checker& c, const std::map<std::string, std::string>& raw) {
  for (const auto& entry : raw) {
    const std::string& key = entry.first;
    const std::string& value = entry.second;
    if (starts_with(key, "unread."))
      c.fail("a statement pipetune's exports write", kLoadConfig, value);
    if (!starts_with(key, "import.")) continue;
    const std::string name = key.substr(7);
    if (value == "os") continue;
    const auto m = std::find_if(importable().begin(), importable().end(),
                                [&](const ImportableModule& x) { return value == x.module; });
    const bool found =
        m != importable().end() &&
        std::any_of(m->names.begin(), m->names.end(), [&](const char* x) { return name == x; });
    c.require(found, "every imported name exists in its torchtitan module", kConfigExports,
              "from " + value + " import " + name);
  }
  const auto imported = [&](const std::string& name) { return raw.count("import." + name) > 0; };
  c.require(raw.count("function") && raw.at("function") == kTorchtitanConfigFunction,
            "the module defines the function CONFIG names", kLoadConfig,
            std::string(kTorchtitanConfigFunction) + " (defined: " +
                (raw.count("function") ? raw.at("function") : std::string("none")) + ")");
  c.require(raw.count("return") > 0, "the function returns the config", kLoadConfig,
            "no `return config`");
  const std::vector<std::pair<std::string, std::string>> uses = {
      {"model.flavor", "model_registry"},
      {"parallelism", "ParallelismConfig"},
      {"compile", "CompileConfig"}};
  for (const auto& [key, name] : uses)
    if (raw.count(key))
      c.require(imported(name), "every name used is imported (NameError)", kLoadConfig, name);
  for (const char* ac : {"FullAC", "SelectiveAC", "MemoryBudgetAC"})
    if (raw.count("activation_checkpoint") && starts_with(raw.at("activation_checkpoint"), ac))
      c.require(imported(ac), "every name used is imported (NameError)", kLoadConfig, ac);
  if (raw.count("base"))
    c.require(imported(raw.at("base")), "every name used is imported (NameError)", kLoadConfig,
              raw.at("base"));
  if (raw.count("parallelism.pipeline_parallel_schedule_csv") &&
      raw.at("parallelism.pipeline_parallel_schedule_csv") == kTorchtitanCsvBesideThisFile)
    c.require(imported("os"), "every name used is imported (NameError)", kLoadConfig, "os");
}

// The run the config derives from and the flavor it builds: the run is one of config_registry's,
// the flavor a key of llama3_configs (KeyError otherwise) whose shape is the plan's model.
// Returns the run (nullptr when unknown) and sets `layers` to the flavor's layer count.
const BaseRun* check_base_and_flavor(Checker& c, const std::map<std::string, std::string>& raw,
                                     const TorchtitanLaunch& launch, std::int64_t& layers) {
  const std::string base = raw.count("base") ? raw.at("base") : "";
  const auto run = std::find_if(base_runs().begin(), base_runs().end(),
                                [&](const BaseRun& r) { return base == r.function; });
  c.require(run != base_runs().end(), "the config derives from a run of config_registry",
            kLlama3Registry, "'" + base + "'");
  std::string flavor = raw.count("model.flavor") ? unquoted(raw.at("model.flavor")) : "";
  if (flavor.empty() && run != base_runs().end()) flavor = run->flavor;
  const bool key = std::find(kLlama3ConfigKeys.begin(), kLlama3ConfigKeys.end(), flavor) !=
                   kLlama3ConfigKeys.end();
  c.require(key, "model_registry's flavor is a key of llama3_configs", kLlama3Configs,
            "'" + flavor + "'");
  const auto& flavors = torchtitan_config_flavors();
  const auto f = std::find_if(flavors.begin(), flavors.end(),
                              [&](const TorchtitanFlavor& x) { return x.flavor == flavor; });
  layers = f != flavors.end() ? f->shape.n_layers : launch.num_layers;
  if (key && launch.model_shape)
    c.require(f != flavors.end() && *launch.model_shape == f->shape,
              "the flavor's shape is the plan's model", kLlama3Configs, "llama3 " + flavor);
  return run != base_runs().end() ? &*run : nullptr;
}

// The dataclasses' __post_init__ checks and Trainer.Config's.
void check_post_init(Checker& c, const std::map<std::string, std::string>& keys) {
  const std::int64_t tokens = c.integer("training.num_tokens_per_microbatch_per_dp_rank", 16384);
  const std::int64_t per_step = c.integer("training.num_tokens_per_train_step", -1);
  const std::int64_t context = c.integer("training.max_context_length", 2048);
  c.require(tokens > 0, "num_tokens_per_microbatch_per_dp_rank > 0", kTrainingConfig, n(tokens));
  c.require(per_step == -1 || per_step > 0, "num_tokens_per_train_step is -1 or > 0",
            kTrainingConfig, n(per_step));
  c.require(context > 0, "max_context_length > 0", kTrainingConfig, n(context));
  c.require(c.str("parallelism.context_parallel_load_balancer", "headtail") != "",
            "context_parallel_load_balancer is not an empty string", kParallelismConfig, "\"\"");
  const std::int64_t microbatches = c.integer("parallelism.num_pp_microbatches", 1);
  c.require(microbatches > 0, "num_pp_microbatches > 0", kTrainerConfig, n(microbatches));
  const std::int64_t pp = c.integer("parallelism.pipeline_parallel_degree", 1);
  c.require(pp <= 1 || c.str("training.disable_cuda_graphs", "False") == "True",
            "CUDA graphs (on by default) do not support pipeline parallelism", kCudaGraphs,
            "pipeline_parallel_degree " + n(pp) + " without training.disable_cuda_graphs = True");
  const std::string ac =
      keys.count("activation_checkpoint") ? keys.at("activation_checkpoint") : "";
  c.require(ac == "None" || ac == "FullAC.Config()" || ac == "SelectiveAC.Config()" ||
                starts_with(ac, "MemoryBudgetAC.Config("),
            "activation_checkpoint is a policy's Config or None", kActivationCheckpoint, ac);
  const bool compiled = keys.count("compile") && keys.at("compile") != "CompileConfig()";
  c.require(!starts_with(ac, "MemoryBudgetAC") || compiled,
            "memory-budget activation checkpointing needs the model compiled", kTrainerConfig, ac);
}

// ParallelDims._validate (the shared degree rules), and at b5bcd76 EP dividing dp_shard x cp x
// tp (the experts borrow those ranks; there is no expert TP).
std::optional<Degrees> check_degrees(Checker& c, std::int64_t world) {
  const std::optional<Degrees> d = check_parallel_degrees(c, world, kParallelDims);
  if (!d) return d;
  c.require(d->shard >= 1 && (d->shard * d->cp * d->tp) % d->ep == 0,
            "expert_parallel_degree divides dp_shard x cp x tp", kParallelDims,
            "EP " + n(d->ep) + ", dp_shard x cp x tp = " + n(d->shard * d->cp * d->tp));
  return d;
}

// Trainer.__init__: the tokens of a micro-batch split evenly over sequence / context
// parallelism, and the tokens of a train step are whole gradient-accumulation iterations.
void check_token_counts(Checker& c, const Degrees& d) {
  const std::int64_t tokens = c.integer("training.num_tokens_per_microbatch_per_dp_rank", 16384);
  const bool sp = c.str("parallelism.enable_sequence_parallel", "True") == "True";
  const std::int64_t divisor = (sp ? d.tp : 1) * (d.cp > 1 ? 2 * d.cp : 1);
  c.require(tokens % divisor == 0, "tokens per micro-batch divisible by SP x 2CP", kSeqLenDivisor,
            n(tokens) + " tokens, divisor " + n(divisor));
  const std::int64_t microbatches = d.pp > 1 ? c.integer("parallelism.num_pp_microbatches", 1) : 1;
  const std::int64_t dp = d.rep * d.shard;
  const std::int64_t per_iteration = tokens * microbatches * dp;
  std::int64_t per_step = c.integer("training.num_tokens_per_train_step", -1);
  if (per_step < 0) per_step = per_iteration;
  c.require(per_iteration > 0 && per_step % per_iteration == 0,
            "tokens per train step divisible by the tokens of one accumulation iteration",
            kTokensPerStep,
            n(per_step) + " over " + n(tokens) + " x " + n(microbatches) + " x DP " + n(dp));
}

// The pipeline rules at b5bcd76 (the output layer is `lm_head` there).
constexpr torchtitan_detail::PipelineRuleSources kPipelineSources = {
    kParallelismConfig, kPipelineLlm,   kFqnSplit,
    kModuleSplit,       kBuildSchedule, torchtitan_sources::kScheduleClass,
    "lm_head"};

}  // namespace

std::map<std::string, std::string> parse_torchtitan_config_module(std::string_view module) {
  std::vector<std::string> lines;
  std::istringstream in{std::string(module)};
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::map<std::string, std::string> out;
  bool in_function = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string s = trim(lines[i]);
    if (s.empty() || s[0] == '#') continue;
    const std::string line_key = n(static_cast<std::int64_t>(i + 1));
    if (lines[i][0] != ' ') {
      in_function = false;
      const std::size_t import = s.find(" import ");
      if (s == "import os") {
        out["import.os"] = "os";
      } else if (starts_with(s, "from ") && import != std::string::npos) {
        for (const std::string& name : top_level_items(s.substr(import + 8)))
          out["import." + name] = trim(s.substr(5, import - 5));
      } else if (starts_with(s, "def ") && s.find('(') != std::string::npos &&
                 (s.substr(s.find('(')) == "() -> Trainer.Config:" ||
                  s.substr(s.find('(')) == "():")) {
        out["function"] = s.substr(4, s.find('(') - 4);
        in_function = true;
      } else {
        out["unread." + line_key] = s;
      }
    } else if (!in_function) {
      out["unread." + line_key] = s;
    } else if (s == "config.parallelism = ParallelismConfig(") {
      i = read_parallelism(lines, i, out);
      out["parallelism"] = "ParallelismConfig(...)";
    } else {
      read_statement(s, line_key, out);
    }
  }
  if (!out.count("function"))
    throw InputError("torchtitan config module: no `def <name>() -> Trainer.Config:` function");
  return out;
}

RuleViolations check_torchtitan_config_module(std::string_view module,
                                              const TorchtitanLaunch& launch) {
  std::map<std::string, std::string> raw = parse_torchtitan_config_module(module);
  std::map<std::string, std::string> keys;
  for (const auto& [k, v] : raw) keys[k] = unquoted(v);
  if (raw.count("parallelism.pipeline_parallel_schedule_csv") &&
      raw.at("parallelism.pipeline_parallel_schedule_csv") == kTorchtitanCsvBesideThisFile)
    keys["parallelism.pipeline_parallel_schedule_csv"] = "pipetune_schedule.csv";
  Checker c(keys, kParallelismConfig);
  check_statements(c, raw);
  std::int64_t layers = 0;
  const BaseRun* base = check_base_and_flavor(c, raw, launch, layers);
  if (base) {
    // What the config keeps of the run it derives from: its parallelism when not replaced, its
    // batch, context and recomputation when not set.
    if (!raw.count("parallelism"))
      for (const auto& [k, v] : base->parallelism) keys["parallelism." + k] = v;
    keys.try_emplace("training.num_tokens_per_microbatch_per_dp_rank",
                     n(base->tokens_per_microbatch));
    keys.try_emplace("training.max_context_length", n(base->max_context_length));
    keys.try_emplace("activation_checkpoint", base->activation_checkpoint);
    if (base->compiled) keys.try_emplace("compile", "CompileConfig(enable=True)");
  }
  check_fields(c, raw, "training", training_fields(), kTrainingConfig);
  check_fields(c, raw, "parallelism", parallelism_fields(), kParallelismConfig);
  check_post_init(c, keys);
  const std::optional<Degrees> d = check_degrees(c, launch.world_size);
  if (!d) return c.take();
  check_token_counts(c, *d);
  if (d->pp > 1)
    torchtitan_detail::check_pipeline(c, kPipelineSources, launch.schedule_csv, layers, d->pp,
                                      c.integer("parallelism.num_pp_microbatches", 1));
  return c.take();
}

}  // namespace pipetune::tuner
