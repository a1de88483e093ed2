// The pipeline rules torchtitan applies at start-up, shared by both targeted commits.
#include "tuner/export/torchtitan_pipeline_rules.hpp"

#include "tuner/export/torchtitan_rules.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace pipetune::tuner::torchtitan_detail {

namespace {

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

}  // namespace

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

namespace {

// module_fqns_per_model_part (pipeline_module_split): model parts that a rank count divides, a
// single-stage class with one per rank (build_pipeline_schedule runs only a rank's first stage),
// and the model's modules each in one part, in model order: the embedding first, the final norm
// and output layer last, every transformer layer once (a layer left out is deleted from the
// model). Returns the number of parts, or nullopt when it cannot be read.
std::optional<std::int64_t> check_module_fqns(Checker& c, const PipelineRuleSources& s,
                                              const std::string& text, std::int64_t layers,
                                              std::int64_t pp, bool single,
                                              const std::string& schedule) {
  const std::string out = s.output_module;
  const auto parts = string_lists(text);
  c.require(parts.has_value(), "module_fqns_per_model_part is a list of lists of module names",
            s.config_fields, text);
  if (!parts) return std::nullopt;
  const auto count = static_cast<std::int64_t>(parts->size());
  c.require(count > 0 && count % pp == 0, "number of model parts divisible by PP", s.module_split,
            n(count) + " parts over PP " + n(pp));
  if (count == 0 || count % pp != 0) return std::nullopt;
  if (single)
    c.require(count == pp, "a single-stage schedule has 1 stage per rank", s.build_schedule,
              schedule + " with " + n(count / pp) + " stages per rank");
  std::int64_t next_layer = 0;
  for (std::size_t part = 0; part < parts->size(); ++part) {
    const bool first = part == 0, last = part + 1 == parts->size();
    const std::vector<std::string>& names = (*parts)[part];
    for (std::size_t i = 0; i < names.size(); ++i) {
      const std::string& m = names[i];
      const std::string at = "part " + n(static_cast<std::int64_t>(part)) + " '" + m + "'";
      if (m == "tok_embeddings") {
        c.require(first && i == 0, "the embedding leads the first part", s.module_split, at);
      } else if (m == "norm" || m == out) {
        const bool in_place = last && (m == "norm" ? i + 2 == names.size() && names[i + 1] == out
                                                   : i + 1 == names.size());
        c.require(in_place, "the final norm and output layer end the last part", s.module_split,
                  at);
      } else if (m.rfind("layers.", 0) == 0 && m.size() > 7 &&
                 m.find_first_not_of("0123456789", 7) == std::string::npos) {
        const std::int64_t layer = std::stoll(m.substr(7));
        c.require(layer == next_layer && layer < layers,
                  "every transformer layer once, in model order", s.module_split,
                  at + " where layers." + n(next_layer) + " comes (" + n(layers) + " layers)");
        next_layer = layer + 1;
      } else {
        c.fail("module names are the model's (tok_embeddings, layers.N, norm, " + out + ")",
               s.module_split, at);
      }
    }
    if (first)
      c.require(!names.empty() && names.front() == "tok_embeddings",
                "the embedding leads the first part", s.module_split,
                "part 0 has no tok_embeddings");
    if (last)
      c.require(names.size() >= 2 && names.back() == out,
                "the final norm and output layer end the last part", s.module_split,
                "part " + n(count - 1) + " does not end with norm, " + out);
  }
  c.require(next_layer == layers, "every transformer layer once, in model order", s.module_split,
            n(next_layer) + " of " + n(layers) + " layers named");
  return count;
}

// pipeline_llm: stages = ceil((layers + first_less + last_less) / layers_per_stage), a
// multiple of PP; single-stage classes need 1 stage per rank, the others at least 2. Returns
// the stages per rank, nullopt when layers_per_stage is not positive.
std::optional<std::int64_t> check_layers_per_stage(Checker& c, const PipelineRuleSources& s,
                                                   const std::string& name,
                                                   const ScheduleClass& cls, std::int64_t layers,
                                                   std::int64_t first, std::int64_t last,
                                                   std::int64_t pp) {
  const std::int64_t lps = c.integer("parallelism.pipeline_parallel_layers_per_stage", 1);
  c.require(lps > 0, "pipeline_parallel_layers_per_stage > 0", s.pipeline_llm, n(lps));
  if (lps <= 0) return std::nullopt;
  const std::int64_t stages = (layers + first + last + lps - 1) / lps;
  c.require(stages % pp == 0, "number of stages divisible by PP", s.pipeline_llm,
            "ceil((" + n(layers) + " layers + " + n(first) + " + " + n(last) + ") / " + n(lps) +
                ") = " + n(stages) + " stages over PP " + n(pp));
  const std::int64_t stages_per_rank = stages / pp;
  if (cls.single)
    c.require(stages_per_rank == 1, "a single-stage schedule has 1 stage per rank", s.pipeline_llm,
              name + " with " + n(stages_per_rank) + " stages per rank");
  else
    c.require(stages_per_rank >= 2, "a multi-stage schedule has at least 2 stages per rank",
              s.pipeline_llm, name + " with " + n(stages_per_rank) + " stages per rank");
  return stages_per_rank;
}

// generate_llm_fqn_per_model_part: stages <= effective layers, each stage gets >= 1, and the
// embedding / output weights fit the smallest stage.
void check_fqn_split(Checker& c, const PipelineRuleSources& s, std::int64_t stages,
                     std::int64_t layers, std::int64_t first, std::int64_t last) {
  const std::int64_t effective = layers + first + last;
  c.require(stages <= effective && effective / stages >= 1, "no more stages than effective layers",
            s.fqn_split, n(stages) + " stages, " + n(effective) + " effective layers");
  c.require(stages > effective || (first <= effective / stages && last <= effective / stages),
            "first/last stage weights fit the smallest stage", s.fqn_split,
            "weights " + n(first) + "/" + n(last) + ", " +
                n(effective / std::max<std::int64_t>(1, stages)) + " effective layers per stage");
}

// A schedule CSV replaces the class with _PipelineScheduleRuntime; the class still decides
// how many stages each rank builds and where (loop or V).
void check_schedule_csv(Checker& c, const PipelineRuleSources& s, const std::string& csv_text,
                        std::int64_t pp, std::int64_t stages, std::int64_t microbatches,
                        bool v_placement) {
  const std::string csv_path = c.str("parallelism.pipeline_parallel_schedule_csv", "");
  if (csv_path.empty()) return;
  c.require(!csv_text.empty(), "the schedule CSV file exists", s.build_schedule,
            "'" + csv_path + "' not supplied");
  if (!csv_text.empty())
    c.add(check_pipelining_csv(csv_text, static_cast<int>(pp), static_cast<int>(stages),
                               static_cast<int>(microbatches), v_placement));
}

}  // namespace

std::optional<Degrees> check_parallel_degrees(Checker& c, std::int64_t world, const char* source) {
  Degrees d;
  d.rep = c.integer("parallelism.data_parallel_replicate_degree", 1);
  d.shard = c.integer("parallelism.data_parallel_shard_degree", -1);
  d.tp = c.integer("parallelism.tensor_parallel_degree", 1);
  d.pp = c.integer("parallelism.pipeline_parallel_degree", 1);
  d.cp = c.integer("parallelism.context_parallel_degree", 1);
  d.ep = c.integer("parallelism.expert_parallel_degree", 1);
  for (auto [name, v] :
       {std::pair{"data_parallel_replicate_degree", d.rep},
        std::pair{"tensor_parallel_degree", d.tp}, std::pair{"pipeline_parallel_degree", d.pp},
        std::pair{"context_parallel_degree", d.cp}, std::pair{"expert_parallel_degree", d.ep}})
    c.require(v >= 1, "parallel degrees >= 1", source, std::string(name) + " = " + n(v));
  c.require(d.shard == -1 || d.shard >= 1, "data_parallel_shard_degree is -1 or >= 1", source,
            n(d.shard));
  if (d.rep < 1 || d.tp < 1 || d.pp < 1 || d.cp < 1 || d.ep < 1) return std::nullopt;
  if (d.shard < 0) d.shard = world / (d.rep * d.cp * d.tp * d.pp);
  c.require(d.shard >= 1 && d.rep * d.shard * d.cp * d.tp * d.pp == world,
            "dp_replicate x dp_shard x cp x tp x pp = world size", source,
            n(d.rep) + " x " + n(d.shard) + " x " + n(d.cp) + " x " + n(d.tp) + " x " + n(d.pp) +
                " != world " + n(world));
  return d;
}

void check_pipeline(Checker& c, const PipelineRuleSources& s, const std::string& csv_text,
                    std::int64_t layers, std::int64_t pp, std::int64_t microbatches) {
  const std::string name = c.str("parallelism.pipeline_parallel_schedule", "1F1B");
  const std::optional<ScheduleClass> cls = schedule_class(name);
  c.require(cls.has_value(), "pipeline_parallel_schedule names a torch schedule class",
            s.schedule_class, "'" + name + "'");
  if (!cls) return;
  const std::int64_t first = c.integer("parallelism.pipeline_parallel_first_stage_less_layers", 1);
  const std::int64_t last = c.integer("parallelism.pipeline_parallel_last_stage_less_layers", 1);
  std::int64_t stages_per_rank = cls->single ? 1 : 2;
  const std::size_t before = c.size();
  if (c.has("parallelism.pipeline_parallel_layers_per_stage")) {
    const std::optional<std::int64_t> per_rank =
        check_layers_per_stage(c, s, name, *cls, layers, first, last, pp);
    if (!per_rank) return;
    stages_per_rank = *per_rank;
  }
  // Modules named stage by stage replace generate_llm_fqn_per_model_part: their count is the
  // number of stages (pipeline_module_split).
  const bool named = c.has("parallelism.module_fqns_per_model_part");
  if (named) {
    const std::optional<std::int64_t> parts = check_module_fqns(
        c, s, c.str("parallelism.module_fqns_per_model_part", ""), layers, pp, cls->single, name);
    if (!parts) return;
    stages_per_rank = *parts / pp;
  }
  if (cls->v)
    c.require(stages_per_rank == 2, "V schedules have exactly 2 stages per rank", s.module_split,
              name + " with " + n(stages_per_rank) + " stages per rank");
  const std::int64_t stages = stages_per_rank * pp;
  if (stages > 1 && !named) check_fqn_split(c, s, stages, layers, first, last);
  if (c.size() != before) return;  // the stages are not what the CSV is checked against
  check_schedule_csv(c, s, csv_text, pp, stages, microbatches, cls->v);
}

}  // namespace pipetune::tuner::torchtitan_detail
