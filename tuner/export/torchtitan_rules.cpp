#include "tuner/export/torchtitan_rules.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "engine/errors.hpp"
#include "tuner/export/pipelining_csv.hpp"

namespace pipetune::tuner {

namespace {

constexpr const char* kJobConfig = "pytorch/torchtitan torchtitan/config/job_config.py@6404b93";
constexpr const char* kParallelDims =
    "pytorch/torchtitan torchtitan/distributed/parallel_dims.py@0119de1 ParallelDims._validate";
constexpr const char* kTrain = "pytorch/torchtitan torchtitan/train.py@000204a Trainer.__init__";
constexpr const char* kPipelineLlm =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@02ef790 pipeline_llm";
constexpr const char* kBuildSchedule =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@02ef790 "
    "build_pipeline_schedule";
constexpr const char* kFqnSplit =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@02ef790 "
    "generate_llm_fqn_per_model_part";
constexpr const char* kModuleSplit =
    "pytorch/torchtitan torchtitan/distributed/pipeline_parallel.py@02ef790 "
    "pipeline_module_split";
constexpr const char* kScheduleClass =
    "pytorch/pytorch torch/distributed/pipelining/schedules.py@1fd7abc get_schedule_class";
constexpr const char* kValidateSchedule =
    "pytorch/pytorch torch/distributed/pipelining/schedules.py@1fd7abc _validate_schedule";
constexpr const char* kSendRecv =
    "pytorch/pytorch torch/distributed/pipelining/schedules.py@1fd7abc _add_send_recv";
constexpr const char* kActionFormat =
    "pytorch/pytorch torch/distributed/pipelining/schedules.py@1fd7abc _Action.from_str";

// The keys of the JobConfig sections a pipetune export writes (job_config.py@6404b93); a key
// outside them is not a JobConfig field and torchtitan never reads it.
struct Section {
  const char* name;
  std::vector<const char*> keys;
};
const std::vector<Section>& sections() {
  static const std::vector<Section> s = {
      {"job",
       {"config_file", "dump_folder", "description", "use_for_integration_test", "print_args"}},
      {"model", {"name", "flavor", "tokenizer_path", "converters", "print_after_conversion"}},
      {"optimizer",
       {"name", "lr", "beta1", "beta2", "eps", "weight_decay", "implementation",
        "early_step_in_backward"}},
      {"lr_scheduler", {"warmup_steps", "decay_ratio", "decay_type", "min_lr_factor"}},
      {"training",
       {"dataset", "dataset_path", "local_batch_size", "global_batch_size", "seq_len", "max_norm",
        "steps", "enable_cpu_offload", "mixed_precision_param", "mixed_precision_reduce", "compile",
        "gc_freq", "gc_debug", "seed", "deterministic"}},
      {"parallelism",
       {"data_parallel_replicate_degree", "enable_compiled_autograd", "data_parallel_shard_degree",
        "fsdp_reshard_after_forward", "tensor_parallel_degree", "disable_loss_parallel",
        "enable_async_tensor_parallel", "pipeline_parallel_degree",
        "pipeline_parallel_split_points", "module_fqns_per_model_part",
        "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers",
        "pipeline_parallel_layers_per_stage", "pipeline_parallel_schedule",
        "pipeline_parallel_schedule_csv", "pipeline_parallel_microbatch_size",
        "context_parallel_degree", "context_parallel_rotate_method", "expert_parallel_degree"}},
      {"activation_checkpoint",
       {"mode", "selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns"}},
  };
  return s;
}
// Sections JobConfig has whose keys pipetune never writes (not checked key by key).
constexpr std::array kOtherSections = {
    "profiling",         "metrics",         "checkpoint",   "float8",       "mx",        "comm",
    "memory_estimation", "fault_tolerance", "liger_kernel", "experimental", "validation"};

// torch.distributed.pipelining's schedule classes by name (case-insensitive lookup), with
// whether they run one stage per rank (PipelineScheduleSingle subclasses) and whether
// pipeline_module_split places their stages V-shaped.
struct ScheduleClass {
  const char* name;
  bool single;
  bool v;
};
constexpr std::array kScheduleClasses = {
    ScheduleClass{"1F1B", true, false},
    ScheduleClass{"Interleaved1F1B", false, false},
    ScheduleClass{"GPipe", true, false},
    ScheduleClass{"LoopedBFS", false, false},
    ScheduleClass{"InterleavedZeroBubble", false, false},
    ScheduleClass{"PipelineScheduleSingle", true, false},
    ScheduleClass{"PipelineScheduleMulti", false, false},
    ScheduleClass{"ZBVZeroBubble", false, true},
    ScheduleClass{"DualPipeV", false, true},
};

std::optional<ScheduleClass> schedule_class(const std::string& name) {
  auto lower = [](std::string s) {
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  };
  for (const ScheduleClass& c : kScheduleClasses)
    if (lower(c.name) == lower(name)) return c;
  return std::nullopt;
}

std::string n(std::int64_t v) {
  return std::to_string(v);
}

std::string trim(const std::string& s) {
  const std::size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const std::size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// A TOML array of arrays of strings ([["a", "b"], ["c"]]) as written on one line; nullopt when
// the text is not one.
std::optional<std::vector<std::vector<std::string>>> string_lists(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  std::size_t i = 0;
  const auto skip = [&] {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
  };
  const auto take = [&](char c) {
    skip();
    if (i >= text.size() || text[i] != c) return false;
    ++i;
    return true;
  };
  if (!take('[')) return std::nullopt;
  if (take(']')) return out;
  do {
    if (!take('[')) return std::nullopt;
    out.emplace_back();
    if (take(']')) continue;
    do {
      if (!take('"')) return std::nullopt;
      const std::size_t close = text.find('"', i);
      if (close == std::string::npos) return std::nullopt;
      out.back().push_back(text.substr(i, close - i));
      i = close + 1;
    } while (take(','));
    if (!take(']')) return std::nullopt;
  } while (take(','));
  if (!take(']')) return std::nullopt;
  skip();
  if (i != text.size()) return std::nullopt;
  return out;
}

class Checker {
 public:
  explicit Checker(const std::map<std::string, std::string>& keys) : keys_(keys) {}
  bool has(const std::string& key) const { return keys_.count(key) > 0; }
  std::string str(const std::string& key, const std::string& fallback) const {
    auto it = keys_.find(key);
    return it == keys_.end() ? fallback : it->second;
  }
  std::int64_t integer(const std::string& key, std::int64_t fallback) {
    auto it = keys_.find(key);
    if (it == keys_.end()) return fallback;
    try {
      std::size_t used = 0;
      const std::int64_t v = std::stoll(it->second, &used);
      if (used == it->second.size()) return v;
    } catch (const std::exception&) {
    }
    fail("key has the field's type (int)", kJobConfig, key + " = " + it->second);
    return fallback;
  }
  void require(bool ok, const std::string& rule, const char* source, const std::string& detail) {
    if (!ok) fail(rule, source, detail);
  }
  void fail(const std::string& rule, const char* source, const std::string& detail) {
    out_.push_back({rule, source, detail});
  }
  void add(const RuleViolations& v) { out_.insert(out_.end(), v.begin(), v.end()); }
  std::size_t size() const { return out_.size(); }
  RuleViolations take() { return std::move(out_); }

 private:
  const std::map<std::string, std::string>& keys_;
  RuleViolations out_;
};

// module_fqns_per_model_part (pipeline_module_split): model parts that a rank count divides, a
// single-stage class with one per rank (build_pipeline_schedule runs only a rank's first stage),
// and the model's modules each in one part, in model order: the embedding first, the final norm
// and output layer last, every transformer layer once (a layer left out is deleted from the
// model). Returns the number of parts, or nullopt when it cannot be read.
std::optional<std::int64_t> check_module_fqns(Checker& c, const std::string& text,
                                              std::int64_t layers, std::int64_t pp, bool single,
                                              const std::string& schedule) {
  const auto parts = string_lists(text);
  c.require(parts.has_value(), "module_fqns_per_model_part is a list of lists of module names",
            kJobConfig, text);
  if (!parts) return std::nullopt;
  const auto count = static_cast<std::int64_t>(parts->size());
  c.require(count > 0 && count % pp == 0, "number of model parts divisible by PP", kModuleSplit,
            n(count) + " parts over PP " + n(pp));
  if (count == 0 || count % pp != 0) return std::nullopt;
  if (single)
    c.require(count == pp, "a single-stage schedule has 1 stage per rank", kBuildSchedule,
              schedule + " with " + n(count / pp) + " stages per rank");
  std::int64_t next_layer = 0;
  for (std::size_t part = 0; part < parts->size(); ++part) {
    const bool first = part == 0, last = part + 1 == parts->size();
    const std::vector<std::string>& names = (*parts)[part];
    for (std::size_t i = 0; i < names.size(); ++i) {
      const std::string& m = names[i];
      const std::string at = "part " + n(static_cast<std::int64_t>(part)) + " '" + m + "'";
      if (m == "tok_embeddings") {
        c.require(first && i == 0, "the embedding leads the first part", kModuleSplit, at);
      } else if (m == "norm" || m == "output") {
        const bool in_place =
            last && (m == "norm" ? i + 2 == names.size() && names[i + 1] == "output"
                                 : i + 1 == names.size());
        c.require(in_place, "the final norm and output layer end the last part", kModuleSplit, at);
      } else if (m.rfind("layers.", 0) == 0 && m.size() > 7 &&
                 m.find_first_not_of("0123456789", 7) == std::string::npos) {
        const std::int64_t layer = std::stoll(m.substr(7));
        c.require(layer == next_layer && layer < layers,
                  "every transformer layer once, in model order", kModuleSplit,
                  at + " where layers." + n(next_layer) + " comes (" + n(layers) + " layers)");
        next_layer = layer + 1;
      } else {
        c.fail("module names are the model's (tok_embeddings, layers.N, norm, output)",
               kModuleSplit, at);
      }
    }
    if (first)
      c.require(!names.empty() && names.front() == "tok_embeddings",
                "the embedding leads the first part", kModuleSplit, "part 0 has no tok_embeddings");
    if (last)
      c.require(names.size() >= 2 && names.back() == "output",
                "the final norm and output layer end the last part", kModuleSplit,
                "part " + n(count - 1) + " does not end with norm, output");
  }
  c.require(next_layer == layers, "every transformer layer once, in model order", kModuleSplit,
            n(next_layer) + " of " + n(layers) + " layers named");
  return count;
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

RuleViolations check_pipelining_csv(std::string_view csv, int pp, int stages, int microbatches,
                                    bool v_placement) {
  RuleViolations out;
  auto fail = [&](const char* rule, const char* source, const std::string& detail) {
    out.push_back({rule, source, detail});
  };
  PipeliningSchedule rows;
  try {
    rows = parse_pipelining_csv(csv);
  } catch (const InputError& e) {
    fail("every cell is <stage><F|I|W|B><micro-batch>", kActionFormat, e.what());
    return out;
  }
  // _validate_schedule: one row per pipeline rank.
  if (static_cast<int>(rows.size()) != pp) {
    fail("one CSV row per pipeline rank", kValidateSchedule,
         n(static_cast<std::int64_t>(rows.size())) + " rows for " + n(pp) + " ranks");
    return out;
  }
  // Every stage on one rank, and on the rank torchtitan built it on (pipeline_module_split:
  // loop = rank + k * pp, V = rank and 2pp-1-rank); a rank runs only the stages it holds.
  auto home = [&](int s) { return v_placement ? (s < pp ? s : 2 * pp - 1 - s) : s % pp; };
  std::map<int, int> rank_of;
  std::map<std::tuple<int, char>, std::set<int>> seen;  // (stage, type) -> micro-batches
  bool well_formed = true;
  for (int r = 0; r < pp; ++r) {
    for (const PipeliningAction& a : rows[r]) {
      const std::string at = "rank " + n(r) + " action " + action_label(a);
      if (a.stage < 0 || a.stage >= stages) {
        fail("stage index below the number of stages", kValidateSchedule,
             at + " (" + n(stages) + " stages)");
        well_formed = false;
        continue;
      }
      if (a.microbatch >= microbatches) {
        fail("micro-batch index below the number of micro-batches", kValidateSchedule,
             at + " (" + n(microbatches) + " micro-batches)");
        well_formed = false;
      }
      auto [it, fresh] = rank_of.emplace(a.stage, r);
      if (!fresh && it->second != r) {
        fail("each stage runs on one rank", kValidateSchedule,
             at + ", stage " + n(a.stage) + " also on rank " + n(it->second));
        well_formed = false;
      }
      if (home(a.stage) != r) {
        fail("stage placed where torchtitan builds it", kModuleSplit,
             at + ", stage " + n(a.stage) + " is built on rank " + n(home(a.stage)) +
                 (v_placement ? " (V placement)" : " (loop placement)"));
        well_formed = false;
      }
      // F before I or B of the same micro-batch on the stage; I before W.
      if (a.type == 'I' || a.type == 'B')
        if (!seen[{a.stage, 'F'}].count(a.microbatch)) {
          fail("backward after its forward", kValidateSchedule, at + " before its forward");
          well_formed = false;
        }
      if (a.type == 'W' && !seen[{a.stage, 'I'}].count(a.microbatch)) {
        fail("weight backward after its input backward", kValidateSchedule,
             at + " before its input backward");
        well_formed = false;
      }
      seen[{a.stage, a.type}].insert(a.microbatch);
    }
  }
  for (int s = 0; s < stages; ++s) {
    const std::size_t f = seen[{s, 'F'}].size();
    const std::size_t b =
        seen[{s, 'B'}].size() + (seen[{s, 'I'}].size() + seen[{s, 'W'}].size()) / 2;
    if (static_cast<int>(f) != microbatches || static_cast<int>(b) != microbatches) {
      fail("every stage runs each micro-batch's forward and backward", kValidateSchedule,
           "stage " + n(s) + ": " + n(static_cast<std::int64_t>(f)) + " forwards, " +
               n(static_cast<std::int64_t>(b)) + " backwards for " + n(microbatches) +
               " micro-batches");
      well_formed = false;
    }
  }
  if (!well_formed) return out;
  // _add_send_recv: ranks in order take their next action when its input is there (F of stage
  // s after F of s-1, I/B of stage s after I/B of s+1); a pass in which no rank can is an error.
  std::set<std::tuple<int, char, int>> done;
  std::vector<std::size_t> next(static_cast<std::size_t>(pp), 0);
  auto ready = [&](const PipeliningAction& a) {
    if (a.type == 'F') return a.stage == 0 || done.count({a.stage - 1, 'F', a.microbatch}) > 0;
    if (a.type == 'I' || a.type == 'B')
      return a.stage == stages - 1 || done.count({a.stage + 1, 'I', a.microbatch}) > 0 ||
             done.count({a.stage + 1, 'B', a.microbatch}) > 0;
    return true;
  };
  for (;;) {
    bool progress = false;
    bool left = false;
    for (int r = 0; r < pp; ++r) {
      if (next[r] >= rows[r].size()) continue;
      left = true;
      const PipeliningAction& a = rows[r][next[r]];
      if (!ready(a)) continue;
      done.insert({a.stage, a.type, a.microbatch});
      ++next[r];
      progress = true;
    }
    if (!left) break;
    if (!progress) {
      std::string stuck;
      for (int r = 0; r < pp; ++r)
        if (next[r] < rows[r].size())
          stuck += (stuck.empty() ? "" : ", ") +
                   ("rank " + n(r) + " at " + action_label(rows[r][next[r]]));
      fail("the lowering to send/recv can schedule every action (no deadlock)", kSendRecv, stuck);
      break;
    }
  }
  return out;
}

RuleViolations check_torchtitan_config(std::string_view toml, const TorchtitanLaunch& launch) {
  const std::map<std::string, std::string> keys = parse_torchtitan_toml(toml);
  Checker c(keys);
  // Every key is a JobConfig field.
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
    c.require(known, "every key is a JobConfig field", kJobConfig, "[" + section + "] " + key);
  }
  // Literal-typed fields.
  const std::string ac = c.str("activation_checkpoint.mode", "selective");
  c.require(ac == "selective" || ac == "full" || ac == "none",
            "activation_checkpoint.mode is selective, full or none", kJobConfig, "'" + ac + "'");
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

  // ParallelDims._validate: degrees >= 1 (dp_shard may be -1: the leftover ranks); their
  // product is the world size.
  const std::int64_t world = launch.world_size;
  const std::int64_t rep = c.integer("parallelism.data_parallel_replicate_degree", 1);
  std::int64_t shard = c.integer("parallelism.data_parallel_shard_degree", -1);
  const std::int64_t tp = c.integer("parallelism.tensor_parallel_degree", 1);
  const std::int64_t pp = c.integer("parallelism.pipeline_parallel_degree", 1);
  const std::int64_t cp = c.integer("parallelism.context_parallel_degree", 1);
  const std::int64_t ep = c.integer("parallelism.expert_parallel_degree", 1);
  for (auto [name, d] :
       {std::pair{"data_parallel_replicate_degree", rep}, std::pair{"tensor_parallel_degree", tp},
        std::pair{"pipeline_parallel_degree", pp}, std::pair{"context_parallel_degree", cp},
        std::pair{"expert_parallel_degree", ep}})
    c.require(d >= 1, "parallel degrees >= 1", kParallelDims, std::string(name) + " = " + n(d));
  c.require(shard == -1 || shard >= 1, "data_parallel_shard_degree is -1 or >= 1", kParallelDims,
            n(shard));
  if (rep < 1 || tp < 1 || pp < 1 || cp < 1 || ep < 1) return c.take();
  if (shard < 0) shard = world / (rep * cp * tp * pp);
  c.require(shard >= 1 && rep * shard * cp * tp * pp == world,
            "dp_replicate x dp_shard x cp x tp x pp = world size", kParallelDims,
            n(rep) + " x " + n(shard) + " x " + n(cp) + " x " + n(tp) + " x " + n(pp) +
                " != world " + n(world));
  // Expert parallelism borrows ranks: with expert TP = 1 (the default) all of cp and tp and part
  // of dp_shard, so ep % (cp tp) == 0 and (dp_shard cp tp) % ep == 0.
  if (ep > 1)
    c.require(ep % (cp * tp) == 0 && (shard * cp * tp) % ep == 0,
              "EP takes all of CP x TP and part of dp_shard (expert TP 1)", kParallelDims,
              "EP " + n(ep) + ", dp_shard " + n(shard) + ", CP " + n(cp) + ", TP " + n(tp));

  // Trainer: global batch (-1: local x DP) > 0 and divisible by local batch x DP degree.
  const std::int64_t local = c.integer("training.local_batch_size", 8);
  std::int64_t global = c.integer("training.global_batch_size", -1);
  const std::int64_t dp = rep * shard;
  if (global < 0) global = local * dp;
  c.require(local > 0 && global > 0 && global % (local * dp) == 0,
            "global batch divisible by local batch x data-parallel degree", kTrain,
            "global " + n(global) + ", local " + n(local) + ", DP " + n(dp));

  if (pp <= 1) return c.take();
  // Pipeline parallelism.
  const std::string name = c.str("parallelism.pipeline_parallel_schedule", "1F1B");
  const std::optional<ScheduleClass> cls = schedule_class(name);
  c.require(cls.has_value(), "pipeline_parallel_schedule names a torch schedule class",
            kScheduleClass, "'" + name + "'");
  if (!cls) return c.take();
  const std::int64_t mbs = c.integer("parallelism.pipeline_parallel_microbatch_size", 1);
  c.require(mbs > 0 && local % mbs == 0, "local batch divisible by the pipeline micro-batch size",
            kBuildSchedule, "local " + n(local) + ", micro-batch " + n(mbs));
  const std::int64_t microbatches = mbs > 0 ? local / mbs : 0;

  const std::int64_t layers = launch.num_layers;
  const std::int64_t first = c.integer("parallelism.pipeline_parallel_first_stage_less_layers", 1);
  const std::int64_t last = c.integer("parallelism.pipeline_parallel_last_stage_less_layers", 1);
  std::int64_t stages_per_rank = cls->single ? 1 : 2;
  const std::size_t before = c.size();
  if (c.has("parallelism.pipeline_parallel_layers_per_stage")) {
    // pipeline_llm: stages = ceil((layers + first_less + last_less) / layers_per_stage), a
    // multiple of PP; single-stage classes need 1 stage per rank, the others at least 2.
    const std::int64_t lps = c.integer("parallelism.pipeline_parallel_layers_per_stage", 1);
    c.require(lps > 0, "pipeline_parallel_layers_per_stage > 0", kPipelineLlm, n(lps));
    if (lps <= 0) return c.take();
    const std::int64_t stages = (layers + first + last + lps - 1) / lps;
    c.require(stages % pp == 0, "number of stages divisible by PP", kPipelineLlm,
              "ceil((" + n(layers) + " layers + " + n(first) + " + " + n(last) + ") / " + n(lps) +
                  ") = " + n(stages) + " stages over PP " + n(pp));
    stages_per_rank = stages / pp;
    if (cls->single)
      c.require(stages_per_rank == 1, "a single-stage schedule has 1 stage per rank", kPipelineLlm,
                name + " with " + n(stages_per_rank) + " stages per rank");
    else
      c.require(stages_per_rank >= 2, "a multi-stage schedule has at least 2 stages per rank",
                kPipelineLlm, name + " with " + n(stages_per_rank) + " stages per rank");
  }
  // Modules named stage by stage replace generate_llm_fqn_per_model_part: their count is the
  // number of stages (pipeline_module_split).
  const bool named = c.has("parallelism.module_fqns_per_model_part");
  if (named) {
    const std::optional<std::int64_t> parts = check_module_fqns(
        c, c.str("parallelism.module_fqns_per_model_part", ""), layers, pp, cls->single, name);
    if (!parts) return c.take();
    stages_per_rank = *parts / pp;
  }
  if (cls->v)
    c.require(stages_per_rank == 2, "V schedules have exactly 2 stages per rank", kModuleSplit,
              name + " with " + n(stages_per_rank) + " stages per rank");
  // generate_llm_fqn_per_model_part: stages <= effective layers, each stage gets >= 1, and the
  // embedding / output weights fit the smallest stage.
  const std::int64_t stages = stages_per_rank * pp;
  const std::int64_t effective = layers + first + last;
  if (stages > 1 && !named) {
    c.require(stages <= effective && effective / stages >= 1,
              "no more stages than effective layers", kFqnSplit,
              n(stages) + " stages, " + n(effective) + " effective layers");
    c.require(stages > effective || (first <= effective / stages && last <= effective / stages),
              "first/last stage weights fit the smallest stage", kFqnSplit,
              "weights " + n(first) + "/" + n(last) + ", " +
                  n(effective / std::max<std::int64_t>(1, stages)) + " effective layers per stage");
  }

  if (c.size() != before) return c.take();  // the stages are not what the CSV is checked against
  // A schedule CSV replaces the class with _PipelineScheduleRuntime; the class still decides
  // how many stages each rank builds and where (loop or V).
  const std::string csv_path = c.str("parallelism.pipeline_parallel_schedule_csv", "");
  if (!csv_path.empty()) {
    c.require(!launch.schedule_csv.empty(), "the schedule CSV file exists", kBuildSchedule,
              "'" + csv_path + "' not supplied");
    if (!launch.schedule_csv.empty())
      c.add(check_pipelining_csv(launch.schedule_csv, static_cast<int>(pp),
                                 static_cast<int>(stages), static_cast<int>(microbatches), cls->v));
  }
  return c.take();
}

}  // namespace pipetune::tuner
