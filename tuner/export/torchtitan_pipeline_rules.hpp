// The rules torchtitan's parallel degrees (ParallelDims) and pipeline parallelism (pipeline_llm,
// the module split, build_pipeline_schedule and torch.distributed.pipelining's schedule classes)
// apply at start-up, the same
// at both torchtitan commits pipetune exports for (238fa99's TOML job files, b5bcd76's config
// functions) save for the output layer's name and the sources' lines; each checker reads its
// config into "section.key" -> value text and applies these with its commit's sources.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tuner/export/rule_violation.hpp"

namespace pipetune::tuner::torchtitan_detail {

// torch.distributed.pipelining's schedule classes by name (case-insensitive lookup), with
// whether they run one stage per rank (PipelineScheduleSingle subclasses) and whether
// torchtitan's module split places their stages V-shaped.
struct ScheduleClass {
  const char* name;
  bool single;
  bool v;
};
std::optional<ScheduleClass> schedule_class(const std::string& name);

std::string n(std::int64_t v);
std::string trim(const std::string& s);
// An array of arrays of strings ([["a", "b"], ["c"]], TOML or Python) on one line; nullopt when
// the text is not one.
std::optional<std::vector<std::vector<std::string>>> string_lists(const std::string& text);

// A config's fields as "section.key" -> value text, and the rules it breaks.
class Checker {
 public:
  // field_types: the source of the config's field types, named when a value has the wrong one.
  Checker(const std::map<std::string, std::string>& keys, const char* field_types)
      : keys_(keys), field_types_(field_types) {}
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
    fail("key has the field's type (int)", field_types_, key + " = " + it->second);
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
  const char* field_types_;
  RuleViolations out_;
};

// The parallel degrees ParallelDims takes, dp_shard resolved when it is -1.
struct Degrees {
  std::int64_t rep = 1, shard = -1, tp = 1, pp = 1, cp = 1, ep = 1;
};

// ParallelDims._validate at both commits (`source`: its file and lines there): degrees >= 1
// (dp_shard may be -1: the leftover ranks), their product the world size. nullopt when a degree
// is below 1 (nothing further can be derived). Expert parallelism's own rule differs by commit.
std::optional<Degrees> check_parallel_degrees(Checker& c, std::int64_t world, const char* source);

// Where each pipeline rule comes from at a commit, and what differs between commits.
struct PipelineRuleSources {
  const char* config_fields;   // the fields' types
  const char* pipeline_llm;    // layers per stage -> stages
  const char* fqn_split;       // generate_llm_fqn_per_model_part
  const char* module_split;    // pipeline_module_split, the V placement
  const char* build_schedule;  // build_pipeline_schedule
  const char* schedule_class;  // torch's get_schedule_class
  const char* output_module;   // the output layer's module name
};

// Pipeline parallelism with `pp` ranks over a model of `layers` transformer layers: the schedule
// class, how many stages each rank builds (from layers per stage or named modules, in model
// order) and, when those hold, the schedule CSV (csv_text: the file's text, empty when not
// supplied) run with `microbatches` micro-batches.
void check_pipeline(Checker& c, const PipelineRuleSources& s, const std::string& csv_text,
                    std::int64_t layers, std::int64_t pp, std::int64_t microbatches);

}  // namespace pipetune::tuner::torchtitan_detail
